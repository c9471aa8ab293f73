"""A run dir's episodes as plain data, what ``log`` builds inspect_ai's types from: each episode's
view (the report's episode pages read it), its conversation turn by turn with its steps as tool
calls, its judge verdicts, metric values and scores, its token usage and metadata; a configuration's
results, marks and provenance. No inspect_ai here, so all of it is tested without the extra."""

from __future__ import annotations

import datetime as dt
import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from engine.benchmarks import get_benchmark
from engine.llm.transcripts import conversation
from engine.provenance import dateline_version
from engine.scoring import outcomes
from engine.storage import EpisodeStore
from ray_jobs.outputs.report import episodes as ev
from ray_jobs.outputs.runs_behind import run_provenance as run_provenance  # re-exported: ray_jobs.outputs.inspect

FOLDER = "_inspect"           # the default log dir, inside the run dir

# episode-row columns that are the sample's own fields (or the spec's), not its metadata
_NOT_METADATA = ("output", "error", "agent", "data", "batch_id", "engine")


def log_name(benchmark: str, config_hash: str) -> str:
    return f"{benchmark}_{config_hash}.eval"


def score_name(judge: str, key: str = "metrics") -> str:
    """A sample score's (and the results' score's) name: ``metrics`` or ``metrics (judge <id>)``;
    a verdict's: ``<key> (judge <id>)``."""
    return f"{key} (judge {judge})" if judge else key


def views(run_dir: str, benchmark: str, config_hash: str) -> list[ev.EpisodeView]:
    """Every stored episode of a configuration as the report's episode pages read it (its calls,
    prompts, steps, judgements and per-episode metric values), by task id and seed."""
    bench = get_benchmark(benchmark)
    store = EpisodeStore(run_dir, bench.episode_fields)
    ids = sorted(str(r["episode_id"]) for r in store.episodes(["episode_id"], config_hash=config_hash).to_pylist())
    judged = ev.judged_of(store, bench, config_hash, ids)       # one read of the judgements
    out = [ev.load(store, bench, eid, judged=judged) for eid in ids]
    return sorted(out, key=lambda v: (str(v.row["task_id"]), int(v.row["seed"] or 0), v.episode_id))


# -- an episode as plain data (what the inspect types are built from) ------------------------------
def messages(view: ev.EpisodeView) -> list[dict[str, Any]]:
    """The episode's conversation, turn by turn: ``{"role", "content"}`` plus, on an assistant
    turn, ``tool_calls`` (``id``, ``function``, ``arguments``, ``parse_error``) and ``model``; on
    a tool result, ``tool_call_id``, ``function`` and ``error``; ``metadata`` where there is more
    (the call's tokens and finish reason, a step's turn)."""
    by_call: dict[int, list[dict[str, Any]]] = defaultdict(list)
    loose: list[dict[str, Any]] = []
    for s in sorted(view.steps, key=lambda s: int(s["step"])):
        c = s.get("call")
        (by_call[int(c)] if c is not None and c >= 0 else loose).append(s)
    out: list[dict[str, Any]] = []
    said: list[tuple[str, str]] = []            # the conversation as the model saw it (tool results left out)
    for call in view.calls:
        prompt = [(m["role"], m["content"]) for m in conversation(call, view.messages)]
        same = 0
        while same < min(len(prompt), len(said)) and prompt[same] == said[same]:
            same += 1
        # a prompt that starts over (newsagent asks afresh each turn) adds what is new after the common part
        for role, content in prompt[same:]:
            out.append({"role": role, "content": content})
        said = list(prompt)
        steps = by_call.pop(int(call["call"]), [])
        completion = str(call["completion"] or "")
        if call["error"] and not completion and not steps:      # the call failed: no answer to show
            if out:
                out[-1].setdefault("metadata", {})["call_error"] = call["error"]
            continue
        meta = {"call": int(call["call"]), "tokens_in": call["tokens_in"], "tokens_out": call["tokens_out"],
                "finish_reason": call["finish_reason"], "latency_s": call["latency_s"], "replica": call["replica"]}
        if call["error"]:
            meta["error"] = call["error"]
        out += _turn(view, completion, steps, str(call["model"] or view.row["model"]), meta)
        said.append(("assistant", completion))
    rest = loose + [s for ss in by_call.values() for s in ss]
    for s in sorted(rest, key=lambda s: int(s["step"])):          # steps no model call made
        out += _turn(view, str(s["raw_output"] or ""), [s], str(view.row["model"]), {"turn": s["turn"]})
    return out


def _turn(view: ev.EpisodeView, text: str, steps: list[dict[str, Any]], model: str,
          meta: dict[str, Any]) -> list[dict[str, Any]]:
    """An assistant message with its steps as tool calls, then a tool message per step."""
    calls, results = [], []
    for s in steps:
        cid = f"{view.episode_id[:12]}-step{s['step']}"
        function, arguments = _action(str(s["parsed_action"] or ""))
        result = str(s["result"] or "")
        if function is None:            # no action came out of the completion
            if s["ok"] or not text:     # a turn that is no action (a rephrase), or no completion to parse
                meta = {**meta, "step": s["step"], "turn": s["turn"], "result": result, "ok": s["ok"]}
                continue
            function, arguments = "unparsed", {}
        calls.append({"id": cid, "function": function, "arguments": arguments,
                      "parse_error": result if function == "unparsed" else None})
        results.append({"role": "tool", "content": result, "tool_call_id": cid, "function": function,
                        "error": "" if s["ok"] else (result or "failed"),
                        "metadata": {"step": s["step"], "turn": s["turn"]}})
    return [{"role": "assistant", "content": text, "tool_calls": calls, "model": model, "metadata": meta}, *results]


