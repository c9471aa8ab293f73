"""The run's Parquet dataset: the only module that knows its layout.

    RUN_DIR/
      episodes/part-*.parquet   one row per finished episode
      steps/part-*.parquet      one row per model turn / environment step
      metrics/metrics.parquet   metric rows per (benchmark, model, agent config)
      judgements/part-*.parquet one row per judge call's result (episode, judge identity, key)
      run-*.json                what each run did (counts, timings, uptime, prices)
      _staging/                 shards are written here, then renamed into place

    PAIRWISE_DIR/               (``dateline pairwise``)
      comparisons/part-*.parquet  one row per planned comparison (task, pair, order, seed)
      judgements/part-*.parquet   verdicts, keyed by (comparison id, judge identity, protocol)
      systems.json                the compared systems; pairwise-*.json: what each stage did

A flush writes the steps shard first, then the episodes shard; both carry the flush's
``batch_id``. An episode exists once its episodes row does; readers keep, per episode id, the
best row (status ok over error, then newest) and only the steps of that row's batch, so a kill
between the two renames, or a re-run of a failed episode, never shows lost or duplicated rows.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from engine.protocol import MetricRow, StepRecord

EPISODE_FIELDS = [
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
]

STEP_SCHEMA = pa.schema([
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
])

METRIC_SCHEMA = pa.schema([
    pa.field("benchmark", pa.string()), pa.field("model", pa.string()), pa.field("config_hash", pa.string()),
    pa.field("agent", pa.string()), pa.field("data", pa.string()),
    pa.field("judge", pa.string()),          # judge identity behind the judged metrics ("" when nothing was judged)
    pa.field("judge_model", pa.string()),
    pa.field("self_judged", pa.bool_()),     # the model under test judged its own outputs
    pa.field("metric", pa.string()), pa.field("value", pa.float64()), pa.field("n", pa.int64()),
])

JUDGEMENT_SCHEMA = pa.schema([
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
])


COMPARISON_SCHEMA = pa.schema([
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
])


def _conform(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """``t`` in ``schema``'s column order and types; columns it was written without are nulls."""
    for name in schema.names:
        if name not in t.column_names:
            t = t.append_column(schema.field(name), pa.nulls(t.num_rows, schema.field(name).type))
    return t.select(schema.names).cast(schema)


def episode_schema(extra: Iterable[pa.Field]) -> pa.Schema:
    return pa.schema(EPISODE_FIELDS + list(extra))


def _batch_id() -> str:
    return f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"


