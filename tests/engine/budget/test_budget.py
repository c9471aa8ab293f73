"""Run budget (run.budget.*): the ledger's arithmetic, the chat client's gate against a scripted
server, the episode runner's budget_exhausted rows, and the driver end to end on a local Ray
cluster (stop at the cap, nothing lost, resume with a larger budget); ``dateline estimate``."""

from __future__ import annotations

import asyncio

import pytest

from engine.budget import Budget, BudgetExhausted, BudgetGate, Caps, Spend, current_gate, estimate_prompt_tokens
from engine.budget.cost import Prices
from engine.errors import ConfigError
from engine.llm import ChatClient, Endpoint, GenerationError, Router, SamplingParams
from tests.fake_openai import FakeOpenAI
from tests.helpers import livenews_responder

USER = [{"role": "user", "content": "x" * 40}]          # 10 + 4 estimated prompt tokens


# -- the ledger --------------------------------------------------------------------------------
def test_estimate_prompt_tokens():
    assert estimate_prompt_tokens(USER) == 14
    assert estimate_prompt_tokens([{"role": "system", "content": "abc"}, {"role": "user", "content": ""}]) == 1 + 8


def test_settle_releases_the_unused_part():
    b = Budget(Caps(max_output_tokens=1000))
    r = b.reserve(10, 300)
    assert r is not None and b.reserved().tokens_out == 300 and b.spent().tokens_out == 0
    b.settle(r, 12, 40)
    assert b.reserved() == Spend() and (b.spent().tokens_in, b.spent().tokens_out) == (12, 40)
    b.settle(r, 12, 40)                                  # settling twice changes nothing
    assert b.spent().tokens_out == 40 and b.calls == 1 and b.exhausted() == ""


def test_in_flight_reservations_make_a_call_wait_not_fail():
    b = Budget(Caps(max_output_tokens=500))
    r1 = b.reserve(0, 300)
    assert b.reserve(0, 300) is None and b.exhausted() == ""          # would fit once r1 settles
    b.settle(r1, 0, 100)
    assert b.reserve(0, 300) is not None                             # 100 spent + 300 <= 500


@pytest.mark.parametrize("caps,ask,cap_name", [
    (Caps(max_input_tokens=100), (101, 1), "max_input_tokens"),
    (Caps(max_output_tokens=100), (1, 101), "max_output_tokens"),
    (Caps(max_usd=1.0), (1_000_000, 1), "max_usd"),                  # $1/Mtok in: $1.000002 > $1
])
def test_refusal_at_each_token_cap_closes_the_budget(caps, ask, cap_name):
    b = Budget(caps, Prices(1.0, 2.0))
    assert b.reserve(*ask) is None
    why = b.exhausted()
    assert f"run.budget.{cap_name}=" in why
    assert b.reserve(0, 0) is None and b.refused == 2                # closed: nothing starts any more


def test_gpu_hours_from_reported_uptime():
    b = Budget(Caps(max_gpu_hours=1.0, max_usd=100.0), Prices(gpu_hour=2.0, units_per_replica=2.0))
    b.set_uptime(1700.0)                                              # 0.94 GPU hours: open
    assert b.exhausted() == "" and b.reserve(10, 10) is not None
    assert b.spent().usd == pytest.approx(1700 / 3600 * 2 * 2)
    b.set_uptime(1900.0)                                              # 1.06 GPU hours
    assert b.reserve(10, 10) is None and "run.budget.max_gpu_hours=1" in b.exhausted()


def test_earlier_spend_counts():
    b = Budget(Caps(max_output_tokens=1000), initial=Spend(tokens_out=950))
    assert b.reserve(0, 100) is None and "950 completion tokens spent" in b.exhausted()
    assert Budget(Caps(max_output_tokens=1000), initial=Spend(tokens_out=850)).reserve(0, 100) is not None


def test_unsettled_reservation_expires_and_is_charged_in_full():
    b = Budget(Caps(max_output_tokens=1000), ttl_s=0.0)
    r = b.reserve(5, 300)
    assert b.exhausted() == ""                                       # expiry runs on the next check
    assert b.reserved() == Spend() and b.spent().tokens_out == 300
    b.settle(r, 0, 1)                                                # too late: already charged
    assert b.spent().tokens_out == 300


