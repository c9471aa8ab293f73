"""One budget for a sweep (run.budget.scope=sweep), a ledger that survives its actor, and a lost
ledger counted as "not started" (docs/design/budget.md): the ledger's restore arithmetic, the
records a sweep ledger leaves, config checks, the runner's classification; then the driver on a
local Ray cluster with a scripted model: two points stopped at one cap, the ledger actor killed
mid-run (restarted: it goes on from its snapshot) and lost for good (nothing stored as a result)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest

from engine.budget import Budget, BudgetGate, Caps, LedgerLost, Reservation, Spend
from engine.budget.cost import Prices
from engine.errors import ConfigError
from tests.fake_openai import FakeOpenAI
from tests.helpers import livenews_responder


def roundtrip(b: Budget) -> dict[str, Any]:
    """The state as the driver saves it (JSON) and the actor reads it back."""
    return json.loads(json.dumps(b.state()))


# -- the ledger's state and restore --------------------------------------------------------------
def test_a_restored_ledger_goes_on_from_its_snapshot():
    """Spent and reserved survive a restart; a reservation in flight at the snapshot settles
    exactly on the restored ledger; one granted after the snapshot (unknown) is charged when it
    settles; one settled before the snapshot is not charged twice; the closure survives."""
    caps = Caps(max_output_tokens=1000)
    old = Budget(caps, initial=Spend(tokens_out=100))
    done = old.reserve(5, 200)
    assert done is not None
    old.settle(done, 5, 50)                          # 150 spent
    held = old.reserve(5, 300)                       # in flight at the snapshot
    old.set_uptime(10.0)
    snap = roundtrip(old)
    late = old.reserve(1, 100)                       # granted after the snapshot, then the actor dies
    assert held is not None and late is not None

    new = Budget(caps, initial=Spend(tokens_out=100))     # a restart gets the same arguments
    new.restore(snap)
    assert new.spent().tokens_out == 150 and new.reserved().tokens_out == 300
    assert new.calls == 2 and new.restored and new.summary()["restarts"] == 1
    # in flight: 150 + 300 + 600 > 1000 waits (never refused for what is only reserved)
    assert new.reserve(0, 600) is None and new.exhausted() == ""
    new.settle(held, 5, 70)                          # the worker's settle reaches the restarted ledger
    assert new.reserved() == Spend() and new.spent().tokens_out == 220
    new.settle(late, 1, 30)                          # the old ledger's grant it never saw: charged now
    assert new.spent().tokens_out == 250
    new.settle(done, 5, 50)                          # settled before the snapshot: not again
    new.settle(held, 5, 70)                          # nor twice
    assert new.spent().tokens_out == 250
    mine = new.reserve(0, 10)
    assert mine is not None and mine.epoch == new.epoch != held.epoch
    new.settle(mine, 0, 10)
    # restored again (a second restart) from the restored ledger's snapshot: nothing doubles
    third = Budget(caps, initial=Spend(tokens_out=100))
    third.restore(roundtrip(new))
    assert third.spent().tokens_out == 260 and third.summary()["restarts"] == 2
    third.settle(late, 1, 30)
    third.settle(mine, 0, 10)
    assert third.spent().tokens_out == 260
    assert third._uptime_s == {"": 10.0}


def test_restored_reservations_nobody_settles_are_charged_in_full():
    """Conservative: what was in flight at the loss counts at its worst case until settled, and
    in full once the longest a call can take (ttl) has passed."""
    old = Budget(Caps(max_output_tokens=500))
    assert old.reserve(0, 300) is not None
    new = Budget(Caps(max_output_tokens=500), ttl_s=0.0)
    new.restore(roundtrip(old))
    assert new.exhausted() == "" and new.spent().tokens_out == 300 and new.reserved() == Spend()


def test_a_closed_ledger_stays_closed_after_a_restart():
    old = Budget(Caps(max_output_tokens=100), initial=Spend(tokens_out=50))
    assert old.reserve(0, 60) is None and old.closed_cap == "max_output_tokens"
    new = Budget(Caps(max_output_tokens=100), initial=Spend(tokens_out=50))
    new.restore(roundtrip(old))
    assert "run.budget.max_output_tokens=100" in new.reason and new.reserve(0, 1) is None


def test_a_sweep_ledger_prices_and_records_each_point():
    """Calls are priced at their point's model; uptime at its model's; each point's part
    (tokens, and uptime shared by tokens) adds up to the run's spend."""
    b = Budget(Caps(max_usd=100.0), Prices(1.0, 1.0),
               point_prices={"a": Prices(1.0, 2.0), "b": Prices(10.0, 20.0)},
               uptime_prices={"ma": Prices(gpu_hour=3.6), "mb": Prices(gpu_hour=36.0)})
    ra, rb = b.reserve(1000, 1000, "a"), b.reserve(1000, 1000, "b")
    assert ra is not None and rb is not None
    assert ra.usd == pytest.approx(0.003) and rb.usd == pytest.approx(0.03)
    b.settle(ra, 1000, 1000)
    b.settle(rb, 1000, 3000)
    b.set_uptime(100.0, "ma")
    b.set_uptime(10.0, "mb")
    up = 100 / 3600 * 3.6 + 10 / 3600 * 36.0
    assert b.spent().usd == pytest.approx(0.003 + 0.07 + up)
    parts = b.summary()["points"]
    assert set(parts) == {"a", "b"} and parts["a"]["tokens_out"] == 1000 and parts["b"]["tokens_out"] == 3000
    assert parts["a"]["usd"] == pytest.approx(0.003 + up * 2 / 6) and parts["b"]["usd"] == pytest.approx(0.07 + up * 4 / 6)
    total = sum((Spend.of(v) for v in parts.values()), Spend())
    assert total.usd == pytest.approx(b.spent().usd) and total.gpu_hours == pytest.approx(b.spent().gpu_hours)


