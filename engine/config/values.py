"""Configurations as plain values: converted to JSON-able data (:func:`to_plain`), hashed
(:func:`stable_hash`, behind every config hash and episode id), labelled for tables, and redacted
before anything is written (:func:`redact`)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, is_dataclass
from typing import Any


def to_plain(obj: Any) -> Any:
    """Dataclass or OmegaConf node -> plain JSON-able Python."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(obj, (DictConfig, ListConfig)):
            return OmegaConf.to_container(obj, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    if is_dataclass(obj) and not isinstance(obj, type):
        return asdict(obj)
    return obj


REDACTED = "<redacted>"


def redact_url(url: str) -> str:
    """A URL as files and logs keep it: no user info, query or fragment (tokens ride there)."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        u = urlsplit(url)
        netloc = (u.hostname or "") + (f":{u.port}" if u.port else "")
    except ValueError:
        return REDACTED
    if not u.scheme:
        return url
    return urlunsplit((u.scheme, netloc, u.path, REDACTED if u.query else "", ""))


def redact(obj: Any) -> Any:
    """``obj`` (plain JSON-able data: a config, a run's info) as it may be written to disk: the
    values of every ``env`` mapping (``model.env``, ``judge.hosted_model.env``; the names stay),
    ``api_key`` values, and the credentials and query strings of ``base_url`` values."""
    if isinstance(obj, dict):
        out: dict[Any, Any] = {}
        for k, v in obj.items():
            if k == "env" and isinstance(v, dict):
                out[k] = {name: REDACTED for name in v}
            elif k in ("api_key", "password", "token") and v:
                out[k] = REDACTED
            elif k == "base_url" and isinstance(v, str):
                out[k] = redact_url(v)
            elif k == "base_urls" and isinstance(v, (list, tuple)):
                out[k] = [redact_url(str(u)) for u in v]
            else:
                out[k] = redact(v)
        return out
    if isinstance(obj, (list, tuple)):
        return [redact(v) for v in obj]
    return obj


def secret_values(obj: Any) -> set[str]:
    """The secret strings in plain data (what :func:`redact` replaces): values of ``env``
    mappings and of ``api_key``-like keys, user info and query strings of ``base_url`` values;
    to scrub a text that repeats them elsewhere (Hydra's override lists)."""
    from urllib.parse import urlsplit

    out: set[str] = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "env" and isinstance(v, dict):
                out |= {str(x) for x in v.values() if x not in (None, "")}
            elif k in ("api_key", "password", "token") and v:
                out.add(str(v))
            elif k in ("base_url", "base_urls") and isinstance(v, (str, list, tuple)):
                for url in ([v] if isinstance(v, str) else [str(x) for x in v]):
                    try:
                        u = urlsplit(url)
                        out |= {x for x in (u.query, u.username, u.password) if x}
                    except ValueError:
                        out.add(url)
            else:
                out |= secret_values(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            out |= secret_values(v)
    return {x for x in out if len(x) >= 3}


def config_labels(items: list[tuple[str, dict[str, Any], str]]) -> list[str]:
    """Readable names for configurations ``(model, settings, tag)``: the model, plus the settings
    whose values differ between the items, e.g. ``qwen (guided_json=True)``. Items that still
    read the same get their ``tag`` (a config hash) appended."""
    out = []
    for model, mine, _ in items:
        diff = [k for k in sorted(mine) if any(o.get(k) != mine[k] for _, o, _ in items)]
        out.append(f"{model} ({', '.join(f'{k}={mine[k]}' for k in diff)})" if diff else model)
    return [f"{lab} [{tag[:6]}]" if out.count(lab) > 1 else lab for lab, (_, _, tag) in zip(out, items)]


def stable_hash(*parts: Any, n: int = 16) -> str:
    blob = json.dumps([to_plain(p) for p in parts], sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:n]
