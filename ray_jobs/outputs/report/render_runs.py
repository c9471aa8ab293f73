"""A run directory's sections (``compute_runs``, ``leaderboard``) on the page: text, tables and figures."""

from __future__ import annotations

import math

from engine.benchmarks import get_benchmark
from engine.scoring import cutoff, outcomes, stats
from engine.scoring.judge_checks import FAILED
from engine.scoring.judges import SELF_JUDGED, self_judged_note
from engine.scoring.outcome_marks import warnings_of
from engine.storage import EpisodeStore
from ray_jobs.outputs.report import plots
from ray_jobs.outputs.report.leaderboard import CrossRunSection, Leaderboard
from ray_jobs.outputs.report.page import Cell, Link, Page, ci, est
from ray_jobs.outputs.report.sections import BenchmarkSection, ConfigGroup, CostRow, JudgedBlock, num


def render_benchmark(page: Page, s: BenchmarkSection, episodes: int = 500) -> None:
    """The section on the page, and (``episodes`` > 0) the episode pages of each configuration,
    linked from its row (at most ``episodes`` each)."""
    page.heading(f"{s.name}: {s.root}")
    page.para(f"{len(s.groups)} configuration(s). Intervals (95%) follow what each metric is (its declared kind: "
              f"engine/scoring/kinds.py), never its values: exact (Clopper-Pearson) for a proportion with one "
              f"0/1 value per task; else a bootstrap over tasks ({s.n_boot} resamples), and none below "
              f"{stats.MIN_BOOT_TASKS} tasks (too few tasks for an interval); "
              "n = planned episodes behind the value. Every configuration's numbers are over its plan: an episode "
              "that was planned and has no scored result (an error, a budget stop, one never run) counts as its "
              "benchmark's failure value under run.score_failures=as_wrong, or is left out under exclude "
              "(docs/design/what-a-number-means.md).")
    _adaptive(page, s)
    links: dict[str, Cell] = {}
    if episodes > 0:
        from engine.benchmarks import get_benchmark as _gb
        from ray_jobs.outputs.report.episodes import write_pages

        store = EpisodeStore(s.root, _gb(s.name).episode_fields)
        for g in s.groups:          # the link counts what the index it opens lists
            href, n = write_pages(page.out, store, _gb(s.name), g.config_hash, g.label, episodes, s.root)
            links[g.config_hash] = Link(f"{n} episodes", href)
    page.table(["configuration", "config hash", "planned", "scored", "error", "budget-stopped", "stopped early",
                "not run", "tasks", "task set", "failures count as", "status", "transcripts"],
               [[g.label, g.config_hash, c.n_planned, c.n_scored, c.n_error, c.n_budget_stopped, c.n_stopped_early,
                 c.n_not_run,
                 len({p.task_id for p in outcomes.plan_of(g.rows, g.planned)}), g.task_set,
                 "wrong" if g.policy == "as_wrong" else "excluded",
                 g.race or ("STOPPED EARLY" if c.n_stopped_early else "INCOMPLETE" if c.incomplete else "complete"),
                 links.get(g.config_hash, "-")]
                for g in s.groups if (c := g.counts or outcomes.count(g.rows, g.planned))])
    bench = get_benchmark(s.name)
    for g in s.groups:
        for w in warnings_of(bench, g.agent, g.data):
            page.strong(f"{g.label}: {w}")
    incomplete = [g for g in s.groups if g.counts is not None and g.counts.incomplete]
    if incomplete:
        page.strong("INCOMPLETE: " + "; ".join(f"{g.label}: {g.counts.describe()}" for g in incomplete
                                               if g.counts is not None))
    render_failures(page, s, links)
    if s.no_match:
        page.para(f"No judgements by a judge matching {s.judge_filter!r} (judges here: "
                  f"{', '.join(sorted(s.judges)) or 'none'}).")
    for b in s.blocks:
        level = 3
        if b.judge:
            info = b.judge_info
            page.heading(f"Judge {b.judge}", 3)
            page.para(f"Every judge-based number in this block comes from this judge alone: model "
                      f"{info.get('model', '?')}, endpoint {info.get('kind') or 'not recorded'}, prompt version "
                      f"{info.get('prompt') or 'not recorded'}. Configurations judged by another judge appear in "
                      f"that judge's block.")
            if b.self_judged:
                page.strong(f"{SELF_JUDGED.upper()}: " + self_judged_note(info.get("model", b.judge)))
            if b.judge_check:
                page.strong(b.judge_check)
            level = 4
        render_block(page, s.name, b, level)
    page.heading("Tokens and cost", 3)
    page.table(["configuration", "tokens per episode (in+out)", "replica hours (this config's runs)", "prices",
                "cost per episode", "run cost (generation + judge)"], [cost_cells(c) for c in s.costs])
    if s.tokens is not None:
        priced = " and cost" if s.tokens.cost else ""
        page.figure(plots.tokens_figure(s.tokens), f"{s.name}-tokens-cost",
                    f"{s.name}: tokens{priced} per episode, by configuration")


