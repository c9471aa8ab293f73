"""Errors that name where bad input came from."""

from __future__ import annotations

from engine.inputs.fdtree import escape_text


class DataError(ValueError):
    """Bad input data: always names the file, the row (1-based line) and the field."""

    def __init__(self, path: object, row: int | None, field: str | None, message: str) -> None:
        where = escape_text(str(path))          # a name that is not UTF-8: escaped
        if row is not None:
            where += f", row {row}"
        if field is not None:
            where += f", field '{field}'"
        super().__init__(f"{where}: {message}")
        self.path, self.row, self.field = path, row, field


class ConfigError(ValueError):
    """A configuration that cannot run; raised before any actor starts."""


class PlacementError(RuntimeError):
    """Ray could not reserve the resources a model's replicas asked for (their placement groups)
    in time: names the model, what each replica asked for and what the cluster has. Raised after
    the groups are removed, so nothing stays pending."""


class WorkerStartError(RuntimeError):
    """An episode worker's constructor failed. Every restart gets the same arguments, so it would
    fail again: the run stops with the cause instead of waiting for a worker that never comes."""


class StoreWriteError(RuntimeError):
    """A run could not write finished episodes to its run dir (a full disk, a lost mount): names
    the run dir, how many episodes and the OS error. What was stored before stays readable, and
    a re-run of the same command runs the unwritten episodes again."""


class CorruptShard(DataError):
    """A shard of a run dir cannot be read (truncated, overwritten, not Parquet): names it and what
    to do (``dateline repair RUN_DIR`` moves it aside; nothing else is lost)."""


class BadDataError(DataError):
    """A :class:`DataError` of a known kind of bad input (``kind``: one of
    ``engine.inputs.quarantine.KINDS``, e.g. ``missing_field``, ``bad_utf8``), so that a loader running
    with ``benchmark.on_bad_rows=skip`` can quarantine the row under its kind."""

    def __init__(self, kind: str, path: object, row: int | None, field: str | None, message: str) -> None:
        super().__init__(path, row, field, message)
        self.kind, self.message = kind, message


class CliError(Exception):
    """A command-line mistake: one line on stderr, exit status 2. Here, below every command, so
    that the commands (``export``, ``report``, ...) raise it without importing the CLI that turns it
    into an exit status."""
