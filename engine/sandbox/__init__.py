"""The snippet sandbox: a working directory per episode, and a Python runner for model-written
code that sees nothing else. It knows no benchmark; the agentic analyst is its user.

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
  episode folder: ``uids.lease_uid``), which owns the folder: given to it once, when the folder is
  made (:meth:`Sandbox.adopt`), never re-owned by a walk;
* limits that hold against hostile code: the tree in a cgroup of its own where one can be made
  (``cgroup/``: one memory limit and process cap for all of it, and a kill nothing escapes);
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

The parts, each importing only those above it: ``limits`` (Limits, RunResult, the errors),
``guard`` (the program that runs first inside), ``uids`` (a root worker's snippet uids and views),
``bwrap`` (the binary and the command line), ``seccomp`` (the filter), ``cgroup/`` (a cgroup per
snippet), ``folder`` (``EpisodeFolder``: the descriptor-only file API and the quota's count),
``runner`` (one run, supervised and torn down), ``isolation`` (the probe and the fail-closed
gate), ``box`` (``Sandbox``: a folder whose snippets run isolated).
"""

from engine.sandbox.box import Sandbox
from engine.sandbox.bwrap import HOW_TO_FIX, bwrap_binary
from engine.sandbox.cgroup import cgroup_support
from engine.sandbox.folder import EpisodeFolder
from engine.sandbox.isolation import ISOLATIONS, NAMESPACES, bwrap_status, isolation_problems, require_isolation
from engine.sandbox.limits import Limits, PathRefused, RunResult, SandboxUnavailable, clip_list
from engine.sandbox.uids import UIDS, VIEWS, kill_uid, lease_uid

__all__ = [
    "HOW_TO_FIX", "ISOLATIONS", "NAMESPACES", "UIDS", "VIEWS", "EpisodeFolder", "Limits", "PathRefused", "RunResult",
    "Sandbox", "SandboxUnavailable", "bwrap_binary", "bwrap_status", "cgroup_support", "clip_list",
    "isolation_problems", "kill_uid", "lease_uid", "require_isolation",
]
