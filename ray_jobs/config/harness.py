"""The job harness: every Hydra command (``run``, ``estimate``, ``pairwise``, ``analyst-checklists``)
runs its body under :func:`hydra_main`, which composes each point, resolves hub ids, redacts the
sweep's saved config and shares one :class:`~ray_jobs.cluster.session.Session` across the points.
The one module of ``config`` that touches ``cluster``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from engine.errors import ConfigError, DataError
from engine.runtime.logs import configure as configure_logging
from engine.runtime.runlock import RunDirLocked
from ray_jobs.config.compose import CONF_DIR, register, searchpath_overrides


def _redact_multirun_yaml() -> None:
    """Hydra's sweeper saves the composed config as ``multirun.yaml`` in its sweep folder before the
    first job; rewrite it with secrets redacted (``engine.config.redact``: env values, URL tokens)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from engine.config import REDACTED, redact, secret_values

    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return
    path = Path(hc.sweep.dir) / "multirun.yaml"
    if path.exists():
        cfg = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        text = OmegaConf.to_yaml(OmegaConf.create(redact(cfg)))
        for secret in sorted(secret_values(cfg), key=len, reverse=True):    # also in the override lists
            text = text.replace(secret, REDACTED)
        path.write_text(text)


def hydra_main(config_name: str, body: Callable[[Any, Any], object],
               after: Callable[[Any], Any] | None = None) -> None:
    """Run ``body(typed_config, session)`` under Hydra (``-m`` sweeps included) with one
    :class:`~ray_jobs.cluster.session.Session` for the whole process, closed at the end: every point of a
    sweep shares Ray, model pools, index and services. ``after(session)`` runs once Hydra has
    called ``body`` for every point (a driver that collects the points and runs them together)."""
    import hydra
    from omegaconf import DictConfig

    from ray_jobs.cluster.session import Session

    register()
    session = Session()

    @hydra.main(version_base="1.3", config_path=CONF_DIR, config_name=config_name)
    def _main(dcfg: DictConfig) -> None:
        _redact_multirun_yaml()
        configure_logging()
        for name in ("httpx", "httpx2", "openai", "faiss.loader", "sentence_transformers", "urllib3"):
            logging.getLogger(name).setLevel(logging.WARNING)
        from engine.inputs.hub import resolve_config

        cfg = OmegaConf.to_object(dcfg)
        try:
            resolve_config(cfg)                 # hub ids -> the local cache's snapshot folders
            body(cfg, session)
        except (ConfigError, DataError, RunDirLocked) as e:
            raise OneLine(e) from None     # past Hydra's job wrapper, which prints a traceback

    import sys

    sys.argv[1:1] = searchpath_overrides()       # before the user's overrides, which may extend it
    # Hydra's launcher logs every job's overrides (model.env values, URL tokens) at INFO: not shown
    logging.getLogger("hydra").setLevel(logging.WARNING)
    try:
        _main()
        if after is not None:
            after(session)
    except OneLine as e:
        raise e.error from None             # the CLI says it in one line, exit status 2
    finally:
        session.close()


class OneLine(BaseException):
    """Carries one of dateline's one-line errors out of a Hydra job (Hydra catches ``Exception``
    there and prints a traceback with exit status 1)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error

