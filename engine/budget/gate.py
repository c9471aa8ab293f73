"""The gate a chat client calls around each request (:class:`BudgetGate`), and the gate of the
current context (:data:`current_gate`). The gate reserves a call's worst case before it is sent and
settles it after; the ledger behind it is a :class:`~engine.budget.ledger.Budget` in this process
(:meth:`BudgetGate.local`) or the run's budget actor (``engine.runtime.budget_actor.remote_gate``)."""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from engine.budget.records import BudgetExhausted, Reservation, estimate_prompt_tokens


class Ledger(Protocol):
    """What :meth:`BudgetGate.local` needs of a ledger (:class:`~engine.budget.ledger.Budget`)."""
    reason: str

    async def acquire(self, est_in: int, est_out: int, poll_s: float = 1.0,
                      point: str = "") -> Reservation | None: ...

    def settle(self, r: Reservation, actual_in: int, actual_out: int) -> None: ...


class BudgetGate:
    """What a chat client calls around each request (``engine.llm.ChatClient``): ``reserve``
    before it (raises :class:`BudgetExhausted` when refused), ``settle`` after it.

    ``acquire(est_in, est_out)`` returns an awaitable of ``(reservation or None, reason)`` and
    ``settle(reservation, tokens_in, tokens_out)`` an awaitable: a local :class:`Budget`
    (:meth:`local`) or the methods of the budget actor (``engine.runtime.budget_actor.remote_gate``)."""

    def __init__(self, acquire: Callable[[int, int], Awaitable[tuple[Reservation | None, str]]],
                 settle: Callable[[Reservation, int, int], Awaitable[Any]], shared: bool = False) -> None:
        self._acquire = acquire
        self._settle = settle
        # the ledger is an actor every process may call (a copy of the gate books in the same
        # place); False: the ledger lives in this process's memory, so the gate must not be copied
        self.shared = shared

    @classmethod
    def local(cls, budget: Ledger, point: str = "") -> BudgetGate:
        async def acquire(a: int, b: int) -> tuple[Reservation | None, str]:
            r = await budget.acquire(a, b, point=point)
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
