"""Mistakes in overrides, found before Hydra runs: one line that names the override and, for a
misspelt field, group or option, what was probably meant."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Sequence
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException, OverrideParseException

from engine.errors import ConfigError
from ray_jobs.config.compose import compose_node
from ray_jobs.config.help import group_options


def check_overrides(config_name: str, overrides: Sequence[str]) -> None:
    """Compose ``overrides`` (every value of a ``-m`` sweep) before Hydra runs, and turn a mistake
    into a :class:`~engine.errors.ConfigError` of one line that names the override, and for a
    misspelt field, group or option what was probably meant. Hydra itself would print 7-20 lines with
    a ``+key`` hint and exit 1, the status of failed episodes."""
    given = [o for o in overrides if o not in ("-m", "--multirun") and not o.startswith("hydra.")]
    try:
        parsed = OverridesParser.create().parse_overrides(given)
    except OverrideParseException as e:
        raise ConfigError(f"cannot parse an override ({' '.join(str(e).split())})") from None
    # each value of each sweep override once, the other sweep overrides at their first value
    values = {i: [f"{given[i].split('=', 1)[0]}={x}" for x in o.sweep_string_iterator()]
              for i, o in enumerate(parsed) if o.is_sweep_override()}
    base = [values[i][0] if i in values and values[i] else o for i, o in enumerate(given)]
    variants = [base] + [[*base[:i], x, *base[i + 1:]] for i, xs in values.items() for x in xs[1:]]
    for v in variants:
        try:
            cfg = compose_node(config_name, v)
        except HydraException as e:
            raise ConfigError(explain(config_name, v, e)) from None
        except Exception as e:          # omegaconf's own (a value of the wrong type in a structured config)
            key = getattr(e, "full_key", None)
            raise ConfigError(f"{key + ': ' if key else ''}{' '.join(str(e).split(chr(10))[0].split())}") from None
        _check_appended(config_name, cfg, v)


def _check_appended(config_name: str, cfg: Any, overrides: Sequence[str]) -> None:
    """``+a.b=x`` adds a key where Hydra lets it, and a typed config then carries an attribute that
    nothing reads: a misspelt field would be ignored in silence. A field added to a dataclass node
    must be one of its fields; free-form nodes (``model.engine_args``, ``cluster.runtime_env``) take
    anything."""
    for o in overrides:
        key = o.split("=", 1)[0]
        if not key.startswith("+") or "." not in key or "/" in key:
            continue
        key = key.lstrip("+")
        node = _node_at(cfg, key.rpartition(".")[0])
        if dataclasses.is_dataclass(node) and key.rpartition(".")[2] not in _keys(node):
            raise ConfigError(_no_such(config_name, key, node))


def _close(word: str, options: Sequence[str], prefix: str = "") -> str:
    near = difflib.get_close_matches(word, list(options), n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(prefix + n for n in near)}?)" if near else ""


def _node_at(cfg: Any, dotted: str) -> Any:
    """The node of a composed config at ``a.b`` ("" : the config itself; None where there is none)."""
    node = cfg
    for part in dotted.split(".") if dotted else ():
        node = node.get(part) if isinstance(node, dict) else getattr(node, part, None)
    return node


def _keys(node: Any) -> list[str]:
    return ([f.name for f in dataclasses.fields(node)] if dataclasses.is_dataclass(node)
            else list(node) if isinstance(node, dict) else [])


def _no_such(config_name: str, key: str, node: Any) -> str:
    """``key: no such field`` with what was probably meant among ``node``'s keys, else where the list is."""
    parent, _, leaf = key.rpartition(".")
    hint = _close(leaf, _keys(node), f"{parent}." if parent else "")
    what = "field" if parent else "config group or field"
    return f"{key}: no such {what}" + (hint or f"; see `dateline {'pairwise' if config_name == 'pairwise' else 'run'} --help`")


def explain(config_name: str, overrides: Sequence[str], e: BaseException) -> str:
    """One line for a Hydra composition error."""
    first = " ".join(str(e).strip().splitlines()[0].split()) if str(e).strip() else type(e).__name__
    if isinstance(e, MissingConfigException) and e.missing_cfg_file and "/" in e.missing_cfg_file:
        group, option = e.missing_cfg_file.rsplit("/", 1)
        options = [o for o in (e.options or group_options(group)) if not o.endswith("_schema")]
        return f"{group}={option}: no such option of {group}{_close(option, options)}; options: {', '.join(options)}"
    cause = e.__cause__ or e.__context__
    key = getattr(cause, "full_key", None)
    if not key:
        return first
    if "not in" not in str(cause) and "not found" not in str(cause).lower():
        why = " ".join(str(cause).splitlines()[0].split())
        return f"{key}: {why}"
    rest = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != key]
    try:
        cfg = compose_node(config_name, rest)
    except Exception:
        return f"{key}: no such field"
    return _no_such(config_name, key, _node_at(cfg, key.rpartition(".")[0]))
