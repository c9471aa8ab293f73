"""G1 pins (docs/plans/issue-32.md): what identifies stored results, as literals.

A stored episode is found again by its id, a configuration by its config hash, a judgement by its
judge id, and compared configurations by their dataset key. A refactor that changes any of them,
even by reordering a dict or moving an import in a ``prompts.py``, silently orphans every stored
result: the next run re-runs its episodes and asks its judges again. So each value is pinned here,
for each benchmark's default configuration, one point of the budget-ablation sweep and the agentic
analyst, composed as ``dateline run`` composes them (Hydra's compose API: no Ray, no model server).

The values must be the same on every machine and in every clone: what the default model's
identity takes from the machine (its folder's path and dtype) is set explicitly
(``tests/pins/regen.py`` ``CONTROLS``), the explicit judge's endpoint refuses at once, and a fresh
process in another folder with another environment must compute the same values. A changed pin
is meant only with a change that gives stored results a new identity: print the new values with
``.venv/bin/python -m tests.pins.regen`` and paste them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.pins.regen import CASES, values, weights_values

PINS = {
    "newsagent": {
        "config_hash": "4507cdcdca4455dd",
        "first_task": "sample-01",
        "episode_id": "6b611d06c9bafb3f",
        "prompt_version": "82b45acd",
        "judge_prompt_version": "",
        "judge_none": ":99f3c6aa",
        "judge_openai_compatible": "pin-judge:375d4ede",
        "dataset_key": '{"data_dir": "engine/benchmarks/newsagent/sample_data", "name": "newsagent"}',
    },
    "livenews": {
        "config_hash": "4b719f09116a4628",
        "first_task": "20230106_0",
        "episode_id": "9fcf9de2015ffad9",
        "prompt_version": "734f8959",
        "judge_prompt_version": "54cad669",
        "judge_none": ":66af4c6b",
        "judge_openai_compatible": "pin-judge:6e807eec",
        "dataset_key": ('{"block_source_domain": true, "blocked_domains": ["archive.fo", "archive.is", "archive.li", '
                        '"archive.md", "archive.org", "archive.ph", "archive.today", "archive.vn"], "date_window": '
                        'true, "name": "livenews", "pages": "engine/benchmarks/livenews/sample_data/pages.jsonl", '
                        '"questions": "engine/benchmarks/livenews/sample_data/questions.jsonl", "results_per_query": '
                        '10, "source": "livenewsbench", "visit_max_tokens": 8000, "window_days": null}'),
    },
    "analyst": {
        "config_hash": "42cf32fadbdbc993",
        "first_task": "crashes-2022",
        "episode_id": "0b9729d6d4fda304",
        "prompt_version": "da9c5f7e",
        "judge_prompt_version": "6785abf8",
        "judge_none": ":05da56d6",
        "judge_openai_compatible": "pin-judge:8e0649a7",
        "dataset_key": '{"name": "analyst", "tasks_dir": "engine/benchmarks/analyst/sample_tasks"}',
    },
    "analyst_agentic": {
        "config_hash": "58c09d0e694aef0c",
        "first_task": "crashes-2022",
        "episode_id": "feddb763209d2d82",
        "prompt_version": "da9c5f7e",
        "judge_prompt_version": "6785abf8",
        "judge_none": ":05da56d6",
        "judge_openai_compatible": "pin-judge:8e0649a7",
        "dataset_key": '{"name": "analyst", "tasks_dir": "engine/benchmarks/analyst/sample_tasks"}',
    },
    "budget_ablations/livenews_searches3": {
        "config_hash": "3bc8a4aa9159b68f",
        "first_task": "20230106_0",
        "episode_id": "dd195da0034083e1",
        "prompt_version": "734f8959",
        "judge_prompt_version": "54cad669",
        "judge_none": ":66af4c6b",
        "judge_openai_compatible": "pin-judge:6e807eec",
        "dataset_key": ('{"block_source_domain": true, "blocked_domains": ["archive.fo", "archive.is", "archive.li", '
                        '"archive.md", "archive.org", "archive.ph", "archive.today", "archive.vn"], "date_window": '
                        'true, "name": "livenews", "pages": "engine/benchmarks/livenews/sample_data/pages.jsonl", '
                        '"questions": "engine/benchmarks/livenews/sample_data/questions.jsonl", "results_per_query": '
                        '10, "source": "livenewsbench", "visit_max_tokens": 8000, "window_days": null}'),
    },
}

WEIGHTS = {
    "fingerprint": "50f1974fb4f3bca1",
    "hosted_weights_id": "fp:7f309fe75c78",
    "judge_weights_id": "name:87aea04818f1",
}

REGEN = "a changed pin gives stored results a new identity; if meant: .venv/bin/python -m tests.pins.regen"


def test_every_configuration_is_pinned():
    assert sorted(PINS) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(PINS))
def test_pinned_identity(name, tmp_path):
    """Config hash, first planned episode (task and id), agent and judge prompt versions, the
    judge ids of the default (no) judge and of an explicit one, and the dataset key."""
    assert values(name, tmp_path / "run") == PINS[name], REGEN


def test_pinned_weights_fingerprint(tmp_path):
    """The content fingerprint of a model folder of fixed bytes, and the weights ids (a hosted
    folder's; the explicit judge's, by name). The fingerprint hashes file names and bytes, not the
    folder's path, so a copy elsewhere has the same; the engine identity of an episode keeps the
    path beside it (``weights_identity``), which is why the pinned ids use a path on no machine."""
    from engine.config import ModelConfig
    from engine.hosting.weights import fingerprint, weights_identity

    assert weights_values(tmp_path / "a") == WEIGHTS, REGEN
    elsewhere = weights_values(tmp_path / "b" / "c")
    assert elsewhere["fingerprint"] == WEIGHTS["fingerprint"]
    a, b = (weights_identity(ModelConfig(path=str(p))) for p in (tmp_path / "a", tmp_path / "b" / "c"))
    assert a["fingerprint"] == b["fingerprint"] == fingerprint(tmp_path / "a") and a["path"] != b["path"]


@pytest.fixture(scope="module", autouse=True)
def fresh_process(tmp_path_factory):
    """A new interpreter computing every pinned value (``tests.pins.regen --json``) from an empty
    folder, with a bare environment in which every variable the configs read points elsewhere.
    Started with the module's first test, so it runs on another core while the others do."""
    home = tmp_path_factory.mktemp("home")
    env = {"PATH": os.defpath, "PYTHONPATH": str(REPO), "HOME": str(home), "USER": "someone-else", "LC_ALL": "C",
           "HF_HOME": str(home / "hf"), "HF_HUB_OFFLINE": "1",
           "DATELINE_CACHE": str(home / "cache"), "DATELINE_SHARED_DATA": str(home / "shared"),
           "DATELINE_BASE_URL": "http://127.0.0.1:9/elsewhere/v1", "DATELINE_API_KEY": "sk-pins",
           "DATELINE_JUDGE_API_KEY": "sk-pins"}
    # validating the agentic analyst starts its sandbox, whose views live under TMPDIR: a folder
    # the sandbox's own uid can enter (not tmp_path, 0700)
    env |= {"TMPDIR": os.environ["TMPDIR"]} if "TMPDIR" in os.environ else {}
    proc = subprocess.Popen([sys.executable, "-m", "tests.pins.regen", "--json"], cwd=home, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    yield proc
    proc.kill()
    proc.communicate()


def test_same_pins_from_a_fresh_process_in_another_folder_and_environment(fresh_process):
    """Nothing of this process (no cache of it), its working folder or its environment enters a
    pinned value; nor does the run dir (the fresh process plans into a temporary folder of its own)."""
    out, err = fresh_process.communicate(timeout=120)
    assert fresh_process.returncode == 0, err[-3000:]
    assert json.loads(out) == {"PINS": PINS, "WEIGHTS": WEIGHTS}, REGEN


def test_what_the_pins_set_is_outside_the_config_hash(tmp_path):
    """``dateline run`` with no override on this machine: the same config hash as the pinned
    newsagent, and the engine identity (part of the episode id, not of the hash) holds the two
    machine-dependent values the pins set: the model folder's absolute path (in the cache of this
    clone, so a clone elsewhere or another DATELINE_CACHE gives other episode ids for the same
    weights) and the dtype this CPU resolves."""
    from engine.hosting.vllm_server import planned_dtype
    from ray_jobs.config.compose import compose
    from ray_jobs.run import plan, resolve

    cfg = compose([f"run.dir={tmp_path / 'run'}"])
    p = plan(resolve(cfg))
    assert p.config_hash == PINS["newsagent"]["config_hash"]
    assert p.engine["weights"]["path"] == cfg.model.path and Path(cfg.model.path).is_absolute()
    assert p.engine["engine_args"]["dtype"] == planned_dtype(cfg.model) in ("bfloat16", "float32")


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("old, new", [
    ("from typing import Sequence\n", "from typing import Sequence  # a comment\n"),
    # what ruff's UP035 made of it (reverted in 310c94d; prompts.py is exempt from rewriting rules)
    ("from typing import Sequence\n", "from collections.abc import Sequence\n"),
], ids=["comment", "import"])
def test_known_hazard_an_edit_that_changes_no_prompt_changes_prompt_version(old, new, tmp_path):
    """Known hazard, documented and not fixed (the fix would change every id): a benchmark's
    ``prompt_version`` hashes the source text of its ``prompts.py`` (``engine.scoring.judges.source_version``),
    so a copy of newsagent's that only gains a comment or rewrites an import renders the same
    prompts under another version, and so would give every newsagent episode a new id. A refactor
    must leave those files byte for byte alone."""
    from engine.benchmarks.newsagent import BENCHMARK, prompts
    from engine.scoring.judges import source_version

    text = Path(prompts.__file__).read_text()
    assert old in text
    (tmp_path / "copy.py").write_text(text)
    (tmp_path / "edited.py").write_text(text.replace(old, new, 1))
    copy, edited = _load(tmp_path / "copy.py", "pins_copy"), _load(tmp_path / "edited.py", "pins_edited")

    def texts(mod) -> dict[str, str]:
        return {k: v for k, v in vars(mod).items() if isinstance(v, str) and not k.startswith("__")}

    assert texts(edited) == texts(copy) == texts(prompts) and texts(prompts)
    assert source_version(copy) == BENCHMARK.prompt_version == PINS["newsagent"]["prompt_version"]   # not its path
    assert source_version(edited) != BENCHMARK.prompt_version


@pytest.mark.parametrize("name", ["newsagent", "livenews", "analyst"])
def test_prompt_sources_are_ascii(name):
    """``source_version`` reads ``prompts.py`` with the locale's encoding (``Path.read_text``): a
    non-ASCII character there would make ``prompt_version``, and every episode id, depend on the
    machine's locale."""
    path = REPO / "engine" / "benchmarks" / name / "prompts.py"
    assert path.read_bytes().isascii()
