"""What an agent did, episode by episode: the viewer behind ``dateline show`` and the report's
episode pages.

An :class:`EpisodeView` gathers one episode from the store: its row, its steps, its model calls
with their prompts (engine/llm/transcripts.py), its judgements with the judges' own text and their
calls, the per-episode metric values (with no judge, and through each judge that judged it, by
the code ``dateline metrics`` averages), and the reference its output is compared with. It
renders as terminal text (``dateline show RUN_DIR EPISODE``) and as a static HTML page; a
configuration's episodes get an index page whose table sorts by any column and has a search and
filters by status, error kind and metric value (list.js, inlined: ``tables``; no server, no
network: the pages open from a folder or an ``s3://`` mirror)."""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.benchmarks import get_benchmark
from engine.config import stable_hash
from engine.llm.transcripts import conversation
from engine.protocol import Benchmark, Row
from engine.scoring import cutoff, metric_table, outcomes
from engine.scoring.judges import SELF_JUDGED, judged_views
from engine.storage import EpisodeStore
from ray_jobs.outputs.report import tables


@dataclass
class EpisodeView:
    row: Row
    steps: list[dict[str, Any]]
    calls: list[dict[str, Any]]                 # the episode's own model calls, in order
    judge_calls: list[dict[str, Any]]           # its judges' calls
    messages: dict[str, dict[str, Any]]
    judgements: list[dict[str, Any]]            # the judgement rows: judge, key, value, raw_output ...
    values: dict[str, dict[str, float]]         # judge id ("" for none) -> metric -> value
    reference: str
    label: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    self_judged: set[str] = field(default_factory=set)   # judge ids whose values graded the model's own work

    def judge_title(self, jid: str) -> str:
        """A values block's title: the judge, marked where it is the model under test (issue 46)."""
        if not jid:
            return "no judge"
        return f"judge {jid}" + (f", {SELF_JUDGED.upper()}: graded by the model under test"
                                 if jid in self.self_judged else "")

    @property
    def episode_id(self) -> str:
        return str(self.row["episode_id"])


def find(store: EpisodeStore, prefix: str) -> list[str]:
    """Episode ids starting with ``prefix``."""
    ids = [str(i) for i in store.episodes(["episode_id"]).column("episode_id").to_pylist()]
    return sorted(i for i in ids if i.startswith(prefix))


def load(store: EpisodeStore, bench: Benchmark[Any], episode_id: str, label: str = "",
         judged: Judged | None = None) -> EpisodeView:
    """One episode of ``store``. ``judged``: its configuration's :func:`judged_of` when the caller
    already read it (the pages of a configuration read it once)."""
    rows = store.episodes(episode_ids=[episode_id]).to_pylist()
    if not rows:
        raise KeyError(f"no episode {episode_id} in {store.uri}")
    row = rows[0]
    steps = store.steps(episode_ids=[episode_id]).to_pylist()
    calls = store.calls([episode_id])
    own = [c for c in calls if c["purpose"] == "episode"]
    judge_calls = [c for c in calls if c["purpose"] != "episode"]
    messages = store.messages(m for c in calls for m in c["message_ids"] or [])
    judgements = store.judgement_rows(["episode_id", "judge", "judge_model", "key", "value", "ok", "raw_output",
                                       "error", "truncated", "batch_id"], episode_ids=[episode_id])
    if judged is None and (row["status"] == "ok" or cutoff.splits(bench)):
        judged = judged_of(store, bench, str(row["config_hash"]), [episode_id])
    # a failed episode has no values of its own (its plan's failure values)
    values, selfs = _values(bench, row, judged) if row["status"] == "ok" and judged is not None else ({}, set())
    try:
        reference = bench.episode_reference(row)
    except Exception as e:  # noqa: BLE001 - the viewer shows what it can
        reference = f"(reference unavailable: {type(e).__name__}: {e})"
    extra = {"cutoff": _side(bench, judged, row)} if cutoff.splits(bench) and judged is not None else {}
    return EpisodeView(row, steps, own, judge_calls, messages, judgements, values, reference, label, extra, selfs)


def _side(bench: Benchmark[Any], judged: Judged, row: Row) -> str:
    """Where a dated episode's question stands against its model's knowledge cutoff, in words."""
    date = judged.dates.get(str(row["episode_id"])) or row.get(getattr(bench, "date_field", ""))
    known = judged.knowledge_cutoff
    if not date or not known:
        return f"question {f'dated {date}' if date else 'of unknown date'}; {cutoff.describe(known, None, None)}"
    return f"question dated {date}: {'after' if date > known else 'on or before'} the model's knowledge cutoff {known}"


