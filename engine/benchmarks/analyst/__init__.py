"""analyst (AnalystBench): long-form reports from source documents, vanilla (chunked map-reduce)
or agentic (a tool loop in a sandboxed working directory), scored in a batched judge stage by
checklists (figures 15-16), claim groundedness (figure 17 + verification against the sources)
and figure coverage (MiniLM caption similarity). Figure quality (figure 21) needs a
vision-capable judge; without one it is reported as not available, never estimated.
See ``../../../docs/design/analyst.md``."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from engine.benchmarks.analyst import generation, prompts, scoring
from engine.benchmarks.analyst.config import AnalystAgentConfig, AnalystBenchmarkConfig, row_config
from engine.benchmarks.analyst.data import SETTINGS, AnalystTask, load_tasks
from engine.benchmarks.analyst.sources import ByteCounter, chunk_sources, source_texts, token_counter
from engine.errors import ConfigError
from engine.protocol import BenchmarkBase, EpisodeContext, EpisodeOutcome, JudgeRequest, MetricRow

REPO_ROOT = Path(__file__).resolve().parents[3]


def _dir(p: str) -> Path:
    q = Path(p)
    return q if q.is_absolute() else REPO_ROOT / q


@functools.lru_cache(maxsize=8)
def _tasks(tasks_dir: str) -> dict[str, AnalystTask]:
    return {t.task_id: t for t in load_tasks(_dir(tasks_dir))}


@functools.lru_cache(maxsize=1)
def _embedder() -> Any:
    from indexes.embeddings import Embedder

    return Embedder()


@functools.lru_cache(maxsize=64)
def _evidence_index(tasks_dir: str, task_id: str) -> tuple[list[str], np.ndarray]:
    """The task's sources as ~300-word passages with their MiniLM vectors (claim verification)."""
    task = _tasks(tasks_dir)[task_id]
    passages = chunk_sources(source_texts(task.sources_dir, preview_rows=10**6, full_rows=10**6), 1500, ByteCounter())
    return passages, _embedder().encode(passages)


