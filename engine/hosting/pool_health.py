"""What a model pool does with each replica's health verdict: the restart policy, in plain Python.

:class:`ReplicaHealth` keeps the counters of every replica of one pool (failed checks in a row,
failed starts in a row, restarts for a stall in a row, the replicas given up, the restarts per
cause) and turns a verdict of :mod:`engine.hosting.liveness` into an :class:`Action`: serve, out of
rotation, restart (with the window factor after a stall) or give up (with a diagnosis). It calls
no Ray and touches no endpoint: :class:`engine.hosting.replica.ModelPool` carries the action out
(the endpoints, the events, the Ray calls), and tests drive the policy with verdict dicts alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.config import ModelConfig
from engine.hosting.liveness import OK, SATURATED, WEDGED, verdict_line

# What to do with a replica after a verdict (Action.kind).
SERVE = "serve"          # in rotation
OUT = "out"              # out of rotation, not restarted yet
RESTART = "restart"      # out of rotation and restarted (in the background, after the push)
GIVE_UP = "give_up"      # out of rotation for the rest of the run


@dataclass(frozen=True)
class Action:
    """The pool's next step for one replica."""

    kind: str                       # SERVE, OUT, RESTART or GIVE_UP
    state: str = ""                 # why it is out of rotation: its endpoint's state
    cause: str = ""                 # RESTART: "wedged", "down" or "dead"
    factor: float | None = None     # RESTART after a stall: the factor its stall window grows by
    reason: str = ""                # GIVE_UP: the diagnosis


class ReplicaHealth:
    """The restart policy of one pool's replicas and its counters, per replica index:

    * ok, or saturated (``/health`` late but tokens advancing): in rotation; never restarted;
    * wedged (work in the engine and no sign of progress for the replica's stall window) or
      down (no answer, no progress): out of rotation at once, so no new episode goes there
      and pinned ones move; restarted after ``model.unhealthy_checks`` such checks in a row,
      at once when its process is dead or its actor gone (Ray re-creates a lost actor
      elsewhere, with a new address). After a restart for a stall the replica's window
      doubles; after ``model.max_stall_restarts`` of them in a row (no token in between) the
      replica is given up with a diagnosis (:attr:`failing` once no replica is left);
    * a replica that failed to start ``model.max_start_failures`` times in a row is given up.

    ``step_tokens``: the most prompt tokens one engine step takes (``replica_actor.batched_tokens``),
    which the diagnosis compares with the measured rate."""

    def __init__(self, cfg: ModelConfig, step_tokens: int) -> None:
        self.cfg = cfg
        self.step_tokens = step_tokens
        self.misses: dict[int, int] = {}            # consecutive failed health checks
        self.start_failures: dict[int, int] = {}    # consecutive failed starts
        self.stall_restarts: dict[int, int] = {}    # restarts for a stall in a row (no token since)
        self.given_up: set[int] = set()
        self.restart_causes: dict[str, int] = {}    # "wedged" / "down" / "dead" -> restarts for it
        self.failing = ""                           # the diagnosis once no replica can serve

    def start_failed(self, i: int) -> int:
        """Replica ``i`` failed to (re)start: the failed starts in a row, this one included."""
        self.start_failures[i] = self.start_failures.get(i, 0) + 1
        return self.start_failures[i]

    def started(self, i: int) -> None:
        self.start_failures[i] = 0

    def starts_exhausted(self, i: int) -> str:
        """Why replica ``i`` is given up for its failed starts; "" while it may be tried again."""
        n = self.start_failures.get(i, 0)
        if n < self.cfg.max_start_failures:
            return ""
        return f"replica {i} failed to start {n} times (model.max_start_failures={self.cfg.max_start_failures})"

    def act_on(self, i: int, h: dict[str, Any]) -> Action:
        """The action for replica ``i``'s verdict ``h`` (``verdict``, ``alive``, ``advanced``, and
        the metrics behind it). ok or saturated: serve. Wedged or down: out of rotation, and a
        restart after ``model.unhealthy_checks`` such checks in a row, at once when its process is
        dead. A stall restart doubles the window (factor 2, 4, ...); after
        ``model.max_stall_restarts`` of them with no token in between, the replica is given up."""
        if h.get("advanced"):
            self.stall_restarts[i] = 0          # it served a token: the stall restarts are not in a row
        if h["verdict"] in (OK, SATURATED):
            self.misses[i] = 0
            return Action(SERVE)
        self.misses[i] = self.misses.get(i, 0) + 1
        if h["alive"] and self.misses[i] < self.cfg.unhealthy_checks:
            return Action(OUT, state=verdict_line(h))
        self.misses[i] = 0
        wedged = h["verdict"] == WEDGED
        cause = "wedged" if wedged else ("dead" if not h["alive"] else "down")
        factor: float | None = None
        if wedged:
            n = self.stall_restarts.get(i, 0)
            if n >= self.cfg.max_stall_restarts:
                return Action(GIVE_UP, state=f"given up: wedged after {n} restarts", reason=self.diagnosis(i, h, n))
            self.stall_restarts[i] = n + 1
            factor = 2.0 ** (n + 1)
        self.restart_causes[cause] = self.restart_causes.get(cause, 0) + 1
        why = f"restarting: {cause}" + (f" (stall restart {self.stall_restarts[i]} of "
                                          f"{self.cfg.max_stall_restarts})" if wedged else "")
        return Action(RESTART, state=why, cause=cause, factor=factor)

    def give_up(self, i: int, why: str, replicas: int) -> bool:
        """Replica ``i`` is out for the rest of the run (False: it was already); once all
        ``replicas`` are given up, :attr:`failing` says why the model is failing."""
        if i in self.given_up:
            return False
        self.given_up.add(i)
        if len(self.given_up) >= replicas and not self.failing:
            self.failing = f"model {self.cfg.name} is failing: no replica can serve. {why}"
        return True

    def diagnosis(self, i: int, h: dict[str, Any], restarts: int) -> str:
        """One line: what was seen, the rates measured, and what to change."""
        m = self.cfg
        rate = float(h.get("prompt_tokens_per_s") or 0.0)
        measured = (f"measured before: prompt {rate:.1f} tok/s, longest engine step "
                    f"{float(h.get('longest_step_s') or 0.0):.0f} s" if rate or h.get("longest_step_s")
                    else "no token was ever counted by this replica")
        dtype = m.engine_args.get("dtype", "") if m.num_gpus == 0 else ""
        hints = ["raise model.stall_timeout_s", f"model.max_stall_restarts (now {m.max_stall_restarts})"]
        if m.num_gpus == 0:
            hints.insert(0, "run `dateline doctor` for this machine's engine settings and speed"
                            + (f"; model.engine_args.dtype={dtype} is set explicitly" if dtype else ""))
        if rate and rate * float(h.get("window_s") or 0.0) < self.step_tokens:
            hints.append("lower model.engine_args.max_num_batched_tokens / max_model_len")
        return (f"replica {i} wedged after {restarts} restart(s) in a row: {verdict_line(h)}; {measured}. "
                f"Change: {'; '.join(hints)}")
