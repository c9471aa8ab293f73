"""Issue 21, part 5 and 6: config ranges, hostile input files, corrupt shards, a refused driver,
and secrets at rest. Every case names the field or the file, nothing is lost silently, and no
value of ``model.env``, no API key and no URL token is written anywhere in a run dir."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.errors import BadDataError, ConfigError, CorruptShard, DataError
from engine.storage import EpisodeStore
from ray_jobs.configs import compose
from tests.engine.test_runlock import _holder
from tests.factories import episode_row
from tests.fake_openai import FakeOpenAI
from tests.helpers import REPO, run_module

LIVE = ["benchmark=livenews", "agent=livenews"]


@pytest.mark.parametrize("overrides,field", [
    (["run.max_failures=-1"], "run.max_failures"),
    (["judge=openai_compatible", "judge.base_url=http://h/v1", "judge.model=j", "judge.api_key_env=",
      "judge.max_inflight=0"],
     "judge.max_inflight"),
    (["benchmark.limit=-1"], "benchmark.limit"),
    (["benchmark.limit=0"], "benchmark.limit"),
    (["model.top_p=0"], "model.top_p"),
    (["model.top_p=1.5"], "model.top_p"),
    (["model.request_timeout_s=0"], "model.request_timeout_s"),
    (["model.price_gpu_hour=-1"], "model.price_gpu_hour"),
    (["model=openai_compatible", "model.base_url=http://h/v1", "model.api_key_env=", "model.max_retries=-1"],
     "model.max_retries"),
    (["model=openai_compatible", "model.base_url=http://h/v1", "model.api_key_env=", "model.retry_backoff_s=9"],
     "model.retry_backoff_s"),
    (["model=openai_compatible", "model.base_url=ftp://h/v1", "model.api_key_env="], "model.base_url"),
    (["model=openai_compatible", "model.base_url=http://user:pw@h/v1", "model.api_key_env="], "model.base_url"),
    (["judge=openai_compatible", "judge.base_url=h/v1", "judge.model=j"], "judge.base_url"),
    (["judge=self", "judge.request_timeout_s=-5"], "judge.request_timeout_s"),
    (["judge=self", "judge.price_input_per_mtok=-1"], "judge.price_input_per_mtok"),
    (["run.budget.max_usd=-1"], "run.budget.max_usd"),
    (["run.flush_interval_s=-1"], "run.flush_interval_s"),
    (["index.embed_batch_size=0"], "index.embed_batch_size"),
])
def test_every_numeric_field_is_range_checked_naming_it(overrides, field):
    with pytest.raises(ConfigError, match=f"^{field.replace('.', '[.]')}:"):
        compose([*LIVE, *overrides])


@pytest.mark.parametrize("overrides,field", [
    (["agent.code_timeout_s=0"], "agent.code_timeout_s"),
    (["agent.code_memory_mb=16"], "agent.code_memory_mb"),
    (["agent.code_disk_mb=0"], "agent.code_disk_mb"),
    (["agent.code_max_procs=0"], "agent.code_max_procs"),
    (["agent.sandbox=none"], "agent.sandbox"),
    (["benchmark.max_claims=0"], "benchmark.max_claims"),
    (["benchmark.evidence_k=0"], "benchmark.evidence_k"),
])
def test_analyst_fields_are_range_checked(overrides, field):
    with pytest.raises(ConfigError, match=f"^{field.replace('.', '[.]')}:"):
        compose(["benchmark=analyst", "agent=analyst_agentic", *overrides])


def _livenews_data(tmp_path: Path, pages: str) -> list[str]:
    d = tmp_path / "data"
    d.mkdir()
    src = REPO / "engine" / "benchmarks" / "livenews" / "sample_data"
    shutil.copy(src / "questions.jsonl", d / "questions.jsonl")
    (d / "pages.jsonl").write_text(pages)
    return [f"benchmark.questions={d / 'questions.jsonl'}", f"benchmark.pages={d / 'pages.jsonl'}"]


def test_deep_nesting_and_huge_integers_are_named_data_errors_that_skip_quarantines(tmp_path):
    from engine.benchmarks.livenews import BENCHMARK
    from engine.quarantine import collecting

    good = (REPO / "engine" / "benchmarks" / "livenews" / "sample_data" / "pages.jsonl").read_text()
    deep = "[" * 100_000 + "]" * 100_000
    huge = '{"url": "https://a.com/x", "n": ' + "9" * 5000 + "}"
    ov = _livenews_data(tmp_path, good + deep + "\n" + huge + "\n")
    with pytest.raises(BadDataError, match=r"pages.jsonl, row \d+: JSON nested 100,000 levels deep"):
        BENCHMARK.load_tasks(compose([*LIVE, *ov]))
    with collecting() as bad:
        tasks = BENCHMARK.load_tasks(compose([*LIVE, *ov, "benchmark.on_bad_rows=skip"]))
        from engine.benchmarks.livenews.data import load
        load(compose([*LIVE, *ov, "benchmark.on_bad_rows=skip"]).benchmark)
    assert tasks
    kinds = {(r.kind, r.reason.split(" (")[0]) for r in bad.rows}
    assert ("too_large", "JSON nested 100,000 levels deep") in kinds
    assert ("too_large", "an integer of 5,000 digits") in kinds


def test_an_empty_page_file_is_an_error(tmp_path):
    from engine.benchmarks.livenews import BENCHMARK

    ov = _livenews_data(tmp_path, "")
    with pytest.raises(BadDataError, match="pages.jsonl: no pages: the offline web is empty"):
        BENCHMARK.load_tasks(compose([*LIVE, *ov]))


@pytest.mark.parametrize("plant", ["folder link", "file link", "fifo"])
def test_a_link_or_fifo_in_analyst_sources_is_a_named_data_error(tmp_path, plant):
    from engine.benchmarks.analyst.data import load_task

    task = tmp_path / "unemployment-brief"
    shutil.copytree(REPO / "engine" / "benchmarks" / "analyst" / "sample_tasks" / "unemployment-brief", task)
    target = task / "sources" / "extra"
    if plant == "folder link":
        os.symlink("/etc", target)
    elif plant == "file link":
        os.symlink(task / "reference.md", target.with_suffix(".md"))
    else:
        os.mkfifo(target.with_suffix(".csv"))
    with pytest.raises(DataError, match=r"sources/extra.*(is a link|not a regular file)"):
        load_task(task)


def test_a_corrupt_shard_is_named_and_repair_moves_it_aside_keeping_every_other_row(tmp_path):
    from engine.benchmarks.newsagent import BENCHMARK

    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    for i in range(3):
        store.write_batch([episode_row("newsagent", episode_id=f"e{i}")], [])
    bad = sorted((tmp_path / "episodes").iterdir())[1]
    bad.write_bytes(bad.read_bytes()[: len(bad.read_bytes()) // 2])       # a torn write
    with pytest.raises(CorruptShard, match=rf"{bad.name}.*cannot be read.*dateline repair {tmp_path}"):
        store.episodes()
    out = run_module("ray_jobs.cli", "repair", str(tmp_path), "--dry-run", timeout=60)
    assert out.returncode == 0 and f"would move {bad}" in out.stdout and bad.exists()
    out = run_module("ray_jobs.cli", "repair", str(tmp_path), timeout=60)
    assert out.returncode == 0 and "1 unreadable shard(s) moved aside" in out.stdout, out.stdout + out.stderr
    assert (tmp_path / "_corrupt" / "episodes" / bad.name).exists() and not bad.exists()
    assert sorted(store.episodes().column("episode_id").to_pylist()) == ["e0", "e2"]
    assert run_module("ray_jobs.cli", "repair", "no/such/dir", timeout=60).returncode == 2


def test_a_refused_driver_writes_nothing_into_the_locked_run_dir(tmp_path):
    from engine.runlock import LOCK_NAME

    p = _holder(tmp_path)
    try:
        out = run_module("ray_jobs.run", "agent=newsagent_rule_based", "benchmark.limit=1", f"run.dir={tmp_path}",
                         "run.progress=false", timeout=120)
        assert out.returncode != 0 and "RunDirLocked" in out.stderr
        assert sorted(x.name for x in tmp_path.iterdir()) == [LOCK_NAME]
        # a sweep too: Hydra's multirun folder is not in the run dir
        out = run_module("ray_jobs.run", "-m", "agent=newsagent_rule_based", "benchmark.limit=1,2",
                         f"run.dir={tmp_path}", "run.progress=false", timeout=120)
        assert out.returncode != 0
        assert sorted(x.name for x in tmp_path.iterdir()) == [LOCK_NAME]
    finally:
        p.kill()
        p.wait()


@pytest.mark.ray
def test_no_secret_is_written_at_rest(tmp_path):
    """model.env values, the API key and a URL's token appear in no file of the run dir (config.json,
    run-*.json, logs, Parquet) nor in Hydra's multirun.yaml; their names stay."""
    secret_env, key, token = "ENVSECRET-3e1f", "KEYSECRET-77aa", "TOKSECRET-0b9c"

    def model(messages, req):
        return "Done.\n```action\ntype: Finish\nx\n```"

    with FakeOpenAI(model) as srv:
        env = {"DATELINE_T_KEY": key, "TMPDIR": str(tmp_path / "tmp")}
        (tmp_path / "tmp").mkdir()
        out = run_module("ray_jobs.run", "-m", *LIVE, "benchmark.limit=1", "agent.max_searches=1,2",
                         "model=openai_compatible", f"model.base_url='{srv.base_url}?token={token}'", "model.name=m",
                         "model.api_key_env=DATELINE_T_KEY", f"+model.env.SOME_SECRET={secret_env}",
                         f"run.dir={tmp_path / 'run'}", "run.progress=false", "cluster.num_cpus=4", env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    files = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    files += [p for p in (tmp_path / "tmp").rglob("multirun.yaml")]
    assert any(p.name == "multirun.yaml" for p in files) and any(p.name == "config.json" for p in files)
    for p in files:
        text = p.read_bytes().decode("utf-8", "replace") if p.suffix != ".parquet" else \
            json.dumps(pq.read_table(p).to_pylist(), default=str)
        for s in (secret_env, key, token):
            assert s not in text, (p, s)
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())["config"]
    assert cfg["model"]["env"] == {"SOME_SECRET": "<redacted>"}
    assert cfg["model"]["base_url"].endswith("/v1?<redacted>")
    assert secret_env not in out.stderr + out.stdout and token not in out.stderr + out.stdout
