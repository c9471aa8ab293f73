"""Host operations on a folder that untrusted code can write, through descriptors only.

A model-written snippet owns its episode folder (``engine/sandbox/``); the
worker, often root, then walks it (the disk quota, the file list), copies what it holds to an
object store, and removes it for a retried attempt. Any of these done *by path* can be turned
against the host: a folder swapped for a link between the listing and the next call sends the
rest of the walk through the link (``os.walk`` + ``os.lchown`` once re-owned a host folder this
way), and a file swapped for a link between "is it a file?" and the read uploads the host file.
So every operation here:

* starts from a held folder descriptor and opens one component at a time relative to its parent
  descriptor, never following links (``O_NOFOLLOW``; a swapped-in link is ``ELOOP``/``ENOTDIR``:
  skipped, never followed), and checks that what it opened is what it listed (device and inode);
* holds one descriptor at a time (the folder it is in), never one per level, and walks without
  recursion: a chain 100,000 folders deep costs neither the recursion limit nor the descriptor
  table. Climbing back is ``openat(fd, "..")`` checked against the parent's device and inode (a
  folder moved meanwhile raises :class:`TreeChanged` instead of walking somewhere else);
* tolerates entries that vanish between the listing and the visit (the code that wrote them may
  still be running), and caps the entries it visits where the caller says so.

Names are what the kernel holds: ``str`` decoded with ``surrogateescape`` (a non-UTF-8 byte is a
lone surrogate). :func:`show` is the form for people, logs and tables.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_GONE = (errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.ESTALE)


class TreeChanged(OSError):
    """A folder moved while it was walked: the walk stops rather than go where it now leads."""


_SURROGATE = re.compile("[\ud800-\udfff]")


def has_surrogate(s: str) -> bool:
    """Whether ``s`` holds a lone surrogate: text no UTF-8 file (nor Arrow) can hold."""
    return _SURROGATE.search(s) is not None


def _escape_one(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c - 0xDC00:02x}" if 0xDC80 <= c <= 0xDCFF else f"\\u{c:04x}"


def escape_text(s: str) -> str:
    """``s`` with each lone surrogate written out: a byte that surrogateescape decoding kept
    (U+DC80..U+DCFF: a file name that is not UTF-8, as ``os.listdir`` gives it) as ``\\xNN``, so
    'chart\\udcff.png' reads ``chart\\xff.png`` like the name's bytes; any other as ``\\uNNNN``."""
    return _SURROGATE.sub(_escape_one, s)


# A name as text any writer can encode (non-UTF-8 bytes as ``\\xff`` escapes): for people, logs,
# tables and object keys
show = escape_text


def open_dir(name: str, dir_fd: int) -> int:
    """The folder ``name`` below ``dir_fd``, not through a link (``OSError`` ELOOP/ENOTDIR if it is one)."""
    return os.open(name, _DIR, dir_fd=dir_fd)


@dataclass
class Entry:
    rel: str                    # path below the top, "/"-separated, as the kernel holds it
    name: str
    st: os.stat_result          # lstat, taken when it was visited
    parent_fd: int              # valid only until the walk moves on
    depth: int                  # 1 for an entry of the top folder

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.st.st_mode)

    @property
    def is_file(self) -> bool:
        return stat.S_ISREG(self.st.st_mode)


@dataclass
class _Level:
    fd: int
    names: list[str]
    prefix: str
    dev_ino: tuple[int, int]
    name: str = ""              # this folder's name in its parent
    i: int = 0


def walk(top_fd: int, *, max_depth: int | None = None, skip: Callable[[str], bool] | None = None,
         post: Callable[[int, str], None] | None = None) -> Iterator[Entry]:
    """Every entry below ``top_fd`` (pre-order), links reported, never followed. Folders deeper
    than ``max_depth`` are reported but not entered. ``skip(name)`` leaves a folder's entry out
    (and does not enter it). ``post(parent_fd, name)`` runs after a folder's contents were
    walked (removal uses it). ``top_fd`` is not closed."""
    top = os.fstat(top_fd)
    stack = [_Level(os.dup(top_fd), _names(top_fd), "", (top.st_dev, top.st_ino))]
    try:
        while stack:
            lvl = stack[-1]
            if lvl.i >= len(lvl.names):
                stack.pop()
                if stack:
                    parent = stack[-1]
                    up = os.open("..", _DIR, dir_fd=lvl.fd)
                    os.close(lvl.fd)
                    st = os.fstat(up)
                    if (st.st_dev, st.st_ino) != parent.dev_ino:
                        os.close(up)
                        raise TreeChanged(errno.ESTALE, f"{parent.prefix or '.'} moved while it was walked")
                    parent.fd = up          # the same folder, reopened: one descriptor in all
                    if post is not None:
                        post(parent.fd, lvl.name)
                else:
                    os.close(lvl.fd)
                continue
            name = lvl.names[lvl.i]
            lvl.i += 1
            if skip is not None and skip(name):
                continue
            try:
                st = os.stat(name, dir_fd=lvl.fd, follow_symlinks=False)
            except OSError as e:
                if e.errno in _GONE:
                    continue
                raise
            entry = Entry(lvl.prefix + name, name, st, lvl.fd, len(stack))
            yield entry
            if not entry.is_dir or (max_depth is not None and len(stack) >= max_depth):
                continue
            try:
                sub = open_dir(name, lvl.fd)
            except OSError as e:
                if e.errno in _GONE:      # gone, or swapped for a link or a file since the lstat
                    continue
                raise
            sst = os.fstat(sub)
            if (sst.st_dev, sst.st_ino) != (st.st_dev, st.st_ino):
                os.close(sub)             # swapped for another folder: not what was listed
                continue
            try:
                names = _names(sub)
            except BaseException:
                os.close(sub)
                raise
            # one descriptor in all: this level's is reopened through ".." on the way back
            stack.append(_Level(sub, names, entry.rel + "/", (sst.st_dev, sst.st_ino), name))
            os.close(lvl.fd)
            lvl.fd = -1
    finally:
        for lvl in stack:
            if lvl.fd >= 0:
                os.close(lvl.fd)


