"""A working directory per episode, and a bounded Python runner inside it.

The agentic analyst runs model-written pandas/matplotlib snippets. Each snippet runs in a fresh
``python -I`` subprocess with its working directory set to the episode's folder, and:

* **time**: a wall-clock timeout (the whole process group is killed) and RLIMIT_CPU;
* **memory**: RLIMIT_AS; **file size**: RLIMIT_FSIZE;
* **network**: when unprivileged user namespaces work (detected once), the process runs under
  ``unshare -rn``: a network namespace with no interfaces. An audit hook also refuses
  ``socket.connect/bind`` and name lookups, so the rule holds where namespaces are unavailable;
* **writes**: the audit hook refuses opening files for writing, and creating, renaming or
  removing paths, outside the episode folder (``/dev/null`` excepted), starting processes, and
  calling native code through ctypes (loading libraries from outside Python's installation,
  looking up or calling foreign functions; numpy's import-time ``dlopen(None)`` is allowed).

Audit hooks are a guard against a model's mistakes and casual escapes, not a security boundary
against hostile native code (ctypes is refused for that reason, but C extensions can still do
anything): run untrusted models in the container images of ``docker/``, which add the OS-level
boundary. File tools the agent calls (list, grep, read, write) never run its code; they resolve
paths and refuse anything outside the folder.
"""

from __future__ import annotations

import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

_GUARD = r'''
import os, sys
_ROOT = os.path.realpath(sys.argv[1])
_LIBS = tuple(os.path.realpath(p) + os.sep for p in {sys.prefix, sys.base_prefix, sys.exec_prefix})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

def _inside(p):
    if isinstance(p, int):
        return True
    p = os.path.realpath(os.fsdecode(p))
    return p == _ROOT or p.startswith(_ROOT + os.sep) or p == "/dev/null"

def _hook(event, args):
    if event == "open":
        path, mode, flags = args
        writing = (mode is not None and any(c in str(mode) for c in "wax+")) or (
            mode is None and isinstance(flags, int) and flags & _WRITE_FLAGS)
        if writing and path is not None and not _inside(path):
            raise PermissionError(f"sandbox: writing outside the episode folder is not allowed: {path}")
    elif event in ("os.remove", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.link", "os.symlink",
                   "os.truncate", "os.utime", "shutil.rmtree", "shutil.move", "shutil.copyfile"):
        for a in args:
            if isinstance(a, (str, bytes, os.PathLike)) and not _inside(a):
                raise PermissionError(f"sandbox: {event} outside the episode folder is not allowed: {a}")
    elif event in ("os.rename", "os.replace"):
        for a in args[:2]:
            if not _inside(a):
                raise PermissionError(f"sandbox: {event} outside the episode folder is not allowed: {a}")
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
        if name is not None and not any(os.path.realpath(str(name)).startswith(p) for p in _LIBS):
            raise PermissionError(f"sandbox: loading {name} with ctypes is not allowed")
    elif event in ("ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.call_function", "ctypes.cdata",
                   "ctypes.addressof", "ctypes.string_at", "ctypes.wstring_at", "ctypes.set_errno"):
        raise PermissionError("sandbox: calling native code through ctypes is not allowed")

sys.addaudithook(_hook)
_code = open(sys.argv[2], encoding="utf-8").read()
sys.argv = [sys.argv[2]]
exec(compile(_code, "snippet.py", "exec"), {"__name__": "__main__"})
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


@functools.lru_cache(maxsize=1)
def network_namespace_available() -> bool:
    """Whether ``unshare -rn`` works here (unprivileged user + network namespaces)."""
    exe = shutil.which("unshare")
    if not exe:
        return False
    try:
        return subprocess.run([exe, "-rn", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


class PathRefused(ValueError):
    """A file tool was asked for a path outside the episode folder."""


class Sandbox:
    def __init__(self, root: str | Path, limits: Limits = Limits()) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.limits = limits
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
        self.runs += 1
        meta = self.root / ".sandbox"
        meta.mkdir(exist_ok=True)
        script = meta / f"snippet-{self.runs}.py"
        script.write_text(code, encoding="utf-8")
        guard = meta / "guard.py"
        guard.write_text(_GUARD, encoding="utf-8")
        before = set(self.files())
        cmd = [sys.executable, "-I", "-B", str(guard), str(self.root), str(script)]
        if network_namespace_available():
            cmd = [shutil.which("unshare") or "unshare", "-rn", *cmd]
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.root), "MPLBACKEND": "Agg",
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
