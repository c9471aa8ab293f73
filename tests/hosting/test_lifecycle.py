"""A replica lifecycle that survives real failures (issue 23, part 3): nothing of a server outlives
its replica (the reaper), liveness from engine progress (``/metrics``) and not only ``/health``,
a port taken before the server binds it, a replica that fails to start, re-pinning. The server is
tests/fake_vllm_server.py, which spawns an EngineCore-like child, wedges, or answers ``/health``
late on demand; the real vLLM server's metrics and reaper are in tests/e2e/test_real_model.py."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Any

import pytest

from engine.hosting import vllm_server
from engine.hosting.liveness import (
    DOWN,
    OK,
    SATURATED,
    WEDGED,
    EngineSample,
    Liveness,
    gpus_busy,
    parse_gpu_utilization,
    parse_metrics,
)
from engine.hosting.replica import ModelPool
from engine.hosting.vllm_server import VLLMServer
from engine.llm import Endpoint, Router, SamplingParams
from tests.engine.storage.test_storage_s3 import s3_endpoint, s3_env  # noqa: F401 - fixtures
from tests.hosting.test_placement import REPO, chat, fake_model, get_json, local_ray  # noqa: F401 - fixture

FAKE = "tests.fake_vllm_server"


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return any(alive(int(p)) and os.getpgid(int(p)) == pgid for p in os.listdir("/proc") if p.isdigit()
               and _pgid(int(p)) == pgid)


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return -1


def wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.time() + timeout_s
    while time.time() < deadline and any(alive(p) for p in pids):
        time.sleep(0.2)
    return [p for p in pids if alive(p)]


# -- liveness verdicts ----------------------------------------------------------------------

VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="qwen"} 1.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="qwen"} 1200.0
vllm:prompt_tokens_created{engine="0",model_name="qwen"} 1.76e+09
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="qwen"} 345.0
vllm:generation_tokens_total{engine="1",model_name="qwen"} 5.0
"""


def test_metrics_parse_sums_engines_and_ignores_the_rest():
    s = parse_metrics(VLLM_METRICS, t=1.0)
    assert s == EngineSample(1.0, 3.0, 1.0, 1200.0, 350.0) and s.busy and s.tokens == 1550.0
    assert parse_metrics("# nothing\nhttp_requests_total 4\n") is None         # not a vLLM server


def sample(t: float, running: float, tokens: float) -> EngineSample:
    return EngineSample(t, running, 0.0, tokens, 0.0)


def test_verdicts_tell_saturated_from_wedged():
    lv = Liveness()
    assert lv.observe(True, True, sample(0, 2, 100)) == OK             # the first sample: nothing to compare
    assert lv.observe(True, True, sample(1, 2, 150)) == OK and lv.tokens_per_s == 50.0
    assert lv.observe(True, False, sample(2, 8, 400)) == SATURATED     # /health late, tokens advancing
    # requests in, no token: within 1.5 x the longest step seen (1 s) it may be one engine step
    assert lv.observe(True, True, sample(3, 8, 400)) == OK and lv.window_s == 1.5
    assert lv.observe(True, True, sample(4, 8, 400)) == WEDGED         # 2 s: longer than any step it took
    assert lv.observe(True, False, sample(5, 8, 400)) == WEDGED
    assert lv.observe(True, True, sample(6, 0, 400)) == OK             # idle: no tokens expected
    assert lv.observe(True, False, None) == DOWN                       # neither /health nor /metrics
    assert lv.observe(False, False, None) == DOWN and lv.prev is None  # the process is gone
    # a wedge whose gauges read 0 (vllm#46811): the canary sent a check ago is still unanswered
    lv = Liveness()
    lv.observe(True, True, sample(0, 0, 10))
    assert lv.observe(True, True, sample(1, 0, 10), canary_overdue=True) == WEDGED
    assert lv.observe(True, True, sample(2, 0, 11), canary_overdue=True) == OK      # slow, but moving


def test_a_long_engine_step_is_not_a_wedge():
    """On a CPU a whole prompt is prefilled in one engine step: seconds with requests running and no
    token counted. ``model.stall_timeout_s`` is how long that may last (a 0.75 s /health deadline
    and a one-period stall window restarted healthy real servers in the real killed-replica test)."""
    lv = Liveness(stall_s=10.0)
    assert lv.observe(True, True, sample(0, 1, 500)) == OK
    assert [lv.observe(True, True, sample(t, 1, 500)) for t in (3, 6, 9)] == [OK, OK, OK]
    assert lv.observe(True, True, sample(12, 1, 500)) == WEDGED          # 12 s since the stall began
    assert lv.observe(True, True, sample(15, 1, 900)) == OK              # tokens again: over


