"""livenews metrics (Table 1 columns) and the paper-layout tables (Tables 1, 3 and 4).

Accuracy is CORRECT over every planned episode of the config (engine/scoring/outcomes.py): a failed
task (any finish reason but ``finish``) is not correct, as in the paper, and neither is an
episode that produced no result (an error, a budget stop, one never run: ``failure_values``,
under the default ``run.score_failures=as_wrong``). An answer whose judgement is missing or
malformed is not correct either, and is counted separately (``ungraded``) so it is never hidden.
With no judge at all the judge-based metrics are not produced (``judge_metrics``).
Searches and visits count individual queries and URLs (the budget's unit); std is the
population standard deviation over episodes. Two checks on the judge travel with accuracy: the
probe metrics (``judge_probe_gold_ok``, ``judge_probe_decoy_ok``) and ``answer_contains_gold``,
a lexical lower bound (the normalised gold text appears in the answer).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from typing import Any

import numpy as np

from engine.benchmarks.livenews.agent import FINISH_REASONS
from engine.protocol import MetricRow
from engine.scoring import kinds
from engine.scoring.outcomes import n_cell

GRADE_KEY = "grade"


def episode_grade(row: dict[str, Any]) -> str:
    """CORRECT | INCORRECT | NOT ATTEMPTED | FAILED (no answer) | UNGRADED (judge missing/malformed)."""
    if row["finish_reason"] != "finish":
        return "FAILED"
    g = (row.get("judgements") or {}).get(GRADE_KEY)
    return g if g else "UNGRADED"


def episode_values(row: dict[str, Any]) -> dict[str, float]:
    """Per-episode values whose means are the metrics of :func:`aggregate` (not the std rows)."""
    if row["status"] != "ok":
        return {}
    g = episode_grade(row)
    out = {"accuracy": float(g == "CORRECT"), "incorrect": float(g == "INCORRECT"),
           "not_attempted": float(g == "NOT ATTEMPTED"), "failed": float(g == "FAILED"),
           "ungraded": float(g == "UNGRADED"), "searches_mean": float(row["n_searches"]),
           "visits_mean": float(row["n_visits"]), "refused_visits_mean": float(row["n_refused_visits"]),
           "turns_mean": float(row["n_turns"]), "tokens_in_mean": float(row["tokens_in"]),
           "tokens_out_mean": float(row["tokens_out"]),
           "answer_contains_gold": float(_norm(row["gold"]) in _norm(row["output"] or ""))}
    out |= {f"finish_{f}": float(row["finish_reason"] == f) for f in FINISH_REASONS}
    j = row.get("judgements") or {}
    for key, want in (("probe_gold", "CORRECT"), ("probe_decoy", "INCORRECT")):
        if key in j:
            out[f"judge_{key}_ok"] = float(j[key] == want)
    return out


METRIC_ORDER = ("accuracy", "incorrect", "not_attempted", "failed", "ungraded", "searches_mean", "searches_std",
                "visits_mean", "visits_std", "refused_visits_mean", "turns_mean", "tokens_in_mean", "tokens_out_mean",
                *(f"finish_{f}" for f in FINISH_REASONS),
                # the judge's own reliability on this question set (see judge_requests): share of
                # probes graded as they must be; a judge far from 1.0 makes accuracy meaningless
                "judge_probe_gold_ok", "judge_probe_decoy_ok", "answer_contains_gold")


# what a planned episode without a result counts as (run.score_failures=as_wrong): no answer
FAILURE_VALUES = {"accuracy": 0.0, "incorrect": 0.0, "not_attempted": 0.0, "failed": 1.0, "ungraded": 0.0,
                  "answer_contains_gold": 0.0}
# the grader's metrics: not produced when no judge ran
JUDGE_METRICS = ("accuracy", "incorrect", "not_attempted", "ungraded", "judge_probe_gold_ok", "judge_probe_decoy_ok")
# What each metric is (engine/scoring/kinds.py): a grade, a finish reason, a probe passed and the
# lexical check are one yes/no per episode; searches, visits and turns are counts (up to the budget:
# 1.000 searches is a mean of a count, never a share); tokens are tokens; the std rows are spreads
# of counts.
METRIC_KINDS = {**{m: kinds.PROPORTION for m in ("accuracy", "incorrect", "not_attempted", "failed", "ungraded",
                                                 "answer_contains_gold", "judge_probe_gold_ok",
                                                 "judge_probe_decoy_ok")},
                "finish_*": kinds.PROPORTION,
                **{m: kinds.COUNT for m in ("searches_mean", "visits_mean", "refused_visits_mean", "turns_mean",
                                            "searches_std", "visits_std")},
                "tokens_in_mean": kinds.TOKENS, "tokens_out_mean": kinds.TOKENS}


def aggregate(rows: list[dict[str, Any]]) -> list[MetricRow]:
    """The metrics that are not means of :func:`episode_values` (engine/scoring/outcomes.py takes those):
    the standard deviations of searches and visits over the scored episodes."""
    values = [episode_values(r) for r in rows if r["status"] == "ok"]
    out = []
    for m in ("searches_std", "visits_std"):
        xs = np.array([v[m.replace("_std", "_mean")] for v in values], dtype=float)
        if xs.size:
            out.append(MetricRow(m, float(xs.std()), int(xs.size)))
    return out


def _norm(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


# -- tables -------------------------------------------------------------------------------------

def _configs(metric_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One dict per (model, config): its agent and data settings and its metrics."""
    by: dict[tuple[str, str], dict[str, Any]] = {}
    for r in metric_rows:
        if r["benchmark"] != "livenews":
            continue
        c = by.setdefault((r["model"], r["config_hash"]), {
            "model": r["model"], "config_hash": r["config_hash"], "agent": json.loads(r["agent"]),
            "data": r["data"] or "", "m": {}, "ci": {}, "n": n_cell(r), "cutoff": r.get("knowledge_cutoff") or ""})
        c["m"][r["metric"]] = r["value"]
        if r.get("lo") is not None and r.get("hi") is not None:     # the row's interval (stats.interval)
            c["ci"][r["metric"]] = (r["lo"], r["hi"])
    return list(by.values())


