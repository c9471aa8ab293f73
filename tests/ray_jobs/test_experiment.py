"""``conf/experiment/budget_ablations.yaml``: the three benchmarks' budget ablations from one
command (``dateline run +experiment=budget_ablations``), composed as the CLI composes a sweep
(Hydra multirun, every point collected into one job)."""

from __future__ import annotations

import sys

import pytest

from ray_jobs.config.harness import hydra_main


def points(monkeypatch: pytest.MonkeyPatch, *overrides: str) -> list[tuple[str, str, int, str]]:
    monkeypatch.setattr(sys, "argv", ["dateline", "+experiment=budget_ablations", *overrides])
    got: list[tuple[str, str, int, str]] = []

    def body(cfg, session) -> None:
        a = cfg.agent
        knob, value = next((k, getattr(a, k)) for k in ("max_operations", "max_searches", "max_steps") if hasattr(a, k))
        got.append((cfg.benchmark.name, knob, value, str(cfg.run.dir)))

    hydra_main("config", body)
    return got


@pytest.mark.slow
def test_budget_ablations_sweep_every_benchmark_in_one_command(monkeypatch):
    got = points(monkeypatch)
    assert [(b, k, v) for b, k, v, _ in got] == [
        ("newsagent", "max_operations", 5), ("newsagent", "max_operations", 10), ("newsagent", "max_operations", 20),
        ("livenews", "max_searches", 1), ("livenews", "max_searches", 3), ("livenews", "max_searches", 5),
        ("livenews", "max_searches", 7),
        ("analyst", "max_steps", 4), ("analyst", "max_steps", 8), ("analyst", "max_steps", 16)]
    assert {d for _, _, _, d in got} == {f"runs/budget_ablations/{b}" for b in ("newsagent", "livenews", "analyst")}
    # a command-line override reaches every point
    assert {d for *_, d in points(monkeypatch, "run.dir=/tmp/x/${benchmark.name}")} == \
        {"/tmp/x/newsagent", "/tmp/x/livenews", "/tmp/x/analyst"}
