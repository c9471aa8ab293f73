"""Adding a benchmark is one folder and its config group files: a tiny fourth benchmark
("arith": add two numbers) is written to a temporary folder outside the repository, found through
``DATELINE_BENCHMARKS``, checked against the protocol, composed by Hydra from its own config
group files and run end to end by the real driver (Hydra, Ray, workers, Parquet) against a
scripted model server. Nothing in engine/, ray_jobs/ or conf/ names it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from engine.errors import ConfigError
from tests.conftest import REPO
from tests.fake_openai import FakeOpenAI

TASKS = [{"task_id": f"t{i}", "a": a, "b": b} for i, (a, b) in enumerate([(2, 3), (10, 7), (40, 2), (5, 5)])]
WRONG = {"t2"}            # the scripted model gets these wrong

CONFIG_PY = '''
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

if os.environ.get("ARITH_BREAK_WORKERS") and "default_worker" in sys.argv[0]:   # on a Ray worker, not the driver
    raise ImportError("arith: broken on purpose outside the driver")


@dataclass
class ArithBenchmarkConfig:
    name: str = "arith"
    tasks: str = ""                  # a JSON file of {task_id, a, b}
    limit: int | None = None
    grading_note: str = ""           # evaluation only (listed in evaluation_fields): changes no episode


@dataclass
class ArithAgentConfig:
    max_tokens: int = 8
    prefix: str = "Compute"
'''

INIT_PY = '''
"""arith: the model adds two numbers (a protocol test, not a benchmark to publish)."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from engine.config import Config
from engine.errors import ConfigError
from engine.protocol import Benchmark, BenchmarkBase, EpisodeContext, EpisodeOutcome, Row
from engine.scoring.kinds import PROPORTION
from engine.benchmarks.arith.config import ArithAgentConfig, ArithBenchmarkConfig


@dataclass(frozen=True)
class Sum:
    task_id: str
    a: int
    b: int


class Arith(BenchmarkBase):
    name = "arith"
    benchmark_schema = ArithBenchmarkConfig
    agent_schema = ArithAgentConfig
    evaluation_fields = ("grading_note",)
    primary_metrics = ("accuracy",)
    # an episode that produced no answer (an error, a budget stop) counts as wrong
    failure_values = {"accuracy": 0.0}
    # what the metric is: one right-or-wrong per episode (its interval follows: engine/scoring/kinds.py)
    metric_kinds = {"accuracy": PROPORTION}
    episode_fields: list[pa.Field[Any]] = [pa.field("expected", pa.int64()), pa.field("answer", pa.int64())]

    def validate(self, cfg: Config) -> None:
        if not os.path.isfile(cfg.benchmark.tasks):
            raise ConfigError(f"benchmark.tasks: {cfg.benchmark.tasks!r} is not a file")

    def load_tasks(self, cfg: Config) -> list[Sum]:
        with open(cfg.benchmark.tasks) as f:
            tasks = [Sum(t["task_id"], t["a"], t["b"]) for t in json.load(f)]
        return tasks[: cfg.benchmark.limit]

    async def run_episode(self, task: Sum, ctx: EpisodeContext) -> EpisodeOutcome:
        prompt = f"{ctx.agent.prefix} {task.a} + {task.b}. Answer with the number only."
        c = await ctx.model.chat([{"role": "user", "content": prompt}], ctx.agent.max_tokens, seed=ctx.seed)
        m = re.search(r"-?[0-9]+", c.text)
        answer = int(m.group()) if m else None
        ctx.record(turn="action", observation_chars=len(prompt), raw_output=c.text,
                   parsed_action=json.dumps({"answer": answer}), result="", ok=answer is not None,
                   tokens_in=c.prompt_tokens, tokens_out=c.completion_tokens)
        return EpisodeOutcome(c.text, "answered" if m else "unparsed",
                              {"expected": task.a + task.b, "answer": answer})

    def episode_values(self, rows: list[Row]) -> list[dict[str, float]]:
        # the means, their denominators and the failures are the runtime's (engine/scoring/outcomes.py)
        return [{"accuracy": float(r["answer"] == r["expected"])} for r in rows]


