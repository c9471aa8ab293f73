"""The report: per-episode values behind every mean-type metric, cost accounting on hand-made
runs, and a run directory rendered with intervals, paired tests, costs and plots."""

from __future__ import annotations

import json

import pytest

from engine.benchmarks.livenews import BENCHMARK as LIVE
from engine.benchmarks.livenews.agent import FINISH_REASONS
from engine.benchmarks.newsagent import BENCHMARK as NEWS
from engine.budget.cost import (
    JudgePrices,
    Prices,
    episode_costs,
    judge_prices,
    model_prices,
    parse_overrides,
    token_cost,
    unit_hours,
    uptime_cost,
)
from engine.storage import EpisodeStore
from ray_jobs.outputs.report import build, main
from ray_jobs.outputs.report.compute_pairwise import judging_cost
from tests.engine.scoring.test_pairwise import _episode as news_episode
from tests.factories import episode_row
from tests.helpers import metrics_of


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


def _check_against(bench, rows, expected):
    """``expected``: metric -> (value, n), worked out by hand from the rows. Both the metrics and
    the means of the per-episode values (what the report's intervals and paired tests use) must
    give exactly these, and no mean-type metric may be missing from ``expected``."""
    metrics = {k: m for k, m in metrics_of(bench, rows, policy="exclude").items() if k != "scored_share"}
    for k, (value, n) in expected.items():
        assert (metrics[k].value, metrics[k].n) == (pytest.approx(value), n), k
    vals = bench.episode_values([dict(r, judge="j") for r in rows])
    keys = {k for v in vals for k in v}
    assert keys == {k for k in expected if not k.endswith("_std") and k != "episodes"}
    for k in keys:
        xs = [v[k] for v in vals if k in v]
        assert (sum(xs) / len(xs), len(xs)) == (pytest.approx(expected[k][0]), expected[k][1]), k
    assert {k for k, m in metrics.items() if m.n} == set(expected)


def test_episode_values_are_the_metrics_newsagent():
    rows = [
        # reference h1, h2. search P 2/3 R 1 F1 0.8; edit P 1 R 1/2 F1 2/3; saw both, kept 1: observed 1/2
        episode_row("newsagent", episode_id="a", reference_ids=["h1", "h2"], retrieved_ids=["h1", "h2", "h3"],
                    draft_ids=["h1"], tokens_in=100, tokens_out=10, n_search=2, n_insert=1, operations=3,
                    rephrase_attempts=1, traceable=True),
        # retrieved and kept nothing: both precisions undefined (absent), zero-empty ones 0; R = F1 = 0
        episode_row("newsagent", episode_id="b", reference_ids=["h1", "h2"], tokens_in=200, tokens_out=20,
                    n_failed_parse=20, operations=20, rephrase_attempts=2, traceable=False,
                    finish_reason="operation_cap", n_terminate=0),
        # no reference evidence: no function-wise values at all; no rephrase: no traceable value
        episode_row("newsagent", episode_id="c", retrieved_ids=["h9"], draft_ids=["h9"], tokens_in=600,
                    tokens_out=30, n_search=1, n_insert=1, operations=2),
        # failed: no values, counted nowhere
        episode_row("newsagent", episode_id="d", status="error", reference_ids=["h1"], retrieved_ids=["h1"],
                    draft_ids=["h1"], tokens_in=10**6, rephrase_attempts=1, traceable=True),
    ]
    expected = {
        "episodes": (3, 3),
        "search_precision": (2 / 3, 1), "search_recall": (0.5, 2), "search_f1": (0.4, 2),
        "edit_precision": (1.0, 1), "edit_recall": (0.25, 2), "edit_f1": (1 / 3, 2), "edit_recall_observed": (0.25, 2),
        "search_precision_zero_empty": (1 / 3, 2), "edit_precision_zero_empty": (0.5, 2),
        "mean_tokens_in": (300.0, 3), "mean_tokens_out": (20.0, 3), "mean_n_search": (1.0, 3),
        "mean_n_insert": (2 / 3, 3), "mean_n_remove": (0.0, 3), "mean_n_failed_insert": (0.0, 3), "mean_n_duplicate_insert": (0.0, 3),
        "mean_n_failed_remove": (0.0, 3), "mean_n_failed_parse": (20 / 3, 3), "mean_n_empty_search": (0.0, 3),
        "mean_operations": (25 / 3, 3), "mean_rephrase_attempts": (1.0, 3),
        "traceable_rate": (0.5, 2), "terminated_rate": (2 / 3, 3),
    }
    _check_against(NEWS, rows, expected)
    # the default policy (as_wrong): the failed episode counts as recall and F1 0, over 3 of 4 planned
    m = metrics_of(NEWS, rows)
    assert (m["search_recall"].value, m["search_recall"].n) == (pytest.approx(1 / 3), 3)
    assert (m["search_precision"].value, m["search_precision"].n) == (pytest.approx(2 / 3), 1)
    assert (m["mean_tokens_in"].value, m["scored_share"].value) == (300.0, 0.75)
    vals = NEWS.episode_values(rows)
    assert "search_precision" not in vals[1] and "edit_precision" not in vals[1] and vals[1]["search_f1"] == 0.0
    assert not any(k.startswith(("search_", "edit_")) for k in vals[2]) and "traceable_rate" not in vals[2]
    assert vals[3] == {}


