"""Decisions of an adaptive evaluation: which configurations to stop, from what, and why.
``design.py`` holds what decides (:class:`Design`) and what is recorded (:class:`Decision`),
``race.py`` the state of one run (what is admitted, when a step is taken, what a reader gets,
:func:`replay`), and ``rules.py`` each strategy's rule. ``engine.scoring.racing`` re-exports the
names the driver, race-replay and the tests import."""

from engine.scoring.racing.design import SCREENING, STRATEGIES, Decision, Design
from engine.scoring.racing.race import Race, replay

__all__ = ["Decision", "Design", "Race", "SCREENING", "STRATEGIES", "replay"]
