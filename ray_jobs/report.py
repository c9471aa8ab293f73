"""``dateline report PATH... [--out DIR]``: one self-contained HTML page (plots embedded, and
also saved as PNG next to it) and the same tables as Markdown, for any mix of run directories
and pairwise directories.

Every number that estimates something carries a 95% interval from a bootstrap that resamples
tasks (``engine.stats``) and the count it rests on. Per run directory and benchmark: metrics per
configuration, paired tests between configurations on the benchmark's primary metrics, its
paper-layout tables, tokens and cost per episode, and the benchmark's curve (livenews: accuracy
vs search budget) or per-task chart (analyst: checklist by task). Per pairwise directory: the
win-rate matrix (heatmap), Bradley-Terry ratings, dimension-wise win/tie/loss shares, sign
tests, position bias, judge failures, and agreement with human labels when a file is given.
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import itertools
import json
import logging
import math
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from engine import stats
from engine.benchmarks import get_benchmark
from engine.config import config_labels
from engine.cost import Prices, episode_costs, token_cost, uptime_cost
from engine.errors import DataError
from engine.judges import SELF_JUDGED, judged_views, self_judged_note
from engine.pairwise import outcome, pair_outcomes, position_bias
from engine.storage import EpisodeStore, PairwiseStore

log = logging.getLogger("dateline.report")


# -- output assembly ----------------------------------------------------------------------------
@dataclass
class Page:
    out: Path
    md: list[str] = field(default_factory=list)
    html: list[str] = field(default_factory=list)
    figures: int = 0

    def heading(self, text: str, level: int = 2) -> None:
        self.md.append(f"{'#' * level} {text}\n")
        self.html.append(f"<h{level}>{html.escape(text)}</h{level}>")

    def para(self, text: str) -> None:
        self.md.append(text + "\n")
        self.html.append(f"<p>{html.escape(text)}</p>")

    def strong(self, text: str) -> None:
        """A paragraph in bold (warnings a reader must not miss, e.g. self-judged numbers)."""
        self.md.append(f"**{text}**\n")
        self.html.append(f"<p><b>{html.escape(text)}</b></p>")

    def table(self, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        cells = [[str(c) for c in r] for r in rows]
        self.md.append("| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n"
                       + "".join("| " + " | ".join(r) + " |\n" for r in cells))
        self.html.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"
                         + "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                                   for r in cells) + "</table>")

    def figure(self, fig: Any, name: str, caption: str) -> None:
        import matplotlib.pyplot as plt

        self.figures += 1
        fname = f"fig{self.figures:02d}-{re.sub(r'[^a-z0-9]+', '-', name.lower()).strip('-')}.png"
        buf = io.BytesIO()
        fig.tight_layout()
        fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
        plt.close(fig)
        data = buf.getvalue()
        (self.out / fname).write_bytes(data)
        self.md.append(f"![{caption}]({fname})\n\n*{caption}*\n")
        self.html.append(f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,'
                         f'{base64.b64encode(data).decode()}"><figcaption>{html.escape(caption)}</figcaption></figure>')

    def write(self, title: str) -> Path:
        (self.out / "report.md").write_text(f"# {title}\n\n" + "\n".join(self.md))
        page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body{{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1150px;margin:2em auto;padding:0 1em;color:#222}}
h1{{border-bottom:2px solid #333}} h2{{margin-top:2em;border-bottom:1px solid #ccc}} h3{{margin-top:1.4em}}
table{{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.86em}}
th,td{{border:1px solid #ccc;padding:.25em .55em;text-align:left;vertical-align:top}} th{{background:#f3f3f3}}
tr:nth-child(even) td{{background:#fafafa}} figure{{margin:1em 0}} img{{max-width:100%}}
figcaption{{font-size:.85em;color:#555}} p{{max-width:60em}}
</style></head><body><h1>{html.escape(title)}</h1>
{chr(10).join(self.html)}
</body></html>"""
        path = self.out / "report.html"
        path.write_text(page)
        return path


