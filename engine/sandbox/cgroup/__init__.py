"""A cgroup per sandbox snippet: the kernel's limits on the snippet's whole process tree.

RLIMIT_AS and RLIMIT_NPROC (``engine/sandbox/runner.py``) are per process (and per uid): a
snippet that forks eight children of 1 GB each gets 8 GB. A cgroup is what the kernel enforces on a
*tree*:

* **memory**: one hard limit on everything the tree's processes charge (anonymous memory, page
  cache, tmpfs pages such as bwrap's private ``/tmp``, kernel memory); over it the kernel reclaims,
  then OOM-kills inside the cgroup only. Swap cannot extend it (v1 ``memory.memsw.limit_in_bytes``
  set to the same value, or ``memory.swappiness=0`` where swap accounting is off; v2
  ``memory.swap.max=0``);
* **pids**: at most ``max_pids`` processes and threads at once; one more ``fork``/``clone`` fails
  with EAGAIN;
* **kill**: every process in it, wherever it went (``setsid``, double fork, reparented to init):
  v2 writes ``cgroup.kill`` (5.14+), which the kernel applies atomically against forks; elsewhere
  the tree is frozen (v1 ``freezer.state``, v2 ``cgroup.freeze``), SIGKILLed pid by pid (through
  pidfds: a recycled pid is never signalled) and thawed, until ``cgroup.procs`` is empty.

**cgroup v1** (this development machine; one hierarchy per controller, ``/sys/fs/cgroup/<controller>``):
a ``dateline-sandbox/dateline-sandbox-<name>-<pid>-<n>`` directory in each of the memory, pids
and (if mounted) freezer hierarchies, made under the worker's *own* cgroup of that hierarchy
(``/proc/self/cgroup``), so the container's limits still cover the snippet; where that is not
writable, under the hierarchy's root. v1 allows processes at every level, so nothing else is
needed. v1 has no group OOM: the kernel kills the one process it picks (the largest: for a snippet,
the allocating Python), the rest live on until the run ends and :meth:`SnippetCgroup.close` kills
them.

**cgroup v2** (most clusters; one hierarchy, ``cgroup.controllers``): a controller works in a
cgroup only when its parent lists it in ``cgroup.subtree_control``, and a non-root cgroup that
holds processes cannot enable controllers for its children ("no internal processes"). So the
worker's own cgroup, which holds the worker, is not enough. The snippet cgroups go under
``<base>/dateline-sandbox`` (which never holds a process; this module enables ``+memory +pids`` in
it), where ``<base>`` is the nearest cgroup from the worker's own up to the mount's root whose
``cgroup.subtree_control`` already enables memory and pids. That takes one of:

* root on the host, or a privileged container: the v2 root (or a systemd slice) usually enables them;
* a **delegated subtree** (systemd ``Delegate=yes``, or ``systemd-run -p Delegate=yes``; a
  container's entrypoint doing the same), with the worker moved into a leaf: e.g. as the
  container's first step, ``mkdir /sys/fs/cgroup/init``, move every pid of
  ``/sys/fs/cgroup/cgroup.procs`` into ``init/cgroup.procs``, then
  ``echo '+memory +pids' > /sys/fs/cgroup/cgroup.subtree_control``; ``<base>`` is then the
  container's cgroup, and its limits cover the worker and the snippets together. A non-root
  worker needs the delegated directory (its ``cgroup.procs``, ``cgroup.subtree_control``) owned by
  its uid, since moving a process needs write access to the common ancestor's ``cgroup.procs``.

``memory.oom_group=1`` is set on v2 (``oom_group=False`` to leave it): an OOM kills the snippet's
whole tree at once, so it never runs on half dead (a multiprocessing pool waiting for a worker the
kernel killed, until the timeout).

**Requirements and fallback**: creating cgroups needs root (v1, or v2 without delegation) or a
delegated v2 subtree. :meth:`SnippetCgroup.create` raises :class:`CgroupUnavailable` saying why
(not root, read-only ``/sys/fs/cgroup``, no usable v2 base, a controller missing) and leaves
nothing behind; :func:`cgroup_support` says once, honestly (it creates a probe cgroup and moves a
probe process into it), whether this machine can. Without one the sandbox keeps what it has: the
per-process rlimits, RLIMIT_NPROC, and killing bwrap's process group / PID namespace.

Use: ``cg = SnippetCgroup.create(...)`` in the worker; :meth:`SnippetCgroup.attach_self` as the
*first* step of the child's ``preexec_fn`` (still root: the cgroup files are root's; after it the
child may drop to the snippet's uid, and bwrap's ``--unshare-cgroup`` roots the snippet's cgroup
namespace there; the snippet has no cgroupfs mounted and could not write it); after the run
:meth:`SnippetCgroup.usage`, then :meth:`SnippetCgroup.close` (it keeps the final usage).
A crashed worker's leftover cgroups are removed by the next worker when they are empty, their
worker's pid is gone and they are over a minute old (best effort; one that still holds processes
is left alone).

The parts: ``fs.py`` (cgroupfs I/O), ``hierarchy.py`` (where the cgroups go), ``snippet.py``
(``SnippetCgroup``); :func:`cgroup_support` here.
"""

from __future__ import annotations

import functools
import subprocess
import sys

from engine.sandbox.cgroup.hierarchy import PARENT, STALE_AGE_S, V1_OPTIONAL, V1_REQUIRED, CgroupUnavailable
from engine.sandbox.cgroup.snippet import SnippetCgroup, TreeUsage

__all__ = ["PARENT", "STALE_AGE_S", "V1_OPTIONAL", "V1_REQUIRED", "CgroupUnavailable", "SnippetCgroup", "TreeUsage",
           "cgroup_support"]


@functools.cache
def cgroup_support() -> tuple[str | None, str]:
    """("v1" | "v2", "") where snippet cgroups work here, else (None, why). Honest: it makes a probe
    cgroup, runs a process in it and removes it. Cached for the process."""
    try:
        cg = SnippetCgroup.create("probe", 64 << 20, 16)
    except CgroupUnavailable as e:
        return None, str(e)
    try:
        proc = subprocess.run([sys.executable, "-S", "-c", ""], preexec_fn=cg.attach_self, timeout=60,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if proc.returncode != 0:
            return None, f"a probe process in {cg.path} exited with {proc.returncode}"
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"a probe process could not join {cg.path}: {e}"
    finally:
        cg.close()
    return cg.version, ""
