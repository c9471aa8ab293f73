"""The inspect_ai eval logs of a run dir, one per configuration: each episode's plain data (``plain``)
as inspect's types (a sample, its messages and scores), the log's spec and results, written with
inspect's own writer. The only module that imports inspect_ai, the optional extra: it takes seconds
to import, so :func:`load_inspect_ai` imports it when a log is built, and says what to install when
it is missing."""

from __future__ import annotations

import datetime as dt
import json
import tempfile
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.config import stable_hash
from engine.errors import CliError
from engine.protocol import Row
from engine.provenance import dateline_version
from engine.scoring import outcomes
from engine.storage import EpisodeStore, is_uri, sub_uri, upload_tree
from ray_jobs.outputs.inspect import plain
from ray_jobs.outputs.report import episodes as ev
from ray_jobs.outputs.runs_behind import RunsBehind

if TYPE_CHECKING:
    from inspect_ai import log, model, scorer, tool, viewer


def load_inspect_ai() -> None:
    """Import inspect_ai's modules into this module's globals (where the functions below find
    them), or raise a CliError naming the extra that installs it."""
    global log, model, scorer, tool, viewer
    try:
        from inspect_ai import log, model, scorer, tool, viewer
    except ImportError as e:
        raise CliError(f"--to inspect needs inspect_ai, which is not installed ({e}): install the export extra, "
                       "pip install 'dateline[export]'") from e


def write_logs(run_dir: str, records: Sequence[Mapping[str, Any]], log_dir: str | None = None) -> list[str]:
    """Write one inspect eval log per configuration of ``run_dir`` into ``log_dir`` (default
    ``RUN_DIR/_inspect``; a URI is written locally, then uploaded). ``records``: export.py's
    records of the run dir (one per benchmark, configuration and judge). What was written, a line each."""
    target = log_dir or (sub_uri(run_dir, plain.FOLDER) if is_uri(run_dir) else str(Path(run_dir) / plain.FOLDER))
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for rec in records:
        groups[(rec["benchmark"], rec["config_hash"])].append(rec)
    behind = RunsBehind(EpisodeStore(run_dir))      # the provenance files read once, not per configuration
    lines = []
    with tempfile.TemporaryDirectory(prefix="dateline-inspect-") as tmp:
        local = Path(tmp) if is_uri(target) else Path(target)
        local.mkdir(parents=True, exist_ok=True)
        for (bench, h), recs in sorted(groups.items()):
            vs = plain.views(run_dir, bench, h)
            path = local / plain.log_name(bench, h)
            load_inspect_ai()
            log.write_eval_log(_eval_log(run_dir, recs, vs, behind.provenance(h)), str(path))
            where = sub_uri(target, path.name) if is_uri(target) else str(path)
            n_err = sum(v.row["status"] != "ok" for v in vs)
            lines.append(f"inspect {where}: {recs[0]['name'].split(' [')[0]} ({len(vs)} samples, {n_err} with an "
                         f"error; {len(recs)} judge view(s))")
        if is_uri(target):
            upload_tree(local, target)
    return lines


def _eval_log(run_dir: str, records: Sequence[Mapping[str, Any]], vs: list[ev.EpisodeView],
              prov: Mapping[str, Any]) -> log.EvalLog:
    """The configuration's ``EvalLog``: its spec, a sample per episode, its results and stats."""
    first = records[0]
    bench, model_name = str(first["benchmark"]), str(first["params"]["model"])
    seeds = {s: i + 1 for i, s in enumerate(sorted({int(v.row["seed"] or 0) for v in vs}))}
    marks = plain.marks(records)
    starts = [v.row["started_at"] for v in vs if v.row["started_at"]]
    ends = [v.row["finished_at"] for v in vs if v.row["finished_at"]]
    return log.EvalLog(
        status="success", eval=_spec(run_dir, records, vs, prov, marks, len(seeds) or 1),
        plan=log.EvalPlan(name="dateline", steps=[log.EvalPlanStep(solver=f"dateline/{bench}",
                                                                   params=_settings(first, "agent."))]),
        results=_results(records, marks),
        stats=log.EvalStats(started_at=min(starts).isoformat() if starts else "",
                            completed_at=max(ends).isoformat() if ends else "",
                            model_usage={k: _usage(t) for k, t in plain.total_usage(vs).items()}),
        tags=marks, samples=[_sample(v, bench, model_name, seeds[int(v.row["seed"] or 0)]) for v in vs])