def render_failures(page: Page, s: BenchmarkSection, links: dict[str, Cell]) -> None:
    """Failures: per configuration, each kind of failure (engine.scoring.outcomes.error_kind) with its
    count and one example, linked to that episode's page when the report has one."""
    rows: list[list[Cell]] = []
    for g in s.groups:
        index = links.get(g.config_hash)
        for kind, rs in g.failures().items():
            ex = min(rs, key=lambda r: str(r["episode_id"]))
            page_of = (Link(ex["episode_id"][:16], index.href.rsplit("/", 1)[0] + f"/{ex['episode_id']}.html")
                       if isinstance(index, Link) else ex["episode_id"][:16])
            first = (ex["error"] or "").splitlines()[0][:200] if ex["error"] else ex["status"]
            rows.append([g.label, kind, ex["status"], len(rs), ex["task_id"], page_of, first])
    if s.replicas:              # restarts are the pool's, not the episodes': their causes, whatever failed
        page.heading("Model replicas", 3)
        page.para("What the hosted model's replicas went through in every run of this run dir, by cause "
                  "(the events, with the metrics behind each verdict, are in replica-events-*.json).")
        page.table(["cause", "times"], [[k, n] for k, n in s.replicas.items()])
        for d in s.diagnoses:
            page.strong(d)
    if not rows:
        return
    page.heading("Failures", 3)
    page.para("Planned episodes without a scored result, by kind, with one example each (its page shows every "
              "model call it made). Re-run errors with run.retry_failed=true; budget-stopped episodes run again "
              "under a larger run.budget.")
    page.table(["configuration", "kind", "status", "episodes", "example task", "example episode", "error"], rows)


def cost_cells(row: CostRow) -> list[Cell]:
    c, p = row.cost, row.cost.prices
    if row.per_episode is not None:
        ce = row.per_episode
        cost_ep = (f"${ce.value:.4f} [{ce.lo:.4f}, {ce.hi:.4f}]" if not math.isnan(ce.lo) else
                   f"${ce.value:.4f}" + (" (too few tasks for an interval)" if ce.method == stats.TOO_FEW else ""))
        total = f"${c.total:.4f}"
    else:
        cost_ep = total = "no prices configured"
    return [row.label, est(row.tokens), f"{c.uptime_s / 3600:.3f}" if c.recorded else "not recorded",
            f"in {p.input_per_mtok:g} / out {p.output_per_mtok:g} per Mtok; {p.gpu_hour:g} per unit-hour "
            f"x {p.units_per_replica:g}", cost_ep, total]


def count_lines(page: Page, g: ConfigGroup) -> None:
    """Under a table: how much of its plan the configuration's judge saw, and its stored episodes
    outside the plan (engine/scoring/outcomes.py ``count_notes``)."""
    c = g.counts or outcomes.count(g.rows, g.planned)
    for note in outcomes.count_notes({**c.columns(), "judge": g.judge, "score_failures": g.policy}):
        (page.strong if note.startswith(outcomes.PARTIALLY_JUDGED) else page.para)(f"{g.label}: {note}")


def cutoff_lines(page: Page, name: str, b: JudgedBlock) -> None:
    """Under a dated benchmark's table: each configuration's knowledge cutoff and its questions on
    each side of it, or "cutoff unknown" (the ``.after_cutoff`` rows: engine/scoring/cutoff.py)."""
    if not cutoff.splits(get_benchmark(name)):
        return
    for g in b.groups:
        side = {k: int(v[0]) for k, v in b.plain[g.config_hash].items() if k in (cutoff.AFTER, cutoff.BEFORE)}
        page.para(f"{g.label}: {cutoff.describe(g.knowledge_cutoff, side.get(cutoff.AFTER), side.get(cutoff.BEFORE))}")