def prompt_sample(t: float, running: float, prompt: float, gen: float = 0.0) -> EngineSample:
    return EngineSample(t, running, 0.0, prompt, gen)


def test_the_window_covers_a_whole_prefill_at_the_measured_prompt_rate():
    """An AVX2 CPU prefilling bfloat16 at ~20 tok/s: a 1,500-token prompt is one 74 s engine step.
    The window is judged against the speed the replica showed, not a constant: once it measured
    20 tok/s, a whole max_num_batched_tokens (8192) prefill may take 410 s, x 1.5."""
    lv = Liveness(stall_s=60.0, max_batched_tokens=8192)
    assert lv.window_s == 60.0                                            # nothing measured yet
    assert lv.observe(True, True, prompt_sample(0, 1, 0)) == OK
    assert lv.observe(True, True, prompt_sample(15, 1, 0)) == OK
    assert lv.observe(True, True, prompt_sample(30, 1, 600)) == OK        # 600 prompt tokens in 30 s of work
    assert lv.prompt_rate == 20.0 and lv.longest_step_s == 30.0
    assert lv.window_s == 1.5 * 8192 / 20.0
    verdicts = [lv.observe(True, True, prompt_sample(t, 1, 600)) for t in range(45, 600, 15)]
    assert set(verdicts) == {OK}                                           # a 9-minute step is legitimate here
    assert lv.observe(True, True, prompt_sample(30 + 615, 1, 600)) == WEDGED


def test_a_step_three_windows_long_is_not_a_wedge_while_the_engine_computes_or_the_canary_answers():
    """Counters standing still for 3 x stall_timeout_s: the engine's processes using CPU, or the
    canary answering, is progress (on a CPU a long prefill counts no token until it ends)."""
    for sig in ({"cpu_s": None}, {"canary_done": True}):
        lv = Liveness(stall_s=10.0)
        cpu = 0.0
        verdicts = []
        for t in range(0, 31, 3):
            cpu += 3.0 * 0.9                    # 0.9 of a core
            kw = {"cpu_s": cpu} if "cpu_s" in sig else {"canary_done": True}
            verdicts.append(lv.observe(True, True, sample(t, 1, 500), **kw))
        assert set(verdicts) == {OK}, (sig, verdicts)
    # a late /health during such a step is a busy server, not a down one (a down verdict restarts
    # it after model.unhealthy_checks), while /metrics answers; computing behind a server that
    # answers nothing is down
    lv = Liveness(stall_s=10.0)
    assert lv.observe(True, True, sample(0, 1, 500), cpu_s=0.0) == OK
    assert lv.observe(True, False, sample(3, 1, 500), cpu_s=2.7) == SATURATED
    assert lv.observe(True, False, None, cpu_s=5.4, t=6) == DOWN and lv.seen["cpu"]
    # an idle process (a hang that waits on nothing) is no progress: wedged after the window
    lv = Liveness(stall_s=10.0)
    verdicts = [lv.observe(True, True, sample(t, 1, 500), cpu_s=0.01 * t) for t in range(0, 31, 3)]
    assert verdicts[-1] == WEDGED and verdicts.index(WEDGED) == 4          # t = 12: 12 s >= 10 s


def test_a_restart_for_a_stall_doubles_the_window_and_keeps_what_was_measured():
    lv = Liveness(stall_s=10.0, max_batched_tokens=100)
    lv.observe(True, True, prompt_sample(0, 1, 0))
    lv.observe(True, True, prompt_sample(2, 1, 100))          # 50 prompt tok/s: a 100-token step is 2 s
    assert lv.window_s == 10.0
    lv.reset(factor=2.0)
    assert lv.window_s == 20.0 and lv.prompt_rate == 50.0 and lv.prev is None
    lv.observe(True, True, sample(100, 1, 0))
    assert lv.observe(True, True, sample(118, 1, 0)) == OK
    assert lv.observe(True, True, sample(121, 1, 0)) == WEDGED


def test_gpu_utilization_is_read_from_nvidia_smi_text():
    assert parse_gpu_utilization("0\n87 %\n\n") == [0.0, 87.0]
    assert gpus_busy("") is None                                # no GPU named: nothing to ask


