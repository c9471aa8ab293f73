"""The run's Parquet dataset: the only module that knows its layout.

    RUN_DIR/
      episodes/part-*.parquet   one row per finished episode
      steps/part-*.parquet      one row per model turn / environment step
      metrics/metrics.parquet   metric rows per (benchmark, model, agent config)
      judgements/part-*.parquet one row per judge call's result (episode, judge identity, key)
      plans/part-*.parquet      what each run planned per configuration (one row per episode):
                                the denominator of its metrics (engine/scoring/outcomes.py)
      calls/part-*.parquet      one row per model call of an episode or a judge (engine/llm/transcripts.py):
                                params, replica, latency, tokens, completion, its prompt as message ids
      messages/part-*.parquet   each distinct prompt message once (id = hash of role and content)
      run-*.json                what each run did (counts, timings, uptime, prices)
      _staging/                 shards are written here, then renamed into place

    PAIRWISE_DIR/               (``dateline pairwise``)
      comparisons/part-*.parquet  one row per planned comparison (task, pair, order, seed)
      judgements/part-*.parquet   verdicts, keyed by (comparison id, judge identity, protocol)
      systems.json                the compared systems; pairwise-*.json: what each stage did
      plan.json                   the newest stage's plan (settings, systems, comparison ids):
                                  reports count only its comparisons, on texts still current

A flush writes the steps shard first, then the episodes shard; both carry the flush's
``batch_id``. An episode exists once its episodes row does; readers keep, per episode id, the
best row (status ok over error, then newest) and only the steps of that row's batch, so a kill
between the two renames, or a re-run of a failed episode, never shows lost or duplicated rows.

A flush never dies of one row's text. Python text may hold what no UTF-8 file can: a lone
surrogate, e.g. a non-UTF-8 file name (b'chart\xff.png') as ``os.listdir`` decodes it
(surrogateescape: 'chart\udcff.png') in an episode's output or a step's result; Arrow refuses
it, and one such string used to fail the whole flush, and every re-run. So when a table of a
flush cannot be built, each string in its rows (nested values too) has its lone surrogates
escaped (``engine.inputs.fdtree.escape_text``: ``\xff`` for a surrogate-escaped byte, ``\ud800``
for any other) and the row is stored so, with a warning naming the episode and field. A row
that still cannot be encoded (a value of the wrong type) is set aside, not written:
``RUN_DIR/quarantine`` keeps it whole (``engine.inputs.quarantine``, kind ``unencodable_row``: table,
episode id, field, the error, the row as ASCII-escaped JSON), a warning names it, the rest of
the flush lands, and the run summary (and ``dateline show``) counts the episode among those
without a result. An episode whose row was set aside does not exist in the store (its steps and
calls are never read), so the same command runs it again.

RUN_DIR is a local path or a pyarrow filesystem URI (``s3://bucket/prefix``, ``gs://…``); all
I/O goes through ``store.fs``. Reads are ``pyarrow.dataset`` scans with column projection and
filter pushdown, deduplicated with Arrow compute (``docs/design/resume.md``).

The package, by job: ``schema.py`` (the tables' columns), ``fs.py`` (where a store lives),
``shards.py`` (atomic shards: :class:`ShardedDir`), ``select.py`` (vectorised dedup),
``judgements.py`` (the judgements table), ``episodes.py`` (a run dir: :class:`EpisodeStore`),
``pairwise.py`` (:class:`PairwiseStore`), ``rows.py``; the quarantine table is written with the shards (``shards.py``).
Import from here.
"""

from engine.storage.episodes import EpisodeStore
from engine.storage.fs import is_run_dir, is_uri, local_root, open_root, sub_uri, upload_tree
from engine.storage.judgements import JudgedDir
from engine.storage.pairwise import PairwiseStore
from engine.storage.plans import PlanTable, StoredPlan
from engine.storage.rows import metric_rows, step_rows
from engine.storage.schema import (
    CALL_SCHEMA,
    COMPARISON_SCHEMA,
    EPISODE_FIELDS,
    EPISODE_ROW_GROUP,
    JUDGEMENT_ROW_GROUP,
    JUDGEMENT_SCHEMA,
    MESSAGE_SCHEMA,
    METRIC_KEY,
    METRIC_SCHEMA,
    PLAN_SCHEMA,
    STEP_SCHEMA,
    conform,
    episode_schema,
)
from engine.storage.shards import Flush, ShardedDir, read_quarantine, set_aside_episodes, write_quarantine

__all__ = [
    "CALL_SCHEMA", "COMPARISON_SCHEMA", "EPISODE_FIELDS", "EPISODE_ROW_GROUP", "JUDGEMENT_ROW_GROUP",
    "JUDGEMENT_SCHEMA", "MESSAGE_SCHEMA", "METRIC_KEY", "METRIC_SCHEMA", "PLAN_SCHEMA", "STEP_SCHEMA",
    "EpisodeStore", "Flush", "JudgedDir", "PairwiseStore", "PlanTable", "ShardedDir", "StoredPlan", "conform", "episode_schema",
    "is_run_dir", "is_uri", "local_root", "metric_rows", "open_root", "read_quarantine", "set_aside_episodes",
    "step_rows", "sub_uri", "upload_tree", "write_quarantine",
]
