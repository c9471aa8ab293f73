"""A judge that fails its own checks marks every number it produced (issue 46, finding 6).

A benchmark may grade its judge while the judge grades the episodes: livenews asks the judge, on
each question, to grade the gold answer (it must say CORRECT: ``judge_probe_gold_ok``) and a
wrong choice (it must not: ``judge_probe_decoy_ok``). The benchmark names these check metrics and
their default minimum share (``judge_checks``); ``conf/judge_checks.yaml`` (or the file named by
``$DATELINE_JUDGE_CHECKS``) sets other minimums per benchmark and metric. They are read when numbers
are shown, not when they are made: a threshold changed later changes the marks, never a judgement
or a judge's identity.

A judge fails when, pooled over every configuration it judged in a run dir (each configuration's
share weighted by its episodes), a check metric lies below its minimum. Then every judge-based
row of that judge carries ``judge_check`` = the sentence, and every output prints
``JUDGE FAILED ITS CHECKS`` beside those numbers: ``dateline metrics`` and ``tables``, the run's
summary, the report's headline, tables and leaderboards, the exports' marks and the Python API.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

FAILED = "JUDGE FAILED ITS CHECKS"
CONF = Path(__file__).resolve().parents[2] / "conf" / "judge_checks.yaml"


def minimums(bench: Any) -> dict[str, float]:
    """The check metrics of ``bench`` and their minimum shares (the benchmark's defaults, then the
    configuration file's). A file that does not parse, or a minimum outside [0, 1], is an error
    naming the file, the benchmark and the metric."""
    out = {k: float(v) for k, v in (getattr(bench, "judge_checks", None) or {}).items()}
    if not out:
        return out
    path = Path(os.environ.get("DATELINE_JUDGE_CHECKS") or CONF)
    if not path.is_file():
        return out
    try:
        doc = OmegaConf.to_container(OmegaConf.load(path)) or {}
    except Exception as e:              # omegaconf raises the YAML parser's own errors
        raise ValueError(f"{path}: not YAML ({e})") from e
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: a mapping with judge_checks.<benchmark>.<metric>: <minimum> expected")
    mine = (doc.get("judge_checks") or {}).get(bench.name) or {}
    for metric, value in mine.items():
        if metric not in out:
            raise ValueError(f"{path}: judge_checks.{bench.name}.{metric}: not a check metric of {bench.name} "
                             f"(its checks: {', '.join(sorted(out))})")
        if not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
            raise ValueError(f"{path}: judge_checks.{bench.name}.{metric}: {value!r} is not a share in [0, 1]")
        out[metric] = float(value)
    return out


def failures(bench: Any, rows: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Per judge id, the sentence saying which checks it failed (judges that passed, or whose checks
    were not run, are absent). ``rows``: metrics rows of one run dir (scope all is used)."""
    mins = minimums(bench)
    if not mins:
        return {}
    pooled: dict[tuple[str, str], list[tuple[float, int]]] = defaultdict(list)
    seen: set[tuple[str, str, str]] = set()
    for r in rows:
        judge, metric = str(r.get("judge") or ""), str(r.get("metric"))
        if not judge or metric not in mins or (r.get("scope") or "all") != "all":
            continue
        key = (judge, metric, str(r["config_hash"]))
        value, n = r.get("value"), int(r.get("n") or 0)
        if key in seen or value is None or math.isnan(float(value)) or n <= 0:
            continue
        seen.add(key)
        pooled[(judge, metric)].append((float(value), n))
    out: dict[str, list[str]] = defaultdict(list)
    for (judge, metric), parts in sorted(pooled.items()):
        n = sum(k for _, k in parts)
        share = sum(v * k for v, k in parts) / n
        if share < mins[metric]:
            out[judge].append(f"{metric} {share:.3f} over {n} probes, below its minimum {mins[metric]:g}")
    return {j: f"{FAILED}: " + "; ".join(why) + " (conf/judge_checks.yaml)" for j, why in out.items()}


def mark_rows(bench: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with ``judge_check`` set on every judge-based row of a judge that failed its checks."""
    failed = failures(bench, rows)
    if not failed:
        return rows
    judged = set(getattr(bench, "judge_metrics", ()))
    for r in rows:
        why = failed.get(str(r.get("judge") or ""))
        base = str(r.get("metric")).split(".", 1)[0]
        if why and base in judged:
            r["judge_check"] = why
    return rows


__all__ = ["CONF", "FAILED", "failures", "mark_rows", "minimums"]