def num(v: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    a = abs(v)
    if a >= 1 and float(v).is_integer():
        return f"{int(v):,}"
    return f"{v:.3f}" if a < 1 else f"{v:.2f}" if a < 10 else f"{v:.1f}" if a < 1000 else f"{v:,.0f}"


def est(e: stats.Estimate) -> str:
    if math.isnan(e.value):
        return "n/a"
    ci = "" if math.isnan(e.lo) else f" [{num(e.lo)}, {num(e.hi)}]"
    return f"{num(e.value)}{ci} (n={e.n})"


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# -- run directories ----------------------------------------------------------------------------
@dataclass
class ConfigGroup:
    model: str
    config_hash: str
    agent: dict[str, Any]
    data: dict[str, Any]
    rows: list[dict[str, Any]]
    label: str = ""
    values: list[dict[str, float]] = field(default_factory=list)   # bench.episode_values(rows), computed once
    judge: str = ""                 # the one judge whose judgements the rows carry ("" when none)
    self_judged: bool = False


def label_groups(groups: list[ConfigGroup]) -> None:
    """Label each configuration by its model and the agent/benchmark settings that differ."""
    names = config_labels([(g.model, g.agent | {k: v for k, v in g.data.items() if k != "limit"}, g.config_hash)
                           for g in groups])
    for g, name in zip(groups, names):
        g.label = name


def _episode_tokens(r: dict[str, Any]) -> float:
    return float((r["tokens_in"] or 0) + (r["tokens_out"] or 0))


def run_costs(store: EpisodeStore, groups: list[ConfigGroup], prices: dict[str, Prices]
              ) -> dict[str, dict[str, Any]]:
    """Per config hash: uptime paid, prices, per-episode costs (aligned with the group's rows)."""
    uptime: dict[str, float] = defaultdict(float)
    model_cfg: dict[str, dict[str, Any]] = {}
    judge_cost: dict[str, float] = defaultdict(float)
    judge_uptime: dict[str, float] = defaultdict(float)
    for info in store.run_infos():
        h = info.get("config_hash")
        if not h:
            continue            # runs recorded before cost accounting
        uptime[h] += float(info.get("replica_seconds_run") or 0.0)
        model_cfg[h] = info.get("model") or {}
        j = info.get("judge") or {}
        ji, jo = float(j.get("tokens_in") or 0), float(j.get("tokens_out") or 0)
        jcfg = info.get("judge_config") or {}
        # the model whose prices a hosted judge pays: its own pool's, else the run's model
        jmodel = (jcfg.get("hosted_model") or info.get("model") or {}) if jcfg.get("kind") != "openai_compatible" else {}
        jp = prices.get(jmodel.get("name", "")) if jmodel else None
        judge_cost[h] += token_cost(ji, jo, jp or Prices.of_judge(jcfg, jmodel))
        if info.get("judge_replica_seconds_run"):
            judge_uptime[h] += uptime_cost(float(info["judge_replica_seconds_run"]), jp or Prices.of_model(jmodel))
    out = {}
    for g in groups:
        p = prices.get(g.model) or Prices.of_model(model_cfg.get(g.config_hash, {}))
        ok = [r for r in g.rows if r["status"] == "ok"]
        toks = [(float(r["tokens_in"] or 0), float(r["tokens_out"] or 0)) for r in ok]
        per_ep = episode_costs(toks, p, uptime[g.config_hash])
        out[g.config_hash] = {"prices": p, "uptime_s": uptime[g.config_hash], "per_episode": per_ep,
                              "tasks": [r["task_id"] for r in ok],
                              "generation": sum(per_ep),
                              "judge_token_cost": judge_cost[g.config_hash],
                              "judge_uptime_cost": judge_uptime[g.config_hash], "recorded": g.config_hash in model_cfg}
    return out


def run_section(page: Page, root: Path, n_boot: int, prices: dict[str, Prices], judge: str | None = None) -> None:
    probe = EpisodeStore(root)
    names = sorted({r["benchmark"] for r in probe.episodes().select(["benchmark"]).to_pylist()})
    for name in names:
        bench = get_benchmark(name)
        store = EpisodeStore(root, bench.episode_fields)
        by: dict[str, ConfigGroup] = {}
        for r in store.episodes().to_pylist():
            if r["benchmark"] != name:
                continue
            g = by.setdefault(r["config_hash"], ConfigGroup(r["model"], r["config_hash"], json.loads(r["agent"] or "{}"),
                                                             json.loads(r["data"] or "{}"), []))
            g.rows.append(r)
        groups = sorted(by.values(), key=lambda g: (g.model, json.dumps(g.agent, sort_keys=True), g.config_hash))
        label_groups(groups)
        page.heading(f"{name}: {root}")
        page.para(f"{len(groups)} configuration(s); {sum(len(g.rows) for g in groups)} episodes. Intervals: 95% "
                  f"bootstrap over tasks ({n_boot} resamples); n = episodes behind the value.")
        page.table(["configuration", "config hash", "episodes (ok / error)", "tasks"],
                   [[g.label, g.config_hash, f"{sum(r['status'] == 'ok' for r in g.rows)} / "
                     f"{sum(r['status'] != 'ok' for r in g.rows)}", len({r['task_id'] for r in g.rows})]
                    for g in groups])
        # one block per judge: a configuration judged by two judges shows two sets of numbers
        by_judge = store.judgements_by_judge(bench.parse_judgement)
        judges = store.judges()
        blocks: dict[str, list[ConfigGroup]] = defaultdict(list)
        for g in groups:
            for v in judged_views(g.rows, by_judge, judges, judge):
                blocks[v.judge].append(ConfigGroup(g.model, g.config_hash, g.agent, g.data, v.rows, g.label,
                                                   judge=v.judge, self_judged=v.self_judged))
        if judge is not None and not any(blocks.get(j) for j in blocks if j):
            page.para(f"No judgements by a judge matching {judge!r} (judges here: {', '.join(sorted(judges)) or 'none'}).")
        for jid in sorted(blocks):
            level = 3
            if jid:
                info = judges.get(jid, {})
                page.heading(f"Judge {jid}", 3)
                page.para(f"Every judge-based number in this block comes from this judge alone: model "
                          f"{info.get('model', '?')}, endpoint {info.get('kind') or 'not recorded'}, prompt version "
                          f"{info.get('prompt') or 'not recorded'}. Configurations judged by another judge appear in "
                          f"that judge's block.")
                if any(g.self_judged for g in blocks[jid]):
                    page.strong(f"{SELF_JUDGED.upper()}: " + self_judged_note(info.get("model", jid)))
                level = 4
            _judged_block(page, bench, name, blocks[jid], n_boot, level)
        # cost and tokens
        costs = run_costs(store, groups, prices)
        page.heading("Tokens and cost", 3)
        crow = []
        for g in groups:
            c = costs[g.config_hash]
            ok = [r for r in g.rows if r["status"] == "ok"]
            tok = stats.cluster_mean([_episode_tokens(r) for r in ok], [r["task_id"] for r in ok], n_boot)
            p = c["prices"]
            if p.configured:
                ce = stats.cluster_mean(c["per_episode"], c["tasks"], n_boot)
                cost_ep = f"${ce.value:.4f} [{ce.lo:.4f}, {ce.hi:.4f}]" if not math.isnan(ce.lo) else f"${ce.value:.4f}"
                total = f"${c['generation'] + c['judge_token_cost'] + c['judge_uptime_cost']:.4f}"
            else:
                cost_ep = total = "no prices configured"
            crow.append([g.label, est(tok), f"{c['uptime_s'] / 3600:.3f}" if c["recorded"] else "not recorded",
                         f"in {p.input_per_mtok:g} / out {p.output_per_mtok:g} per Mtok; {p.gpu_hour:g} per unit-hour "
                         f"x {p.units_per_replica:g}", cost_ep, total])
        page.table(["configuration", "tokens per episode (in+out)", "replica hours (this config's runs)", "prices",
                    "cost per episode", "run cost (generation + judge)"], crow)
        _tokens_plot(page, groups, name, costs)


def _judged_block(page: Page, bench: Any, name: str, groups: list[ConfigGroup], n_boot: int, level: int) -> None:
    """Metrics with intervals, paired tests, paper tables and plots of configurations seen through
    one judge (or none)."""
    ests: dict[str, dict[str, stats.Estimate]] = {}
    plain: dict[str, dict[str, tuple[float, int]]] = {}
    order: list[str] = []
    metric_rows: list[dict[str, Any]] = []
    for g in groups:
        mrows = bench.metrics(g.rows)
        metric_rows += [{"benchmark": name, "model": g.model, "config_hash": g.config_hash,
                         "agent": json.dumps(g.agent), "data": json.dumps(g.data), "judge": g.judge,
                         "self_judged": g.self_judged, "metric": m.metric, "value": m.value, "n": m.n} for m in mrows]
        plain[g.config_hash] = {m.metric: (m.value, m.n) for m in mrows}
        order += [m.metric for m in mrows if m.metric not in order]
        vals = g.values = bench.episode_values(g.rows)
        tasks = [r["task_id"] for r in g.rows]
        ests[g.config_hash] = {}
        for m in {k for v in vals for k in v}:
            xs = [v.get(m, float("nan")) for v in vals]
            e = stats.cluster_mean(xs, tasks, n_boot, seed=0)
            ests[g.config_hash][m] = e
            want = plain[g.config_hash].get(m)
            if want is not None and not math.isnan(want[0]) and not math.isclose(e.value, want[0], rel_tol=1e-9,
                                                                                  abs_tol=1e-9):
                log.warning("%s %s: per-episode mean %.6g differs from the metric %.6g", name, m, e.value, want[0])
    page.heading("Metrics", level)
    rows_out = []
    for m in order:
        cells = []
        for g in groups:
            e = ests[g.config_hash].get(m)
            if e is not None:
                cells.append(est(e))
            else:
                v = plain[g.config_hash].get(m)
                cells.append(f"{num(v[0])} (n={v[1]})" if v else "")
        rows_out.append([m, *cells])
    page.table(["metric", *[g.label + (f" [{SELF_JUDGED}]" if g.self_judged else "") for g in groups]], rows_out)
    # paired tests
    pairs = [(a, b) for a, b in itertools.combinations(groups, 2)
             if {r["task_id"] for r in a.rows} & {r["task_id"] for r in b.rows}]
    if pairs and bench.primary_metrics:
        page.heading("Paired comparisons", level)
        page.para("Per task (values averaged over seeds), configurations compared on the tasks they share: mean "
                  "difference A - B with a 95% bootstrap interval over tasks, and a two-sided sign-flip "
                  "permutation test. With few tasks trust the p-value over the interval: a percentile "
                  "bootstrap is too narrow below ~20 tasks, and the exact test cannot go below "
                  "2 / 2^(tasks with a difference).")
        prow = []
        for m in bench.primary_metrics:
            for a, b in pairs:
                t = stats.paired_test(_per_task(a, m), _per_task(b, m), n_boot)
                if t.n_tasks:
                    prow.append([m, a.label, b.label, f"{num(t.mean_diff)} [{num(t.lo)}, {num(t.hi)}]",
                                 f"{t.p_value:.3g}", t.n_tasks])
        page.table(["metric", "A", "B", "A - B", "p", "tasks"], prow)
    # paper tables
    for title, md in bench.tables(metric_rows).items():
        page.heading(f"Paper layout: {title}", level)
        if any(g.self_judged for g in groups) and groups[0].judge:
            page.strong(f"{SELF_JUDGED.upper()}: judge-based columns of this table were graded by the model under test.")
        page.md.append(md + "\n")
        page.html.append(_md_table_html(md))
    if bench.curve:
        _curve_plot(page, bench, groups, ests, name)
    if bench.per_task_metric:
        _per_task_plot(page, bench, groups, name)


def _per_task(g: ConfigGroup, metric: str) -> dict[str, float]:
    acc: dict[str, list[float]] = defaultdict(list)
    for r, v in zip(g.rows, g.values):
        if metric in v and not math.isnan(v[metric]):
            acc[r["task_id"]].append(v[metric])
    return {t: float(np.mean(x)) for t, x in acc.items()}


def _md_table_html(md: str) -> str:
    lines = [ln for ln in md.strip().splitlines() if ln.startswith("|")]
    if len(lines) < 2:
        return f"<pre>{html.escape(md)}</pre>"
    cells = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines]
    head, body = cells[0], cells[2:]
    return ("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in body) + "</table>")


def _tokens_plot(page: Page, groups: list[ConfigGroup], name: str, costs: dict[str, dict[str, Any]]) -> None:
    plt = _plt()
    data = [[_episode_tokens(r) for r in g.rows if r["status"] == "ok"] for g in groups]
    if not any(data):
        return
    priced = [g for g in groups if costs[g.config_hash]["prices"].configured and costs[g.config_hash]["per_episode"]]
    fig, axes = plt.subplots(1, 2 if priced else 1, figsize=(12 if priced else 8, 0.8 + 0.45 * len(groups)),
                             squeeze=False)
    ax = axes[0, 0]
    short = plot_names([g.label for g in groups])
    ax.boxplot(data, orientation="horizontal", tick_labels=[_short(x, 45) for x in short])
    ax.set_xlabel("tokens per episode (prompt + completion)")
    ax.grid(axis="x", alpha=.3)
    if priced:
        ax2 = axes[0, 1]
        es = [stats.cluster_mean(costs[g.config_hash]["per_episode"], costs[g.config_hash]["tasks"]) for g in priced]
        y = np.arange(len(priced))
        err = np.array([[max(0.0, e.value - e.lo) if not math.isnan(e.lo) else 0 for e in es],
                        [max(0.0, e.hi - e.value) if not math.isnan(e.hi) else 0 for e in es]])
        ax2.barh(y, [e.value for e in es], xerr=err, capsize=3, color="#2b6cb0")
        ax2.set_yticks(y, [_short(short[groups.index(g)], 45) for g in priced], fontsize=8)
        ax2.set_xlabel("cost per episode ($, 95% interval over tasks)")
        ax2.grid(axis="x", alpha=.3)
    page.figure(fig, f"{name}-tokens-cost", f"{name}: tokens{' and cost' if priced else ''} per episode, by configuration")


def _curve_plot(page: Page, bench: Any, groups: list[ConfigGroup], ests: dict[str, dict[str, stats.Estimate]],
                name: str) -> None:
    xfield, metric = bench.curve
    lines: dict[str, list[tuple[float, stats.Estimate]]] = defaultdict(list)
    for g in groups:
        if xfield not in g.agent or metric not in ests[g.config_hash]:
            continue
        rest = {k: v for k, v in g.agent.items() if k != xfield}
        key = f"{g.model} {json.dumps(rest, sort_keys=True)} {json.dumps(g.data, sort_keys=True)}"
        lines[key].append((float(g.agent[xfield]), ests[g.config_hash][metric]))
    lines = {k: sorted(v, key=lambda p: p[0]) for k, v in lines.items() if len(v) >= 2}
    if not lines:
        return
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    rows = []
    for i, (key, pts) in enumerate(sorted(lines.items())):
        xs = [p[0] for p in pts]
        ys = np.array([p[1].value for p in pts])
        lo = np.array([p[1].lo for p in pts])
        hi = np.array([p[1].hi for p in pts])
        err = np.vstack([np.nan_to_num(ys - lo), np.nan_to_num(hi - ys)])
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=f"series {i + 1}")
        rows += [[f"series {i + 1}", key[:120], num(x), est(p[1])] for x, p in zip(xs, pts)]
    ax.set_xlabel(xfield)
    ax.set_ylabel(metric)
    if all(0 <= p[1].value <= 1 for pts in lines.values() for p in pts):
        ax.set_ylim(-0.02, 1.02)        # a rate: show the whole scale
    ax.grid(alpha=.3)
    ax.legend(fontsize=8)
    page.figure(fig, f"{name}-curve", f"{name}: {metric} vs {xfield} (95% bootstrap intervals over tasks)")
    page.table(["series", "model / other settings", xfield, metric], rows)


