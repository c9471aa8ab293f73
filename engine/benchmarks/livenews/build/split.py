"""The date split of a release (the paper's section 2.3): by the date of each question's event,
counted in calendar months back from a reference date L (``as_of``, else the latest event date):

* ``test``: L's month and the month before it (the paper's "past two months");
* ``validation``: the month before those;
* ``train``: every older month.

An event after L is an error (a release may not hold questions about its future). The manifest
records each split's observed dates (:func:`split_ranges`) and its calendar window
(:func:`split_windows`).
"""

from __future__ import annotations

import calendar
import datetime as dt
from collections.abc import Mapping

SPLITS = ("test", "validation", "train")
TEST_MONTHS = 2             # L's month and the one before
VALIDATION_MONTHS = 1       # the month before the test months


def _months(d: dt.date) -> int:
    return d.year * 12 + d.month - 1


def _first_of(months: int) -> dt.date:
    return dt.date(months // 12, months % 12 + 1, 1)


def _last_of(months: int) -> dt.date:
    y, m = months // 12, months % 12 + 1
    return dt.date(y, m, calendar.monthrange(y, m)[1])


def split_of(date: dt.date, latest: dt.date) -> str:
    """The split of an event on ``date`` when the reference date is ``latest``."""
    back = _months(latest) - _months(date)
    if date > latest:
        raise ValueError(f"{date} is after the split's reference date {latest}")
    if back < TEST_MONTHS:
        return "test"
    return "validation" if back < TEST_MONTHS + VALIDATION_MONTHS else "train"


def reference_date(dates: Mapping[str, dt.date], as_of: dt.date | None = None) -> dt.date | None:
    """L: ``as_of``, else the latest date (None when there are none)."""
    return as_of if as_of is not None else max(dates.values(), default=None)


def date_split(dates: Mapping[str, dt.date], as_of: dt.date | None = None) -> dict[str, str]:
    """id -> ``test`` | ``validation`` | ``train`` for each id's event date. A date after
    ``as_of`` raises ValueError naming how many and the first few ids."""
    latest = reference_date(dates, as_of)
    if latest is None:
        return {}
    late = sorted((d, i) for i, d in dates.items() if d > latest)
    if late:
        first = ", ".join(f"{i} ({d})" for d, i in late[:3])
        raise ValueError(f"{len(late)} events are after the split's as_of date {latest}: {first}"
                         + (", ..." if len(late) > 3 else ""))
    return {i: split_of(d, latest) for i, d in dates.items()}


def split_windows(latest: dt.date) -> dict[str, tuple[dt.date | None, dt.date]]:
    """Each split's calendar window (first day, last day) for reference date ``latest``; train's
    has no first day. Test ends on ``latest`` itself."""
    m = _months(latest)
    valid = m - TEST_MONTHS
    return {"test": (_first_of(valid + 1), latest),
            "validation": (_first_of(valid - VALIDATION_MONTHS + 1), _last_of(valid)),
            "train": (None, _last_of(valid - VALIDATION_MONTHS))}


def split_ranges(dates: Mapping[str, dt.date], as_of: dt.date | None = None) -> dict[str, dict[str, str]]:
    """For the manifest, each split that has events, in :data:`SPLITS` order: ``from`` and ``to``
    (its earliest and latest event date) and ``window_from`` / ``window_to`` (its calendar window;
    train's ``window_from`` is empty), all ISO dates. Raises as :func:`date_split` does."""
    split = date_split(dates, as_of)
    latest = reference_date(dates, as_of)
    if latest is None:
        return {}
    windows = split_windows(latest)
    out: dict[str, dict[str, str]] = {}
    for s in SPLITS:
        ds = [dates[i] for i, name in split.items() if name == s]
        if ds:
            lo, hi = windows[s]
            out[s] = {"from": min(ds).isoformat(), "to": max(ds).isoformat(),
                      "window_from": lo.isoformat() if lo else "", "window_to": hi.isoformat()}
    return out
