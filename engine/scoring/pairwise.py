"""Pairwise comparison of finished runs: which systems meet on which tasks, in which order, and
how a stored verdict becomes an outcome. Plain Python; the Ray stage is ``ray_jobs/judging/pairwise.py``.

A *system* is one configuration of a benchmark (model + agent + data, i.e. a ``config_hash``)
found in a run directory, or the task's reference (human-written) text. Systems are plain dicts
(they go to ``systems.json``): ``system_id`` ("<model>:<config_hash[:8]>" or "reference"),
``label``, ``model``, ``config_hash``, ``run_dir``, ``agent`` (agent config JSON). Every unordered pair of
systems meets on every task where both have an output.

Candidate order: the paper randomises which article is shown first to mitigate position bias.
Here the order of a pair on a task is a pure function of (seed, task, the two system ids), so it
is reproducible from the recorded seed, independent of which other systems are in the run, and
about half of the comparisons show each side first. With ``both_orders`` every pair is judged a
second time with the order swapped, which measures the judge's position bias directly.

A comparison's id hashes the seed, the task, the ordered pair and the two texts: re-generating a
run (different outputs) makes new comparisons instead of reusing stale verdicts.

What a report counts (``CurrentPlan``): a pairwise dir keeps every comparison and verdict any
stage ever made. Only verdicts on comparisons of the *current plan* count: the plan of the latest
``dateline pairwise`` run (its systems, tasks, seed and orders, recorded in ``plan.json``), and
only while the two texts judged (``first_sha``, ``second_sha``) are still those systems' current
outputs. A verdict on a text that has changed since (an episode re-run) is *stale*; one on a
system, task, seed or order the latest plan does not have is *not in the plan*. Both are left out
and counted.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.scoring.stats import Outcome

REFERENCE = "reference"


@dataclass(frozen=True)
class Comparison:
    comparison_id: str
    task_id: str
    system_a: str           # the pair, sorted: outcomes are always stated for a vs b
    system_b: str
    first: str              # the system shown as the first article
    second: str
    order: str              # "random" (seeded) or "swapped" (the both_orders repeat)
    seed: int
    first_sha: str
    second_sha: str


def text_sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def a_first(seed: int, task_id: str, a: str, b: str) -> bool:
    """Whether ``a`` is shown first: one bit of a hash of (seed, task, sorted pair)."""
    lo, hi = sorted((a, b))
    digest = hashlib.sha256(json.dumps([seed, task_id, lo, hi]).encode()).digest()
    return (digest[0] & 1 == 0) == (a == lo)


def plan(articles: Mapping[str, Mapping[str, str]], seed: int, both_orders: bool = False,
         tasks: Iterable[str] | None = None) -> tuple[list[Comparison], list[tuple[str, str, str]]]:
    """Comparisons for every pair of systems on every task both have a non-empty text for.
    ``articles`` maps system id -> task id -> text. Returns (comparisons, skipped), where skipped
    lists (task, system_a, system_b) pairs that could not meet because a text was missing."""
    systems = sorted(articles)
    all_tasks = sorted(set(tasks) if tasks is not None else {t for s in systems for t in articles[s]})
    out: list[Comparison] = []
    skipped: list[tuple[str, str, str]] = []
    for a, b in itertools.combinations(systems, 2):
        for t in all_tasks:
            ta, tb = articles[a].get(t, ""), articles[b].get(t, "")
            if not ta.strip() or not tb.strip():
                skipped.append((t, a, b))
                continue
            first, second = (a, b) if a_first(seed, t, a, b) else (b, a)
            orders = [("random", first, second)] + ([("swapped", second, first)] if both_orders else [])
            for order, f, s in orders:
                fs, ss = text_sha(articles[f][t]), text_sha(articles[s][t])
                cid = hashlib.sha256(json.dumps([seed, t, f, s, fs, ss]).encode()).hexdigest()[:16]
                out.append(Comparison(cid, t, a, b, f, s, order, seed, fs, ss))
    return out, skipped


Slot = tuple[int, str, str, str]         # (seed, task, first, second): a comparison's place in a plan, texts aside
CURRENT, STALE, NOT_IN_PLAN = "current", "stale", "not_in_plan"


def slot(c: Mapping[str, Any]) -> Slot:
    return (int(c["seed"]), str(c["task_id"]), str(c["first"]), str(c["second"]))


def current_texts(articles: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
    """``text_sha`` of every non-empty text: system id -> task id -> hash (what ``plan`` hashes)."""
    return {s: {t: text_sha(x) for t, x in a.items() if x.strip()} for s, a in articles.items()}


@dataclass(frozen=True)
class CurrentPlan:
    """Which stored comparisons a report counts (see the module docstring). A part that could not
    be established is None and checks nothing; ``note`` says how each part was found."""
    slots: frozenset[Slot] | None               # the latest plan's comparisons, texts aside
    systems: frozenset[str] | None              # the latest plan's systems
    texts: Mapping[str, Mapping[str, str]] | None   # system -> task -> hash of its current text
    note: str = ""

    def status(self, c: Mapping[str, Any]) -> str:
        """CURRENT, STALE (a judged text is no longer the system's current output) or NOT_IN_PLAN."""
        if self.systems is not None and not {c["system_a"], c["system_b"]} <= self.systems:
            return NOT_IN_PLAN
        if self.slots is not None and slot(c) not in self.slots:
            return NOT_IN_PLAN
        if self.texts is not None:
            t = c["task_id"]
            if (self.texts.get(c["first"], {}).get(t) != c["first_sha"]
                    or self.texts.get(c["second"], {}).get(t) != c["second_sha"]):
                return STALE
        return CURRENT


def outcome(c: Mapping[str, Any], verdict: str | None, dimension: str | None = None) -> Outcome | None:
    """The outcome (a vs b) of a comparison row under a parsed verdict (see the benchmark's
    pairwise parser): overall when ``dimension`` is None, else that dimension, where "tie" is a
    tie and a missing dimension gives None (not counted)."""
    if verdict is None:
        return None
    v = json.loads(verdict)
    side = v["overall"] if dimension is None else v.get("dimensions", {}).get(dimension)
    if side is None:
        return None
    if side == "tie":
        return Outcome(c["task_id"], c["system_a"], c["system_b"], None)
    winner_id = c["first"] if side == "first" else c["second"]
    return Outcome(c["task_id"], c["system_a"], c["system_b"], "a" if winner_id == c["system_a"] else "b")


def pair_outcomes(rows: Iterable[Mapping[str, Any]], verdicts: Mapping[str, str | None]) -> list[Outcome]:
    """One outcome per (task, pair): a pair judged in both orders gives two verdicts that are not
    independent (same task, same two articles), so they are combined first: each verdict scores
    +1 for the side it picks (0 for a tie) and the sign of the sum decides. Two verdicts that
    disagree are a tie; a win and a tie lean to the win. A pair judged once keeps its verdict;
    failed verdicts do not count.
    Tests that assume independent outcomes (the sign test) take these, not the raw verdicts."""
    score: dict[tuple[str, str, str], int] = {}
    for c in rows:
        o = outcome(c, verdicts.get(c["comparison_id"]))
        if o is None:
            continue
        k = (o.task_id, o.a, o.b)
        score[k] = score.get(k, 0) + (0 if o.winner is None else 1 if o.winner == "a" else -1)
    return [Outcome(t, a, b, None if s == 0 else "a" if s > 0 else "b") for (t, a, b), s in sorted(score.items())]


def position_bias(rows: Iterable[Mapping[str, Any]], verdicts: Mapping[str, str | None]) -> dict[str, float]:
    """From comparisons judged in both orders: how often the verdict followed the position
    (same side both times) vs the article (consistent), and the share of all verdicts that
    picked the first article."""
    by_pair: dict[tuple[str, str, str], dict[str, str]] = {}
    firsts = total = 0
    for c in rows:
        v = verdicts.get(c["comparison_id"])
        if v is None:
            continue
        side = json.loads(v)["overall"]
        firsts += side == "first"
        total += 1
        by_pair.setdefault((c["task_id"], c["system_a"], c["system_b"]), {})[c["order"]] = side
    both = [d for d in by_pair.values() if len(d) == 2]
    same_side = sum(d["random"] == d["swapped"] for d in both)
    return {"verdicts": float(total), "first_share": firsts / total if total else float("nan"),
            "pairs_both_orders": float(len(both)),
            "consistent_share": (len(both) - same_side) / len(both) if both else float("nan")}


def labels(systems: list[dict[str, Any]]) -> dict[str, str]:
    """Readable labels: the model plus the agent settings that tell systems apart."""
    from engine.config import config_labels

    runs = [s for s in systems if s["system_id"] != REFERENCE]
    names = config_labels([(s["model"], json.loads(s["agent"]) if s["agent"] else {}, s["system_id"].split(":")[-1])
                           for s in runs])
    out = {s["system_id"]: n for s, n in zip(runs, names)}
    return out | ({REFERENCE: "reference (human)"} if len(runs) < len(systems) else {})
