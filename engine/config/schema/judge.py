"""Who judges and how a sweep decides: the judge stage (``judge=...``, :class:`JudgeConfig`), the
adaptive sweep strategies (``sweep=race|incumbent|halving``, :class:`SweepConfig`) and the
anytime-valid stop (``stop=anytime_valid``, :class:`StopConfig`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.config.schema.model import ModelConfig


@dataclass
class JudgeConfig:
    """Who runs a benchmark's judge stage (after generation, batched).

    * ``none`` (the default): no judge stage. Generation runs; judge-based metrics are not
      produced (the summary says "ungraded: name a judge"), never guessed.
    * ``self`` (``judge=self``, asked for explicitly): the run's own model judges its own outputs
      (its vLLM replicas or its external endpoint; no second server). Every number this judge
      produces is **self-judged**, and the report and the run summary say so.
    * ``hosted`` with ``hosted_model``: a second model, hosted as its own pool in the same job next
      to the model under test (``judge=hosted_model``; a config equal to ``model`` shares its pool).
      For ``dateline pairwise``, ``hosted`` without ``hosted_model`` hosts the pairwise ``model``.
    * ``openai_compatible``: any endpoint (``base_url`` + ``model``).

    The judge's identity (model and weights, endpoint kind, the benchmark's judge prompt version,
    the evaluation settings) keys every judgement; metrics are computed per identity, so judges
    and settings are never mixed. Whether a judge is the model under test is decided by weights
    identity, not by name (``engine.scoring.judges``)."""
    kind: str = "none"
    name: str = ""                 # defaults to the judging model's name
    # hosted: the judging model, when it is not the model under test (its own replicas and prices).
    hosted_model: ModelConfig | None = None
    base_url: str = ""
    model: str = ""
    api_key_env: str = ""
    temperature: float = 0.0
    max_attempts: int = 2          # a malformed judgement is retried, then recorded as a failure
    max_inflight: int = 8
    # Per call. Generous: a 3000-token generation (an analyst checklist) on a busy CPU replica runs ~20 min.
    # A call that times out is recorded and asked again by the next stage run.
    request_timeout_s: float = 1800.0
    connect_timeout_s: float = 10.0    # opening a connection to the judge (see model.connect_timeout_s)
    # Where judging runs: this many judge actors (Ray; a configuration's tasks are spread over
    # them), each asking for actor_cpus CPUs and actor_resources; 0 judges on a thread of the
    # driver. Not part of the judge's identity (where a verdict is computed does not change it).
    # actor_cpus 0 (the default) reserves nothing, so judge actors never wait for CPUs the
    # replicas and episode workers hold (Ray places them anywhere, the head included); on a
    # cluster whose head is small, reserve a CPU (judge.actor_cpus=1) or name a resource of the
    # worker nodes (judge.actor_resources) to keep them off it.
    actors: int = 1
    actor_cpus: float = 0.0
    actor_resources: dict[str, float] = field(default_factory=dict)
    actor_start_timeout_s: float = 300.0
    # openai_compatible judges: prices per million tokens for cost accounting (a hosted judge is
    # paid for by the model's replica uptime).
    price_input_per_mtok: float = 0.0
    price_output_per_mtok: float = 0.0


@dataclass
class SweepConfig:
    """``sweep=race|incumbent|halving``: stop the configurations of a sweep that cannot be what the
    sweep is looking for (engine/scoring/racing.py; docs/design/adaptive.md). ``none``: every
    configuration runs every task."""
    strategy: str = "none"          # none | race | incumbent | halving
    goal: str = "best"              # race: best | top:<k> | eps_best
    epsilon: float = 0.0            # eps_best: within this of the best, in the metric's [0, 1] scale
    alpha: float = 0.05             # the error level of every claim the sweep makes, split over its comparisons
    split: str = "bonferroni"       # how alpha is split: race over the K(K-1)/2 pairs, incumbent over K-1 challengers
    min_tasks: int = 10             # no decision before this many tasks
    check_every: int = 1            # a decision step every this many tasks
    rungs: list[float] = field(default_factory=lambda: [0.1, 0.3, 1.0])    # halving: fractions of the tasks
    eta: float = 3.0                # halving: keep the best 1/eta at each rung
    metric: str = ""                # what is raced on ("": the benchmark's first primary metric)


@dataclass
class StopConfig:
    """``stop=anytime_valid``: each configuration's anytime-valid interval of its full-test-set
    mean, and, with ``half_width`` set, it stops once the interval is that narrow."""
    rule: str = "none"              # none | anytime_valid
    half_width: float | None = None
    alpha: float = 0.05
    min_tasks: int = 10
    metric: str = ""
