"""The date split (engine.benchmarks.livenews.build.split, the paper's section 2.3) on hand-made
dates: month ends, the year boundary, an explicit as_of, dates after it."""

from __future__ import annotations

import datetime as dt

import pytest

from engine.benchmarks.livenews.build.split import date_split, split_of, split_ranges, split_windows


def d(s: str) -> dt.date:
    return dt.date.fromisoformat(s)


def test_the_paper_release() -> None:
    # the paper's release: train January-May 2025, validation June, test July and August
    dates = {"jan": d("2025-01-01"), "may": d("2025-05-31"), "jun1": d("2025-06-01"), "jun30": d("2025-06-30"),
             "jul1": d("2025-07-01"), "aug": d("2025-08-20")}
    assert date_split(dates) == {"jan": "train", "may": "train", "jun1": "validation", "jun30": "validation",
                                 "jul1": "test", "aug": "test"}


def test_year_boundary() -> None:
    dates = {"dec": d("2024-12-31"), "jan": d("2025-01-01"), "nov": d("2024-11-30"), "oct": d("2024-10-31"),
             "nov1": d("2024-11-01")}
    assert date_split(dates) == {"dec": "test", "jan": "test", "nov": "validation", "nov1": "validation",
                                 "oct": "train"}
    # L in February: test = January and February, validation = December of the year before
    feb = {"feb": d("2025-02-28"), "jan": d("2025-01-01"), "dec": d("2024-12-31"), "nov": d("2024-11-30")}
    assert date_split(feb) == {"feb": "test", "jan": "test", "dec": "validation", "nov": "train"}


def test_as_of_is_the_reference_and_later_dates_are_refused() -> None:
    dates = {"a": d("2025-03-15"), "b": d("2025-01-31")}
    assert date_split(dates, as_of=d("2025-04-01")) == {"a": "test", "b": "train"}
    assert date_split(dates, as_of=d("2025-03-15")) == {"a": "test", "b": "validation"}
    with pytest.raises(ValueError, match=r"1 events are after the split's as_of date 2025-03-14: a \(2025-03-15\)"):
        date_split(dates, as_of=d("2025-03-14"))
    with pytest.raises(ValueError, match="after the split's reference date"):
        split_of(d("2025-03-02"), d("2025-03-01"))


def test_leap_day_and_month_ends() -> None:
    assert split_of(d("2024-02-29"), d("2024-03-31")) == "test"
    assert split_of(d("2024-01-31"), d("2024-03-01")) == "validation"
    assert split_of(d("2023-12-31"), d("2024-03-01")) == "train"


def test_empty() -> None:
    assert date_split({}) == {} and split_ranges({}) == {}


def test_windows_and_ranges_for_the_manifest() -> None:
    assert split_windows(d("2025-01-15")) == {"test": (d("2024-12-01"), d("2025-01-15")),
                                              "validation": (d("2024-11-01"), d("2024-11-30")),
                                              "train": (None, d("2024-10-31"))}
    assert split_windows(d("2024-03-31"))["validation"] == (d("2024-01-01"), d("2024-01-31"))
    assert split_windows(d("2024-04-10"))["validation"] == (d("2024-02-01"), d("2024-02-29"))
    dates = {"a": d("2025-01-03"), "b": d("2024-12-09"), "c": d("2024-09-01"), "e": d("2024-10-02")}
    assert split_ranges(dates) == {
        "test": {"from": "2024-12-09", "to": "2025-01-03", "window_from": "2024-12-01", "window_to": "2025-01-03"},
        "train": {"from": "2024-09-01", "to": "2024-10-02", "window_from": "", "window_to": "2024-10-31"}}
    assert list(split_ranges(dates, as_of=d("2025-02-01"))) == ["test", "validation", "train"]
