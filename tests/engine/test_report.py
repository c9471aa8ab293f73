"""The report: per-episode values behind every mean-type metric, cost accounting on hand-made
runs, and a run directory rendered with intervals, paired tests, costs and plots."""

from __future__ import annotations

import json
import re

import pytest

from engine.benchmarks.livenews import BENCHMARK as LIVE
from engine.benchmarks.newsagent import BENCHMARK as NEWS
from engine.cost import Prices, episode_costs, token_cost, uptime_cost
from engine.storage import EpisodeStore
from ray_jobs.report import build, main
from tests.engine.test_judge import episode as live_episode
from tests.engine.test_pairwise import _episode as news_episode


def _news_rows():
    rows = []
    for i in range(6):
        r = news_episode(f"sample-0{i + 1}", "cfgA", f"text {i}", True)
        r["episode_id"] = f"a{i}"
        r["draft_ids"] = ["h1"] if i % 2 else ["h2"]
        r["retrieved_ids"] = ["h1", "h2", "h3"][: 1 + i % 3]
        r["tokens_in"], r["tokens_out"] = 1000 * (i + 1), 100
        rows.append(r)
    return rows


def _check_values_match_metrics(bench, rows):
    metrics = {m.metric: m for m in bench.metrics(rows)}
    vals = bench.episode_values(rows)
    keys = {k for v in vals for k in v}
    assert keys, "no per-episode values"
    for k in keys:
        xs = [v[k] for v in vals if k in v]
        assert metrics[k].value == pytest.approx(sum(xs) / len(xs)), k
        assert metrics[k].n == len(xs), k


def test_episode_values_are_the_metrics_newsagent():
    rows = _news_rows()
    rows.append(dict(rows[0], episode_id="bad", status="error"))
    _check_values_match_metrics(NEWS, rows)
    assert NEWS.episode_values(rows)[-1] == {}


def test_episode_values_are_the_metrics_livenews():
    rows = [live_episode(i, f"gold {i}" if i % 2 else "x", "finish" if i < 5 else "budget_exceeded") for i in range(7)]
    for i, r in enumerate(rows):
        r["judgements"] = {"grade": ["CORRECT", "INCORRECT", None][i % 3], "probe_gold": "CORRECT"}
    _check_values_match_metrics(LIVE, rows)


def test_cost_arithmetic():
    p = Prices(input_per_mtok=2.0, output_per_mtok=8.0)
    assert token_cost(1_000_000, 500_000, p) == pytest.approx(6.0)
    g = Prices(gpu_hour=2.5, units_per_replica=2)
    assert uptime_cost(1800, g) == pytest.approx(2.5)                  # half an hour of a 2-GPU replica
    assert Prices.of_model({"num_gpus": 0, "price_gpu_hour": 0.1}).units_per_replica == 1.0   # CPU replica: one unit
    assert Prices.of_model({"num_gpus": 4, "price_gpu_hour": 1}).units_per_replica == 4.0
    costs = episode_costs([(300, 100), (100, 100), (0, 0)], Prices(1.0, 1.0, 3.6), replica_seconds=1000)
    # uptime 1000 s at 3.6/h = 1.0, split 400:200:0 by tokens, plus each one's token cost
    assert costs == pytest.approx([400e-6 + 2 / 3, 200e-6 + 1 / 3, 0.0])
    assert Prices.parse("1,2,3") == Prices(1, 2, 3)
    with pytest.raises(ValueError):
        Prices.parse("1")


def _run_dir(tmp_path):
    store = EpisodeStore(tmp_path / "run", NEWS.episode_fields)
    a = _news_rows()
    b = [dict(r, episode_id=f"b{i}", config_hash="cfgB", agent=json.dumps({"mode": "1-step", "guided_json": False}),
              draft_ids=["h1"]) for i, r in enumerate(_news_rows())]
    store.write_batch(a + b, [])
    model = {"name": "qwen", "num_gpus": 1, "price_gpu_hour": 2.0, "price_input_per_mtok": 0.0,
             "price_output_per_mtok": 0.0}
    store.write_json("run-1-a.json", {"config_hash": "cfgA", "replica_seconds_run": 3600.0, "model": model,
                                      "judge": {"tokens_in": 0, "tokens_out": 0}})
    store.write_json("run-2-b.json", {"config_hash": "cfgB", "replica_seconds_run": 1800.0, "model": model})
    return store.root


def test_report_run_directory(tmp_path):
    root = _run_dir(tmp_path)
    html_path = build([str(root)], tmp_path / "rep", n_boot=300)
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "| configuration | config hash |" in md and "guided_json=True" in md and "guided_json=False" in md
    edit = next(ln for ln in md.splitlines() if ln.startswith("| edit_f1 |"))
    assert re.search(r"\d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\] \(n=6\)", edit)
    paired = [ln for ln in md.splitlines() if ln.startswith("| edit_f1 | ")][1:]
    assert paired and "| 6 |" in paired[0]                         # six shared tasks
    # cost: cfgA paid 1 h of one GPU at $2 -> $2.00 over its 6 episodes; cfgB half that
    cost_a = next(ln for ln in md.splitlines() if ln.startswith("| qwen (guided_json=True) |") and "$" in ln)
    assert "$2.0000" in cost_a and "1.000" in cost_a
    cost_b = next(ln for ln in md.splitlines() if ln.startswith("| qwen (guided_json=False) |") and "$" in ln)
    assert "$1.0000" in cost_b
    assert "edit_f1 by task" in md and html_path.read_text().count("data:image/png;base64,") >= 2


def test_report_cli_price_override_and_errors(tmp_path, capsys):
    root = _run_dir(tmp_path)
    assert main([str(root), "--out", str(tmp_path / "r2"), "--boot", "100", "--price", "qwen=1000,0"]) == 0
    md = (tmp_path / "r2" / "report.md").read_text()
    # 1000 per million input tokens: episode tokens_in 1000..6000 -> 21000 tokens per config = $21
    assert "$21.0000" in md
    with pytest.raises(SystemExit):
        main([str(root), "--price", "qwen"])
    from engine.errors import DataError
    with pytest.raises(DataError, match="neither a run directory"):
        build([str(tmp_path)], tmp_path / "r3")
