"""livenews (LiveNewsBench): fresh news questions answered with Search / Click / Finish over an
offline dated web, graded by the SimpleQA-style grader of figure 8 in a judge stage.
See ``../../../docs/design/livenews.md``."""

from __future__ import annotations

import datetime as dt
import functools
import json
from typing import Any

import pyarrow as pa

from engine.benchmarks.livenews import agent, metrics, prompts
from engine.benchmarks.livenews.build.builder import QA_BUILDER
from engine.benchmarks.livenews.config import LivenewsAgentConfig, LivenewsBenchmarkConfig
from engine.benchmarks.livenews.data import LiveQuestion, load
from engine.benchmarks.livenews.grader import GRADER_PROMPT, grader_prompt, parse_grade
from engine.config import Config
from engine.errors import ConfigError
from engine.identity import prompt_version, source_version
from engine.inputs.order import task_order
from engine.inputs.paths import data_path
from engine.protocol import (
    Benchmark,
    BenchmarkBase,
    EpisodeContext,
    EpisodeOutcome,
    JudgeRequest,
    MetricRow,
    ServiceSpec,
    select_tasks,
)


class LiveNewsBenchmark(BenchmarkBase):
    name = "livenews"
    benchmark_schema = LivenewsBenchmarkConfig
    agent_schema = LivenewsAgentConfig
    # judge_probes changes only the judging; on_bad_rows picks which rows load (like limit), a
    # question that loads runs the same either way
    # paths of data that may be Hugging Face hub ids (engine/inputs/hub.py)
    data_paths = ("questions", "pages")
    evaluation_fields = ("judge_probes", "on_bad_rows")
    # a release folder (dateline build): it sets questions and pages, which the identities hold
    alias_fields = ("data_dir", "split")
    # dateline build build=livenews: fresh questions from dated articles (the paper's section 2)
    builders = {"qa": QA_BUILDER}
    judge_prompt_version = prompt_version(GRADER_PROMPT)
    primary_metrics = ("accuracy", "answer_contains_gold")
    curve = ("max_searches", "accuracy")
    failure_values = metrics.FAILURE_VALUES
    judge_metrics = metrics.JUDGE_METRICS
    # the judge's own checks (benchmark.judge_probes) and their default minimum shares; below one, every
    # number the judge produced is marked JUDGE FAILED ITS CHECKS (engine/scoring/judge_checks.py;
    # conf/judge_checks.yaml sets other minimums)
    judge_checks = {"judge_probe_gold_ok": 0.9, "judge_probe_decoy_ok": 0.9}
    metric_order = metrics.METRIC_ORDER
    metric_kinds = metrics.METRIC_KINDS
    prompt_version = source_version(prompts)
    # its questions are dated (the event date, stored as the row's ``cutoff``): every number is also
    # shown over the questions after the model's knowledge cutoff (engine/scoring/cutoff.py)
    date_field = "cutoff"
    episode_fields: list[pa.Field[Any]] = [
        pa.field("question", pa.string()), pa.field("gold", pa.string()), pa.field("cutoff", pa.string()),
        pa.field("source_domain", pa.string()), pa.field("mode", pa.string()),
        *[pa.field(n, pa.int32()) for n in ("max_searches", "max_visits", "n_searches", "n_visits",
                                            "n_refused_visits", "n_turns")],
        pa.field("returned_urls", pa.list_(pa.string())), pa.field("visited_urls", pa.list_(pa.string())),
        pa.field("latest_result_date", pa.string()),
    ]

    def data_warnings(self, data: dict[str, Any]) -> list[str]:
        """A release of ``dateline build`` whose verifier was its generator says so with every number."""
        return release_marks(data.get("data_dir"))

    def validate(self, cfg: Config) -> None:
        b, a = cfg.benchmark, cfg.agent
        if b.source not in ("livenewsbench", "realtimeqa"):
            raise ConfigError(f"benchmark.source: must be livenewsbench or realtimeqa, got {b.source!r}")
        if a.mode not in ("search", "no_search"):
            raise ConfigError(f"agent.mode: must be search or no_search, got {a.mode!r}")
        for key in ("max_searches", "max_visits"):
            if getattr(a, key) < 0:
                raise ConfigError(f"agent.{key}: must be >= 0, got {getattr(a, key)}")
        if a.max_tokens_turn < 1:
            raise ConfigError(f"agent.max_tokens_turn: must be >= 1, got {a.max_tokens_turn}")
        need = a.max_searches + a.max_visits + 1 if a.mode == "search" else 1
        if a.max_turns is not None and a.max_turns < need:
            # a cap below the budgets would end episodes as max_turns before the budgets bind, so a
            # budget sweep (Table 3) would measure the cap; leave it unset to derive it
            raise ConfigError(f"agent.max_turns: {a.max_turns} is below max_searches + max_visits + 1 = {need} "
                              f"({a.mode} mode), so the turn cap would bind before the budgets; "
                              "leave it unset (null) to derive it from the budgets")
        for key in ("results_per_query", "visit_max_tokens"):
            if getattr(b, key) < 1:
                raise ConfigError(f"benchmark.{key}: must be >= 1, got {getattr(b, key)}")
        if b.window_days is not None and (b.window_days < 0 or not b.date_window):
            raise ConfigError("benchmark.window_days: needs date_window=true and a value >= 0")

        for key in (("pages",) if b.source == "realtimeqa" else ("questions", "pages")):
            if not data_path(getattr(b, key)).exists():
                raise ConfigError(f"benchmark.{key}: {data_path(getattr(b, key))} does not exist")

    def load_tasks(self, cfg: Config) -> list[Any]:
        from dataclasses import replace

        b = cfg.benchmark
        questions, _ = load(replace(b, limit=None))
        tasks = [LiveTask(q, self.policy(b, q)) for q in questions]
        return select_tasks(tasks, b.task_ids, b.limit, b.questions if b.source == "livenewsbench" else b.pages,
                            task_order(cfg))

    @staticmethod
    def policy(b: Any, q: LiveQuestion) -> agent.WebPolicy:
        blocked = list(b.blocked_domains) + ([q.source_domain] if b.block_source_domain and q.source_domain else [])
        before = q.event_date + dt.timedelta(days=1) if b.date_window else None
        after = q.event_date - dt.timedelta(days=b.window_days) if b.date_window and b.window_days is not None else None
        return agent.WebPolicy(sorted(set(blocked)), after, before, b.results_per_query, b.visit_max_tokens)

    def services(self, cfg: Config) -> list[ServiceSpec]:
        if cfg.agent.mode == "no_search":
            return []
        from engine.config import stable_hash, to_plain

        plain = to_plain(cfg.benchmark)
        ident = stable_hash({k: plain[k] for k in ("source", "questions", "pages")})
        return [ServiceSpec("web", "engine.benchmarks.livenews.service:WebService", {"bench": cfg.benchmark},
                            num_cpus=0.5, identity=f"web:{ident}")]

    async def run_episode(self, task: LiveTask, ctx: EpisodeContext) -> EpisodeOutcome:
        return await agent.run_episode(task.question, task.policy, ctx)

    def uses_model(self, agent_cfg: Any) -> bool:
        return True

    def judge_requests(self, row: dict[str, Any], judged: dict[str, Any] | None = None) -> list[JudgeRequest]:
        """The grade of the answer (finished episodes only: a failed task has no answer), and, with
        ``benchmark.judge_probes``, two probes of the judge itself on the same question: the gold
        answer (must be CORRECT) and a wrong choice of the multiple-choice form (must be
        INCORRECT). Probe accuracy says whether the judge can be trusted at all."""
        out = []
        if row["finish_reason"] == "finish":
            prompt = grader_prompt(row["question"], row["gold"], row["output"])
            out.append(JudgeRequest(row["episode_id"], metrics.GRADE_KEY, [{"role": "user", "content": prompt}], 8))
        data = json.loads(row["data"]) if row.get("data") else None
        if data is not None:                  # judged under the run's evaluation settings, when given
            data = {**data, **(row.get("evaluation") or {})}
        if data is not None and data.get("judge_probes", True):   # rows from before the option: the default
            out.append(JudgeRequest(row["episode_id"], "probe_gold", [{"role": "user", "content": grader_prompt(
                row["question"], row["gold"], row["gold"])}], 8))
            decoy = _decoy(row["data"], row["task_id"], row["gold"])
            if decoy:
                out.append(JudgeRequest(row["episode_id"], "probe_decoy", [{"role": "user", "content": grader_prompt(
                    row["question"], row["gold"], decoy)}], 8))
        return out

    def parse_judgement(self, key: str, text: str) -> str | None:
        return parse_grade(text)

    def task_date(self, task: LiveTask) -> str:
        """The question's event date (what ``date_field`` holds once it ran), recorded in the plan."""
        return task.question.event_date.isoformat()

    def metrics(self, rows: list[dict[str, Any]]) -> list[MetricRow]:
        return metrics.aggregate(rows)

    def episode_values(self, rows: list[dict[str, Any]]) -> list[dict[str, float]]:
        return [metrics.episode_values(r) for r in rows]

    def tables(self, metric_rows: list[dict[str, Any]]) -> dict[str, str]:
        return metrics.tables(metric_rows)

    def episode_reference(self, row: dict[str, Any]) -> str:
        return f"gold answer: {row.get('gold') or ''}"


