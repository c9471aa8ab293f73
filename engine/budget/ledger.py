"""Run budget: a ledger that admits a model call only while it fits under every cap.

A run may cap US dollars, prompt tokens, completion tokens and GPU hours
(``run.budget.*``, all optional). Before each model call the caller reserves the call's worst
case: its prompt tokens (estimated from the messages) and ``max_tokens`` completion tokens (a
server never returns more). After the call the reservation is settled with the tokens the server
reported; the unused part is released. Counted against a cap is ``spent + reserved``, so calls
running at the same time can never add up to more than the cap (only a prompt larger than its
estimate can overshoot, by the estimate's error).

A call is

* admitted when ``spent + reserved + its worst case`` fits under every cap,
* made to wait when only the in-flight reservations stand in the way (they settle, usually below
  their worst case, and the call is asked again),
* refused when ``spent + its worst case`` alone exceeds a cap. A refusal closes the budget: no
  call starts afterwards (the run winds down, in-flight calls finish), and :meth:`Budget.exhausted`
  names the cap.

GPU hours come from replica uptime the driver reports (:meth:`Budget.set_uptime`), priced and
counted per GPU of a replica as :mod:`engine.budget.cost` does (a CPU-only replica counts one unit).
The dollar figure is token cost plus uptime cost at the model's prices.

Plain Python, no Ray: the driver hosts a :class:`Budget` in one actor shared by all workers
(``engine.runtime.budget_actor.BudgetActor``), a test or a single process uses it directly. A
:class:`BudgetGate` is what a chat client calls around each request.

One ledger may serve several sweep points (``run.budget.scope=sweep``): each call names its point
(its configuration hash), so the ledger prices it at that point's model and keeps what each point
spent (:meth:`Budget.point_spend`), which the run dirs record per configuration. Its state
(:meth:`Budget.state`) is what the driver saves every few seconds; a restarted ledger picks it up
again (:meth:`Budget.restore`).
"""

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from engine.budget.cost import Prices, token_cost, unit_hours, uptime_cost

# the ledger's old module path keeps every name it had: the records and the gate live beside it
from engine.budget.gate import BudgetGate as BudgetGate
from engine.budget.gate import current_gate as current_gate
from engine.budget.records import CHARS_PER_TOKEN as CHARS_PER_TOKEN
from engine.budget.records import TOKENS_PER_MESSAGE as TOKENS_PER_MESSAGE
from engine.budget.records import BudgetExhausted as BudgetExhausted
from engine.budget.records import Caps, Reservation, Spend
from engine.budget.records import LedgerLost as LedgerLost
from engine.budget.records import estimate_prompt_tokens as estimate_prompt_tokens