# -- records, scope and config ---------------------------------------------------------------------
def test_budget_scope_is_validated():
    from ray_jobs.config.compose import compose

    assert compose([]).run.budget.scope == "sweep"
    assert compose(["run.budget.scope=point"]).run.budget.scope == "point"
    with pytest.raises(ConfigError, match=r"run\.budget\.scope: must be one of \('point', 'sweep'\).*'points'"):
        compose(["run.budget.scope=points"])


def test_points_of_a_sweep_must_agree_on_its_budget():
    from ray_jobs.budget.sweep import check_sweep_budgets
    from ray_jobs.config.compose import compose
    from ray_jobs.config.point import resolve

    def cfg(*o: str):
        return resolve(compose(["benchmark=livenews", "agent=livenews", *o]))

    a, b = cfg("agent.max_searches=1", "run.budget.max_usd=5"), cfg("agent.max_searches=3", "run.budget.max_usd=6")
    with pytest.raises(ConfigError, match=r"run\.budget\.max_usd: .*\[agent\.max_searches=1\].*"
                                          r"\[agent\.max_searches=3\].*5\.0 vs 6\.0"):
        check_sweep_budgets([a, b])
    c = cfg("agent.max_searches=3", "run.budget.max_usd=5", "run.budget.scope=point")
    with pytest.raises(ConfigError, match=r"run\.budget\.scope: .*'sweep' vs 'point'"):
        check_sweep_budgets([a, c])
    check_sweep_budgets([a, cfg("agent.max_searches=3", "run.budget.max_usd=5")])       # the same: fine
    check_sweep_budgets([cfg("run.budget.scope=point", "run.budget.max_usd=1"),         # a ledger each: fine
                         cfg("agent.max_searches=3", "run.budget.scope=point", "run.budget.max_usd=2")])
    check_sweep_budgets([b])


