"""Issue 20: every published number says what it is over. Each test runs the real driver (Hydra
config, Ray, episode workers, the judge stage, Parquet) against scripted OpenAI-compatible servers
and checks the number the paper's definition gives on the store it wrote:

* livenews, 6 questions: 2 correct, 1 error (retries exhausted), 1 budget stop, 1 ungraded, 1
  wrong: accuracy 2/6, every count on every row, the configuration marked incomplete in the
  summary, ``dateline tables`` and the HTML report (headless Chromium, screenshot);
* a budget sweep whose points finish different tasks, and points planned with different
  ``benchmark.limit``: tables compare them on the tasks all of them finished and say how many
  were dropped;
* a resumed run under another engine (``engine_args``, weights content, ``reproducible``) is
  refused naming the field;
* a changed evaluation setting re-judges on the next run and never mixes with the old verdicts;
* no judge by default (no accuracy, "ungraded: name a judge", exit 0); ``judge=self`` is flagged;
* ``num_seeds=2`` sends a distinct seed per episode to the engine.

The analyst cases (unparsed claim verdicts, an unrated criterion) are in
tests/e2e/test_analyst_numbers.py; the newsagent context overflow in test_newsagent_rejected.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from engine.benchmarks.livenews import BENCHMARK as LIVE
from engine.storage import EpisodeStore
from ray_jobs.cluster.session import Session
from ray_jobs.config.compose import compose
from ray_jobs.run import reduce_metrics, run_sweep, summary
from tests.fake_openai import FakeOpenAI
from tests.helpers import REPO, run_module

pytestmark = pytest.mark.ray

FINISH = "Done.\n```action\ntype: Finish\n{}\n```"


def questions(n: int) -> list[str]:
    return [t.question.question for t in _tasks(n)]


def task_ids(n: int) -> list[str]:
    return [t.task_id for t in _tasks(n)]


def _tasks(n: int) -> list:
    return LIVE.load_tasks(compose(["benchmark=livenews", "agent=livenews", f"benchmark.limit={n}"]))


def which(messages: list[dict], qs: list[str]) -> int:
    text = "\n".join(str(m["content"]) for m in messages)
    return next(i for i, q in enumerate(qs) if q in text)


def grader(messages: list[dict], req: dict) -> str:
    """The scripted judge: A for answers containing RIGHT, B for WRONG, prose (malformed) else."""
    answer = messages[0]["content"].split("Predicted answer: ", 1)[1].split("\n", 1)[0]
    return "A" if "RIGHT" in answer else "B" if "WRONG" in answer else "I would rather not say."


def live_cfg(model_url: str, run_dir: Path, *extra: str):
    return compose(["benchmark=livenews", "agent=livenews", "model=openai_compatible", f"model.base_url={model_url}",
                    "model.name=scripted", "model.api_key_env=", "model.max_retries=1", "model.retry_backoff_s=0.01",
                    "model.retry_backoff_max_s=0.02", f"run.dir={run_dir}", "run.progress=false",
                    "run.flush_interval_s=0", "cluster.num_cpus=4", "benchmark.judge_probes=false", *extra])


def judged(judge_url: str) -> list[str]:
    return ["judge=openai_compatible", f"judge.base_url={judge_url}", "judge.model=grader", "judge.api_key_env=",
            "judge.max_attempts=2"]


def sweep(cfgs: list) -> list[dict]:
    session = Session()
    try:
        return run_sweep(cfgs, session)
    finally:
        session.close()


def q2_fails_at_3_searches(qs: list[str]):
    """The scripted model of the common-task sweeps: RIGHT on even questions, WRONG on odd ones,
    and the 3-search point's call for q2 fails (500) until retries run out."""
    def model(messages, req):
        i = which(messages, qs)
        if i == 2 and "up to 3 searches" in messages[0]["content"]:
            return 500, "engine failed"
        return FINISH.format("RIGHT" if i % 2 == 0 else "WRONG")

    return model


def metric(rows: list[dict], name: str, scope: str = "all", **where: str) -> dict:
    (r,) = [r for r in rows if r["metric"] == name and r["scope"] == scope
            and all(r[k] == v for k, v in where.items())]
    return r


