"""What a model's weights are, as far as identity goes: a content fingerprint of a model folder.

An episode's id hashes the weights it was generated with (``ray_jobs.run.plan``), and whether a
judge is the model under test is decided by the weights, not by the name (``engine.scoring.judges``).
A path alone is not enough (new weights copied over old ones keep the path), and hashing every
byte of a 70B checkpoint at every run start is too slow, so the fingerprint hashes:

* the small files that change what the model does with a prompt: ``config.json``,
  ``generation_config.json``, the tokenizer and its chat template, the safetensors index, and
  ``dateline-source.json`` (the GGUF checksum of the converted default model);
* per weight file (``*.safetensors``, ``*.bin``, ``*.gguf``, ``*.pt``, ``*.pth``): its name and
  size, its first 64 KiB (a safetensors header: every tensor's dtype, shape and offset) and
  ``SAMPLES`` blocks of 64 KiB spread evenly over it. A fine-tune of the same architecture keeps
  the header and the size but changes nearly every block, so it gets another fingerprint.

About 1 MiB read per weight file; cached per (path, sizes, mtimes) in the process.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.config import redact_url

if TYPE_CHECKING:
    from engine.config import ModelConfig

log = logging.getLogger("dateline.weights")

SMALL_FILES = ("config.json", "generation_config.json", "tokenizer_config.json", "tokenizer.json",
               "chat_template.jinja", "chat_template.json", "model.safetensors.index.json",
               "pytorch_model.bin.index.json", "dateline-source.json")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")
BLOCK = 1 << 16
SAMPLES = 16


def _file_digest(h: hashlib._Hash, path: Path) -> None:
    size = path.stat().st_size
    h.update(f"{path.name}\0{size}\0".encode())
    with path.open("rb") as f:
        h.update(f.read(BLOCK))
        if size > BLOCK:
            for i in range(1, SAMPLES + 1):
                f.seek(max(0, (size - BLOCK) * i // SAMPLES))
                h.update(f.read(BLOCK))


@functools.lru_cache(maxsize=32)
def _fingerprint(path: str, _stamp: tuple[tuple[str, int, int], ...]) -> str:
    p = Path(path)
    h = hashlib.sha256()
    files = [p] if p.is_file() else sorted(x for x in p.iterdir() if x.is_file())
    for f in files:
        if f.name in SMALL_FILES:
            h.update(f"{f.name}\0".encode())
            h.update(f.read_bytes())
        elif f.suffix in WEIGHT_SUFFIXES:
            _file_digest(h, f)
    return h.hexdigest()[:16]


def fingerprint(path: str | os.PathLike[str]) -> str:
    """The content fingerprint of a local model folder (or single weights file); "" when the path
    is not on this machine (a model id, a folder only the GPU nodes mount): the path alone then
    identifies the weights, and the run's log says so."""
    p = Path(path)
    try:
        entries = [p] if p.is_file() else sorted(x for x in p.iterdir() if x.is_file())
        stamp = tuple((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in entries)
    except OSError:
        return ""
    return _fingerprint(str(p.resolve()), stamp)


@dataclass(frozen=True)
class Served:
    """What an OpenAI-compatible endpoint says it serves under a name (``GET /v1/models``): the
    served id, the weights it was started from (vLLM's ``root``: the model path or hub id), and
    its context length."""
    id: str
    root: str
    max_model_len: int | None

    def columns(self) -> dict[str, Any]:
        return {"id": self.id, "root": self.root, "max_model_len": self.max_model_len}


def _probe(url: str, served: str, api_key_env: str, timeout: float) -> Served | None:
    """``GET {url}/models`` and the entry named ``served``; None when the endpoint cannot say
    (unreachable, no model list, the name absent)."""
    import json
    import urllib.request
    from urllib.parse import urlsplit, urlunsplit

    u = urlsplit(url)       # the path gets /models; a query (a token, say) stays the query
    req = urllib.request.Request(urlunsplit(u._replace(path=u.path.rstrip("/") + "/models")))
    where = redact_url(url.rstrip("/"))     # logs keep no token
    key = os.environ.get(api_key_env, "") if api_key_env else ""
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:      # noqa: S310 (a configured endpoint)
            body = json.loads(r.read(1 << 20))
    except (OSError, ValueError) as e:
        log.warning("cannot ask %s what it serves (%s): identity of %r by its name only", where, e, served)
        return None
    entries = body.get("data") if isinstance(body, dict) else None
    for d in entries if isinstance(entries, list) else []:
        if isinstance(d, dict) and d.get("id") == served:
            mml = d.get("max_model_len")
            return Served(served, str(d.get("root") or ""), mml if isinstance(mml, int) else None)
    log.warning("%s/models does not list %r: identity of that model by its name only", where, served)
    return None


@functools.lru_cache(maxsize=256)
def served_model(urls: tuple[str, ...], served: str, api_key_env: str = "", timeout: float = 3.0) -> Served | None:
    """What the endpoints ``urls`` (one server, or a fleet that must serve one model) serve as
    ``served``, asked once per process; None when none can say. A fleet whose members report
    different weights or context lengths is refused: its episodes would mix two models."""
    from engine.errors import ConfigError

    answers = {u: _probe(u, served, api_key_env, timeout) for u in urls}
    known = {u: a for u, a in answers.items() if a is not None}
    if len({(a.root, a.max_model_len) for a in known.values()}) > 1:
        raise ConfigError("model.base_urls: the endpoints serve different models under "
                          f"{served!r}: " + "; ".join(f"{redact_url(u)} serves {a.root or a.id!r} (max_model_len "
                                                       f"{a.max_model_len})" for u, a in known.items()))
    return next(iter(known.values()), None)


def endpoint_urls(m: ModelConfig) -> tuple[str, ...]:
    return tuple(u.rstrip("/") for u in (m.base_urls or [m.base_url]) if u)


def weights_identity(m: ModelConfig) -> dict[str, Any]:
    """What the model's outputs are generated by: for a hosted model its folder and its content
    fingerprint; for an external endpoint what the endpoint says it serves: the served name, and
    (``server``) the weights and context length it reports, when it reports them (dateline cannot
    see its weights; the base URL is where it is served, not what)."""
    if m.kind == "vllm":
        return {"path": m.path, "fingerprint": fingerprint(m.path) if m.path else ""}
    served = m.served_name or m.name
    out: dict[str, Any] = {"served": served}
    if (s := served_model(endpoint_urls(m), served, m.api_key_env)) is not None:
        out["server"] = s.columns()
    return out


# How strong a weights id is, by its prefix: two ids of the same strong kind that differ are two
# models; any other pair that differs may still be one model, and their names decide.
HOSTED, SERVED, NAMED = "fp:", "srv:", "name:"


def weights_id(m: ModelConfig) -> str:
    """A short id of the weights, equal for two configs that serve the same model (self-judging
    is decided with it, engine/scoring/judges.py ``same_model``): ``fp:`` the fingerprint of a hosted folder
    (its path when it has none); ``srv:`` what an external endpoint reports it serves (its root: no
    URL in it, so every host name, port and replica of one server, and every member of a fleet, is
    one identity); ``name:`` only the served name, when the endpoint cannot say, or lists the name
    with no weights (a proxy in front of a server: issue 46, such a listing told one server from
    itself). Two ``name:`` ids, or one beside any other, are one model when the names are: dateline
    cannot tell them apart, so it never counts them as independent."""
    from engine.config import stable_hash

    if m.kind == "vllm":
        return HOSTED + hosted_hash(m)
    served = m.served_name or m.name
    s = served_model(endpoint_urls(m), served, m.api_key_env)
    if s is not None and s.root:
        return SERVED + stable_hash({"root": s.root}, n=12)
    return NAMED + stable_hash({"served": served}, n=12)


def hosted_hash(m: ModelConfig) -> str:
    """The hosted model's weights hash as judge ids have always included it (unprefixed)."""
    from engine.config import stable_hash

    fp = fingerprint(m.path) if m.path else ""
    return stable_hash({"fingerprint": fp} if fp else {"path": m.path}, n=12)
