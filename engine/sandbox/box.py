"""``Sandbox``: an episode folder (``folder.py``) and the snippets run in it (``runner.py``).

Making one checks first that its isolation can run here (``isolation.require_isolation``: an
agentic run fails closed where bubblewrap does not isolate). Where the worker is root and the
isolation is bwrap, the folder belongs to a uid of the snippets' own. Its file API is the
folder's; ``run_python`` runs one snippet and keeps the run count and the cgroup version.
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.inputs import fdtree
from engine.sandbox import runner
from engine.sandbox.folder import EpisodeFolder
from engine.sandbox.isolation import ISOLATIONS, require_isolation
from engine.sandbox.limits import Limits, RunResult


class Sandbox(EpisodeFolder):
    """An episode folder and the snippets run in it. ``isolation``: ``bwrap`` (default) or
    ``audit_unsafe`` (an explicit opt-in: not a boundary).

    The host never acts by path on what a snippet can write: every file tool, walk, removal and
    copy goes through descriptors (``engine/inputs/fdtree.py``). A root worker gives the folder to the
    snippets' uid once, when it is made (:meth:`adopt`, before any snippet ran and with no
    process of that uid alive), and creates what it writes there later already owned by it: no
    walk ever re-owns the folder while something could be changing it."""

    def __init__(self, root: str | Path, limits: Limits = Limits(), isolation: str = "bwrap") -> None:
        if isolation not in ISOLATIONS:
            raise ValueError(f"sandbox isolation must be one of {ISOLATIONS}, got {isolation!r}")
        require_isolation(isolation)
        self.isolation = isolation
        self.runs = 0
        self.cgroup_version: str | None = None     # of the last run: "v1", "v2" or None (no cgroup)
        super().__init__(root, limits, own_uid=os.geteuid() == 0 and isolation == "bwrap")

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

    def run_python(self, code: str) -> RunResult:
        """Run one snippet (blocking: call it from a thread in async code). Whatever happens
        while it runs, the whole tree is dead and reaped when this returns or raises: the tree
        is killed in a ``finally`` through its cgroup (where one can be made: the kernel also
        holds its memory and process count), its process group, and (a root worker) its uid."""
        self.runs += 1
        result, self.cgroup_version = runner.run_python(self, code, self.isolation)
        return result