def test_failures_and_budget_stops_stay_in_the_denominator(tmp_path):
    """2 correct of 6 planned is 2/6, not 2/4: the error (retries exhausted) and the budget stop are
    failures, the ungraded answer is not correct, and every row says what it is over."""
    qs = questions(6)
    # by question: an error first (it spends nothing), four answers, then the budget stops the last
    script = {0: None, 1: "RIGHT one", 2: "RIGHT two", 3: "WRONG", 4: "MUMBLE", 5: "RIGHT six"}

    def model(messages, req):
        answer = script[which(messages, qs)]
        return (500, "engine failed") if answer is None else FINISH.format(answer)

    # completion tokens (the scripted server counts words): 7, 7, 6, 6 for the four answers; each
    # call reserves max_tokens_turn=100, so a cap of 26 + 99 admits every call of the first five
    # episodes (one at a time) and refuses the sixth's
    cap = sum(len(FINISH.format(script[i]).split()) for i in (1, 2, 3, 4)) + 99
    with FakeOpenAI(model) as m, FakeOpenAI(grader) as j:
        (info,) = sweep([live_cfg(m.base_url, tmp_path, "benchmark.limit=6", "agent.max_tokens_turn=100",
                                  "cluster.num_workers=1", "cluster.episodes_per_worker=1",
                                  f"run.budget.max_output_tokens={cap}", "model.price_output_per_mtok=1",
                                  *judged(j.base_url))])
    store = EpisodeStore(tmp_path, LIVE.episode_fields)
    ids = task_ids(6)
    status = {ids.index(e["task_id"]): e["status"] for e in store.episodes().to_pylist()}
    assert status == {0: "error", 1: "ok", 2: "ok", 3: "ok", 4: "ok", 5: "budget_exhausted"}, status
    # judged by a judge actor off the driver, each judgement stamped with its configuration
    assert info["judge"]["actors"] == 1 and info["judge"]["episodes"] == 4
    assert {r["config_hash"] for r in store.judgement_rows(["config_hash"])} == {info["config_hash"]}

    rows = store.metrics().to_pylist()
    acc = metric(rows, "accuracy")
    assert (acc["value"], acc["n"]) == (pytest.approx(2 / 6), 6)                 # the paper's definition
    assert {k: acc[k] for k in ("n_planned", "n_scored", "n_error", "n_budget_stopped", "n_not_run")} == \
        {"n_planned": 6, "n_scored": 4, "n_error": 1, "n_budget_stopped": 1, "n_not_run": 0}
    assert acc["incomplete"] and acc["score_failures"] == "as_wrong"
    assert metric(rows, "ungraded")["value"] == pytest.approx(1 / 6)
    assert all(r["n_planned"] == 6 and r["incomplete"] for r in rows)            # on every row
    text = summary(rows, info["config_hash"])
    assert "INCOMPLETE: 4 of 6 scored (1 error, 1 budget-stopped)" in text

    # excluding failures is an explicit choice, and it is still marked
    ex = reduce_metrics(store, "livenews", score_failures="exclude")
    acc = metric(ex, "accuracy")
    assert (acc["value"], acc["n"], acc["incomplete"]) == (0.5, 4, True)
    reduce_metrics(store, "livenews")

    tables = run_module("ray_jobs.cli.main", "tables", str(tmp_path), timeout=120)
    assert tables.returncode == 0, tables.stderr
    assert "4/6 INCOMPLETE (1 error, 1 budget-stopped)" in tables.stdout
    assert "INCOMPLETE: scripted" in tables.stdout and "33.3" in tables.stdout

    # the HTML report, as a reader sees it in a browser
    from tests.browser import Browser

    rep = run_module("ray_jobs.cli.main", "report", str(tmp_path), "--out", str(tmp_path / "report"), "--boot", "50",
                     timeout=300)
    assert rep.returncode == 0, rep.stderr[-3000:]
    with Browser() as b:
        text = b.render(tmp_path / "report" / "report.html")
        shot = b.screenshot(tmp_path / "report" / "report.html", tmp_path / "report-incomplete.png", full_page=True)
    assert "INCOMPLETE" in text and "budget-stopped" in text and "engine failed" in text
    assert re.search(r"accuracy\s+0\.333", text), text[:3000]
    assert shot.stat().st_size > 10_000
    if os.environ.get("DATELINE_SCREENSHOTS"):           # for the notes
        shutil.copy(shot, Path(os.environ["DATELINE_SCREENSHOTS"]) / "report-incomplete.png")


