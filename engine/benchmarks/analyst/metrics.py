"""analyst metrics (Table 3 columns) from episode rows and their judgements.

Per configuration, means over its planned episodes (engine/scoring/outcomes.py; each metric's ``n``
says how many): length in tokens (the served model's tokenizer), checklist %
(``scoring.checklist_score``), hallucination % (``scoring.hallucination_rate``), visual
coverage % (reference figures matched by a generated caption at MiniLM cosine >=
``figure_match_threshold``). Visual quality needs a vision judge (figure 21); none is configured
in this release, so it is not reported and the table says so. Shares of finish reasons and of
reports never written are reported too. Every setting used here (``max_claims``,
``claims_chunk_tokens``, ``figure_match_threshold``, ``checklists_dir``) is the one the
judgements were made under (``row_config``: ``row["evaluation"]``), not the row's.

**No report** (after ``agent.report_attempts`` attempts), and an episode without a result at all
(an error, a budget stop, never run: ``FAILURE_VALUES`` under ``run.score_failures=as_wrong``),
is a failure of the system, so it is never dropped from a mean: its checklist % is the floor of
the scale, 20 % (every criterion rated 1: the worst written report can do no worse; when its
task has a checklist at all: a task without one gives no system a checklist score), its visual
coverage % is 0 (when the reference has figures) and ``report_written`` is 0. Hallucination %
stays a rate over the claims of reports that exist: a missing report makes no claims, and 0 %
would reward writing nothing while 100 % would call a failure a fabrication; the ``no_report``
count stands next to it (and the failure is already scored in checklist and coverage).

**Claims**: a verification that cannot be parsed ("Not supported", prose), or was never made,
counts as unsupported; ``claims_unverified_pct`` (its share of the claims meant to be verified)
stands beside the hallucination rate.

**Missing checklist scores** are counted by reason, never silently dropped: ``no_checklist``
(the task has no checklist file: build it with ``dateline analyst-checklists``),
``checklist_build_failed`` (the last build failed; the task's ``checklist.failed.json`` says
why), ``unscored`` (a criterion of the checklist has no rating: its judgement was malformed, cut
at ``judge_max_tokens``, or not made yet; the score over the other criteria would be over the
ones the judge happened to finish). **Who wrote the checklists** is reported per configuration
(``checklist_by:<author>``, and ``checklist_self_written``: written by the model under test).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from engine.benchmarks.analyst import claims as claim_chunks
from engine.benchmarks.analyst import scoring
from engine.benchmarks.analyst.config import row_config
from engine.protocol import MetricRow
from engine.scoring import kinds
from engine.scoring.judges import same_model
from engine.scoring.outcomes import n_cell

# what a planned episode without a result counts as (run.score_failures=as_wrong); per task,
# only the metrics the task has (``failure_values_for``)
FAILURE_VALUES = {"report_written": 0.0, "checklist_pct": scoring.CHECKLIST_FLOOR, "visual_coverage_pct": 0.0}
# the judge's metrics: not produced when no judge ran
JUDGE_METRICS = ("checklist_pct", "hallucination_pct", "claims_unverified_pct", "claims_per_report",
                 "criteria_unscored", "claims_unverified", "claim_chunks_failed")


def failure_values_for(task: Any) -> dict[str, float]:
    out = {"report_written": 0.0}
    if task.checklist:
        out["checklist_pct"] = scoring.CHECKLIST_FLOOR
    if any(f.caption for f in scoring.figures(task.reference)):
        out["visual_coverage_pct"] = 0.0
    return out


def claim_verdicts(j: dict[str, str | None], report: str, b: Any) -> tuple[int | None, list[bool | None], int]:
    """(claims extracted or None when none could be, verdicts of the claims meant to be verified
    (None: malformed or not made yet), chunks whose extraction failed or is missing)."""
    chunks = claim_chunks.report_chunks(report, b.claims_chunk_tokens)
    if not any(k.startswith("claims:") for k in j) and "claims" in j:     # judged before chunking
        stored = scoring.stored_claims(j["claims"])
        if stored is None:
            return None, [], 1
        answers = [j.get(f"claim:{i:02d}") for i in range(min(len(stored), b.max_claims))]
        return len(stored), [None if v is None else v == "SUPPORTED" for v in answers], 0
    total, verdicts, failed = 0, [], 0
    for k, quota in enumerate(claim_chunks.quotas(len(chunks), b.max_claims)):
        stored = scoring.stored_claims(j.get(f"claims:{k}"))
        if stored is None:          # a placeholder answer (valid_claims) verifies nothing real
            failed += 1
            continue
        total += len(stored)
        verdicts += [None if (v := j.get(f"claim:{k}:{i:02d}")) is None else v == "SUPPORTED"
                     for i in range(min(len(stored), quota))]
    return (total if failed < len(chunks) else None), verdicts, failed


def episode_scores(row: dict[str, Any], tasks: Callable[..., dict[str, Any]],
                   embedder: Callable[[], Any]) -> dict[str, Any]:
    j = row.get("judgements") or {}
    b = row_config(row)
    task = tasks(b.tasks_dir, b.checklists_dir).get(row["task_id"])
    report = row["output"] or ""
    written = bool(report.strip())
    out: dict[str, Any] = {"checklist": None, "criteria_unscored": 0, "checklist_missing": "",
                           "hallucination": None, "claims": None, "claims_unverified": 0,
                           "claims_unverified_pct": None, "claim_chunks_failed": 0,
                           "checklist_by": task.checklist_by if task is not None and task.checklist else "",
                           "checklist_by_weights": task.checklist_by_weights if task is not None else ""}
    if task is None or not task.checklist:
        out["checklist_missing"] = "checklist_build_failed" if task is not None and task.checklist_failure \
            else "no_checklist"
    elif not written:
        out["checklist"] = scoring.CHECKLIST_FLOOR
    else:
        ratings = [j.get(f"criterion:{task.checklist_id}:{i:02d}") for i in range(len(task.checklist))]
        check = scoring.checklist_score([int(v) if v else None for v in ratings])
        out.update(checklist=check.percent, criteria_unscored=check.unscored,
                   checklist_missing="" if check.percent is not None else "unscored")
    if written:
        n_claims, verdicts, failed = claim_verdicts(j, report, b)
        halluc = scoring.hallucination_rate(verdicts) if verdicts else None
        out.update(hallucination=halluc.percent if halluc else None, claims=n_claims,
                   claims_unverified=halluc.unverified if halluc else 0,
                   claims_unverified_pct=100.0 * halluc.unverified / halluc.claims if halluc else None,
                   claim_chunks_failed=failed)
    ref = [f.caption for f in scoring.figures(task.reference) if f.caption] if task else []
    gen = [f.caption for f in scoring.figures(report) if f.caption]
    if ref:
        sim = (embedder().encode(ref) @ embedder().encode(gen).T) if gen else np.zeros((len(ref), 0))
        out["coverage"] = scoring.coverage(sim, b.figure_match_threshold)[0]     # no report: 0 %
    else:
        out["coverage"] = None
    out["figures"] = len(gen)
    return out


def episode_values(row: dict[str, Any], tasks: Callable[..., dict[str, Any]],
                   embedder: Callable[[], Any]) -> dict[str, float]:
    """Per-episode values whose means are the metrics (engine/scoring/outcomes.py)."""
    if row["status"] != "ok":
        return {}
    return _values(row, episode_scores(row, tasks, embedder))


def _values(row: dict[str, Any], s: dict[str, Any]) -> dict[str, float]:
    written = bool((row["output"] or "").strip())
    out: dict[str, float] = {"report_written": float(written)}
    if written:
        out["length_tokens"] = float(row["report_tokens"])
    for name, key in (("checklist_pct", "checklist"), ("hallucination_pct", "hallucination"),
                      ("claims_unverified_pct", "claims_unverified_pct"),
                      ("visual_coverage_pct", "coverage"), ("claims_per_report", "claims")):
        if s[key] is not None:
            out[name] = float(s[key])
    out |= {"figures_per_report": float(s["figures"]), "criteria_unscored": float(s["criteria_unscored"]),
            "claims_unverified": float(s["claims_unverified"]),
            "claim_chunks_failed": float(s["claim_chunks_failed"]), "steps": float(row["steps"]),
            "report_attempts": float(row.get("attempts") or 1), "code_runs": float(row["code_runs"]),
            "tokens_in_mean": float(row["tokens_in"]), "tokens_out_mean": float(row["tokens_out"])}
    return out


# What each metric is (engine/scoring/kinds.py): the four percentages are scores in [0, 100] per
# report (a hallucination rate of 0 % on each of 4 reports is not "under 1 %": a bootstrap over the
# tasks, or no interval), report_written and the finish shares are yes/no per episode, the rest counts
# and tokens.
METRIC_KINDS = {**{m: kinds.PERCENT for m in ("checklist_pct", "hallucination_pct", "claims_unverified_pct",
                                              "visual_coverage_pct")},
                "report_written": kinds.PROPORTION, "finish_*": kinds.PROPORTION, "checklist_by:*": kinds.PROPORTION,
                "checklist_self_written": kinds.PROPORTION, "length_tokens": kinds.TOKENS,
                "tokens_in_mean": kinds.TOKENS, "tokens_out_mean": kinds.TOKENS,
                **{m: kinds.COUNT for m in ("claims_per_report", "figures_per_report", "criteria_unscored",
                                            "claims_unverified", "claim_chunks_failed", "steps", "report_attempts",
                                            "code_runs", "episodes", "no_report")},
                "checklist_missing_*": kinds.COUNT}

METRIC_ORDER = ("report_written", "length_tokens", "checklist_pct", "hallucination_pct", "claims_unverified_pct",
                "visual_coverage_pct", "claims_per_report", "figures_per_report", "criteria_unscored",
                "claims_unverified", "claim_chunks_failed", "steps", "report_attempts", "code_runs", "tokens_in_mean",
                "tokens_out_mean")


def aggregate(rows: list[dict[str, Any]], tasks: Callable[..., dict[str, Any]],
              embedder: Callable[[], Any]) -> list[MetricRow]:
    """The metrics that are not means of :func:`episode_values` (engine/scoring/outcomes.py takes those),
    over the scored episodes: ``episodes``, counts of reports never written (``no_report``) and of
    missing checklist scores by reason (``checklist_missing_<reason>``; ``unscored`` only where a
    judge ran), the shares of finish reasons, and who wrote the checklists (``checklist_by:<author>``,
    ``checklist_self_written``: the author's weights, or name, are the model under test's)."""
    rows = [r for r in rows if r["status"] == "ok"]
    if not rows:
        return []
    n = len(rows)
    scores = [episode_scores(r, tasks, embedder) for r in rows]
    judged = any(r.get("judge") for r in rows)
    out = [MetricRow("episodes", float(n), n)]
    out.append(MetricRow("no_report", float(sum(not (r["output"] or "").strip() for r in rows)), n))
    missing = Counter(s["checklist_missing"] for s in scores)
    out += [MetricRow(f"checklist_missing_{why}", float(c), n) for why, c in sorted(missing.items())
            if why and (judged or why != "unscored")]
    reasons = [r["finish_reason"] for r in rows]
    out += [MetricRow(f"finish_{f}", reasons.count(f) / n, n) for f in sorted(set(reasons))]
    authors = Counter(s["checklist_by"] for s in scores if s["checklist_by"])
    out += [MetricRow(f"checklist_by:{a}", c / n, n) for a, c in sorted(authors.items())]
    if authors:
        own = sum(1 for r, s in zip(rows, scores) if s["checklist_by"] and same_model(
            s["checklist_by_weights"], [s["checklist_by"]], [r.get("weights_id")], [r["model"]]))
        out.append(MetricRow("checklist_self_written", own / n, n))
    return out


def tables(metric_rows: list[dict[str, Any]]) -> dict[str, str]:
    by: dict[tuple[str, str], dict[str, Any]] = defaultdict(dict)
    agents: dict[tuple[str, str], dict[str, Any]] = {}
    ns: dict[tuple[str, str], str] = {}
    for r in metric_rows:
        if r["benchmark"] != "analyst":
            continue
        key = (r["model"], r["config_hash"])
        by[key][r["metric"]] = (r["value"], r["n"])
        agents[key] = json.loads(r["agent"])
        ns[key] = n_cell(r)
    models = {k[0] for k in by}

    def cell(m: dict[str, Any], name: str, fmt: str = "{:.1f}") -> str:
        return f"{fmt.format(m[name][0])} (n={m[name][1]})" if name in m else "-"

    def authors(m: dict[str, Any]) -> str:
        """Who wrote the checklists; flagged when a model under comparison did (its scores are
        then that model grading against its own rubric)."""
        names = sorted(k.split(":", 1)[1] for k in m if k.startswith("checklist_by:"))
        if not names:
            return "-"
        flagged = [a for a in names if a in models] or (["this model"] if m.get("checklist_self_written", (0,))[0]
                                                        else [])
        return ", ".join(names) + (f" **(written by a compared model: {', '.join(flagged)})**" if flagged else "")

    lines = ["| Model | Method | Inputs | Length tokens | Checklist score % | Checklists by | Visual quality | "
             "Visual coverage % | Hallucination % (unverified %) | n (scored/planned) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for key in sorted(by, key=lambda k: (k[0], agents[k]["mode"], agents[k]["setting"])):
        m, a = by[key], agents[key]
        method = ("Vanilla (map-reduce)" if a["mode"] == "vanilla" else "Agent (sandboxed tools)"
                  if a.get("sandbox", "bwrap") != "audit_unsafe" else "Agent (**AUDIT_UNSAFE**: no OS sandbox)")
        halluc = cell(m, "hallucination_pct")
        if "claims_unverified_pct" in m:
            halluc += f" ({m['claims_unverified_pct'][0]:.1f})"
        lines.append(f"| {key[0]} | {method} | {a['setting']} | {cell(m, 'length_tokens', '{:.0f}')} | "
                     f"{cell(m, 'checklist_pct')} | {authors(m)} | n/a (no vision judge) | "
                     f"{cell(m, 'visual_coverage_pct')} | {halluc} | {ns[key]} |")
    return {"table3": "\n".join(lines)} if len(lines) > 2 else {}