@pytest.mark.slow
def test_concurrent_reservations_never_exceed_the_cap():
    """50 calls at once, a cap that admits exactly 7 worst cases: 7 run, the others wait; as the 7
    settle below their worst case, 4 more fit; once the rest can never fit, they are refused."""
    async def go():
        b = Budget(Caps(max_output_tokens=700))
        peak = [0]

        async def one():
            r = await b.acquire(0, 100, poll_s=0.05)
            peak[0] = max(peak[0], b.reserved().tokens_out + b.spent().tokens_out)
            return r

        tasks = [asyncio.create_task(one()) for _ in range(50)]
        await asyncio.sleep(0.2)
        first = [t.result() for t in tasks if t.done()]
        assert len(first) == 7 and all(first) and b.exhausted() == ""
        for r in first:
            b.settle(r, 0, 40)                                       # 280 spent: room for 4 more
        await asyncio.sleep(0.2)
        second = [t.result() for t in tasks if t.done() and t.result() not in first]
        assert len(second) == 4
        for r in second:
            b.settle(r, 0, 100)                                      # 680 spent: 680 + 100 > 700
        results = await asyncio.gather(*tasks)
        assert sum(r is not None for r in results) == 11 and b.refused >= 39
        assert peak[0] <= 700 and b.spent().tokens_out == 680
        assert "run.budget.max_output_tokens=700" in b.exhausted()

    asyncio.run(go())


def test_budget_config_validation():
    from ray_jobs.config.compose import compose

    cfg = compose(["run.budget.max_output_tokens=600", "run.budget.max_usd=2.5"])
    assert Caps.of(cfg.run.budget) == Caps(max_usd=2.5, max_output_tokens=600)
    assert not Caps.of(compose([]).run.budget).any
    with pytest.raises(ConfigError, match="run.budget.max_gpu_hours"):
        compose(["run.budget.max_gpu_hours=-1"])


def test_recorded_spend_counts_finished_runs_and_killed_ones(tmp_path):
    """Earlier spend: finished runs from their run-*.json (episodes, judge stage, uptime), runs
    that were killed from their last ledger snapshot; a finished run's snapshot is superseded."""
    from engine.config import to_plain
    from engine.storage import EpisodeStore
    from ray_jobs.budget.records import exhausted_before_start, recorded_spend
    from ray_jobs.config.compose import compose

    cfg = compose([f"run.dir={tmp_path}", "model.price_gpu_hour=2"])
    store = EpisodeStore(tmp_path)
    store.write_json("run-20260101-000000-h.json", {
        "config_hash": "h", "tokens_in": 10, "tokens_out": 40, "judge": {"tokens_in": 5, "tokens_out": 2},
        "model": to_plain(cfg.model), "judge_config": to_plain(cfg.judge), "replica_seconds_run": 1800.0,
        "budget": {"run_id": "r1"}})
    store.write_json("budget-live-r1.json", {"config_hash": "h", "run_id": "r1", "run": {"tokens_out": 999}})
    store.write_json("budget-live-r2.json", {"config_hash": "h", "run_id": "r2",
                                             "run": {"tokens_in": 1, "tokens_out": 50, "usd": 0.5}})
    store.write_json("run-20260101-000001-o.json", {"config_hash": "other", "tokens_out": 1000})
    s = recorded_spend(cfg, store, "h")
    assert (s.tokens_in, s.tokens_out) == (16, 92)
    assert s.gpu_hours == pytest.approx(0.5) and s.usd == pytest.approx(0.5 * 2 + 0.5)
    for cap, why in ((92, "max_output_tokens=92 reached"), (93, "")):
        c = compose([f"run.dir={tmp_path}", "model.price_gpu_hour=2", f"run.budget.max_output_tokens={cap}"])
        assert why in exhausted_before_start(c, store, "h") and (why or not exhausted_before_start(c, store, "h"))


