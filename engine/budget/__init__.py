"""Money and caps: the budget ledger and gates (``ledger``) and token and replica-uptime pricing
(``cost``). ``engine.budget`` re-exports the ledger's public names (plugins import them from here)."""

from engine.budget.ledger import (
    CHARS_PER_TOKEN,
    TOKENS_PER_MESSAGE,
    Budget,
    BudgetExhausted,
    BudgetGate,
    Caps,
    LedgerLost,
    Reservation,
    Spend,
    current_gate,
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
