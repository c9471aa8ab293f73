"""A pairwise directory's sections (``compute_pairwise``) on the page, and the short text summary
printed at the end of a pairwise stage."""

from __future__ import annotations

import itertools
import math

import numpy as np

from engine.scoring import stats
from engine.scoring.judges import SELF_JUDGED
from engine.scoring.pairwise import NOT_IN_PLAN, STALE
from ray_jobs.outputs.report import plots
from ray_jobs.outputs.report.compute_pairwise import (
    Agreement,
    Dimensions,
    JudgingCost,
    PairwiseSection,
    ProtocolSection,
    Ratings,
    SignTest,
    StageSummary,
)
from ray_jobs.outputs.report.page import Page, est


def render_pairwise(page: Page, s: PairwiseSection) -> None:
    page.heading(f"Pairwise judging: {s.root}")
    page.table(["system", "label", "run"], [[x["system_id"], x["label"], x["run_dir"] or "(task data)"]
                                           for x in s.systems])
    if s.plan is not None:
        page.para(s.plan.note + " Stored verdicts on texts that have changed since they were judged (stale) or on "
                  "comparisons outside this plan are left out and counted below.")
    if s.cost is not None:
        render_cost(page, s.cost)
    for p in s.protocols:
        render_protocol(page, p)


def render_cost(page: Page, c: JudgingCost) -> None:
    page.para(f"Judging cost over {c.stage_runs} stage run(s): {c.tokens_in:,.0f} prompt / {c.tokens_out:,.0f} "
              f"completion tokens, {c.replica_s / 3600:.3f} replica hours, ${c.usd:.4f} at the configured prices.")
    last = c.latest
    page.para(f"Latest stage: {last.get('comparisons')} comparisons ({last.get('skipped_pairs')} pair-tasks "
              f"skipped because a text was missing), judge {last.get('judge')}, "
              f"seed {(last.get('config') or {}).get('seed')}, both orders: "
              f"{(last.get('config') or {}).get('both_orders')}.")


def render_protocol(page: Page, p: ProtocolSection) -> None:
    v, names = p.verdicts, p.names
    page.heading(f"{v.protocol} protocol, judge {v.judge}", 3)
    if p.self_judged_model:
        page.strong(f"{SELF_JUDGED.upper()}: the judge ({p.self_judged_model}) is the model of a compared system, "
                    f"so it judged pairs it is in; these verdicts are not a measurement of quality.")
    page.para(f"{len(v.values)} verdicts over {len({c['task_id'] for c in v.comparisons})} tasks; {p.failed} failed "
              f"(malformed after every retry; excluded, not guessed).")
    stale, other = v.left_out.get(STALE, 0), v.left_out.get(NOT_IN_PLAN, 0)
    page.para(f"Left out: {stale + other} stored verdicts: {stale} stale (a judged text is no longer the system's "
              f"current output; run `dateline pairwise` again to judge the new text) and {other} not in the current "
              f"plan (another seed, order, task or system than the latest stage's).")
    if p.position is not None and not p.position.pairs_both_orders:
        # one order per pair: how often the first article won mixes the position with which article
        # was better, so it is no measure of position preference (issue 46)
        page.para("Position: not measured. Each pair was judged in one order, so a preference for the "
                  "first article cannot be told from a better article; judge with both_orders=true to measure it.")
    elif p.position is not None:
        pos = p.position
        consistent = f"{pos.consistent_share * 100:.1f}% of {int(pos.pairs_both_orders)} pairs"
        page.para(f"Position: the first article won {est(pos.first_wins)} of verdicts, each pair judged in both "
                  f"orders (0.5 = no position preference). Same winner when the order is swapped: {consistent}.")
        if pos.consistent_share < 0.5:
            page.para("Warning: most verdicts did not survive swapping the order: this judge follows the "
                      "position, not the articles, and the win rates below measure that.")
    if p.ratings is not None:
        render_ratings(page, p.ratings, names, v.protocol)
    if p.sign_tests is not None:
        render_sign_tests(page, p.sign_tests, names)
    if p.dimensions is not None:
        render_dimensions(page, p.dimensions, names, v.protocol)
    if p.agreement is not None:
        render_agreement(page, p.agreement)


