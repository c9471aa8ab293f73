"""Function-wise metrics (Table 2) and usage statistics (Table 3).

Per article: Search compares every object the agent's searches returned against the
reference-selected evidence; Edit compares the final draft against it. All three are sets of
object ids (two objects of the same text on two dates are two objects; docs/design/newsagent.md). Scores are computed per
article and macro-averaged, so the mean F1 is not the F1 of the mean precision and recall (as
the paper notes). Articles with no reference evidence are excluded from all function-wise
averages (they still count in ``episodes``).

Empty selections (nothing retrieved, or an empty final draft), per metric:

* **Precision** is undefined (0/0), and the episode is left out of ``search_precision`` /
  ``edit_precision`` (their ``n`` counts the episodes that retrieved / kept something). This
  is the paper's convention: Llama-4-Scout (2-step) inserts 0.45 objects per article (Table 3,
  failed inserts excluded, no removes), so at most 45% of its drafts are non-empty, yet its
  edit precision is 0.941 (Table 2), which is impossible if empty drafts scored 0.
  ``search_precision_zero_empty`` / ``edit_precision_zero_empty`` keep the other convention
  (empty = 0, every episode counted) for comparison.
* **Recall** is well defined (0 of the reference evidence was found): 0, counted.
* **F1** is 0 and counted, i.e. averaged over the same episodes as recall. The paper's numbers
  rule out the alternative of leaving empty selections out of F1 too: wherever precision is at
  least recall, F1 = 2PR/(P+R) >= R, so Llama's F1 over its non-empty drafts alone would be at
  least about its recall over them, 0.075 / 0.45 = 0.167 (recall over all articles 0.075, at
  most 45% non-empty, nearly all with precision 1), above the reported 0.126. Counting empty
  drafts as F1 = 0 fits: with ~45% one-object drafts at P ~ 0.94, R ~ 0.167, F1 is about
  0.45 * 0.28 = 0.126. (GPT-4o 2-step search, P 0.635 / R 0.095 / F1 0.150, is consistent
  with either; macro F1 sits below the F1 of the means, 0.165, as it should.)

Edit recall uses all reference evidence as denominator, which reproduces the paper's rule-based
row (its search and edit scores coincide because it keeps exactly what it retrieved).
``edit_recall_observed`` conditions on the reference evidence the agent actually saw
(section 3.3's wording) and is reported alongside (0 when it saw none).

Usage counts (Table 3): ``n_insert`` / ``n_remove`` count operations that changed the draft;
failed ones are ``n_failed_insert`` / ``n_failed_remove`` (Table 3's "Insert Fail"), an insert of
an object already in the draft is ``n_duplicate_insert`` (a no-op, not an insert). ``operations``
counts everything that used the operation budget, failed, duplicate and unparseable actions
included.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from engine.protocol import MetricRow
from engine.scoring import kinds


def prf(selected: Iterable[str], reference: Iterable[str]) -> tuple[float, float, float]:
    """Set precision, recall and F1; an empty selection or reference scores 0 (zero-empty)."""
    sel, ref = set(selected), set(reference)
    hit = len(sel & ref)
    p = hit / len(sel) if sel else 0.0
    r = hit / len(ref) if ref else 0.0
    f = 2 * p * r / (p + r) if p + r > 0 else 0.0
    return p, r, f


def episode_scores(retrieved: list[str], draft: list[str], reference: list[str]) -> dict[str, float | None]:
    """One episode's function-wise scores. ``search_precision`` / ``edit_precision`` are None
    (undefined, left out of the mean) when nothing was retrieved / kept."""
    sp, sr, sf = prf(retrieved, reference)
    ep, er, ef = prf(draft, reference)
    seen = set(reference) & set(retrieved)
    eo = len(set(draft) & seen) / len(seen) if seen else 0.0
    return {"search_precision": sp if retrieved else None, "search_recall": sr, "search_f1": sf,
            "edit_precision": ep if draft else None, "edit_recall": er, "edit_f1": ef,
            "edit_recall_observed": eo,
            "search_precision_zero_empty": sp, "edit_precision_zero_empty": ep}


FUNCTION_METRICS = ("search_precision", "search_recall", "search_f1",
                    "edit_precision", "edit_recall", "edit_f1", "edit_recall_observed",
                    "search_precision_zero_empty", "edit_precision_zero_empty")
USAGE_METRICS = ("tokens_in", "tokens_out", "n_search", "n_insert", "n_remove", "n_failed_insert",
                 "n_duplicate_insert", "n_failed_remove", "n_failed_parse", "n_empty_search", "operations",
                 "rephrase_attempts")


def episode_values(r: dict[str, Any]) -> dict[str, float]:
    """The per-episode values whose means are the metrics (an ok episode; ``{}`` otherwise).
    Undefined values (precision of an empty selection) are absent, not 0 or NaN."""
    if r.get("status") != "ok":
        return {}
    out: dict[str, float] = {}
    if r.get("reference_ids"):
        scores = episode_scores(list(r["retrieved_ids"]), list(r["draft_ids"]), list(r["reference_ids"]))
        out.update({k: v for k, v in scores.items() if v is not None and not math.isnan(v)})
    for m in USAGE_METRICS:
        if r.get(m) is not None:
            out[f"mean_{m}"] = float(r[m])
    if r.get("rephrase_attempts"):
        out["traceable_rate"] = float(r["traceable"])
    out["terminated_rate"] = float(r["finish_reason"] == "terminate")
    return out


METRIC_ORDER = (*FUNCTION_METRICS, *(f"mean_{m}" for m in USAGE_METRICS), "traceable_rate", "terminated_rate")

# What each metric is (engine/scoring/kinds.py): precision, recall and F1 are scores in [0, 1] per
# episode (an F1 of 1 on a task is not a coin that came up heads: never a binomial interval); the
# usage means are counts and tokens; the two rates are one yes/no per episode.
METRIC_KINDS = {**{m: kinds.SCORE01 for m in FUNCTION_METRICS},
                **{f"mean_{m}": (kinds.TOKENS if m.startswith("tokens") else kinds.COUNT) for m in USAGE_METRICS},
                "traceable_rate": kinds.PROPORTION, "terminated_rate": kinds.PROPORTION, "episodes": kinds.COUNT}

# What a planned episode without a result (an error, a budget stop, one never run) counts as under
# run.score_failures=as_wrong: it found and kept nothing, so recall and F1 are 0 (as for an
# empty draft); precision stays undefined (nothing was selected) and usage means are over the
# episodes that ran. A task without reference evidence has no function-wise scores at all
# (``task_failure_values``).
FAILURE_VALUES = {"search_recall": 0.0, "search_f1": 0.0, "edit_recall": 0.0, "edit_f1": 0.0,
                  "edit_recall_observed": 0.0, "search_precision_zero_empty": 0.0,
                  "edit_precision_zero_empty": 0.0, "terminated_rate": 0.0}
NO_REFERENCE_FAILURE_VALUES = {"terminated_rate": 0.0}


def aggregate(rows: list[dict[str, Any]]) -> list[MetricRow]:
    """The metric that is not a mean of :func:`episode_values` (engine/scoring/outcomes.py takes those):
    ``episodes``, the number of scored episodes."""
    ok = [r for r in rows if r.get("status") == "ok"]
    return [MetricRow("episodes", float(len(ok)), len(ok))]
