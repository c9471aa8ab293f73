"""analyst (AnalystBench): long-form reports from source documents, vanilla (chunked map-reduce)
or agentic (a tool loop in a sandboxed working directory), scored in a batched judge stage by
the task's fixed checklist (built once per task: ``checklists.py``; scored with figure 16),
claim groundedness (figure 17 per report chunk: ``claims.py``, + verification against the
sources) and figure coverage (MiniLM caption similarity). An episode that writes no report is
attempted again (``agent.report_attempts``), then scored 0 where a report is scored. Figure
quality (figure 21) needs a vision-capable judge; without one it is reported as not available,
never estimated. See ``../../../docs/design/analyst.md``."""

from __future__ import annotations

import asyncio
import functools
import json
from typing import Any

import numpy as np
import pyarrow as pa

from engine.benchmarks.analyst import claims, generation, prompts, scoring
from engine.benchmarks.analyst import metrics as analyst_metrics
from engine.benchmarks.analyst.config import AnalystAgentConfig, AnalystBenchmarkConfig, row_config
from engine.benchmarks.analyst.data import SETTINGS, AnalystTask, load_task, load_tasks
from engine.benchmarks.analyst.sources import ByteCounter, chunk_sources, source_texts, token_counter
from engine.config import Config
from engine.errors import ConfigError
from engine.identity import prompt_version, source_version
from engine.inputs import quarantine
from engine.inputs.order import task_order
from engine.inputs.paths import data_path
from engine.protocol import (
    Benchmark,
    BenchmarkBase,
    EpisodeContext,
    EpisodeOutcome,
    JudgeRequest,
    MetricRow,
    dumps,
    select_tasks,
)
from engine.sandbox import ISOLATIONS, SandboxUnavailable, require_isolation

AUDIT_UNSAFE_WARNING = ("AUDIT_UNSAFE: the model's code ran without OS isolation (agent.sandbox=audit_unsafe: an "
                        "audit hook it can switch off); it could have read the task's reference and checklist, so "
                        "these numbers are not measurements")


@functools.lru_cache(maxsize=8)
def tasks_by_id(tasks_dir: str, checklists_dir: str = "") -> dict[str, AnalystTask]:
    """The tasks by id, for looking up tasks whose episodes ran: a bad folder of another task is
    skipped (logged), not fatal here (whether bad folders may be skipped at all is decided when
    a run loads its tasks, by ``benchmark.on_bad_rows``)."""
    with quarantine.skipping("skip", f"analyst tasks {data_path(tasks_dir)}") as bad:
        return {t.task_id: t for t in load_tasks(data_path(tasks_dir), checklists_dir=data_path(checklists_dir) if checklists_dir
                                                 else None, bad=bad)}


def _task(tasks_dir: str, checklists_dir: str, task_id: str) -> AnalystTask:
    """The task ``task_id``; when its folder no longer loads, the DataError saying why."""
    task = tasks_by_id(tasks_dir, checklists_dir).get(task_id)
    if task is None:
        load_task(data_path(tasks_dir) / task_id, data_path(checklists_dir) if checklists_dir else None)   # raises why
        raise KeyError(f"analyst task {task_id!r} is not in {data_path(tasks_dir)}")
    return task


def attempt_seed(seed: int, attempt: int) -> int:
    """The sampling seed of an episode's ``attempt`` (1: the episode's own seed)."""
    return seed + 100_003 * (attempt - 1)


@functools.lru_cache(maxsize=1)
def _embedder() -> Any:
    from indexes.embeddings import Embedder

    return Embedder()


@functools.lru_cache(maxsize=64)
def _evidence_index(tasks_dir: str, task_id: str) -> tuple[list[str], np.ndarray]:
    """The task's sources as ~300-word passages with their MiniLM vectors (claim verification)."""
    task = _task(tasks_dir, "", task_id)
    passages = chunk_sources(source_texts(task.sources_dir, preview_rows=10**6, full_rows=10**6), 1500, ByteCounter())
    return passages, _embedder().encode(passages)


