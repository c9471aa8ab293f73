"""The contract of a builder (design: ``../shared/design/house-and-build.md`` section 5).

A builder turns items (articles, objects, tasks) into benchmark data in stages. Stages that read
one item with the generator model run inside its draft (an episode: relevance, then drafting, in
LiveNewsBench's order); stages that check a draft run as judge rounds on a different model, the
verifier. Each stage has a prompt version:

* a draft stage's version is part of the builder's ``prompt_version`` (so of every draft id), and
  its calls are kept by content (:mod:`engine.build.memo`), so a changed drafting prompt re-asks
  the drafting call but not the relevance call before it;
* a check stage's version is part of its judge key (:func:`stage_key`, with the versions of the
  stages it reads), so a changed check re-asks that check and those after it, never the draft.

:meth:`Builder.verdict` decides each item from its draft row and checks: kept (into which set of
the release) or rejected, by which stage and why; those counts are the build's yield.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

import pyarrow as pa

from engine.config.values import stable_hash
from engine.protocol import EpisodeContext, EpisodeOutcome, Judged, JudgeRequest, Row, ServiceSpec, Task

if TYPE_CHECKING:
    from engine.config.schema import Config

ItemT = TypeVar("ItemT", bound=Task)

KEPT = "kept"


@dataclass(frozen=True)
class Stage:
    """One step of a pipeline: ``model`` is ``generator`` (inside the draft), ``verifier`` (a judge
    round) or ``""`` (no model: grouping, deduplication, the split); ``version`` is its prompt's."""
    name: str
    model: str
    version: str = ""
    doc: str = ""


def stage_key(stage: Stage, *reads: Stage) -> str:
    """The judge key of a verifier stage: its name and a hash of its prompt version and of the
    versions of the stages it reads, so changing any of them asks it again."""
    return f"{stage.name}@{stable_hash(stage.version, *[s.version for s in reads], n=8)}"


def stage_of(key: str) -> str:
    """The stage name in a judge key (``answer@1a2b3c4d`` -> ``answer``)."""
    return key.split("@", 1)[0]


@dataclass(frozen=True)
class Verdict:
    """What a build decided about one item: kept into ``set`` (e.g. ``main`` or ``longitudinal``)
    or rejected (``set`` is ""); ``stage`` decided it, ``reason`` says why (``kept`` when kept);
    ``record`` is what the release holds for it (kept items) or shows of it (rejected ones)."""
    item_id: str
    episode_id: str
    kept: bool
    set: str
    stage: str
    reason: str
    record: dict[str, Any] = field(default_factory=dict)
    pending: bool = False           # a check it needs has no answer yet (the verifier failed or was not run)


@runtime_checkable
class Builder(Protocol[ItemT]):
    """A benchmark's builder (``BenchmarkBase.builders[name]``), run as the benchmark
    ``<benchmark>:<name>`` by :class:`engine.build.adapter.BuildBenchmark`."""
    @property
    def name(self) -> str: ...
    @property
    def config_schema(self) -> type: ...        # the `benchmark` group node of a build (its name: the ref)
    @property
    def draft_schema(self) -> type: ...         # the `agent` group node (draft settings)
    @property
    def prompt_version(self) -> str: ...        # the draft stages' prompts: in every draft id
    @property
    def episode_fields(self) -> list[pa.Field[Any]]: ...
    @property
    def evaluation_fields(self) -> tuple[str, ...]: ...   # settings that change checks, never a draft
    @property
    def stages(self) -> tuple[Stage, ...]: ...  # in pipeline order, for counts and the report
    @property
    def sets(self) -> tuple[str, ...]: ...      # the release's sets of kept items ("main", ...)

    def validate(self, cfg: Config) -> None: ...
    def items(self, cfg: Config) -> Sequence[ItemT]: ...
    def services(self, cfg: Config) -> list[ServiceSpec]: ...
    async def draft(self, item: ItemT, ctx: EpisodeContext) -> EpisodeOutcome: ...
    def checks(self, row: Row, judged: Judged) -> list[JudgeRequest]: ...
    def parse_check(self, key: str, text: str) -> str | None: ...
    def verdict(self, row: Row) -> Verdict: ...     # row["judgements"]: its checks' answers
    def publish(self, verdicts: Sequence[Verdict], cfg: Config, out: Path) -> tuple[list[Verdict], dict[str, Any]]:
        """Write the release's data into ``out``; the verdicts after its own stages (duplicates
        rejected...) and what the manifest adds (``intake``: the intake counts)."""
        ...
