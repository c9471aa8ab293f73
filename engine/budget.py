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
counted per GPU of a replica as :mod:`engine.cost` does (a CPU-only replica counts one unit).
The dollar figure is token cost plus uptime cost at the model's prices.

Plain Python, no Ray: the driver hosts a :class:`Budget` in one actor shared by all workers
(``engine.dispatch.BudgetActor``), a test or a single process uses it directly. A
:class:`BudgetGate` is what a chat client calls around each request.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Awaitable, Callable, Optional, Sequence

from engine.cost import Prices, token_cost, unit_hours, uptime_cost

# Chat templates add a few tokens per message (role markers) to the content's own.
TOKENS_PER_MESSAGE = 4
CHARS_PER_TOKEN = 4.0


class BudgetExhausted(RuntimeError):
    """A model call was refused: it could exceed a ``run.budget`` cap (the message names it).
    Not a :class:`~engine.llm.GenerationError`: benchmarks that record endpoint failures as
    results never swallow it; the episode runner stores the episode as ``budget_exhausted``."""


@dataclass
class Spend:
    """Tokens, dollars and GPU hours (spent, or reserved)."""
    tokens_in: int = 0
    tokens_out: int = 0
    usd: float = 0.0
    gpu_hours: float = 0.0

    def __add__(self, o: "Spend") -> "Spend":
        return Spend(self.tokens_in + o.tokens_in, self.tokens_out + o.tokens_out, self.usd + o.usd,
                     self.gpu_hours + o.gpu_hours)

    def __sub__(self, o: "Spend") -> "Spend":
        return Spend(self.tokens_in - o.tokens_in, self.tokens_out - o.tokens_out, self.usd - o.usd,
                     self.gpu_hours - o.gpu_hours)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, d: dict[str, Any] | None) -> "Spend":
        d = d or {}
        return cls(int(d.get("tokens_in") or 0), int(d.get("tokens_out") or 0), float(d.get("usd") or 0.0),
                   float(d.get("gpu_hours") or 0.0))


@dataclass(frozen=True)
class Reservation:
    id: int
    tokens_in: int
    tokens_out: int
    usd: float
    at: float = field(default=0.0, compare=False)      # monotonic time it was granted


@dataclass(frozen=True)
class Caps:
    """The caps of ``run.budget`` (None: no cap)."""
    max_usd: Optional[float] = None
    max_input_tokens: Optional[int] = None
    max_output_tokens: Optional[int] = None
    max_gpu_hours: Optional[float] = None

    @classmethod
    def of(cls, cfg: Any) -> "Caps":
        """From a ``BudgetConfig`` (or anything with the same attributes)."""
        return cls(*(getattr(cfg, f, None) for f in ("max_usd", "max_input_tokens", "max_output_tokens",
                                                      "max_gpu_hours")))

    @property
    def any(self) -> bool:
        return any(v is not None for v in asdict(self).values())


def estimate_prompt_tokens(messages: Sequence[dict[str, Any]]) -> int:
    """Prompt tokens of a chat request before it is sent: content characters / 4 plus a few per
    message for the chat template (close for English text; the settle corrects the ledger)."""
    chars = sum(len(str(m.get("content") or "")) for m in messages)
    return int(math.ceil(chars / CHARS_PER_TOKEN)) + TOKENS_PER_MESSAGE * len(messages)