def render_block(page: Page, name: str, b: JudgedBlock, level: int) -> None:
    """Metrics with intervals, paired tests, paper tables and plots of one judge's block."""
    page.heading("Metrics", level)
    if b.scope_note:
        page.para(b.scope_note)
    if not b.judge and get_benchmark(name).judge_metrics:
        page.strong(outcomes.UNGRADED)
    for g in b.groups:
        count_lines(page, g)
    cutoff_lines(page, name, b)
    # what every column is over: the configuration's plan (scored / planned, marked when incomplete)
    rows: list[list[Cell]] = [["episodes (scored/planned)",
                               *[g.n_cell() for g in b.groups]]]
    for m in b.metrics:
        cells: list[Cell] = []
        for g in b.groups:
            e = b.estimates[g.config_hash].get(m)
            v = b.plain[g.config_hash].get(m)
            cells.append(est(e) if e is not None else f"{num(v[0])} (n={v[1]})" if v else "")
        rows.append([m, *cells])
    page.table(["metric", *[g.label + (f" [{SELF_JUDGED}]" if g.self_judged else "") for g in b.groups]], rows)
    if b.paired is not None:
        page.heading("Paired comparisons", level)
        page.para("Per task (values averaged over seeds), configurations compared on the tasks they share: mean "
                  "difference A - B with a 95% bootstrap interval over tasks (none below "
                  f"{stats.MIN_BOOT_TASKS} shared tasks), and a two-sided sign-flip "
                  "permutation test (exact up to 16 tasks; above, a Monte-Carlo estimate (b + 1) / (m + 1) over "
                  "m random sign patterns, never 0). With few tasks trust the p-value over the interval: a percentile "
                  "bootstrap is too narrow below ~20 tasks, and the exact test cannot go below "
                  "2 / 2^(tasks with a difference).")
        page.table(["metric", "A", "B", "A - B", "p", "p (Holm)", "tasks"],
                   [[r.metric, r.a, r.b, num(r.test.mean_diff) + ci(r.test.lo, r.test.hi, r.test.method,
                                                                     r.test.n_tasks),
                     f"{r.test.p_value:.3g}", f"{r.p_holm:.3g}", r.test.n_tasks] for r in b.paired])
        families = {r.metric: r.family_size for r in b.paired}
        if families:
            page.para("p (Holm): " + "; ".join(f"Holm-adjusted over the {n} comparison{'s' * (n != 1)} of {m} in "
                                                 f"this block" for m, n in families.items())
                      + " (a family is every paired test of one primary metric in this judge's block); p is the "
                        "unadjusted p-value.")
    for title, md in b.paper_tables.items():
        page.heading(f"Paper layout: {title}", level)
        if b.self_judged and b.groups[0].judge:
            page.strong(f"{SELF_JUDGED.upper()}: judge-based columns of this table were graded by the model under test.")
        page.markdown_table(md)
    if b.curve is not None:
        c = b.curve
        page.figure(plots.curve_figure(c), f"{name}-curve",
                    f"{name}: {c.metric} vs {c.xfield} ({_methods([e for _, pts in c.series for _, e in pts])})")
        page.table(["series", "model / other settings", c.xfield, c.metric],
                   [[f"series {i + 1}", key[:120], num(x), est(e)]
                    for i, (key, pts) in enumerate(c.series) for x, e in pts])
    if b.per_task is not None:
        pt = b.per_task
        page.figure(plots.per_task_figure(pt, [g.label for g in b.groups]), f"{name}-{pt.metric}-by-task",
                    f"{name}: {pt.metric} by task (mean over seeds)")