class AnalystBenchmark(BenchmarkBase):
    name = "analyst"
    benchmark_schema = AnalystBenchmarkConfig
    agent_schema = AnalystAgentConfig
    # paths of data that may be Hugging Face hub ids (engine/inputs/hub.py)
    data_paths = ("tasks_dir", "checklists_dir")
    evaluation_fields = ("checklists_dir", "n_criteria", "checklist_max_tokens", "checklist_refine_rounds",
                         "checklist_pass_rating", "figure_match_threshold", "evidence_k", "max_claims",
                         "judge_max_tokens", "claims_chunk_tokens", "claims_max_tokens",
                         "on_bad_rows")   # picks which task folders load (like limit), not how one runs
    # the scoring prompts (the checklist is not the judge's: it is the task's, keyed by its own id)
    judge_prompt_version = prompt_version(prompts.CHECKLIST_EVALUATION, prompts.CLAIM_EXTRACTION,
                                          scoring.CLAIM_VERIFICATION)
    primary_metrics = ("checklist_pct", "hallucination_pct")
    lower_is_better = ("hallucination_pct",)
    # racing's ranges, from the kinds (the percentages: [0, 100]); the rest are in [0, 1] or unraced
    metric_bounds = {m: (k.lo, k.hi) for m, k in analyst_metrics.METRIC_KINDS.items() if k.unit == "%"}
    per_task_metric = "checklist_pct"
    failure_values = analyst_metrics.FAILURE_VALUES
    judge_metrics = analyst_metrics.JUDGE_METRICS
    metric_order = analyst_metrics.METRIC_ORDER
    metric_kinds = analyst_metrics.METRIC_KINDS
    prompt_version = source_version(prompts)
    episode_fields: list[pa.Field[Any]] = [
        pa.field("mode", pa.string()), pa.field("setting", pa.string()), pa.field("report_tokens", pa.int32()),
        *[pa.field(n, pa.int32()) for n in ("chunks", "map_calls", "reduce_calls", "steps", "code_runs",
                                            "code_failures", "parse_failures", "attempts")],
        pa.field("figures_written", pa.list_(pa.string())), pa.field("generation_info", pa.string()),
        pa.field("no_report_reason", pa.string()),     # "" when a report was written
    ]

    def validate(self, cfg: Config) -> None:
        a, b = cfg.agent, cfg.benchmark
        if a.mode not in ("vanilla", "agentic"):
            raise ConfigError(f"agent.mode: must be vanilla or agentic, got {a.mode!r}")
        if a.setting not in SETTINGS:
            raise ConfigError(f"agent.setting: must be one of {SETTINGS}, got {a.setting!r}")
        if a.mode == "agentic" and a.setting == "T":
            raise ConfigError("agent.setting: T (no sources) has no files for an agent; use mode=vanilla")
        for key in ("context_tokens", "map_max_tokens", "report_max_tokens", "max_steps", "max_tokens_action",
                    "max_episode_tokens", "code_memory_mb", "report_attempts", "code_disk_mb", "code_max_procs",
                    "observation_chars", "preview_rows", "full_table_rows"):
            if getattr(a, key) < 1:
                raise ConfigError(f"agent.{key}: must be >= 1, got {getattr(a, key)}")
        if not 0 < a.code_timeout_s <= 3600:
            raise ConfigError(f"agent.code_timeout_s: must be in (0, 3600], got {a.code_timeout_s}")
        if a.code_memory_mb < 128:
            raise ConfigError(f"agent.code_memory_mb: must be >= 128 (Python and pandas need it), got {a.code_memory_mb}")
        if a.sandbox not in ISOLATIONS:
            raise ConfigError(f"agent.sandbox: must be one of {ISOLATIONS}, got {a.sandbox!r}")
        if a.mode == "agentic":            # fail closed: no OS isolation, no agentic run
            try:
                require_isolation(a.sandbox)
            except SandboxUnavailable as e:
                raise ConfigError(f"agent.sandbox: {e}") from e
        if a.temperature is not None and not 0.0 <= a.temperature <= 2.0:
            raise ConfigError(f"agent.temperature: must be in [0, 2] or null, got {a.temperature}")
        for key in ("n_criteria", "checklist_max_tokens", "judge_max_tokens", "claims_chunk_tokens",
                    "claims_max_tokens", "evidence_k", "max_claims"):
            if getattr(b, key) < 1:
                raise ConfigError(f"benchmark.{key}: must be >= 1, got {getattr(b, key)}")
        if b.checklist_refine_rounds < 0:
            raise ConfigError("benchmark.checklist_refine_rounds: must be >= 0")
        if not 1 <= b.checklist_pass_rating <= 5:
            raise ConfigError("benchmark.checklist_pass_rating: must be in 1-5")
        if a.map_max_tokens + 512 >= a.context_tokens or a.report_max_tokens + 512 >= a.context_tokens:
            raise ConfigError("agent.context_tokens: must leave room for the prompt beyond map/report_max_tokens")
        if not 0.0 <= b.figure_match_threshold <= 1.0:
            raise ConfigError("benchmark.figure_match_threshold: must be in [0, 1]")
        if not data_path(b.tasks_dir).is_dir():
            raise ConfigError(f"benchmark.tasks_dir: {data_path(b.tasks_dir)} is not a folder")

    def load_tasks(self, cfg: Config) -> list[AnalystTask]:
        b = cfg.benchmark
        with quarantine.skipping(getattr(b, "on_bad_rows", "error"), f"analyst tasks {data_path(b.tasks_dir)}") as bad:
            tasks = load_tasks(data_path(b.tasks_dir), checklists_dir=data_path(b.checklists_dir) if b.checklists_dir else None,
                               bad=bad)
        return select_tasks(tasks, b.task_ids, b.limit, b.tasks_dir,
                            task_order(cfg))

    async def run_episode(self, task: AnalystTask, ctx: EpisodeContext) -> EpisodeOutcome:
        """Attempts until a report is written, at most ``agent.report_attempts``: each a fresh run
        of the pipeline or agent loop (a clean sandbox) with its own seed, its turns recorded in
        the episode's steps after an ``attempt`` marker step. Counters add up over attempts."""
        a = ctx.agent
        count = await asyncio.to_thread(token_counter, ctx.model_path or None)
        budget = generation.Budget(a.context_tokens, count)
        counters = dict.fromkeys(("chunks", "map_calls", "reduce_calls", "steps", "code_runs", "code_failures",
                                  "parse_failures"), 0)
        ends: list[str] = []
        report, info = "", dict[str, Any]()
        for attempt in range(1, a.report_attempts + 1):
            if attempt > 1:
                ctx.record(turn="attempt", observation_chars=0, raw_output="",
                           parsed_action=dumps({"attempt": attempt, "previous": ends[-1]}),
                           result=f"no report after attempt {attempt - 1} ({ends[-1]}): "
                                  f"attempt {attempt} of {a.report_attempts}", ok=True)
            seed = attempt_seed(ctx.seed, attempt)
            if a.mode == "vanilla":
                report, info = await generation.vanilla(task, ctx, budget, seed)
                reason = "finish" if report.strip() else "no_report"
            else:
                if ctx.workdir is None:
                    raise RuntimeError("agentic analyst episodes need a working directory (ctx.workdir)")
                report, info = await generation.agentic(task, ctx, budget, ctx.workdir, seed)
                reason = info.pop("finish_reason")
            ends.append(reason)
            for k in counters:          # chunks are the sources' (the same each attempt); the rest add up
                n = int(info.get(k, 0))
                counters[k] = max(counters[k], n) if k == "chunks" else counters[k] + n
            if report.strip():
                break
        written = bool(report.strip())
        extras = {"mode": a.mode, "setting": a.setting, "report_tokens": count(report) if written else 0,
                  "figures_written": info.pop("figures_written", []), **counters, "attempts": len(ends),
                  "no_report_reason": "" if written else f"no report after {len(ends)} attempt(s): {', '.join(ends)}",
                  "generation_info": json.dumps({**{k: v for k, v in info.items() if k not in counters},
                                                 "attempt_ends": ends}, sort_keys=True)}
        return EpisodeOutcome(output=report if written else "", finish_reason=reason, extras=extras)

    # -- judging ------------------------------------------------------------------------------
    def judge_requests(self, row: dict[str, Any], judged: dict[str, dict[str, str | None]]) -> list[JudgeRequest]:
        """Round 1: each criterion of the task's checklist (figure 16; keys ``criterion:<checklist
        id>:NN``) and claim extraction per report chunk (figure 17; ``claims:K``). Round 2: each
        chunk's first claims (its quota of ``max_claims``) verified (``claim:K:NN``). A task without
        a checklist gets no criterion requests: checklists are built once per task, before judging
        (``dateline analyst-checklists``), never by a judge on the fly."""
        report = row["output"] or ""
        if not report.strip():
            return []
        b = row_config(row)
        task = _task(b.tasks_dir, b.checklists_dir, row["task_id"])
        eid, mine = row["episode_id"], judged.get(row["episode_id"], {})
        out: list[JudgeRequest] = []
        for i, crit in enumerate(task.checklist):
            key = f"criterion:{task.checklist_id}:{i:02d}"
            if key not in mine:
                text = prompts.CHECKLIST_EVALUATION.format(instruction=task.instruction, response=report, criteria=crit)
                out.append(JudgeRequest(eid, key, [{"role": "user", "content": text}], b.judge_max_tokens))
        chunks = claims.report_chunks(report, b.claims_chunk_tokens)
        todo: list[tuple[str, str]] = []
        for k, (chunk, quota) in enumerate(zip(chunks, claims.quotas(len(chunks), b.max_claims))):
            key = f"claims:{k}"
            if key not in mine:
                text = prompts.CLAIM_EXTRACTION.format(task=task.instruction, doc=chunk)
                out.append(JudgeRequest(eid, key, [{"role": "user", "content": text}], b.claims_max_tokens))
            elif (stored := scoring.stored_claims(mine[key])) is not None:
                todo += [(f"claim:{k}:{j:02d}", c) for j, c in enumerate(stored[:quota])
                         if f"claim:{k}:{j:02d}" not in mine]
        if todo:
            passages, vecs = _evidence_index(b.tasks_dir, task.task_id)
            q = _embedder().encode([c for _, c in todo])
            top = np.argsort(-(q @ vecs.T), axis=1)[:, : b.evidence_k]
            for (key, claim), idx in zip(todo, top):
                evidence = "\n\n---\n\n".join(passages[k] for k in sorted(idx))
                text = scoring.CLAIM_VERIFICATION.format(evidence=evidence, claim=claim)
                out.append(JudgeRequest(eid, key, [{"role": "user", "content": text}], 8))
        return out

    def parse_judgement(self, key: str, text: str) -> str | None:
        # also reads keys of runs judged before checklists were fixed per task and claims chunked
        # ("checklist", "claims", "claim:NN", "criterion:NN"): stored answers are re-read through it
        if key == "checklist":
            items = scoring.parse_checklist(text)
            return json.dumps(items) if items else None
        if key.startswith("criterion:"):
            r = scoring.parse_rating(text)
            return str(r) if r is not None else None
        if key == "claims" or key.startswith("claims:"):
            found = scoring.parse_claims(text)
            return json.dumps(found) if found is not None else None
        if key.startswith("claim:"):
            v = scoring.parse_verdict(text)
            return None if v is None else ("SUPPORTED" if v else "UNSUPPORTED")
        raise KeyError(f"unknown analyst judgement {key!r}")

    # -- metrics ------------------------------------------------------------------------------
    def metrics(self, rows: list[dict[str, Any]]) -> list[MetricRow]:
        from engine.benchmarks.analyst.metrics import aggregate

        return aggregate(rows, tasks_by_id, _embedder)

    def episode_values(self, rows: list[dict[str, Any]]) -> list[dict[str, float]]:
        from engine.benchmarks.analyst.metrics import episode_values

        return [episode_values(r, tasks_by_id, _embedder) for r in rows]

    def tables(self, metric_rows: list[dict[str, Any]]) -> dict[str, str]:
        from engine.benchmarks.analyst.metrics import tables

        return tables(metric_rows)

    def task_failure_values(self, task: AnalystTask) -> dict[str, float] | None:
        return analyst_metrics.failure_values_for(task)

    def episode_reference(self, row: dict[str, Any]) -> str:
        b = row_config(row)
        task = tasks_by_id(b.tasks_dir, b.checklists_dir).get(row["task_id"])
        return task.reference if task is not None else ""

    def config_warnings(self, agent: dict[str, Any]) -> list[str]:
        if agent.get("mode") == "agentic" and agent.get("sandbox") == "audit_unsafe":
            return [AUDIT_UNSAFE_WARNING]
        return []


BENCHMARK: Benchmark[AnalystTask] = AnalystBenchmark()
