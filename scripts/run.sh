#!/usr/bin/env bash
# Set up (idempotent) and run the main job: newsagent on the bundled sample, the offline model and the
# paper's rule-based baseline in one job (one sweep), then the HTML report with their paired comparison
# and a page per episode; prints the report's path. Extra arguments are Hydra overrides for the run.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$REPO/scripts/setup.sh"
cd "$REPO"
export RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}" HF_HUB_OFFLINE=1
DATELINE="${DATELINE_VENV:-$REPO/.venv}/bin/dateline"
RUN_DIR="runs/newsagent-sample"
status=0
"$DATELINE" run -m agent=newsagent,newsagent_rule_based "run.dir=$RUN_DIR" "$@" || status=$?
# the report is written whatever the run's status: it lists the failures too
"$DATELINE" report "$RUN_DIR" --out "$RUN_DIR/report" >/dev/null
echo "report: $REPO/$RUN_DIR/report/report.html"
exit "$status"
