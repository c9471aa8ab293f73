"""Where a store lives: a local folder or a pyarrow filesystem URI (``s3://bucket/prefix``,
``gs://...``), opened, recognised as a run dir, uploaded to, and its local scratch folder."""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import pyarrow.fs as pafs

log = logging.getLogger("dateline.storage")


# -- where a store lives ---------------------------------------------------------------------
def is_uri(root: str | Path) -> bool:
    """True for a filesystem URI (``s3://bucket/prefix``, ``gs://…``, ``file:///…``)."""
    return isinstance(root, str) and "://" in root

def open_root(root: str | Path, filesystem: pafs.FileSystem | None = None) -> tuple[pafs.FileSystem, str]:
    """``(filesystem, path inside it)`` for a local path or any URI pyarrow understands. S3
    options go in the query string (``s3://b/p?endpoint_override=http://127.0.0.1:9000``) or
    in the usual AWS environment variables (``AWS_ENDPOINT_URL`` is honoured)."""
    if filesystem is not None:
        return filesystem, str(root).rstrip("/")
    if is_uri(root):
        fs, path = pafs.FileSystem.from_uri(str(root))
        return fs, path.rstrip("/")
    return pafs.LocalFileSystem(), os.path.abspath(root)

def is_run_dir(root: str | Path, table: str = "episodes", filesystem: pafs.FileSystem | None = None) -> bool:
    """Whether ``root`` (path or URI) holds a ``table`` folder (``episodes``: a run dir,
    ``comparisons``: a pairwise dir); creates nothing."""
    fs, base = open_root(root, filesystem)
    return fs.get_file_info(f"{base}/{table}").type == pafs.FileType.Directory

def upload_tree(local: Path, uri: str) -> int:
    """Copy the regular files under ``local`` to ``uri`` (a remote folder, its options in the
    query: ``s3://b/run/artifacts/e1?endpoint_override=...``), keeping relative paths; returns how
    many. A run dir on an object store keeps what episodes leave on a worker's disk this way (the
    node may be gone when someone looks). The folder may have been written by model code: it is
    walked and read through descriptors (``engine/inputs/fdtree.py``): a link, FIFO or a file swapped for
    a link after it was listed is skipped, never followed; names that are not UTF-8 are uploaded
    under their escaped form (``chart\\xff.png``), and any depth of folders costs no recursion."""
    from engine.inputs import fdtree

    try:
        top = os.open(local, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return 0
    fs, base = open_root(uri)
    n = skipped = 0
    try:
        for e in fdtree.walk(top):
            if not e.is_file:
                skipped += not e.is_dir
                continue
            fd = fdtree.open_file(e)
            if fd is None:
                skipped += 1
                continue
            key = f"{base}/{fdtree.show(e.rel)}"
            if len(key.partition("/")[2].encode()) > 1024:      # an S3 key (after the bucket) ends at 1,024 bytes
                os.close(fd)
                skipped += 1
                continue
            if isinstance(fs, pafs.LocalFileSystem):        # an object store has no folders to make
                fs.create_dir(key.rpartition("/")[0], recursive=True)
            with os.fdopen(fd, "rb") as f, fs.open_output_stream(key) as out:
                while chunk := f.read(1 << 20):
                    out.write(chunk)
            n += 1
    finally:
        os.close(top)
    if skipped:
        log.warning("artifacts %s: %d entries not uploaded: not regular files (links, FIFOs, or swapped since "
                    "they were listed), or paths too long for an object key", local, skipped)
    return n

def sub_uri(uri: str, *parts: str) -> str:
    """``uri`` with ``parts`` appended to its path, its query (endpoint options) kept."""
    head, q, query = uri.partition("?")
    return "/".join([head.rstrip("/"), *parts]) + q + query

def local_root(root: str | Path, local_dir: str | Path | None = None) -> Path:
    """The local folder for what a run keeps beside its tables (``logs/``, ``artifacts/``): the
    run dir itself when it is local; for a remote one (``s3://bucket/prefix``) ``local_dir``, else
    ``$DATELINE_LOCAL_DIR/<scheme>/<bucket>/<prefix>`` (default: under the temp dir). Creates nothing."""
    if not is_uri(root):
        return Path(root)
    fs, base = open_root(root)
    if isinstance(fs, pafs.LocalFileSystem):
        return Path(base)
    return scratch_dir(fs, base, local_dir)

def scratch_dir(fs: pafs.FileSystem, base: str, local_dir: str | Path | None) -> Path:
    if local_dir is not None:
        return Path(local_dir)
    scratch = os.environ.get("DATELINE_LOCAL_DIR") or os.path.join(tempfile.gettempdir(), "dateline")
    return Path(scratch) / fs.type_name / base.lstrip("/")