BENCHMARK: Benchmark[Sum] = Arith()
'''


def write_benchmark(root: Path) -> Path:
    """The fourth benchmark: ``root/arith/`` (code) and ``root/conf/{benchmark,agent}/arith.yaml``."""
    (root / "arith").mkdir(parents=True)
    (root / "arith" / "__init__.py").write_text(textwrap.dedent(INIT_PY))
    (root / "arith" / "config.py").write_text(textwrap.dedent(CONFIG_PY))
    tasks = root / "tasks.json"
    tasks.write_text(json.dumps(TASKS))
    for group, body in (("benchmark", f"tasks: {tasks}\n"), ("agent", "")):
        (root / "conf" / group).mkdir(parents=True)
        (root / "conf" / group / "arith.yaml").write_text(f"defaults:\n  - arith_schema\n{body}")
    return root


def adder(messages: list[dict], request: dict) -> str:
    a, b = map(int, re.findall(r"[0-9]+", messages[-1]["content"])[:2])
    return str(a + b + 1) if (a, b) == (40, 2) else str(a + b)


@pytest.fixture
def fourth(tmp_path, monkeypatch):
    root = write_benchmark(tmp_path / "plugins")
    monkeypatch.setenv("DATELINE_BENCHMARKS", str(root))
    monkeypatch.setenv("DATELINE_API_KEY", "sk-test")
    return root


@pytest.mark.slow
def test_the_fourth_benchmark_satisfies_the_protocol_and_composes(fourth):
    from engine.benchmarks import get_benchmark, runnable_benchmarks
    from engine.protocol import Benchmark
    from ray_jobs.config.compose import compose

    bench = get_benchmark("arith")
    assert isinstance(bench, Benchmark) and bench.evaluation_fields == ("grading_note",)
    assert "arith" in runnable_benchmarks() and {"newsagent", "livenews", "analyst"} <= set(runnable_benchmarks())
    cfg = compose(["benchmark=arith", "agent=arith", "model=openai_compatible", "model.base_url=http://127.0.0.1:9/v1"])
    assert type(cfg.benchmark).__name__ == "ArithBenchmarkConfig" and cfg.benchmark.tasks.endswith("tasks.json")
    assert [t.task_id for t in bench.load_tasks(cfg)] == [t["task_id"] for t in TASKS]
    with pytest.raises(ConfigError, match="benchmark.tasks: '/nowhere.json' is not a file"):
        compose(["benchmark=arith", "agent=arith", "model=openai_compatible", "model.base_url=http://x/v1",
                 "benchmark.tasks=/nowhere.json"])
    with pytest.raises(Exception, match="grading_notes"):       # a typo fails at composition, as for built-ins
        compose(["benchmark=arith", "agent=arith", "benchmark.grading_notes=x"])


def test_a_folder_that_breaks_the_protocol_is_named(fourth):
    from engine.benchmarks import get_benchmark

    (fourth / "half").mkdir()
    (fourth / "half" / "__init__.py").write_text("class Half:\n    name = 'half'\n\nBENCHMARK = Half()\n")
    with pytest.raises(ConfigError, match=r"does not implement engine.protocol.Benchmark: missing agent_schema, "
                                          r"benchmark_schema, config_warnings, corpus"):
        get_benchmark("half")
    with pytest.raises(ConfigError, match="no benchmark folder nothere/"):
        get_benchmark("nothere")


def driver(fourth: Path, base_url: str, run_dir: Path, *extra: str, env: dict[str, str] | None = None,
           timeout: float = 400) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "ray_jobs.run", "benchmark=arith", "agent=arith", "model=openai_compatible",
           f"model.base_url={base_url}", "model.name=fake", f"run.dir={run_dir}", "run.progress=false",
           "cluster.num_workers=2", "cluster.episodes_per_worker=2", *extra]
    env = {**os.environ, "DATELINE_BENCHMARKS": str(fourth), "DATELINE_API_KEY": "sk-test",
           "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", **(env or {})}
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def metric(run_dir: Path, name: str) -> list[dict]:
    return [r for r in pq.read_table(run_dir / "metrics" / "metrics.parquet").to_pylist() if r["metric"] == name]


@pytest.mark.ray
@pytest.mark.timeout(900)
def test_the_fourth_benchmark_runs_end_to_end(fourth, tmp_path):
    run_dir = tmp_path / "run"
    with FakeOpenAI(adder) as srv:
        p = driver(fourth, srv.base_url, run_dir)
        assert p.returncode == 0, p.stdout + p.stderr
        assert len(srv.requests) == len(TASKS)
        rows = {r["task_id"]: r for r in pq.read_table(run_dir / "episodes").to_pylist()}
        assert set(rows) == {t["task_id"] for t in TASKS}
        for t in TASKS:
            r = rows[t["task_id"]]
            assert r["status"] == "ok" and r["expected"] == t["a"] + t["b"]
            assert r["answer"] == t["a"] + t["b"] + (1 if t["task_id"] in WRONG else 0)
        (acc,) = metric(run_dir, "accuracy")
        assert acc["value"] == pytest.approx(3 / 4) and acc["n"] == 4
        steps = pq.read_table(run_dir / "steps").to_pylist()
        assert sorted(s["episode_id"] for s in steps) == sorted(r["episode_id"] for r in rows.values())

        # an evaluation field is not part of an episode's identity: nothing is asked again
        p = driver(fourth, srv.base_url, run_dir, "benchmark.grading_note=v2")
        assert p.returncode == 0, p.stdout + p.stderr
        assert len(srv.requests) == len(TASKS), "changing an evaluation field re-ran episodes"
        # an agent field is part of the episode: every task runs again under the new prompt
        p = driver(fourth, srv.base_url, run_dir, "agent.prefix=Add")
        assert p.returncode == 0, p.stdout + p.stderr
        assert len(srv.requests) == 2 * len(TASKS)
        assert all(r["messages"][-1]["content"].startswith("Add") for r in srv.requests[len(TASKS):])


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_workers_that_cannot_start_stop_the_run_with_the_cause(fourth, tmp_path):
    """A worker whose constructor fails (here: the benchmark's code does not import on workers)
    would fail the same way on every restart: the run stops naming the cause, never waits."""
    with FakeOpenAI(adder) as srv:
        p = driver(fourth, srv.base_url, tmp_path / "run", env={"ARITH_BREAK_WORKERS": "1"}, timeout=300)
    assert p.returncode != 0
    assert "WorkerStartError" in p.stderr and "cannot start" in p.stderr and "broken on purpose" in p.stderr
    assert srv.requests == []