def _per_task_plot(page: Page, bench: Any, groups: list[ConfigGroup], name: str) -> None:
    metric = bench.per_task_metric
    per = {g.config_hash: _per_task(g, metric) for g in groups}
    tasks = sorted({t for v in per.values() for t in v})
    if not tasks:
        return
    plt = _plt()
    fig, ax = plt.subplots(figsize=(min(14, 2 + 0.5 * len(tasks) * max(1, len(groups))), 4))
    w = 0.8 / max(1, len(groups))
    for i, g in enumerate(groups):
        ys = [per[g.config_hash].get(t, np.nan) for t in tasks]
        ax.bar(np.arange(len(tasks)) + i * w, ys, w, label=plot_names([x.label for x in groups])[i])
    ax.set_xticks(np.arange(len(tasks)) + w * (len(groups) - 1) / 2, tasks, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel(metric)
    vals = [v for p in per.values() for v in p.values()]
    if vals and all(0 <= v <= 1 for v in vals):
        ax.set_ylim(0, 1.02)            # a score in [0, 1]: show the whole scale, zeros included
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=.3)
    page.figure(fig, f"{name}-{metric}-by-task", f"{name}: {metric} by task (mean over seeds)")


# -- pairwise directories -----------------------------------------------------------------------
@dataclass
class Verdicts:
    judge: str
    protocol: str
    comparisons: list[dict[str, Any]]
    values: dict[str, str | None]      # comparison id -> verdict JSON (None: failed)

    def systems(self) -> list[str]:
        return sorted({c["system_a"] for c in self.comparisons} | {c["system_b"] for c in self.comparisons})

    def outcomes(self) -> list[stats.Outcome]:
        """Overall outcomes of the verdicts that parsed."""
        return [o for c in self.comparisons if (o := outcome(c, self.values[c["comparison_id"]])) is not None]


