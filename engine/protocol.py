"""The small protocol every benchmark implements, and the records the runtime moves around.

A benchmark folder ``engine/benchmarks/<name>/`` exposes ``BENCHMARK``, an object with:

* ``name``, ``benchmark_schema`` and ``agent_schema`` (dataclasses behind its Hydra groups),
* ``validate(cfg)``: checks beyond types, before any actor starts,
* ``load_tasks(cfg)``: the tasks (each has ``task_id``),
* ``corpus(cfg)``: the dated documents the shared index holds (may be empty),
* ``episode_fields``: the extra, typed columns of its ``episodes`` rows,
* ``run_episode(task, ctx)``: one episode, async, given an :class:`EpisodeContext`,
* ``uses_model(agent_cfg)``: False for model-free baselines (no replica is started),
* ``metrics(rows)``: metric rows from finished episode rows (with their judgements),

and, with defaults in :class:`BenchmarkBase` for benchmarks that need none of them:

* ``services(cfg)``: benchmark-specific Ray actors episodes talk to (livenews's offline web),
* ``judge_requests(row, judged)`` / ``parse_judgement(key, text)`` / ``judge_prompt_version``:
  the judge stage that runs
  after generation, batched over all episodes, in rounds: ``judged`` maps every episode id (and
  task-level ids such as ``task:<id>``) to the judgements made so far, so a request may depend
  on an earlier round's answer (analyst verifies the claims extracted in round one),
* ``tables(metric_rows)``: paper-layout tables (Markdown) from the metrics table,
* ``episode_values(rows)``: per-episode values behind the mean-type metrics, which the report
  resamples by task for confidence intervals,
* ``pairwise``: a :class:`PairwiseSpec` when outputs can be judged two at a time.

The runtime (dispatch, storage, drivers) knows nothing else about a benchmark.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Protocol, Sequence

import numpy as np
import pyarrow as pa

from indexes.corpus import Document


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

    def embed(self, texts: Sequence[str]) -> Awaitable[np.ndarray]: ...


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


@dataclass
class EpisodeContext:
    episode_id: str
    seed: int
    agent: Any                       # the benchmark's agent config dataclass
    llm: Any                         # engine.llm.ChatClient, or None for model-free baselines
    index: IndexClient | None
    top_k: int = 5
    threshold: float | None = 0.7
    steps: list[StepRecord] = field(default_factory=list)
    on_step: Any = None                   # callback(StepRecord), for live progress
    services: dict[str, Any] = field(default_factory=dict)   # name -> async proxy of a ServiceSpec actor
    workdir: Any = None                   # pathlib.Path: this episode's folder under RUN_DIR/artifacts/
    model_path: str = ""                  # the served model's local folder ("" for external endpoints)

    def record(self, **kw: Any) -> StepRecord:
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


class Benchmark(Protocol):
    name: str
    benchmark_schema: type
    agent_schema: type
    episode_fields: list[pa.Field]

    def validate(self, cfg: Any) -> None: ...
    def load_tasks(self, cfg: Any) -> list[Any]: ...
    def corpus(self, cfg: Any) -> list[Document]: ...
    async def run_episode(self, task: Any, ctx: EpisodeContext) -> EpisodeOutcome: ...
    def uses_model(self, agent_cfg: Any) -> bool: ...
    def metrics(self, rows: list[dict[str, Any]]) -> list[MetricRow]: ...
    def services(self, cfg: Any) -> list[ServiceSpec]: ...
    def judge_requests(self, row: dict[str, Any], judged: dict[str, dict[str, str | None]]) -> list[JudgeRequest]: ...
    def parse_judgement(self, key: str, text: str) -> str | None: ...
    def tables(self, metric_rows: list[dict[str, Any]]) -> dict[str, str]: ...
    def episode_values(self, rows: list[dict[str, Any]]) -> list[dict[str, float]]: ...


class BenchmarkBase:
    """Defaults for the optional parts of the protocol."""
    pairwise: PairwiseSpec | None = None
    # What the report draws (ray_jobs/report.py): metrics compared between configurations with
    # paired tests, an (agent field, metric) curve such as accuracy vs search budget, and a
    # metric shown task by task.
    # Version of the judge prompts (engine.judges.prompt_version over their text): part of the
    # judge identity, so judgements made under another prompt are never mixed with these.
    judge_prompt_version: str = ""
    primary_metrics: tuple[str, ...] = ()
    curve: tuple[str, str] | None = None
    per_task_metric: str | None = None

    def uses_model(self, agent_cfg: Any) -> bool:
        return True

    def corpus(self, cfg: Any) -> list[Document]:
        return []

    def services(self, cfg: Any) -> list[ServiceSpec]:
        return []

    def judge_requests(self, row: dict[str, Any], judged: dict[str, dict[str, str | None]]) -> list[JudgeRequest]:
        return []

    def parse_judgement(self, key: str, text: str) -> str | None:
        raise NotImplementedError(f"{type(self).__name__} asked for judgements but cannot parse them")

    def tables(self, metric_rows: list[dict[str, Any]]) -> dict[str, str]:
        return {}

    def episode_values(self, rows: list[dict[str, Any]]) -> list[dict[str, float]]:
        """For each row (same order), ``{metric: value}`` for the metrics that are means of
        per-episode values; the metric equals the mean over the rows that have the key. Rows
        that are not counted (e.g. failed runs) give ``{}``. The report bootstraps these."""
        return [{} for _ in rows]


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, default=str, sort_keys=True)