# -- the router -----------------------------------------------------------------------------

def endpoints(n: int, **kw: Any) -> list[Endpoint]:
    return [Endpoint(f"http://127.0.0.1:{9000 + i}/v1", "m", replica=i, **kw) for i in range(n)]


def test_an_endpoint_out_of_rotation_gets_no_episode_and_pinned_ones_move():
    r = Router(endpoints(2), SamplingParams())
    assert {r.pick(f"e{i}") for i in range(6)} == {0, 1}
    r.update([endpoints(2)[0], Endpoint("http://127.0.0.1:9001/v1", "m", replica=1, in_rotation=False)])
    assert {r.pick(f"e{i}") for i in range(6)} == {0}
    # not started yet: no address, and never picked while another replica is in rotation
    r = Router([Endpoint("", "m", replica=0, in_rotation=False), endpoints(2)[1]], SamplingParams())
    assert {r.pick(f"x{i}") for i in range(5)} == {1}


def test_episodes_repin_when_one_replica_holds_far_more_than_the_rest():
    r = Router(endpoints(2), SamplingParams())
    r.update([endpoints(2)[0], Endpoint("", "m", replica=1, in_rotation=False)])
    for i in range(12):                              # replica 1 still loading: all on replica 0
        assert r.pick(f"e{i}") == 0
    r.update(endpoints(2))                           # it came up
    assert r.pick("e0") == 1 and r.repins == 1       # 12 vs 0: the next call of a pinned episode moves
    moved = sum(r.pick(f"e{i}") == 1 for i in range(1, 12))
    assert r.load() in ([8, 4], [7, 5]) and moved >= 3, r.load()
    before = r.repins
    assert all(r.pick(f"e{i}") == r._sticky[f"e{i}"] for i in range(12))   # balanced: they stay
    assert r.repins == before


# -- the server process -----------------------------------------------------------------------