def test_a_sweep_ledgers_records_count_per_point_and_close_the_same_sweep(tmp_path):
    """A killed sweep's snapshot counts each point's part for that point; a finished run's info
    (with the ledger's run_id) supersedes it. A closure binds the same sweep again, not another
    set of points, and not a point ledger of one of them."""
    from dataclasses import replace

    from engine.storage import EpisodeStore
    from ray_jobs.budget.records import exhausted_before_start, recorded_closure, recorded_spend
    from ray_jobs.budget.sweep import sweep_ledger
    from ray_jobs.config.compose import compose
    from ray_jobs.config.point import resolve

    def spec(c, h):                   # the point of configuration c, as if its hash were h
        return replace(resolve(c), config_hash=h)

    store = EpisodeStore(tmp_path)
    over = [f"run.dir={tmp_path}", "benchmark=livenews", "agent=livenews", "run.budget.max_output_tokens=100"]
    cfg = compose(over)
    store.write_json("budget-live-s1.json", {
        "scope": "sweep", "run_id": "s1", "run": {"tokens_out": 90}, "caps": {"max_output_tokens": 100},
        "closed_cap": "max_output_tokens", "exhausted": "run.budget.max_output_tokens=100 reached",
        "points": {"a": {"tokens_out": 60}, "b": {"tokens_out": 30}}, "state": {}})
    assert recorded_spend(cfg, store, "a").tokens_out == 60 and recorded_spend(cfg, store, "b").tokens_out == 30
    store.write_json("run-20260101-000000-a.json", {"config_hash": "a", "tokens_out": 61,
                                                    "budget": {"run_id": "s1", "scope": "sweep"}})
    assert recorded_spend(cfg, store, "a").tokens_out == 61 and recorded_spend(cfg, store, "b").tokens_out == 30

    ledger = sweep_ledger([(spec(cfg, "a"), store), (spec(cfg, "b"), store)])
    assert ledger is not None and ledger.initial.tokens_out == 91
    assert "closed by an earlier run" in ledger.exhausted_before_start()
    other = sweep_ledger([(spec(cfg, "a"), store), (spec(cfg, "c"), store)])
    assert other is not None and other.closed is None and other.exhausted_before_start() == ""
    assert recorded_closure(cfg, store, "a") is None and exhausted_before_start(cfg, store, "a") == ""
    assert sweep_ledger([(spec(cfg, "a"), store)]) is None                             # one point: its own
    assert sweep_ledger([(spec(compose([*over, "run.budget.scope=point"]), h), store) for h in "ab"]) is None


def test_the_actor_restores_from_the_newest_snapshot_of_its_run(tmp_path):
    from engine.runtime.budget_actor import load_ledger_state
    from engine.storage import EpisodeStore

    a, b = EpisodeStore(tmp_path / "a"), EpisodeStore(tmp_path / "b")
    assert load_ledger_state([a.uri, b.uri], "r1") is None
    a.write_json("budget-live-r1.json", {"at": 10.0, "state": {"settled": {"tokens_out": 5}}})
    b.write_json("budget-live-r1.json", {"at": 20.0, "state": {"settled": {"tokens_out": 7}}})
    b.write_json("budget-live-r2.json", {"at": 30.0, "state": {"settled": {"tokens_out": 9}}})
    assert load_ledger_state([a.uri, b.uri], "r1")["settled"] == {"tokens_out": 7}
    (tmp_path / "a" / "budget-live-r3.json").write_text("{not json")
    with pytest.raises(ValueError):                  # unreadable: the ledger fails rather than forgets
        load_ledger_state([a.uri], "r3")


# -- a lost ledger is "not started" ---------------------------------------------------------------
def test_a_dead_ledger_actor_raises_ledger_lost_not_a_ray_error():
    from ray.exceptions import ActorDiedError

    from engine.runtime.budget_actor import remote_gate

    class Method:
        def remote(self, *a: Any) -> Any:
            async def dead() -> None:
                raise ActorDiedError()
            return dead()

    class DeadActor:
        acquire = settle = Method()

    gate = remote_gate(DeadActor(), "h")
    with pytest.raises(LedgerLost, match="ActorDiedError"):
        asyncio.run(gate.reserve([{"role": "user", "content": "x"}], 10))
    with pytest.raises(LedgerLost):
        asyncio.run(gate.settle(Reservation(1, 1, 1, 0.0), 1, 1))


