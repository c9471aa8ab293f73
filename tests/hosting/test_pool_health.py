"""The pool's restart policy without Ray (engine/hosting/pool_health.py): verdict dicts in, actions
out. Out of rotation at once, a restart after model.unhealthy_checks misses in a row (at once when
dead), stall restarts doubling the window until model.max_stall_restarts in a row, then given up
with a diagnosis; failed starts; the model failing once every replica is given up."""

from __future__ import annotations

from typing import Any

from engine.config import ModelConfig
from engine.hosting.liveness import DOWN, OK, SATURATED, WEDGED
from engine.hosting.pool_health import GIVE_UP, OUT, RESTART, SERVE, Action, ReplicaHealth


def health(**fields: Any) -> ReplicaHealth:
    policy: dict[str, Any] = {"unhealthy_checks": 3, "max_stall_restarts": 2, "max_start_failures": 2}
    cfg = ModelConfig(name="m", kind="vllm", **{**policy, **fields})
    return ReplicaHealth(cfg, step_tokens=4096)


def verdict(v: str, alive: bool = True, **metrics: Any) -> dict[str, Any]:
    return {"verdict": v, "alive": alive, "base_url": "http://h:1", **metrics}


def test_down_is_out_at_once_and_restarted_after_unhealthy_checks_in_a_row() -> None:
    h = health()
    assert h.act_on(0, verdict(DOWN)) == Action(OUT, state="down (no /health and no progress)")
    assert h.act_on(0, verdict(DOWN)).kind == OUT
    assert h.act_on(0, verdict(DOWN)) == Action(RESTART, state="restarting: down", cause="down")
    assert h.misses[0] == 0 and h.restart_causes == {"down": 1}
    # ok or saturated in between: the misses are not in a row
    for v in (DOWN, DOWN, SATURATED, DOWN, DOWN, OK):
        assert h.act_on(1, verdict(v)).kind == (SERVE if v in (OK, SATURATED) else OUT)
    assert h.restart_causes == {"down": 1}


def test_a_dead_replica_restarts_at_once() -> None:
    h = health()
    assert h.act_on(0, verdict(DOWN, alive=False)) == Action(RESTART, state="restarting: dead", cause="dead")
    assert h.restart_causes == {"dead": 1}


def test_stall_restarts_double_the_window_then_the_replica_is_given_up() -> None:
    h = health()
    actions = [h.act_on(0, verdict(WEDGED, window_s=60.0)) for _ in range(9)]
    restarts = [a for a in actions if a.kind == RESTART]
    assert [a.factor for a in restarts] == [2.0, 4.0]
    assert [a.state for a in restarts] == ["restarting: wedged (stall restart 1 of 2)",
                                           "restarting: wedged (stall restart 2 of 2)"]
    assert [a.kind for a in actions] == [OUT, OUT, RESTART, OUT, OUT, RESTART, OUT, OUT, GIVE_UP]
    given = actions[-1]
    assert given.state == "given up: wedged after 2 restarts"
    assert given.reason.startswith("replica 0 wedged after 2 restart(s) in a row: wedged (")
    assert "no token was ever counted by this replica" in given.reason
    assert h.restart_causes == {"wedged": 2} and h.stall_restarts == {0: 2}


def test_a_token_served_between_stalls_resets_the_stall_restarts() -> None:
    h = health(unhealthy_checks=1)
    assert h.act_on(0, verdict(WEDGED)).factor == 2.0
    assert h.act_on(0, verdict(WEDGED)).factor == 4.0
    assert h.act_on(0, verdict(OK, advanced=True)).kind == SERVE
    assert h.act_on(0, verdict(WEDGED)).factor == 2.0


def test_the_diagnosis_names_the_rates_and_what_to_change() -> None:
    h = health(unhealthy_checks=1, max_stall_restarts=0, engine_args={"dtype": "bfloat16"})
    a = h.act_on(3, verdict(WEDGED, prompt_tokens_per_s=20.0, longest_step_s=74.0, window_s=100.0))
    assert a.kind == GIVE_UP and a.factor is None and not h.restart_causes
    assert "measured before: prompt 20.0 tok/s, longest engine step 74 s" in a.reason
    assert a.reason.endswith(
        "Change: run `dateline doctor` for this machine's engine settings and speed; model.engine_args.dtype=bfloat16 "
        "is set explicitly; raise model.stall_timeout_s; model.max_stall_restarts (now 0); "
        "lower model.engine_args.max_num_batched_tokens / max_model_len")   # 20 tok/s x 100 s < 4096 tokens
    gpu = health(num_gpus=1, unhealthy_checks=1, max_stall_restarts=0)
    assert gpu.act_on(0, verdict(WEDGED)).reason.endswith(
        "Change: raise model.stall_timeout_s; model.max_stall_restarts (now 0)")


def test_failed_starts_and_the_model_failing() -> None:
    h = health()
    assert h.start_failed(0) == 1 and h.starts_exhausted(0) == ""
    h.started(0)
    assert h.start_failed(0) == 1 and h.start_failed(0) == 2
    assert h.starts_exhausted(0) == "replica 0 failed to start 2 times (model.max_start_failures=2)"
    assert h.give_up(0, "why 0", replicas=2) and not h.give_up(0, "again", replicas=2)
    assert h.failing == "" and h.given_up == {0}
    assert h.give_up(1, "why 1", replicas=2)
    assert h.failing == "model m is failing: no replica can serve. why 1"