def test_compared_configurations_cover_the_same_tasks(tmp_path):
    """A sweep whose points finish different tasks (an error in one point only), and a point
    planned with another benchmark.limit: the comparison is on the tasks every configuration
    finished, and says how many were dropped."""
    with FakeOpenAI(q2_fails_at_3_searches(questions(6))) as m, FakeOpenAI(grader) as j:
        cfgs = [live_cfg(m.base_url, tmp_path, f"agent.max_searches={b}", "benchmark.limit=6", *judged(j.base_url))
                for b in (1, 3)]
        cfgs.append(live_cfg(m.base_url, tmp_path, "agent.max_searches=5", "benchmark.limit=4", *judged(j.base_url)))
        infos = sweep(cfgs)
    rows = EpisodeStore(tmp_path, LIVE.episode_fields).metrics().to_pylist()
    h1, h3, h5 = (i["config_hash"] for i in infos)
    # each over its own plan: the failure counts as wrong in its own configuration only
    assert metric(rows, "accuracy", config_hash=h1)["value"] == pytest.approx(3 / 6)
    assert metric(rows, "accuracy", config_hash=h3)["value"] == pytest.approx(2 / 6)
    assert metric(rows, "accuracy", config_hash=h5)["value"] == pytest.approx(2 / 4)
    # the task sets differ (limit is part of it), and the comparison is on the 3 tasks all finished:
    # questions 0, 1, 3 (2 failed in one point, 4 and 5 were not planned for the last)
    assert len({metric(rows, "accuracy", config_hash=h)["task_set"] for h in (h1, h3, h5)}) == 2
    for h in (h1, h3, h5):                     # 0 right, 1 and 3 wrong in every configuration
        c = metric(rows, "accuracy", "common", config_hash=h)
        assert (c["value"], c["n"]) == (pytest.approx(1 / 3), 3)
    assert metric(rows, "accuracy", "common", config_hash=h1)["tasks_dropped"] == 3
    assert metric(rows, "accuracy", "common", config_hash=h5)["tasks_dropped"] == 1
    out = run_module("ray_jobs.cli.main", "tables", str(tmp_path), timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Computed on the 3 task(s) every one of the 3 compared configurations finished; 3 task(s) dropped" \
        in out.stdout
    table3 = out.stdout.split("livenews table3")[1]
    assert "| 33.3 | 33.3 | 33.3 |" in table3 and "INCOMPLETE" in out.stdout
    every = run_module("ray_jobs.cli.main", "tables", str(tmp_path), "--all-tasks", timeout=120)
    assert "Each configuration over its own plan" in every.stdout
    assert "| 50.0 | 33.3 | 50.0 |" in every.stdout.split("livenews table3")[1]


def test_a_resumed_run_under_another_engine_is_refused(tmp_path):
    """The episode id hashes the weights (path + content fingerprint), engine args, reproducible
    mode and prompt version; resuming a configuration under another one is refused, naming the
    field. Hosted model: the fake vLLM server on a weights folder of its own."""
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "config.json").write_text('{"architectures": ["Fake"]}')
    (weights / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      " + b"\x01" * 300_000)
    base = ["benchmark=livenews", "agent=livenews", "benchmark.limit=2", "benchmark.judge_probes=false",
            f"model.path={weights}", "model.name=fake-hosted", "model.served_name=fake-hosted",
            "model.server_module=tests.fake_vllm_server", "model.startup_timeout_s=120", "model.num_cpus=0.5",
            f"+model.env.PYTHONPATH={REPO}", "+model.env.FAKE_VLLM_RESPONDER=tests.helpers:livenews_script",
            f"run.dir={tmp_path / 'run'}", "run.progress=false", "cluster.num_cpus=4"]
    first = run_module("ray_jobs.run", *base, timeout=600)
    assert first.returncode == 0, first.stderr[-4000:]

    def refused(*change: str) -> str:
        out = run_module("ray_jobs.run", *base, *change, timeout=120)
        assert out.returncode != 0, out.stdout[-2000:]
        return out.stderr

    from engine.hosting.machine import detect, native_bf16

    other = "float32" if native_bf16(detect()) else "bfloat16"      # not the dtype derived on this machine
    err = refused(f"++model.engine_args.dtype={other}")
    assert "model.engine_args.dtype" in err and "One configuration never mixes two engines" in err
    assert "model.reproducible" in refused("model.reproducible=true")
    (weights / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      " + b"\x02" * 300_000)
    assert "model.path (the weights' content)" in refused()
    assert not list((tmp_path / "run").glob("episodes/*")) or len(EpisodeStore(tmp_path / "run").episodes()) == 2


def test_a_changed_evaluation_setting_judges_again_and_never_mixes(tmp_path):
    qs = questions(3)

    def model(messages, req):
        return FINISH.format("RIGHT" if which(messages, qs) != 1 else "WRONG")

    with FakeOpenAI(model) as m, FakeOpenAI(grader) as j:
        first = sweep([live_cfg(m.base_url, tmp_path, "benchmark.limit=3", *judged(j.base_url))])[0]
        asked = len(j.requests)
        second = sweep([live_cfg(m.base_url, tmp_path, "benchmark.limit=3", "benchmark.judge_probes=true",
                                 *judged(j.base_url))])[0]
    assert first["config_hash"] == second["config_hash"] and second["episodes_skipped"] == 3   # nothing re-run
    assert asked == 3 and len(j.requests) > asked + 3       # every grade asked again, and the probes
    store = EpisodeStore(tmp_path, LIVE.episode_fields)
    judges = store.judges()
    assert len(judges) == 2 and {json.loads(v["evaluation"])["judge_probes"] for v in judges.values()} == {False, True}
    rows = store.metrics().to_pylist()
    by = {r["judge"]: {x["metric"] for x in rows if x["judge"] == r["judge"]} for r in rows}
    # each set of numbers comes from one setting's verdicts: probes only where they were asked
    assert sorted("judge_probe_gold_ok" in v for v in by.values()) == [False, True]
    assert [metric(rows, "accuracy", judge=k)["value"] for k in by] == [pytest.approx(2 / 3)] * 2


def test_no_judge_by_default_and_self_judging_only_when_asked(tmp_path):
    qs = questions(2)

    def model(messages, req):
        if "Gold target:" in messages[0]["content"]:                 # asked to grade: it says correct
            return "A"
        return FINISH.format("RIGHT")

    with FakeOpenAI(model) as m:
        base = ["benchmark=livenews", "agent=livenews", "benchmark.limit=2", "model=openai_compatible",
                f"model.base_url={m.base_url}", "model.name=scripted", "model.api_key_env=", "run.progress=false",
                "benchmark.judge_probes=false", "cluster.num_cpus=4"]
        plain = run_module("ray_jobs.run", *base, f"run.dir={tmp_path / 'a'}", timeout=600)
        assert plain.returncode == 0, plain.stderr[-3000:]
        assert "ungraded: name a judge" in plain.stdout
        assert not any("Gold target:" in r["messages"][0]["content"] for r in m.requests)   # nobody graded
        rows = EpisodeStore(tmp_path / "a").metrics().to_pylist()
        assert "accuracy" not in {r["metric"] for r in rows} and rows
        selfj = run_module("ray_jobs.run", *base, f"run.dir={tmp_path / 'b'}", "judge=self", timeout=600)
        assert selfj.returncode == 0, selfj.stderr[-3000:]
    assert "**SELF-JUDGED**" in selfj.stdout
    acc = metric(EpisodeStore(tmp_path / "b").metrics().to_pylist(), "accuracy")
    assert acc["self_judged"] and acc["value"] == 1.0
    assert len(qs) == 2
    # an episode's values through its judge carry the mark too (`dateline show`, issue 46)
    eid = EpisodeStore(tmp_path / "b").episodes(["episode_id"]).column("episode_id").to_pylist()[0]
    show = run_module("ray_jobs.cli.main", "show", str(tmp_path / "b"), eid, timeout=300)
    assert show.returncode == 0, show.stderr[-3000:]
    (block,) = [ln for ln in show.stdout.splitlines() if ln.startswith("=== metrics (judge ")]
    assert "SELF-JUDGED: graded by the model under test" in block, block


def test_each_seed_reaches_the_engine(tmp_path):
    seen: list[int | None] = []

    def model(messages, req):
        seen.append(req.get("seed"))
        return FINISH.format("RIGHT")

    with FakeOpenAI(model) as m:
        sweep([live_cfg(m.base_url, tmp_path, "benchmark.limit=1", "run.num_seeds=2", "run.seed=7")])
    assert sorted(seen) == [7, 8]


def test_a_newsagent_context_overflow_is_a_result_not_a_dropped_episode(tmp_path):
    """The server refuses an over-long prompt (HTTP 400): the episode is a result (finish reason
    request_rejected, scored on its draft so far: F1 0), counted in every mean, never an error
    dropped from the denominator."""
    from engine.benchmarks.newsagent import BENCHMARK as NEWS
    from tests.engine.runtime.test_agent import scripted_writer

    cfg0 = compose(["benchmark=newsagent", "agent=newsagent", "benchmark.limit=3"])
    titles = [t.title for t in NEWS.load_tasks(cfg0)]

    def model(messages, req):
        if f"Title: {titles[1]}" in "\n".join(m["content"] for m in messages):
            return 400, "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens."
        return scripted_writer(messages, req)

    with FakeOpenAI(model) as m:
        (info,) = sweep([compose(["benchmark=newsagent", "agent=newsagent", "benchmark.limit=3",
                                  "model=openai_compatible", f"model.base_url={m.base_url}", "model.name=scripted",
                                  "model.api_key_env=", f"run.dir={tmp_path}", "run.progress=false",
                                  "cluster.num_cpus=4"])])
    store = EpisodeStore(tmp_path, NEWS.episode_fields)
    eps = {e["title"]: e for e in store.episodes().to_pylist()}
    assert {e["status"] for e in eps.values()} == {"ok"}
    rejected = eps[titles[1]]
    assert rejected["finish_reason"] == "request_rejected" and rejected["draft_ids"] == []
    rows = store.metrics().to_pylist()
    f1 = metric(rows, "edit_f1")
    assert f1["n_planned"] == 3 and f1["n_scored"] == 3 and not f1["incomplete"]
    assert f1["n"] == sum(1 for e in eps.values() if e["reference_ids"])       # the rejected one counts (as 0)