def test_the_runner_returns_an_episode_whose_ledger_is_lost_as_not_started():
    """No row (neither error nor budget_exhausted): the driver requeues it or leaves it unstarted;
    the tokens its calls spent before the loss come back for the run's accounting."""
    from engine.benchmarks.livenews.config import LivenewsAgentConfig, LivenewsBenchmarkConfig
    from engine.benchmarks.livenews.service import WebService
    from engine.llm import Endpoint, SamplingParams
    from engine.runtime.dispatch import EpisodeRunner, EpisodeSpec, WorkerSetup
    from engine.runtime.services import LocalService
    from tests.benchmarks.livenews.test_livenews_agent import BENCH

    class Cfg:
        benchmark = LivenewsBenchmarkConfig()
    task = BENCH.load_tasks(Cfg)[0]
    b = Budget(Caps(max_output_tokens=10_000))
    calls = [0]

    async def acquire(a: int, o: int):
        calls[0] += 1
        if calls[0] == 2:
            raise LedgerLost("the run's budget ledger is gone (ActorDiedError: ...)")
        return b.reserve(a, o), ""

    async def settle(r: Reservation, a: int, o: int) -> None:
        b.settle(r, a, o)

    async def go(url: str):
        setup = WorkerSetup("livenews", "fake", LivenewsAgentConfig(max_tokens_turn=100), "{}",
                            [Endpoint(url, "fake")], SamplingParams(max_retries=0), 8, 5, None)
        runner = EpisodeRunner(setup, None, services={"web": LocalService(WebService(LivenewsBenchmarkConfig()))})
        runner.gate = BudgetGate(acquire, settle)
        return await runner.run(EpisodeSpec("0" * 16, "h", task, task.task_id, 0))

    with FakeOpenAI(livenews_responder()) as srv:
        res = asyncio.run(go(srv.base_url))
        assert len(srv.requests) == 1
    assert "episode" not in res and res["ledger_lost"].startswith("LedgerLost: ")
    assert res["tokens_out"] == b.spent().tokens_out > 0


# -- the driver, end to end (local Ray, scripted model) -------------------------------------------
class Served:
    """The scripted livenews model, counting the completion tokens it hands out (as the fake
    server counts them: whitespace words), and able to hold every answer until released."""

    def __init__(self) -> None:
        self.respond = livenews_responder()
        self.open = threading.Event()
        self.open.set()
        self.tokens_out = 0
        self.lock = threading.Lock()

    def __call__(self, messages: list[dict[str, Any]], req: dict[str, Any]) -> str:
        self.open.wait()
        text = self.respond(messages, req)
        with self.lock:
            self.tokens_out += len(text.split())
        return text


def sweep_cfgs(url: str, run_dir: Any, *extra: str, points: tuple[int, ...] = (1, 3)) -> list[Any]:
    from ray_jobs.config.compose import compose

    return [compose(["benchmark=livenews", "agent=livenews", f"agent.max_searches={n}", "model=openai_compatible",
                     f"model.base_url={url}", "model.name=fake", "model.api_key_env=", f"run.dir={run_dir}",
                     "run.progress=false", "run.flush_interval_s=0", "cluster.num_workers=1",
                     "cluster.episodes_per_worker=2", "cluster.num_cpus=4", *extra]) for n in points]