def cutoff_lines(store: EpisodeStore, config: str | None = None) -> list[str]:
    """Under ``dateline show``'s list: per configuration of a dated benchmark (whose hash starts
    with ``config``), its knowledge-cutoff split and its primary metrics after the cutoff, as the
    metrics table has them (engine/scoring/cutoff.py), or "cutoff unknown"."""
    out = []
    for name in metric_table.store_benchmarks(store):
        bench = get_benchmark(name)
        if cutoff.splits(bench):
            rows = [r for r in metric_table.metric_table(store, [name]) if (r["scope"] or outcomes.ALL) == outcomes.ALL
                    and str(r["config_hash"]).startswith(config or "")]
            out += [f"{name} {line}" for line in metric_table.split_notes(bench, rows)]
    return out


@dataclass(frozen=True)
class Judged:
    """What a configuration's per-episode values are computed from: its judgements by judge
    (``EpisodeStore.judged``, the current parser applied), the judges, and the evaluation
    settings its plan recorded (what an unjudged view is scored under)."""
    by_judge: dict[str, dict[str, dict[str, str | None]]]
    judges: dict[str, dict[str, str]]
    evaluation: dict[str, Any] | None
    knowledge_cutoff: str = ""                  # what the plan recorded (engine/scoring/cutoff.py)
    dates: dict[str, str] = field(default_factory=dict)


def judged_of(store: EpisodeStore, bench: Benchmark[Any], config_hash: str,
              episode_ids: Sequence[str]) -> Judged:
    """The judgements and settings of a configuration, read as ``dateline metrics`` reads them
    (``views.views_of``)."""
    by_judge, judges = store.judged(bench.parse_judgement, config_hash=config_hash, episode_ids=episode_ids)
    plan = store.plans([config_hash]).get(config_hash)
    ev = json.loads(plan.evaluation) if plan is not None and plan.evaluation else None
    if plan is None:
        return Judged(by_judge, judges, ev)
    return Judged(by_judge, judges, ev, plan.knowledge_cutoff, plan.dates)


def _values(bench: Benchmark[Any], row: Row, judged: Judged) -> tuple[dict[str, dict[str, float]], set[str]]:
    """Judge id ("" for none) -> the episode's values, by the code ``dateline metrics`` averages
    (``judges.judged_views`` then ``outcomes.episode_values``): no judge-based metric without a
    judge, and each judge's under its own evaluation settings; and the judges that are the model
    under test (self-judged)."""
    views = judged_views([row], {}, {}, None, judged.evaluation)          # the unjudged view, always shown
    mine = {j: d for j, d in judged.by_judge.items() if row["episode_id"] in d}
    if mine:
        views += judged_views([row], mine, judged.judges, None, judged.evaluation)
    out: dict[str, dict[str, float]] = {}
    for v in views:
        try:
            (ev,) = outcomes.episode_values(bench, v.rows, None, "as_wrong", bool(v.judge))
        except Exception:  # noqa: BLE001 - a row the benchmark cannot score shows none
            out[v.judge] = {}
            continue
        out[v.judge] = {k: x for k, x in ev.values.items() if not math.isnan(x)}
    return out, {v.judge for v in views if v.judge and v.self_judged}


