"""A model's knowledge cutoff (engine/config/cutoffs.py): ``model.knowledge_cutoff``, else the
``knowledge_cutoffs`` table (conf/knowledge_cutoffs.yaml) by served name, then name; a bad date is
a ConfigError naming the field; and it is in no id (changing it re-runs nothing)."""

from __future__ import annotations

import pytest

from engine.config import ModelConfig
from engine.config.cutoffs import knowledge_cutoff
from engine.errors import ConfigError
from ray_jobs.config.compose import compose
from ray_jobs.config.point import resolve

TABLE = {"served-x": "2024-03-31", "name-x": "2023-06-30", "Mixed-Case": "2022-01-31"}


def test_the_table_is_read_by_served_name_then_name_and_the_model_field_wins():
    assert knowledge_cutoff(ModelConfig(name="name-x", served_name="served-x"), TABLE) == "2024-03-31"
    assert knowledge_cutoff(ModelConfig(name="name-x", served_name="not-listed"), TABLE) == "2023-06-30"
    assert knowledge_cutoff(ModelConfig(name="mixed-case"), TABLE) == "2022-01-31"     # exact first, then any case
    own = ModelConfig(name="name-x", served_name="served-x", knowledge_cutoff="2025-01-15")
    assert knowledge_cutoff(own, TABLE) == "2025-01-15"
    assert knowledge_cutoff(ModelConfig(name="unlisted"), TABLE) is None
    assert knowledge_cutoff(own, TABLE, uses_model=False) is None          # a rule-based agent reads no training data


@pytest.mark.slow
def test_the_bundled_table_and_overrides_compose():
    """conf/knowledge_cutoffs.yaml holds Llama 3.1's published cutoff (conf/model/gpu_8b.yaml's model)
    and nothing for the bundled Qwen model (no published cutoff: "cutoff unknown"); the command line
    sets one per run or adds a table entry."""
    cfg = compose(["model=gpu_8b"])
    assert knowledge_cutoff(cfg.model, cfg.knowledge_cutoffs) == "2023-12-31"
    default = compose([])
    assert default.model.knowledge_cutoff is None and knowledge_cutoff(default.model, default.knowledge_cutoffs) is None
    cfg = compose(["model=gpu_8b", "model.knowledge_cutoff=2024-02-29"])
    assert knowledge_cutoff(cfg.model, cfg.knowledge_cutoffs) == "2024-02-29"
    cfg = compose(["model.name=my-model", "model.served_name=", "+knowledge_cutoffs.my-model=2024-09-30"])
    assert knowledge_cutoff(cfg.model, cfg.knowledge_cutoffs) == "2024-09-30"


@pytest.mark.parametrize(("override", "field"), [
    ("model.knowledge_cutoff=2024-13-01", "model.knowledge_cutoff"),
    ("model.knowledge_cutoff=20240101", "model.knowledge_cutoff"),
    ("model.knowledge_cutoff=last spring", "model.knowledge_cutoff"),
    ("+knowledge_cutoffs.some-model=2024-02-30", "knowledge_cutoffs.some-model"),
])
def test_a_bad_date_is_a_config_error_naming_the_field(override, field):
    with pytest.raises(ConfigError, match=rf"^{field}: must be a date YYYY-MM-DD"):
        compose([override])


def test_a_hosted_judge_models_bad_cutoff_names_its_field():
    with pytest.raises(ConfigError, match=r"^judge.hosted_model.knowledge_cutoff: must be a date"):
        compose(["benchmark=livenews", "agent=livenews", "judge=hosted_model", "judge.hosted_model.name=judge-b",
                 "judge.hosted_model.served_name=judge-b", "judge.hosted_model.knowledge_cutoff=soon"])


def test_the_cutoff_is_in_no_id():
    """Resolved once with the point, and not part of the configuration's identity or its engine's:
    the same config hash and episode ids, so a changed cutoff re-runs no episode."""
    base = ["benchmark=livenews", "agent=livenews", "benchmark.limit=2"]
    a, b = resolve(compose(base)), resolve(compose([*base, "model.knowledge_cutoff=2023-01-15"]))
    assert (a.knowledge_cutoff, b.knowledge_cutoff) == (None, "2023-01-15")
    assert a.config_hash == b.config_hash and a.identity == b.identity and a.engine == b.engine
