"""A working directory per episode, and a bounded Python runner that sees nothing else.

The agentic analyst runs model-written pandas/matplotlib snippets. Each episode's folder is made
fresh and holds only what its setting allows (the task's sources; instructions, ToC and template
reach the model in its prompt). Each snippet runs in a fresh ``python -I`` subprocess whose
working directory is that folder, bounded by:

* **time**: a wall-clock timeout (the whole process group is killed) and RLIMIT_CPU;
* **memory**: RLIMIT_AS; **file size**: RLIMIT_FSIZE;
* **reads** (isolation ``namespace``, the default wherever unprivileged user namespaces work):
  the process starts in new user, mount, PID and network namespaces and ``chroot``\\s into a
  fresh tmpfs that holds only read-only binds of the system's ``/usr`` (and its ``/bin``, ``/lib``
  links), Python's own installation (``sys.prefix``, ``sys.base_prefix``), ``/dev/null`` and the
  random devices, a private ``/tmp``, its own ``/proc``, and the episode folder itself at its own
  path. The repository, the task's reference, checklist and ToC files, the run dir and the other
  episodes' folders are not in its file system at all, whatever the route (Python ``open``, native
  code such as pyarrow's C++ readers, symlinks, ``..``, ``/proc/self/root``). Then every
  capability is dropped (bounding set emptied, ``SECBIT_NOROOT`` locked, ``no_new_privs``), so the
  snippet can neither remount, unmount nor ``chroot`` out. No network interface exists either;
* **the audit hook** (always, the only guard with isolation ``audit``): refuses opening, listing
  and creating paths outside the episode folder and Python's installation, starting processes,
  sockets and name lookups, calling native code through ctypes, and importing modules that read
  files natively (pyarrow, sqlite3 and the like) around it.

``DATELINE_SANDBOX`` picks the isolation: ``auto`` (default: ``namespace`` where it works, else
``audit`` with a warning), ``namespace`` (refuse to run where it does not work) or ``audit``.
Audit hooks guard against a model's mistakes and casual escapes, not hostile native code (C
extensions can still do anything): where namespaces are unavailable, run untrusted models in the
container images of ``docker/``, which add the OS-level boundary. The file tools the agent calls
(list, grep, read, write) never run its code; they resolve paths and refuse anything outside the
folder. The launcher and the guard are passed with ``-c``, never written where a snippet could
change them for the next run.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

ISOLATIONS = ("auto", "namespace", "audit")

# System files a snippet may read under either isolation (bound read-only into the namespace root,
# allowed by the audit hook): time zone, the loader's cache, and the MIME table (openpyxl builds a
# mimetypes.MimeTypes at import, which reads /etc/mime.types when it exists: refused, pandas.read_excel
# failed under audit isolation).
_SYSTEM_FILES = ("/etc/localtime", "/etc/ld.so.cache", "/etc/mime.types")

# Runs inside the snippet's process (``python -I -B -c _GUARD ROOT SCRIPT ISOLATION``): installs
# the audit hook, then executes the snippet.
_GUARD = r'''
import os, sys
_ROOT = os.path.realpath(sys.argv[1])
_AUDIT_ONLY = sys.argv[3] == "audit"
_PY = tuple(sorted({os.path.realpath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}))
# what a snippet may read besides its folder: Python's installation, the system's libraries and
# data (fonts, zoneinfo), the null and random devices
_READ = _PY + ("/usr/", *_SYSTEM_FILES_, "/dev/null", "/dev/urandom", "/dev/random", "/dev/zero")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
# modules that open files in native code, where no audit event sees them (isolation audit only:
# under namespace isolation there is nothing outside the folder for them to read)
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
    elif event == "sqlite3.connect":
        p = args[0] if args else ""
        if isinstance(p, (str, bytes, os.PathLike)) and os.fsdecode(p) != ":memory:" and not _inside(p):
            _refuse("opening a database", p)
    elif event in ("os.remove", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.link", "os.symlink",
                   "os.truncate", "os.utime", "shutil.rmtree", "shutil.move", "shutil.copyfile"):
        for a in args:
            if isinstance(a, (str, bytes, os.PathLike)) and not _inside(a):
                _refuse(event, a)
    elif event in ("os.rename", "os.replace"):
        for a in args[:2]:
            if not _inside(a):
                _refuse(event, a)
    elif event in ("socket.connect", "socket.bind", "socket.getaddrinfo", "socket.gethostbyname",
                   "socket.sendto", "socket.sendmsg"):
        raise PermissionError("sandbox: network access is not allowed")
    elif event in ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.fork", "os.forkpty",
                   "os.spawn", "pty.spawn"):
        raise PermissionError("sandbox: starting processes is not allowed")
    elif event == "ctypes.dlopen":
        # numpy opens the process itself (None) at import; a library from outside Python's own
        # installation could be anything
        name = args[0] if args else None
        if name is not None and not any(_real(str(name)).startswith(p) for p in _PY):
            raise PermissionError(f"sandbox: loading {name} with ctypes is not allowed")
    elif event in ("ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.call_function", "ctypes.cdata",
                   "ctypes.addressof", "ctypes.string_at", "ctypes.wstring_at", "ctypes.set_errno"):
        raise PermissionError("sandbox: calling native code through ctypes is not allowed")
    elif event == "import" and _AUDIT_ONLY and args[0].split(".")[0] in _NATIVE_READERS:
        raise ModuleNotFoundError(f"sandbox: {args[0]} reads files natively; it is not available here")

sys.addaudithook(_hook)
_code = open(sys.argv[2], encoding="utf-8").read()
sys.argv = [sys.argv[2]]
exec(compile(_code, "snippet.py", "exec"), {"__name__": "__main__"})
'''
_GUARD = _GUARD.replace("_SYSTEM_FILES_", repr(_SYSTEM_FILES))

# Runs first in the new namespaces (``unshare --user --map-root-user --mount --pid --fork --net
# python -I -B -c _LAUNCHER CONFIG``), as root of its own user namespace: builds the snippet's file
# system, drops every capability, then execs the guard. Failures exit 121 with a message.
_LAUNCHER = r'''
import ctypes, json, os, sys
cfg = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME = 4096, 16384, 1 << 18, 1 << 21
ST_KEEP = 2 | 4 | 8 | 1024 | 2048          # nosuid nodev noexec noatime nodiratime: same bits as MS_*
ST_RELATIME = 4096

def die(msg):
    sys.stderr.write(f"sandbox: cannot isolate: {msg}\n")
    os._exit(121)

def mount(src, dst, fstype, flags, data=None):
    enc = lambda s: None if s is None else os.fsencode(s)
    if libc.mount(enc(src), enc(dst), enc(fstype), flags, enc(data)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount {src} on {dst}: {os.strerror(e)}")

def locked_flags(path):
    # a read-only remount in a user namespace must keep the flags the original mount has
    f = os.statvfs(path).f_flag
    return (f & ST_KEEP) | (MS_RELATIME if f & ST_RELATIME else 0)

new = cfg["newroot"]
try:
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16m")
    for src in cfg["read_only"]:
        dst = new + src
        if os.path.islink(src):            # merged-/usr links (/bin -> usr/bin): the link itself
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            if not os.path.lexists(dst):
                os.symlink(os.readlink(src), dst)
            continue
        if not os.path.exists(src) or os.path.exists(dst) and os.path.ismount(dst):
            continue
        if os.path.isdir(src):
            os.makedirs(dst, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            open(dst, "a").close()
        mount(src, dst, None, MS_BIND | MS_REC)
        mount(None, dst, None, MS_REMOUNT | MS_BIND | MS_RDONLY | locked_flags(src))
    for d in ("tmp", "proc", "dev"):
        os.makedirs(os.path.join(new, d), exist_ok=True)
    mount("tmpfs", new + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=64m")
    for dev in ("null", "zero", "full", "random", "urandom"):
        open(f"{new}/dev/{dev}", "a").close()
        mount(f"/dev/{dev}", f"{new}/dev/{dev}", None, MS_BIND)
    try:                                   # our own PID namespace's /proc (some kernels refuse)
        mount("proc", new + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError:
        os.rmdir(new + "/proc")
    root = cfg["root"]
    os.makedirs(new + root, exist_ok=True)
    mount(root, new + root, None, MS_BIND)  # not recursive: nothing mounted below it comes along
    os.chroot(new)
    os.chdir(root)
except OSError as e:
    die(e)
# drop every capability: no remount, unmount or chroot out; uid 0 gains none back at exec
PR_SET_SECUREBITS, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_SET_NO_NEW_PRIVS = 28, 24, 47, 38
if libc.prctl(PR_SET_SECUREBITS, 0x2F, 0, 0, 0) != 0:       # NOROOT, NO_SETUID_FIXUP, KEEP_CAPS, all locked
    die(f"PR_SET_SECUREBITS: {os.strerror(ctypes.get_errno())}")
cap = 0
while libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0:
    cap += 1
libc.prctl(PR_CAP_AMBIENT, 4, 0, 0, 0)
if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
    die(f"PR_SET_NO_NEW_PRIVS: {os.strerror(ctypes.get_errno())}")
os.execv(cfg["python"], [cfg["python"], *cfg["guard"]])
'''


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 30.0
    memory_mb: int = 2048
    max_file_mb: int = 64
    output_chars: int = 6000


@dataclass
class RunResult:
    ok: bool
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float
    new_files: list[str]

    def summary(self, limit: int) -> str:
        head = "ok" if self.ok else ("timed out" if self.timed_out else f"exit code {self.returncode}")
        out = f"[{head} in {self.seconds:.1f} s]"
        if self.stdout:
            out += "\nstdout:\n" + _clip(self.stdout, limit)
        if self.stderr:
            out += "\nstderr:\n" + _clip(self.stderr, limit // 2)
        if self.new_files:
            out += "\nnew files: " + ", ".join(self.new_files)
        return out


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit // 2] + "\n[... cut ...]\n" + text[-limit // 2:]


def _unshare() -> list[str]:
    return [shutil.which("unshare") or "unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork",
            "--net"]


def _read_only_binds() -> list[str]:
    """What the snippet's file system holds besides its folder: the system's programs and
    libraries and Python's installation (a venv inside a repository comes alone, not the repo)."""
    paths = ["/usr", "/bin", "/lib", "/lib64", "/lib32", "/sbin", *_SYSTEM_FILES]
    for p in sorted({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                                   os.path.dirname(os.path.realpath(sys.executable)))}):
        if not any(p == q or p.startswith(q + os.sep) for q in paths):
            paths.append(p)
    return [p for p in paths if os.path.lexists(p)]