def test_a_closed_budget_stays_closed_until_its_cap_is_raised(tmp_path):
    """A run whose budget closed (a worst case that did not fit) leaves the configuration closed:
    the same caps start nothing, not even a call small enough to fit under what is left; another
    cap binding, or the closing cap raised, opens it again. A killed run's snapshot counts too."""
    from engine.storage import EpisodeStore
    from ray_jobs.budget.records import exhausted_before_start, recorded_closure
    from ray_jobs.config.compose import compose

    b = Budget(Caps(max_output_tokens=160), initial=Spend(tokens_out=68))
    assert b.reserve(0, 100) is None and b.summary()["closed_cap"] == "max_output_tokens"
    assert b.reserve(0, 5) is None                                    # closed: the 92 left are not handed out
    store = EpisodeStore(tmp_path)
    store.write_json("run-20260101-000000-h.json", {"config_hash": "h", "tokens_out": 68, "budget": b.summary()})

    def why(*over: str) -> str:
        return exhausted_before_start(compose([f"run.dir={tmp_path}", *over]), store, "h")

    assert "max_output_tokens=160 reached" in why("run.budget.max_output_tokens=160")
    assert "raise run.budget.max_output_tokens" in why("run.budget.max_output_tokens=150")
    assert why("run.budget.max_output_tokens=161") == ""
    assert why("run.budget.max_input_tokens=1000000") == ""            # that cap no longer binds
    assert recorded_closure(compose([f"run.dir={tmp_path}"]), store, "other") is None
    closed = Budget(Caps(max_output_tokens=160), initial=Spend(tokens_out=68),
                    closed=recorded_closure(compose([f"run.dir={tmp_path}", "run.budget.max_output_tokens=160"]),
                                            store, "h"))
    assert closed.reserve(0, 1) is None and closed.refused == 1
    store.write_json("budget-live-r9.json", {"config_hash": "k", "run_id": "r9", "run": {"tokens_out": 10},
                                             "caps": {"max_usd": 2.0}, "closed_cap": "max_usd",
                                             "exhausted": "run.budget.max_usd=2 reached"})
    assert "max_usd=2 reached" in exhausted_before_start(
        compose([f"run.dir={tmp_path}", "run.budget.max_usd=2"]), store, "k")


# -- the chat client's gate --------------------------------------------------------------------
def test_chat_client_refuses_without_sending():
    """max_tokens 20 per call, cap 25 completion tokens, 2 per answer: calls 1-3 fit (0, 2, 4
    spent + 20), the 4th would not (6 + 20 > 25): BudgetExhausted, and no request is sent."""
    async def go(url):
        b = Budget(Caps(max_output_tokens=25))
        c = ChatClient(Endpoint(url, "m"), SamplingParams(), gate=BudgetGate.local(b))
        for _ in range(3):
            await c.chat(USER, 20)
        with pytest.raises(BudgetExhausted, match="max_output_tokens=25"):
            await c.chat(USER, 20)
        await c.close()
        return b

    with FakeOpenAI(lambda m, r: "alpha beta") as srv:
        b = asyncio.run(go(srv.base_url))
        assert len(srv.requests) == 3
    assert (b.spent().tokens_in, b.spent().tokens_out) == (3, 6)      # the server's counts, not estimates
    assert b.reserved() == Spend()


def test_context_gate_reaches_router_clients_and_failed_calls_release():
    """The episode runner's way: the gate of the current context, for clients a router makes."""
    async def go(url):
        b = Budget(Caps(max_output_tokens=100))
        token = current_gate.set(BudgetGate.local(b))
        try:
            r = Router([Endpoint(url, "m")], SamplingParams(max_retries=0, timeout_s=5))
            with pytest.raises(GenerationError):
                await r.client_for("e1").chat(USER, 60)
            assert b.reserved() == Spend() and b.spent() == Spend()  # nothing recorded, all released
            await r.close()
        finally:
            current_gate.reset(token)
        assert current_gate.get() is None
        return b

    asyncio.run(go("http://127.0.0.1:9/v1"))


