#!/usr/bin/env bash
# Issue 10's before/after numbers: the same `dateline run` on an older commit (a git worktree,
# same venv and model cache) and on this tree, into fresh run dirs; compare their metrics tables.
#   scripts/compare_old_main.sh OLD_COMMIT OUT_DIR [hydra overrides ...]
# e.g. scripts/compare_old_main.sh 2e50aac /tmp/cmp benchmark=analyst agent=analyst \
#        benchmark.judge_max_tokens=512 benchmark.max_claims=15
# analyst on this tree needs its checklists built once first (dateline analyst-checklists ...
# benchmark.checklists_dir=OUT_DIR/checklists); the script does that when benchmark=analyst.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OLD="$1"; OUT="$2"; shift 2
PY="${DATELINE_VENV:-$REPO/.venv}/bin/python"
export RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled HF_HUB_OFFLINE=1 DATELINE_CACHE="${DATELINE_CACHE:-$REPO/.cache}"
mkdir -p "$OUT"
[[ -d "$OUT/old-tree" ]] || git -C "$REPO" worktree add -q "$OUT/old-tree" "$OLD"
(cd "$OUT/old-tree" && PYTHONPATH="$OUT/old-tree" "$PY" -m ray_jobs.cli run "$@" run.progress=false \
   run.dir="$OUT/old") > "$OUT/old.log" 2>&1
NEW=("$@")
if printf '%s\n' "$@" | grep -qx "benchmark=analyst"; then
  NEW+=("benchmark.checklists_dir=$OUT/checklists")
  (cd "$REPO" && "$PY" -m ray_jobs.cli analyst-checklists "${NEW[@]}") > "$OUT/checklists.log" 2>&1
fi
(cd "$REPO" && "$PY" -m ray_jobs.cli run "${NEW[@]}" run.progress=false run.dir="$OUT/new") > "$OUT/new.log" 2>&1
for side in old new; do
  echo "== $side"; "$PY" -c "import pyarrow.parquet as pq,sys; t=pq.read_table(sys.argv[1]+'/metrics').to_pylist(); [print(r.get('metric'), r.get('value'), r.get('n')) for r in t]" "$OUT/$side"
done
