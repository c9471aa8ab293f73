"""``dateline export --to inspect`` (ray_jobs/outputs/inspect/) and W&B's per-sample tables.

A real run dir: the driver in this process (Hydra config, Ray, workers, the judge stage, Parquet)
runs a livenews sweep of two configurations on four questions against scripted servers. Each
episode searches, clicks the first result and finishes; question 0 answers its gold answer
(graded ``A: CORRECT``), 1 a wrong choice (``B``), 3 "MUMBLE" (the grader's prose is no grade: the
verdict does not parse), and on question 2 the model's second call fails (500) until retries run
out: an episode with a search and an error. Then:

* the exported logs, read back with inspect's own reader, hold one sample per episode with the
  stored conversation, the steps as tool calls and results, the final output, the per-episode
  metric values ``dateline show`` prints, the verdicts with the judge's text, the tokens, the
  error and where each came from; the results are the metrics table's values; exporting again
  rewrites the same files;
* ``inspect view`` serves them, and headless Chromium finds an episode's final output and verdict
  on its sample page (screenshot: ``$DATELINE_SCREENSHOTS/inspect_view.png`` when set);
* ``dateline export --to wandb`` (offline) logs a per-sample table per configuration, read back
  from the offline run's files.

The transcript's shape without a store (a rule-based episode without model calls, a prompt that
starts over each turn, an action that does not parse) is checked on hand-built views, in the fast tier.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from dateline import compose
from engine.benchmarks.livenews import BENCHMARK as LIVE
from engine.llm.transcripts import conversation, message_id
from engine.storage import EpisodeStore
from ray_jobs.outputs import inspect as inspect_logs
from ray_jobs.outputs.report import episodes as ev
from tests.e2e.test_what_a_number_means import judged, live_cfg, sweep, which
from tests.fake_openai import FakeOpenAI
from tests.helpers import FULL, REPO, run_module


def require_inspect() -> None:
    """inspect_ai (the ``export`` extra) and its CLI. Missing: skipped, naming the command that
    installs them; under ``DATELINE_CI=1`` a failure (as ``tests/browser.py`` does for Chromium)."""
    cli = Path(sys.executable).with_name("inspect")
    if importlib.util.find_spec("inspect_ai") is not None and cli.exists():
        return
    why = f"inspect_ai is not installed ({cli} missing): `bash scripts/setup.sh` installs the export extra"
    if FULL:
        pytest.fail(why + " (DATELINE_CI=1: the export tests may not skip)", pytrace=False)
    pytest.skip(why)


def _tasks() -> list:
    return LIVE.load_tasks(compose(["benchmark=livenews", "agent=livenews", "benchmark.limit=4"]))


def _answers() -> tuple[dict[int, str], dict[str, str]]:
    """By question: the answer (question 2 fails at its second call); by answer: the grader's reply
    (anything else gets prose, no grade)."""
    qs = [t.question for t in _tasks()]
    wrong = next(c for c in qs[1].choices if c != qs[1].answer)
    return {0: qs[0].answer, 1: wrong, 3: "MUMBLE"}, {qs[0].answer: "A: CORRECT", wrong: "B"}


def _scripted(qs: list[str]):
    answers, grades = _answers()

    def respond(messages, req):
        first = messages[0]["content"]
        if "Gold target:" in first:                                      # the grader
            answer = first.split("Predicted answer: ", 1)[1].split("\n", 1)[0].strip()
            return grades.get(answer, "I would rather not say.")
        i = which(messages, qs)
        turn = sum(m["role"] == "assistant" for m in messages)
        if turn == 0:
            return "Search.\n```action\ntype: Search\nDamar Hamlin\n```"
        if i == 2:
            return 500, "engine failed"
        if turn == 1:
            url = next(ln.split("URL: ", 1)[1].split()[0] for ln in messages[-1]["content"].splitlines()
                       if "URL: " in ln)
            return f"Read it.\n```action\ntype: Click\n{url}\n```"
        return f"Done.\n```action\ntype: Finish\n{answers[i]}\n```"

    return respond


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """The sweep's run dir (two configurations: max_searches 1 and 3), judged."""
    out = tmp_path_factory.mktemp("inspect") / "run"
    respond = _scripted([t.question.question for t in _tasks()])
    with FakeOpenAI(respond) as m, FakeOpenAI(respond) as j:
        sweep([live_cfg(m.base_url, out, f"agent.max_searches={b}", "benchmark.limit=4", *judged(j.base_url))
               for b in (1, 3)])
    return out


