"""The episode folder, reached only through descriptors: ``EpisodeFolder``.

The host never acts by path on what a snippet can write: every file tool, walk, removal and copy
opens paths relative to the held folder descriptor, one component at a time, without following
links (``O_NOFOLLOW``; ``engine/inputs/fdtree.py``), and only regular files are read (a FIFO or
device planted by a snippet is refused, not opened). Where the worker is root, the folder belongs
to the snippets' own uid (``uids.lease_uid``): given to it once, when the folder is made
(:meth:`EpisodeFolder.adopt`), and what the host writes there later is created already owned by
it. ``usage`` is what the disk quota counts; ``remove_added`` takes back what a stopped run added.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from engine.inputs import fdtree
from engine.sandbox.limits import Limits, PathRefused
from engine.sandbox.uids import kill_uid, lease_uid


class EpisodeFolder:
    """An episode folder: its descriptor, its limits (the entry cap, for walks), and, where the
    worker is root and ``own_uid`` is asked, the snippets' own uid (``owner``), leased for the
    folder's life. A root worker gives the folder to that uid once, when it is made (:meth:`adopt`,
    before any snippet ran and with no process of that uid alive): no walk ever re-owns the folder
    while something could be changing it."""

    def __init__(self, root: str | Path, limits: Limits, *, own_uid: bool) -> None:
        self.root = Path(root).absolute()
        self.limits = limits
        self.dirfd = self._lease = -1
        # the snippets' own uid where the worker is root (bwrap), leased for this folder's life;
        # None: they run as the worker
        self.owner: int | None = None
        if own_uid:
            self.owner, self._lease = lease_uid(self.root)
            kill_uid(self.owner)               # a process left by an earlier sandbox of this uid
        self.root.mkdir(parents=True, exist_ok=True)
        if self.root.is_symlink() or not self.root.is_dir():
            raise PathRefused(f"{self.root} is not a folder")
        self.root = self.root.resolve()
        self.dirfd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        self._dev = os.fstat(self.dirfd).st_dev
        self.adopt()

    def adopt(self) -> None:
        """Give the folder and what the host put in it to the snippets' uid: when the sandbox is
        made, and after the host filled a fresh folder (no snippet has run since, and no process of
        that uid is alive: nothing can change the tree while it is walked)."""
        if self.owner is not None:
            fdtree.chown_tree(self.dirfd, self.owner, self.owner)

    def close(self) -> None:
        if self.dirfd >= 0:
            os.close(self.dirfd)
            self.dirfd = -1
        if self._lease >= 0:
            if self.owner is not None:
                kill_uid(self.owner)
            os.close(self._lease)
            self._lease = -1

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # -- the folder, never following links ------------------------------------------------------
    @staticmethod
    def _parts(rel: str) -> list[str]:
        p = PurePosixPath(rel)
        if p.is_absolute():
            raise PathRefused(f"{rel!r} is outside the working directory (an absolute path)")
        parts = [x for x in p.parts if x != "."]
        if any(x == ".." for x in parts):
            raise PathRefused(f"{rel!r} is outside the working directory ('..')")
        return parts

    def _dir_fd(self, parts: list[str], create: bool = False) -> int:
        """A descriptor of the folder ``parts`` below the root, walked without following links
        (a folder it creates belongs to the snippets' uid)."""
        fd = os.dup(self.dirfd)
        try:
            for name in parts:
                made = False
                if create:
                    try:
                        os.mkdir(name, 0o755, dir_fd=fd)
                        made = True
                    except FileExistsError:
                        pass
                try:
                    nxt = fdtree.open_dir(name, fd)
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise PathRefused(f"{fdtree.show(name)!r} is a link or not a folder: not followed") from e
                    raise
                os.close(fd)
                fd = nxt
                if made and self.owner is not None:
                    os.fchown(fd, self.owner, self.owner)
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _open_file(self, rel: str, flags: int, mode: int = 0o644) -> int:
        parts = self._parts(rel)
        if not parts:
            raise PathRefused(f"{rel!r} is the working directory itself, not a file")
        d = self._dir_fd(parts[:-1], create=bool(flags & os.O_CREAT))
        try:
            try:
                fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=d)
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise PathRefused(f"{rel!r} is a link: not followed") from e
                raise
        finally:
            os.close(d)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise PathRefused(f"{rel!r} is not a regular file")
        if flags & os.O_CREAT and self.owner is not None and st.st_uid != self.owner:
            os.fchown(fd, self.owner, self.owner)
        return fd

    def read_bytes(self, rel: str, max_bytes: int = 1 << 26) -> bytes:
        fd = self._open_file(rel, os.O_RDONLY)
        with os.fdopen(fd, "rb") as f:
            return f.read(max_bytes)

    def read_text(self, rel: str, max_bytes: int = 1 << 26) -> str:
        return self.read_bytes(rel, max_bytes).decode("utf-8", "replace")

    def read_lines(self, rel: str, start: int, end: int, max_line: int = 2000,
                   max_bytes: int = 1 << 26) -> tuple[list[str], int]:
        """Lines ``start``..``end`` (1-based) of a file, each cut at ``max_line`` characters, and
        how many lines it has, read in chunks: the worker holds the lines asked for, never the
        file (returning 3 lines of a 64 MB file costs a 64 KB buffer, not 64 MB and its split)."""
        fd = self._open_file(rel, os.O_RDONLY)
        out: list[str] = []
        n = 0                    # lines finished
        cur = bytearray()        # the line being read, kept only when it is one asked for
        open_line = False        # bytes seen since the last newline
        read = 0
        keep = max_line * 4      # bytes: a UTF-8 character is at most 4
        with os.fdopen(fd, "rb") as f:
            while read < max_bytes and (chunk := f.read(min(1 << 16, max_bytes - read))):
                read += len(chunk)
                k = chunk.count(b"\n")
                if n + k + 1 < start or n + 1 > end:   # no line asked for ends or goes on here: count
                    n += k
                    open_line = not chunk.endswith(b"\n") if k else (open_line or bool(chunk))
                    continue
                pos = 0
                while pos < len(chunk):
                    nl = chunk.find(b"\n", pos)
                    piece = chunk[pos:] if nl < 0 else chunk[pos:nl]
                    if start <= n + 1 <= end and len(cur) < keep:
                        cur += piece[: keep - len(cur)]
                    if nl < 0:
                        open_line = True
                        break
                    n += 1
                    if start <= n <= end:
                        out.append(cur.decode("utf-8", "replace").rstrip("\r")[:max_line])
                    cur, open_line = bytearray(), False
                    pos = nl + 1
        if open_line:
            n += 1
            if start <= n <= end:
                out.append(cur.decode("utf-8", "replace")[:max_line])
        return out, n

    def write_text(self, rel: str, text: str) -> None:
        fd = self._open_file(rel, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)

    def mkdir(self, rel: str) -> None:
        os.close(self._dir_fd(self._parts(rel), create=True))

    def exists(self, rel: str) -> bool:
        try:
            os.close(self._open_file(rel, os.O_RDONLY))
            return True
        except (OSError, PathRefused):
            return False

    def is_dir(self, rel: str) -> bool:
        try:
            os.close(self._dir_fd(self._parts(rel)))
            return True
        except (OSError, PathRefused):
            return False

    def files(self, under: str = ".") -> list[str]:
        """Regular files of the folder (or below ``under``), not hidden; links are not followed.
        Names as the kernel holds them (:func:`fdtree.show` to show one)."""
        parts = self._parts(under)
        fd = self._dir_fd(parts)
        base = "/".join(parts) + "/" if parts else ""
        try:
            return [base + rel for rel in fdtree.files(fd)]
        finally:
            os.close(fd)

    def entries(self) -> set[str]:
        """Every entry of the folder (files, folders, links; hidden ones too), up to the entry cap."""
        out = set()
        for e in fdtree.walk(self.dirfd):
            out.add(e.rel)
            if len(out) > self.limits.max_entries:
                break
        return out

    def usage(self, pids: Sequence[int] = ()) -> fdtree.Usage:
        """What the folder holds on disk (allocated blocks, folders included, up to the entry
        cap), plus files of the folder's file system that ``pids`` hold open after they were
        deleted (their blocks stay allocated until closed)."""
        u = fdtree.usage(self.dirfd, self.limits.max_entries)
        for pid in pids:
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for n in fds:
                try:
                    st = os.stat(f"/proc/{pid}/fd/{n}")
                except OSError:
                    continue
                key = (st.st_dev, st.st_ino)
                if stat.S_ISREG(st.st_mode) and st.st_nlink == 0 and st.st_dev == self._dev and key not in u.inodes:
                    u.inodes.add(key)
                    u.bytes += st.st_blocks * 512
        return u

    def _remove(self, rel: str) -> None:
        """Remove an entry (a folder with what it holds), through descriptors."""
        parts = self._parts(rel)
        d = self._dir_fd(parts[:-1])
        try:
            try:
                sub = fdtree.open_dir(parts[-1], d)
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                os.unlink(parts[-1], dir_fd=d)
                return
            try:
                fdtree.clear(sub)
            finally:
                os.close(sub)
            os.rmdir(parts[-1], dir_fd=d)
        finally:
            os.close(d)


    def remove_added(self, before: set[str]) -> None:
        """Remove every entry the run added: the top-most of each added subtree, found by a
        walk without the entry cap (all of it goes, however much the run made)."""
        tops: list[str] = []
        for e in fdtree.walk(self.dirfd):
            if e.rel not in before and not any(e.rel.startswith(t + "/") for t in tops[-1:]):
                tops.append(e.rel)
        for rel in tops:
            try:
                self._remove(rel)
            except (OSError, PathRefused):
                pass
