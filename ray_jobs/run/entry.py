"""``dateline run`` / ``python -m ray_jobs.run``: Hydra composes every point of a sweep first, then
the sweep runs as one job; SIGINT and SIGTERM stop it cleanly."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from engine.config import Config
from engine.errors import ConfigError
from ray_jobs.cluster import signals
from ray_jobs.run.info import RunInfo
from ray_jobs.run.results import exit_code
from ray_jobs.run.sweep import run_sweep

log = logging.getLogger("dateline.run")


def hydra_entry(verb: str = "run", check: Callable[[list[Config]], None] | None = None,
                then: Callable[[list[Config], list[RunInfo]], None] | None = None) -> None:
    """``dateline run``: Hydra composes every point of a sweep (``-m``) first, then the sweep runs
    as one job (:func:`run_sweep`), so a typo in any point fails before anything starts.
    ``dateline build`` is the same job (``verb``) with ``check`` on the composed points before it
    starts and ``then`` (the publish step) after it, under the same stop handling."""
    from ray_jobs.config.harness import hydra_main
    from ray_jobs.config.help import config_help

    if any(a in ("-h", "--help") for a in sys.argv[1:]):        # dateline's help, not Hydra's
        sys.stdout.write(config_help("config", [a for a in sys.argv[1:] if a not in ("-h", "--help")], f"dateline {verb}"))
        return
    cfgs: list[Config] = []
    infos: list[RunInfo] = []
    command = ["dateline", verb, *sys.argv[1:]]      # before Hydra adds its search paths to argv

    def sweep(session: Any) -> None:
        if check is not None:
            check(cfgs)
        elif any(c.build is not None for c in cfgs):       # a build's drafts without their publish step
            raise ConfigError(f"build: build={cfgs[0].build.name if cfgs[0].build else ''} is for dateline build, "
                              f"which publishes the release; dateline {verb} would only draft")
        infos.extend(run_sweep(cfgs, session, command))
        if then is not None:
            then(cfgs, infos)
    # SIGINT / SIGTERM stop the run cleanly: one line, status 130 / 143 (ray_jobs/cluster/signals.py)
    signals.arm()
    signum = 0
    try:
        hydra_main("config", lambda cfg, session: cfgs.append(cfg), after=sweep)
        signals.over()
    except BaseException as e:
        if not (signum := signals.stopped_by(e)):
            signals.disarm()       # a refused or failed run gives the caller's handlers back too
            raise
        if isinstance(e, Exception):        # what the stop tore down under a call
            log.info("while stopping: %s: %s", type(e).__name__, str(e).strip().split("\n")[0][:300])
    if signum:                  # outside the except: the run's frames (and what they hold) are released
        raise SystemExit(signals.report(signum))
    signals.disarm()           # the caller's handlers again (a signal after the results changes nothing)
    code, why = exit_code(cfgs, infos)
    if code:
        sys.stderr.write(why + "\n")
        raise SystemExit(code)
