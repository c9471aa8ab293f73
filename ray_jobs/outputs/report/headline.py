"""The top of the report: what was compared, which is better and how sure, what failed and why,
then where the numbers come from (provenance). Computed from the same blocks the sections below
render (``compute_runs``), so the headline never says a number the page does not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.benchmarks import get_benchmark
from engine.scoring import cutoff, outcomes
from engine.scoring.judge_checks import FAILED
from engine.scoring.judges import SELF_JUDGED
from engine.scoring.race_view import RaceView
from engine.storage import EpisodeStore
from ray_jobs.outputs.report.page import Page, est
from ray_jobs.outputs.report.sections import BenchmarkSection, ConfigGroup, JudgedBlock, num
from ray_jobs.outputs.runs_behind import RunsBehind, tasks_text

ALPHA = 0.05


@dataclass
class Verdict:
    """One primary metric of one judged block: its leader, the runner-up and how sure the order is."""
    metric: str
    text: str


@dataclass
class Headline:
    benchmark: str
    root: Path
    judge: str                       # "" for none
    marks: list[str]
    compared: str
    verdicts: list[Verdict] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    judge_check: str = ""            # why its judge's numbers are marked JUDGE FAILED ITS CHECKS


def headlines(sections: Sequence[BenchmarkSection]) -> list[Headline]:
    out = []
    for s in sections:
        bench = get_benchmark(s.name)
        race = RaceView.read(EpisodeStore(s.root))          # an adaptive run's decisions (race_view.py)
        failures = []
        for g in s.groups:
            c = g.counts or outcomes.count(g.rows, g.planned)
            if c.incomplete:
                why = ", ".join(f"{len(rs)} x {k}" for k, rs in list(g.failures().items())[:3])
                failures.append(f"{g.label}: {c.describe()}" + (f": {why}" if why else ""))
        for b in s.blocks:
            marks = [SELF_JUDGED.upper()] if any(g.self_judged for g in b.groups) else []
            marks += ["INCOMPLETE"] * any((g.counts is not None and g.counts.incomplete) for g in b.groups)
            marks += [FAILED] * bool(b.judge_check)             # engine/scoring/judge_checks.py
            h = Headline(s.name, s.root, b.judge, marks, _compared(b, race), failures=failures,
                         judge_check=b.judge_check)
            for m in bench.primary_metrics:
                if (v := _verdict(b, m, m in getattr(bench, "lower_is_better", ()), race)) is not None:
                    h.verdicts.append(v)
                if cutoff.splits(bench) and b.groups:
                    h.verdicts.append(_after_cutoff(b, m, m in getattr(bench, "lower_is_better", ())))
            out.append(h)
    return out


def _compared(b: JudgedBlock, race: RaceView | None = None) -> str:
    stopped = [g for g in b.groups if race is not None and race.stopped(g.config_hash)]
    kept = [g for g in b.groups if g not in stopped]
    n = len(kept)
    tasks = {t for g in kept for t in g.value_tasks}
    what = ", ".join(g.label for g in kept[:6]) + (f" and {n - 6} more" if n > 6 else "")
    own = b.scope != outcomes.COMMON or b.scope_note.startswith(outcomes.OWN_PLAN)    # the F3 fallback
    scope = "" if n < 2 else " each over its own plan" if own else " on the tasks every one of them finished"
    text = f"{n} configuration(s) ({what}), {len(tasks)} task(s){scope}"
    if stopped and race is not None:
        text += (f"; {len(stopped)} more {race.mark} by the race ({', '.join(g.label for g in stopped)}), shown by "
                 + ("their means over the tasks they ran, not full-set estimates" if race.screening
                    else "their decision intervals, never means") + ", and in no comparison")
    return text


def _verdict(b: JudgedBlock, metric: str, lower: bool, race: RaceView | None = None) -> Verdict | None:
    ranked = [(g, b.estimates.get(g.config_hash, {}).get(metric)) for g in b.groups]
    have = [(g, e) for g, e in ranked if e is not None and not math.isnan(e.value)
            and not (race is not None and race.stopped(g.config_hash))]
    if not have:
        return None
    have.sort(key=lambda ge: ge[1].value, reverse=not lower)
    best, e = have[0]
    word = "lowest" if lower else "highest"
    if len(have) == 1:
        return Verdict(metric, f"{metric}: {best.label} {est(e)}")
    second, e2 = have[1]
    if num(e.value) == num(e2.value):
        tied = [g.label for g, x in have if num(x.value) == num(e.value)]
        return Verdict(metric, f"{metric}: tie at {num(e.value)} between {', '.join(tied)}")
    if race is not None and metric == race.metric:          # the race decided on this metric: its words, not a test
        sure = _raced(race, best, second)
    else:
        sure = _paired(b, metric, best.label, second.label)
    return Verdict(metric, f"{metric}: {word} {best.label} {est(e)}, then {second.label} {est(e2)}; {sure}")


def _after_cutoff(b: JudgedBlock, metric: str, lower: bool) -> Verdict:
    """``metric`` over the questions after each model's knowledge cutoff (engine/scoring/cutoff.py),
    best first; "cutoff unknown" for a configuration without one. Models with different cutoffs
    are over different questions, so this is a listing, not a paired comparison."""
    m = metric + cutoff.SUFFIX
    have = [(g, e) for g in b.groups if (e := b.estimates.get(g.config_hash, {}).get(m)) is not None]
    have.sort(key=lambda ge: (math.isnan(ge[1].value), ge[1].value if lower else -ge[1].value))
    rest = [f"{g.label}: {cutoff.UNKNOWN if not g.knowledge_cutoff else 'no question after it'}"
            for g in b.groups if m not in b.estimates.get(g.config_hash, {})]
    text = "; ".join([f"{g.label} {est(e)}" for g, e in have] + rest)
    return Verdict(m, f"{metric} over the questions after each model's knowledge cutoff: {text}"
                      + (" (each over its own model's questions: not a paired comparison)" if len(have) > 1 else ""))


def _raced(race: RaceView, best: ConfigGroup, second: ConfigGroup) -> str:
    """How sure the order of two configurations the race did not stop is, in the race's terms: a
    paired fixed-sample test after adaptive stopping would contradict it (issue 46, finding 2)."""
    for g in (second, best):
        s = race.standing(g.config_hash)
        if s is not None and s.decided:
            return (f"the race decided against {g.label} at t = {s.tasks_admitted} of {s.n_tasks} (anytime-valid, "
                    f"{100 * s.level:.0f}%): {s.reason}")
    return (f"the race made no decision between {best.label} and {second.label} at its level (anytime-valid "
            "confidence sequences): not distinguishable by this run")


def _paired(b: JudgedBlock, metric: str, a: str, c: str) -> str:
    for r in b.paired or []:
        if r.metric == metric and {r.a, r.b} == {a, c}:
            p = r.p_holm if not math.isnan(r.p_holm) else r.test.p_value
            sign = 1 if r.a == a else -1
            diff = f"difference {num(sign * r.test.mean_diff)} over {r.test.n_tasks} shared task(s)"
            verdict = "the order is unlikely to be chance" if p < ALPHA else "not distinguishable from chance"
            return f"{diff}, p (Holm) = {p:.3g}: {verdict} at {ALPHA}"       # never printed as 0
    return "no paired test (no shared finished task)"


def render_headline(page: Page, items: Sequence[Headline]) -> None:
    if not items:
        return
    page.heading("Summary")
    for h in items:
        judge = f"judge {h.judge}" if h.judge else "no judge"
        marks = f" [{', '.join(h.marks)}]" if h.marks else ""
        page.strong(f"{h.benchmark} ({h.root}), {judge}{marks}")
        page.para(f"Compared: {h.compared}.")
        if h.judge_check:
            page.strong(h.judge_check)
        for v in h.verdicts:
            page.para(v.text)
        if h.failures:
            page.para("Failed: " + "; ".join(h.failures) + ".")


def render_provenance(page: Page, roots: Sequence[Path]) -> None:
    """Each run dir's provenance (engine/provenance.py) behind the configurations it holds: one row
    per command that produced some configuration's newest numbers, with how many configurations
    that is and which tasks they took (issue 46: the newest command alone misled when another ran
    most of the page)."""
    rows = []
    for root in roots:
        behind = RunsBehind(EpisodeStore(root))
        if not behind.provenances:
            rows.append([str(root), "", "not recorded (a run before dateline recorded provenance)", "", "", "", "", "",
                         "", "", ""])
            continue
        hashes = behind.config_hashes()
        by_command: dict[str, tuple[dict[str, Any], list[str]]] = {}   # provenance -> (it, its configurations)
        for h in hashes or [""]:
            p = behind.provenance(h)
            key = f"{p.get('started', '')} {' '.join(p.get('command') or [])}"
            by_command.setdefault(key, (p, []))[1].append(h)
        for p, mine in sorted(by_command.values(), key=lambda pm: -len(pm[1])):
            pk = p.get("packages", {})
            hw = p.get("hardware", {})
            gpus = (hw.get("ray") or {}).get("gpus")
            taken = sorted({tasks_text(behind.tasks(h)) for h in mine if h})
            rows.append([str(root), f"{len([h for h in mine if h])} of {len(hashes)}", f"dateline {p.get('dateline', '?')}",
                         (p.get("commit") or "no checkout")[:12] + (" (uncommitted changes)" if p.get("dirty") else ""),
                         f"Python {p.get('python', '?')}; " + ", ".join(f"{k} {v}" for k, v in pk.items()),
                         " ".join(p.get("command") or []), "; ".join(taken) or "not recorded",
                         f"{hw.get('cpu_model', '?')}, {hw.get('cores', '?')} cores"
                         + (f" ({', '.join(hw.get('cpu_flags') or [])})" if hw.get("cpu_flags") else "")
                         + (f", {num(gpus)} GPU(s)" if gpus else ""),
                         p.get("started", ""), p.get("ended", ""), f"{num(p.get('wall_s'))} s"])
    page.heading("Provenance")
    page.para("Where the numbers come from: per run dir, each command whose run produced some configuration's "
              "newest numbers (its provenance-*.json; every run-*.json holds its own), the configurations it "
              "produced, and the tasks they took (benchmark.limit and the task order, which the configuration's "
              "hash leaves out).")
    page.table(["run dir", "configurations", "version", "commit", "software", "command", "tasks", "hardware", "started",
                "ended", "wall time"], rows)
