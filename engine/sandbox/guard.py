"""What runs first inside the sandbox: ``GUARD``, the Python program that reads the snippet from
stdin and executes it, after installing (``audit_unsafe`` only) the audit hook that refuses reads,
writes, processes, sockets and native readers outside the episode folder. ``SYSTEM_FILES``: the
few system files a snippet may read (bubblewrap binds them read-only; the hook allows them)."""

from __future__ import annotations

# System files a snippet may read (bound read-only; allowed by the audit hook): time zone, the
# loader's cache, and the MIME table (openpyxl reads it at import: read_excel failed without it).
SYSTEM_FILES = ("/etc/localtime", "/etc/ld.so.cache", "/etc/mime.types")

# Runs inside the sandbox (``python -I -B -c GUARD ISOLATION ROOT``): reads the snippet from
# stdin, then (audit_unsafe only) installs the audit hook, then executes it.
GUARD = r'''
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
GUARD = GUARD.replace("_SYSTEM_FILES_", repr(SYSTEM_FILES))
