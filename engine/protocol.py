"""The small protocol every benchmark implements, and the records the runtime moves around.

A benchmark folder ``engine/benchmarks/<name>/`` exposes ``BENCHMARK``, an object with:

* ``name``, ``benchmark_schema`` and ``agent_schema`` (dataclasses behind its Hydra groups),
* ``evaluation_fields``: benchmark config fields that change only how finished episodes are
  judged or which rows load, never an episode's result; they are left out of episode ids, so
  changing them re-runs no episode (a resumed run re-judges instead),
* ``validate(cfg)``: checks beyond types, before any actor starts,
* ``load_tasks(cfg)``: the tasks (each has ``task_id``),
* ``corpus(cfg)``: the dated documents the shared index holds (may be empty),
* ``episode_fields``: the extra, typed columns of its ``episodes`` rows,
* ``run_episode(task, ctx)``: one episode, async, given an :class:`EpisodeContext`,
* ``uses_model(agent_cfg)``: False for model-free baselines (no replica is started),
* ``episode_values(rows)``: per scored episode (status ok, with its judgements), the values
  whose means are its metrics; the means themselves, over the configuration's plan, are taken
  in one place for every benchmark (:mod:`engine.scoring.outcomes`),

and, with defaults in :class:`BenchmarkBase` for benchmarks that need none of them:

* ``services(cfg)``: benchmark-specific Ray actors episodes talk to (livenews's offline web),
* ``judge_requests(row, judged)`` / ``parse_judgement(key, text)`` / ``judge_prompt_version``:
  the judge stage that runs
  after generation, batched over all episodes, in rounds: ``judged`` maps every episode id (and
  task-level ids such as ``task:<id>``) to the judgements made so far, so a request may depend
  on an earlier round's answer (analyst verifies the claims extracted in round one). A streaming
  judge calls ``judge_requests`` on a thread of its own while answers arrive on its loop: read
  ``judged`` by key (``get``, ``in``, ``[]``), never iterate it,
* ``tables(metric_rows)``: paper-layout tables (Markdown) from the metrics table,
* ``failure_values``: the value a planned episode without a scored result (an error, a budget
  stop, one that never ran) counts as in a metric under ``run.score_failures=as_wrong`` (0 for an
  accuracy; metrics it does not list are means over scored episodes only), and
  ``task_failure_values(task)`` where a task differs (None: ``failure_values``),
* ``judge_metrics``: the metrics that need a judge (not produced at all when none ran),
* ``metric_order``: the order metrics are listed in,
* ``metric_bounds``, ``metric_kinds``: a metric's range where not [0, 1]; what it is (its interval follows),
* ``metrics(rows)``: metrics that are not means of ``episode_values`` (spreads, counts), over
  the scored rows,
* ``prompt_version``: a version of the agent's prompt text (part of every episode id),
* ``config_warnings(agent)``: what every number of a configuration must be read with,
  ``data_warnings(data)`` the same for what its data is,
* ``episode_reference(row)``: what an episode's output is compared with (the episode viewer),
* ``pairwise``: a :class:`PairwiseSpec` when outputs can be judged two at a time,
* ``builders``: the pipelines that make its data (:mod:`engine.build`), by name.

The runtime (dispatch, storage, drivers) knows nothing else about a benchmark. :class:`Benchmark`
states this contract as a type; ``get_benchmark`` checks a folder's ``BENCHMARK`` against it and
returns it as that type, and each folder annotates ``BENCHMARK: Benchmark[...]`` so the type
checker holds it to the contract.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from engine.inputs.order import TaskOrder, ordered
from engine.scoring.kinds import MetricKind
from indexes.corpus import Document

if TYPE_CHECKING:
    from engine.config.schema import Config
    from engine.llm import Completion


@dataclass(frozen=True)
class DocHit:
    doc_id: str
    text: str
    date: dt.date
    score: float


class IndexClient(Protocol):
    """What an episode sees of the shared index (the Ray actor, or a local one in tests)."""

    def search(self, queries: Sequence[str], before: Sequence[dt.date], k: int,
               threshold: float | None) -> Awaitable[list[list[DocHit]]]: ...

    def embed(self, texts: Sequence[str]) -> Awaitable[npt.NDArray[np.float32]]: ...


class ChatModel(Protocol):
    """What an episode calls as ``ctx.llm``: :class:`engine.llm.EpisodeClient` in a run, a scripted
    model in tests. ``json_schema`` / ``regex`` constrain decoding; ``temperature`` overrides the
    client's own for one call."""

    async def chat(self, messages: list[dict[str, str]], max_tokens: int,
                   json_schema: dict[str, Any] | None = None, seed: int | None = None,
                   regex: str | None = None, temperature: float | None = None) -> Completion: ...