@pytest.mark.slow
def test_episode_runner_stores_budget_exhausted_with_its_steps():
    from engine.benchmarks.livenews.config import LivenewsAgentConfig, LivenewsBenchmarkConfig
    from engine.benchmarks.livenews.service import WebService
    from engine.runtime.dispatch import EpisodeRunner, EpisodeSpec, WorkerSetup
    from engine.runtime.services import LocalService
    from tests.benchmarks.livenews.test_livenews_agent import BENCH

    class Cfg:
        benchmark = LivenewsBenchmarkConfig()
    task = BENCH.load_tasks(Cfg)[0]
    agent = LivenewsAgentConfig(max_tokens_turn=100)

    def responder(messages, req):
        return "Search.\n```action\ntype: Search\nDamar Hamlin\n```"

    async def go(url):
        setup = WorkerSetup("livenews", "fake", agent, "{}", [Endpoint(url, "fake")], SamplingParams(max_retries=0),
                            8, 5, None)
        runner = EpisodeRunner(setup, None, services={"web": LocalService(WebService(LivenewsBenchmarkConfig()))})
        # each answer is 7 tokens: calls 1 and 2 fit (0 and 7 spent + 100), the 3rd not (14 + 100)
        b = Budget(Caps(max_output_tokens=113))
        runner.gate = BudgetGate.local(b)
        return await runner.run(EpisodeSpec("0" * 16, "h", task, task.task_id, 0)), b

    with FakeOpenAI(responder) as srv:
        res, b = asyncio.run(go(srv.base_url))
        assert len(srv.requests) == 2
    ep = res["episode"]
    assert ep["status"] == ep["finish_reason"] == "budget_exhausted"
    assert "run.budget.max_output_tokens=113" in ep["error"]
    assert ep["n_steps"] == 2 and len(res["steps"]) == 2 and ep["tokens_out"] == b.spent().tokens_out == 14


# -- the driver, end to end (local Ray, scripted model) ----------------------------------------
def livenews_cfg(url, run_dir, *extra):
    from ray_jobs.config.compose import compose

    return compose(["benchmark=livenews", "agent=livenews", "agent.max_tokens_turn=100", "benchmark.limit=6",
                    "model=openai_compatible", f"model.base_url={url}", "model.name=fake", "model.api_key_env=",
                    f"run.dir={run_dir}", "run.progress=false", "run.flush_interval_s=0", "cluster.num_workers=1",
                    "cluster.episodes_per_worker=2", "cluster.num_cpus=4", "judge=self", *extra])


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_run_stops_at_the_cap_and_resumes_with_a_larger_budget(tmp_path):
    """Episodes make 3 calls of <= 100 completion tokens (7 + 6 + 7 answered). A cap of 160 admits
    one worst case at a time and closes once more than 60 are spent: 2 or 3 episodes finish, the
    rest are stored as budget_exhausted (none lost). The same command runs nothing new; a larger budget
    resumes them all, and the deduplicated store has each episode once, ok."""
    import pyarrow.parquet as pq

    from engine.benchmarks.livenews import BENCHMARK
    from engine.storage import EpisodeStore
    from ray_jobs.budget.records import recorded_spend
    from ray_jobs.cluster.session import Session
    from ray_jobs.run import run

    with FakeOpenAI(livenews_responder()) as srv:
        session = Session()
        try:
            small = livenews_cfg(srv.base_url, tmp_path, "run.budget.max_output_tokens=160")
            info = run(small, session)
            store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
            eps = store.episodes().to_pylist()
            status = [e["status"] for e in eps]
            assert len(eps) == 6 and set(status) <= {"ok", "budget_exhausted"}
            assert 0 < status.count("ok") < 6, status
            assert all("run.budget.max_output_tokens=160" in e["error"] for e in eps if e["status"] != "ok")
            spent = recorded_spend(small, store, eps[0]["config_hash"])
            assert info["budget"]["spent"]["tokens_out"] <= 160 and info["budget"]["exhausted"]
            assert list(tmp_path.glob(f"budget-live-{info['budget']['run_id']}.json"))    # superseded by run-*.json
            assert spent.tokens_out == info["tokens_out"] + info["judge"]["tokens_out"]

            n = len(srv.requests)
            again = run(small, session)                          # same budget: no fresh allowance
            assert len(srv.requests) == n, "a call started although the recorded spend is at the cap"
            assert recorded_spend(small, store, eps[0]["config_hash"]).tokens_out == spent.tokens_out
            assert again.get("budget", {}).get("exhausted", "x")

            large = livenews_cfg(srv.base_url, tmp_path, "run.budget.max_output_tokens=100000")
            run(large, session)
        finally:
            session.close()

    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    eps = store.episodes().to_pylist()
    ids = [e["episode_id"] for e in eps]
    assert len(ids) == len(set(ids)) == 6 and all(e["status"] == "ok" for e in eps)
    raw = pq.read_table(tmp_path / "episodes").to_pylist()              # every row ever kept
    assert {r["episode_id"] for r in raw} == set(ids)
    assert len(store.judgements()) == 6


