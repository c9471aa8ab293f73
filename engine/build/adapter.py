"""A builder exposed to the driver as a benchmark (``<benchmark>:<builder>``), so a build runs on
the run machinery with no second driver: items are its tasks, a draft is an episode on the
generator's pool, the checks are judge rounds on the verifier, and acceptance is a metric
(``kept``, with its interval, per configuration) like any other."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from engine.build.memo import COLUMN, memo_service
from engine.build.protocol import Builder, Verdict
from engine.config.values import stable_hash
from engine.protocol import (
    Benchmark,
    BenchmarkBase,
    EpisodeContext,
    EpisodeOutcome,
    Judged,
    JudgeRequest,
    Row,
    ServiceSpec,
)
from engine.scoring import kinds

if TYPE_CHECKING:
    from engine.config.schema import Config


class BuildBenchmark(BenchmarkBase):
    """``bench``'s builder ``builder`` as a :class:`~engine.protocol.Benchmark`."""

    def __init__(self, bench: Benchmark[Any], builder: Builder[Any]) -> None:
        self.base, self.builder = bench, builder
        self.name = f"{bench.name}:{builder.name}"
        self.benchmark_schema = builder.config_schema
        self.agent_schema = builder.draft_schema
        self.episode_fields: list[pa.Field[Any]] = [*builder.episode_fields, pa.field(COLUMN, pa.string())]
        self.evaluation_fields = builder.evaluation_fields
        self.prompt_version = builder.prompt_version
        # A new drafting prompt is a new configuration (engine/identity.py), not a second engine in
        # one: its drafts and checks never mix with the old ones, and the stored calls the new
        # prompt does not change (relevance) still come from the memo, which reads the whole run dir.
        self.prompt_in_config = True
        # check versions live in the judge keys (engine.build.protocol.stage_key), so that a changed
        # check re-asks only itself and what follows; the judge identity keeps none
        self.judge_prompt_version = ""
        self.primary_metrics = ("kept",)
        self.sets = builder.sets
        self.judge_metrics = ("kept", *(f"kept_{s}" for s in builder.sets), "pending")
        self.failure_values = {"kept": 0.0}
        # per-draft stages only: intake, deduplication and the split act on the whole set, at publish
        self.metric_order = (*self.judge_metrics, *(f"rejected_{s.name}" for s in builder.stages if s.model))
        # each draft is kept or not, pending or not, rejected at a stage or not: one yes/no each
        self.metric_kinds = {m: kinds.PROPORTION for m in self.metric_order}

    def validate(self, cfg: Config) -> None:
        self.builder.validate(cfg)

    def load_tasks(self, cfg: Config) -> Sequence[Any]:
        return self.builder.items(cfg)

    def services(self, cfg: Config) -> list[ServiceSpec]:
        return [*self.builder.services(cfg), memo_service(str(cfg.run.dir), model_key(cfg))]

    async def run_episode(self, task: Any, ctx: EpisodeContext) -> EpisodeOutcome:
        return await self.builder.draft(task, ctx)

    def judge_requests(self, row: Row, judged: Judged) -> list[JudgeRequest]:
        return self.builder.checks(row, judged)

    def parse_judgement(self, key: str, text: str) -> str | None:
        return self.builder.parse_check(key, text)

    def verdict(self, row: Row) -> Verdict:
        return self.builder.verdict(row)

    def episode_values(self, rows: list[Row]) -> list[dict[str, float]]:
        out = []
        for row in rows:
            v = self.builder.verdict(row)
            vals = {"kept": float(v.kept), "pending": float(v.pending)}
            vals |= {f"kept_{s}": float(v.kept and v.set == s) for s in self.sets}
            vals |= {f"rejected_{s.name}": float(not v.kept and not v.pending and v.stage == s.name)
                     for s in self.builder.stages if s.model}
            out.append(vals)
        return out

    def episode_reference(self, row: Row) -> str:
        v = self.builder.verdict(row)
        return f"{'kept (' + v.set + ')' if v.kept else 'rejected at ' + v.stage}: {v.reason}"


def model_key(cfg: Config) -> str:
    """The generator as a stored stage call is keyed by: its name, weights and sampling (as
    ``engine.identity.model_identity`` names a model, with its folder), hashed."""
    m = cfg.model
    return stable_hash({"name": m.name, "served_name": m.served_name or m.name, "path": m.path,
                        "base_url": m.base_url, "temperature": m.temperature, "top_p": m.top_p}, n=16)
