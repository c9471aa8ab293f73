"""analyst metrics (Table 3 columns) from episode rows and their judgements.

Per configuration, means over episodes that have the value (each metric's ``n`` says how many):
length in tokens (the served model's tokenizer), checklist % (``scoring.checklist_score``),
hallucination % (``scoring.hallucination_rate``), visual coverage % (reference figures matched
by a generated caption at MiniLM cosine >= ``figure_match_threshold``). Visual quality needs a
vision judge (figure 21); none is configured in this release, so it is not reported and the
table says so. Shares of finish reasons and of reports never written are reported too.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any, Callable

import numpy as np

from engine.benchmarks.analyst import scoring
from engine.benchmarks.analyst.config import row_config
from engine.protocol import MetricRow


def _mean(xs: list[float]) -> tuple[float, int]:
    return (float(np.mean(xs)) if xs else float("nan")), len(xs)


def episode_scores(row: dict[str, Any], tasks: Callable[[str], dict[str, Any]], embedder: Callable[[], Any]) -> dict[str, Any]:
    j = row.get("judgements") or {}
    ratings = [int(v) if v else None for k, v in sorted(j.items()) if k.startswith("criterion:")]
    check = scoring.checklist_score(ratings) if ratings else None
    claims = scoring.stored_claims(j.get("claims"))
    # verdicts only for claims that are valid (a stored placeholder answer verified nothing real)
    verdicts = ([None if v is None else v == "SUPPORTED" for k, v in sorted(j.items()) if k.startswith("claim:")]
                if claims is not None else [])
    halluc = scoring.hallucination_rate(verdicts) if verdicts else None
    out: dict[str, Any] = {"checklist": check.percent if check else None,
                           "criteria_unscored": check.unscored if check else 0,
                           "hallucination": halluc.percent if halluc else None,
                           "claims": len(claims) if claims is not None else None,
                           "claims_unverified": halluc.unverified if halluc else 0}
    b = row_config(row)
    task = tasks(b.tasks_dir).get(row["task_id"])
    ref = [f.caption for f in scoring.figures(task.reference) if f.caption] if task else []
    gen = [f.caption for f in scoring.figures(row["output"] or "") if f.caption]
    if ref:
        sim = (embedder().encode(ref) @ embedder().encode(gen).T) if gen else np.zeros((len(ref), 0))
        out["coverage"] = scoring.coverage(sim, b.figure_match_threshold)[0]
    else:
        out["coverage"] = None
    out["figures"] = len(gen)
    return out


def episode_values(row: dict[str, Any], tasks: Callable[[str], dict[str, Any]],
                   embedder: Callable[[], Any]) -> dict[str, float]:
    """Per-episode values whose means are the metrics of :func:`aggregate`."""
    if row["status"] != "ok":
        return {}
    s = episode_scores(row, tasks, embedder)
    written = bool((row["output"] or "").strip())
    out: dict[str, float] = {"report_written": float(written)}
    if written:
        out["length_tokens"] = float(row["report_tokens"])
    for name, key in (("checklist_pct", "checklist"), ("hallucination_pct", "hallucination"),
                      ("visual_coverage_pct", "coverage"), ("claims_per_report", "claims")):
        if s[key] is not None:
            out[name] = float(s[key])
    out |= {"figures_per_report": float(s["figures"]), "criteria_unscored": float(s["criteria_unscored"]),
            "claims_unverified": float(s["claims_unverified"]), "steps": float(row["steps"]),
            "code_runs": float(row["code_runs"]), "tokens_in_mean": float(row["tokens_in"]),
            "tokens_out_mean": float(row["tokens_out"])}
    return out


METRIC_ORDER = ("report_written", "length_tokens", "checklist_pct", "hallucination_pct", "visual_coverage_pct",
                "claims_per_report", "figures_per_report", "criteria_unscored", "claims_unverified", "steps",
                "code_runs", "tokens_in_mean", "tokens_out_mean")


def aggregate(rows: list[dict[str, Any]], tasks: Callable[[str], dict[str, Any]],
              embedder: Callable[[], Any]) -> list[MetricRow]:
    """Means of :func:`episode_values` over finished episodes (each over the episodes that have
    the value), and the shares of finish reasons."""
    rows = [r for r in rows if r["status"] == "ok"]
    if not rows:
        return []
    n = len(rows)
    values = [episode_values(r, tasks, embedder) for r in rows]
    out = [MetricRow("episodes", float(n), n)]
    for name in METRIC_ORDER:
        value, k = _mean([v[name] for v in values if name in v])
        if k:
            out.append(MetricRow(name, value, k))
    reasons = [r["finish_reason"] for r in rows]
    out += [MetricRow(f"finish_{f}", reasons.count(f) / n, n) for f in sorted(set(reasons))]
    return out


def tables(metric_rows: list[dict[str, Any]]) -> dict[str, str]:
    by: dict[tuple[str, str], dict[str, Any]] = defaultdict(dict)
    agents: dict[tuple[str, str], dict[str, Any]] = {}
    for r in metric_rows:
        if r["benchmark"] != "analyst":
            continue
        key = (r["model"], r["config_hash"])
        by[key][r["metric"]] = (r["value"], r["n"])
        agents[key] = json.loads(r["agent"])

    def cell(m: dict[str, Any], name: str, fmt: str = "{:.1f}") -> str:
        return f"{fmt.format(m[name][0])} (n={m[name][1]})" if name in m else "-"

    lines = ["| Model | Method | Inputs | Length tokens | Checklist score % | Visual quality | Visual coverage % | "
             "Hallucination % |", "|---|---|---|---|---|---|---|---|"]
    for key in sorted(by, key=lambda k: (k[0], agents[k]["mode"], agents[k]["setting"])):
        m, a = by[key], agents[key]
        method = "Vanilla (map-reduce)" if a["mode"] == "vanilla" else "Agent (sandboxed tools)"
        lines.append(f"| {key[0]} | {method} | {a['setting']} | {cell(m, 'length_tokens', '{:.0f}')} | "
                     f"{cell(m, 'checklist_pct')} | n/a (no vision judge) | {cell(m, 'visual_coverage_pct')} | "
                     f"{cell(m, 'hallucination_pct')} |")
    return {"table3": "\n".join(lines)} if len(lines) > 2 else {}
