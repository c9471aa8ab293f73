"""What an adaptive evaluation decides with, and what it records: the :class:`Design` (strategy,
goal, alpha and its split, when steps are taken), stored in the run dir and part of the run's
identity, and the :class:`Decision`, one line of the decision log. The rules that use them are in
``rules.py``; the state they act on is ``race.py``."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from engine.scoring.anytime import FAMILY, TRUNCATION

STRATEGIES = ("race", "incumbent", "halving", "anytime_valid")
SCREENING = "screening: successive halving at a fixed budget, with no error guarantee"


@dataclass(frozen=True)
class Design:
    """What decides: stored in the run dir (``adaptive.json``) and part of the run's identity."""
    strategy: str = "race"
    goal: str = "best"                    # race: best | top:<k> | eps_best
    epsilon: float = 0.0                  # eps_best: within this of the best (score units, [0, 1])
    alpha: float = 0.05
    split: str = "bonferroni"             # how alpha is split over the comparisons
    min_tasks: int = 10                   # no decision before this many positions
    check_every: int = 1                  # a decision step every this many positions
    rungs: tuple[float, ...] = (0.1, 0.3, 1.0)   # halving: fractions of the tasks
    eta: float = 3.0                      # halving: keep the best 1/eta at each rung
    half_width: float | None = None       # anytime_valid: stop once the CS is this narrow
    family: str = FAMILY
    truncation: float = TRUNCATION

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"sweep strategy {self.strategy!r}: one of {', '.join(STRATEGIES)}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.goal not in ("best", "eps_best") and not (self.goal.startswith("top:") and self.top_k >= 1):
            raise ValueError(f"sweep goal {self.goal!r}: best, eps_best or top:<k> (k >= 1)")
        if self.goal == "eps_best" and self.epsilon <= 0:
            raise ValueError("sweep goal eps_best needs sweep.epsilon > 0")
        if self.split != "bonferroni":
            raise ValueError(f"alpha split {self.split!r}: only bonferroni")
        if self.min_tasks < 1 or self.check_every < 1:
            raise ValueError("min_tasks and check_every must be at least 1")
        if self.strategy == "halving" and (not self.rungs or sorted(self.rungs) != list(self.rungs)
                                           or self.rungs[-1] != 1.0 or self.rungs[0] <= 0 or self.eta <= 1):
            raise ValueError("halving: rungs increasing in (0, 1], the last 1.0, and eta > 1")
        if self.half_width is not None and self.half_width <= 0:
            raise ValueError("half_width must be positive")

    @property
    def top_k(self) -> int:
        if not self.goal.startswith("top:"):
            return 1
        try:
            return int(self.goal.split(":", 1)[1])
        except ValueError:
            return 0

    @property
    def screening(self) -> bool:
        return self.strategy == "halving"

    def alpha_per_comparison(self, k: int) -> float:
        """alpha for one comparison (one pair's CS) among ``k`` configurations."""
        if self.strategy == "race":
            return self.alpha / max(k * (k - 1) // 2, 1)
        if self.strategy == "incumbent":
            return self.alpha / max(k - 1, 1)
        return self.alpha

    def record(self) -> dict[str, Any]:
        return asdict(self) | {"rungs": list(self.rungs)}


@dataclass(frozen=True)
class Decision:
    """One action of the decision log: at step ``t`` (positions admitted), ``config`` is
    ``action`` (stopped_early, or kept: screening's survivors), by the comparison with ``by`` (or
    its own CS), whose bounds were ``[lo, hi]``."""
    t: int
    config: str
    action: str
    reason: str
    by: str = ""
    lo: float = float("nan")
    hi: float = float("nan")

    def record(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}