def _md(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _probe(m: dict[str, float]) -> str:
    g, d = m.get("judge_probe_gold_ok"), m.get("judge_probe_decoy_ok")
    return "-" if g is None and d is None else f"{_pct(g)}/{_pct(d)}"


def _pct(x: float | None, missing: str = "-") -> str:
    return missing if x is None else f"{100 * x:.1f}"


def _pct_ci(ci: tuple[float, float] | None) -> str:
    """The 95% interval of a share after its percentage (`` [0.0, 26.5]``; "" where it has none)."""
    return "" if ci is None else f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def _after(c: dict[str, Any]) -> str:
    """Accuracy over the questions after the model's knowledge cutoff (engine/scoring/cutoff.py),
    with its interval, n and the questions on each side; "cutoff unknown" without a cutoff."""
    if not c["cutoff"]:
        return "cutoff unknown"
    m = c["m"]
    after, before = int(m.get("questions_after_cutoff", 0)), int(m.get("questions_before_cutoff", 0))
    acc = "accuracy.after_cutoff"
    value = _pct(m.get(acc), "ungraded" if after else "-") + _pct_ci(c["ci"].get(acc))
    return f"{value} (cutoff {c['cutoff']}: {after} question(s) after, {before} on or before)"


def _avg_std(m: dict[str, float], what: str) -> str:
    if f"{what}_mean" not in m:
        return "-"
    return f"{m[what + '_mean']:.1f} ± {m.get(what + '_std', float('nan')):.1f}"


def _data_name(data: str) -> str:
    try:
        d = json.loads(data)
    except ValueError:
        return "?"
    return f"{d.get('source')}:{str(d.get('pages', '')).rstrip('/').split('/')[-1]}"


def _setting(agent: dict[str, Any]) -> str:
    """Agent settings other than mode and budgets that differ from the defaults ("default" if none)."""
    from dataclasses import asdict

    from engine.benchmarks.livenews.config import LivenewsAgentConfig

    base = asdict(LivenewsAgentConfig(mode=agent.get("mode", "search")))
    if agent.get("mode") == "no_search":      # one turn and no tools, whatever the config says
        base.update(max_searches=0, max_visits=0, max_turns=agent.get("max_turns"))
    diff = [f"{k}={v}" for k, v in sorted(agent.items())
            if k not in ("mode", "max_searches", "max_visits") and base.get(k) != v]
    return ", ".join(diff) or "default"


def tables(metric_rows: list[dict[str, Any]]) -> dict[str, str]:
    cfgs = _configs(metric_rows)
    search = [c for c in cfgs if c["agent"].get("mode") == "search"]
    out: dict[str, str] = {}
    rows = []
    for c in sorted(search, key=lambda c: (c["data"], c["model"], c["agent"]["max_searches"], c["agent"]["max_visits"])):
        m = c["m"]
        rows.append([c["model"], _data_name(c["data"]), _setting(c["agent"]),
                     f"{c['agent']['max_searches']}/{c['agent']['max_visits']}",
                     _avg_std(m, "searches"), _avg_std(m, "visits"),
                     _pct(m.get("accuracy"), "ungraded") + _pct_ci(c["ci"].get("accuracy")),
                     _pct(m.get("answer_contains_gold")), _pct(m.get("failed")),
                     _probe(m), str(c["n"]), _after(c)])
    out["table1"] = _md(["Model", "Data", "Agent", "Budget (searches/visits)", "Searches (avg ± std)", "Visits (avg ± std)",
                         "Accuracy (%, 95% interval)", "Contains gold (%)", "Failed (%)",
                         "Judge probes ok (gold/decoy, %)", "n", "Accuracy after the knowledge cutoff (%, 95% interval)"],
                        rows)

    # Table 3: accuracy by search budget, other settings equal (visits fixed, as in the paper).
    groups: dict[tuple[str, str, str], dict[int, dict[str, Any]]] = defaultdict(dict)
    for c in search:
        rest = {k: v for k, v in c["agent"].items() if k != "max_searches"}
        groups[(c["data"], c["model"], json.dumps(rest, sort_keys=True))][c["agent"]["max_searches"]] = c
    budgets = sorted({b for g in groups.values() for b in g})
    rows = []
    for (data, model, rest_json), g in sorted(groups.items()):
        if len(g) < 2 or any("accuracy" not in x["m"] for x in g.values()):
            continue
        accs = [g[b]["m"]["accuracy"] if b in g else None for b in budgets]
        lo, hi = min(g), max(g)
        rows.append([model, _data_name(data), _setting(json.loads(rest_json)), str(json.loads(rest_json)["max_visits"]),
                     *map(_pct, accs), f"{100 * (g[hi]['m']['accuracy'] - g[lo]['m']['accuracy']):+.1f}",
                     "; ".join(f"{b}: {g[b]['n']}" for b in sorted(g))])
    if rows:
        out["table3"] = _md(["Model", "Data", "Agent", "Visits", *[f"Search Budget = {b}" for b in budgets],
                             f"Improvement ({budgets[0]}→{budgets[-1]}) (points)", "n"], rows)

    # Table 4: with search (the default budget 5/5 when run, else the largest) vs without.
    nos = [c for c in cfgs if c["agent"].get("mode") == "no_search"]
    rows = []
    for c in sorted(nos, key=lambda c: (c["data"], c["model"])):
        same = [s for s in search if s["model"] == c["model"] and s["data"] == c["data"]]
        # prefer a search config with the same non-budget settings (e.g. both guided)
        alike = [s for s in same if _setting(s["agent"]) == _setting(c["agent"])]
        same = alike or same
        if not same:
            continue
        default = [s for s in same if (s["agent"]["max_searches"], s["agent"]["max_visits"]) == (5, 5)]
        w = default[0] if default else max(same, key=lambda s: s["agent"]["max_searches"])
        if "accuracy" not in w["m"] or "accuracy" not in c["m"]:
            continue
        a, b = w["m"]["accuracy"], c["m"]["accuracy"]
        rows.append([c["model"], _data_name(c["data"]), _setting(c["agent"]),
                     f"{w['agent']['max_searches']}/{w['agent']['max_visits']}", _pct(a), _pct(b), f"{100 * (b - a):+.1f}",
                     f"{w['n']} vs {c['n']}", _after(c)])
    if rows:
        out["table4"] = _md(["Model", "Data", "Agent", "Budget with search", "Accuracy with Search (%)",
                             "Accuracy without Search (%)", "Difference (points)", "n",
                             "Without search, after the knowledge cutoff (%, 95% interval)"], rows)
    return out