class _ShardedDir:
    """A folder of tables written as atomic shards (staged, fsynced, renamed into place)."""
    SUBDIRS: tuple[str, ...] = ()

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        for sub in (*self.SUBDIRS, "_staging"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    def _write(self, table: pa.Table, sub: str, name: str) -> Path:
        staged = self.root / "_staging" / f"{sub}-{name}"
        pq.write_table(table, staged)
        with open(staged, "rb") as f:
            os.fsync(f.fileno())
        final = self.root / sub / name
        os.replace(staged, final)
        return final

    def write_judgements(self, rows: list[dict[str, Any]]) -> str:
        """One shard of judge results (the judge stage flushes as it goes)."""
        if not rows:
            return ""
        batch_id = _batch_id()
        for r in rows:
            r["batch_id"] = batch_id
        self._write(pa.Table.from_pylist(rows, schema=JUDGEMENT_SCHEMA), "judgements", f"part-{batch_id}.parquet")
        return batch_id

    def judgements(self, judge: str | None = None) -> dict[str, dict[str, str | None]]:
        """``{episode_id: {key: value}}`` for one judge (all judges when None); per (episode, key)
        an ok row wins over a failed one, then the newest. A failed judgement maps to None."""
        table = self._read("judgements", JUDGEMENT_SCHEMA)
        best: dict[tuple[str, str], tuple[tuple[int, str], str | None]] = {}
        for r in table.select(["episode_id", "judge", "key", "value", "ok", "batch_id"]).to_pylist():
            if judge is not None and r["judge"] != judge:
                continue
            k = (r["episode_id"], r["key"])
            rank = (1 if r["ok"] else 0, r["batch_id"])
            if k not in best or rank > best[k][0]:
                best[k] = (rank, r["value"] if r["ok"] else None)
        out: dict[str, dict[str, str | None]] = {}
        for (eid, key), (_, value) in best.items():
            out.setdefault(eid, {})[key] = value
        return out

    def judgements_by_judge(self, parse: Callable[[str, str], str | None] | None = None
                            ) -> dict[str, dict[str, dict[str, str | None]]]:
        """``{judge id: {episode_id: {key: value}}}``, every judge kept apart (same precedence as
        :meth:`judgements`). With ``parse(key, raw_output)``, an ok row's value is re-read from its
        raw output through the current parser, so a parser fix applies to stored judgements: an
        answer the parser now rejects counts as malformed (None)."""
        rows = self._read("judgements", JUDGEMENT_SCHEMA).select(
            ["episode_id", "judge", "key", "value", "ok", "batch_id", "raw_output"]).to_pylist()
        best: dict[tuple[str, str, str], tuple[tuple[int, str], dict[str, Any]]] = {}
        for r in rows:
            k = (r["judge"] or "", r["episode_id"], r["key"])
            rank = (1 if r["ok"] else 0, r["batch_id"])
            if k not in best or rank > best[k][0]:
                best[k] = (rank, r)
        out: dict[str, dict[str, dict[str, str | None]]] = {}
        for (judge, eid, key), (_, r) in best.items():
            value = r["value"] if r["ok"] else None
            if value is not None and parse is not None:
                value = parse(key, r["raw_output"] or "")
            out.setdefault(judge, {}).setdefault(eid, {})[key] = value
        return out

    def judges(self) -> dict[str, dict[str, str]]:
        """``{judge id: {"model", "kind", "prompt"}}`` for every judge with rows here. Rows written
        before the identity columns existed give the model from the id ("<model>:<hash>")."""
        out: dict[str, dict[str, str]] = {}
        cols = ["judge", "judge_model", "judge_kind", "judge_prompt"]
        for r in self._read("judgements", JUDGEMENT_SCHEMA).select(cols).to_pylist():
            jid = r["judge"] or ""
            if jid not in out or not out[jid]["kind"]:
                out[jid] = {"model": r["judge_model"] or jid.rsplit(":", 1)[0], "kind": r["judge_kind"] or "",
                            "prompt": r["judge_prompt"] or ""}
        return out

    def judgement_rows(self) -> list[dict[str, Any]]:
        """Every judgement row ever written (all attempts' summaries, all judges), for accounting."""
        return self._read("judgements", JUDGEMENT_SCHEMA).to_pylist()

    def read_json(self, name: str) -> Any:
        path = self.root / name
        return json.loads(path.read_text()) if path.exists() else None

    def run_infos(self, prefix: str = "run-") -> list[dict[str, Any]]:
        """The info JSONs drivers leave after each run (``run-*.json``, ``pairwise-*.json``)."""
        return [json.loads(p.read_text()) for p in sorted(self.root.glob(f"{prefix}*.json"))]

    def write_json(self, name: str, obj: Any) -> None:
        tmp = self.root / "_staging" / name
        tmp.write_text(json.dumps(obj, indent=2, default=str))
        os.replace(tmp, self.root / name)

    # -- reading ---------------------------------------------------------------------------
    def _read(self, sub: str, schema: pa.Schema) -> pa.Table:
        files = sorted((self.root / sub).glob("part-*.parquet"))
        if not files:
            return schema.empty_table()
        return pa.concat_tables([_conform(pq.read_table(f), schema) for f in files])


class EpisodeStore(_ShardedDir):
    """A run directory: episodes, steps, judgements and metrics of every config run into it."""
    SUBDIRS = ("episodes", "steps", "metrics", "judgements")

    def __init__(self, run_dir: str | Path, extra_fields: Iterable[pa.Field] = ()) -> None:
        super().__init__(run_dir)
        self.schema = episode_schema(extra_fields)

    def write_batch(self, episodes: list[dict[str, Any]], steps: list[dict[str, Any]]) -> str:
        """Write finished episodes and their steps as one flush; returns the batch id."""
        if not episodes:
            return ""
        batch_id = _batch_id()
        name = f"part-{batch_id}.parquet"
        for r in episodes:
            r["batch_id"] = batch_id
        for s in steps:
            s["batch_id"] = batch_id
        self._write(pa.Table.from_pylist(steps, schema=STEP_SCHEMA), "steps", name)
        self._write(pa.Table.from_pylist(episodes, schema=self.schema), "episodes", name)
        return batch_id

    def write_metrics(self, rows: list[dict[str, Any]]) -> Path:
        return self._write(pa.Table.from_pylist(rows, schema=METRIC_SCHEMA), "metrics", "metrics.parquet")

    def episodes(self) -> pa.Table:
        """Deduplicated episodes: per id, an ok row over an error row, then the newest."""
        table = self._read("episodes", self.schema)
        if table.num_rows == 0:
            return table
        rows = table.select(["episode_id", "status", "batch_id"]).to_pylist()
        best: dict[str, tuple[tuple[int, str], int]] = {}
        for i, r in enumerate(rows):
            key = (1 if r["status"] == "ok" else 0, r["batch_id"])
            if r["episode_id"] not in best or key > best[r["episode_id"]][0]:
                best[r["episode_id"]] = (key, i)
        keep = sorted(i for _, i in best.values())
        return table.take(pa.array(keep, pa.int64()))

    def steps(self) -> pa.Table:
        table = self._read("steps", STEP_SCHEMA)
        if table.num_rows == 0:
            return table
        ep = self.episodes().select(["episode_id", "batch_id"]).to_pylist()
        wanted = {(r["episode_id"], r["batch_id"]) for r in ep}
        keys = table.select(["episode_id", "batch_id", "step"]).to_pylist()
        seen: set[tuple[str, str, int]] = set()
        keep = []
        for i, r in enumerate(keys):
            k = (r["episode_id"], r["batch_id"], r["step"])
            if (k[0], k[1]) in wanted and k not in seen:  # a compaction cut short leaves copies
                seen.add(k)
                keep.append(i)
        return table.take(pa.array(keep, pa.int64()))

    def metrics(self) -> pa.Table:
        path = self.root / "metrics" / "metrics.parquet"
        return _conform(pq.read_table(path), METRIC_SCHEMA) if path.exists() else METRIC_SCHEMA.empty_table()

    def finished_ids(self) -> set[str]:
        """Ids of episodes that need no re-run (status ok)."""
        table = self._read("episodes", pa.schema([f for f in EPISODE_FIELDS if f.name in ("episode_id", "status")]))
        return {r["episode_id"] for r in table.to_pylist() if r["status"] == "ok"}

    # -- maintenance -----------------------------------------------------------------------
    def compact(self) -> None:
        """Rewrite each table as one shard of its deduplicated rows (atomic per table)."""
        for sub, table in (("steps", self.steps()), ("episodes", self.episodes())):
            old = sorted((self.root / sub).glob("part-*.parquet"))
            if len(old) <= 1:
                continue
            name = f"part-{time.time_ns():020d}-compact.parquet"
            self._write(table, sub, name)
            for f in old:
                f.unlink()


class PairwiseStore(_ShardedDir):
    """A pairwise-judging directory: the planned comparisons and their judgements."""
    SUBDIRS = ("comparisons", "judgements")

    def write_comparisons(self, rows: list[dict[str, Any]]) -> str:
        if not rows:
            return ""
        batch_id = _batch_id()
        rows = [{**r, "batch_id": batch_id} for r in rows]
        self._write(pa.Table.from_pylist(rows, schema=COMPARISON_SCHEMA), "comparisons", f"part-{batch_id}.parquet")
        return batch_id

    def comparisons(self) -> list[dict[str, Any]]:
        """One row per comparison id (the first written; a comparison's content never changes)."""
        seen: dict[str, dict[str, Any]] = {}
        for r in self._read("comparisons", COMPARISON_SCHEMA).to_pylist():
            seen.setdefault(r["comparison_id"], r)
        return list(seen.values())


def step_rows(episode_id: str, steps: list[StepRecord]) -> list[dict[str, Any]]:
    return [{"episode_id": episode_id, **asdict(s)} for s in steps]


def metric_rows(benchmark: str, model: str, config_hash: str, agent: str, data: str,
                rows: list[MetricRow], judge: str = "", judge_model: str = "",
                self_judged: bool = False) -> list[dict[str, Any]]:
    return [{"benchmark": benchmark, "model": model, "config_hash": config_hash, "agent": agent, "data": data,
             "judge": judge, "judge_model": judge_model, "self_judged": self_judged,
             "metric": m.metric, "value": m.value, "n": m.n} for m in rows]