def render_leaderboard(page: Page, lb: Leaderboard, level: int) -> None:
    """One judge's ranking by one metric: ties share a rank, marks beside each configuration, and
    what the values are over under it."""
    judge = f"judge {lb.judge}" if lb.judge else "no judge"
    mark = (f" [{SELF_JUDGED.upper()}]" if lb.self_judged else "") + (f" [{FAILED}]" if lb.judge_check else "")
    way = "lower is better" if lb.lower_is_better else "higher is better"
    page.heading(f"Leaderboard by {lb.metric} ({judge}){mark}", level)
    if lb.self_judged:
        page.strong(f"{SELF_JUDGED.upper()}: the judge is one of the compared models; these ranks are not measurements.")
    if lb.judge_check:
        page.strong(lb.judge_check)
    beside = [f"{lb.also} (95% interval, n)"] if lb.also else []
    page.table(["rank", "configuration", f"{lb.metric} (95% interval, n; {way})", *beside, "vs leader",
                "scored/planned", "marks", "run dir"],
               [[f"#{e.rank}", e.label, est(e.estimate), *([est(e.also) if e.also else e.also_missing] if lb.also else []),
                 e.vs_leader, outcomes.n_cell(e.counts.columns() | {"race": e.race}), ", ".join(e.marks) or "-", e.root]
                for e in lb.entries])
    if lb.ranking_note:
        page.strong(lb.ranking_note)
    notes = [lb.scope_note] if lb.scope_note else []
    notes.append("Equal values (to the printed precision) share a rank (#1=); a configuration whose interval overlaps "
                 "the leader's is not shown to be worse.")
    page.para(" ".join(notes))


def render_cross_runs(page: Page, s: CrossRunSection) -> None:
    """Several run dirs of one benchmark as one comparison, and its leaderboard (also written as
    ``leaderboard.html`` / ``leaderboard.md`` next to the report)."""
    page.heading(f"{s.name} across {len(s.roots)} run dirs: {', '.join(str(r) for r in s.roots)}")
    page.para("Every configuration of every run dir in one comparison (a configuration run in two dirs appears "
              "twice, labelled by its dir); intervals and paired tests as above, on the tasks all of them finished.")
    board = Page(page.out)
    for lb in s.leaderboards:
        for p, level in ((page, 3), (board, 2)):
            render_leaderboard(p, lb, level)
    if s.leaderboards:
        for b in s.blocks:          # what the counts add: a judge's coverage, episodes outside a plan
            for g in b.groups:
                count_lines(board, g)
            cutoff_lines(board, s.name, b)
        board.write_named("leaderboard", f"dateline leaderboards: {s.name}")
    for b in s.blocks:
        if b.judge:
            page.heading(f"Judge {b.judge}", 3)
        if b.judge_check:
            page.strong(b.judge_check)
        render_block(page, s.name, b, 4 if b.judge else 3)


def _adaptive(page: Page, s: BenchmarkSection) -> None:
    """An adaptive run's decisions (``adaptive.json``, ray_jobs/run/adaptive.py): the wording every
    output carries, and each configuration's state and anytime-valid interval, the stopped ones
    by their interval only (a sample mean after adaptive stopping is biased)."""
    ad = EpisodeStore(s.root).read_json("adaptive.json")
    if not ad or ad.get("benchmark") != s.name:
        return
    d = ad["design"]
    page.heading(f"Adaptive evaluation ({d['strategy']}{', goal ' + d['goal'] if d['strategy'] == 'race' else ''})", 3)
    page.para(ad["wording"] + f" Raced on {ad['metric']}; task order {ad['order']['order']} (seed "
              f"{ad['order']['seed']}, order hash {ad['order']['order_hash']}); design hash {ad['design_hash']}.")
    labels = {g.config_hash: g.label for g in s.groups}
    page.table(["configuration", "config hash", "state", "tasks admitted", f"{ad['metric']}: interval of the full-set mean",
                "decision"],
               [[labels.get(h, h[:8]), h, c["state"].replace("_", " "), c["tasks_admitted"],
                 f"[{c['interval'][0]:.3f}, {c['interval'][1]:.3f}] ({100 * c['interval_level']:.0f}%, anytime-valid)",
                 c["reason"] or "-"] for h, c in sorted(ad["configurations"].items())])


def _methods(estimates: list[stats.Estimate]) -> str:
    """How the intervals of a figure were made, from the estimates it draws (issue 46: a caption
    said "bootstrap" over points whose intervals were exact)."""
    names = {stats.EXACT: "exact (Clopper-Pearson)", stats.BOOTSTRAP: "bootstrap over tasks"}
    made = sorted({names[e.method] for e in estimates if e.method in names})
    none = any(e.method == stats.TOO_FEW for e in estimates)
    text = ("95% intervals: " + " or ".join(made) + (", as each point's row below says" if len(made) > 1 else "")
            if made else "no intervals")
    return text + ("; points with too few tasks have none" if none and made else "")