class Budget:
    """The ledger. ``initial`` is what was spent before this process started counting (earlier
    runs of the same configuration); ``ttl_s`` bounds how long a reservation may stay unsettled
    (a worker that died mid-call never settles): after it, the reservation counts as spent in full.

    ``point_prices`` (sweep point -> the prices of its model) prices each call at its point's
    model (a sweep-scope ledger; others use ``prices``); ``uptime_prices`` (uptime key -> prices)
    likewise prices each model's replica uptime (:meth:`set_uptime`)."""

    def __init__(self, caps: Caps, prices: Prices = Prices(), initial: Spend | None = None,
                 ttl_s: float = 3600.0, closed: tuple[str, str] | None = None,
                 point_prices: dict[str, Prices] | None = None,
                 uptime_prices: dict[str, Prices] | None = None) -> None:
        self.caps = caps
        self.prices = prices
        self.initial = initial or Spend()
        self.ttl_s = ttl_s
        self.point_prices = dict(point_prices or {})
        self.uptime_prices = dict(uptime_prices or {})
        self._settled = Spend()            # this process's settled calls (and expired reservations)
        self._by_point: dict[str, Spend] = {}    # the same, per point (they add up to _settled)
        self._uptime_s: dict[str, float] = {}    # this run's replica uptime per model, as last reported
        self._open: dict[tuple[str, int], Reservation] = {}
        # Reservation ids are (incarnation, number): a ledger restored from a snapshot tells the
        # reservations it knew of (settled, expired or restored open: ``_known``) from those an
        # earlier incarnation granted after its last snapshot (their settle charges them).
        self.epoch = uuid.uuid4().hex[:12]
        self._next = 1
        self._known: dict[str, int] = {}         # earlier incarnation -> its first id not in the snapshot
        self._late: set[tuple[str, int]] = set()  # of those unknown ones, the ones charged already
        # set once the budget is closed; ``closed`` = (cap, reason) of an earlier run of the same
        # configuration that closed under a cap no larger than this one: it stays closed
        self.closed_cap, self.reason = closed or ("", "")
        self.calls = self.refused = 0
        self.max_ask = Spend()                   # the largest worst case a call asked for, per field
        self.restarts = 0                        # how often this ledger was restored from a snapshot
        self.restored = False
        self._waiters: list[asyncio.Future[None]] = []     # acquire calls waiting for room

    # -- state ---------------------------------------------------------------------------------
    def spent(self) -> Spend:
        return self.initial + self._settled + self._uptime()

    def _uptime(self) -> Spend:
        up = Spend()
        for key, sec in self._uptime_s.items():
            p = self.uptime_prices.get(key, self.prices)
            up = up + Spend(usd=uptime_cost(sec, p), gpu_hours=unit_hours(sec, p))
        return up

    def reserved(self) -> Spend:
        return Spend(sum(r.tokens_in for r in self._open.values()), sum(r.tokens_out for r in self._open.values()),
                     sum(r.usd for r in self._open.values()))

    def exhausted(self) -> str:
        """Why no call may start any more ("" while the budget is open). Checks the caps against
        what is spent even when no call asked yet (e.g. uptime reached ``max_gpu_hours``)."""
        if not self.reason:
            self._expire()
            verdict, why = self._verdict(Spend(1, 1, token_cost(1, 1, self.prices)))
            if verdict == "refuse":
                self.closed_cap, self.reason = why
        return self.reason

    def summary(self) -> dict[str, Any]:
        """What a run records: spent (earlier runs included), this run's part, caps, the reason;
        for a ledger of several points, each point's part of this run's spend (``points``)."""
        s = self.spent()
        out = {"spent": s.as_dict(), "run": (s - self.initial).as_dict(), "caps": asdict(self.caps),
               "calls": self.calls, "refused": self.refused, "in_flight": len(self._open),
               "exhausted": self.reason, "closed_cap": self.closed_cap, "restarts": self.restarts,
               "max_ask": self.max_ask.as_dict()}
        if self.point_prices:
            out["points"] = {k: v.as_dict() for k, v in self.point_spend().items()}
        return out

    def point_spend(self) -> dict[str, Spend]:
        """This run's spend per point: its settled calls, and a share of the replica uptime in
        proportion to its tokens (equal shares before any), as a finished run's info JSON shares
        it. They add up to this run's spend, so the run dirs of the points together record all of it."""
        points = {k: Spend() for k in self.point_prices} | dict(self._by_point)
        if not points:
            return {}
        up = self._uptime()
        weight = {k: v.tokens_in + v.tokens_out for k, v in points.items()}
        total = sum(weight.values())
        out = {}
        for k, v in points.items():
            share = weight[k] / total if total else 1.0 / len(points)
            out[k] = v + Spend(usd=up.usd * share, gpu_hours=up.gpu_hours * share)
        return out

    def state(self) -> dict[str, Any]:
        """Everything a restarted ledger needs to go on (JSON-able; the driver saves it every
        ``UPTIME_REPORT_S`` in ``budget-live-<run id>.json``): this run's settled spend (per point),
        the uptime reported, the reservations in flight, which reservation ids it knew of, the
        counters and a closure. ``initial`` is not in it: a restart is given it again."""
        return {"epoch": self.epoch, "known": {**self._known, self.epoch: self._next},
                "settled": self._settled.as_dict(), "by_point": {k: v.as_dict() for k, v in self._by_point.items()},
                "uptime_s": dict(self._uptime_s),
                "open": [{"id": r.id, "epoch": r.epoch, "point": r.point, "tokens_in": r.tokens_in,
                          "tokens_out": r.tokens_out, "usd": r.usd} for r in self._open.values()],
                "late": [list(k) for k in sorted(self._late)],
                "calls": self.calls, "refused": self.refused, "restarts": self.restarts,
                "closed_cap": self.closed_cap, "exhausted": self.reason}

    def restore(self, state: dict[str, Any]) -> None:
        """Go on from :meth:`state` of an earlier incarnation of this ledger (its actor died).
        Conservative: the reservations it had in flight stay reserved at their worst case; their
        settle (a worker's call finishing, or Ray retrying a settle that was under way) charges
        what they really spent, and one nobody settles is charged in full after ``ttl_s``. A
        reservation granted after the snapshot was taken is unknown here and counts from its settle
        on (:meth:`settle`). Uptime is the larger of the saved and the reported one."""
        self._settled = Spend.of(state.get("settled"))
        self._by_point = {str(k): Spend.of(v) for k, v in (state.get("by_point") or {}).items()}
        for k, v in (state.get("uptime_s") or {}).items():
            self._uptime_s[str(k)] = max(self._uptime_s.get(str(k), 0.0), float(v))
        now = time.monotonic()
        for d in state.get("open") or []:
            r = Reservation(int(d["id"]), int(d["tokens_in"]), int(d["tokens_out"]), float(d["usd"]), now,
                            str(d.get("point") or ""), str(d.get("epoch") or ""))
            self._open[r.key] = r
        self._known.update({str(k): int(v) for k, v in (state.get("known") or {}).items() if k != self.epoch})
        self._late |= {(str(e), int(i)) for e, i in state.get("late") or []}
        self.calls, self.refused = int(state.get("calls") or 0), int(state.get("refused") or 0)
        self.restarts = int(state.get("restarts") or 0) + 1
        if state.get("closed_cap") and not self.reason:
            self.closed_cap, self.reason = str(state["closed_cap"]), str(state.get("exhausted") or state["closed_cap"])
        self.restored = True
        self._notify()

    # -- the ledger ----------------------------------------------------------------------------
    def set_uptime(self, seconds: float, key: str = "") -> None:
        """This run's replica uptime so far (seconds summed over replicas) of model ``key`` (priced
        at ``uptime_prices[key]``, else ``prices``); absolute, so a late or repeated report is harmless."""
        self._uptime_s[key] = max(self._uptime_s.get(key, 0.0), float(seconds))
        self._notify()

    def _prices(self, point: str) -> Prices:
        return self.point_prices.get(point, self.prices)

    def reserve(self, est_in: int, est_out: int, point: str = "") -> Reservation | None:
        """Reserve a call's worst case (a call of sweep point ``point``), or None: refused (the
        budget closes; see :meth:`exhausted`) or, while in-flight reservations stand in the way,
        not yet (:meth:`acquire` waits for those)."""
        self._expire()
        if self.reason:
            self.refused += 1
            return None
        ask = Spend(int(est_in), int(est_out), token_cost(est_in, est_out, self._prices(point)))
        m = self.max_ask
        self.max_ask = Spend(max(m.tokens_in, ask.tokens_in), max(m.tokens_out, ask.tokens_out), max(m.usd, ask.usd))
        verdict, why = self._verdict(ask)
        if verdict == "refuse":
            self.closed_cap, self.reason = why
            self.refused += 1
            self._notify()
            return None
        if verdict == "wait":
            return None
        r = Reservation(self._next, ask.tokens_in, ask.tokens_out, ask.usd, time.monotonic(), point, self.epoch)
        self._next += 1
        self._open[r.key] = r
        self.calls += 1
        return r

    def settle(self, r: Reservation, actual_in: int, actual_out: int) -> None:
        """The call is over: ``actual_*`` tokens (as the server reported; 0 for a call that
        failed) are spent, the rest of the reservation is released. Settling twice, or an
        expired reservation, changes nothing. A reservation an earlier incarnation of this ledger
        granted after its last snapshot (:meth:`restore`) is unknown here: its tokens are charged now."""
        if self._open.pop(r.key, None) is None:
            if not self._unknown(r) or r.key in self._late:
                return
            self._late.add(r.key)
        self._charge(r.point, Spend(int(actual_in), int(actual_out),
                                    token_cost(actual_in, actual_out, self._prices(r.point))))
        self._notify()

    def _unknown(self, r: Reservation) -> bool:
        """Granted by an earlier incarnation after the snapshot this one was restored from."""
        return bool(r.epoch) and r.epoch != self.epoch and r.id >= self._known.get(r.epoch, 0)

    def _charge(self, point: str, s: Spend) -> None:
        self._settled = self._settled + s
        self._by_point[point] = self._by_point.get(point, Spend()) + s

    async def acquire(self, est_in: int, est_out: int, poll_s: float = 1.0, point: str = "") -> Reservation | None:
        """:meth:`reserve`, waiting while in-flight calls hold the room this one needs; None once
        the budget is closed."""
        while True:
            r = self.reserve(est_in, est_out, point)
            if r is not None or self.reason:
                return r
            woken = asyncio.get_running_loop().create_future()
            self._waiters.append(woken)
            try:      # woken by a settle, or re-checked after poll_s (expired reservations, uptime)
                await asyncio.wait({woken}, timeout=poll_s)
            finally:
                self._waiters.remove(woken)

    # -- internals -----------------------------------------------------------------------------
    def _verdict(self, ask: Spend) -> tuple[str, Any]:
        """("ok" | "wait", None) or ("refuse", (the cap's name, why))."""
        spent, held = self.spent(), self.reserved()
        c = self.caps
        if c.max_gpu_hours is not None and spent.gpu_hours > c.max_gpu_hours:
            return "refuse", ("max_gpu_hours", f"run.budget.max_gpu_hours={c.max_gpu_hours:g} reached: "
                                               f"{spent.gpu_hours:.3f} GPU hours of replica uptime")
        checks = (("max_input_tokens", c.max_input_tokens, spent.tokens_in, held.tokens_in, ask.tokens_in,
                   "prompt tokens"),
                  ("max_output_tokens", c.max_output_tokens, spent.tokens_out, held.tokens_out, ask.tokens_out,
                   "completion tokens"),
                  ("max_usd", c.max_usd, spent.usd, held.usd, ask.usd, "USD"))
        wait = False
        for name, cap, s, h, a, unit in checks:
            if cap is None:
                continue
            if s + a > cap:
                fmt: Callable[[float], str] = (lambda v: f"{v:.4f}") if name == "max_usd" else (lambda v: f"{int(v)}")
                return "refuse", (name, f"run.budget.{name}={cap:g} reached: {fmt(s)} {unit} spent, the next "
                                        f"call may take {fmt(a)} more")
            wait = wait or s + h + a > cap
        return ("wait", None) if wait else ("ok", None)

    def _expire(self) -> None:
        now = time.monotonic()
        for r in [r for r in self._open.values() if now - r.at > self.ttl_s]:
            del self._open[r.key]          # never settled (its worker died): charged in full
            self._charge(r.point, Spend(r.tokens_in, r.tokens_out, r.usd))

    def _notify(self) -> None:
        for f in self._waiters:
            if not f.done():
                f.set_result(None)

