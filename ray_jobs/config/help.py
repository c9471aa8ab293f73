"""What ``dateline run --help`` (and every Hydra command's ``--help``) prints: the config groups with
their options and every field of the composed config with its value and the comment that documents it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.benchmarks import extra_conf_dirs
from ray_jobs.config.compose import CONF_DIR, compose_node

USER_GROUPS = {"config": ("benchmark", "agent", "model", "index", "cluster", "run", "judge"),
               "pairwise": ("model", "judge", "cluster")}


def field_docs(cls: type) -> dict[str, str]:
    """Each field's description, from the comments of its dataclass: the comment on its line, else
    the block of comment lines right above it."""
    import inspect
    import re

    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    out: dict[str, str] = {}
    above: list[str] = []
    for line in lines[1:]:
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(stripped.lstrip("#").strip())
            continue
        m = re.match(r"\s+(\w+)\s*:\s*[^=#]+(?:=\s*([^#]*))?(?:#\s*(.*))?$", line)
        if m and not stripped.startswith(("def ", "@", '"""')):
            out[m.group(1)] = (m.group(3) or " ".join(above)).strip()
        above = []
    return out


def group_options(group: str) -> list[str]:
    dirs = [Path(CONF_DIR), *extra_conf_dirs()]
    return sorted({f.stem for d in dirs for f in (d / group).glob("*.yaml")})


def config_help(config_name: str, overrides: Sequence[str], prog: str, description: str = "",
                options: Sequence[tuple[str, str]] = ()) -> str:
    """What ``prog --help`` prints: what the command does, its own options, the user-facing config
    groups with their options, then every field of the composed config (with these overrides:
    ``benchmark=livenews`` shows livenews's fields) with its value and its description."""
    cfg = compose_node(config_name, [o for o in overrides if not o.startswith("-")])
    groups = USER_GROUPS.get(config_name, ())
    own = "".join(f" [{flag}]" for flag, _ in options)
    out = [f"usage: {prog}{own} [-m] [GROUP=OPTION ...] [FIELD=VALUE ...]", ""]
    if description:
        out += [description, ""]
    out += ["Options:", "  -h, --help  this help", "  -m          sweep: every combination of the a,b,c values given"]
    out += [f"  {flag}  {text}" for flag, text in options]
    out += ["", "Config groups (GROUP=OPTION picks a file of conf/GROUP/):"]
    for g in groups:
        current = getattr(getattr(cfg, g, None), "name", "") if g in ("benchmark",) else ""
        out.append(f"  {g:10} {', '.join(group_options(g))}" + (f"   (now: {current})" if current else ""))
    out += ["", "Fields (FIELD=VALUE; -m with a,b,c sweeps them), with the value this composition gives:"]

    def walk(obj: Any, prefix: str) -> None:
        docs = field_docs(type(obj))
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            name = f"{prefix}{f.name}"
            if dataclasses.is_dataclass(v) and not isinstance(v, type):
                walk(v, name + ".")
                continue
            doc = docs.get(f.name, "")
            shown = repr(v) if not isinstance(v, str) else (v if v else '""')
            out.append(f"  {name} = {shown[:70]}" + (f"\n      {doc}" if doc else ""))

    for g in (groups if config_name == "config" else ()):
        section = getattr(cfg, g, None)
        if dataclasses.is_dataclass(section):
            out.append(f"\n [{g}]")
            walk(section, g + ".")
    if config_name != "config":
        walk(cfg, "")
    out += ["", "Hydra's own flags (--cfg job, --info, -m) work as with any Hydra app. Docs: README.md, docs/design/."]
    return "\n".join(out) + "\n"