def load_verdicts(store: PairwiseStore) -> list[Verdicts]:
    comps = store.comparisons()
    judges = sorted({(r["judge"], r["key"]) for r in store.judgement_rows()})
    out = []
    for judge, proto in judges:
        j = store.judgements(judge)
        vals = {cid: d[proto] for cid, d in j.items() if proto in d}
        out.append(Verdicts(judge, proto, [c for c in comps if c["comparison_id"] in vals], vals))
    return out


def read_human(path: Path, systems: set[str], tasks: set[str] | None = None
               ) -> dict[tuple[str, str, str], str | None]:
    """Human preferences, JSON Lines: ``{"task_id", "system_a", "system_b", "winner"}`` with winner
    one of the two system ids or "tie"; one label per task and pair; systems among ``systems``,
    tasks among ``tasks`` when given. Errors (``BadDataError``) name the file, line and field."""
    from engine.errors import BadDataError
    from engine.jsonl import field_str, read_jsonl

    out: dict[tuple[str, str, str], str | None] = {}
    first: dict[tuple[str, str, str], int] = {}
    for row, rec in read_jsonl(path):
        task, a, b, winner = (field_str(path, row, rec, f) for f in ("task_id", "system_a", "system_b", "winner"))
        if tasks is not None and task not in tasks:
            raise BadDataError("unknown_reference", path, row, "task_id",
                               f"unknown task {task!r} (not among the {len(tasks)} compared tasks)")
        for f, sid in (("system_a", a), ("system_b", b)):
            if sid not in systems:
                raise BadDataError("unknown_reference", path, row, f, f"unknown system {sid!r} (known: {sorted(systems)})")
        if a == b:
            raise BadDataError("inconsistent", path, row, "system_b", f"the same system {a!r} as system_a")
        if winner not in (a, b, "tie"):
            raise BadDataError("unknown_value", path, row, "winner",
                               f"must be system_a, system_b or \"tie\", got {winner!r}")
        lo, hi = sorted((a, b))
        if (task, lo, hi) in first:
            raise BadDataError("duplicate_id", path, row, "task_id", f"task {task!r} and pair {lo!r} / {hi!r} "
                               f"labelled again (first at row {first[(task, lo, hi)]}); one label per task and pair")
        first[(task, lo, hi)] = row
        out[(task, lo, hi)] = None if winner == "tie" else winner
    return out


