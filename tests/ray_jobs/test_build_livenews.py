"""``dateline build build=livenews`` end to end on scripted models (tests/ray_jobs/build_helpers.py):
every stage's keep and reject path with its reason counted, the release ``dateline run`` scores,
the same model in both roles refused by what it serves, a killed build resumed without repeating
a stored call, and a changed check prompt re-asking only that check."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from engine.errors import ConfigError
from tests.fake_openai import FakeOpenAI
from tests.helpers import REPO, livenews_responder
from tests.ray_jobs.build_helpers import build_in_process, build_overrides, generator, verifier

pytestmark = [pytest.mark.slow]


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_every_stage_keeps_and_rejects_with_its_reason_and_dateline_run_scores_the_release(tmp_path):
    with FakeOpenAI(generator) as gen, FakeOpenAI(verifier) as ver:
        out, m = build_in_process(build_overrides(gen.base_url, ver.base_url, tmp_path / "in", tmp_path / "run"))
    st = m["stages"]
    assert st["intake"]["in"] == 9 and st["intake"]["passed"] == 9 and st["intake"]["rejected"] == {}
    assert st["relevance"]["rejected"] == {"irrelevant": 1} and st["relevance"]["passed"] == 8
    assert st["draft"]["rejected"] == {"skipped": 1}
    assert st["answer"]["rejected"] == {"verifier_found_no_answer": 1}
    assert st["match"]["rejected"] == {"answers_differ": 1}
    assert st["adherence"]["rejected"] == {"guideline:unambiguous": 1}
    assert st["dedupe"]["rejected"] == {"duplicate": 1} and st["dedupe"]["passed"] == 3
    assert m["sets"] == {"main": 2, "longitudinal": 1} and m["kept"] == 3 and m["items"] == 9
    assert not m["self_verified"] and m["marks"] == []
    assert set(m["prompts"]) == {"relevance", "draft", "answer", "match", "adherence"}
    assert [i["path"] for i in m["inputs"]] == [str(tmp_path / "in" / "articles.jsonl"), str(tmp_path / "in" / "events.jsonl")]

    questions = _lines(out / "questions.jsonl")
    assert sorted(q["event_date"] for q in questions) == ["2025-03-03", "2025-07-01"]
    # section 2.3: the latest event is in July, so July and June are test, May validation, older train
    assert {q["event_date"]: q["split"] for q in questions} == {"2025-03-03": "train", "2025-07-01": "test"}
    assert [q["event_date"] for q in _lines(out / "questions_test.jsonl")] == ["2025-07-01"]
    assert _lines(out / "questions_validation.jsonl") == []
    heat = next(q for q in questions if q["event_date"] == "2025-07-01")
    assert heat["answer"] == "44.1 C" and heat["link"] == "https://www.bbc.co.uk/story/6"
    assert [q["answer"] for q in _lines(out / "longitudinal.jsonl")] == ["Minister Rojas"]
    rejected = {r["reason"]: r for r in _lines(out / "rejected.jsonl")}
    assert rejected["duplicate"]["duplicate_of"] and rejected["answers_differ"]["verifier_answer"] == "a different thing"
    assert len(_lines(out / "pages.jsonl")) == 9
    stages = pq.read_table(out / "stages.parquet").to_pylist()
    assert {(r["stage"], r["model_role"]) for r in stages} == {
        ("relevance", "generator"), ("draft", "generator"), ("answer", "verifier"), ("match", "verifier"),
        ("adherence", "verifier")}
    assert sum(r["stage"] == "relevance" for r in stages) == 9 and sum(r["stage"] == "draft" for r in stages) == 8
    assert all(r["prompt_version"] and r["model"] in ("gen", "ver") for r in stages)
    assert (out / "card.md").read_text().count("| test | 1 |") == 1
    report = (out / "report.html").read_text()
    assert "Yield per stage" in report and "answers_differ" in report and "SELF-VERIFIED" not in report

    # the release is a livenews dataset: dateline run reads it as it is, the source domain blocked
    from engine.storage import EpisodeStore
    from ray_jobs.cluster.session import Session
    from ray_jobs.config.compose import compose
    from ray_jobs.run import run

    with FakeOpenAI(livenews_responder()) as srv:
        cfg = compose(["benchmark=livenews", "agent=livenews", f"benchmark.data_dir={out}", "benchmark.split=test",
                       "model=openai_compatible", f"model.base_url={srv.base_url}", "model.name=fake",
                       "model.api_key_env=", f"run.dir={tmp_path / 'eval'}", "run.progress=false", "judge=self",
                       "cluster.num_workers=1", "cluster.num_cpus=4"])
        session = Session()
        try:
            run(cfg, session)
        finally:
            session.close()
    from engine.benchmarks import get_benchmark

    rows = EpisodeStore(tmp_path / "eval", get_benchmark("livenews").episode_fields).episodes().to_pylist()
    assert len(rows) == 1 and rows[0]["status"] == "ok" and rows[0]["source_domain"] == "bbc.co.uk"
    assert rows[0]["gold"] == "44.1 C"


def test_the_same_model_in_both_roles_is_refused_by_what_it_serves_not_its_name(tmp_path):
    from ray_jobs.build.entry import check_builds
    from ray_jobs.config.compose import compose

    same = [{"id": "gen", "root": "/models/one-model"}]
    with FakeOpenAI(generator, models=same) as gen, \
            FakeOpenAI(verifier, models=[{"id": "ver", "root": "/models/one-model"}]) as ver:
        over = build_overrides(gen.base_url, ver.base_url, tmp_path / "in", tmp_path / "run")
        with pytest.raises(ConfigError, match="serves the same model as the generator.*allow_same_model"):
            check_builds([compose(over)])
        check_builds([compose([*over, "build.allow_same_model=true"])])     # allowed: marked, not refused
    with FakeOpenAI(generator, models=same) as gen, \
            FakeOpenAI(verifier, models=[{"id": "ver", "root": "/models/another"}]) as ver:
        check_builds([compose(build_overrides(gen.base_url, ver.base_url, tmp_path / "in", tmp_path / "run"))])
    assert not (tmp_path / "run").exists()


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_a_build_allowed_one_model_in_both_roles_is_self_verified_everywhere(tmp_path, capsys):
    both = FakeOpenAI(lambda msgs, req: (verifier if _is_check(msgs) else generator)(msgs, req),
                      models=[{"id": "gen", "root": "/models/one"}, {"id": "ver", "root": "/models/one"}])
    with both:
        out, m = build_in_process(build_overrides(both.base_url, both.base_url, tmp_path / "in", tmp_path / "run",
                                                   "build.allow_same_model=true", "benchmark.limit=3"))
    assert m["self_verified"] and m["marks"] == ["SELF-VERIFIED"]
    assert "SELF-VERIFIED" in (out / "card.md").read_text() and "SELF-VERIFIED" in (out / "report.html").read_text()
    assert len(_lines(out / "questions.jsonl")) == 1

    # a run over the release carries the mark: its summary, its tables, its report, its export
    from engine.scoring.metric_table import tables_markdown
    from ray_jobs.cluster.session import Session
    from ray_jobs.config.compose import compose
    from ray_jobs.outputs.export import export
    from ray_jobs.outputs.report import build as build_report
    from ray_jobs.run import run

    with FakeOpenAI(livenews_responder()) as srv:
        cfg = compose(["benchmark=livenews", "agent=livenews", f"benchmark.data_dir={out}",
                       "model=openai_compatible", f"model.base_url={srv.base_url}", "model.name=fake",
                       "model.api_key_env=", f"run.dir={tmp_path / 'eval'}", "run.progress=false", "judge=self",
                       "cluster.num_workers=1", "cluster.num_cpus=4"])
        session = Session()
        try:
            capsys.readouterr()
            run(cfg, session)
        finally:
            session.close()
    assert "**SELF-VERIFIED: the questions of" in capsys.readouterr().out
    from engine.storage import EpisodeStore

    rows = EpisodeStore(tmp_path / "eval").metrics().to_pylist()
    assert "SELF-VERIFIED" in tables_markdown(rows, ["livenews"])
    page = build_report([tmp_path / "eval"], tmp_path / "report")
    assert "SELF-VERIFIED" in Path(page).read_text()
    export(str(tmp_path / "eval"), "mlflow", tracking_uri=(tmp_path / "mlruns").as_uri())
    tags = [f.read_text() for f in (tmp_path / "mlruns").rglob("tags/dateline.marks")]
    assert tags and all("SELF-VERIFIED" in t for t in tags), tags


def _is_check(messages: list[dict]) -> bool:
    p = messages[0]["content"]
    return "Gold target:" in p or "reply exactly: N/A" in p or "Rules:" in p


def _cli(overrides: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "ray_jobs.cli", "build", *overrides], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **(env or {})})


def _prompts(srv: FakeOpenAI) -> list[str]:
    return [r["messages"][0]["content"] for r in srv.requests]


@pytest.mark.ray
@pytest.mark.timeout(900)
def test_a_build_killed_mid_stage_resumes_without_repeating_a_stored_call(tmp_path):
    """The first build is SIGKILLed (its whole process group) once the verifier has answered a
    few checks; what the run dir then holds is every call the build stored. The same command
    then finishes it: no prompt the first build stored is sent again."""
    gate = threading.Event()

    def slow_verifier(messages, req):
        if gate.is_set():
            time.sleep(0.5)
        return verifier(messages, req)

    with FakeOpenAI(generator) as gen, FakeOpenAI(slow_verifier) as ver:
        over = build_overrides(gen.base_url, ver.base_url, tmp_path / "in", tmp_path / "run", "run.flush_interval_s=0")
        first = _cli(over)
        deadline = time.time() + 300
        while len(ver.requests) < 4 and time.time() < deadline and first.poll() is None:
            time.sleep(0.05)
        gate.set()
        time.sleep(1.0)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        assert 4 <= len(ver.requests), first.stdout.read() if first.stdout else ""
        stored = _stored_prompts(tmp_path / "run", over)
        assert stored, "the first build stored nothing before it was killed"
        n_gen, n_ver = len(gen.requests), len(ver.requests)
        gate.clear()
        second = _cli(over)
        out, _ = second.communicate(timeout=600)
        assert second.returncode == 0, out
    again = set(_prompts(gen)[n_gen:]) | set(_prompts(ver)[n_ver:])
    assert not (again & stored), f"{len(again & stored)} stored calls were asked again"
    m = json.loads((tmp_path / "run" / "release" / "manifest.json").read_text())
    assert m["kept"] == 3 and m["pending"] == 0


def _stored_prompts(run_dir: Path, overrides: list[str]) -> set[str]:
    """Every prompt whose answer the run dir holds: the drafts' stage calls, and the checks."""
    from engine.benchmarks.livenews.build import builder as B
    from engine.benchmarks.livenews.build import stages as S
    from engine.storage import EpisodeStore
    from ray_jobs.config.compose import compose
    from ray_jobs.judging.stream import run_judge_identity

    cfg = compose(overrides)
    from engine.benchmarks import get_benchmark

    bench = get_benchmark(cfg.benchmark.name)
    store = EpisodeStore(run_dir, bench.episode_fields)
    out: set[str] = set()
    rows = store.episodes(ok_only=True).to_pylist() if (run_dir / "episodes").exists() else []
    for r in rows:
        calls = {c["stage"] for c in json.loads(r["stage_calls"] or "[]")}
        if "relevance" in calls:
            out.add(S.relevance_messages(r["event_summary"], r["article_title"], r["article_text"])[0]["content"])
        if "draft" in calls:
            out.add(S.draft_messages(r["article_title"], r["article_text"], r["knowledge_date"])[0]["content"])
    done = store.judgements(run_judge_identity(cfg, bench).id) if (run_dir / "judgements").exists() else {}
    for r in rows:
        for req in B.QA_BUILDER.checks(r, done):
            if done.get(r["episode_id"], {}).get(req.key) is not None:
                out.add(req.messages[0]["content"])
    return out