class AnalystBenchmark(BenchmarkBase):
    name = "analyst"
    benchmark_schema = AnalystBenchmarkConfig
    agent_schema = AnalystAgentConfig
    evaluation_fields = ("n_criteria", "figure_match_threshold", "evidence_k", "max_claims", "judge_max_tokens",
                         "checklist_max_tokens")
    primary_metrics = ("checklist_pct", "hallucination_pct")
    per_task_metric = "checklist_pct"
    episode_fields = [
        pa.field("mode", pa.string()), pa.field("setting", pa.string()), pa.field("report_tokens", pa.int32()),
        *[pa.field(n, pa.int32()) for n in ("chunks", "map_calls", "reduce_calls", "steps", "code_runs",
                                            "code_failures", "parse_failures")],
        pa.field("figures_written", pa.list_(pa.string())), pa.field("generation_info", pa.string()),
    ]

    def validate(self, cfg: Any) -> None:
        a, b = cfg.agent, cfg.benchmark
        if a.mode not in ("vanilla", "agentic"):
            raise ConfigError(f"agent.mode: must be vanilla or agentic, got {a.mode!r}")
        if a.setting not in SETTINGS:
            raise ConfigError(f"agent.setting: must be one of {SETTINGS}, got {a.setting!r}")
        if a.mode == "agentic" and a.setting == "T":
            raise ConfigError("agent.setting: T (no sources) has no files for an agent; use mode=vanilla")
        for key in ("context_tokens", "map_max_tokens", "report_max_tokens", "max_steps", "max_tokens_action",
                    "max_episode_tokens", "code_memory_mb"):
            if getattr(a, key) < 1:
                raise ConfigError(f"agent.{key}: must be >= 1, got {getattr(a, key)}")
        if a.map_max_tokens + 512 >= a.context_tokens or a.report_max_tokens + 512 >= a.context_tokens:
            raise ConfigError("agent.context_tokens: must leave room for the prompt beyond map/report_max_tokens")
        if not 0.0 <= b.figure_match_threshold <= 1.0:
            raise ConfigError("benchmark.figure_match_threshold: must be in [0, 1]")
        if not _dir(b.tasks_dir).is_dir():
            raise ConfigError(f"benchmark.tasks_dir: {_dir(b.tasks_dir)} is not a folder")

    def load_tasks(self, cfg: Any) -> list[AnalystTask]:
        b = cfg.benchmark
        tasks = load_tasks(_dir(b.tasks_dir))
        if b.task_ids:
            unknown = sorted(set(b.task_ids) - {t.task_id for t in tasks})
            if unknown:
                raise ConfigError(f"benchmark.task_ids: no such tasks in {b.tasks_dir}: {unknown}")
            tasks = [t for t in tasks if t.task_id in set(b.task_ids)]
        return tasks[: b.limit] if b.limit is not None else tasks

    async def run_episode(self, task: AnalystTask, ctx: EpisodeContext) -> EpisodeOutcome:
        a = ctx.agent
        count = token_counter(ctx.model_path or None)
        budget = generation.Budget(a.context_tokens, count)
        if a.mode == "vanilla":
            report, info = await generation.vanilla(task, ctx, budget)
            reason = "finish" if report.strip() else "no_report"
        else:
            if ctx.workdir is None:
                raise RuntimeError("agentic analyst episodes need a working directory (ctx.workdir)")
            report, info = await generation.agentic(task, ctx, budget, Path(ctx.workdir))
            reason = info.pop("finish_reason")
        extras = {"mode": a.mode, "setting": a.setting, "report_tokens": count(report) if report else 0,
                  "figures_written": info.pop("figures_written", []),
                  **{k: int(info.get(k, 0)) for k in ("chunks", "map_calls", "reduce_calls", "steps", "code_runs",
                                                       "code_failures", "parse_failures")},
                  "generation_info": json.dumps(info, sort_keys=True)}
        return EpisodeOutcome(output=report, finish_reason=reason, extras=extras)

    # -- judging ------------------------------------------------------------------------------
    def judge_requests(self, row: dict[str, Any], judged: dict[str, dict[str, str | None]]) -> list[JudgeRequest]:
        report = row["output"] or ""
        if not report.strip():
            return []
        b = row_config(row)
        task = _tasks(b.tasks_dir)[row["task_id"]]
        eid, mine = row["episode_id"], judged.get(row["episode_id"], {})
        out: list[JudgeRequest] = []
        criteria = list(task.checklist)
        if not criteria:
            tid = f"task:{task.task_id}"
            if "checklist" not in judged.get(tid, {}):
                excl = (f"Excluded content (not derivable from the sources; do not write criteria about it):\n"
                        f"{task.excluded.strip()}") if task.excluded.strip() else ""
                text = prompts.CHECKLIST_CREATION.format(instruction=task.instruction, ref_content=task.reference,
                                                         exclusion_text=excl, n_criteria=b.n_criteria)
                out.append(JudgeRequest(tid, "checklist", [{"role": "user", "content": text}], b.checklist_max_tokens))
            elif judged[tid]["checklist"]:
                criteria = json.loads(judged[tid]["checklist"] or "[]")
        for i, crit in enumerate(criteria):
            key = f"criterion:{i:02d}"
            if key not in mine:
                text = prompts.CHECKLIST_EVALUATION.format(instruction=task.instruction, response=report, criteria=crit)
                out.append(JudgeRequest(eid, key, [{"role": "user", "content": text}], b.judge_max_tokens))
        if "claims" not in mine:
            text = prompts.CLAIM_EXTRACTION.format(task=task.instruction, doc=report)
            out.append(JudgeRequest(eid, "claims", [{"role": "user", "content": text}], b.judge_max_tokens))
        elif (stored := scoring.stored_claims(mine["claims"])) is not None:
            claims = stored[: b.max_claims]
            todo = [(j, c) for j, c in enumerate(claims) if f"claim:{j:02d}" not in mine]
            if todo:
                passages, vecs = _evidence_index(b.tasks_dir, task.task_id)
                q = _embedder().encode([c for _, c in todo])
                top = np.argsort(-(q @ vecs.T), axis=1)[:, : b.evidence_k]
                for (j, claim), idx in zip(todo, top):
                    evidence = "\n\n---\n\n".join(passages[k] for k in sorted(idx))
                    text = scoring.CLAIM_VERIFICATION.format(evidence=evidence, claim=claim)
                    out.append(JudgeRequest(eid, f"claim:{j:02d}", [{"role": "user", "content": text}], 8))
        return out

    def parse_judgement(self, key: str, text: str) -> str | None:
        if key == "checklist":
            items = scoring.parse_checklist(text)
            return json.dumps(items) if items else None
        if key.startswith("criterion:"):
            r = scoring.parse_rating(text)
            return str(r) if r is not None else None
        if key == "claims":
            claims = scoring.parse_claims(text)
            return json.dumps(claims) if claims is not None else None
        if key.startswith("claim:"):
            v = scoring.parse_verdict(text)
            return None if v is None else ("SUPPORTED" if v else "UNSUPPORTED")
        raise KeyError(f"unknown analyst judgement {key!r}")

    # -- metrics ------------------------------------------------------------------------------
    def metrics(self, rows: list[dict[str, Any]]) -> list[MetricRow]:
        from engine.benchmarks.analyst.metrics import aggregate

        return aggregate(rows, _tasks, _embedder)

    def episode_values(self, rows: list[dict[str, Any]]) -> list[dict[str, float]]:
        from engine.benchmarks.analyst.metrics import episode_values

        return [episode_values(r, _tasks, _embedder) for r in rows]

    def tables(self, metric_rows: list[dict[str, Any]]) -> dict[str, str]:
        from engine.benchmarks.analyst.metrics import tables

        return tables(metric_rows)


BENCHMARK = AnalystBenchmark()