class Budget:
    """The ledger. ``initial`` is what was spent before this process started counting (earlier
    runs of the same configuration); ``ttl_s`` bounds how long a reservation may stay unsettled
    (a worker that died mid-call never settles): after it, the reservation counts as spent in full."""

    def __init__(self, caps: Caps, prices: Prices = Prices(), initial: Spend | None = None,
                 ttl_s: float = 3600.0, closed: tuple[str, str] | None = None) -> None:
        self.caps = caps
        self.prices = prices
        self.initial = initial or Spend()
        self.ttl_s = ttl_s
        self._settled = Spend()            # this process's settled calls (and expired reservations)
        self._uptime_s = 0.0               # this run's replica uptime, as last reported
        self._open: dict[int, Reservation] = {}
        self._ids = itertools.count(1)
        # set once the budget is closed; ``closed`` = (cap, reason) of an earlier run of the same
        # configuration that closed under a cap no larger than this one: it stays closed
        self.closed_cap, self.reason = closed or ("", "")
        self.calls = self.refused = 0
        self._waiters: list[asyncio.Future[None]] = []     # acquire calls waiting for room

    # -- state ---------------------------------------------------------------------------------
    def spent(self) -> Spend:
        up = Spend(usd=uptime_cost(self._uptime_s, self.prices), gpu_hours=unit_hours(self._uptime_s, self.prices))
        return self.initial + self._settled + up

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
        """What a run records: spent (earlier runs included), this run's part, caps, the reason."""
        s = self.spent()
        return {"spent": s.as_dict(), "run": (s - self.initial).as_dict(), "caps": asdict(self.caps),
                "calls": self.calls, "refused": self.refused, "in_flight": len(self._open),
                "exhausted": self.reason, "closed_cap": self.closed_cap}

    # -- the ledger ----------------------------------------------------------------------------
    def set_uptime(self, seconds: float) -> None:
        """This run's replica uptime so far (seconds summed over replicas); absolute, so a late or
        repeated report is harmless."""
        self._uptime_s = max(self._uptime_s, float(seconds))
        self._notify()

    def reserve(self, est_in: int, est_out: int) -> Reservation | None:
        """Reserve a call's worst case, or None: refused (the budget closes; see
        :meth:`exhausted`) or, while in-flight reservations stand in the way, not yet
        (:meth:`acquire` waits for those)."""
        self._expire()
        if self.reason:
            self.refused += 1
            return None
        ask = Spend(int(est_in), int(est_out), token_cost(est_in, est_out, self.prices))
        verdict, why = self._verdict(ask)
        if verdict == "refuse":
            self.closed_cap, self.reason = why
            self.refused += 1
            self._notify()
            return None
        if verdict == "wait":
            return None
        r = Reservation(next(self._ids), ask.tokens_in, ask.tokens_out, ask.usd, time.monotonic())
        self._open[r.id] = r
        self.calls += 1
        return r

    def settle(self, r: Reservation, actual_in: int, actual_out: int) -> None:
        """The call is over: ``actual_*`` tokens (as the server reported; 0 for a call that
        failed) are spent, the rest of the reservation is released. Settling twice, or an
        expired reservation, changes nothing."""
        if self._open.pop(r.id, None) is None:
            return
        self._settled = self._settled + Spend(int(actual_in), int(actual_out),
                                              token_cost(actual_in, actual_out, self.prices))
        self._notify()

    async def acquire(self, est_in: int, est_out: int, poll_s: float = 1.0) -> Reservation | None:
        """:meth:`reserve`, waiting while in-flight calls hold the room this one needs; None once
        the budget is closed."""
        while True:
            r = self.reserve(est_in, est_out)
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
            del self._open[r.id]          # never settled (its worker died): charged in full
            self._settled = self._settled + Spend(r.tokens_in, r.tokens_out, r.usd)

    def _notify(self) -> None:
        for f in self._waiters:
            if not f.done():
                f.set_result(None)


class BudgetGate:
    """What a chat client calls around each request (``engine.llm.ChatClient``): ``reserve``
    before it (raises :class:`BudgetExhausted` when refused), ``settle`` after it.

    ``acquire(est_in, est_out)`` returns an awaitable of ``(reservation or None, reason)`` and
    ``settle(reservation, tokens_in, tokens_out)`` an awaitable: a local :class:`Budget`
    (:meth:`local`) or the methods of the budget actor (``engine.dispatch.remote_gate``)."""

    def __init__(self, acquire: Callable[[int, int], Awaitable[tuple[Reservation | None, str]]],
                 settle: Callable[[Reservation, int, int], Awaitable[Any]]) -> None:
        self._acquire = acquire
        self._settle = settle

    @classmethod
    def local(cls, budget: Budget) -> "BudgetGate":
        async def acquire(a: int, b: int) -> tuple[Reservation | None, str]:
            r = await budget.acquire(a, b)
            return r, budget.reason

        async def settle(r: Reservation, a: int, b: int) -> None:
            budget.settle(r, a, b)
        return cls(acquire, settle)

    async def reserve(self, messages: Sequence[dict[str, Any]], max_tokens: int) -> Reservation:
        r, why = await self._acquire(estimate_prompt_tokens(messages), int(max_tokens))
        if r is None:
            raise BudgetExhausted(why or "run budget exhausted")
        return r

    async def settle(self, r: Reservation, tokens_in: int, tokens_out: int) -> None:
        await self._settle(r, tokens_in, tokens_out)


# The gate of the calls made in the current context: an episode runner sets it for the episode's
# task, so every client the episode reaches (through a router, on any replica) is gated, without
# the gate being threaded through each client's constructor. A client's own ``gate`` wins.
current_gate: contextvars.ContextVar[BudgetGate | None] = contextvars.ContextVar("dateline_budget_gate",
                                                                                 default=None)
