"""The metrics table every reader shows, and the one cache of it (issue 31: reading never writes).

``dateline metrics``, ``dateline tables``, the report, the export and the Python API compute a run
dir's numbers from its episodes, judgements and plans with the same code (engine/scoring/outcomes.py) and
the same defaults. A command's flags change what that command prints, never what another reads.

``metrics/metrics.parquet`` is a cache of the **default** view (each plan's own failure policy,
every judge) of every benchmark of the run dir. Only ``dateline run`` writes it, after its
episodes and judgements are stored. Its Parquet metadata holds the key it was computed under
(:func:`metric_key`): the shards of the episodes, judgements and plans; the code that computes
metrics; and the benchmark data files the metrics read (an analyst checklist edited after the
run changes its scores). A reader uses the cache only while the key still matches and
recomputes otherwise, without writing. So nothing another command did can change what
``dateline tables`` or ``dateline.results(RUN).metrics()`` say, and no flag is ever cached.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from engine.scoring import cutoff, outcomes, views
from engine.scoring.outcome_marks import warnings_of
from engine.scoring.race_view import split_stopped

__all__ = ["store_benchmarks", "metric_key", "metric_table", "refresh", "split_notes", "tables_markdown"]

# the store's tables a metric is computed from (steps, calls and messages are not)
_SOURCES = ("episodes", "judgements", "plans")


def store_benchmarks(store: Any) -> list[str]:
    """The benchmarks with episodes in ``store`` (one column read)."""
    import pyarrow.compute as pc

    t = store.episodes(["benchmark"])
    return sorted(pc.unique(t["benchmark"]).to_pylist()) if t.num_rows else []


def metric_key(store: Any, benchmarks: Sequence[str]) -> str:
    """What the default metrics of ``benchmarks`` in ``store`` are computed from: the store's
    shards, the computing code's source, and each benchmark's data files named in its stored
    configurations (``data_paths`` in the episodes' ``data`` and the plans' evaluation settings)."""
    from engine.benchmarks import get_benchmark
    from engine.config import stable_hash
    from engine.scoring import judge_checks, judges, race_view, stats

    evaluations = [p.evaluation for p in store.plans().values() if p.evaluation]
    # the shared code (outcomes, stats, judges: which judgement counts; views and the cutoff split:
    # which rows there are), then each benchmark's package
    shared = _source_digest([Path(m.__file__ or "") for m in (outcomes, stats, judges, views, cutoff, race_view,
                                                               judge_checks)])
    # an adaptive run's decisions change how a stopped configuration's rows read (race_view.py)
    parts = [store.listing_digest(_SOURCES), shared, store.read_text(race_view.RACE_FILE) or ""]
    for name in sorted(benchmarks):
        bench = get_benchmark(name)
        pkg = Path(sys.modules[type(bench).__module__].__file__ or "").parent
        parts += [name, _source_digest(sorted(pkg.glob("*.py"))), _data_version(store, bench, evaluations),
                  json.dumps(judge_checks.minimums(bench), sort_keys=True)]     # the marks' thresholds
    return stable_hash(*parts, n=24)


def metric_table(store: Any, benchmarks: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """The default metrics rows of ``benchmarks`` (default: every benchmark of the store): the
    cache when it was computed from what the store holds now, else computed here (not stored)."""
    every = store_benchmarks(store)
    names = every if benchmarks is None else [b for b in benchmarks if b in every]
    cached = store.cached_metrics(metric_key(store, every))
    if cached is not None:
        return [r for r in cached if r["benchmark"] in names]
    return _compute(store, names)


def refresh(store: Any) -> list[dict[str, Any]]:
    """Compute the default metrics of every benchmark of ``store`` and store them as the cache
    (``dateline run`` only, under its run dir lock); the rows. The key is taken before the rows
    are read, so rows added meanwhile make the cache stale, never wrong."""
    every = store_benchmarks(store)
    key = metric_key(store, every)
    rows = _compute(store, every)
    store.write_metrics(rows, key)
    return rows


def _compute(store: Any, names: Iterable[str]) -> list[dict[str, Any]]:
    from engine.benchmarks import get_benchmark

    out: list[dict[str, Any]] = []
    for name in names:
        bench = get_benchmark(name)
        out += views.reduce_store(store.with_fields(bench.episode_fields), bench)
    return out


def _source_digest(files: Sequence[Path]) -> str:
    """A digest of the source files a metric value depends on."""
    from engine.config import stable_hash

    return stable_hash(*(f.read_bytes() for f in files if f.is_file()), n=16)


def _data_version(store: Any, bench: Any, evaluations: Sequence[str]) -> str:
    """Names, sizes and modification times of the files under every data path the stored
    configurations of ``bench`` name in their ``data`` or in the plans' ``evaluations`` (a path
    that is not a local file or folder: its text)."""
    import pyarrow.compute as pc

    from engine.config import stable_hash
    from engine.inputs.paths import data_path

    fields = tuple(getattr(bench, "data_paths", ()))
    if not fields:
        return ""
    t = store.episodes(["data"], benchmark=bench.name)
    blobs = [d for d in pc.unique(t["data"]).to_pylist() if d] if t.num_rows else []
    blobs += evaluations
    paths: set[str] = set()
    for blob in blobs:
        try:
            d = json.loads(blob)
        except ValueError:
            continue
        paths |= {str(d[f]) for f in fields if isinstance(d, dict) and d.get(f)}
    parts = []
    for p in sorted(paths):
        root = data_path(p)
        parts.append(p)
        if root.is_file():
            st = root.stat()
            parts.append(f"{st.st_size}:{st.st_mtime_ns}")
        elif root.is_dir():
            for dirpath, dirs, files in os.walk(root):
                dirs.sort()
                for f in sorted(files):
                    st = os.stat(os.path.join(dirpath, f))
                    parts.append(f"{os.path.relpath(os.path.join(dirpath, f), root)}:{st.st_size}:{st.st_mtime_ns}")
    return stable_hash(*parts, n=16)


def split_notes(bench: Any, rows: Sequence[dict[str, Any]]) -> list[str]:
    """What every output prints under a table of ``bench``'s metrics rows (one scope) for dated
    questions: each configuration's knowledge-cutoff split and its primary metrics after the
    cutoff, or "cutoff unknown" (engine/scoring/cutoff.py); nothing for undated questions."""
    return cutoff.split_lines(rows, bench.primary_metrics) if cutoff.splits(bench) else []


def tables_markdown(rows: Sequence[dict[str, Any]], names: Sequence[str], all_tasks: bool = False) -> str:
    """Every table the benchmarks ``names`` define over ``rows`` (default-view metric rows): one
    set per judge, compared configurations on the tasks all of them finished (``all_tasks``:
    each over its own plan), incomplete and self-judged configurations marked."""
    from engine.benchmarks import get_benchmark
    from engine.scoring.judges import SELF_JUDGED

    out = []
    for name in names:
        bench = get_benchmark(name)
        mine = [r for r in rows if r["benchmark"] == name]
        for judge in sorted({r["judge"] or "" for r in mine}):     # one set of tables per judge, never mixed
            these, notes = views.table_rows([r for r in mine if (r["judge"] or "") == judge], all_tasks)
            notes += sorted({f"**{w}** ({r['model']} [{r['config_hash'][:8]}])" for r in these
                             for w in warnings_of(bench, json.loads(r["agent"] or "{}"), json.loads(r["data"] or "{}"))})
            notes += split_notes(bench, these)
            by = f" (judge {judge})" if judge else " (no judge)"
            warn = (f"**{SELF_JUDGED.upper()}**: judge-based columns were graded by the model under test.\n\n"
                    if any(r["self_judged"] for r in these) else "")
            warn += "".join(f"**{w}**\n\n" for w in sorted({str(r["judge_check"]) for r in these
                                                              if r.get("judge_check")}))
            below = "".join(f"\n{n}\n" for n in notes)
            kept, stopped = split_stopped(these, bench.primary_metrics)
            for title, md in (bench.tables([dict(r) for r in kept]) | stopped).items():
                out.append(f"## {name} {title}{by}\n\n{warn}{md}\n{below}")
    return "\n".join(out) if out else f"no tables defined for {', '.join(names)}\n"
