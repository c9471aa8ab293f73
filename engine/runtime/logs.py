"""One log format for every dateline process: the ``dateline`` command, the run's driver, its Ray
actors (the index service, episode workers, judges: Ray puts ``(Actor pid=N)`` in front of what they
write) and the module entry points (``python -m engine.hosting.prepare_model``, the RealTimeQA
converter). Lines go to stderr, results to stdout; ``DATELINE_LOG_LEVEL`` (the CLI's ``--log-level``,
passed on to Ray workers by the driver's runtime_env) sets the level everywhere.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

FORMAT = "[%(asctime)s %(name)s] %(message)s"
DATEFMT = "%H:%M:%S"


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Logs to whatever ``sys.stderr`` is when a record is written (the CLI also runs in-process,
    under test capture or a notebook), never to a stream that was closed since."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def configure(level: str | None = None, *, quiet: bool = False) -> None:
    """Our handler on the root logger, once per process, at ``level`` (default ``DATELINE_LOG_LEVEL``,
    else INFO; ``quiet``, for processes that run many episodes: WARNING unless DEBUG is asked for). A
    process whose root logger someone else configured first (a notebook, pytest) keeps its handlers
    and level; ours is added only where there are none."""
    name = (level or os.environ.get("DATELINE_LOG_LEVEL") or "INFO").upper()
    if quiet and name != "DEBUG":
        name = "WARNING"
    root = logging.getLogger()
    if root.handlers:
        return
    h = _Stderr()
    h.setFormatter(logging.Formatter(FORMAT, datefmt=DATEFMT))
    root.addHandler(h)
    root.setLevel(getattr(logging, name, logging.INFO))
