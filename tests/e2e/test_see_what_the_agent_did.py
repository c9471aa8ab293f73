"""Issue 22: see what the agent did, and never mistake a failed run for a good one. Real driver
(Hydra, Ray, workers, Parquet) against scripted servers:

* every model call of every episode and judge is stored (prompt messages once each, completion,
  sampling parameters, replica, endpoint, latency, tokens) and reads back as the server saw it;
* ``dateline show`` lists the episodes and prints one transcript; the report links each
  configuration to episode pages (checked in headless Chromium: the first prompt's text and the
  final output are on the page);
* ``dateline run`` exits non-zero with a one-line failure summary when episodes fail (a dead
  endpoint) or the run stops at ``run.max_failures``, 0 when ``run.fail_on_error=false``;
* a healthy run prints no Ray error line and no colour codes when redirected;
* several run dirs make one comparison and a leaderboard; ``dateline export`` writes MLflow's
  file store and W&B's offline files.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from engine.storage import EpisodeStore
from tests.fake_openai import FakeOpenAI
from tests.helpers import REPO, livenews_responder, run_module

pytestmark = pytest.mark.ray

LIVE = ["benchmark=livenews", "agent=livenews", "benchmark.limit=3", "benchmark.judge_probes=false",
        "model=openai_compatible", "model.name=scripted", "model.api_key_env=", "run.progress=false",
        "cluster.num_cpus=4"]


def dateline(*args: str, timeout: float = 600, **kw) -> subprocess.CompletedProcess[str]:
    return run_module("dateline", *args, timeout=timeout, **kw)


@pytest.fixture(scope="module")
def judged_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("seen") / "run"
    with FakeOpenAI(livenews_responder(grade="Buffalo Bills")) as srv:
        out = dateline("run", *LIVE, f"model.base_url={srv.base_url}", "judge=openai_compatible",
                       f"judge.base_url={srv.base_url}", "judge.model=grader", "judge.api_key_env=",
                       f"run.dir={run_dir}")
        requests = list(srv.requests)
    assert out.returncode == 0, out.stderr[-3000:]
    return {"dir": run_dir, "out": out, "requests": requests}


def test_every_model_call_is_stored_once_and_reads_back_as_sent(judged_run):
    store = EpisodeStore(judged_run["dir"])
    eps = store.episodes().to_pylist()
    calls = store.calls([e["episode_id"] for e in eps])
    own = [c for c in calls if c["purpose"] == "episode"]
    judge = [c for c in calls if c["purpose"] == "judge"]
    assert len(own) + len(judge) == len(judged_run["requests"])          # every request the servers got
    assert len(judge) == 3 and {c["key"] for c in judge} == {"grade"} and all(c["judge"] for c in judge)
    msgs = store.messages(m for c in calls for m in c["message_ids"])
    sent = sorted(json.dumps(r["messages"], sort_keys=True) for r in judged_run["requests"])
    stored = sorted(json.dumps([{"role": msgs[m]["role"], "content": msgs[m]["content"]} for m in c["message_ids"]],
                               sort_keys=True) for c in calls)
    assert stored == sent                                                 # the exact prompts, rebuilt
    for c in own:
        p = json.loads(c["params"])
        assert p["max_tokens"] == 512 and "temperature" in p and p["seed"] == 0
        assert c["endpoint"].startswith("http://127.0.0.1:") and c["replica"] == 0 and c["latency_s"] > 0
        assert c["tokens_in"] > 0 and c["tokens_out"] > 0 and c["completion"] and c["finish_reason"] == "stop"
    # the system prompt every episode sends is stored once
    system = [m for m in msgs.values() if m["role"] == "system"]
    assert len(system) == 1
    steps = store.steps().to_pylist()
    assert all(s["call"] >= 0 for s in steps if s["turn"] == "action")


def test_dateline_show_lists_and_prints_a_transcript(judged_run):
    run_dir = judged_run["dir"]
    listing = dateline("show", str(run_dir), timeout=120)
    assert listing.returncode == 0 and "3 episode(s)" in listing.stdout
    eid = EpisodeStore(run_dir).episodes(["episode_id"]).column("episode_id")[0].as_py()
    one = dateline("show", str(run_dir), eid[:10], timeout=120)
    assert one.returncode == 0, one.stderr
    text = one.stdout
    assert "=== call 1" in text and "# Actions you can take" in text and "--- assistant" in text
    assert "=== final output" in text and "=== reference\ngold answer: " in text
    assert "=== judgements" in text and "grade: " in text
    assert dateline("show", str(run_dir), "zzzz", timeout=60).returncode == 2
    task = EpisodeStore(run_dir).episodes(["task_id"]).column("task_id")[0].as_py()
    by_task = dateline("show", str(run_dir), task, timeout=120)           # a task id picks its one episode
    assert by_task.returncode == 0 and "=== call 1" in by_task.stdout, by_task.stderr


def test_the_report_links_every_configuration_to_episode_pages(judged_run, tmp_path):
    from tests.browser import Browser

    run_dir = judged_run["dir"]
    rep = dateline("report", str(run_dir), "--out", str(tmp_path / "rep"), "--boot", "50", timeout=300)
    assert rep.returncode == 0, rep.stderr[-2000:]
    store = EpisodeStore(run_dir)
    eid = sorted(store.episodes(["episode_id"]).column("episode_id").to_pylist())[0]
    (row,) = store.episodes(episode_ids=[eid]).to_pylist()
    first = store.messages(store.calls([eid], "episode")[0]["message_ids"])
    first_prompt = next(m["content"] for m in first.values() if m["role"] == "system")
    with Browser() as b:
        index = b.click(b.open(tmp_path / "rep" / "report.html"), "3 episodes")
        assert "Episodes: scripted" in index.text and "error kind" in index.text
        page = b.click(index, eid[:16])
        assert first_prompt.splitlines()[0] in page.text and row["output"] in page.text
        assert "Judge verdicts" in page.text and "Metrics (judge" in page.text
        shots = [b.screenshot(tmp_path / "rep" / "report.html", tmp_path / "report.png", full_page=True),
                 b.screenshot(page, tmp_path / "episode.png", full_page=True)]
    assert all(s.stat().st_size > 10_000 for s in shots)
    if os.environ.get("DATELINE_SCREENSHOTS"):
        for s in shots:
            shutil.copy(s, Path(os.environ["DATELINE_SCREENSHOTS"]) / s.name)


def test_a_healthy_run_prints_no_ray_error_and_no_colour_when_redirected(judged_run):
    out = judged_run["out"]
    assert "\x1b[" not in out.stderr and "\x1b[" not in out.stdout
    assert "constructor arguments in the object store" not in out.stderr
    assert not re.search(r"^\[?\d{4}-\d\d-\d\d .*\bE\b|core_worker.*ERROR|\(raylet\).*error", out.stderr, re.M), \
        out.stderr[-3000:]
    assert "accuracy" in out.stdout                       # results on stdout ...
    assert "episodes planned" in out.stderr               # ... logs on stderr


def _dead_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_a_run_against_a_dead_endpoint_exits_non_zero_naming_it(tmp_path):
    url = f"http://127.0.0.1:{_dead_port()}/v1"
    out = dateline("run", *LIVE, f"model.base_url={url}", "model.max_retries=0", "model.max_retries_per_episode=0",
                   f"run.dir={tmp_path / 'dead'}")
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("dateline run: 3 of 3 episodes failed (3 x GenerationError: APIConnectionError)")
    assert "run.retry_failed=true" in last
    assert "FAILURES: 3 of 3 planned episodes" in out.stdout and f"127.0.0.1:{url.split(':')[2].split('/')[0]}" in out.stdout
    # expected failures (a sweep): fail_on_error=false keeps 0, the summary still lists them
    ok = dateline("run", *LIVE, f"model.base_url={url}", "model.max_retries=0", "run.fail_on_error=false",
                  f"run.dir={tmp_path / 'dead'}")
    assert ok.returncode == 0 and "FAILURES" in ok.stdout
    # the report's failure section: the kind, its count, an example linked to its episode page
    from tests.browser import Browser

    rep = dateline("report", str(tmp_path / "dead"), "--out", str(tmp_path / "rep"), "--boot", "20", timeout=300)
    assert rep.returncode == 0, rep.stderr[-2000:]
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "### Failures" in md and "| GenerationError: APIConnectionError | error | 3 |" in md
    with Browser() as b:
        report = b.open(tmp_path / "rep" / "report.html")
        example = next(t for t, _ in b.links(report) if re.fullmatch(r"[0-9a-f]{16}", t))
        page = b.click(report, example)
    assert f"endpoint scripted at {url}".rsplit("/v1", 1)[0] in page.text and "APIConnectionError" in page.text
    # a run stopped at run.max_failures exits non-zero too
    stop = dateline("run", *LIVE[:2], "benchmark.limit=6", *LIVE[3:], f"model.base_url={url}", "model.max_retries=0",
                    "run.max_failures=1", "cluster.episodes_per_worker=1", "run.fail_on_error=false",
                    f"run.dir={tmp_path / 'stop'}")
    assert stop.returncode == 1 and "stopped at run.max_failures=1" in stop.stderr


def test_several_run_dirs_make_one_comparison_and_a_leaderboard(tmp_path):
    with FakeOpenAI(livenews_responder(grade="Buffalo Bills")) as srv:
        for name, budget in (("a", 1), ("b", 3)):
            out = dateline("run", *LIVE, f"model.base_url={srv.base_url}", "judge=self", f"agent.max_searches={budget}",
                           f"run.dir={tmp_path / name}")
            assert out.returncode == 0, out.stderr[-2000:]
    rep = dateline("report", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "rep"), "--boot", "50",
                   "--episodes", "0", timeout=300)
    assert rep.returncode == 0, rep.stderr[-2000:]
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "livenews across 2 run dirs" in md and "Leaderboard by accuracy" in md
    board = (tmp_path / "rep" / "leaderboard.md").read_text()
    # one self-judged board (judge=self in both dirs: one judge); equal values share a rank
    accuracy = board.split("## Leaderboard by accuracy", 1)[1].split("\n## ", 1)[0]
    assert accuracy.count("| #1") == 2 and str(tmp_path / "a") in accuracy and str(tmp_path / "b") in accuracy
    assert "SELF-JUDGED" in board


def test_export_to_mlflow_and_wandb_offline(judged_run, tmp_path, monkeypatch):
    uri = (tmp_path / "mlruns").as_uri()
    out = dateline("export", str(judged_run["dir"]), "--to", "mlflow", "--tracking-uri", uri, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "mlflow" in out.stdout and "transcripts" in out.stdout
    import mlflow

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")      # reading the file store back here

    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["dateline"], output_format="list")
    (judged,) = runs                          # the one configuration, as its judge scored it
    assert judged.data.params["judge"].startswith("grader:") and judged.data.metrics["n_scored"] == 3
    assert judged.data.metrics["accuracy"] == pytest.approx(1.0) and "accuracy.n" in judged.data.metrics
    arts = {a.path for a in mlflow.MlflowClient().list_artifacts(judged.info.run_id, "transcripts")}
    assert arts == {"transcripts/calls.parquet", "transcripts/messages.parquet"}

    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(tmp_path / "wb")}
    out = dateline("export", str(judged_run["dir"]), "--to", "wandb", "--dir", str(tmp_path / "wb"), env=env,
                   timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    offline = list((tmp_path / "wb").rglob("offline-run-*"))
    assert len(offline) == 1 and all(list(d.rglob("*.wandb")) for d in offline)


def test_the_cli_behaves(tmp_path, monkeypatch):
    """argparse subcommands: their own --help, --version, python -m dateline; read-only commands
    create nothing at a wrong path; dateline's errors are one line, status 2."""
    monkeypatch.chdir(tmp_path)
    before = set(os.listdir(tmp_path))
    for args in (["tables", "--help"], ["metrics", "--help"], ["show", "--help"], ["run", "--help"]):
        out = subprocess.run([sys.executable, "-m", "dateline", *args], capture_output=True, text=True, timeout=120,
                             cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert out.returncode == 0 and "usage: dateline" in out.stdout, (args, out.stderr[-500:])
    run_help = out.stdout
    assert "Config groups" in run_help and "model.request_timeout_s" in run_help and "Per-request timeout" in run_help
    assert "_schema" not in run_help
    for args, line in ((["metrics", "runs/typo", "newsagent"], "no run dir at runs/typo"),
                       (["tables", "runs/typo"], "no run dir at runs/typo"),
                       (["show", "runs/typo"], "no run dir at runs/typo"),
                       (["report", "missing/"], "no run dir here")):
        out = subprocess.run([sys.executable, "-m", "dateline", *args], capture_output=True, text=True, timeout=120,
                             cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert out.returncode == 2 and line in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert set(os.listdir(tmp_path)) == before                # nothing created
    v = subprocess.run([sys.executable, "-m", "dateline", "--version"], capture_output=True, text=True, timeout=60,
                       cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert v.returncode == 0 and re.match(r"dateline \d+\.\d+", v.stdout)
    bad = subprocess.run([sys.executable, "-m", "dateline", "run", "agent=newsagent_rule_based", "run.max_failures=-1",
                          f"run.dir={tmp_path / 'r'}"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1] == \
        "dateline run: ConfigError: run.max_failures: must be >= 0 (0: never stop), got -1"
    assert "Traceback" not in bad.stderr
