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
# Arguments (a path, -k, -x...): one pytest run of them, as before.
if [ "$#" -gt 0 ]; then
    exec "$PY" -m pytest -ra --durations=30 "$@"
fi
# The whole suite, in two pytest runs; both always run, and either failing (exit 5, no test
# collected, included) fails the command:
# 1. every test that is neither `real` nor `serial`, on two xdist workers (each its own RAY_TMPDIR;
#    Ray, `ray start` and the servers the tests start take free ports);
# 2. the `real` tests (most start vLLM on CPU, which takes every core; those needing only a model
#    endpoint share one server, tests/conftest.py `shared_vllm`) and the `serial` ones, one at a time.
status=0
"$PY" -m pytest -ra --durations=30 -n 2 --dist worksteal -m "not real and not serial" || status=$?
echo "scripts/test.sh: the parallel part exited $status" >&2
serial=0
# (DATELINE_TEST_CLOCK: each test's setup+call+teardown seconds and the time, printed as it ends, so
# a run cut short by a time limit still says where its time went)
DATELINE_TEST_CLOCK=1 "$PY" -m pytest -ra --durations=30 -m "real or serial" || serial=$?
echo "scripts/test.sh: the serial part (real and serial tests) exited $serial" >&2
if [ "$status" -ne 0 ] || [ "$serial" -ne 0 ]; then
    exit 1
fi
