"""Hydra wiring: register the dataclass schemas and compose configs (also for tests)."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf import OmegaConf

from engine.benchmarks import extra_conf_dirs, get_benchmark, runnable_benchmarks
from engine.config import (
    ClusterConfig,
    Config,
    IndexConfig,
    JudgeConfig,
    ModelConfig,
    PairwiseConfig,
    RunConfig,
    StopConfig,
    SweepConfig,
)
from engine.errors import ConfigError, DataError
from engine.inputs.paths import conf_dir
from engine.runtime.logs import configure as configure_logging
from engine.runtime.runlock import RunDirLocked

CONF_DIR = str(conf_dir())
_registered = False
_benchmarks: set[str] = set()


def register() -> None:
    """Schemas for every group; each benchmark folder contributes ``<name>_schema`` entries
    (benchmarks that appear later, through ``DATELINE_BENCHMARKS``, on the next call)."""
    global _registered
    cs = ConfigStore.instance()
    for name in sorted(set(runnable_benchmarks()) - _benchmarks):
        b = get_benchmark(name)
        cs.store(group="benchmark", name=f"{b.name}_schema", node=b.benchmark_schema)
        cs.store(group="agent", name=f"{b.name}_schema", node=b.agent_schema)
        _benchmarks.add(name)
    if _registered:
        return
    cs.store(name="config_schema", node=Config)
    cs.store(name="pairwise_schema", node=PairwiseConfig)
    for group, node in (("model", ModelConfig), ("index", IndexConfig), ("cluster", ClusterConfig),
                        ("run", RunConfig), ("judge", JudgeConfig), ("sweep", SweepConfig), ("stop", StopConfig)):
        cs.store(group=group, name=f"{group}_schema", node=node)
    if not OmegaConf.has_resolver("dateline_cache"):
        from engine.hosting.prepare_model import cache_dir

        OmegaConf.register_new_resolver("dateline_cache", lambda sub="": str(cache_dir() / sub))
    _registered = True


def searchpath_overrides() -> list[str]:
    """``hydra.searchpath`` for the config group files of benchmarks outside the repository
    (``DATELINE_BENCHMARKS``); none when there are none."""
    dirs = extra_conf_dirs()
    return [f"hydra.searchpath=[{','.join(d.as_uri() for d in dirs)}]"] if dirs else []


def _conf_fingerprint(dirs: Sequence[str]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((str(f), f.stat().st_mtime_ns) for d in dirs for f in Path(d).rglob("*.yaml")))


@functools.lru_cache(maxsize=32)
def _compose_groups(config_name: str, overrides: tuple[str, ...], _key: object) -> Any:
    """Hydra's compose of the config group choices (and any override that is not a plain value);
    ``_key`` (the YAML files' mtimes, the registered benchmarks) only invalidates the cache."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return hydra_compose(config_name=config_name, overrides=list(overrides))


def _compose(config_name: str, overrides: Sequence[str]) -> Any:
    """Compose ``conf/<config_name>.yaml`` like the CLI does: dataclass instances all the way down.

    Hydra composes in two steps: the defaults list (group choices such as ``model=...``), merged
    into one config, then the value overrides (``model.name=x``) applied to it in order. The first
    step is most of the cost (0.16 s a compose: YAML, structured-config copies), and callers such as
    the tests compose the same group choices with other values again and again, so it is cached;
    the second is Hydra's own ``_apply_overrides_to_config`` on a copy, as Hydra runs it.
    ``tests/engine/config/test_config.py`` checks the result equals a plain Hydra compose."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.types import OverrideType

    register()
    everything = [*searchpath_overrides(), *overrides]
    groups: list[str] = []
    values = []
    parsed = OverridesParser.create().parse_overrides(everything)
    for line, o in zip(everything, parsed, strict=True):
        k = o.key_or_group
        plain = (o.type == OverrideType.CHANGE and o.package is None and "." in k and "/" not in k
                 and not k.startswith("hydra.") and not o.is_sweep_override())
        if plain:
            values.append(o)
        else:
            groups.append(line)
    key = (_conf_fingerprint([CONF_DIR, *map(str, extra_conf_dirs())]), frozenset(_benchmarks))
    cfg = copy.deepcopy(_compose_groups(config_name, tuple(groups), key))
    ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
    return OmegaConf.to_object(cfg)


def _compose_uncached(config_name: str, overrides: Sequence[str]) -> Any:
    """One plain Hydra compose (what :func:`_compose` must equal)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return OmegaConf.to_object(hydra_compose(config_name=config_name,
                                                 overrides=[*searchpath_overrides(), *overrides]))


def compose(overrides: Sequence[str] = ()) -> Config:
    """The run config, as ``dateline run`` composes it (validated)."""
    from engine.config import validate
    from engine.inputs.hub import resolve_config

    cfg = _compose("config", overrides)
    assert isinstance(cfg, Config)
    resolve_config(cfg)
    validate(cfg)
    return cfg


def compose_pairwise(overrides: Sequence[str] = ()) -> PairwiseConfig:
    """The pairwise config, as ``dateline pairwise`` composes it (validated)."""
    from engine.config import validate_pairwise

    cfg = _compose("pairwise", overrides)
    assert isinstance(cfg, PairwiseConfig)
    validate_pairwise(cfg)
    return cfg


def _redact_multirun_yaml() -> None:
    """Hydra's sweeper saves the composed config as ``multirun.yaml`` in its sweep folder before the
    first job; rewrite it with secrets redacted (``engine.config.redact``: env values, URL tokens)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from engine.config import REDACTED, redact, secret_values

    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return
    path = Path(hc.sweep.dir) / "multirun.yaml"
    if path.exists():
        cfg = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        text = OmegaConf.to_yaml(OmegaConf.create(redact(cfg)))
        for secret in sorted(secret_values(cfg), key=len, reverse=True):    # also in the override lists
            text = text.replace(secret, REDACTED)
        path.write_text(text)


def hydra_main(config_name: str, body: Callable[[Any, Any], object],
               after: Callable[[Any], Any] | None = None) -> None:
    """Run ``body(typed_config, session)`` under Hydra (``-m`` sweeps included) with one
    :class:`~ray_jobs.session.Session` for the whole process, closed at the end: every point of a
    sweep shares Ray, model pools, index and services. ``after(session)`` runs once Hydra has
    called ``body`` for every point (a driver that collects the points and runs them together)."""
    import hydra
    from omegaconf import DictConfig

    from ray_jobs.session import Session

    register()
    session = Session()

    @hydra.main(version_base="1.3", config_path=CONF_DIR, config_name=config_name)
    def _main(dcfg: DictConfig) -> None:
        _redact_multirun_yaml()
        configure_logging()
        for name in ("httpx", "httpx2", "openai", "faiss.loader", "sentence_transformers", "urllib3"):
            logging.getLogger(name).setLevel(logging.WARNING)
        from engine.inputs.hub import resolve_config

        cfg = OmegaConf.to_object(dcfg)
        try:
            resolve_config(cfg)                 # hub ids -> the local cache's snapshot folders
            body(cfg, session)
        except (ConfigError, DataError, RunDirLocked) as e:
            raise _OneLine(e) from None     # past Hydra's job wrapper, which prints a traceback

    import sys

    sys.argv[1:1] = searchpath_overrides()       # before the user's overrides, which may extend it
    # Hydra's launcher logs every job's overrides (model.env values, URL tokens) at INFO: not shown
    logging.getLogger("hydra").setLevel(logging.WARNING)
    try:
        _main()
        if after is not None:
            after(session)
    except _OneLine as e:
        raise e.error from None             # the CLI says it in one line, exit status 2
    finally:
        session.close()


class _OneLine(BaseException):
    """Carries one of dateline's one-line errors out of a Hydra job (Hydra catches ``Exception``
    there and prints a traceback with exit status 1)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


# -- help ---------------------------------------------------------------------------------------------
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


def _options(group: str) -> list[str]:
    dirs = [Path(CONF_DIR), *extra_conf_dirs()]
    return sorted({f.stem for d in dirs for f in (d / group).glob("*.yaml")})


def config_help(config_name: str, overrides: Sequence[str], prog: str, description: str = "",
                options: Sequence[tuple[str, str]] = ()) -> str:
    """What ``prog --help`` prints: what the command does, its own options, the user-facing config
    groups with their options, then every field of the composed config (with these overrides:
    ``benchmark=livenews`` shows livenews's fields) with its value and its description."""
    cfg = _compose(config_name, [o for o in overrides if not o.startswith("-")])
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
        out.append(f"  {g:10} {', '.join(_options(g))}" + (f"   (now: {current})" if current else ""))
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


# -- mistakes in overrides: one line, "did you mean" --------------------------------------------------
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
            cfg = _compose(config_name, v)
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
        options = [o for o in (e.options or _options(group)) if not o.endswith("_schema")]
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
        cfg = _compose(config_name, rest)
    except Exception:
        return f"{key}: no such field"
    return _no_such(config_name, key, _node_at(cfg, key.rpartition(".")[0]))
