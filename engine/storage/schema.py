"""The tables of a run dir and of a pairwise dir: their columns and types, one schema each, and
:func:`conform` (a table read from an older shard in today's schema)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

log = logging.getLogger("dateline.storage")


EPISODE_FIELDS: list[pa.Field[Any]] = [
    pa.field("episode_id", pa.string(), nullable=False),
    pa.field("batch_id", pa.string(), nullable=False),
    pa.field("config_hash", pa.string()),
    pa.field("benchmark", pa.string()),
    pa.field("task_id", pa.string()),
    pa.field("model", pa.string()),
    pa.field("agent", pa.string()),          # agent config as JSON
    pa.field("data", pa.string()),           # benchmark config as JSON, without the task limit
    pa.field("seed", pa.int64()),
    pa.field("status", pa.string()),         # ok | error
    pa.field("error", pa.string()),
    pa.field("finish_reason", pa.string()),
    pa.field("output", pa.string()),
    pa.field("n_steps", pa.int32()),
    pa.field("tokens_in", pa.int64()),
    pa.field("tokens_out", pa.int64()),
    pa.field("wall_time_s", pa.float64()),
    pa.field("started_at", pa.timestamp("ms", tz="UTC")),
    pa.field("finished_at", pa.timestamp("ms", tz="UTC")),
    pa.field("worker", pa.string()),
    pa.field("replica", pa.int32()),
    # what generated it beyond the config hash (engine.identity.engine_identity, JSON): weights
    # (path + content fingerprint), engine args, reproducible mode, the agent prompts' version.
    # A configuration never holds two (a resumed run that would mix them is refused).
    pa.field("engine", pa.string()),
    pa.field("weights_id", pa.string()),     # engine.hosting.weights.weights_id (self-judging is decided by it)
]

_CALL_FIELDS: list[pa.Field[Any]] = [
    pa.field("episode_id", pa.string(), nullable=False),
    pa.field("batch_id", pa.string(), nullable=False),     # the episode's (or the judgement's) batch
    pa.field("purpose", pa.string()),        # episode | judge
    pa.field("judge", pa.string()),          # judge id (judge calls)
    pa.field("key", pa.string()),            # judgement key (judge calls)
    pa.field("call", pa.int32()),            # position among the episode's (or judgement's) calls
    pa.field("message_ids", pa.list_(pa.string())),
    pa.field("completion", pa.string()),
    pa.field("finish_reason", pa.string()),
    pa.field("error", pa.string()),
    pa.field("model", pa.string()),
    pa.field("replica", pa.int32()),
    pa.field("endpoint", pa.string()),
    pa.field("params", pa.string()),         # JSON: max_tokens, temperature, top_p, seed, constraints
    pa.field("tokens_in", pa.int64()),
    pa.field("tokens_out", pa.int64()),
    pa.field("latency_s", pa.float64()),
    pa.field("started_at", pa.timestamp("ms", tz="UTC")),
]

CALL_SCHEMA = pa.schema(_CALL_FIELDS)

MESSAGE_SCHEMA = pa.schema([pa.field("message_id", pa.string(), nullable=False),
                            pa.field("batch_id", pa.string(), nullable=False),
                            pa.field("role", pa.string()), pa.field("content", pa.string())])

_STEP_FIELDS: list[pa.Field[Any]] = [
    pa.field("episode_id", pa.string(), nullable=False),
    pa.field("batch_id", pa.string(), nullable=False),
    pa.field("step", pa.int32()),
    pa.field("turn", pa.string()),
    pa.field("observation_chars", pa.int32()),
    pa.field("raw_output", pa.string()),
    pa.field("parsed_action", pa.string()),
    pa.field("result", pa.string()),
    pa.field("ok", pa.bool_()),
    pa.field("tokens_in", pa.int32()),
    pa.field("tokens_out", pa.int32()),
    pa.field("latency_s", pa.float64()),
    pa.field("call", pa.int32()),            # the model call behind the step (calls.call), -1 if none
]

STEP_SCHEMA = pa.schema(_STEP_FIELDS)

_METRIC_FIELDS: list[pa.Field[Any]] = [
    pa.field("benchmark", pa.string()), pa.field("model", pa.string()), pa.field("config_hash", pa.string()),
    pa.field("agent", pa.string()), pa.field("data", pa.string()),
    pa.field("judge", pa.string()),          # judge identity behind the judged metrics ("" when nothing was judged)
    pa.field("judge_model", pa.string()),
    pa.field("self_judged", pa.bool_()),     # the model under test judged its own outputs
    pa.field("metric", pa.string()), pa.field("value", pa.float64()),
    pa.field("n", pa.int64()),               # episodes the value is over (engine/scoring/outcomes.py)
    # what the number is over (engine/scoring/outcomes.py): the episodes planned for the configuration,
    # those with a scored result, those that failed, were stopped by the budget or never ran
    pa.field("n_planned", pa.int64()), pa.field("n_scored", pa.int64()), pa.field("n_error", pa.int64()),
    pa.field("n_budget_stopped", pa.int64()), pa.field("n_not_run", pa.int64()),
    pa.field("incomplete", pa.bool_()),      # some planned episode has no scored result
    pa.field("n_outside_plan", pa.int64()),  # stored episodes the plan leaves out (an earlier run planned more)
    pa.field("n_judged", pa.int64()),        # scored planned episodes the row's judge saw (null: no judge)
    pa.field("n_stopped_early", pa.int64()),  # planned episodes an adaptive rule never started (in no mean)
    pa.field("score_failures", pa.string()), # as_wrong | exclude (run.score_failures)
    pa.field("scope", pa.string()),          # all (the configuration's plan) | common (tasks every compared config finished)
    pa.field("task_set", pa.string()),       # hash of the planned (task, seed) set
    pa.field("tasks_dropped", pa.int64()),   # scope common: planned tasks of this config left out
    pa.field("note", pa.string()),           # what else a reader must know (e.g. who wrote the checklists)
    # the value's 95% interval (engine.scoring.stats.interval; null where there is none) and how it was made:
    # exact | bootstrap | too_few_tasks, "" for a value that is not a mean (older files: null)
    pa.field("lo", pa.float64()), pa.field("hi", pa.float64()), pa.field("interval", pa.string()),
    # the model's knowledge cutoff (YYYY-MM-DD) its plan was read under (engine/scoring/cutoff.py:
    # the <metric>.after_cutoff rows are over the questions dated after it); null: unknown
    pa.field("knowledge_cutoff", pa.string()),
    # a raced run (engine/scoring/race_view.py): "STOPPED EARLY" or "SCREENING" on every row of a
    # configuration the race stopped (its value is then NaN or a screening mean), else null
    pa.field("race", pa.string()),
    # a judge that failed its own checks (engine/scoring/judge_checks.py): the sentence, on each of its
    # judge-based rows, else null
    pa.field("judge_check", pa.string()),
]

METRIC_SCHEMA = pa.schema(_METRIC_FIELDS)

# the Parquet metadata key of the stored metrics table: what its rows were computed from
METRIC_KEY = "dateline.key"

_JUDGEMENT_FIELDS: list[pa.Field[Any]] = [
    pa.field("episode_id", pa.string(), nullable=False),
    pa.field("batch_id", pa.string(), nullable=False),
    pa.field("judge", pa.string()),          # judge identity id (hashes model, endpoint, sampling, prompt version)
    pa.field("judge_model", pa.string()),    # the judging model's name
    pa.field("judge_kind", pa.string()),     # hosted | openai_compatible
    pa.field("judge_prompt", pa.string()),   # version of the benchmark's judge prompts (a hash of their text)
    pa.field("key", pa.string()),            # which judgement of the episode (e.g. "grade")
    pa.field("value", pa.string()),          # parsed value; null when every attempt was malformed
    pa.field("ok", pa.bool_()),
    pa.field("attempts", pa.int32()),
    pa.field("raw_output", pa.string()),     # the last attempt's text
    pa.field("error", pa.string()),
    pa.field("tokens_in", pa.int64()),
    pa.field("tokens_out", pa.int64()),
    pa.field("latency_s", pa.float64()),
    pa.field("truncated", pa.bool_()),       # the last attempt stopped at its max_tokens (finish_reason length)
    pa.field("evaluation", pa.string()),     # the evaluation settings it was made under (JSON; part of the judge id)
    pa.field("judge_weights", pa.string()),  # weights id of the judging model (self-judging is decided by it)
    # the configuration whose episode was judged (reduce reads one configuration's judgements at a
    # time); null in rows written before it, and in pairwise stores
    pa.field("config_hash", pa.string()),
]

JUDGEMENT_SCHEMA = pa.schema(_JUDGEMENT_FIELDS)

_PLAN_FIELDS: list[pa.Field[Any]] = [
    pa.field("config_hash", pa.string(), nullable=False),
    pa.field("batch_id", pa.string(), nullable=False),     # one plan = one batch; the newest per config counts
    pa.field("episode_id", pa.string()),
    pa.field("task_id", pa.string()),
    pa.field("seed", pa.int64()),
    pa.field("task_set", pa.string()),       # hash of the plan's (task, seed) pairs
    pa.field("score_failures", pa.string()), # run.score_failures of the run that planned it
    pa.field("evaluation", pa.string()),     # the benchmark's evaluation settings then (JSON)
    pa.field("failure", pa.string()),        # what the episode counts as without a scored result (JSON; "" = the benchmark's default)
    # the episode's question date, for a benchmark whose questions are dated (engine/scoring/cutoff.py;
    # null: undated, or planned before it was recorded)
    pa.field("date", pa.string()),
    # the model's knowledge cutoff when it was planned (engine/config/cutoffs.py; null: unknown)
    pa.field("knowledge_cutoff", pa.string()),
]

PLAN_SCHEMA = pa.schema(_PLAN_FIELDS)

_COMPARISON_FIELDS: list[pa.Field[Any]] = [
    pa.field("comparison_id", pa.string(), nullable=False),
    pa.field("batch_id", pa.string(), nullable=False),
    pa.field("benchmark", pa.string()),
    pa.field("task_id", pa.string()),
    pa.field("system_a", pa.string()),       # the pair, sorted; outcomes are stated for a vs b
    pa.field("system_b", pa.string()),
    pa.field("first", pa.string()),          # system shown as the first article
    pa.field("second", pa.string()),
    pa.field("order", pa.string()),          # random (seeded) | swapped (the both-orders repeat)
    pa.field("seed", pa.int64()),
    pa.field("first_sha", pa.string()),      # hashes of the two texts judged
    pa.field("second_sha", pa.string()),
]

COMPARISON_SCHEMA = pa.schema(_COMPARISON_FIELDS)

# Rows per Parquet row group of episodes and judgements shards (written sorted by config_hash): a
# per-configuration read prunes row groups of other configurations by their min/max statistics.
EPISODE_ROW_GROUP = 1024

JUDGEMENT_ROW_GROUP = 8192

def conform(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """``t`` in ``schema``'s column order and types; columns it was written without are nulls."""
    for name in schema.names:
        if name not in t.column_names:
            t = t.append_column(schema.field(name), pa.nulls(t.num_rows, schema.field(name).type))
    return t.select(schema.names).cast(schema)

def episode_schema(extra: Iterable[pa.Field[Any]]) -> pa.Schema:
    return pa.schema(EPISODE_FIELDS + list(extra))
