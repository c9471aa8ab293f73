"""Issue 21, part 5 and 6: config ranges, hostile input files, corrupt shards, a refused driver,
and secrets at rest. Every case names the field or the file, nothing is lost silently, and no
value of ``model.env``, no API key and no URL token is written anywhere in a run dir. Issue 30
("names are data"): links, hard links and names that are not UTF-8 anywhere in an analyst task
folder, dates far in the future, ids that are not UTF-8 text."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from engine.errors import BadDataError, ConfigError, CorruptShard, DataError
from engine.storage import EpisodeStore
from ray_jobs.config.compose import compose
from tests.engine.runtime.test_runlock import _holder
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
    from engine.inputs.quarantine import collecting

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


# -- issue 30, "names are data": the whole analyst task folder, not only sources/ ------------------

def _task(tmp_path: Path) -> Path:
    task = tmp_path / "tasks" / "unemployment-brief"
    shutil.copytree(REPO / "engine" / "benchmarks" / "analyst" / "sample_tasks" / "unemployment-brief", task)
    return task


def _outside(tmp_path: Path, name: str = "outside.md") -> Path:
    out = tmp_path / name
    out.write_text("# Not the task's\nsecret\n")
    return out


def _relink(p: Path, target: Path) -> None:
    """``p`` made a link to ``target`` (a copy of it when ``target`` is new): same bytes, elsewhere."""
    if not target.exists():
        shutil.copy(p, target)
    p.unlink()
    os.symlink(target, p)


def _bytes_name(folder: Path, name: bytes, text: str = "# Chart\n") -> Path:
    """A file named by raw bytes (b'chart\\xff.md'), as Python names it (surrogateescape)."""
    path = os.fsencode(folder) + b"/" + name
    with open(path, "wb") as f:
        f.write(text.encode())
    return Path(os.fsdecode(path))


def _plant_hard_link_reference(task: Path, tmp_path: Path) -> Path:
    os.link(task / "reference.md", tmp_path / "elsewhere.md")    # its bytes have a name outside the folder
    return task / "reference.md"


def _plant_hard_linked_source(task: Path, tmp_path: Path) -> Path:
    os.link(_outside(tmp_path), task / "sources" / "extra.md")
    return task / "sources" / "extra.md"


def _plant_link(name: str) -> Callable[[Path, Path], Path]:
    def plant(task: Path, tmp_path: Path) -> Path:
        if (task / name).exists():
            _relink(task / name, tmp_path / f"copy-of-{name}")
        else:                                                      # an optional file (toc.md)
            os.symlink(_outside(tmp_path), task / name)
        return task / name
    return plant


def _plant_fifo_toc(task: Path, tmp_path: Path) -> Path:
    os.mkfifo(task / "toc.md")                                    # read as "no toc" before: a FIFO is not a file
    return task / "toc.md"


def _plant_bad_name_source(task: Path, tmp_path: Path) -> Path:
    return _bytes_name(task / "sources", b"chart\xff.md")


def _plant_bad_name_folder(task: Path, tmp_path: Path) -> Path:
    d = Path(os.fsdecode(os.fsencode(task) + b"/notes\xfe"))
    d.mkdir()
    return d


def _plant_linked_sources_subfolder(task: Path, tmp_path: Path) -> Path:
    (tmp_path / "other").mkdir()
    _outside(tmp_path / "other", "more.md")
    os.symlink(tmp_path / "other", task / "sources" / "more")
    return task / "sources" / "more"


@pytest.mark.parametrize("plant,kind", [
    (_plant_link("task.json"), "unsafe_name"),
    (_plant_link("reference.md"), "unsafe_name"),
    (_plant_link("checklist.json"), "unsafe_name"),
    (_plant_link("toc.md"), "unsafe_name"),
    (_plant_linked_sources_subfolder, "unsafe_name"),
    (_plant_hard_link_reference, "unsafe_name"),
    (_plant_hard_linked_source, "unsafe_name"),
    (_plant_fifo_toc, "unsupported_file"),
    (_plant_bad_name_source, "bad_utf8"),
    (_plant_bad_name_folder, "bad_utf8"),
], ids=["task.json link", "reference.md link", "checklist.json link", "toc.md link", "sources subfolder link",
        "hard-linked reference.md", "hard-linked source", "toc.md fifo", "source name not utf-8",
        "folder name not utf-8"])
def test_every_entry_of_an_analyst_task_folder_is_checked_naming_it(tmp_path, plant, kind):
    """Issue 30: links, hard links and names that are not UTF-8 anywhere in the task folder (not
    only in sources/) are refused, each a BadDataError of its kind naming the entry."""
    from engine.benchmarks.analyst.data import load_task

    task = _task(tmp_path)
    bad = plant(task, tmp_path)
    with pytest.raises(BadDataError) as e:
        load_task(task)
    assert (e.value.kind, Path(e.value.path)) == (kind, bad), str(e.value)
    if kind == "bad_utf8":
        assert "\\x" in str(e.value) and "the name is not UTF-8" in str(e.value)


def test_a_linked_task_folder_is_refused_not_walked(tmp_path):
    from engine.benchmarks.analyst.data import load_task, load_tasks

    task = _task(tmp_path)
    link = tmp_path / "tasks" / "linked-brief"
    os.symlink(task, link)
    with pytest.raises(BadDataError, match="is a link") as e:
        load_task(link)
    assert (e.value.kind, Path(e.value.path)) == ("unsafe_name", link)
    with pytest.raises(BadDataError, match="linked-brief: is a link"):
        load_tasks(tmp_path / "tasks")


def test_a_task_folder_whose_name_is_not_utf8_is_quarantined_under_skip(tmp_path):
    """With on_bad_rows=skip the folder is dropped, and its quarantine row (whose file and raw
    row hold the name) is written to the run dir like any other."""
    from engine.benchmarks.analyst.data import load_tasks
    from engine.inputs.quarantine import Quarantine
    from engine.storage import read_quarantine, write_quarantine

    tasks = _task(tmp_path).parent
    bad_folder = Path(os.fsdecode(os.fsencode(tasks) + b"/brief\xff"))
    shutil.copytree(tasks / "unemployment-brief", bad_folder)
    bad = Quarantine()
    assert [t.task_id for t in load_tasks(tasks, bad=bad)] == ["unemployment-brief"]
    assert [(r.kind, Path(r.file)) for r in bad.rows] == [("bad_utf8", bad_folder)]
    write_quarantine(EpisodeStore(tmp_path / "run"), bad.rows)
    (row,) = read_quarantine(EpisodeStore(tmp_path / "run")).to_pylist()
    assert row["file"].endswith("brief\\xff") and row["kind"] == "bad_utf8"


def test_copy_sources_checks_again_what_changed_since_the_task_loaded(tmp_path, monkeypatch):
    from engine.benchmarks.analyst import data

    task = _task(tmp_path)
    data.load_task(task)
    os.link(_outside(tmp_path), task / "sources" / "late.md")      # planted after the load
    with pytest.raises(BadDataError, match="late.md: is a hard link"):
        data.copy_sources(task / "sources", tmp_path / "ep1")
    assert not (tmp_path / "ep1" / "late.md").exists()
    (task / "sources" / "late.md").unlink()
    # swapped between the walk and the open: a file for a link, a file for a hard link
    listed = data._entries(task / "sources")
    monkeypatch.setattr(data, "_entries", lambda src: listed)
    victim = listed[0]
    _relink(victim, _outside(tmp_path, "swapped.md"))
    with pytest.raises(BadDataError, match="became a link") as e:
        data.copy_sources(task / "sources", tmp_path / "ep2")
    assert e.value.kind == "unsafe_name" and Path(e.value.path) == victim
    victim.unlink()
    shutil.copy(tmp_path / "swapped.md", victim)
    os.link(victim, tmp_path / "second-name.md")
    with pytest.raises(BadDataError, match="is a hard link") as e:
        data.copy_sources(task / "sources", tmp_path / "ep3")
    assert Path(e.value.path) == victim


@pytest.mark.slow
def test_an_episode_whose_row_was_set_aside_is_counted_by_the_run_summary_and_dateline_show(tmp_path):
    """Issue 30: a row the store writer cannot encode is quarantined, not lost from view: the run's
    FAILURES lines count it with its reason, and ``dateline show`` lists it under the table."""
    from types import SimpleNamespace

    from engine.benchmarks.newsagent import BENCHMARK
    from ray_jobs.run import failure_summary, failures

    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    store.write_batch([episode_row("newsagent", episode_id=f"e{i}", config_hash="c",
                                   **({"n_search": "three"} if i == 1 else {})) for i in range(3)], [])
    plan = SimpleNamespace(specs=[SimpleNamespace(episode_id=f"e{i}") for i in range(3)], config_hash="c")
    f = failures(SimpleNamespace(plan=plan, store=store, info={}, uses_model=False))
    assert f["set_aside"] == 1 and "episode e1: field n_search cannot be stored" in f["set_aside_example"]
    text = failure_summary(f)
    assert text.startswith("FAILURES: 1 of 3 planned") and "1 x not stored" in text and "RUN_DIR/quarantine" in text
    out = run_module("ray_jobs.cli.main", "show", str(tmp_path), timeout=60)
    assert out.returncode == 0 and "2 episode(s)" in out.stdout, out.stderr[-2000:]
    assert "1 more ran but could not be stored" in out.stdout and "field n_search" in out.stdout
    store.write_batch([episode_row("newsagent", episode_id="e1", config_hash="c")], [])     # a re-run stores it
    assert failures(SimpleNamespace(plan=plan, store=store, info={}, uses_model=False))["set_aside"] == 0


# -- issue 30: a release date in 2150 is not news ----------------------------------------------------

def _newsagent(tmp_path: Path, edit: Callable[[list[dict], list[dict]], None]) -> Path:
    src = REPO / "engine" / "benchmarks" / "newsagent" / "sample_data"
    d = tmp_path / "data"
    d.mkdir()
    rows = {n: [json.loads(x) for x in (src / n).read_text().splitlines() if x.strip()]
            for n in ("objects.jsonl", "tasks.jsonl")}
    edit(rows["objects.jsonl"], rows["tasks.jsonl"])
    for n, rs in rows.items():
        (d / n).write_text("".join(json.dumps(r) + "\n" for r in rs))
    return d


def _ahead(days: int) -> str:
    import datetime as dt

    return (dt.date.today() + dt.timedelta(days=days)).isoformat()


@pytest.mark.parametrize("file,field,value", [
    ("tasks.jsonl", "release_date", "2150-01-01"),
    ("tasks.jsonl", "release_date", "ahead:367"),     # resolved when the test runs, not when it is collected
    ("objects.jsonl", "date", "2199-12-31"),
    ("objects.jsonl", "date", "1799-12-31"),
])
def test_a_date_far_in_the_future_or_past_is_refused_naming_file_row_and_field(tmp_path, file, field, value):
    from engine.benchmarks.newsagent.data import load_dataset

    if value.startswith("ahead:"):       # a suite collected before midnight runs this after it
        value = _ahead(int(value.removeprefix("ahead:")))

    def edit(objects, tasks):
        (objects if file == "objects.jsonl" else tasks)[1][field] = value

    d = _newsagent(tmp_path, edit)
    with pytest.raises(BadDataError) as e:
        load_dataset(d)
    assert (e.value.kind, Path(e.value.path), e.value.row, e.value.field) == ("date_out_of_range", d / file, 2, field)


def test_a_date_within_a_year_from_today_still_loads(tmp_path):
    from engine.benchmarks.newsagent.data import load_dataset

    def edit(objects, tasks):
        tasks[1]["release_date"] = _ahead(300)

    assert len(load_dataset(_newsagent(tmp_path, edit)).tasks) >= 2


def test_an_id_holding_a_lone_surrogate_is_an_unsafe_name(tmp_path):
    """A JSON "\\udcff" escape decodes to a lone surrogate: an id no file name, key or stored row
    can hold as itself (stored escaped, it would no longer match its own tasks)."""
    from engine.benchmarks.newsagent.data import load_dataset

    def edit(objects, tasks):
        tasks[1]["task_id"] = "task\udcff"

    d = _newsagent(tmp_path, edit)
    with pytest.raises(BadDataError, match="lone surrogate") as e:
        load_dataset(d)
    assert (e.value.kind, e.value.row, e.value.field) == ("unsafe_name", 2, "task_id")


@pytest.mark.slow
def test_a_corrupt_shard_is_named_and_repair_moves_it_aside_keeping_every_other_row(tmp_path):
    from engine.benchmarks.newsagent import BENCHMARK

    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    for i in range(3):
        store.write_batch([episode_row("newsagent", episode_id=f"e{i}")], [])
    bad = sorted((tmp_path / "episodes").iterdir())[1]
    bad.write_bytes(bad.read_bytes()[: len(bad.read_bytes()) // 2])       # a torn write
    with pytest.raises(CorruptShard, match=rf"{bad.name}.*cannot be read.*dateline repair {tmp_path}"):
        store.episodes()
    out = run_module("ray_jobs.cli.main", "repair", str(tmp_path), "--dry-run", timeout=60)
    assert out.returncode == 0 and f"would move {bad}" in out.stdout and bad.exists()
    out = run_module("ray_jobs.cli.main", "repair", str(tmp_path), timeout=60)
    assert out.returncode == 0 and "1 unreadable shard(s) moved aside" in out.stdout, out.stdout + out.stderr
    assert (tmp_path / "_corrupt" / "episodes" / bad.name).exists() and not bad.exists()
    assert sorted(store.episodes().column("episode_id").to_pylist()) == ["e0", "e2"]
    assert run_module("ray_jobs.cli.main", "repair", "no/such/dir", timeout=60).returncode == 2


@pytest.mark.slow
def test_a_refused_driver_writes_nothing_into_the_locked_run_dir(tmp_path):
    from engine.runtime.runlock import LOCK_NAME

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