class Task(Protocol):
    """A benchmark's task, as the runtime sees it: an id; the rest is the benchmark's."""

    @property
    def task_id(self) -> str: ...


TaskT = TypeVar("TaskT", bound=Task)


@dataclass
class StepRecord:
    step: int
    turn: str                 # action | choose | arguments | rephrase | baseline
    observation_chars: int
    raw_output: str
    parsed_action: str        # JSON, "" when unparseable
    result: str
    ok: bool
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0
    call: int = -1            # the model call behind it (its transcript: the calls table), -1 if none


@dataclass
class EpisodeContext:
    episode_id: str
    seed: int
    agent: Any                       # the benchmark's agent config dataclass (its agent_schema)
    llm: ChatModel | None            # None for model-free baselines (uses_model() is False)
    index: IndexClient | None
    top_k: int = 5
    threshold: float | None = 0.7
    steps: list[StepRecord] = field(default_factory=list)
    on_step: Callable[[StepRecord], None] | None = None   # live progress
    # name -> proxy of a ServiceSpec actor (a Ray actor handle, or the object itself in tests)
    services: dict[str, Any] = field(default_factory=dict)
    workdir: Path | None = None           # this episode's folder under RUN_DIR/artifacts/
    model_path: str = ""                  # the served model's local folder ("" for external endpoints)
    _calls_seen: int = 0                  # model calls the steps recorded so far account for

    @property
    def model(self) -> ChatModel:
        """``llm`` for a benchmark whose agent uses a model (a model-free baseline has none)."""
        if self.llm is None:
            raise RuntimeError(f"episode {self.episode_id}: the agent calls a model, but this run has none "
                               "(the benchmark's uses_model() said the agent needs no model)")
        return self.llm

    def record(self, **kw: Any) -> StepRecord:
        """A step; it points at the newest model call made since the previous step, if any."""
        made = getattr(self.llm, "calls", None)          # EpisodeClient keeps its call records
        calls = len(made) if isinstance(made, list) else 0
        if calls > self._calls_seen and "call" not in kw:
            kw["call"] = calls - 1
        self._calls_seen = calls
        rec = StepRecord(step=len(self.steps), **kw)
        self.steps.append(rec)
        if self.on_step is not None:
            self.on_step(rec)
        return rec


@dataclass
class EpisodeOutcome:
    output: str                                   # the final artifact (article, answer, report)
    finish_reason: str
    extras: dict[str, Any] = field(default_factory=dict)   # values of the benchmark's episode_fields


@dataclass(frozen=True)
class MetricRow:
    metric: str
    value: float
    n: int
    # the 95% interval of a mean (engine.scoring.stats.interval): lo, hi (None: no interval) and how it was
    # made (exact | bootstrap | too_few_tasks; "" for a value that is not a mean, e.g. a spread)
    lo: float | None = None
    hi: float | None = None
    interval: str = ""


@dataclass(frozen=True)
class ServiceSpec:
    """A benchmark-specific actor: ``factory(**kwargs)`` is built once per run (as a Ray actor on
    a cluster, in-process in tests) and every episode reaches it as ``ctx.services[name]``,
    whose methods are awaited. Keep kwargs small (paths, configs): the actor loads its own data."""
    name: str
    factory: Any
    kwargs: dict[str, Any] = field(default_factory=dict)
    num_cpus: float = 0.5
    identity: str = ""            # equal identities share one actor across the runs of a sweep


@dataclass(frozen=True)
class JudgeRequest:
    """One judge call for one episode; ``key`` names it within the episode (e.g. "grade")."""
    episode_id: str
    key: str
    messages: list[dict[str, str]]
    max_tokens: int = 16
    json_schema: dict[str, Any] | None = None    # constrain the answer (vLLM structured outputs)


@dataclass(frozen=True)
class PairwiseSpec:
    """How a benchmark's outputs are judged two at a time (``dateline pairwise``): the judging
    protocols it defines, the dimensions a verdict may break down into, and the text a task
    holds as its reference candidate. A verdict is the JSON string ``parse`` returns:
    ``{"overall": "first"|"second", "dimensions": {name: "first"|"second"|"tie"|null}}``."""
    protocols: tuple[str, ...]
    dimensions: tuple[str, ...]
    messages: Callable[[str, str, str], list[dict[str, str]]]     # (protocol, first, second)
    parse: Callable[[str, str], str | None]                       # (protocol, text) -> verdict
    json_schema: Callable[[str], dict[str, Any]]                  # protocol -> output schema
    reference: Callable[[Any], str]                               # task -> reference text or ""
    prompt_version: str = ""                                      # part of the judge identity