@pytest.mark.ray
@pytest.mark.timeout(900)
def test_a_changed_check_prompt_re_asks_only_that_check(tmp_path):
    """A new adherence prompt (DATELINE_BUILD_PROMPTS) makes a new adherence version: the same
    command asks the verifier that check again for every drafted pair, and nothing else. Then a new
    drafting prompt: every draft and every check after it again, no relevance call."""
    own = tmp_path / "prompts"
    own.mkdir()
    from engine.benchmarks.livenews.build.stages import PROMPTS

    (own / "adherence.txt").write_text((PROMPTS / "adherence.txt").read_text().replace(
        "Think step by step about each rule", "Consider each rule carefully"))
    with FakeOpenAI(generator) as gen, FakeOpenAI(verifier) as ver:
        over = build_overrides(gen.base_url, ver.base_url, tmp_path / "in", tmp_path / "run")
        first = _cli(over)
        out, _ = first.communicate(timeout=600)
        assert first.returncode == 0, out
        n_gen, n_ver = len(gen.requests), len(ver.requests)
        second = _cli([*over, "build.overwrite=true"], env={"DATELINE_BUILD_PROMPTS": str(own)})
        out, _ = second.communicate(timeout=600)
        assert second.returncode == 0, out
        asked = _prompts(ver)[n_ver:]
        # a new drafting prompt: new drafts, and every check after them; the relevance calls before
        # drafting are the stored ones (the memo), never asked again
        (own / "draft.txt").write_text((PROMPTS / "draft.txt").read_text().replace(
            "Write one factual question", "Write a single factual question"))
        n_gen2, n_ver2 = len(gen.requests), len(ver.requests)
        third = _cli([*over, "build.overwrite=true"], env={"DATELINE_BUILD_PROMPTS": str(own)})
        out, _ = third.communicate(timeout=600)
        assert third.returncode == 0, out
        redrafted, rechecked = _prompts(gen)[n_gen2:], _prompts(ver)[n_ver2:]
    assert n_gen2 == n_gen, "a changed check re-ran a draft"
    assert asked and all("Consider each rule carefully" in p for p in asked), asked[:2]
    assert len(asked) == 7             # every drafted pair: 9 articles, one irrelevant, one skipped
    assert len(redrafted) == 8 and all("Write a single factual question" in p for p in redrafted), redrafted[:1]
    assert not any("News event summary:" in p for p in redrafted), "a relevance call was asked again"
    assert len(rechecked) == 7 * 2 + 6  # answer and guidelines for 7 drafts, the comparison for 6 answered


def test_dateline_run_refuses_a_build_in_one_line(tmp_path):
    """``dateline run build=livenews`` would draft and never publish: refused before anything starts."""
    p = subprocess.run([sys.executable, "-m", "ray_jobs.cli", "run", "build=livenews", f"run.dir={tmp_path / 'run'}"],
                       cwd=REPO, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    assert p.returncode == 2 and "is for dateline build" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "run").exists()