def pairwise_section(page: Page, root: Path, n_boot: int, human: Path | None,
                     prices: dict[str, Prices] | None = None) -> None:
    store = PairwiseStore(root)
    systems = store.read_json("systems.json") or []
    label = {s["system_id"]: s["label"] for s in systems}
    page.heading(f"Pairwise judging: {root}")
    page.table(["system", "label", "run"], [[s["system_id"], s["label"], s["run_dir"] or "(task data)"]
                                           for s in systems])
    infos = store.run_infos("pairwise-")
    if infos:
        tin = sum(float((i.get("judge_stats") or {}).get("tokens_in") or 0) for i in infos)
        tout = sum(float((i.get("judge_stats") or {}).get("tokens_out") or 0) for i in infos)
        up = sum(float(i.get("replica_seconds") or 0) for i in infos)
        cost = 0.0
        for i in infos:
            c = i.get("config") or {}
            model, judge, js = c.get("model") or {}, c.get("judge") or {}, i.get("judge_stats") or {}
            hosted = judge.get("kind") != "openai_compatible"
            over = (prices or {}).get(model.get("name", "") if hosted else judge.get("name") or judge.get("model", ""))
            up_price = over or Prices.of_model(model)
            tok = over or Prices.of_judge(judge, model)
            cost += (uptime_cost(float(i.get("replica_seconds") or 0), up_price) if hosted else 0.0) + token_cost(
                float(js.get("tokens_in") or 0), float(js.get("tokens_out") or 0), tok)
        page.para(f"Judging cost over {len(infos)} stage run(s): {tin:,.0f} prompt / {tout:,.0f} completion tokens, "
                  f"{up / 3600:.3f} replica hours, ${cost:.4f} at the configured prices.")
        last = infos[-1]
        page.para(f"Latest stage: {last.get('comparisons')} comparisons ({last.get('skipped_pairs')} pair-tasks "
                  f"skipped because a text was missing), judge {last.get('judge')}, "
                  f"seed {(last.get('config') or {}).get('seed')}, both orders: "
                  f"{(last.get('config') or {}).get('both_orders')}.")
    judges = store.judges()
    for v in load_verdicts(store):
        ids = v.systems()
        names = [label.get(i, i) for i in ids]
        outs = v.outcomes()
        failed = sum(val is None for val in v.values.values())
        page.heading(f"{v.protocol} protocol, judge {v.judge}", 3)
        jmodel = judges.get(v.judge, {}).get("model", "")
        if jmodel and jmodel in {s["model"] for s in systems}:
            page.strong(f"{SELF_JUDGED.upper()}: the judge ({jmodel}) is the model of a compared system, so it judged "
                        f"pairs it is in; these verdicts are not a measurement of quality.")
        page.para(f"{len(v.values)} verdicts over {len({c['task_id'] for c in v.comparisons})} tasks; {failed} failed "
                  f"(malformed after every retry; excluded, not guessed).")
        if not outs:
            continue
        pb = position_bias(v.comparisons, v.values)
        firsts = [float(json.loads(v.values[c["comparison_id"]])["overall"] == "first") for c in v.comparisons
                  if v.values[c["comparison_id"]] is not None]
        fe = stats.cluster_mean(firsts, [c["task_id"] for c in v.comparisons if v.values[c["comparison_id"]] is not None],
                                n_boot)
        consistent = ("n/a (judge with both_orders=true to measure)" if not pb["pairs_both_orders"] else
                      f"{pb['consistent_share'] * 100:.1f}% of {int(pb['pairs_both_orders'])} pairs")
        page.para(f"Position: the first article won {est(fe)} of verdicts (0.5 = no position preference). "
                  f"Same winner when the order is swapped: {consistent}.")
        if pb["pairs_both_orders"] and pb["consistent_share"] < 0.5:
            page.para("Warning: most verdicts did not survive swapping the order: this judge follows the "
                      "position, not the articles, and the win rates below measure that.")
        M, lo, hi, N = stats.win_rate_intervals(outs, ids, n_boot)
        plt = _plt()
        fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(ids), 1.2 + 1.1 * len(ids)))
        im = ax.imshow(np.nan_to_num(M * 100, nan=np.nan), cmap="Blues", vmin=0, vmax=100)
        for i, j in itertools.product(range(len(ids)), repeat=2):
            if i != j and N[i, j] > 0:
                ax.text(j, i, f"{M[i, j] * 100:.0f}\n[{lo[i, j] * 100:.0f}-{hi[i, j] * 100:.0f}]",
                        ha="center", va="center", fontsize=8, color="white" if M[i, j] > .6 else "black")
        short = [_short(n) for n in plot_names(names)]
        ax.set_xticks(range(len(ids)), short, rotation=30, ha="right", fontsize=8)
        ax.set_yticks(range(len(ids)), short, fontsize=8)
        ax.set_xlabel("column system")
        ax.set_ylabel("row system")
        fig.colorbar(im, ax=ax, label="row wins (%)")
        page.figure(fig, f"winrate-{v.protocol}", f"Win rate (%) of the row system over the column system "
                                                  f"({v.protocol} protocol), 95% bootstrap interval over tasks")
        page.table(["row \\ column", *names],
                   [[names[i], *[("" if i == j or N[i, j] == 0 else
                                  f"{M[i, j] * 100:.1f} [{lo[i, j] * 100:.1f}, {hi[i, j] * 100:.1f}] (n={int(N[i, j])})")
                                 for j in range(len(ids))]] for i in range(len(ids))])
        theta, tlo, thi = stats.bradley_terry_intervals(outs, ids, prior_games=1.0, n_boot=n_boot)
        W, Nn = stats.win_counts(outs, ids)
        rank = np.argsort(-np.nan_to_num(theta, nan=-np.inf))
        page.para("Bradley-Terry ratings from every pairwise outcome (one virtual tie per pair that met keeps "
                  "ratings finite); Elo scale: 400 points = 10:1 odds, centred on 1000.")
        page.table(["rank", "system", "BT log-strength", "Elo", "wins / comparisons"],
                   [[k + 1, names[i], f"{theta[i]:.2f} [{tlo[i]:.2f}, {thi[i]:.2f}]",
                     f"{stats.elo(np.array([theta[i]]))[0]:.0f} [{stats.elo(np.array([tlo[i]]))[0]:.0f}, "
                     f"{stats.elo(np.array([thi[i]]))[0]:.0f}]", f"{W[i].sum():g} / {Nn[i].sum():g}"]
                    for k, i in enumerate(rank)])
        tests = sign_tests(pair_outcomes(v.comparisons, v.values), ids)
        page.para("Sign tests count one outcome per (task, pair): a pair judged in both orders is combined first "
                  "(agreeing verdicts give a win, disagreeing ones a tie), since its two verdicts are not "
                  "independent; ties are dropped. p-values are Holm-adjusted over the "
                  f"{sum(not math.isnan(t[4]) for t in tests)} pairs of this table (family-wise error 5% at p < 0.05).")
        page.table(["A", "B", "A wins - B wins (pairs)", "ties", "sign test p (two-sided)", "p (Holm)"],
                   [[names[a], names[b], f"{w} - {lo_}", ties, f"{p:.3g}", f"{ph:.3g}"]
                    for a, b, w, lo_, p, ph, ties in tests])
        _dimension_section(page, v, ids, names)
        if human is not None:
            _agreement(page, v, human, set(ids), n_boot)