Row = dict[str, Any]          # an episodes row (Parquet -> Python): typed columns, per benchmark
Judged = dict[str, dict[str, "str | None"]]   # episode id -> judge key -> verdict (None: failed)


@runtime_checkable
class Benchmark(Protocol[TaskT]):
    """The contract of a benchmark folder's ``BENCHMARK`` (see the module docstring).

    ``cfg`` is the composed :class:`engine.config.Config`; its ``benchmark`` and ``agent`` are
    instances of this benchmark's ``benchmark_schema`` and ``agent_schema`` (checked by
    ``engine.config.validate`` before any of these methods runs)."""
    # Read-only members (plain class attributes in an implementation).
    @property
    def name(self) -> str: ...
    @property
    def benchmark_schema(self) -> type: ...
    @property
    def agent_schema(self) -> type: ...
    @property
    def episode_fields(self) -> list[pa.Field[Any]]: ...
    @property
    def evaluation_fields(self) -> tuple[str, ...]: ...
    @property
    def judge_prompt_version(self) -> str: ...
    @property
    def pairwise(self) -> PairwiseSpec | None: ...
    @property
    def primary_metrics(self) -> tuple[str, ...]: ...
    @property
    def curve(self) -> tuple[str, str] | None: ...
    @property
    def per_task_metric(self) -> str | None: ...
    @property
    def failure_values(self) -> dict[str, float]: ...
    @property
    def judge_metrics(self) -> tuple[str, ...]: ...
    @property
    def metric_order(self) -> tuple[str, ...]: ...
    @property
    def lower_is_better(self) -> tuple[str, ...]: ...
    @property
    def metric_bounds(self) -> dict[str, tuple[float, float]]: ...
    @property
    def metric_kinds(self) -> dict[str, MetricKind]: ...
    @property
    def prompt_version(self) -> str: ...

    def validate(self, cfg: Config) -> None: ...
    def load_tasks(self, cfg: Config) -> Sequence[TaskT]: ...
    def corpus(self, cfg: Config) -> list[Document]: ...
    async def run_episode(self, task: TaskT, ctx: EpisodeContext) -> EpisodeOutcome: ...
    def uses_model(self, agent_cfg: Any) -> bool: ...
    def metrics(self, rows: list[Row]) -> list[MetricRow]: ...
    def services(self, cfg: Config) -> list[ServiceSpec]: ...
    def judge_requests(self, row: Row, judged: Judged) -> list[JudgeRequest]: ...
    def parse_judgement(self, key: str, text: str) -> str | None: ...
    def tables(self, metric_rows: list[Row]) -> dict[str, str]: ...
    def episode_values(self, rows: list[Row]) -> list[dict[str, float]]: ...
    def task_failure_values(self, task: TaskT) -> dict[str, float] | None: ...
    def config_warnings(self, agent: dict[str, Any]) -> list[str]: ...
    def episode_reference(self, row: Row) -> str: ...


