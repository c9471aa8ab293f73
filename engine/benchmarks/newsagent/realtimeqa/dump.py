"""Reading a RealTime QA dump (step 1 of the specification in the package docstring): moved to
:mod:`engine.inputs.realtimeqa`, which the livenews build shares; re-exported here."""

from __future__ import annotations

from engine.inputs.realtimeqa import MAX_ARTICLE_CHARS, Article, Question, load, week_files

__all__ = ["MAX_ARTICLE_CHARS", "Article", "Question", "load", "week_files"]