def _settings(record: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """The record's parameters under ``prefix`` (``agent.``, ``benchmark.``), without it."""
    return {k[len(prefix):]: v for k, v in record["params"].items() if k.startswith(prefix)}


def _sample(v: ev.EpisodeView, bench: str, model_name: str, epoch: int) -> log.EvalSample:
    """One episode as a sample: its messages, final output, scores, usage, metadata and error."""
    r = v.row
    msgs = [_message(m) for m in plain.messages(v)]
    # the input: what the first prompt asks (its system message is the agent's, like a solver's)
    n_first = next((i for i, m in enumerate(msgs) if m.role == "assistant"), len(msgs))
    asked: list[model.ChatMessage] = [m for m in msgs[:n_first] if m.role != "system"]
    ok = r["status"] == "ok"
    toks = plain.usage(v)
    final = model.ChatMessageAssistant(content=str(r["output"] or ""), model=model_name, source="generate")
    output = model.ModelOutput(model=model_name, choices=[model.ChatCompletionChoice(
        message=final, stop_reason="stop" if ok else "unknown")], usage=_usage(toks.get(model_name, (0, 0))),
        time=float(r["wall_time_s"] or 0), metadata={"finish_reason": r["finish_reason"]})
    return log.EvalSample(
        id=str(r["task_id"]), epoch=epoch, uuid=v.episode_id,
        input=asked or f"{bench} task {r['task_id']}", target=v.reference or "",
        messages=msgs, output=output, scores={k: _score(s) for k, s in plain.scores(v).items()} or None,
        metadata=plain.sample_metadata(v), model_usage={k: _usage(t) for k, t in toks.items()},
        started_at=r["started_at"].isoformat() if r["started_at"] else None,
        completed_at=r["finished_at"].isoformat() if r["finished_at"] else None,
        total_time=float(r["wall_time_s"] or 0), error=None if ok else _error(r))


def _error(r: Row) -> log.EvalError:
    """An episode without a result: its status and stored error's first line; the whole error as
    the traceback."""
    text = f"{r['status']}: " + (str(r["error"] or "").strip().splitlines() or [outcomes.error_kind(r)])[0]
    return log.EvalError(message=text, traceback=str(r["error"] or text), traceback_ansi=str(r["error"] or text))


def _message(m: dict[str, Any]) -> model.ChatMessage:
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


def _score(s: dict[str, Any]) -> scorer.Score:
    if s.get("unscored"):
        return scorer.Score.unscored(reason="grader_failed", answer=s.get("answer"),
                                     explanation=s.get("explanation"), metadata=s.get("metadata"))
    return scorer.Score(value=s["value"], answer=s.get("answer"), explanation=s.get("explanation"),
                        metadata=s.get("metadata"))


def _usage(tokens: tuple[int, int]) -> model.ModelUsage:
    return model.ModelUsage(input_tokens=tokens[0], output_tokens=tokens[1], total_tokens=sum(tokens))


def _spec(run_dir: str, records: Sequence[Mapping[str, Any]], vs: list[ev.EpisodeView], prov: Mapping[str, Any],
          marks: list[str], epochs: int) -> log.EvalSpec:
    """The log's spec: the model, the agent settings (solver args), the benchmark settings (task
    args), the run's provenance, and plain-text transcripts (``trust_content=False``)."""
    first = records[0]
    bench, h, model_name = str(first["benchmark"]), str(first["config_hash"]), str(first["params"]["model"])
    sampling: dict[str, Any] = next((json.loads(cl["params"] or "{}") for v in vs for cl in v.calls), {})
    engine = json.loads(vs[0].row["engine"] or "{}") if vs else {}
    starts = [v.row["started_at"] for v in vs if v.row["started_at"]]
    run_key = stable_hash(str(Path(run_dir).resolve()) if not is_uri(run_dir) else run_dir)
    revision = (log.EvalRevision(type="git", origin="", commit=str(prov["commit"]), dirty=bool(prov.get("dirty")))
                if prov.get("commit") else None)
    return log.EvalSpec(
        eval_id=stable_hash(run_key, bench, h), run_id=run_key,
        created=(min(starts) if starts else dt.datetime.now(dt.UTC)).isoformat(),
        task=f"dateline/{bench}", task_id=h, task_version=str(engine.get("prompt") or 0),
        task_display_name=str(first["name"]).split(" [")[0], task_args=_settings(first, "benchmark."),
        solver=f"dateline/{bench}", solver_args=_settings(first, "agent."), tags=marks or None,
        dataset=log.EvalDataset(name=bench, samples=outcomes.Counts.of_row(first["row"]).n_planned,
                                sample_ids=sorted({str(v.row["task_id"]) for v in vs})),
        model=model_name,
        model_generate_config=model.GenerateConfig(max_tokens=sampling.get("max_tokens"),
                                                   temperature=sampling.get("temperature"),
                                                   top_p=sampling.get("top_p")),
        config=log.EvalConfig(epochs=epochs), revision=revision,
        packages={"dateline": str(prov.get("dateline") or dateline_version()), **(prov.get("packages") or {})},
        metadata={"dateline": {"run_dir": str(run_dir), "benchmark": bench, "config_hash": h, "engine": engine,
                               "judges": [rec["judge"] for rec in records], "exported_by": dateline_version(),
                               "provenance": dict(prov)}},
        viewer=viewer.ViewerConfig(trust_content=False))       # model output and fetched web text: plain text


def _results(records: Sequence[Mapping[str, Any]], marks: list[str]) -> log.EvalResults:
    """The configuration's rows of the metrics table: a score per judge and scope, the counts, marks
    and, per judge, the tags MLflow and W&B get."""
    first = records[0]
    c = outcomes.Counts.of_row(first["row"])
    # no scored/unscored counts: inspect reads them as samples left out of every mean, while a failed
    # episode counts by its plan's policy (as_wrong: a 0 in the mean); each metric's n is in its metadata
    scores = [log.EvalScore(name=x["name"], scorer=x["judge"] or "dateline",
                            params={"judge": x["judge"] or None, "scope": x["scope"],
                                    "score_failures": first["params"].get("score_failures")},
                            metrics={m: log.EvalMetric(name=m, value=float(d["value"]),
                                                       metadata={k: d[k] for k in ("n", "lo", "hi", "interval")})
                                     for m, d in x["metrics"].items()})
              for x in plain.results(records)]
    counts = {k: first["metrics"].get(k) for k in ("n_planned", "n_scored", "n_error", "n_budget_stopped",
                                                    "n_stopped_early", "n_not_run", "n_outside_plan")}
    # per judge: the tags MLflow and W&B get (marks, coverage, an adaptive run's decision) and an
    # adaptive run's interval (a configuration it stopped early has no bare mean: no results score)
    by_judge = {rec["judge"] or "none": {k: v for k, v in rec["tags"].items() if k.startswith("dateline.")}
                | {k: v for k, v in rec["metrics"].items() if k.startswith("adaptive.")} for rec in records}
    return log.EvalResults(total_samples=c.n_planned, completed_samples=c.n_scored, scores=scores,
                           metadata={"counts": counts, "marks": marks, "by_judge": by_judge})
