"""Money and caps: the budget ledger (``ledger``), its records (``records``: spend, reservations,
caps, the refusals), the gate a chat client calls (``gate``) and token and replica-uptime pricing
(``cost``). ``engine.budget`` re-exports the public names of the first three (plugins import them
from here)."""

from engine.budget.gate import BudgetGate, current_gate
from engine.budget.ledger import Budget
from engine.budget.records import (
    CHARS_PER_TOKEN,
    TOKENS_PER_MESSAGE,
    BudgetExhausted,
    Caps,
    LedgerLost,
    Reservation,
    Spend,
    estimate_prompt_tokens,
)

__all__ = [
    "Budget",
    "BudgetExhausted",
    "BudgetGate",
    "CHARS_PER_TOKEN",
    "Caps",
    "LedgerLost",
    "Reservation",
    "Spend",
    "TOKENS_PER_MESSAGE",
    "current_gate",
    "estimate_prompt_tokens",
]