@functools.lru_cache(maxsize=4)
def _choices(data_json: str) -> dict[str, tuple[str, ...]]:
    cfg = LivenewsBenchmarkConfig(**(json.loads(data_json) | {"limit": None}))
    return {q.question_id: q.choices for q in load(cfg)[0]}


def _decoy(data_json: str, task_id: str, gold: str) -> str:
    """A wrong choice of the question's multiple-choice form ("" when it has none)."""
    wrong = [c for c in _choices(data_json).get(task_id, ()) if c.strip().lower() != gold.strip().lower()]
    return wrong[0] if wrong else ""


class LiveTask:
    """A question with the environment policy it runs under (what the episode id hashes is the config)."""

    def __init__(self, question: LiveQuestion, policy: agent.WebPolicy) -> None:
        self.question = question
        self.policy = policy
        self.task_id = question.question_id


BENCHMARK: Benchmark[LiveTask] = LiveNewsBenchmark()


@functools.cache
def _manifest(path: str) -> dict[str, Any]:
    try:
        out: dict[str, Any] = json.loads(open(path, encoding="utf-8").read())
        return out
    except (OSError, ValueError):
        return {}


def release_marks(data_dir: str | None) -> list[str]:
    """The warnings of a release folder's manifest (``dateline build``): SELF-VERIFIED when one
    model drafted and verified its questions; none for a folder without a manifest."""
    if not data_dir:
        return []
    m = _manifest(str(data_path(data_dir) / "manifest.json"))
    if not m.get("self_verified"):
        return []
    return [f"SELF-VERIFIED: the questions of {data_dir} were drafted and verified by one model "
            f"({', '.join(m.get('models', {}).get('generator', {}).get('identity') or []) or 'its generator'}; "
            "dateline build with build.allow_same_model=true): the answer check is the model agreeing with itself"]