def test_episode_values_are_the_metrics_livenews():
    def ep(i, reason, judgements, searches, visits, turns, tokens_in, output, **kw):
        return episode_row("livenews", episode_id=f"e{i}", finish_reason=reason, judgements=judgements,
                           n_searches=searches, n_visits=visits, n_turns=turns, tokens_in=tokens_in,
                           tokens_out=tokens_in // 2, gold="Buffalo Bills", output=output, **kw)

    rows = [ep(0, "finish", {"grade": "CORRECT", "probe_gold": "CORRECT"}, 1, 0, 2, 10, "the buffalo bills!"),
            ep(1, "finish", {"grade": "INCORRECT", "probe_gold": "INCORRECT"}, 3, 2, 5, 30, "x", n_refused_visits=1),
            ep(2, "budget_exceeded", {}, 5, 1, 6, 50, ""),
            ep(3, "finish", {"grade": None, "probe_gold": "CORRECT", "probe_decoy": "INCORRECT"}, 3, 1, 3, 10,
               "Buffalo Bills"),
            ep(4, "finish", {"grade": "CORRECT"}, 9, 9, 9, 90, "Buffalo Bills", status="error")]
    finish = {f"finish_{f}": (0.0, 4) for f in FINISH_REASONS} | {"finish_finish": (0.75, 4),
                                                                   "finish_budget_exceeded": (0.25, 4)}
    expected = {
        "accuracy": (0.25, 4), "incorrect": (0.25, 4), "not_attempted": (0.0, 4), "failed": (0.25, 4),
        "ungraded": (0.25, 4),
        "searches_mean": (3.0, 4), "searches_std": (2 ** 0.5, 4),       # 1 3 5 3: squared deviations 4 0 4 0
        "visits_mean": (1.0, 4), "visits_std": (0.5 ** 0.5, 4),         # 0 2 1 1
        "refused_visits_mean": (0.25, 4), "turns_mean": (4.0, 4), "tokens_in_mean": (25.0, 4),
        "tokens_out_mean": (12.5, 4), **finish,
        "judge_probe_gold_ok": (2 / 3, 3), "judge_probe_decoy_ok": (1.0, 1), "answer_contains_gold": (0.5, 4),
    }
    _check_against(LIVE, rows, expected)
    assert LIVE.episode_values(rows)[4] == {}
    m = metrics_of(LIVE, rows)                    # as_wrong: the error is a wrong answer, 1 correct of 5
    assert (m["accuracy"].value, m["accuracy"].n) == (0.2, 5) and (m["failed"].value, m["failed"].n) == (0.4, 5)


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
    assert unit_hours(1800, g) == pytest.approx(1.0)                   # GPU hours: half an hour x 2 GPUs


def test_price_overrides_parse():
    assert parse_overrides(["qwen=1,2", "gpt-4.1=3,4,5,2"]) == {"qwen": Prices(1, 2), "gpt-4.1": Prices(3, 4, 5, 2)}
    for bad in ("qwen", "qwen=", "=1,2", "qwen=1", "qwen=-1,2"):
        with pytest.raises(ValueError):
            parse_overrides([bad])


QWEN = {"name": "qwen", "num_gpus": 2, "price_gpu_hour": 2.0, "price_input_per_mtok": 0.5, "price_output_per_mtok": 1.0}
JUDGE_B = {"name": "judge-b", "num_gpus": 1, "price_gpu_hour": 4.0, "price_input_per_mtok": 0.2,
           "price_output_per_mtok": 0.3}
API_JUDGE = {"kind": "openai_compatible", "name": "", "model": "gpt-judge", "price_input_per_mtok": 3.0,
             "price_output_per_mtok": 9.0, "hosted_model": None}


def test_judge_prices_rules():
    """One rule for every judge: an API judge pays its own token prices (re-priced under its
    judge.name or judge.model), a hosted judge its hosting model's (judge.hosted_model, else the
    run's model), re-priced under that model's name."""
    over = {"gpt-judge": Prices(1, 2), "strict": Prices(7, 7), "qwen": Prices(5, 6, 7, 8), "judge-b": Prices(1, 1, 1)}
    assert judge_prices(API_JUDGE, QWEN) == JudgePrices(Prices(3.0, 9.0), Prices())     # no replicas
    assert judge_prices(API_JUDGE, QWEN, over) == JudgePrices(Prices(1, 2), Prices())
    assert judge_prices(dict(API_JUDGE, name="strict"), QWEN, over).tokens == Prices(7, 7)   # its name first
    assert judge_prices(dict(API_JUDGE, name="nobody"), QWEN, over).tokens == Prices(1, 2)   # then its model
    self_judge = {"kind": "hosted", "hosted_model": None}
    assert judge_prices(self_judge, QWEN) == JudgePrices(Prices(0.5, 1.0), Prices.of_model(QWEN))
    assert judge_prices(self_judge, QWEN, over) == JudgePrices(Prices(5, 6, 7, 8), Prices(5, 6, 7, 8))
    own = {"kind": "hosted", "hosted_model": JUDGE_B}
    assert judge_prices(own, QWEN) == JudgePrices(Prices(0.2, 0.3), Prices(0.2, 0.3, 4.0, 1.0))
    assert judge_prices(own, QWEN, {"qwen": Prices(9, 9)}) == judge_prices(own, QWEN)   # not the run's model
    assert judge_prices(own, QWEN, over).uptime == Prices(1, 1, 1)
    assert judge_prices({}, QWEN).tokens == Prices(0.5, 1.0)          # runs recorded before judge configs
    assert JudgePrices(Prices(1, 2), Prices(gpu_hour=4, units_per_replica=2)).cost(1e6, 1e6, 1800) \
        == pytest.approx(1 + 2 + 4)
    assert model_prices(QWEN) == Prices.of_model(QWEN) and model_prices(QWEN, over) == Prices(5, 6, 7, 8)
    assert model_prices({}, over, name="judge-b") == Prices(1, 1, 1)


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


@pytest.mark.slow
def test_report_run_directory(tmp_path):
    root = _run_dir(tmp_path)
    html_path = build([str(root)], tmp_path / "rep", n_boot=300)
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "| configuration | config hash |" in md and "guided_json=True" in md and "guided_json=False" in md
    edit = next(ln for ln in md.splitlines() if ln.startswith("| edit_f1 |"))
    # edit_f1 is 0 or 1 here, one episode a task, but an F1 is a score, not a trial (issue 46: the kind
    # decides, not the values): no exact interval, and 6 tasks are too few for a bootstrap
    assert "| 1 (n=6; too few tasks for an interval) | 0.500 (n=6; too few tasks for an interval) |" in edit
    paired = [ln for ln in md.splitlines() if ln.startswith("| edit_f1 | ")][1:]
    assert paired and "| 6 |" in paired[0]                         # six shared tasks
    # cost: cfgA paid 1 h of one GPU at $2 -> $2.00 over its 6 episodes; cfgB half that
    cost_a = next(ln for ln in md.splitlines() if ln.startswith("| qwen (guided_json=True) |") and "$" in ln)
    assert "$2.0000" in cost_a and "1.000" in cost_a
    cost_b = next(ln for ln in md.splitlines() if ln.startswith("| qwen (guided_json=False) |") and "$" in ln)
    assert "$1.0000" in cost_b
    assert "edit_f1 by task" in md and html_path.read_text().count("data:image/png;base64,") >= 2


@pytest.mark.slow
def test_report_cli_price_override_and_errors(tmp_path, capsys):
    root = _run_dir(tmp_path)
    assert main([str(root), "--out", str(tmp_path / "r2"), "--boot", "100", "--price", "qwen=1000,0"]) == 0
    md = (tmp_path / "r2" / "report.md").read_text()
    # 1000 per million input tokens: episode tokens_in 1000..6000 -> 21000 tokens per config = $21
    assert "$21.0000" in md
    capsys.readouterr()
    for bad in ("qwen", "=1,2"):            # one line, exit status 2
        assert main([str(root), "--price", bad]) == 2
        err = capsys.readouterr().err
        assert err.startswith("dateline report: ") and len(err.strip().splitlines()) == 1, err
    from engine.errors import DataError
    with pytest.raises(DataError, match="no run dir here"):
        build([str(tmp_path)], tmp_path / "r3")


def _cost_line(md, label):
    return next(ln for ln in md.splitlines() if ln.startswith(f"| {label} |") and "$" in ln)


@pytest.mark.slow
def test_report_price_reprices_an_api_judge_in_a_run(tmp_path):
    """``--price`` re-prices an API (openai_compatible) judge in a normal run as it does in
    pairwise judging: by its model name, through ``engine.budget.cost.judge_prices``."""
    root = _run_dir(tmp_path)
    model = {"name": "qwen", "num_gpus": 1, "price_gpu_hour": 2.0}
    EpisodeStore(root).write_json("run-3-judge.json", {
        "config_hash": "cfgA", "replica_seconds_run": 0.0, "model": model, "judge_config": API_JUDGE,
        "judge": {"tokens_in": 1_000_000, "tokens_out": 500_000}})
    assert main([str(root), "--out", str(tmp_path / "recorded"), "--boot", "50"]) == 0
    # recorded prices: $2 of uptime + the judge's 1M in x $3 + 0.5M out x $9 = $9.5
    assert "| $9.5000 |" in _cost_line((tmp_path / "recorded" / "report.md").read_text(), "qwen (guided_json=True)")
    assert main([str(root), "--out", str(tmp_path / "repriced"), "--boot", "50", "--price", "gpt-judge=1,2"]) == 0
    md = (tmp_path / "repriced" / "report.md").read_text()
    # re-priced judge: 1M x $1 + 0.5M x $2 = $2, so $2 + $2 = $4; the generation keeps its recorded prices
    assert "| $4.0000 |" in _cost_line(md, "qwen (guided_json=True)")
    assert "| $1.0000 |" in _cost_line(md, "qwen (guided_json=False)")


def test_pairwise_judging_cost_uses_the_same_rules():
    """A pairwise stage's judging cost: the same judge prices as a run's, so ``--price`` re-prices
    the same judges; a hosted judge with a model of its own pays that model's prices."""
    def stage(judge, replica_seconds=0.0):
        return {"config": {"model": QWEN, "judge": judge}, "replica_seconds": replica_seconds,
                "judge_stats": {"tokens_in": 1_000_000, "tokens_out": 1_000_000}}

    api = judging_cost([stage(API_JUDGE, 3600)])
    assert api is not None and api.usd == pytest.approx(3 + 9)          # no replicas of its own to pay for
    again = judging_cost([stage(API_JUDGE)], {"gpt-judge": Prices(1, 2)})
    assert again is not None and again.usd == pytest.approx(1 + 2)
    own = judging_cost([stage({"kind": "hosted", "hosted_model": JUDGE_B}, 1800)])
    # judge-b's tokens (0.2 + 0.3) and half an hour of its one GPU at $4 (not qwen's 2 GPUs at $2)
    assert own is not None and own.usd == pytest.approx(0.5 + 2.0)
    self_hosted = judging_cost([stage({"kind": "hosted", "hosted_model": None}, 1800)], {"qwen": Prices(1, 1, 1, 2)})
    assert self_hosted is not None and self_hosted.usd == pytest.approx(2 + 1)


@pytest.mark.slow
def test_report_paired_tests_are_holm_adjusted_per_metric_family(tmp_path):
    """The run report's paired tests: each primary metric's tests in one judged block are one
    family, Holm-adjusted together; the raw p stays beside the adjusted one and a sentence under
    the table names the family and its size. Three configurations: three comparisons per metric."""
    from engine.scoring import stats
    from ray_jobs.outputs.report.compute_runs import run_sections

    store = EpisodeStore(tmp_path / "run", NEWS.episode_fields)
    a = _news_rows()
    b = [dict(r, episode_id=f"b{i}", config_hash="cfgB", agent=json.dumps({"mode": "1-step"}), draft_ids=["h1"])
         for i, r in enumerate(_news_rows())]
    c = [dict(r, episode_id=f"c{i}", config_hash="cfgC", agent=json.dumps({"mode": "2-step"}),
              draft_ids=["h1", "h2"] if i < 5 else [], retrieved_ids=["h1", "h2"]) for i, r in enumerate(_news_rows())]
    store.write_batch(a + b + c, [])
    [section] = run_sections(store.root, 100, {})
    [block] = section.blocks
    assert block.paired is not None
    for m in NEWS.primary_metrics:
        fam = [r for r in block.paired if r.metric == m]
        assert len(fam) == 3 and all(r.family_size == 3 for r in fam)
        raw = [r.test.p_value for r in fam]
        assert [r.p_holm for r in fam] == pytest.approx(stats.holm(raw))
        assert all(r.p_holm >= r.test.p_value for r in fam)
    # the correction bites: the smallest raw p of a family is multiplied by its size (3)
    edit = [r for r in block.paired if r.metric == "edit_f1"]
    low = min(edit, key=lambda r: r.test.p_value)
    assert low.p_holm == pytest.approx(min(1.0, 3 * low.test.p_value)) and low.p_holm > low.test.p_value

    build([str(store.root)], tmp_path / "rep", n_boot=100)
    md = (tmp_path / "rep" / "report.md").read_text()
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "| metric | A | B | A - B | p | p (Holm) | tasks |" in md
    line = next(ln for ln in md.splitlines() if ln.startswith("| edit_f1 | ") and f"| {low.a} | {low.b} |" in ln)
    assert f"| {low.test.p_value:.3g} | {low.p_holm:.3g} | 6 |" in line
    for m in NEWS.primary_metrics:
        sentence = f"Holm-adjusted over the 3 comparisons of {m} in this block"
        assert sentence in md and sentence in html
    assert "<th>p (Holm)</th>" in html


@pytest.mark.slow
def test_no_tokens_figure_when_no_episode_used_a_token(tmp_path):
    """A rule-based run (no model: 0 tokens everywhere) gets no tokens figure, not an empty axis;
    a configuration that used tokens still gets one."""
    from ray_jobs.outputs.report.compute_runs import run_sections

    store = EpisodeStore(tmp_path / "run", NEWS.episode_fields)
    store.write_batch([dict(r, tokens_in=0, tokens_out=0) for r in _news_rows()], [])
    [section] = run_sections(store.root, 50, {})
    assert section.tokens is None
    build([str(store.root)], tmp_path / "rep", n_boot=50, episodes=0)
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "tokens per episode, by configuration" not in md and not list((tmp_path / "rep").glob("*tokens*.png"))
    [used] = run_sections(_run_dir(tmp_path / "b"), 50, {})
    assert used.tokens is not None and used.tokens.tokens[0] == [1100.0 + 1000 * i for i in range(6)]


def test_episode_pages_are_kept_apart_per_run_dir(tmp_path):
    """Two run dirs holding one configuration write their pages to two folders, each index
    listing its own dir's episodes, and the link says how many that is."""
    from ray_jobs.outputs.report.episodes import dir_key, write_pages

    dirs = []
    for name, n in (("x", 6), ("y", 3)):
        store = EpisodeStore(tmp_path / name / "run", NEWS.episode_fields)
        store.write_batch(_news_rows()[:n], [])
        dirs.append((store, n))
    hrefs = [write_pages(tmp_path / "rep", s, NEWS, "cfgA", "A", root=s.root) for s, _ in dirs]
    assert [n for _, n in hrefs] == [6, 3] and hrefs[0][0] != hrefs[1][0]
    assert dir_key(tmp_path / "x" / "run") != dir_key(tmp_path / "y" / "run")      # same name, other path
    assert dir_key(tmp_path / "x" / "run").startswith("run-")
    for (href, n), _ in zip(hrefs, dirs):
        index = (tmp_path / "rep" / href).read_text()
        assert f'<span id="shown">{n}</span> of {n} shown' in index and index.count('<tr class="ep"') == n
        assert '"../../../report.html"' in index
    assert dir_key(tmp_path / "a #1?%").startswith("a-1-") and "/" not in dir_key("s3://bucket/runs/")
