"""Vectorised selection over stored rows with Arrow compute: per key the best row (ok over failed,
then newest), group starts, and the expressions that pick one configuration's rows."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any, Literal, TypeAlias, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

log = logging.getLogger("dateline.storage")


def all_of(*exprs: pc.Expression | None) -> pc.Expression | None:
    out = None
    for e in exprs:
        if e is not None:
            out = e if out is None else out & e
    return out

def field_in(name: str, value: str | Iterable[str] | None) -> pc.Expression | None:
    """``name == value`` (a str) or ``name in value`` (an iterable); None when value is None."""
    if value is None:
        return None
    if isinstance(value, str):
        return pc.field(name) == value
    return pc.field(name).isin(pa.array(list(value), pa.string()))


# pyarrow-stubs quirks the code below works around: kernels are typed as returning an Array even
# for ChunkedArray input (they return a ChunkedArray), comparisons take only Arrow scalars (a Python
# value is wrapped with ``pa.scalar`` by pyarrow itself), and ``pc.fill_null`` is typed as
# ``coalesce`` (same-typed arguments), so nulls are filled with the ``.fill_null`` method.
Column: TypeAlias = "pa.Array[Any] | pa.ChunkedArray[Any]"      # the stubs' generics, not subscriptable at run time

Order: TypeAlias = Literal["ascending", "descending"]

# what :meth:`EpisodeStore.judges` describes a judge by
JUDGE_INFO = ("judge", "judge_model", "judge_kind", "judge_prompt", "evaluation", "judge_weights")

def config_rows(config_hash: str | None, episode_ids: Iterable[str] | None) -> pc.Expression | None:
    """Judgement rows of one configuration: stamped with its hash, or (written before the stamp)
    of one of its ``episode_ids``; None (every row) without ``config_hash``."""
    if config_hash is None:
        return None
    where = pc.field("config_hash") == config_hash
    if episode_ids is not None:
        where = where | (pc.field("config_hash").is_null()
                         & pc.field("episode_id").isin(pa.array(list(episode_ids), pa.string())))
    return where

def ok_rank(col: Column, ok_value: Any = True) -> Column:
    """1 where ``col == ok_value`` (``"ok"`` for a status, True for a flag), else 0 (nulls too)."""
    return pc.cast(pc.equal(col, pa.scalar(ok_value)).fill_null(False), pa.int8())

def group_starts(sorted_keys: pa.Table) -> pa.ChunkedArray[Any]:
    """For rows sorted by their key columns: True where a row's key differs from the previous
    row's (a null equals a null), i.e. where a group starts."""
    n = sorted_keys.num_rows
    if n == 0:
        return pa.chunked_array([], pa.bool_())
    diff: pa.ChunkedArray[Any] = pa.chunked_array([pa.array(np.zeros(n - 1, dtype=bool))])
    for col in sorted_keys.columns:
        cur, prev = col.slice(1), col.slice(0, n - 1)
        cn, pn = pc.is_null(cur), pc.is_null(prev)
        d = pc.if_else(pc.or_(cn, pn), pc.xor(cn, pn), pc.not_equal(cur, prev).fill_null(False))
        diff = cast("pa.ChunkedArray[Any]", pc.or_(diff, d))     # ChunkedArray in, ChunkedArray out
    return pa.chunked_array([pa.array([True]), *diff.chunks], pa.bool_())

def sorted_unique(idx: Column | np.ndarray[Any, Any]) -> pa.Array[Any]:
    return pa.array(np.unique(np.asarray(idx, dtype=np.int64)), pa.int64())

def pick(t: pa.Table, keys: list[str], rank: Sequence[tuple[str, Order]] = (),
          first_seen: bool = False) -> pa.Array[Any]:
    """Row indices of ``t``: per distinct ``keys`` (nulls are one value) the first row by ``rank``
    (ties: the earliest row, the sort is stable). Ascending, or with ``first_seen`` in the order
    in which the groups first appear (the iteration order of a dict filled row by row)."""
    if t.num_rows == 0:
        return pa.array([], pa.int64())
    by_key: list[tuple[str, Order]] = [(k, "ascending") for k in keys]
    idx = pc.sort_indices(t, sort_keys=by_key + list(rank))
    starts = group_starts(t.select(keys).take(idx))
    win = pc.filter(idx, starts)
    if not first_seen:
        return sorted_unique(win)
    first = pc.filter(pc.sort_indices(t, sort_keys=by_key), starts)   # same groups, same positions
    return pc.take(win, pc.sort_indices(first))

def pair(a: pa.ChunkedArray[Any], b: pa.ChunkedArray[Any]) -> pa.ChunkedArray[Any]:
    # the stubs allow no plain-str separator (the last positional argument)
    joined: pa.ChunkedArray[Any] = pc.binary_join_element_wise(a, b, "\x1f")  # type: ignore[call-overload]
    return joined