def _action(parsed: str) -> tuple[str | None, dict[str, Any]]:
    """(function, arguments) of a stored parsed action (JSON; its kind under ``type``, ``Action``,
    ``action`` or ``kind``); (None, {}) for none."""
    if not parsed:
        return None, {}
    try:
        d = json.loads(parsed)
    except ValueError:
        return "action", {"action": parsed}
    if not isinstance(d, dict):
        return "action", {"action": d}
    for k in ("type", "Action", "action", "kind"):
        if isinstance(d.get(k), str):
            return str(d[k]), {a: b for a, b in d.items() if a != k}
    return "action", d


def verdicts(view: ev.EpisodeView) -> dict[tuple[str, str], dict[str, Any]]:
    """(judge, key) -> the judgement row that counts: ok over failed, then the newest."""
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for j in sorted(view.judgements, key=lambda j: (bool(j["ok"]), str(j["batch_id"]))):
        best[(str(j["judge"]), str(j["key"]))] = j
    return best


def metric_views(view: ev.EpisodeView) -> dict[str, dict[str, float]]:
    """Judge id ("" for none) -> the episode's metric values: through each judge that judged it,
    else with no judge (a judge's view holds every value the unjudged one has, the same). A failed
    episode has none (it counts by its plan's failure policy, in the results)."""
    judged = {j: v for j, v in view.values.items() if j and v}
    return judged or ({"": view.values[""]} if view.values.get("") else {})


def scores(view: ev.EpisodeView) -> dict[str, dict[str, Any]]:
    """Score name -> ``{"value", "explanation", "answer", "metadata", "unscored"}``: the metric
    values (:func:`metric_views`), then each verdict."""
    out: dict[str, dict[str, Any]] = {}
    for judge, vals in sorted(metric_views(view).items()):
        out[score_name(judge)] = {"value": dict(sorted(vals.items())), "answer": str(view.row["output"] or ""),
                                  "metadata": {"judge": judge or None}}
    for (judge, key), j in sorted(verdicts(view).items()):
        out[score_name(judge, key)] = {
            "value": j["value"], "unscored": j["value"] is None, "explanation": str(j["raw_output"] or ""),
            "answer": str(view.row["output"] or ""),
            "metadata": {"judge": judge, "judge_model": j["judge_model"], "key": key, "ok": j["ok"],
                         "truncated": j["truncated"], "error": j["error"] or None}}
    return out


def usage(view: ev.EpisodeView) -> dict[str, tuple[int, int]]:
    """Model -> (input, output) tokens: the episode's under its model, its judges' under theirs."""
    out: dict[str, tuple[int, int]] = {str(view.row["model"]): (int(view.row["tokens_in"] or 0),
                                                              int(view.row["tokens_out"] or 0))}
    for c in view.judge_calls:
        i, o = out.get(str(c["model"]), (0, 0))
        out[str(c["model"])] = (i + int(c["tokens_in"] or 0), o + int(c["tokens_out"] or 0))
    return out


def total_usage(vs: Sequence[ev.EpisodeView]) -> dict[str, tuple[int, int]]:
    """Model -> (input, output) tokens over every episode of ``vs`` (:func:`usage`)."""
    total: dict[str, tuple[int, int]] = {}
    for v in vs:
        for name, t in usage(v).items():
            a, b = total.get(name, (0, 0))
            total[name] = (a + t[0], b + t[1])
    return total


def _plain(v: Any) -> Any:
    if isinstance(v, dt.datetime | dt.date):
        return v.isoformat()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    return v


def sample_metadata(view: ev.EpisodeView) -> dict[str, Any]:
    """The episode's provenance: its row (less the output, error and the configuration's JSON,
    which are elsewhere in the log), its engine identity, and the exporting dateline's version."""
    r = view.row
    meta = {k: _plain(v) for k, v in r.items() if k not in _NOT_METADATA}
    meta["engine"] = json.loads(r["engine"]) if r.get("engine") else None
    meta["reference"] = view.reference
    meta["error_kind"] = outcomes.error_kind(r) if r["status"] != "ok" else None
    meta["dateline_version"] = dateline_version()
    return meta


def results(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The configuration's results, one entry per judge and scope: ``{"name", "judge", "scope",
    "metrics": {metric: {"value", "n", "lo", "hi", "interval"}}}`` from the records' metric rows."""
    out = []
    for rec in records:
        judge = rec["judge"]
        for scope in (outcomes.ALL, outcomes.COMMON):
            ms = {v["metric"]: {k: v[k] for k in ("value", "n", "lo", "hi", "interval")}
                  for v in rec["values"] if v["scope"] == scope}
            if ms:
                name = score_name(judge) + ("" if scope == outcomes.ALL else ", common tasks")
                out.append({"name": name, "judge": judge, "scope": scope, "metrics": ms})
    return out


def marks(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every mark of the configuration's records (as the report prints them), sorted; none is []."""
    return sorted({m for rec in records for m in rec["tags"]["dateline.marks"].split(", ") if m != "none"})