def rows_by_point(run_dir: Any) -> dict[str, list[dict[str, Any]]]:
    from engine.benchmarks.livenews import BENCHMARK
    from engine.storage import EpisodeStore

    out: dict[str, list[dict[str, Any]]] = {}
    for e in EpisodeStore(run_dir, BENCHMARK.episode_fields).episodes().to_pylist():
        out.setdefault(e["config_hash"], []).append(e)
    return out


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_one_cap_stops_every_point_of_a_sweep(tmp_path):
    """Two points, 6 episodes each (3 calls of <= 100 completion tokens, about 20 answered), one
    cap of 160 for the sweep: together they stop at it (a ledger per point would let each spend
    160), both have budget_exhausted rows, nothing is lost, and both run dirs' records say what
    each point spent. The same sweep again sends nothing; one point alone (scope=point) counts only
    its own spend and runs on."""
    from engine.storage import EpisodeStore
    from ray_jobs.budget.records import recorded_spend
    from ray_jobs.cluster.session import Session
    from ray_jobs.run import run_sweep

    served = Served()
    with FakeOpenAI(served) as srv:
        session = Session()
        try:
            cfgs = sweep_cfgs(srv.base_url, tmp_path, "agent.max_tokens_turn=100", "benchmark.limit=6", "judge=self",
                              "run.budget.max_output_tokens=160")
            infos = run_sweep(cfgs, session)
            by = rows_by_point(tmp_path)
            assert len(by) == 2 and all(len(rows) == 6 for rows in by.values())
            for rows in by.values():
                status = [r["status"] for r in rows]
                assert set(status) <= {"ok", "budget_exhausted"} and "budget_exhausted" in status, status
            stopped = [r for rows in by.values() for r in rows if r["status"] == "budget_exhausted"]
            assert all("run.budget.max_output_tokens=160" in r["error"] for r in stopped)
            # one cap: everything served (episodes and the self-judge) together
            assert served.tokens_out <= 160
            b = [i["budget"] for i in infos]
            assert b[0]["scope"] == b[1]["scope"] == "sweep" and b[0]["run_id"] == b[1]["run_id"]
            assert b[0]["spent"]["tokens_out"] == served.tokens_out and b[0]["exhausted"]
            assert set(b[0]["points"]) == set(by)
            assert sum(x["point"]["tokens_out"] for x in b) == served.tokens_out
            store = EpisodeStore(tmp_path)
            spent = {h: recorded_spend(cfgs[0], store, h).tokens_out for h in by}
            assert sum(spent.values()) == served.tokens_out
            assert all(v > 0 for v in spent.values()), spent

            n = len(srv.requests)
            again = run_sweep(cfgs, session)                    # the same sweep: closed, nothing is sent
            assert len(srv.requests) == n and all(i.get("budget_exhausted_before_start") for i in again)

            one = sweep_cfgs(srv.base_url, tmp_path, "agent.max_tokens_turn=100", "benchmark.limit=6", "judge=self",
                             "run.budget.max_output_tokens=160", "run.budget.scope=point", points=(1,))
            h1 = next(h for h in by if h == run_sweep(one, session)[0]["config_hash"])
            assert len(srv.requests) > n, "a point ledger counts only its own spend, below the cap"
            assert spent[h1] < recorded_spend(one[0], store, h1).tokens_out <= 160
        finally:
            session.close()


def _wait(cond: Any, timeout_s: float, what: str) -> Any:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _live(run_dir: Any) -> dict[str, Any] | None:
    files = list(run_dir.glob("budget-live-*.json"))
    if not files:
        return None
    try:
        return json.loads(files[0].read_text())
    except ValueError:
        return None


def _run_in_thread(cfgs: list[Any], session: Any) -> tuple[threading.Thread, dict[str, Any]]:
    """The sweep in a thread (the test acts on it meanwhile). Ray is started here first: the local
    cluster's processes are started with PR_SET_PDEATHSIG, which fires when the *thread* that
    started them exits, so a cluster started by the run's thread would be killed with it."""
    from ray_jobs.run import run_sweep

    session.ensure_ray(cfgs[0], 4)
    out: dict[str, Any] = {}

    def go() -> None:
        try:
            out["infos"] = run_sweep(cfgs, session)
        except BaseException as e:  # noqa: BLE001 - re-raised by the test
            out["error"] = e

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, out


def _hold_then(served: Served, run_dir: Any, spent_at_least: int, action: Any) -> dict[str, Any]:
    """Once the sweep's ledger has recorded ``spent_at_least`` completion tokens: hold every
    answer of the model, let what was answered settle, wait for a snapshot taken after that, do
    ``action`` (kill the ledger), release the model. Returns the snapshot the ledger had."""
    _wait(lambda: (s := _live(run_dir)) and s["run"]["tokens_out"] >= spent_at_least, 120, "spend to record")
    served.open.clear()
    time.sleep(1.0)                                   # answers already sent settle
    quiet = time.time()
    snap = _wait(lambda: (s := _live(run_dir)) and s["at"] > quiet + 0.5 and s, 30, "a snapshot after the hold")
    action()
    time.sleep(0.5)
    served.open.set()
    return snap


