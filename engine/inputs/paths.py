"""Where things are: the installation's own files, the working folder, and how a path in a config
resolves.

dateline runs from a checkout or from an installed wheel. Either way :data:`PACKAGE_ROOT` is the
folder that holds the ``engine`` package (the checkout, or ``site-packages``), and the bundled
samples' default paths (``engine/benchmarks/newsagent/sample_data``) are relative to it. What a run
writes (run dirs, pairwise dirs) and the data a user names go by the *working folder*: the one
``dateline`` was started in (``DATELINE_WORKDIR``, which the driver passes on to its Ray workers),
never the installation.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2]    # engine/inputs/paths.py -> the checkout or site-packages


def is_checkout() -> bool:
    """Whether dateline runs from its repository (an editable install or PYTHONPATH), not a wheel."""
    return (PACKAGE_ROOT / "pyproject.toml").is_file() and (PACKAGE_ROOT / "engine" / "__init__.py").is_file()


def workdir() -> Path:
    """The working folder relative paths mean: ``DATELINE_WORKDIR`` (set by the ``dateline`` command for
    its own processes and its Ray workers), else this process's."""
    return Path(os.environ.get("DATELINE_WORKDIR") or os.getcwd())


def out_path(p: str | Path) -> Path:
    """A path a run writes (a run dir, a pairwise dir): absolute as given, else in the working folder."""
    q = Path(p)
    return q if q.is_absolute() else workdir() / q


def data_path(p: str | Path) -> Path:
    """A path a config reads (a dataset, the bundled samples): absolute as given; else in the working
    folder when it exists there, else in the installation (the bundled samples) when it exists
    there, else in the working folder (so that the error names where the user meant)."""
    q = Path(p)
    if q.is_absolute():
        return q
    here = workdir() / q
    if here.exists():
        return here
    bundled = PACKAGE_ROOT / q
    return bundled if bundled.exists() else here


def conf_dir() -> Path:
    """The Hydra config folder: ``conf/`` of the checkout, or the copy an installed wheel carries
    (``dateline/conf``, put there by setup.py's build step)."""
    checkout = PACKAGE_ROOT / "conf"
    return checkout if is_checkout() and checkout.is_dir() else PACKAGE_ROOT / "dateline" / "conf"