def _names(fd: int) -> list[str]:
    with os.scandir(fd) as it:
        return sorted(e.name for e in it)


@dataclass
class Usage:
    """What a folder holds, as the disk sees it."""
    bytes: int = 0              # allocated blocks (st_blocks x 512) of files and folders, not st_size
    files: int = 0
    dirs: int = 0
    entries: int = 0            # everything, links and FIFOs included
    truncated: bool = False     # stopped at ``max_entries``
    inodes: set[tuple[int, int]] = field(default_factory=set, repr=False)


def usage(top_fd: int, max_entries: int | None = None) -> Usage:
    """Allocated bytes and entry counts below ``top_fd`` (a preallocated or sparse file counts
    what it holds on disk; every folder counts its own blocks; a file with several names once)."""
    u = Usage()
    st = os.fstat(top_fd)
    u.bytes += st.st_blocks * 512
    for e in walk(top_fd):
        u.entries += 1
        if max_entries is not None and u.entries > max_entries:
            u.truncated = True
            break
        if e.is_dir:
            u.dirs += 1
        elif e.is_file:
            u.files += 1
        key = (e.st.st_dev, e.st.st_ino)
        if key not in u.inodes:
            u.inodes.add(key)
            u.bytes += e.st.st_blocks * 512
    return u


def files(top_fd: int, *, hidden: bool = False, max_depth: int | None = None) -> list[str]:
    """Regular files below ``top_fd`` (relative paths, sorted); hidden ones and hidden folders
    left out unless ``hidden``."""
    skip = None if hidden else (lambda n: n.startswith("."))
    return sorted(e.rel for e in walk(top_fd, skip=skip, max_depth=max_depth) if e.is_file)


def open_file(e: Entry) -> int | None:
    """A read descriptor of the regular file ``e`` was, or None where it is no longer one (a
    link, FIFO or another file swapped in since it was listed)."""
    try:
        fd = os.open(e.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=e.parent_fd)
    except OSError as err:
        if err.errno in _GONE or err.errno == errno.ENXIO:
            return None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (e.st.st_dev, e.st.st_ino):
        os.close(fd)
        return None
    return fd


def chown_tree(top_fd: int, uid: int, gid: int) -> None:
    """Give the folder and everything below it to ``uid``: each entry through its parent's
    descriptor, links changed themselves (``AT_SYMLINK_NOFOLLOW``), never followed."""
    os.fchown(top_fd, uid, gid)
    for e in walk(top_fd):
        try:
            os.chown(e.name, uid, gid, dir_fd=e.parent_fd, follow_symlinks=False)
        except FileNotFoundError:
            pass


def clear(top_fd: int) -> None:
    """Remove everything below ``top_fd`` (any depth), never following a link."""
    def rmdir(parent_fd: int, name: str) -> None:
        try:
            os.rmdir(name, dir_fd=parent_fd)
        except FileNotFoundError:
            pass
    for e in walk(top_fd, post=rmdir):
        if not e.is_dir:
            try:
                os.unlink(e.name, dir_fd=e.parent_fd)
            except FileNotFoundError:
                pass


def remove(path: str | os.PathLike[str]) -> None:
    """Remove ``path`` (a folder tree, a file or a link) without following links below it; a
    link at ``path`` itself is removed, not followed. Nothing there is fine."""
    parent, name = os.path.split(os.path.abspath(path))
    try:
        pfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        try:
            fd = open_dir(name, pfd)
        except OSError as e:
            if e.errno == errno.ENOENT:
                return
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                os.unlink(name, dir_fd=pfd)
                return
            raise
        try:
            clear(fd)
        finally:
            os.close(fd)
        os.rmdir(name, dir_fd=pfd)
    finally:
        os.close(pfd)