def render_ratings(page: Page, r: Ratings, names: list[str], protocol: str) -> None:
    M, lo, hi, N = r.win, r.win_lo, r.win_hi, r.comparisons
    page.figure(plots.winrate_figure(r, names), f"winrate-{protocol}",
                f"Win rate (%) of the row system over the column system ({protocol} protocol), 95% interval "
                f"as in the table below (none where too few tasks)")
    k = len(names)
    page.table(["row \\ column", *names],
               [[names[i], *[("" if i == j or N[i, j] == 0 else
                              f"{with_interval(M[i, j] * 100, lo[i, j] * 100, hi[i, j] * 100, '.1f')} "
                              f"(n={int(N[i, j])})") for j in range(k)]] for i in range(k)])
    page.para("A win rate's interval: exact (Clopper-Pearson) when the pair has one verdict per task and no "
              "tie, a share of independent trials; else the task bootstrap, which needs "
              f"{stats.MIN_BOOT_TASKS} tasks: below that, none is printed (too few tasks).")
    page.para("Bradley-Terry ratings from every pairwise outcome (one virtual tie per pair that met keeps "
              "ratings finite); Elo scale: 400 points = 10:1 odds, centred on 1000. Their intervals are the "
              f"task bootstrap, none below {stats.MIN_BOOT_TASKS} tasks.")
    elo, elo_lo, elo_hi = r.elo
    page.table(["rank", "system", "BT log-strength", "Elo", "wins / comparisons"],
               [[n + 1, names[i], with_interval(r.theta[i], r.theta_lo[i], r.theta_hi[i], ".2f"),
                 with_interval(elo[i], elo_lo[i], elo_hi[i], ".0f"), f"{r.wins[i].sum():g} / {r.games[i].sum():g}"]
                for n, i in enumerate(r.rank)])


def with_interval(value: float, lo: float, hi: float, fmt: str) -> str:
    """``value [lo, hi]``, or ``value (too few tasks for an interval)`` where there is none."""
    if math.isnan(lo) or math.isnan(hi):
        return f"{value:{fmt}} (too few tasks for an interval)"
    return f"{value:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


def render_sign_tests(page: Page, tests: list[SignTest], names: list[str]) -> None:
    page.para("Sign tests count one outcome per (task, pair): a pair judged in both orders is combined first "
              "(agreeing verdicts give a win, disagreeing ones a tie), since its two verdicts are not "
              "independent; ties are dropped. p-values are Holm-adjusted over the "
              f"{sum(not math.isnan(t[4]) for t in tests)} pairs of this table (family-wise error 5% at p < 0.05).")
    page.table(["A", "B", "A wins - B wins (pairs)", "ties", "sign test p (two-sided)", "p (Holm)"],
               [[names[a], names[b], f"{w} - {lo}", ties, f"{p:.3g}", f"{ph:.3g}"]
                for a, b, w, lo, p, ph, ties in tests])


def render_dimensions(page: Page, d: Dimensions, names: list[str], protocol: str) -> None:
    page.para("Dimension-wise outcomes (Figure 4): % of A wins / ties / B wins per dimension; n counts the "
              "verdicts that judged the dimension (a partial verdict leaves some out).")
    page.table(["A", "B", *d.dims, "Overall"],
               [[names[a], names[b], *[f"{x[0] * 100:.0f} / {x[1] * 100:.0f} / {x[2] * 100:.0f} (n={x[3]})"
                                       if x[3] else "n/a" for x in shares]] for (a, b), shares in d.shares.items()])
    page.figure(plots.dimensions_figure(d, names), f"dimensions-{protocol}",
                f"Per-dimension win / tie / loss shares ({protocol} protocol)")


def render_agreement(page: Page, a: Agreement) -> None:
    page.para(f"Agreement with human labels ({a.file}): {est(a.estimate)}; {a.ties} human ties excluded, "
              f"{a.without_verdict} labelled pairs without a verdict excluded (appendix C.3: exact match on "
              f"non-tied pairs).")


def summary_text(summaries: list[StageSummary]) -> str:
    """Markdown: win rates and Bradley-Terry per judge and protocol."""
    out = []
    for s in summaries:
        names, M = s.names, s.win
        out.append(f"{s.protocol} / {s.judge}: {s.verdicts} verdicts")
        if s.self_judged_model:
            out.append(f"**{SELF_JUDGED.upper()}**: the judge ({s.self_judged_model}) is the model of a compared "
                       "system; these win rates are not measurements.")
        out.append("win rate (row over column, %): " + "; ".join(
            f"{names[i]} > {names[j]}: {M[i, j] * 100:.0f}" for i, j in itertools.permutations(range(len(names)), 2)
            if not math.isnan(M[i, j])))
        out.append("Bradley-Terry: " + ", ".join(f"{names[i]} {s.theta[i]:+.2f}" for i in np.argsort(-s.theta)))
    return "\n".join(out) or "no verdicts yet"