PARENT = """
import json, sys, time
sys.path.insert(0, {repo!r})
from engine.hosting.vllm_server import VLLMServer
s = VLLMServer({model!r}, "fake", module="tests.fake_vllm_server", env={{"PYTHONPATH": {repo!r},
               "FAKE_VLLM_SPAWN_CHILD": "1"}}, log_path={log!r}, host="127.0.0.1", stop_grace_s=2)
s.start()
s.wait_healthy(60)
print(json.dumps({{"port": s.port, "group": s.proc.pid}}), flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_a_sigkilled_parent_leaves_no_server_process(tmp_path):
    """The process that started the server (a replica actor) dies by SIGKILL: the reaper stops the
    server and its EngineCore-like child; before it, both lived on (vLLM's orphans)."""
    (tmp_path / "model").mkdir()
    code = PARENT.format(repo=str(REPO), model=str(tmp_path / "model"), log=str(tmp_path / "server.log"))
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        line = parent.stdout.readline() if parent.stdout else ""
        started = json.loads(line)
        info = get_json(f"http://127.0.0.1:{started['port']}/info")
        server, child, group = info["pid"], info["child_pid"], started["group"]
        assert child and alive(server) and alive(child) and _pgid(server) == group == _pgid(child)
        parent.kill()
        parent.wait()
        assert wait_gone([server, child, group], 15) == []
        assert "parent" in (tmp_path / "server.log").read_text() and not group_alive(group)
    finally:
        parent.kill()
        for p in (locals().get("server"), locals().get("child")):
            if p and alive(p):
                os.kill(p, signal.SIGKILL)


@pytest.mark.slow
def test_stop_takes_the_whole_group(tmp_path):
    (tmp_path / "model").mkdir()
    s = VLLMServer(str(tmp_path / "model"), "fake", module=FAKE, host="127.0.0.1", stop_grace_s=2,
                   env={"PYTHONPATH": str(REPO), "FAKE_VLLM_SPAWN_CHILD": "1"}, log_path=tmp_path / "s.log")
    s.start()
    try:
        s.wait_healthy(60)
        info = get_json(s.local_url() + "/info")
        s.stop()
        assert wait_gone([info["pid"], info["child_pid"]], 10) == []
    finally:
        s.stop()


@pytest.mark.slow
def test_a_sigkilled_reaper_takes_the_server_with_it(tmp_path):
    """Ray's raylet SIGKILLs what a dead worker leaves behind: the reaper, not the server in its own
    session. The server gets SIGTERM then (``PR_SET_PDEATHSIG``), as vLLM's API server, which stops
    its EngineCore on SIGTERM (the fake server's child is its own: only the server is watched)."""
    (tmp_path / "model").mkdir()
    s = VLLMServer(str(tmp_path / "model"), "fake", module=FAKE, host="127.0.0.1", stop_grace_s=2,
                   env={"PYTHONPATH": str(REPO)}, log_path=tmp_path / "s.log")
    s.start()
    try:
        s.wait_healthy(60)
        server = get_json(s.local_url() + "/info")["pid"]
        assert s.proc is not None and server != s.proc.pid and alive(server)
        os.kill(s.proc.pid, signal.SIGKILL)                 # the reaper, as the raylet does
        s.proc.wait()
        assert wait_gone([server], 15) == [], "the server outlived its reaper"
    finally:
        s.stop()


@pytest.mark.slow
def test_a_port_taken_before_the_server_binds_it_moves_the_server(tmp_path, monkeypatch):
    """``free_port`` picks a port that is free now; another process binds it first: the server
    exits on EADDRINUSE and starts again on another port, instead of failing the replica."""
    (tmp_path / "model").mkdir()
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    real = vllm_server.free_port
    picks = iter([port])
    monkeypatch.setattr(vllm_server, "free_port", lambda: next(picks, None) or real())
    s = VLLMServer(str(tmp_path / "model"), "fake", module=FAKE, host="127.0.0.1",
                   env={"PYTHONPATH": str(REPO)}, log_path=tmp_path / "s.log")
    assert s.port == port
    s.start()
    try:
        s.wait_healthy(60)
        assert s.rebinds == 1 and s.port != port and str(s.port) in s.cmd
        assert get_json(s.local_url() + "/health") == {}
        assert "Address already in use" in (tmp_path / "s.log").read_text()
    finally:
        s.stop()
        taken.close()
    # a server that exits for another reason is not retried
    bad = VLLMServer(str(tmp_path / "model"), "fake", module="no.such.module", host="127.0.0.1",
                     log_path=tmp_path / "bad.log")
    bad.start()
    with pytest.raises(RuntimeError, match="exited with code"):
        bad.wait_healthy(30)
    assert bad.rebinds == 0


# -- replicas under Ray -----------------------------------------------------------------------

def post_forever(ep: Endpoint) -> threading.Thread:
    def go() -> None:
        try:
            chat(ep.base_url, ep.model, ep.api_key)
        except Exception:  # noqa: BLE001 - cut when the server is stopped
            pass
    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_a_sigkilled_replica_actor_leaves_no_server_process(local_ray, tmp_path):
    ray = local_ray(num_cpus=3)
    pool = ModelPool(fake_model(tmp_path, env={"PYTHONPATH": str(REPO), "FAKE_VLLM_SPAWN_CHILD": "1",
                                                   "FAKE_VLLM_REPLY": "scripted answer"}), tmp_path / "logs")
    pids: list[int] = []
    try:
        (ep,) = pool.start()
        info = get_json(ep.base_url[:-3] + "/info")
        got = ray.get(pool.replicas[0].pids.remote())
        pids = [info["pid"], info["child_pid"], got["server_group"]]
        assert all(alive(p) for p in pids) and got["actor"] not in pids
        # Ray runs its workers at niceness 15; the server and what it spawns run at model.niceness (0)
        assert os.getpriority(os.PRIO_PROCESS, got["actor"]) == 15
        assert [os.getpriority(os.PRIO_PROCESS, p) for p in pids] == [0, 0, 0]
        os.kill(got["actor"], signal.SIGKILL)           # as the OOM killer does
        assert wait_gone(pids, 30) == [], "a server process outlived its replica actor"
        # Ray re-creates the actor; the health check starts a server again
        deadline = time.time() + 120
        while time.time() < deadline and not (pool.restarts == 1 and pool.endpoints[0].in_rotation):
            pool.check()
            time.sleep(0.5)
        assert pool.restarts == 1 and pool.endpoints[0].in_rotation
        assert chat(pool.endpoints[0].base_url, "fake", ep.api_key)["choices"][0]["message"]["content"] == "scripted answer"
    finally:
        pool.stop()
        for p in pids:
            if alive(p):
                os.kill(p, signal.SIGKILL)


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_wedged_leaves_rotation_within_two_periods_and_saturated_is_never_restarted(local_ray, tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        metrics_port = sock.getsockname()[1]
    local_ray(num_cpus=4, _metrics_export_port=metrics_port)
    period = 1.0
    wedged = ModelPool(fake_model(tmp_path, name="wedged", health_check_s=period, unhealthy_checks=3, stall_timeout_s=period,
                                  env={"PYTHONPATH": str(REPO), "FAKE_VLLM_WEDGE_AFTER": "1"}), tmp_path / "logs")
    busy = ModelPool(fake_model(tmp_path, name="busy", health_check_s=period, unhealthy_checks=2,
                                env={"PYTHONPATH": str(REPO), "FAKE_VLLM_HEALTH_DELAY_S": "3",
                                     "FAKE_VLLM_DELAY_S": "0.05", "FAKE_VLLM_REPLY": "a b c d"}), tmp_path / "logs")
    stop = threading.Event()
    try:
        (w,) = wedged.start()
        (b,) = busy.start()
        assert chat(w.base_url, w.model, w.api_key)["choices"][0]["message"]["content"] == "ok"
        assert wedged.check() is False and wedged.endpoints[0].in_rotation      # serving: ok
        post_forever(w)              # the engine wedges on this request
        t_wedge = time.monotonic()
        checks = 0
        while wedged.endpoints[0].in_rotation and checks < 5:
            time.sleep(period)
            wedged.check()
            checks += 1
        assert not wedged.endpoints[0].in_rotation and checks <= 2, (checks, wedged.last_health)
        assert time.monotonic() - t_wedge <= 2 * period + 2.0          # + the checks' own time
        assert wedged.last_health[0]["verdict"] == WEDGED and wedged.last_health[0]["running"] >= 1
        # restarted after unhealthy_checks in a row, then back in rotation (a new, unwedged server)
        deadline = time.time() + 60
        while time.time() < deadline and not (wedged.restarts == 1 and wedged.endpoints[0].in_rotation):
            time.sleep(period)
            wedged.check()
        assert wedged.restarts == 1 and wedged.endpoints[0].in_rotation

        # saturated: /health answers after 3 s (the check gives it 1 s, the period), tokens keep advancing
        def load() -> None:
            while not stop.is_set():
                try:
                    chat(b.base_url, b.model, b.api_key)
                except OSError as e:
                    print("load:", e)
        threading.Thread(target=load, daemon=True).start()
        verdicts = []
        for _ in range(6):
            time.sleep(period)
            busy.check()
            verdicts.append(busy.last_health[0]["verdict"])
        assert busy.restarts == 0 and busy.pending_restarts == 0 and busy.endpoints[0].in_rotation, verdicts
        assert verdicts.count(SATURATED) >= 4 and busy.last_health[0]["healthy"] is False, verdicts
        assert busy.last_health[0]["tokens_per_s"] > 0
        # the pool's Prometheus metrics, through Ray's metrics agent (exported every few seconds)
        want = {("ray_dateline_replica_restarts", "wedged"), ("ray_dateline_replica_tokens_per_s", "busy"),
                ("ray_dateline_replica_requests_in_flight", "busy")}
        seen: dict[tuple[str, str], float] = {}
        deadline = time.time() + 60
        while time.time() < deadline and not want <= seen.keys():
            busy.check()
            wedged.check()
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
                for line in r.read().decode().splitlines():
                    name, _, value = line.rpartition(" ")
                    for metric, model in want:
                        # counters carry Prometheus's _total suffix
                        if name.split("{")[0] in (metric, metric + "_total") and f'model="{model}"' in name:
                            seen[(metric, model)] = float(value)
            time.sleep(1)
        assert want <= seen.keys(), seen
        assert seen[("ray_dateline_replica_restarts", "wedged")] >= 1
        assert seen[("ray_dateline_replica_tokens_per_s", "busy")] > 0
    finally:
        stop.set()
        wedged.stop()
        busy.stop()


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_a_replica_that_fails_to_start_does_not_stop_its_pool(local_ray, tmp_path):
    local_ray(num_cpus=4)
    flag = tmp_path / "failed-once"
    cfg = fake_model(tmp_path, replicas=2, min_replicas=1, health_check_s=1.0,
                     env={"PYTHONPATH": str(REPO), "FAKE_VLLM_FAIL_ONCE": str(flag), "FAKE_VLLM_REPLY": "scripted answer"})
    pool = ModelPool(cfg, tmp_path / "logs")
    try:
        eps = pool.start()
        assert flag.exists() and [e.in_rotation for e in eps].count(True) == 1, eps
        up = next(e for e in eps if e.in_rotation)
        assert chat(up.base_url, "fake", up.api_key)["choices"][0]["message"]["content"] == "scripted answer"
        deadline = time.time() + 90
        while time.time() < deadline and not all(e.in_rotation for e in pool.endpoints):
            pool.check()
            time.sleep(0.5)
        assert all(e.in_rotation for e in pool.endpoints) and len({e.base_url for e in pool.endpoints}) == 2
    finally:
        pool.stop()
    # min_replicas=2 (null: all): the same failure fails the start, naming the setting, and leaves nothing
    flag.unlink()
    pool = ModelPool(fake_model(tmp_path, replicas=2, min_replicas=None,
                                env={"PYTHONPATH": str(REPO), "FAKE_VLLM_FAIL_ONCE": str(flag)}), tmp_path / "logs")
    with pytest.raises(RuntimeError, match=r"1 of 2 replica\(s\) failed to start.*min_replicas=2"):
        pool.start()
    assert pool.replicas == [] and pool.placement_groups == []


def test_min_replicas_is_checked(tmp_path):
    from engine.config import validate_model
    from engine.errors import ConfigError

    with pytest.raises(ConfigError, match="min_replicas"):
        validate_model(fake_model(tmp_path, replicas=2, min_replicas=3), "model")


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_replica_logs_reach_a_remote_run_dir(local_ray, tmp_path, s3_env):
    """A run dir on S3 (moto): every replica's server log is copied into its ``logs/`` at a restart
    and at stop, so why a replica failed is readable after the node that ran it is gone."""
    import pyarrow.fs as pafs

    from engine.hosting.replica_actor import replica_log_name
    from engine.storage import EpisodeStore, open_root
    from tests.engine.storage.test_storage_s3 import _uri

    store = EpisodeStore(_uri(s3_env))
    uri = store.remote_dir("logs")
    assert uri.startswith("s3://") and "/logs?endpoint_override=" in uri
    local_ray(num_cpus=2)                       # after s3_env: the workers get its credentials
    pool = ModelPool(fake_model(tmp_path), tmp_path / "logs", uri)
    try:
        (ep,) = pool.start()
        chat(ep.base_url, "fake", ep.api_key)
    finally:
        pool.stop()
    fs, base = open_root(uri)
    with fs.open_input_stream(f"{base}/{replica_log_name('fake', 0)}") as f:
        text = f.read().decode()
    assert "fake vLLM server" in text and "POST /v1/chat/completions 200" in text
    assert EpisodeStore(str(tmp_path / "local")).remote_dir("logs") == ""
    assert fs.get_file_info(pafs.FileSelector(base)) and isinstance(fs, pafs.S3FileSystem)


def _reaper_niceness(start_nice: int, nice: int, *prefix: str) -> tuple[int, str]:
    """The niceness a command started by the reaper runs at, the reaper itself started at
    ``start_nice`` (as Ray starts a replica's actor at 15), and what the reaper printed."""
    from engine.hosting.vllm_server import REAPER

    out = subprocess.run([*prefix, sys.executable, str(REAPER), "--parent", str(os.getpid()), "--nice", str(nice), "--",
                          sys.executable, "-c", "import os; print('child', os.getpriority(os.PRIO_PROCESS, 0))"],
                         capture_output=True, text=True, timeout=60, preexec_fn=lambda: os.nice(start_nice))
    got = [ln for ln in out.stdout.splitlines() if ln.startswith("child ")]
    assert out.returncode == 0 and got, out.stdout + out.stderr
    return int(got[0].split()[1]), out.stdout


@pytest.mark.slow
def test_the_reaper_runs_the_server_at_the_niceness_asked_for_and_says_when_it_cannot():
    # as root (sessions and CI), the server leaves Ray's 15 for 0
    assert _reaper_niceness(15, 0)[0] == 0
    # raising it needs no privilege
    assert _reaper_niceness(0, 7)[0] == 7
    # without CAP_SYS_NICE (a user namespace: root inside, nobody outside) it keeps 15 and says why
    got, said = _reaper_niceness(15, 0, "unshare", "-Ur")
    assert got == 15 and "the server keeps niceness 15, not 0" in said and "RAY_worker_niceness=0" in said
