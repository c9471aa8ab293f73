"""A cgroup per sandbox snippet: the kernel's limits on the snippet's whole process tree
(``snippet.py`` says what it needs and how it falls back)."""

from engine.sandbox.cgroup.snippet import (
    PARENT,
    CgroupUnavailable,
    SnippetCgroup,
    TreeUsage,
    cgroup_support,
)

__all__ = ["PARENT", "CgroupUnavailable", "SnippetCgroup", "TreeUsage", "cgroup_support"]