def sign_tests(outcomes: list[stats.Outcome], ids: list[str]) -> list[tuple[int, int, int, int, float, float, int]]:
    """Per pair of systems (indices a < b) that met: (a, b, wins of a, wins of b, sign-test p, Holm p, ties),
    from one outcome per (task, pair) (``engine.pairwise.pair_outcomes``)."""
    rows = []
    for a, b in itertools.combinations(range(len(ids)), 2):
        mine = [o for o in outcomes if {o.a, o.b} == {ids[a], ids[b]}]
        if not mine:
            continue
        wins = sum(1 for o in mine if o.winner is not None and (o.a if o.winner == "a" else o.b) == ids[a])
        losses = sum(1 for o in mine if o.winner is not None) - wins
        rows.append((a, b, wins, losses, stats.sign_test(wins, losses), sum(o.winner is None for o in mine)))
    adjusted = stats.holm([r[4] for r in rows])
    return [(a, b, w, lo, p, ph, t) for (a, b, w, lo, p, t), ph in zip(rows, adjusted)]


def plot_names(names: list[str]) -> list[str]:
    """Shorter names for plot axes and legends: when every system is the same model, the settings
    alone (``guided_json=True``) tell them apart; tables keep the full labels."""
    models = {n.split(" (", 1)[0] for n in names if " (" in n and not n.startswith("reference")}
    if len(models) != 1:
        return names
    m = models.pop()
    return [n[len(m) + 2:-1] if n.startswith(f"{m} (") and n.endswith(")") else n for n in names]


