"""``dateline export --to inspect RUN_DIR``: a run dir as inspect_ai eval logs, for ``inspect view``.

One log per configuration (``<benchmark>_<config hash>.eval``), written with inspect_ai's own types
and writer (``EvalLog``, ``write_eval_log``), so whatever reads inspect logs reads it: ``inspect view``,
``read_eval_log``, inspect's dataframes. Each episode is one sample:

* ``id`` its task id and ``epoch`` its seed's rank in the configuration (1, 2...), ``uuid`` its episode id;
* ``messages``: every model call of the episode turn by turn, as ``dateline show`` prints them: each
  call's prompt messages that the conversation does not hold yet, then the completion as the
  assistant's message; the environment steps the completion led to (``steps``: its parsed action,
  its result) are ``ToolCall``\\ s on that message, each answered by a ``ChatMessageTool`` holding the
  step's result (a failed step: its ``error``; an action that did not parse: ``parse_error``).
  The prompt messages keep the role the model saw them with (an observation is a user message),
  so the messages less the tool results are the stored conversation. Steps without a model call
  (the rule-based baseline) are assistant turns of their own; ``input`` is what the first call's
  prompt asks (its system message is the agent's, as a solver's would be);
* ``output``: the episode's final output (its ``output`` column), ``target`` the reference the
  benchmark compares it with;
* ``scores``: the per-episode metric values ``dateline show`` and the report print
  (``ray_jobs.outputs.report.episodes``: the code ``dateline metrics`` averages), one dict-valued score,
  ``metrics (judge <id>)`` for each judge that judged the episode (a judge's view holds every value
  of the unjudged one), else ``metrics``; and each judge verdict as ``<key> (judge <id>)``: the
  parsed value, the judge's own text as its ``explanation``, the final output as its ``answer`` (a
  verdict that did not parse is unscored, reason ``grader_failed``);
* ``error``: an ``EvalError`` for an episode without a result (its status and stored error's first
  line; the whole error as the traceback). It has no scores: it counts by its plan's failure policy,
  which the results (the metrics table) apply;
* ``model_usage``: the episode's tokens under its model and its judges' under theirs;
* ``metadata``: where it comes from: episode and task id, seed, configuration, benchmark, model,
  status, worker, replica, engine identity, the dateline version that exported it.

The log's results are the configuration's rows of the metrics table (``engine/scoring/metric_table.py``,
as ``ray_jobs/outputs/export.py`` reads them for MLflow and W&B): one ``EvalScore`` per judge (``metrics``
or ``metrics (judge <id>)``, and ``..., common tasks`` for the comparison scope), each metric with
its ``n``, interval and how the interval was made in its metadata; the counts, marks and adaptive
decision in the results' metadata. Its spec carries the model, the agent settings (solver args),
the benchmark settings (task args), the run's provenance (``provenance-*.json``: commit, packages)
and ``viewer.trust_content=False``: the transcripts hold model output and fetched web text, shown
as plain text. Exporting again rewrites the same files. A run dir on an object store gets its logs
under ``RUN_DIR/_inspect/`` too (written locally, then uploaded). ``inspect view start --log-dir
RUN_DIR/_inspect`` shows them; a sample's page is ``#/logs/<log>/samples/sample/<task id>/<epoch>/``.

inspect_ai is an optional extra (``pip install dateline[export]``): it is imported where the log
is built, as ``export.py`` imports mlflow and wandb.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import tempfile
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.benchmarks import get_benchmark
from engine.config import stable_hash
from engine.errors import CliError
from engine.llm.transcripts import conversation
from engine.provenance import dateline_version
from engine.scoring import outcomes
from engine.storage import EpisodeStore, is_uri, sub_uri, upload_tree
from ray_jobs.outputs.report import episodes as ev

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


def _provenance(store: EpisodeStore, config_hash: str) -> dict[str, Any]:
    """The newest provenance of the run dir that ran this configuration (else the newest)."""
    infos = [p for p in store.run_infos("provenance-") if isinstance(p, dict)]
    mine = [p for p in infos if any(c.get("config_hash") == config_hash for c in p.get("configs") or [])]
    return (mine or infos or [{}])[-1]


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


# -- the logs ------------------------------------------------------------------------------------
def write_logs(run_dir: str, records: Sequence[Mapping[str, Any]], log_dir: str | None = None) -> list[str]:
    """Write one inspect eval log per configuration of ``run_dir`` into ``log_dir`` (default
    ``RUN_DIR/_inspect``; a URI is written locally, then uploaded). ``records``: export.py's
    records of the run dir (one per benchmark, configuration and judge). What was written, a line each."""
    target = log_dir or (sub_uri(run_dir, FOLDER) if is_uri(run_dir) else str(Path(run_dir) / FOLDER))
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for rec in records:
        groups[(rec["benchmark"], rec["config_hash"])].append(rec)
    store = EpisodeStore(run_dir)
    lines = []
    with tempfile.TemporaryDirectory(prefix="dateline-inspect-") as tmp:
        local = Path(tmp) if is_uri(target) else Path(target)
        local.mkdir(parents=True, exist_ok=True)
        for (bench, h), recs in sorted(groups.items()):
            vs = views(run_dir, bench, h)
            path = local / log_name(bench, h)
            _write_log(path, run_dir, recs, vs, _provenance(store, h))
            where = sub_uri(target, path.name) if is_uri(target) else str(path)
            n_err = sum(v.row["status"] != "ok" for v in vs)
            lines.append(f"inspect {where}: {recs[0]['name'].split(' [')[0]} ({len(vs)} samples, {n_err} with an "
                         f"error; {len(recs)} judge view(s))")
        if is_uri(target):
            upload_tree(local, target)
    return lines


def _write_log(path: Path, run_dir: str, records: Sequence[Mapping[str, Any]], vs: list[ev.EpisodeView],
               prov: Mapping[str, Any]) -> None:
    """Build the configuration's ``EvalLog`` from the plain data above and write it with inspect's writer."""
    try:
        from inspect_ai import log, model, scorer, tool, viewer  # the optional extra: here only
    except ImportError as e:
        raise CliError(f"--to inspect needs inspect_ai, which is not installed ({e}): install the export extra, "
                       "pip install 'dateline[export]'") from e

    first = records[0]
    bench, h = str(first["benchmark"]), str(first["config_hash"])
    params = first["params"]
    agent = {k[len("agent."):]: v for k, v in params.items() if k.startswith("agent.")}
    data = {k[len("benchmark."):]: v for k, v in params.items() if k.startswith("benchmark.")}
    model_name = str(params["model"])

    def message(m: dict[str, Any]) -> model.ChatMessage:
        meta = m.get("metadata") or None
        if m["role"] == "system":
            return model.ChatMessageSystem(content=m["content"], metadata=meta)
        if m["role"] == "assistant":
            calls = [tool.ToolCall(id=c["id"], function=c["function"], arguments=c["arguments"],
                                   parse_error=c["parse_error"]) for c in m["tool_calls"]]
            return model.ChatMessageAssistant(content=m["content"], tool_calls=calls or None, model=m["model"],
                                              source="generate", metadata=meta)
        if m["role"] == "tool":
            err = tool.ToolCallError("unknown", m["error"]) if m["error"] else None
            return model.ChatMessageTool(content=m["content"], tool_call_id=m["tool_call_id"],
                                         function=m["function"], error=err, metadata=meta)
        if m["role"] != "user":             # a role inspect has no type for ("?": a message not in the store)
            meta = {**(meta or {}), "stored_role": m["role"]}
        return model.ChatMessageUser(content=m["content"], metadata=meta)

    def score(s: dict[str, Any]) -> scorer.Score:
        if s.get("unscored"):
            return scorer.Score.unscored(reason="grader_failed", answer=s.get("answer"),
                                         explanation=s.get("explanation"), metadata=s.get("metadata"))
        return scorer.Score(value=s["value"], answer=s.get("answer"), explanation=s.get("explanation"),
                            metadata=s.get("metadata"))

    def usage_of(tokens: tuple[int, int]) -> model.ModelUsage:
        return model.ModelUsage(input_tokens=tokens[0], output_tokens=tokens[1], total_tokens=sum(tokens))

    seeds = {s: i + 1 for i, s in enumerate(sorted({int(v.row["seed"] or 0) for v in vs}))}
    samples = []
    total: dict[str, tuple[int, int]] = {}
    for v in vs:
        r = v.row
        msgs = [message(m) for m in messages(v)]
        # the input: what the first prompt asks (its system message is the agent's, like a solver's)
        n_first = next((i for i, m in enumerate(msgs) if m.role == "assistant"), len(msgs))
        asked: list[model.ChatMessage] = [m for m in msgs[:n_first] if m.role != "system"]
        ok = r["status"] == "ok"
        toks = usage(v)
        for name, t in toks.items():
            a, b = total.get(name, (0, 0))
            total[name] = (a + t[0], b + t[1])
        err = None
        if not ok:
            text = f"{r['status']}: " + (str(r["error"] or "").strip().splitlines() or [outcomes.error_kind(r)])[0]
            err = log.EvalError(message=text, traceback=str(r["error"] or text),
                                traceback_ansi=str(r["error"] or text))
        final = model.ChatMessageAssistant(content=str(r["output"] or ""), model=model_name, source="generate")
        output = model.ModelOutput(model=model_name, choices=[model.ChatCompletionChoice(
            message=final, stop_reason="stop" if ok else "unknown")], usage=usage_of(toks.get(model_name, (0, 0))),
            time=float(r["wall_time_s"] or 0), metadata={"finish_reason": r["finish_reason"]})
        samples.append(log.EvalSample(
            id=str(r["task_id"]), epoch=seeds[int(r["seed"] or 0)], uuid=v.episode_id,
            input=asked or f"{bench} task {r['task_id']}", target=v.reference or "",
            messages=msgs, output=output, scores={k: score(s) for k, s in scores(v).items()} or None,
            metadata=sample_metadata(v), model_usage={k: usage_of(t) for k, t in toks.items()},
            started_at=r["started_at"].isoformat() if r["started_at"] else None,
            completed_at=r["finished_at"].isoformat() if r["finished_at"] else None,
            total_time=float(r["wall_time_s"] or 0), error=err))

    c = outcomes.Counts.of_row(first["row"])
    # no scored/unscored counts: inspect reads them as samples left out of every mean, while a failed
    # episode counts by its plan's policy (as_wrong: a 0 in the mean); each metric's n is in its metadata
    res = [log.EvalScore(name=x["name"], scorer=x["judge"] or "dateline",
                         params={"judge": x["judge"] or None, "scope": x["scope"],
                                 "score_failures": first["params"].get("score_failures")},
                         metrics={m: log.EvalMetric(name=m, value=float(d["value"]),
                                                    metadata={k: d[k] for k in ("n", "lo", "hi", "interval")})
                                  for m, d in x["metrics"].items()})
           for x in results(records)]
    marks = sorted({m for rec in records for m in rec["tags"]["dateline.marks"].split(", ") if m != "none"})
    sampling: dict[str, Any] = next((json.loads(cl["params"] or "{}") for v in vs for cl in v.calls), {})
    engine = json.loads(vs[0].row["engine"] or "{}") if vs else {}
    starts = [v.row["started_at"] for v in vs if v.row["started_at"]]
    ends = [v.row["finished_at"] for v in vs if v.row["finished_at"]]
    run_key = stable_hash(str(Path(run_dir).resolve()) if not is_uri(run_dir) else run_dir)
    revision = (log.EvalRevision(type="git", origin="", commit=str(prov["commit"]), dirty=bool(prov.get("dirty")))
                if prov.get("commit") else None)
    spec = log.EvalSpec(
        eval_id=stable_hash(run_key, bench, h), run_id=run_key,
        created=(min(starts) if starts else dt.datetime.now(dt.UTC)).isoformat(),
        task=f"dateline/{bench}", task_id=h, task_version=str(engine.get("prompt") or 0),
        task_display_name=str(first["name"]).split(" [")[0], task_args=data,
        solver=f"dateline/{bench}", solver_args=agent, tags=marks or None,
        dataset=log.EvalDataset(name=bench, samples=c.n_planned,
                                sample_ids=sorted({str(v.row["task_id"]) for v in vs})),
        model=model_name,
        model_generate_config=model.GenerateConfig(max_tokens=sampling.get("max_tokens"),
                                                   temperature=sampling.get("temperature"),
                                                   top_p=sampling.get("top_p")),
        config=log.EvalConfig(epochs=len(seeds) or 1), revision=revision,
        packages={"dateline": str(prov.get("dateline") or dateline_version()), **(prov.get("packages") or {})},
        metadata={"dateline": {"run_dir": str(run_dir), "benchmark": bench, "config_hash": h, "engine": engine,
                               "judges": [rec["judge"] for rec in records], "exported_by": dateline_version(),
                               "provenance": dict(prov)}},
        viewer=viewer.ViewerConfig(trust_content=False))       # model output and fetched web text: plain text
    counts = {k: first["metrics"].get(k) for k in ("n_planned", "n_scored", "n_error", "n_budget_stopped",
                                                    "n_stopped_early", "n_not_run", "n_outside_plan")}
    # per judge: the tags MLflow and W&B get (marks, coverage, an adaptive run's decision) and an
    # adaptive run's interval (a configuration it stopped early has no bare mean: no results score)
    by_judge = {rec["judge"] or "none": {k: v for k, v in rec["tags"].items() if k.startswith("dateline.")}
                | {k: v for k, v in rec["metrics"].items() if k.startswith("adaptive.")} for rec in records}
    eval_log = log.EvalLog(
        status="success", eval=spec,
        plan=log.EvalPlan(name="dateline", steps=[log.EvalPlanStep(solver=f"dateline/{bench}", params=agent)]),
        results=log.EvalResults(total_samples=c.n_planned, completed_samples=c.n_scored, scores=res,
                                metadata={"counts": counts, "marks": marks, "by_judge": by_judge}),
        stats=log.EvalStats(started_at=min(starts).isoformat() if starts else "",
                            completed_at=max(ends).isoformat() if ends else "",
                            model_usage={k: usage_of(t) for k, t in total.items()}),
        tags=marks, samples=samples)
    log.write_eval_log(eval_log, str(path))
