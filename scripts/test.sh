#!/usr/bin/env bash
# Set up (idempotent, reuses .venv and .cache) and run the whole test suite, real-model tests included.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$REPO/scripts/setup.sh"
cd "$REPO"
export RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled HF_HUB_OFFLINE=1
exec "${DATELINE_VENV:-$REPO/.venv}/bin/python" -m pytest -ra --durations=30 "$@"
