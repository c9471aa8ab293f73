"""The snippets' own uids on a root worker, and what a root child sets up before it drops to one.

A root worker runs each episode folder's snippets as an unprivileged uid of their own, leased for
the folder's sandbox (``lease_uid``: an ``flock`` per uid, so no two live sandboxes share one);
``kill_uid`` kills every process of such a uid, which reaches nothing else. ``views_preexec`` runs
in the child, still root: a private mount namespace with every bind source at ``VIEWS/<i>``, where
the unprivileged uid can reach it (``bwrap.bwrap_command`` names them)."""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import time
import zlib
from pathlib import Path

UIDS = range(200_000, 300_000)      # the uids a root worker's sandboxes run as
_UID_LEASES = os.path.join(os.environ.get("TMPDIR", "/tmp"), "dateline-sandbox-uids")


def lease_uid(root: Path) -> tuple[int, int]:
    """An unprivileged uid for an episode folder's snippets that no other live sandbox on this
    machine holds, and the descriptor that holds it (an ``flock`` on ``_UID_LEASES/<uid>``: freed
    on close or when the worker dies). The first choice is the folder's hash, so a folder keeps
    its uid from one attempt to the next; a taken uid moves on to the next. Unique uids are what
    make "kill every process of the folder's uid" safe: it can never reach another episode."""
    os.makedirs(_UID_LEASES, mode=0o700, exist_ok=True)
    base = zlib.crc32(str(root).encode())
    for k in range(len(UIDS)):
        uid = UIDS[(base + k) % len(UIDS)]
        fd = os.open(os.path.join(_UID_LEASES, str(uid)), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return uid, fd
    raise RuntimeError(f"sandbox: every uid of {UIDS.start}-{UIDS.stop - 1} is held by a live sandbox")


def _pids_of(uid: int, corpses: bool = True) -> list[int]:
    """The processes of ``uid`` now (zombies too unless ``corpses`` is False)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid != uid:
                    continue
                if not corpses:
                    with open(f"/proc/{name}/stat", "rb") as f:
                        if f.read().rpartition(b")")[2].split()[0] in (b"Z", b"X"):
                            continue
                out.append(int(name))
            except (OSError, IndexError):
                pass
    return out


def kill_uid(uid: int, timeout_s: float = 5.0) -> int:
    """SIGKILL every process of ``uid`` (an episode folder's own: nothing else runs as it) until
    none is left alive; returns how many were killed. Only for a root worker's sandbox uids."""
    assert uid != 0 and uid != os.getuid(), "kill_uid is for a sandbox's own uid"
    killed = 0
    deadline = time.monotonic() + timeout_s
    while (pids := _pids_of(uid, corpses=False)) and time.monotonic() <= deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        time.sleep(0.01)
    return killed


def procs_of(uid: int) -> int:
    """Processes (and threads) of ``uid`` now: RLIMIT_NPROC counts them all."""
    n = 0
    for pid in _pids_of(uid):
        try:
            n += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            pass
    return n


# Where a root worker's child binds what the sandbox needs (its own mount namespace: nothing
# appears there for anyone else) before it drops to the snippet's uid.
VIEWS = os.path.join(os.environ.get("TMPDIR", "/tmp"), "dateline-sandbox-views")
_LIBC = ctypes.CDLL(None, use_errno=True)
_CLONE_NEWNS, _MS_BIND, _MS_REC, _MS_PRIVATE, _MS_NOSUID, _MS_NODEV = 0x20000, 4096, 16384, 1 << 18, 2, 4


def views_preexec(paths: list[str]) -> None:
    """In the child, as root: a private mount namespace, a tmpfs on ``VIEWS``, and each source
    bound at ``VIEWS/<i>`` (reachable by any uid). Raises OSError naming the step. (Sources are
    opened after the unshare: a bind from a descriptor of the old namespace is EINVAL.)"""
    def enc(x: str | None) -> bytes | None:
        return None if x is None else x.encode()

    def mount(src: str | None, dst: str, fstype: str | None, flags: int, data: str | None = None) -> None:
        if _LIBC.mount(enc(src), enc(dst), enc(fstype), flags, enc(data)) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"sandbox views: mount {src} on {dst}: {os.strerror(e)}")
    if _LIBC.unshare(_CLONE_NEWNS) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"sandbox views: unshare(CLONE_NEWNS): {os.strerror(e)}")
    mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    mount("tmpfs", VIEWS, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=1m")
    for i, src in enumerate(paths):
        dst = f"{VIEWS}/{i}"
        if os.path.isdir(src):
            os.mkdir(dst, 0o755)
        else:
            os.close(os.open(dst, os.O_CREAT | os.O_WRONLY, 0o644))
        mount(src, dst, None, _MS_BIND | _MS_REC)

