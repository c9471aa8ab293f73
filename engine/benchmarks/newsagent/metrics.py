"""Function-wise metrics (Table 2) and usage statistics (Table 3).

Per article: Search compares every object the agent's searches returned against the
reference-selected evidence; Edit compares the final draft against it. Scores are computed per
article and macro-averaged, so the mean F1 is not the F1 of the mean precision and recall (as
the paper notes). Conventions for empty sets, chosen so that an agent that retrieves or keeps
nothing scores 0 rather than being dropped: precision = 0 when nothing was retrieved/kept;
articles with no reference evidence are excluded from function-wise averages (counted in ``n``).

Edit recall uses all reference evidence as denominator, which reproduces the paper's rule-based
row (its search and edit scores coincide because it keeps exactly what it retrieved).
``edit_recall_observed`` conditions on the reference evidence the agent actually saw
(section 3.3's wording) and is reported alongside.
"""

from __future__ import annotations

from statistics import fmean
from typing import Any, Iterable

from engine.protocol import MetricRow


def prf(selected: Iterable[str], reference: Iterable[str]) -> tuple[float, float, float]:
    sel, ref = set(selected), set(reference)
    hit = len(sel & ref)
    p = hit / len(sel) if sel else 0.0
    r = hit / len(ref) if ref else 0.0
    f = 2 * p * r / (p + r) if p + r > 0 else 0.0
    return p, r, f


def episode_scores(retrieved: list[str], draft: list[str], reference: list[str]) -> dict[str, float]:
    sp, sr, sf = prf(retrieved, reference)
    ep, er, ef = prf(draft, reference)
    seen = set(reference) & set(retrieved)
    eo = len(set(draft) & seen) / len(seen) if seen else 0.0
    return {"search_precision": sp, "search_recall": sr, "search_f1": sf,
            "edit_precision": ep, "edit_recall": er, "edit_f1": ef, "edit_recall_observed": eo}


FUNCTION_METRICS = ("search_precision", "search_recall", "search_f1",
                    "edit_precision", "edit_recall", "edit_f1", "edit_recall_observed")
USAGE_METRICS = ("tokens_in", "tokens_out", "n_search", "n_insert", "n_remove", "n_failed_insert",
                 "n_failed_remove", "n_failed_parse", "n_empty_search", "operations", "rephrase_attempts")


def episode_values(r: dict[str, Any]) -> dict[str, float]:
    """The per-episode values whose means are the metrics (an ok episode; ``{}`` otherwise)."""
    if r.get("status") != "ok":
        return {}
    out: dict[str, float] = {}
    if r.get("reference_ids"):
        out.update(episode_scores(list(r["retrieved_ids"]), list(r["draft_ids"]), list(r["reference_ids"])))
    for m in USAGE_METRICS:
        if r.get(m) is not None:
            out[f"mean_{m}"] = float(r[m])
    if r.get("rephrase_attempts"):
        out["traceable_rate"] = float(r["traceable"])
    out["terminated_rate"] = float(r["finish_reason"] == "terminate")
    return out


METRIC_ORDER = (*FUNCTION_METRICS, *(f"mean_{m}" for m in USAGE_METRICS), "traceable_rate", "terminated_rate")


def aggregate(rows: list[dict[str, Any]]) -> list[MetricRow]:
    """Macro averages over finished episodes (status ok): each metric is the mean of
    :func:`episode_values` over the episodes that have it."""
    ok = [r for r in rows if r.get("status") == "ok"]
    values = [episode_values(r) for r in ok]
    out: list[MetricRow] = [MetricRow("episodes", float(len(ok)), len(ok))]
    for m in METRIC_ORDER:
        vals = [v[m] for v in values if m in v]
        out.append(MetricRow(m, fmean(vals) if vals else float("nan"), len(vals)))
    return out