# -- terminal ---------------------------------------------------------------------------------------
def _clip(text: str, n: int) -> str:
    text = text or ""
    return text if n <= 0 or len(text) <= n else text[: n // 2] + f"\n[... {len(text) - n:,} characters ...]\n" + text[-n // 2:]


def _turns(view: EpisodeView) -> list[tuple[dict[str, Any] | None, list[dict[str, str]], list[dict[str, Any]]]]:
    """(call, the prompt messages it adds to the previous call's, its steps) in order; steps made
    without a call come with ``None``."""
    by_call: dict[int, list[dict[str, Any]]] = {}
    loose: list[dict[str, Any]] = []
    for s in view.steps:
        c = s.get("call")
        (by_call.setdefault(int(c), []) if c is not None and c >= 0 else loose).append(s)
    out: list[tuple[dict[str, Any] | None, list[dict[str, str]], list[dict[str, Any]]]] = []
    seen: list[str] = []
    for c in view.calls:
        ids = list(c["message_ids"] or [])
        common = 0
        while common < min(len(ids), len(seen)) and ids[common] == seen[common]:
            common += 1
        new = conversation({"message_ids": ids[common:]}, view.messages)
        out.append((c, new, by_call.pop(int(c["call"]), [])))
        seen = ids
    rest = loose + [s for v in by_call.values() for s in v]
    if rest:
        out.append((None, [], sorted(rest, key=lambda s: s["step"])))
    return out


def render_text(view: EpisodeView, width: int = 2000) -> str:
    """A readable transcript (``width``: characters kept per message; 0 keeps everything)."""
    r = view.row
    lines = [f"episode {r['episode_id']}  task {r['task_id']}  model {r['model']}  config {r['config_hash']}",
             f"status {r['status']}  finish {r['finish_reason']}  steps {r['n_steps']}  tokens {r['tokens_in']}"
             f"+{r['tokens_out']}  {float(r['wall_time_s'] or 0):.1f} s  replica {r['replica']}  worker {r['worker']}"]
    if r.get("error"):
        lines += ["", "ERROR: " + _clip(str(r["error"]), width)]
    for call, new, steps in _turns(view):
        if call is not None:
            p = json.loads(call["params"] or "{}")
            lines += ["", f"=== call {call['call'] + 1} ({call['model']} replica {call['replica']} at {call['endpoint']}; "
                          f"{call['tokens_in']}+{call['tokens_out']} tokens, {float(call['latency_s'] or 0):.2f} s; "
                          f"max_tokens {p.get('max_tokens')}, temperature {p.get('temperature')}, seed {p.get('seed')})"]
            for m in new:
                lines += [f"--- {m['role']}", _clip(m["content"], width)]
            lines += [f"--- assistant{' (' + call['finish_reason'] + ')' if call['finish_reason'] else ''}",
                      _clip(call["completion"] or "", width)]
            if call["error"]:
                lines += [f"!!! {call['error']}"]
        for s in steps:
            lines += [f"--- step {s['step']} [{s['turn']}] {'ok' if s['ok'] else 'FAILED'}"]
            if call is None and s["raw_output"]:
                lines += [_clip(s["raw_output"], width)]
            if s["parsed_action"]:
                lines += [f"action: {_clip(s['parsed_action'], width)}"]
            if s["result"]:
                lines += [f"result: {_clip(s['result'], width)}"]
    lines += ["", "=== final output", _clip(str(r["output"] or "(none)"), width)]
    if view.extra.get("cutoff"):
        lines += ["", "=== knowledge cutoff", str(view.extra["cutoff"])]
    if view.reference:
        lines += ["", "=== reference", _clip(view.reference, width)]
    for jid, vals in view.values.items():
        if vals:
            lines += ["", f"=== metrics ({view.judge_title(jid)})"]
            lines += [f"{k}: {v:.4g}" for k, v in sorted(vals.items())]
    if view.judgements:
        lines += ["", "=== judgements"]
        for j in view.judgements:
            lines += [f"{j['judge']} {j['key']}: {j['value']}{' (truncated)' if j['truncated'] else ''}"
                      f"{' ERROR ' + str(j['error']) if not j['ok'] and j['error'] else ''}",
                      "    " + _clip(str(j["raw_output"] or ""), width).replace("\n", "\n    ")]
    return "\n".join(lines) + "\n"


# -- HTML -------------------------------------------------------------------------------------------
_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:1.5em auto;padding:0 1em;color:#222}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f6f6;padding:.6em;border-radius:4px;margin:.3em 0}
.msg{border-left:4px solid #bbb;padding-left:.6em;margin:.6em 0}.system{border-color:#999}.user{border-color:#2b6cb0}
.assistant{border-color:#2f855a}.tool{border-color:#b7791f}.err{border-color:#c53030;color:#8a1c14}
.role{font-size:.8em;color:#555;text-transform:uppercase}table{border-collapse:collapse;font-size:.88em;margin:.5em 0}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}th{background:#f3f3f3}
.cols{display:grid;grid-template-columns:1fr 1fr;gap:1em}.bad{color:#8a1c14;font-weight:bold}"""


def _e(x: Any) -> str:
    return html.escape(str(x if x is not None else ""))


def _msg(role: str, text: str, cls: str = "", head: str = "") -> str:
    return (f'<div class="msg {cls or role}"><div class="role">{_e(head or role)}</div><pre>{_e(text)}</pre></div>')


def render_html(view: EpisodeView, back: str = "") -> str:
    r = view.row
    parts = [f"<h1>Episode {_e(r['episode_id'])}</h1>"]
    if back:
        parts.append(f'<p><a href="{_e(back)}">&larr; all episodes of this configuration</a></p>')
    meta = [("task", r["task_id"]), ("model", r["model"]), ("configuration", view.label or r["config_hash"]),
            ("status", r["status"]), ("finish", r["finish_reason"]), ("steps", r["n_steps"]),
            ("tokens", f"{r['tokens_in']} in, {r['tokens_out']} out"), ("wall time", f"{float(r['wall_time_s'] or 0):.1f} s"),
            ("replica / worker", f"{r['replica']} / {r['worker']}")]
    if view.extra.get("cutoff"):
        meta.append(("knowledge cutoff", view.extra["cutoff"]))
    parts.append("<table>" + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in meta) + "</table>")
    if r.get("error"):
        parts.append(f'<h2 class="bad">Error</h2><pre class="bad">{_e(r["error"])}</pre>')
    parts.append("<h2>Conversation</h2>")
    for call, new, steps in _turns(view):
        if call is not None:
            p = json.loads(call["params"] or "{}")
            parts.append(f"<h3>Call {call['call'] + 1}</h3><p class=role>{_e(call['model'])}, replica {_e(call['replica'])} "
                         f"at {_e(call['endpoint'])}; {_e(call['tokens_in'])}+{_e(call['tokens_out'])} tokens; "
                         f"{float(call['latency_s'] or 0):.2f} s; max_tokens {_e(p.get('max_tokens'))}, temperature "
                         f"{_e(p.get('temperature'))}, seed {_e(p.get('seed'))}</p>")
            parts += [_msg(m["role"], m["content"]) for m in new]
            parts.append(_msg("assistant", call["completion"] or "",
                              head=f"assistant{' (' + call['finish_reason'] + ')' if call['finish_reason'] else ''}"))
            if call["error"]:
                parts.append(_msg("error", call["error"], "err"))
        for s in steps:
            body = (s["raw_output"] + "\n\n" if call is None and s["raw_output"] else "") + \
                   (f"action: {s['parsed_action']}\n" if s["parsed_action"] else "") + (s["result"] or "")
            parts.append(_msg("tool", body, "tool" if s["ok"] else "err",
                              head=f"step {s['step']} [{s['turn']}] {'ok' if s['ok'] else 'failed'}"))
    parts.append('<h2>Final output and reference</h2><div class="cols"><div><h3>Output</h3>'
                 f'<pre id="final-output">{_e(r["output"] or "(none)")}</pre></div><div><h3>Reference</h3>'
                 f'<pre id="reference">{_e(view.reference or "(none)")}</pre></div></div>')
    for jid, vals in view.values.items():
        if vals:
            parts.append(f"<h2>Metrics ({_e(view.judge_title(jid))})</h2><table>"
                         + "".join(f"<tr><th>{_e(k)}</th><td>{v:.4g}</td></tr>" for k, v in sorted(vals.items()))
                         + "</table>")
    if view.judgements:
        parts.append("<h2>Judge verdicts</h2><table><tr><th>judge</th><th>key</th><th>verdict</th><th>the judge's text"
                     "</th></tr>" + "".join(
                         f"<tr><td>{_e(j['judge'])}</td><td>{_e(j['key'])}</td><td>{_e(j['value'])}"
                         f"{' (truncated)' if j['truncated'] else ''}{' ' + _e(j['error']) if not j['ok'] else ''}</td>"
                         f"<td><pre>{_e(j['raw_output'])}</pre></td></tr>" for j in view.judgements) + "</table>")
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>episode {_e(r["episode_id"])}</title>'
            f"<style>{_CSS}</style></head><body>{''.join(parts)}</body></html>")


def column_label(judge: str, metric: str) -> str:
    """An index column's header: the metric, and the judge its values come from."""
    return f"{metric} [judge {judge}]" if judge else metric


def index_columns(bench: Benchmark[Any], values: Sequence[dict[str, dict[str, float]]]) -> list[tuple[str, str]]:
    """(judge id, metric) of an index's columns: the benchmark's first metrics, once per judge that
    gave them (judge ids sorted), a metric no judge gave once from the unjudged view."""
    metrics = list(dict.fromkeys(m for m in (*bench.primary_metrics, *bench.metric_order) if m))[:6]
    judges = sorted({j for v in values for j in v})
    have = {(j, m) for v in values for j, d in v.items() for m in d}
    judged = [(j, m) for m in metrics for j in judges if j and (j, m) in have]
    return judged + [("", m) for m in metrics if ("", m) in have and not any(m == jm for _, jm in judged)]


def render_index(label: str, entries: Sequence[tuple[Row, dict[str, dict[str, float]], str]],
                 columns: Sequence[tuple[str, str]], back: str = "") -> str:
    """A configuration's episodes (row, values by judge id, page href) in a table a browser sorts
    (a click on a header), searches and filters (by status, error kind and a metric's range: the
    report's tables, ``tables.script``); ``columns``: (judge id, metric) pairs, each headed with
    its judge (:func:`column_label`)."""
    statuses = sorted({str(r["status"]) for r, _, _ in entries})
    kinds = sorted({outcomes.error_kind(r) for r, _, _ in entries if r["status"] != "ok"})
    def select(name: str, attr: str, xs: Sequence[str]) -> str:
        return (f'{name} <select id="{attr}" data-filter-of="episodes" data-attr="{attr}"><option value="">any</option>'
                + "".join(f'<option value="{_e(x)}">{_e(x)}</option>' for x in xs) + "</select> ")
    fixed = ["episode", "task", "seed", "status", "finish", "error kind"]
    score = " ".join(str(len(fixed) + i) for i in range(len(columns)))
    # the controls show once the script ran (tables.js fills in the search and the metric filter)
    head = (f"<h1>Episodes: {_e(label)}</h1>" + (f'<p><a href="{_e(back)}">&larr; report</a></p>' if back else "")
            + '<p id="filters" class="dl-tools" hidden>' + select("status", "status", statuses)
            + select("error kind", "kind", kinds) + "</p>"
            + f'<p><span id="shown">{len(entries)}</span> of {len(entries)} shown</p>')
    rows = []
    for r, vals, href in entries:
        cells = [vals.get(j, {}).get(m) for j, m in columns]
        kind = outcomes.error_kind(r) if r["status"] != "ok" else ""
        # data-v: the value sorted and filtered on (the cell shows it rounded)
        rows.append(f'<tr class="ep" data-status="{_e(r["status"])}" data-kind="{_e(kind)}">'
                    f'<td><a href="{_e(href)}">{_e(str(r["episode_id"])[:16])}</a></td><td>{_e(r["task_id"])}</td>'
                    f'<td>{_e(r["seed"])}</td><td>{_e(r["status"])}</td><td>{_e(r["finish_reason"])}</td>'
                    f'<td>{_e(kind)}</td>' + "".join(f'<td data-v="{v:.6g}">{v:.3g}</td>' if v is not None
                                                     else "<td></td>" for v in cells) + "</tr>")
    table = (f'<table id="episodes" data-score="{score}" data-score-label="metric" data-tools="filters" '
             'data-shown="shown"><thead><tr>' + "".join(f"<th>{_e(h)}</th>" for h in fixed)
             + "".join(f"<th>{_e(column_label(j, m))}</th>" for j, m in columns) + "</tr></thead><tbody>"
             + "".join(rows) + "</tbody></table>")
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>{_e(label)}</title>'
            f"<style>{_CSS}\n{tables.CSS}</style></head><body>{head}{table}{tables.script()}</body></html>")


def dir_key(root: Path | str) -> str:
    """The folder a run dir's episode pages go in: its name and a hash of its resolved path, so two
    run dirs with the same configuration (the rule-based baseline has one hash everywhere) never
    write each other's pages."""
    resolved = str(root) if "://" in str(root) else str(Path(root).resolve())
    # the name is for the reader; only characters a relative link keeps as they are (no '#', '?', '%')
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(resolved.rstrip("/")).name).strip("-.") or "run"
    return f"{name}-{stable_hash(resolved, n=6)}"


def write_pages(out: Path, store: EpisodeStore, bench: Benchmark[Any], config_hash: str, label: str,
                limit: int = 500, root: Path | str | None = None) -> tuple[str, int]:
    """The episode pages of one configuration of the run dir ``root`` (default the store's) under
    ``out/episodes/<dir key>/<hash>/`` and their index; returns the index's path relative to
    ``out`` and how many episodes it lists. ``limit`` episodes at most (0: all)."""
    key = dir_key(root if root is not None else store.uri)
    folder = out / "episodes" / key / config_hash
    folder.mkdir(parents=True, exist_ok=True)
    t = store.episodes(["episode_id", "status"], config_hash=config_hash).to_pylist()
    # the failed ones first, so a cut (``limit``) never drops the episodes worth reading
    ids = [str(r["episode_id"]) for r in sorted(t, key=lambda r: (r["status"] == "ok", str(r["episode_id"])))]
    ids = sorted(ids[: limit or None])
    judged = judged_of(store, bench, config_hash, ids)      # one read of the judgements for every page
    entries = []
    for eid in ids:
        view = load(store, bench, eid, label, judged)
        (folder / f"{eid}.html").write_text(render_html(view, "index.html"))
        entries.append((view.row, view.values, f"{eid}.html"))
    columns = index_columns(bench, [v for _, v, _ in entries])
    (folder / "index.html").write_text(render_index(label, entries, columns, "../../../report.html"))
    return f"episodes/{key}/{config_hash}/index.html", len(entries)
