"""Comparisons on common tasks (``scope = common``): the tasks every compared configuration
finished, per metric the tasks every one has a value for, and the sentences under a table that
say what was dropped. What each configuration lacks per metric (``lacking``) reads its values, so
it stays in ``outcomes.py``, which re-exports these names."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from engine.protocol import Row
from engine.scoring.outcome_marks import SCORED, Planned, outcome, plan_of

ALL, COMMON = "all", "common"


def finished_tasks(rows: Sequence[Row], planned: Sequence[Planned] | None) -> set[str]:
    """Tasks every planned episode of which (every seed) is scored."""
    by = {r["episode_id"]: r for r in rows}
    ok: dict[str, bool] = {}
    for p in plan_of(rows, planned):
        ok[p.task_id] = ok.get(p.task_id, True) and outcome(by.get(p.episode_id)) == SCORED
    return {t for t, v in ok.items() if v}


def restrict(rows: Sequence[Row], planned: Sequence[Planned] | None, tasks: set[str]) -> list[Planned]:
    """The plan cut to ``tasks``."""
    return [p for p in plan_of(rows, planned) if p.task_id in tasks]


def planned_tasks(rows: Sequence[Row], planned: Sequence[Planned] | None) -> set[str]:
    return {p.task_id for p in plan_of(rows, planned)}


def metric_common(members: Sequence[Mapping[str, set[str]]], common: set[str]) -> dict[str, set[str]]:
    """The metrics whose comparable tasks are fewer than ``common`` (the tasks every member
    finished): per such metric, the tasks of ``common`` every member has a value of it for
    (``members``: ``outcomes.lacking`` of each). A member with no value of a metric at all leaves it
    none."""
    out: dict[str, set[str]] = {}
    for k in set().union(*members) if members else set():
        s = set(common)
        for lk in members:
            s = s - lk[k] if k in lk else set()
        if s != common:
            out[k] = s
    return out


def metric_note(metric: str, tasks: set[str], common: set[str]) -> str:
    """The sentence under a metric compared on fewer tasks than the rest (:func:`metric_common`)."""
    if not tasks:
        return f"{metric}: {NO_COMMON_VALUE}: each configuration's {metric} is over its own plan."
    return (f"{metric}: on the {len(tasks)} task(s) every compared configuration has a value for "
            f"({len(common - tasks)} more dropped).")


# The start of the sentence under a comparison that has no task to compare on: its COMMON rows are
# each configuration over its own plan, so exports never label them ``common`` (issue 46)
OWN_PLAN = "No task was finished by every one of the"


def common_set(done: Sequence[set[str]]) -> set[str]:
    """The tasks a comparison is on: those every member that finished any task finished. A member
    that finished none (a dead endpoint) is left out (issue 46: it emptied every comparison), and
    fewer than two members with tasks compare on nothing."""
    live = [d for d in done if d]
    return set.intersection(*live) if len(live) >= 2 else set()


def common_note(n_common: int, dropped: int, n_configs: int, n_none: int = 0, n_stopped: int = 0) -> str:
    """The sentence under a table computed on common tasks (``n_common`` 0: under a comparison
    that falls back to each configuration's own plan; ``n_none`` of them finished no task and
    ``n_stopped`` were stopped early by a race (engine/scoring/race_view.py): both left out of the
    common set)."""
    stopped = (f" {n_stopped} of the {n_configs} {'was' if n_stopped == 1 else 'were'} stopped early by the race: left "
               "out of the common tasks (shown by the race's decision interval, never a mean)." if n_stopped else "")
    if n_common == 0:
        return (f"{OWN_PLAN} {n_configs} compared configurations ({n_none} finished "
                f"none): each configuration is shown over its own plan.{stopped}")
    # with some that finished nothing: the counts and "compared configurations" are of the others
    which = " that finished a task" if n_none else ""
    which += " and ran to the end of the race" if n_stopped else ""
    left_out = (f" {n_none} of the {n_configs} finished no task: left out of the common tasks (shown over them "
                "with nothing scored)." if n_none else "") + stopped
    n_live = n_configs - n_none - n_stopped
    if dropped == 0:
        return (f"All {n_live} configurations{which} are compared on the same {n_common} task(s); none was "
                f"dropped.{left_out}")
    return (f"Computed on the {n_common} task(s) every one of the {n_live} compared configurations{which} "
            f"finished; {dropped} task(s) dropped (not finished by every configuration). Show each configuration "
            f"over its own plan with --all-tasks.{left_out}")


# what :func:`metric_note` says of a metric no task has a value of from every compared configuration
NO_COMMON_VALUE = "no task has a value of it from every compared configuration"


def own_plan(row: Mapping[str, object]) -> bool:
    """A row of scope common that is its configuration over its own plan: nothing to compare on
    at all, or nothing for its metric (:func:`metric_note`); exports never label it ``common``."""
    note = str(row.get("note") or "")
    mine = re.search(rf"(^|\s){re.escape(str(row.get('metric')))}: {NO_COMMON_VALUE}", note)
    return row.get("scope") == COMMON and (note.startswith(OWN_PLAN) or mine is not None)
