"""A model's knowledge cutoff: the last date its training data reaches. It is set on the model
(``model.knowledge_cutoff``) or, for a model named in the ``knowledge_cutoffs`` table
(``conf/knowledge_cutoffs.yaml``, which users extend), looked up there by the model's served name,
then its name; the model's own field wins. It is a reading setting: it decides how the results of
dated questions are split (``engine/scoring/cutoff.py``), never what an episode does, so no id
hashes it and changing it re-runs nothing."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from engine.errors import ConfigError

__all__ = ["check_date", "check_table", "knowledge_cutoff"]


def check_date(value: Any, where: str) -> str:
    """``value`` as an ISO date (YYYY-MM-DD); a ConfigError naming ``where`` when it is not one."""
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", value.strip()):
        try:
            return dt.date.fromisoformat(value.strip()).isoformat()
        except ValueError:
            pass
    raise ConfigError(f"{where}: must be a date YYYY-MM-DD (the last day the model's training data reaches), "
                      f"got {value!r}")


def check_table(table: Any) -> None:
    """Every entry of the ``knowledge_cutoffs`` table: a model name to a date."""
    if not isinstance(table, dict):
        raise ConfigError(f"knowledge_cutoffs: must map model names to dates, got {table!r}")
    for name, value in table.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"knowledge_cutoffs: model names must be non-empty strings, got {name!r}")
        check_date(value, f"knowledge_cutoffs.{name}")


def knowledge_cutoff(model: Any, table: Any = None, uses_model: bool = True) -> str | None:
    """The knowledge cutoff of ``model`` (a ModelConfig) as an ISO date: its own field, else the
    table's entry for its served name, then its name (exact, then ignoring case); None when
    unknown, and for an agent that calls no model (it has no training data to date)."""
    if not uses_model:
        return None
    own = getattr(model, "knowledge_cutoff", None)
    if own is not None and own != "":
        return check_date(own, "model.knowledge_cutoff")
    table = table or {}
    names = [n for n in (model.served_name, model.name) if n]
    for exact in (True, False):
        for n in names:
            for key, value in table.items():
                if key == n if exact else str(key).lower() == n.lower():
                    return check_date(value, f"knowledge_cutoffs.{key}")
    return None