def _python_in_new_root() -> str:
    """This interpreter by a path that exists in the snippet's file system, which binds the real
    paths: a venv reached through a symlink (``.venv -> /elsewhere``, a symlinked home) is there
    only at its real path. The folder is resolved, not the file: the venv's ``bin/python`` is itself
    a link, and Python finds ``pyvenv.cfg`` (so the venv's packages) from the path it was run by."""
    return os.path.join(os.path.realpath(os.path.dirname(sys.executable)), os.path.basename(sys.executable))


_PROBE_LOCK = threading.Lock()


def namespace_isolation_available() -> bool:
    """Whether snippets can run in their own user, mount, PID and network namespaces here (tried
    once: a launcher builds the file system and runs ``python -c pass`` in it). Episodes set up
    their folders in threads at once: one probes, the others wait for its answer."""
    with _PROBE_LOCK:
        return _probe_namespaces()


@functools.lru_cache(maxsize=1)
def _probe_namespaces() -> bool:
    if not shutil.which("unshare"):
        return False
    import tempfile

    with tempfile.TemporaryDirectory(prefix="dateline-sandbox-probe-") as d:
        root = Path(d) / "episode"
        (root / ".sandbox" / "nsroot").mkdir(parents=True)
        try:
            res = subprocess.run([*_unshare(), *_launch_args(root, ["-I", "-B", "-c", "pass"])],
                                 capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return False
        if res.returncode != 0:
            log.info("sandbox: namespace isolation unavailable here: %s",
                     res.stderr.decode("utf-8", "replace").strip()[-300:])
        return res.returncode == 0


def _launch_args(root: Path, guard_argv: list[str]) -> list[str]:
    cfg = {"newroot": str(root / ".sandbox" / "nsroot"), "root": str(root), "read_only": _read_only_binds(),
           "python": _python_in_new_root(), "guard": guard_argv}
    return [sys.executable, "-I", "-B", "-c", _LAUNCHER, json.dumps(cfg)]


def isolation_mode(requested: str | None = None) -> str:
    """The isolation snippets get: ``DATELINE_SANDBOX`` (or ``requested``) resolved against what
    this machine supports."""
    want = (requested or os.environ.get("DATELINE_SANDBOX") or "auto").strip().lower()
    if want not in ISOLATIONS:
        raise ValueError(f"DATELINE_SANDBOX: {want!r} is not one of {', '.join(ISOLATIONS)}")
    if want == "audit":
        return "audit"
    if namespace_isolation_available():
        return "namespace"
    if want == "namespace":
        raise RuntimeError("DATELINE_SANDBOX=namespace, but unprivileged user/mount namespaces do not work on this "
                           "machine (unshare --user --map-root-user --mount --pid failed); run in docker/ images "
                           "or set DATELINE_SANDBOX=audit to accept the audit hook alone")
    _warn_audit_only()
    return "audit"


@functools.lru_cache(maxsize=1)
def _warn_audit_only() -> None:
    log.warning("sandbox: user/mount namespaces are unavailable here; model-written code is confined by an "
                "audit hook only (native code can still read files). Run untrusted models in docker/ images.")


class PathRefused(ValueError):
    """A file tool was asked for a path outside the episode folder."""


class Sandbox:
    def __init__(self, root: str | Path, limits: Limits = Limits(), isolation: str | None = None) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.limits = limits
        self.isolation = isolation_mode(isolation)
        self.runs = 0

    # -- file tools (no model code runs) --------------------------------------------------------
    def path(self, rel: str) -> Path:
        p = (self.root / rel).resolve()
        if p != self.root and self.root not in p.parents:
            raise PathRefused(f"{rel!r} is outside the working directory")
        return p

    def files(self) -> list[str]:
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*")
                      if p.is_file() and not any(part.startswith(".") for part in p.relative_to(self.root).parts))

    # -- code ------------------------------------------------------------------------------------
    def run_python(self, code: str) -> RunResult:
        """Run one snippet (blocking: call it from a thread in async code)."""
        self.runs += 1
        meta = self.root / ".sandbox"
        for d in ("nsroot", "tmp", "mpl"):
            (meta / d).mkdir(parents=True, exist_ok=True)
        script = meta / f"snippet-{self.runs}.py"
        script.write_text(code, encoding="utf-8")
        before = set(self.files())
        guard = ["-I", "-B", "-c", _GUARD, str(self.root), str(script), self.isolation]
        if self.isolation == "namespace":
            cmd = [*_unshare(), *_launch_args(self.root, guard)]
        else:
            cmd = [sys.executable, *guard]
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.root), "MPLBACKEND": "Agg", "TMPDIR": str(meta / "tmp"),
               "MPLCONFIGDIR": str(meta / "mpl"), "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1",
               "OPENBLAS_NUM_THREADS": "1", "LANG": "C.UTF-8"}
        lim = self.limits

        def preexec() -> None:
            mem = lim.memory_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
            cpu = int(lim.timeout_s) + 1
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
            size = lim.max_file_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=self.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, preexec_fn=preexec, start_new_session=True)
        timed_out = False
        try:
            out, err = proc.communicate(timeout=lim.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        seconds = time.monotonic() - t0
        new = sorted(set(self.files()) - before)
        return RunResult(ok=proc.returncode == 0 and not timed_out, returncode=proc.returncode,
                         stdout=out.decode("utf-8", "replace"), stderr=err.decode("utf-8", "replace"),
                         timed_out=timed_out, seconds=seconds, new_files=new)
