"""Where the repository is, and how a path in a config resolves against it."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]       # engine/inputs/paths.py -> the repository


def repo_path(p: str | Path) -> Path:
    """A path from a config: absolute as given, relative to the repository root otherwise."""
    q = Path(p)
    return q if q.is_absolute() else REPO_ROOT / q