# -- dateline estimate -------------------------------------------------------------------------
@pytest.mark.ray
@pytest.mark.timeout(600)
def test_estimate_projects_a_pilot(tmp_path, capsys):
    from ray_jobs.cluster.session import Session
    from ray_jobs.run.estimate import PILOT_DIR, estimate_point, totals

    with FakeOpenAI(livenews_responder()) as srv:
        session = Session()
        try:
            cfg = livenews_cfg(srv.base_url, tmp_path, "benchmark.limit=null", "model.price_input_per_mtok=1",
                               "model.price_output_per_mtok=4")
            proj = estimate_point(cfg, session, tasks=2, label="p")
        finally:
            session.close()
    out = capsys.readouterr().out
    assert proj.pilot_episodes == 2 and proj.pilot_ok == 2 and proj.full_episodes == proj.remaining_episodes == 12
    assert "full run (12)" in out and "completion tokens" in out and "cost (USD)" in out
    full = proj.tokens(12)
    assert full["tokens_out"] == pytest.approx(proj.per_episode["tokens_out"] * 12) and full["tokens_out"] > 0
    assert full["judge_tokens_in"] > 0                             # the pilot's judge stage, projected
    assert proj.cost(12) == pytest.approx((full["tokens_in"] + full["judge_tokens_in"]) * 1e-6
                                          + (full["tokens_out"] + full["judge_tokens_out"]) * 4e-6)
    assert proj.wall_s(12) >= proj.wall_s(12, optimistic=True) > 0
    assert not (tmp_path / "episodes").exists() or not list((tmp_path / "episodes").glob("*.parquet"))
    assert list((tmp_path / PILOT_DIR / "episodes").glob("*.parquet"))
    assert "total" in totals([proj, proj])


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_estimate_cli_sweep(tmp_path, monkeypatch, capsys):
    """``dateline estimate --tasks 1 -m ...``: one pilot and table per sweep point, then the totals."""
    from hydra.core.global_hydra import GlobalHydra

    from ray_jobs.cli.main import main

    monkeypatch.setattr("sys.argv", ["dateline"])
    assert main(["estimate", "--tasks=0"]) == 2
    with FakeOpenAI(livenews_responder()) as srv:
        try:
            assert main(["estimate", "--tasks", "1", "-m", "benchmark=livenews", "agent=livenews",
                         "agent.max_searches=1,3", "model=openai_compatible", f"model.base_url={srv.base_url}",
                         "model.name=fake", "model.api_key_env=", f"run.dir={tmp_path}", "run.progress=false",
                         "cluster.num_cpus=4"]) == 0
        finally:
            GlobalHydra.instance().clear()
    out = capsys.readouterr().out
    assert out.count("full run (12)") == 2 and "estimate agent.max_searches=3:" in out
    totals = out.split("estimate, all points")[1]
    assert "agent.max_searches=1 | 12" in totals and "total                | 24" in totals


def test_a_self_judge_shares_the_ledger_whatever_the_models_gpu_price():
    """The judge's token prices are compared with the model's token prices (uptime is paid once,
    by the replicas): a self-judging model with a GPU-hour price shares the run's ledger."""
    from engine.config import Config, JudgeConfig, ModelConfig
    from ray_jobs.budget.gates import judge_prices_match

    m = ModelConfig(price_input_per_mtok=1.0, price_output_per_mtok=2.0, price_gpu_hour=3.0, num_gpus=1)
    assert judge_prices_match(Config(model=m, judge=JudgeConfig(kind="self")))
    api = JudgeConfig(kind="openai_compatible", base_url="http://x/v1", model="j", price_input_per_mtok=1.0,
                      price_output_per_mtok=5.0)
    assert not judge_prices_match(Config(model=m, judge=api))
