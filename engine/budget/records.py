"""The budget's records: what a call spends or reserves (:class:`Spend`, :class:`Reservation`), a
run's caps (:class:`Caps`), the two ways a call can fail to get room (:class:`BudgetExhausted`,
:class:`LedgerLost`), and the estimate of a prompt's tokens a call reserves before it is sent.
Plain data and arithmetic: the ledger (:mod:`engine.budget.ledger`) and the gate
(:mod:`engine.budget.gate`) are built on them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

# Chat templates add a few tokens per message (role markers) to the content's own.
TOKENS_PER_MESSAGE = 4
CHARS_PER_TOKEN = 4.0


class BudgetExhausted(RuntimeError):
    """A model call was refused: it could exceed a ``run.budget`` cap (the message names it).
    Not a :class:`~engine.llm.GenerationError`: benchmarks that record endpoint failures as
    results never swallow it; the episode runner stores the episode as ``budget_exhausted``."""


class LedgerLost(RuntimeError):
    """The budget ledger could not be asked (its actor died and could not be restarted): nobody
    can say whether the call may start. Neither a result nor a budget stop: the episode runner
    returns the episode as never started, and the driver requeues it or leaves it for a re-run
    (docs/design/budget.md). Not a :class:`~engine.llm.GenerationError`, so no benchmark records
    it as a result."""


@dataclass
class Spend:
    """Tokens, dollars and GPU hours (spent, or reserved)."""
    tokens_in: int = 0
    tokens_out: int = 0
    usd: float = 0.0
    gpu_hours: float = 0.0

    def __add__(self, o: Spend) -> Spend:
        return Spend(self.tokens_in + o.tokens_in, self.tokens_out + o.tokens_out, self.usd + o.usd,
                     self.gpu_hours + o.gpu_hours)

    def __sub__(self, o: Spend) -> Spend:
        return Spend(self.tokens_in - o.tokens_in, self.tokens_out - o.tokens_out, self.usd - o.usd,
                     self.gpu_hours - o.gpu_hours)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, d: dict[str, Any] | None) -> Spend:
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
    point: str = ""                                    # the sweep point (config hash) whose call it is
    epoch: str = ""                                    # the ledger incarnation that granted it

    @property
    def key(self) -> tuple[str, int]:
        return self.epoch, self.id


@dataclass(frozen=True)
class Caps:
    """The caps of ``run.budget`` (None: no cap)."""
    max_usd: float | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_gpu_hours: float | None = None

    @classmethod
    def of(cls, cfg: Any) -> Caps:
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