def _views(run_dir: Path) -> dict[str, ev.EpisodeView]:
    """Every episode as ``dateline show`` reads it (the report's code), by episode id."""
    store = EpisodeStore(str(run_dir), LIVE.episode_fields)
    ids = store.episodes(["episode_id"]).column("episode_id").to_pylist()
    return {e: ev.load(store, LIVE, e) for e in ids}


@pytest.mark.ray
@pytest.mark.slow
def test_inspect_logs_read_back_as_the_run_dir_holds(run_dir, tmp_path):
    require_inspect()
    from inspect_ai.log import read_eval_log

    from dateline import results
    from ray_jobs.outputs.export import export

    lines = export(str(run_dir), "inspect")
    logs = sorted((run_dir / "_inspect").glob("*.eval"))
    store = EpisodeStore(str(run_dir), LIVE.episode_fields)
    eps = store.episodes().to_pylist()
    configs = sorted({e["config_hash"] for e in eps})
    assert [p.name for p in logs] == [f"livenews_{h}.eval" for h in configs] and len(lines) == 2
    assert all("4 samples, 1 with an error" in ln for ln in lines), lines
    views = _views(run_dir)
    api = {(r["config_hash"], r["metric"], r["scope"]): r for r in results(str(run_dir)).metrics().to_pylist()}
    prov = store.run_infos("provenance-")[-1]
    seen_unscored = seen_error = 0
    for path in logs:
        log = read_eval_log(str(path))
        h = path.stem.split("_", 1)[1]
        mine = [e for e in eps if e["config_hash"] == h]
        assert len(log.samples) == len(mine) == 4
        assert log.eval.model == "scripted" and log.eval.task == "dateline/livenews" and log.eval.task_id == h
        assert log.eval.metadata["dateline"]["config_hash"] == h and log.eval.revision.commit == prov["commit"]
        assert log.eval.packages["dateline"] == prov["dateline"] and log.eval.viewer.trust_content is False
        assert log.eval.solver_args["max_searches"] in (1, 3) and "INCOMPLETE" in log.tags
        # the results: the metrics table's values, n and intervals, per judge and scope
        (judge,) = {j["judge"] for v in views.values() for j in v.judgements}
        by_name = {s.name: s for s in log.results.scores}
        assert set(by_name) == {f"metrics (judge {judge})", f"metrics (judge {judge}), common tasks"}
        for s in log.results.scores:
            scope = "common" if s.name.endswith("common tasks") else "all"
            for m, em in s.metrics.items():
                row = api[(h, m, scope)]
                assert em.value == pytest.approx(row["value"]) and em.metadata["n"] == row["n"], (h, m, scope)
        assert by_name[f"metrics (judge {judge})"].metrics["accuracy"].value == pytest.approx(1 / 4)
        assert log.results.total_samples == 4 and log.results.completed_samples == 3
        for s in log.samples:
            e = s.metadata["episode_id"]
            v, row = views[e], views[e].row
            assert s.uuid == e and s.id == row["task_id"] and s.metadata["config_hash"] == h
            assert s.metadata["task_id"] == row["task_id"] and s.metadata["benchmark"] == "livenews"
            assert s.metadata["model"] == "scripted" and s.metadata["dateline_version"]
            assert s.output.completion == (row["output"] or "") and s.target == v.reference
            assert s.model_usage["scripted"].input_tokens == row["tokens_in"]
            assert s.model_usage["scripted"].output_tokens == row["tokens_out"]
            # the messages: the stored conversation (the last call's prompt and its completion) ...
            last = v.calls[-1]
            stored = [(m["role"], m["content"]) for m in conversation(last, v.messages)]
            if last["completion"]:
                stored.append(("assistant", last["completion"]))
            assert [(m.role, m.text) for m in s.messages if m.role != "tool"] == stored
            assert [m.role for m in s.input] == ["user"] and s.input[0].text == stored[1][1]
            # ... with each step as a tool call on its turn, answered by its result
            tools = [m for m in s.messages if m.role == "tool"]
            calls = [c for m in s.messages if m.role == "assistant" for c in m.tool_calls or []]
            assert [m.text for m in tools] == [st["result"] for st in v.steps]
            assert [c.function for c in calls] == [json.loads(st["parsed_action"])["type"] for st in v.steps]
            assert [c.id for c in calls] == [m.tool_call_id for m in tools]
            if row["status"] != "ok":
                seen_error += 1
                assert s.error is not None and "engine failed" in s.error.message and not s.scores
                assert s.output.completion == "" and len(v.steps) == 1 and "engine failed" in str(s.messages[-1].metadata)
                continue
            assert s.error is None
            # the scores: the per-episode values `dateline show` prints, and the verdict with the judge's text
            assert s.scores[f"metrics (judge {judge})"].value == pytest.approx(v.values[judge])
            (j,) = v.judgements
            verdict = s.scores[f"grade (judge {judge})"]
            assert verdict.explanation == j["raw_output"] and verdict.answer == row["output"]
            if j["value"] is None:
                seen_unscored += 1
                assert row["output"] == "MUMBLE" and verdict.reason == "grader_failed"
            else:
                assert verdict.value == j["value"] == ("CORRECT" if row["output"] == row["gold"] else "INCORRECT")
            assert s.model_usage["grader"].input_tokens > 0
    assert (seen_error, seen_unscored) == (2, 2)
    # again, elsewhere: the same files, the same samples
    again = export(str(run_dir), "inspect", log_dir=str(tmp_path / "logs"))
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == [p.name for p in logs] and len(again) == 2
    export(str(run_dir), "inspect")
    assert sorted((run_dir / "_inspect").iterdir()) == logs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def inspect_view(log_dir: Path):
    """``inspect view start`` on ``log_dir`` (loopback, a free port): its base URL while it runs."""
    port = _free_port()
    cli = Path(sys.executable).with_name("inspect")
    log = log_dir.parent / "inspect-view.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(cli), "view", "start", "--log-dir", str(log_dir), "--port", str(port),
                                 "--host", "127.0.0.1"], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        url, end = f"http://127.0.0.1:{port}/", time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > end:
                pytest.fail(f"inspect view did not serve {url}: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)          # its own group: the server and what it started
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.mark.ray
@pytest.mark.slow
def test_inspect_view_shows_an_episodes_final_output(run_dir, tmp_path):
    require_inspect()
    from ray_jobs.outputs.export import export
    from tests.browser import Browser

    export(str(run_dir), "inspect", log_dir=str(tmp_path / "logs"))
    store = EpisodeStore(str(run_dir), LIVE.episode_fields)
    eps = store.episodes().to_pylist()
    right = sorted((e for e in eps if e["output"] == e["gold"]), key=lambda e: e["config_hash"])[0]
    failed = next(e for e in eps if e["status"] != "ok" and e["config_hash"] == right["config_hash"])
    name = inspect_logs.log_name("livenews", right["config_hash"])
    with inspect_view(tmp_path / "logs") as url, Browser(width=1400, height=1000) as b:
        base = f"{url}#/logs/{name}/samples/sample"
        # the scoring tab (once the sample has loaded: the judge's text is there): no transcript on it,
        # so the answer shown is the episode's output field
        page = b.open(f"{base}/{right['task_id']}/1/scoring", wait_for="document.body.innerText.includes('A: CORRECT')")
        scoring = page.text.split("SCORER", 1)[1]
        assert "ANSWER" in scoring and right["output"] in scoring and "EXPLANATION" in scoring
        assert f"gold answer: {right['gold']}" in page.text and "CORRECT" in scoring
        assert f"Sample {right['task_id']} (Epoch 1)" in page.text and not page.errors
        messages = b.open(f"{base}/{right['task_id']}/1/messages",
                          wait_for="document.body.innerText.includes('1 pages, 0 refused')")
        assert "Damar Hamlin" in messages.text and "type: Finish" in messages.text
        error = b.open(f"{base}/{failed['task_id']}/1/error", wait_for="document.body.innerText.includes('engine failed')")
        assert "InternalServerError" in error.text
        shot = b.screenshot(f"{base}/{right['task_id']}/1/scoring", tmp_path / "inspect_view.png",
                            wait_for="document.body.innerText.includes('A: CORRECT')")
    assert shot.stat().st_size > 10_000
    if os.environ.get("DATELINE_SCREENSHOTS"):
        shutil.copy(shot, Path(os.environ["DATELINE_SCREENSHOTS"]) / shot.name)


@pytest.mark.ray
@pytest.mark.slow
def test_wandb_export_logs_a_per_sample_table_per_configuration_offline(run_dir, tmp_path):
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(tmp_path / "wb")}
    out = run_module("dateline", "export", str(run_dir), "--to", "wandb", "--dir", str(tmp_path / "wb"), env=env,
                     timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("4 samples)") == 2, out.stdout
    views = _views(run_dir)
    (judge,) = {j["judge"] for v in views.values() for j in v.judgements}
    tables = sorted((tmp_path / "wb").rglob("offline-run-*/files/media/table/samples_*.table.json"))
    assert len(tables) == 2, sorted(map(str, (tmp_path / "wb").rglob("*")))
    seen = set()
    for path in tables:
        t = json.loads(path.read_text())
        rows = [dict(zip(t["columns"], r)) for r in t["data"]]
        assert t["columns"][:8] == ["task_id", "episode_id", "seed", "status", "finish_reason", "error_kind",
                                    "output", "reference"]
        assert {"accuracy", "verdict.grade", "verdict.grade.explanation"} <= set(t["columns"])
        assert len(rows) == 4 and len({views[r["episode_id"]].row["config_hash"] for r in rows}) == 1
        for r in rows:
            v = views[r["episode_id"]]
            seen.add(r["episode_id"])
            assert (r["task_id"], r["status"], r["output"], r["reference"]) == (
                v.row["task_id"], v.row["status"], v.row["output"] or "", v.reference)
            if v.row["status"] != "ok":
                assert r["error_kind"] == "GenerationError: InternalServerError" and r["accuracy"] is None
                continue
            for m, x in v.values[judge].items():
                assert r[m] == pytest.approx(x), m
            (j,) = v.judgements
            assert (r["verdict.grade"], r["verdict.grade.explanation"]) == (j["value"], j["raw_output"])
    assert seen == set(views)
    meta = [p for p in (tmp_path / "wb").rglob("offline-run-*") if p.is_dir()]
    assert len(meta) == 2 and all(list(d.rglob("*.wandb")) for d in meta)      # and the runs themselves


# -- the transcript's shape, on hand-built views (no store, no inspect) ---------------------------
def _view(steps, calls=(), messages=(), output="", row=None):
    row = {"episode_id": "e" * 16, "task_id": "t0", "model": "m", "seed": 0, "status": "ok", "output": output,
           "config_hash": "c", **(row or {})}
    msgs = {message_id(r, c): {"message_id": message_id(r, c), "role": r, "content": c} for r, c in messages}
    return ev.EpisodeView(row, list(steps), list(calls), [], msgs, [], {}, "")


def _call(i, prompt, completion, error=""):
    return {"call": i, "message_ids": [message_id(r, c) for r, c in prompt], "completion": completion,
            "error": error, "model": "m", "finish_reason": "stop", "tokens_in": 3, "tokens_out": 2,
            "latency_s": 0.1, "replica": 0}


def _step(i, action, result, ok=True, call=-1, raw=""):
    return {"step": i, "turn": "action", "parsed_action": json.dumps(action) if action else "", "result": result,
            "ok": ok, "call": call, "raw_output": raw}


def test_a_rule_based_episode_is_tool_calls_without_model_calls():
    v = _view([_step(0, {"Action": "search", "query": "t"}, "5 results"),
               _step(1, {"Action": "insert", "obj": {"text": "x", "id": "o1"}}, "duplicate", ok=False)])
    got = inspect_logs.messages(v)
    assert [(m["role"], m["content"]) for m in got] == [("assistant", ""), ("tool", "5 results"),
                                                        ("assistant", ""), ("tool", "duplicate")]
    assert got[0]["tool_calls"] == [{"id": "eeeeeeeeeeee-step0", "function": "search", "arguments": {"query": "t"},
                                     "parse_error": None}]
    assert got[1]["tool_call_id"] == "eeeeeeeeeeee-step0" and got[1]["error"] == ""
    assert got[2]["tool_calls"][0]["arguments"] == {"obj": {"text": "x", "id": "o1"}} and got[3]["error"] == "duplicate"


def test_a_prompt_that_starts_over_adds_only_what_is_new_and_a_bad_action_is_a_parse_error():
    sys_, u0, u1 = ("system", "You edit."), ("user", "state 0"), ("user", "state 1")
    v = _view([_step(0, None, "no action block", ok=False, call=0), _step(1, {"Action": "terminate"}, "done", call=1)],
              [_call(0, [sys_, u0], "hmm"), _call(1, [sys_, u1], '{"Action": "terminate"}')], [sys_, u0, u1])
    got = inspect_logs.messages(v)
    assert [(m["role"], m["content"]) for m in got] == [
        sys_, u0, ("assistant", "hmm"), ("tool", "no action block"), u1, ("assistant", '{"Action": "terminate"}'),
        ("tool", "done")]
    assert got[2]["tool_calls"][0]["function"] == "unparsed" and got[2]["tool_calls"][0]["parse_error"] == "no action block"
    assert got[3]["error"] == "no action block" and got[6]["error"] == ""


def test_a_failed_call_leaves_its_prompt_and_says_why():
    sys_, u0 = ("system", "Answer."), ("user", "q?")
    v = _view([], [_call(0, [sys_, u0], "", error="GenerationError: 500")], [sys_, u0], row={"status": "error"})
    got = inspect_logs.messages(v)
    assert [(m["role"], m["content"]) for m in got] == [sys_, u0]
    assert got[-1]["metadata"] == {"call_error": "GenerationError: 500"}


def test_unparsed_verdicts_and_metric_views():
    v = _view([], output="x")
    v.values = {"": {"a": 1.0}, "j1": {"a": 1.0, "accuracy": 0.0}}
    v.judgements = [{"judge": "j1", "judge_model": "g", "key": "grade", "value": None, "ok": False, "raw_output": "hmm",
                     "error": "malformed", "truncated": False, "batch_id": "1"},
                    {"judge": "j1", "judge_model": "g", "key": "grade", "value": "CORRECT", "ok": True,
                     "raw_output": "A", "error": "", "truncated": False, "batch_id": "0"}]
    got = inspect_logs.scores(v)
    assert set(got) == {"metrics (judge j1)", "grade (judge j1)"}       # the judged view holds the unjudged one's
    assert got["grade (judge j1)"]["value"] == "CORRECT" and got["grade (judge j1)"]["explanation"] == "A"
    v.judgements = v.judgements[:1]
    assert inspect_logs.scores(v)["grade (judge j1)"]["unscored"] is True
    v.values = {"": {"a": 1.0}}
    assert inspect_logs.metric_views(v) == {"": {"a": 1.0}}


@pytest.mark.slow
def test_without_inspect_ai_the_other_exports_import_and_inspect_says_what_to_install():
    """inspect_ai is an optional extra: `dateline export --to mlflow` must not need it, and `--to
    inspect` without it is one line naming the extra (a CliError: exit status 2), not a traceback."""
    code = ("import sys; sys.modules['inspect_ai'] = None\n"
            "import ray_jobs.outputs.export\nfrom ray_jobs.outputs import inspect as inspect_logs\nfrom engine.errors import CliError\n"
            "try:\n    inspect_logs.load_inspect_ai()\n"
            "except CliError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "pip install 'dateline[export]'" in out.stdout, out.stderr[-2000:]
