#!/usr/bin/env bash
# Set up (idempotent, reuses .venv and .cache) and run the whole test suite, real-model tests included.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATELINE_SETUP_BROWSER=1 bash "$REPO/scripts/setup.sh"     # the browser tests' Chromium too
cd "$REPO"
export RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled HF_HUB_OFFLINE=1 DATELINE_CI=1   # CI: real-model tests may not skip, full fuzz counts
PY="${DATELINE_VENV:-$REPO/.venv}/bin/python"
# The type checker first: strict on engine/, indexes/, ray_jobs/ ([tool.mypy] in pyproject.toml).
"$PY" -m mypy
exec "$PY" -m pytest -ra --durations=30 "$@"
