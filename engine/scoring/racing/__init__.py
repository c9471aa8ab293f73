"""Decisions of an adaptive evaluation (``race``): which configurations to stop, from what, and
why. ``engine.scoring.racing`` re-exports the names the driver, race-replay and the tests import."""

from engine.scoring.racing.race import SCREENING, STRATEGIES, Decision, Design, Race, replay

__all__ = ["Decision", "Design", "Race", "SCREENING", "STRATEGIES", "replay"]