class BenchmarkBase:
    """Defaults for the optional parts of the protocol."""
    # Benchmark config fields that never change an episode's result (see the module docstring).
    evaluation_fields: tuple[str, ...] = ()
    # Benchmark config fields that only set others (livenews's data_dir sets questions and pages):
    # left out of every identity, which holds what they set (engine/identity.py).
    alias_fields: tuple[str, ...] = ()
    pairwise: PairwiseSpec | None = None
    # Builders of its data (``engine.build.protocol.Builder``), by name: ``dateline build`` runs
    # ``<name>:<builder>`` (``engine.benchmarks.get_benchmark``); none by default.
    builders: dict[str, Any] = {}
    # What the report draws (ray_jobs/outputs/report/): metrics compared between configurations with
    # paired tests, an (agent field, metric) curve such as accuracy vs search budget, and a
    # metric shown task by task.
    # Version of the judge prompts (engine.scoring.judges.prompt_version over their text): part of the
    # judge identity, so judgements made under another prompt are never mixed with these.
    judge_prompt_version: str = ""
    primary_metrics: tuple[str, ...] = ()
    curve: tuple[str, str] | None = None
    per_task_metric: str | None = None
    # What a planned episode without a scored result counts as, per metric, under
    # run.score_failures=as_wrong (engine/scoring/outcomes.py); unlisted metrics are over scored episodes.
    failure_values: dict[str, float] = {}
    # Benchmark config fields that name data and may be Hugging Face hub ids (engine/inputs/hub.py).
    data_paths: tuple[str, ...] = ()
    # Metrics that exist only when a judge ran (never produced from "nothing was graded").
    judge_metrics: tuple[str, ...] = ()
    # Primary metrics where less is better (the report's headline and leaderboards rank by them).
    lower_is_better: tuple[str, ...] = ()
    # The range a per-episode metric lies in, where it is not [0, 1] (a percentage, a 1-5 scale):
    # anytime-valid intervals and racing (engine/scoring/anytime.py) need bounded values.
    metric_bounds: dict[str, tuple[float, float]] = {}
    # What each metric is (engine/scoring/kinds.py); every one must be declared (test_contract.py).
    metric_kinds: dict[str, MetricKind] = {}
    metric_order: tuple[str, ...] = ()
    # Version of the agent's prompt text (engine.scoring.judges.source_version of its prompts module):
    # part of every episode id, so a prompt edit never mixes into a configuration's results.
    prompt_version: str = ""

    def uses_model(self, agent_cfg: Any) -> bool:
        return True

    def corpus(self, cfg: Config) -> list[Document]:
        return []

    def services(self, cfg: Config) -> list[ServiceSpec]:
        return []

    def judge_requests(self, row: Row, judged: Judged) -> list[JudgeRequest]:
        return []

    def parse_judgement(self, key: str, text: str) -> str | None:
        raise NotImplementedError(f"{type(self).__name__} asked for judgements but cannot parse them")

    def tables(self, metric_rows: list[Row]) -> dict[str, str]:
        return {}

    def metrics(self, rows: list[Row]) -> list[MetricRow]:
        """Metrics that are not means of ``episode_values`` (spreads, counts); none by default."""
        return []

    def task_failure_values(self, task: Any) -> dict[str, float] | None:
        """What an episode of ``task`` counts as without a scored result, when it is not
        ``failure_values`` (a metric the task does not have); None: ``failure_values``."""
        return None

    def config_warnings(self, agent: dict[str, Any]) -> list[str]:
        """What every number of a configuration (its agent config, plain) must be read with,
        printed wherever they appear (the summary, tables, the report); none by default."""
        return []

    def data_warnings(self, data: dict[str, Any]) -> list[str]:
        """What every number over this data (the benchmark config, plain) must be read with, e.g. a
        SELF-VERIFIED release of ``dateline build``; none by default."""
        return []

    def episode_reference(self, row: Row) -> str:
        """What an episode's output is compared with (the human article, the gold answer, the
        reference report), for the episode viewer; "" when there is none."""
        return ""

    def episode_values(self, rows: list[Row]) -> list[dict[str, float]]:
        """For each scored row (same order), ``{metric: value}`` for the metrics that are means of
        per-episode values; :mod:`engine.scoring.outcomes` takes the means over the plan (failures count
        as ``failure_values`` under as_wrong) and the report bootstraps the same values."""
        return [{} for _ in rows]


def select_tasks(tasks: Sequence[TaskT], task_ids: Sequence[str] | None, limit: int | None,
                 where: str, order: TaskOrder | None = None) -> list[TaskT]:
    """``benchmark.task_ids`` (these tasks only; an id the data lacks is a ConfigError naming
    it), in the run's order (``order``: ``engine.inputs.order.task_order(cfg.run)``; None: the
    data's), then ``benchmark.limit`` (the first N of that order: under ``run.order=random`` a
    seeded random subset, the same for every configuration). They decide a configuration's task
    set and order (its plan), not its identity."""
    from engine.errors import ConfigError

    out = list(tasks)
    if task_ids:
        have = {t.task_id for t in out}
        unknown = sorted(set(task_ids) - have)
        if unknown:
            # Hydra reads an unquoted 20230106_0 as the number 202301060 (underscores group digits)
            mangled = {u: h for u in unknown if u.isdigit() for h in have if h.replace("_", "") == u}
            hint = (f"; Hydra read {next(iter(mangled.values()))} as the number {next(iter(mangled))}: quote the ids, "
                    f"e.g. 'benchmark.task_ids=[\"{next(iter(mangled.values()))}\"]'") if mangled else ""
            raise ConfigError(f"benchmark.task_ids: no such tasks in {where}: {unknown[:10]}"
                              + (f" (and {len(unknown) - 10} more)" if len(unknown) > 10 else "") + hint)
        keep = set(task_ids)
        out = [t for t in out if t.task_id in keep]
    if order is not None:
        out = ordered(out, [t.task_id for t in out], order)
    return out[:limit] if limit is not None else out


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, default=str, sort_keys=True)