def _ledger_actor() -> Any:
    import ray

    named = [a for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith("dateline-budget-")]
    assert len(named) == 1, named
    return ray.get_actor(named[0]["name"], namespace=named[0]["namespace"])


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_a_killed_ledger_restarts_from_its_snapshot_and_the_cap_holds(tmp_path, monkeypatch):
    """The sweep's ledger actor is killed mid-run (Ray restarts it) while calls are in flight: the
    run completes, every planned episode has a row (ok or budget_exhausted, none an error), the
    restarted ledger went on from what was spent (its final count is exactly what the model
    served) and the cap held over the whole run. A ledger that forgot would have let about the
    whole cap through again after the kill."""
    import ray

    import ray_jobs.budget.ledger
    from ray_jobs.cluster.session import Session

    monkeypatch.setattr(ray_jobs.budget.ledger, "UPTIME_REPORT_S", 0.3)
    served = Served()
    cap = 200
    with FakeOpenAI(served, delay_s=0.2) as srv:
        session = Session()
        try:
            # 2 x 8 episodes of 3 calls (20 tokens answered, 20 reserved each): about 10 fit under the cap
            cfgs = sweep_cfgs(srv.base_url, tmp_path, "agent.max_tokens_turn=20", "benchmark.limit=8",
                              f"run.budget.max_output_tokens={cap}")
            t, out = _run_in_thread(cfgs, session)
            snap = _hold_then(served, tmp_path, 60, lambda: ray.kill(_ledger_actor(), no_restart=False))
            assert snap["state"]["open"], "no call was in flight at the kill"
            t.join(timeout=300)
            assert not t.is_alive() and "error" not in out, out.get("error")
            infos = out["infos"]
        finally:
            session.close()
    by = rows_by_point(tmp_path)
    rows = [r for rs in by.values() for r in rs]
    assert len(by) == 2 and len(rows) == 16 and len({r["episode_id"] for r in rows}) == 16
    assert {r["status"] for r in rows} == {"ok", "budget_exhausted"}, [r["error"] for r in rows]
    b = infos[0]["budget"]
    assert snap["run"]["tokens_out"] >= 60
    assert served.tokens_out <= cap, "the cap did not hold over the restart"
    assert b["spent"]["tokens_out"] == served.tokens_out, "the restarted ledger lost count"
    assert b["restarts"] == 1, b
    assert b["exhausted"] and "max_output_tokens" in b["closed_cap"]
    assert all(i["requeued"] == 0 and not i.get("budget_lost") for i in infos)


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_a_ledger_lost_for_good_stores_nothing_as_a_result(tmp_path, monkeypatch):
    """The ledger actor is killed for good mid-run: the episodes whose calls could not ask it and
    those never started have no row (not error, not budget_exhausted); the run says so and exits
    non-zero; the same command runs them."""
    import ray

    import ray_jobs.budget.ledger
    from ray_jobs.cluster.session import Session
    from ray_jobs.run import exit_code, run_sweep

    monkeypatch.setattr(ray_jobs.budget.ledger, "UPTIME_REPORT_S", 0.3)
    served = Served()
    with FakeOpenAI(served, delay_s=0.2) as srv:
        session = Session()
        try:
            cfgs = sweep_cfgs(srv.base_url, tmp_path, "agent.max_tokens_turn=20", "benchmark.limit=8",
                              "run.budget.max_output_tokens=100000")
            t, out = _run_in_thread(cfgs, session)
            _hold_then(served, tmp_path, 40, lambda: ray.kill(_ledger_actor(), no_restart=True))
            t.join(timeout=300)
            assert not t.is_alive() and "error" not in out, out.get("error")
            infos = out["infos"]
            rows = [r for rs in rows_by_point(tmp_path).values() for r in rs]
            assert 0 < len(rows) < 16 and {r["status"] for r in rows} == {"ok"}
            assert all(i["budget_lost"].startswith("LedgerLost: ") for i in infos)
            assert sum(i["unstarted"] for i in infos) == 16 - len(rows)
            code, why = exit_code(cfgs, infos)
            assert code == 1 and "ledger was lost" in why

            run_sweep(cfgs, session)                          # the same command: the rest runs
        finally:
            session.close()
    rows = [r for rs in rows_by_point(tmp_path).values() for r in rs]
    assert len(rows) == 16 and {r["status"] for r in rows} == {"ok"}
