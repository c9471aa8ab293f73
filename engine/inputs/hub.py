"""Hugging Face hub ids where a path is expected, resolved through the local hub cache.

``model.path`` (and ``judge.hosted_model.path``) and a benchmark's data paths (newsagent
``data_dir``, livenews ``questions`` / ``pages``, analyst ``tasks_dir``) accept:

* ``hf://ORG/NAME[@REVISION][/SUBPATH]`` (a model repo), ``hf://datasets/ORG/NAME[@REVISION][/SUBPATH]``;
* for ``model.path`` also a bare ``ORG/NAME`` that is not a local path.

They resolve to the snapshot folder of the local cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub``,
``~/.cache/huggingface/hub``) when the config is composed, before anything runs. Nothing is ever
downloaded unless ``DATELINE_HUB_DOWNLOAD=1`` asks for it (and never with ``HF_HUB_OFFLINE=1``): a
repo that is not in the cache is a ConfigError naming the field and how to get it.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import ConfigError

log = logging.getLogger(__name__)

_HF = re.compile(r"^hf://(?:(?P<kind>datasets|models|spaces)/)?(?P<repo>[\w.-]+/[\w.-]+)(?:@(?P<rev>[\w./-]+?))?"
                 r"(?:/(?P<sub>.+))?$")
_BARE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class HubRef:
    repo_id: str
    repo_type: str          # model | dataset | space
    revision: str | None
    subpath: str


def parse(value: str, bare_model: bool = False) -> HubRef | None:
    """The hub reference ``value`` names, or None for a plain path."""
    m = _HF.match(value)
    if m:
        kind = {"datasets": "dataset", "spaces": "space"}.get(m.group("kind") or "", "model")
        return HubRef(m.group("repo"), kind, m.group("rev"), m.group("sub") or "")
    if bare_model and _BARE.match(value) and not Path(value).exists() and not value.startswith((".", "/")):
        return HubRef(value, "model", None, "")
    return None


def resolve(value: str, where: str, bare_model: bool = False) -> str:
    """``value`` as a local path: itself when it is not a hub id, else its snapshot in the cache."""
    ref = parse(value, bare_model)
    if ref is None:
        return value
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    download = os.environ.get("DATELINE_HUB_DOWNLOAD") == "1" and os.environ.get("HF_HUB_OFFLINE") != "1"
    try:
        folder = snapshot_download(ref.repo_id, repo_type=ref.repo_type, revision=ref.revision,
                                   local_files_only=not download)
    except (LocalEntryNotFoundError, FileNotFoundError, OSError, ValueError) as e:
        raise ConfigError(
            f"{where}: {value!r} is a Hugging Face {ref.repo_type} id that is not in the local hub cache "
            f"({os.environ.get('HF_HUB_CACHE') or '~/.cache/huggingface/hub'}): nothing is downloaded at run time. "
            f"Download it first (huggingface-cli download {'--repo-type ' + ref.repo_type + ' ' if ref.repo_type != 'model' else ''}"
            f"{ref.repo_id}), or set DATELINE_HUB_DOWNLOAD=1 to let dateline fetch it ({type(e).__name__})") from e
    if download:
        log.warning("%s: %s resolved from the hub (DATELINE_HUB_DOWNLOAD=1) to %s", where, value, folder)
    path = Path(folder) / ref.subpath if ref.subpath else Path(folder)
    if not path.exists():
        raise ConfigError(f"{where}: {ref.subpath!r} is not in {ref.repo_id}'s snapshot {folder}")
    return str(path)


def resolve_config(cfg: Any) -> None:
    """Replace every hub id of ``cfg`` (a run config) by its local snapshot path, in place."""
    from engine.benchmarks import get_benchmark

    for where, m in (("model", getattr(cfg, "model", None)),
                     ("judge.hosted_model", getattr(getattr(cfg, "judge", None), "hosted_model", None))):
        if m is not None and getattr(m, "kind", "") == "vllm" and m.path:
            m.path = resolve(m.path, f"{where}.path", bare_model=True)
    b = getattr(cfg, "benchmark", None)
    if b is None or not getattr(b, "name", ""):
        return
    try:
        fields = getattr(get_benchmark(b.name), "data_paths", ())
    except ConfigError:
        return
    for f in fields:
        v = getattr(b, f, None)
        if isinstance(v, str) and v:
            setattr(b, f, resolve(v, f"benchmark.{f}"))