def _short(s: str, n: int = 38) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def _dimension_section(page: Page, v: Verdicts, ids: list[str], names: list[str]) -> None:
    present = {d for val in v.values.values() if val for d in json.loads(val).get("dimensions", {})}
    bench = {c.get("benchmark") for c in v.comparisons} - {None}
    order = list(get_benchmark(bench.pop()).pairwise.dimensions) if len(bench) == 1 else []
    dims = [d for d in order if d in present] + sorted(present - set(order))      # the paper's order
    if not dims:
        return
    pairs = [(a, b) for a, b in itertools.combinations(range(len(ids)), 2)]
    rows = []
    shares: dict[tuple[int, int], list[tuple[float, float, float, int]]] = {}
    for a, b in pairs:
        shares[(a, b)] = []
        for d in [*dims, None]:
            os_ = [o for c in v.comparisons if {c["system_a"], c["system_b"]} == {ids[a], ids[b]}
                   and (o := outcome(c, v.values[c["comparison_id"]], d)) is not None]
            n = len(os_)
            win = sum(1 for o in os_ if o.winner is not None and (o.a if o.winner == "a" else o.b) == ids[a])
            tie = sum(1 for o in os_ if o.winner is None)
            s = (win / n, tie / n, (n - win - tie) / n, n) if n else (np.nan, np.nan, np.nan, 0)
            shares[(a, b)].append(s)
        rows.append([names[a], names[b], *[f"{x[0] * 100:.0f} / {x[1] * 100:.0f} / {x[2] * 100:.0f} (n={x[3]})"
                                          if x[3] else "n/a" for x in shares[(a, b)]]])
    page.para("Dimension-wise outcomes (Figure 4): % of A wins / ties / B wins per dimension; n counts the "
              "verdicts that judged the dimension (a partial verdict leaves some out).")
    page.table(["A", "B", *dims, "Overall"], rows)
    plt = _plt()
    fig, axes = plt.subplots(len(pairs), 1, figsize=(9, 0.9 + 0.5 * (len(dims) + 2) * len(pairs)), squeeze=False)
    labels_ = [*dims, "Overall"]
    short = plot_names(names)
    for ax, (a, b) in zip(axes[:, 0], pairs):
        s = np.array([x[:3] for x in shares[(a, b)]], dtype=float) * 100
        y = np.arange(len(labels_))[::-1]
        left = np.zeros(len(labels_))
        for k, (col, lab) in enumerate((("#2b6cb0", f"{_short(short[a], 30)} wins"), ("#bbbbbb", "tie"),
                                         ("#dd6b20", f"{_short(short[b], 30)} wins"))):
            vals = np.nan_to_num(s[:, k])
            ax.barh(y, vals, left=left, color=col, label=lab)
            left += vals
        ax.set_yticks(y, labels_, fontsize=8)
        ax.set_xlim(0, 100)
        ax.set_xlabel("% of verdicts")
        ax.set_title(f"{_short(short[a], 45)} vs {_short(short[b], 45)}", fontsize=9)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    page.figure(fig, f"dimensions-{v.protocol}", f"Per-dimension win / tie / loss shares ({v.protocol} protocol)")


