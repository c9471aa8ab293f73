"""The plain values of the sandbox: what a snippet may use (``Limits``), what one run returns
(``RunResult``, and its ``summary``, what the model is shown), ``clip_list``, and the two errors
(``SandboxUnavailable``, ``PathRefused``). Nothing here touches the system."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.inputs import fdtree


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
    max_entries: int = 10_000      # files, folders and links in the folder (each costs the quota walk)


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
    memory_exceeded: bool = False   # the tree reached its cgroup's memory limit (the kernel killed in it)
    peak_memory_mb: float | None = None     # the tree's peak, where a cgroup measured it
    supervision_error: str = ""     # the supervisor failed (the tree was killed all the same)

    def summary(self, limit: int) -> str:
        """What the model is shown: at most about ``limit`` characters, names escaped."""
        head = ("disk quota exceeded" if self.disk_exceeded else "memory limit reached" if self.memory_exceeded
                else "stopped by the sandbox" if self.supervision_error else "ok" if self.ok
                else "timed out" if self.timed_out else f"exit code {self.returncode}")
        big = [f"{k} {n:,} bytes, shown in part" for k, n in self.output_bytes.items() if n > limit]
        out = f"[{head} in {self.seconds:.1f} s{''.join('; ' + b for b in big)}]"
        if self.stdout:
            out += "\nstdout:\n" + _clip(self.stdout, limit)
        if self.stderr:
            out += "\nstderr:\n" + _clip(self.stderr, limit // 2)
        if self.new_files:
            out += "\nnew files: " + clip_list([fdtree.show(f) for f in self.new_files], limit // 4)
        return out


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit // 2] + "\n[... cut ...]\n" + text[-limit // 2:]


def clip_list(names: list[str], limit: int, sep: str = ", ") -> str:
    """As many of ``names`` as fit in ``limit`` characters, then how many were left out."""
    out: list[str] = []
    used = 0
    for n in names:
        if used + len(n) + len(sep) > limit and out:
            break
        out.append(n[:limit])
        used += len(out[-1]) + len(sep)
    rest = len(names) - len(out)
    return sep.join(out) + (f"{sep}[... {rest:,} more]" if rest else "")


class SandboxUnavailable(RuntimeError):
    """No OS isolation can start here: an agentic run refuses to (its message says how to fix it)."""


class PathRefused(ValueError):
    """A file tool was asked for a path outside the episode folder, through a link, or for
    something that is not a regular file."""
