"""One writer per run dir: a lock file that names its holder.

A driver that writes a run dir (``dateline run``, ``estimate``, ``metrics``, ``pairwise``) holds
``<run dir>/_lock.json`` for as long as it writes: ``{"host", "pid", "command", "since",
"heartbeat", "token"}``. A second driver gets :class:`RunDirLocked` naming the holder instead of
writing episodes, judgements or compacted shards beside it (compaction runs inside the holder,
so it never races another writer).

A lock is **stale**, and is taken over with a warning, when its holder is on this host and its
pid is gone, or when its heartbeat (rewritten every ``HEARTBEAT_S`` by a thread of the holder)
is older than ``STALE_S`` (a holder on another host that died, or a machine that rebooted).

On a local disk the lock is created with ``O_CREAT | O_EXCL``, so two drivers cannot both take
it. On object stores (``s3://``) there is no exclusive create in pyarrow: the lock is written,
then read back to check that this driver's token is the one there; two drivers starting within
the same second can still both pass (documented in docs/design/resume.md).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

log = logging.getLogger("dateline.runlock")

LOCK_NAME = "_lock.json"
HEARTBEAT_S = 30.0
STALE_S = 180.0


class RunDirLocked(RuntimeError):
    """Another driver holds the run dir."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:          # someone else's process: it exists
        return True
    return True


def stale_reason(holder: dict[str, Any], now: float | None = None, stale_s: float = STALE_S) -> str:
    """Why the lock ``holder`` is stale ("" while it is live)."""
    now = time.time() if now is None else now
    age = now - float(holder.get("heartbeat") or holder.get("since") or 0.0)
    if holder.get("host") == socket.gethostname():
        pid = int(holder.get("pid") or 0)
        if pid <= 0 or not _alive(pid):
            return f"its process {pid} on this host is gone"
    if age > stale_s:
        return f"its heartbeat is {age:.0f} s old (stale after {stale_s:.0f} s)"
    return ""


def describe(holder: dict[str, Any]) -> str:
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(holder.get("since") or 0.0)))
    return (f"pid {holder.get('pid')} on host {holder.get('host')} ({holder.get('command') or '?'}), "
            f"since {since}, heartbeat {time.time() - float(holder.get('heartbeat') or 0.0):.0f} s ago")


class RunDirLock:
    """``with RunDirLock(run_dir, "dateline run"):`` holds the run dir's lock (re-entrant within
    this process: a sweep's points that share a run dir take it once)."""

    _held: dict[str, RunDirLock] = {}
    _guard = threading.Lock()

    def __init__(self, root: str | Path, command: str = "", filesystem: pafs.FileSystem | None = None,
                 heartbeat_s: float = HEARTBEAT_S, stale_s: float = STALE_S) -> None:
        from engine.storage import open_root

        self.fs, self.base = open_root(root, filesystem)
        self.local = isinstance(self.fs, pafs.LocalFileSystem)
        self.path = f"{self.base}/{LOCK_NAME}"
        self.command = command or " ".join(os.path.basename(a) for a in sys.argv[:2])
        self.heartbeat_s, self.stale_s = heartbeat_s, stale_s
        self.token = uuid.uuid4().hex
        self.depth = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the file ------------------------------------------------------------------------------
    def _record(self) -> dict[str, Any]:
        now = time.time()
        return {"host": socket.gethostname(), "pid": os.getpid(), "command": self.command, "since": now,
                "heartbeat": now, "token": self.token}

    def read(self) -> dict[str, Any] | None:
        try:
            with self.fs.open_input_stream(self.path) as f:
                text = f.read().decode()
        except (FileNotFoundError, OSError):
            return None
        try:
            return dict(json.loads(text))
        except (ValueError, TypeError):
            return {"host": "?", "pid": 0, "since": 0.0, "heartbeat": 0.0, "corrupt": text[:100]}

    def _create(self, rec: dict[str, Any]) -> bool:
        data = json.dumps(rec).encode()
        if self.local:
            Path(self.base).mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            return True
        if self.fs.get_file_info(self.path).type != pafs.FileType.NotFound:
            return False
        with self.fs.open_output_stream(self.path) as f:
            f.write(data)
        got = self.read()
        return bool(got and got.get("token") == self.token)

    def _rewrite(self, rec: dict[str, Any]) -> None:
        data = json.dumps(rec).encode()
        if self.local:
            tmp = f"{self.path}.{self.token}"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, self.path)
        else:
            with self.fs.open_output_stream(self.path) as f:
                f.write(data)

    def _remove(self) -> None:
        try:
            self.fs.delete_file(self.path)
        except (FileNotFoundError, OSError):
            pass

    # -- acquire / release ---------------------------------------------------------------------
    def acquire(self) -> RunDirLock:
        with RunDirLock._guard:
            held = RunDirLock._held.get(self.path)
            if held is not None:
                held.depth += 1
                return held
            rec = self._record()
            for _ in range(3):
                if self._create(rec):
                    break
                holder = self.read()
                if holder is None:                      # released meanwhile
                    continue
                why = stale_reason(holder, stale_s=self.stale_s)
                if not why:
                    raise RunDirLocked(
                        f"run dir {self.base} is in use by another driver: {describe(holder)} (lock file "
                        f"{self.path}). Wait for it to finish, or use another run.dir; if that driver is "
                        "gone, delete the lock file.")
                log.warning("taking over the lock of run dir %s: %s held it and %s", self.base, describe(holder), why)
                self._remove()
            else:
                raise RunDirLocked(f"could not take the lock {self.path} (another driver keeps taking it)")
            self.depth = 1
            RunDirLock._held[self.path] = self
            self._thread = threading.Thread(target=self._beat, args=(rec,), name="run-dir-lock", daemon=True)
            self._thread.start()
            return self

    def _beat(self, rec: dict[str, Any]) -> None:
        while not self._stop.wait(self.heartbeat_s):
            current = self.read()
            if not current or current.get("token") != self.token:
                log.error("the lock of run dir %s was taken by %s", self.base, describe(current or {}))
                return
            rec["heartbeat"] = time.time()
            try:
                self._rewrite(rec)
            except OSError as e:          # a full disk: the next beat tries again
                log.warning("run dir lock heartbeat: %s", e)

    def release(self) -> None:
        with RunDirLock._guard:
            self.depth -= 1
            if self.depth > 0:
                return
            RunDirLock._held.pop(self.path, None)
            self._stop.set()
            if self._thread is not None:
                self._thread.join(timeout=10)
            current = self.read()
            if current and current.get("token") == self.token:
                self._remove()

    def __enter__(self) -> RunDirLock:
        self._holding = self.acquire()
        return self._holding

    def __exit__(self, *exc: Any) -> None:
        self._holding.release()