def _agreement(page: Page, v: Verdicts, human_path: Path, systems: set[str], n_boot: int) -> None:
    human = read_human(human_path, systems | {"reference"}, {c["task_id"] for c in v.comparisons})
    judge: dict[tuple[str, str, str], str] = {}
    for c in v.comparisons:
        if c["order"] != "random":
            continue
        o = outcome(c, v.values[c["comparison_id"]])
        if o is not None and o.winner is not None:
            judge[(c["task_id"], c["system_a"], c["system_b"])] = o.a if o.winner == "a" else o.b
    e = stats.agreement(judge, human, task_of=lambda k: k[0], n_boot=n_boot)
    ties = sum(h is None for h in human.values())
    page.para(f"Agreement with human labels ({human_path.name}): {est(e)}; {ties} human ties excluded, "
              f"{sum(1 for k, h in human.items() if h is not None and k not in judge)} labelled pairs without a "
              f"verdict excluded (appendix C.3: exact match on non-tied pairs).")


def pairwise_summary(root: Path, n_boot: int = 200) -> str:
    """Markdown: win rates and Bradley-Terry per judge and protocol (for the end of a stage)."""
    store = PairwiseStore(root)
    label = {s["system_id"]: s["label"] for s in store.read_json("systems.json") or []}
    out = []
    for v in load_verdicts(store):
        ids, outs = v.systems(), v.outcomes()
        if not outs:
            continue
        M = stats.win_rate_matrix(outs, ids)
        theta = stats.bradley_terry(outs, ids, prior_games=1.0)
        names = [label.get(i, i) for i in ids]
        out.append(f"{v.protocol} / {v.judge}: {len(outs)} verdicts")
        out.append("win rate (row over column, %): " + "; ".join(
            f"{names[i]} > {names[j]}: {M[i, j] * 100:.0f}" for i, j in itertools.permutations(range(len(ids)), 2)
            if not math.isnan(M[i, j])))
        out.append("Bradley-Terry: " + ", ".join(f"{names[i]} {theta[i]:+.2f}" for i in np.argsort(-theta)))
    return "\n".join(out) or "no verdicts yet"


# -- entry ----------------------------------------------------------------------------------------
def build(paths: Sequence[str | Path], out: Path, n_boot: int = 1000, human: Path | None = None,
          prices: dict[str, Prices] | None = None, title: str = "dateline report", judge: str | None = None) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    page = Page(out)
    for p in map(Path, paths):
        if (p / "comparisons").is_dir():
            pairwise_section(page, p, n_boot, human, prices)
        elif (p / "episodes").is_dir():
            run_section(page, p, n_boot, prices or {}, judge)
        else:
            raise DataError(p, None, None, "neither a run directory (episodes/) nor a pairwise directory (comparisons/)")
    return page.write(title)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dateline report", description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", help="run directories and/or pairwise directories")
    ap.add_argument("--out", help="output folder (default: the first path's report/)")
    ap.add_argument("--boot", type=int, default=1000, help="bootstrap resamples (default 1000)")
    ap.add_argument("--human", help="JSON Lines of human preferences for agreement (pairwise)")
    ap.add_argument("--price", action="append", default=[], metavar="MODEL=IN,OUT[,HOUR[,UNITS]]",
                    help="price a model (overrides what its runs recorded); repeatable")
    ap.add_argument("--judge", help="show only this judge's numbers (its id, an id prefix, or its model name); "
                                    "default: every judge, each in its own block")
    ap.add_argument("--title", default="dateline report")
    # ``judge=X`` as at metrics time (``dateline metrics RUN BENCH judge=X``) is --judge X
    a = ap.parse_args([f"--judge={x[6:]}" if x.startswith("judge=") else x for x in (argv or [])])
    prices = {}
    for spec in a.price:
        model, _, rest = spec.partition("=")
        if not rest:
            ap.error(f"--price {spec!r}: expected MODEL=IN,OUT[,HOUR[,UNITS]]")
        try:
            prices[model] = Prices.parse(rest)
        except ValueError as e:
            ap.error(str(e))
    out = Path(a.out) if a.out else Path(a.paths[0]) / "report"
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s %(name)s] %(message)s", datefmt="%H:%M:%S")
    path = build(a.paths, out, a.boot, Path(a.human) if a.human else None, prices, a.title, a.judge)
    sys.stdout.write(f"{path}\n{out / 'report.md'}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
