"""What identifies a stored result: the one module that decides it.

A **configuration** is identified by its *config identity* (:func:`config_identity`): the benchmark
settings that decide an episode's result (:func:`episode_relevant`), the model's name and sampling,
the agent settings and the retrieval settings. Its hash is the ``config_hash`` every row carries.

An **episode** is identified by the config identity, the *engine identity* (:func:`engine_identity`:
the weights, the engine's arguments, the reproducible mode and the agent's prompt version, without
what an external endpoint reports it serves), its task id and its seed (:func:`episode_id`).

A **dataset** (which configurations are compared with each other: :func:`dataset_key`) is the
benchmark config without what picks tasks or rows and without the evaluation settings.

A **judgement** is made under the benchmark's *evaluation settings* (:func:`evaluation_settings`),
which are part of the judge's identity (``engine.scoring.judges.judge_identity``).

The benchmark config's fields fall in four kinds, and each function above says which it keeps:

============================ =========================================== ======= ======= ==========
kind                         fields                                      episode dataset evaluation
============================ =========================================== ======= ======= ==========
picks tasks                  :data:`TASK_PICKERS`                        no      no      no
picks rows                   :data:`ROW_PICKERS`                         no      no      no
evaluation settings          the benchmark's ``evaluation_fields``       no      no      yes
everything else              (decides what an episode does)              yes     yes     no
============================ =========================================== ======= ======= ==========

``on_bad_rows`` picks rows, but each benchmark lists it among its ``evaluation_fields`` too (which
is how it stays out of episode ids). Moving it out of that list would change no id, but the list is
part of the plugin contract, so :data:`ROW_PICKERS` is removed from evaluation settings here instead.

Nothing here may change what it returns for a configuration that exists: every stored episode is
keyed by it. ``tests/test_pins.py`` pins the values of each benchmark's default configuration.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from engine.config import stable_hash, to_plain
from engine.hosting.vllm_server import planned_dtype
from engine.hosting.weights import weights_identity
from engine.protocol import dumps

if TYPE_CHECKING:
    from engine.config import Config
    from engine.protocol import Benchmark

# benchmark config fields that pick which tasks run (a subset of a dataset is the same dataset)
TASK_PICKERS = ("limit", "task_ids", "dataset")
# benchmark config fields that pick which rows of the data files load
ROW_PICKERS = ("on_bad_rows",)


def episode_relevant(cfg: Config, bench: Benchmark[Any]) -> dict[str, Any]:
    """The benchmark config as far as it decides an episode's result: not the task limit (it
    picks tasks) and not the fields the benchmark lists in ``evaluation_fields`` (they change
    only how finished episodes are judged), so changing those never re-runs episodes. (``limit``
    stays, as None: ids made when it was part of them stay valid.)"""
    drop = {*TASK_PICKERS, *bench.evaluation_fields, *getattr(bench, "alias_fields", ())}
    out = {k: v for k, v in to_plain(cfg.benchmark).items() if k not in drop} | {"limit": None}
    if getattr(bench, "prompt_in_config", False):      # a build: its prompts make the configuration
        out["prompt_version"] = bench.prompt_version
    return out


def model_identity(cfg: Config, uses_model: bool) -> dict[str, Any]:
    """The model as far as the config names it: its name and sampling (``{"name": "none"}`` for an
    agent that calls no model, such as the rule-based baseline)."""
    if not uses_model:
        return {"name": "none"}
    m = cfg.model
    return {"name": m.name, "served_name": m.served_name or m.name, "temperature": m.temperature, "top_p": m.top_p}


def config_identity(cfg: Config, bench: Benchmark[Any], uses_model: bool) -> dict[str, Any]:
    """What identifies a configuration: hashed into its ``config_hash`` and into every episode id."""
    return {
        "benchmark": episode_relevant(cfg, bench),
        "model": model_identity(cfg, uses_model),
        "agent": to_plain(cfg.agent),
        "retrieval": {"embedding_model": cfg.index.embedding_model, "top_k": cfg.index.top_k,
                      "threshold": cfg.index.threshold},
    }


def config_hash(ident: dict[str, Any]) -> str:
    return stable_hash(ident)


def engine_identity(cfg: Config, bench: Benchmark[Any], uses_model: bool) -> dict[str, Any]:
    """What generates a configuration's outputs beyond its settings: the model's weights (path and
    content fingerprint; the served name of an external endpoint), the engine's arguments, the
    reproducible mode, and the version of the agent's prompt text. Part of every episode id; a
    configuration's stored episodes all have the same (``ray_jobs/run/planning.py: check_engine``). A CPU
    model's engine arguments hold its dtype as this machine resolves it when the config leaves it
    out (bfloat16 where the CPU computes it natively, else float32: ``engine/hosting/machine.py``),
    so runs on the two kinds of CPU are two engines; the pool's replicas refuse to start on a node
    that resolves another (``Session.pool``)."""
    out: dict[str, Any] = {"prompt": bench.prompt_version}
    if uses_model:
        m = cfg.model
        out["weights"] = weights_identity(m)
        if m.kind == "vllm":
            dtype = planned_dtype(m)
            out["engine_args"] = to_plain(m.engine_args) | ({"dtype": dtype} if dtype is not None else {})
            out["reproducible"] = m.reproducible
    return out


def reported_server(engine: dict[str, Any]) -> Any:
    """What an external endpoint reported it serves (``weights.server``), None when not asked."""
    return (engine.get("weights") or {}).get("server")


def without_server(engine: dict[str, Any]) -> dict[str, Any]:
    """The engine identity without what an external endpoint reported it serves (``weights.server``):
    what episode ids hash, and what two identities are compared by when one side lacks it."""
    w = engine.get("weights")
    if not isinstance(w, dict) or "server" not in w:
        return engine
    return {**engine, "weights": {k: v for k, v in w.items() if k != "server"}}


def episode_id(ident: dict[str, Any], engine: dict[str, Any], task_id: str, seed: int) -> str:
    """An episode's id: its configuration, its engine (ids stay what they were before endpoints
    were asked what they serve), its task and its seed."""
    return stable_hash(ident, without_server(engine), task_id, seed)


def data_identity(cfg: Config) -> str:
    """The benchmark config as stored with a plan (the ``data`` that :func:`dataset_key` reads)."""
    return dumps(to_plain(cfg.benchmark) | {"limit": None})


def dataset_key(bench: Any, data_json: str | None) -> str:
    """Which configurations are compared with each other: those of one dataset, i.e. the benchmark
    config (``data``) without what picks tasks or rows or only changes judging (the benchmark's
    ``evaluation_fields``)."""
    try:
        d = json.loads(data_json or "{}")
    except ValueError:
        return data_json or ""
    drop = {*TASK_PICKERS, *ROW_PICKERS, *getattr(bench, "evaluation_fields", ()), *getattr(bench, "alias_fields", ())}
    return json.dumps({k: v for k, v in d.items() if k not in drop}, sort_keys=True, default=str)


def evaluation_settings(benchmark_cfg: Any, fields: Sequence[str]) -> dict[str, Any]:
    """The values of a benchmark's evaluation fields in its config, without those that pick rows
    (``on_bad_rows`` picks which rows load, so it is not an evaluation setting)."""
    plain = to_plain(benchmark_cfg) or {}
    return {k: plain.get(k) for k in fields if k not in ROW_PICKERS}


def prompt_version(*texts: str) -> str:
    """A short version of judge prompts: a hash of their text, so any edit makes a new judge."""
    return stable_hash(*texts, n=8)


def source_version(*modules: ModuleType) -> str:
    """A short version of prompt modules: a hash of their source, so any edit of a template or of
    the code that fills it makes a new version. Any edit: a comment or an import line too (a known
    hazard, pinned by ``tests/test_pins.py``; ruff's rewriting rules are off for ``prompts.py``)."""
    texts = []
    for mod in modules:
        path = getattr(mod, "__file__", None)
        texts.append(Path(path).read_text() if path else repr(sorted(vars(mod))))
    return stable_hash(*texts, n=8)
