"""Print the current values of the G1 pins (``tests/test_pins.py``), in the form to paste there.

    .venv/bin/python -m tests.pins.regen           # PINS and WEIGHTS as Python literals
    .venv/bin/python -m tests.pins.regen --json    # the same as JSON (what test_pins reads from another cwd)

It prints and never writes a file of the repository: ``plan()`` makes a run dir's folders, so each
configuration is planned into a temporary folder, removed afterwards. Paste new values only for a
change that is meant to give stored results a new identity: every result stored under the old
values is then another configuration's (episodes re-run, judgements asked again).
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

# Each pinned configuration, as `dateline run OVERRIDES` composes it from conf/config.yaml. The sweep
# point is one job of `dateline run +experiment=budget_ablations` (its sweeper adds +ablation=...).
CASES: dict[str, tuple[str, ...]] = {
    "newsagent": ("benchmark=newsagent", "agent=newsagent"),
    "livenews": ("benchmark=livenews", "agent=livenews"),
    "analyst": ("benchmark=analyst", "agent=analyst"),
    "analyst_agentic": ("benchmark=analyst", "agent=analyst_agentic"),
    "budget_ablations/livenews_searches3": ("+experiment=budget_ablations", "+ablation=livenews_searches3"),
}

# What the default model's engine identity takes from the machine, set explicitly. Both are part of
# every episode id (engine/identity.py engine_identity), neither of the config hash:
# * model.path: by default the absolute path of the model scripts/setup.sh converts into the cache
#   (<clone>/.cache resolved, or $DATELINE_CACHE), and the identity holds that path and the folder's
#   content fingerprint (engine/hosting/weights.py). A path that is on no machine gives
#   {"path": it, "fingerprint": ""}; the fingerprint itself is pinned on fixed bytes (WEIGHTS).
# * model.engine_args.dtype: left out, it is resolved from this machine's CPU flags (bfloat16 with
#   AVX512_BF16/AMX or Arm BF16, else float32: engine/hosting/machine.py).
# run.order=data: the pinned first task is the data file's first (the order is no part of any
# identity; under the default random order the first task is a seeded draw)
CONTROLS = ("model.path=/nonexistent/dateline-pins/model", "++model.engine_args.dtype=float32", "run.order=data")

# An explicit judge. Its id hashes the model name and the base URL; what the endpoint reports it
# serves (GET /v1/models) goes into its weights id only. Port 9 (discard) refuses at once, so the
# weights id is by name on every machine. No key variable: validation would need it set.
JUDGE = ("judge=openai_compatible", "judge.base_url=http://127.0.0.1:9/v1", "judge.model=pin-judge",
         "judge.api_key_env=")


def values(name: str, run_dir: Path) -> dict[str, str]:
    """What identifies the stored results of configuration ``name``, planned into ``run_dir``."""
    from engine.benchmarks import get_benchmark
    from engine.scoring.outcomes import dataset_key
    from ray_jobs.config.compose import compose
    from ray_jobs.judging.stream import run_judge_identity
    from ray_jobs.run import data_identity, plan, resolve

    cfg = compose([*CASES[name], *CONTROLS, f"run.dir={run_dir}"])
    bench = get_benchmark(cfg.benchmark.name)
    first = plan(resolve(cfg)).specs[0]
    judged = compose([*CASES[name], *CONTROLS, *JUDGE, f"run.dir={run_dir}"])
    return {
        "config_hash": first.config_hash,
        "first_task": str(first.task_id),
        "episode_id": first.episode_id,
        "prompt_version": bench.prompt_version,
        "judge_prompt_version": bench.judge_prompt_version,
        # the judge ids a run keys its judgements by (judge_identity with the benchmark's judge
        # prompt version and evaluation settings); judge=none is the default
        "judge_none": run_judge_identity(cfg, bench).id,
        "judge_openai_compatible": run_judge_identity(judged, bench).id,
        "dataset_key": dataset_key(bench, data_identity(cfg)),
    }


def write_model(folder: Path) -> Path:
    """A model folder of fixed bytes: the small files the fingerprint reads whole, a weights file
    larger than the 64 KiB blocks it samples, and a file it ignores."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text('{"architectures": ["PinForCausalLM"], "hidden_size": 8}\n')
    (folder / "tokenizer_config.json").write_text('{"model_max_length": 8192}\n')
    (folder / "model.safetensors").write_bytes(bytes(i * 7 % 251 for i in range(300_000)))
    (folder / "README.md").write_text("not part of the fingerprint\n")
    return folder


def weights_values(folder: Path) -> dict[str, str]:
    """The weights ids of the fixture model in ``folder`` (made there) and of the explicit judge."""
    from engine.config import ModelConfig
    from engine.hosting.weights import fingerprint, weights_id

    path = str(write_model(folder))
    return {
        "fingerprint": fingerprint(path),
        "hosted_weights_id": weights_id(ModelConfig(path=path)),
        "judge_weights_id": weights_id(ModelConfig(name="pin-judge", kind="openai_compatible",
                                                   base_url="http://127.0.0.1:9/v1")),
    }


def current() -> dict[str, Any]:
    """Every pinned value, computed in temporary folders."""
    with tempfile.TemporaryDirectory(prefix="dateline-pins-") as tmp:
        return {"PINS": {name: values(name, Path(tmp) / "run") for name in CASES},
                "WEIGHTS": weights_values(Path(tmp) / "model")}


def _quote(s: str) -> str:
    return repr(s) if '"' in s else json.dumps(s)


def _literal(value: str, column: int, width: int = 120) -> str:
    """``value`` as a string literal starting at ``column``; a long one as adjacent literals in
    parentheses, cut after spaces."""
    one = _quote(value)
    if column + len(one) + 1 <= width:
        return one
    parts: list[str] = []
    for piece in re.split(r"(?<= )", value):
        if parts and column + 1 + len(_quote(parts[-1] + piece)) + 1 <= width:
            parts[-1] += piece
        else:
            parts.append(piece)
    return "(" + ("\n" + " " * (column + 1)).join(_quote(x) for x in parts) + ")"


def _dict(name: str, d: dict[str, Any], indent: int = 0) -> str:
    pad = " " * (indent + 4)
    lines = [f"{name} = {{" if not indent else f"{name}: {{"]
    for k, v in d.items():
        head = f"{pad}{json.dumps(k)}"
        lines.append(_dict(head, v, indent + 4) if isinstance(v, dict) else f"{head}: {_literal(v, len(head) + 2)},")
    lines.append(" " * indent + ("}," if indent else "}"))
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    out = current()
    if "--json" in argv:
        print(json.dumps(out, sort_keys=True))
        return
    for name, value in out.items():
        print(_dict(name, value) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
