#!/usr/bin/env bash
# Set up (idempotent, reuses .venv and .cache) and run the whole test suite, real-model tests included.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATELINE_SETUP_BROWSER=1 bash "$REPO/scripts/setup.sh"     # the browser tests' Chromium too
cd "$REPO"
export RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled HF_HUB_OFFLINE=1 DATELINE_CI=1   # CI: real-model tests may not skip, full fuzz counts
PY="${DATELINE_VENV:-$REPO/.venv}/bin/python"
# The linter, then the type checker, before any test: ruff ([tool.ruff] in pyproject.toml: errors,
# pyflakes, import order, bugbear, pyupgrade) on the whole tree; mypy strict on engine/, indexes/,
# ray_jobs/ ([tool.mypy]). The same two run in pre-commit (.pre-commit-config.yaml).
"$PY" -m ruff check --no-cache .
"$PY" -m mypy
exec "$PY" -m pytest -ra --durations=30 "$@"
