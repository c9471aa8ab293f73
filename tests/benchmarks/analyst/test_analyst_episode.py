"""analyst episodes against a scripted model on the bundled tasks: vanilla map-reduce inside the
window, the agentic tool loop in its sandbox, the judge rounds, and the metrics."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from engine.benchmarks import get_benchmark
from engine.benchmarks.analyst.config import AnalystAgentConfig, AnalystBenchmarkConfig
from engine.benchmarks.analyst.data import checklist_id, reference_sha256
from engine.benchmarks.analyst.sources import ByteCounter
from engine.config import to_plain
from engine.llm import Endpoint, SamplingParams
from engine.protocol import dumps
from engine.runtime.dispatch import EpisodeRunner, EpisodeSpec, WorkerSetup
from tests.fake_openai import FakeOpenAI
from tests.helpers import metrics_of

BENCH = get_benchmark("analyst")


class Cfg:
    benchmark = AnalystBenchmarkConfig()


TASKS = {t.task_id: t for t in BENCH.load_tasks(Cfg)}


def run(task_ids, agent, responder, tmp_path, context_cap=None, bench=None):
    async def go():
        with FakeOpenAI(responder) as srv:
            setup = WorkerSetup("analyst", "fake", agent, dumps(to_plain(agent)), [Endpoint(srv.base_url, "fake")],
                                SamplingParams(max_retries=0, timeout_s=20), 8, 5, None,
                                data_json=dumps(to_plain(bench or AnalystBenchmarkConfig())),
                                artifacts_dir=str(tmp_path / "artifacts"))
            runner = EpisodeRunner(setup, None)
            out = await asyncio.gather(*(runner.run(EpisodeSpec(f"{i:016x}", "h", TASKS[t], t, 0))
                                         for i, t in enumerate(task_ids)))
            return out, srv.requests
    return asyncio.run(go())


REPORT = ("# Traffic Safety Report 2023\n\n## Summary\nThe city recorded 2,767 crashes in 2023.\n\n"
          "![Crashes per month in 2023](figures/monthly.png)\n")


@pytest.mark.slow
def test_vanilla_map_reduce_stays_inside_the_window(tmp_path):
    count = ByteCounter()       # the fake endpoint has no tokenizer: bytes bound tokens

    def responder(messages, req):
        prompt = messages[-1]["content"]
        assert count(messages[0]["content"]) + count(prompt) + req["max_tokens"] + 64 <= 2600
        if "Extract every fact" in prompt:
            return "- total crashes 2,767"
        return REPORT

    agent = AnalystAgentConfig(context_tokens=2600, map_max_tokens=200, report_max_tokens=600)
    (res,), reqs = run(["crashes-2023"], agent, responder, tmp_path)
    ep = res["episode"]
    assert ep["status"] == "ok", ep["error"]
    assert ep["finish_reason"] == "finish" and ep["output"] == REPORT
    assert ep["chunks"] >= 2 and ep["map_calls"] == ep["chunks"]
    assert [s["turn"] for s in res["steps"]][-1] == "report"
    final = reqs[-1]["messages"][-1]["content"]
    assert "table of contents" in final and "Crashes by district" in final      # T+S+ToC


def test_vanilla_settings(tmp_path):
    seen = []

    def responder(messages, req):
        seen.append(messages[-1]["content"])
        return REPORT

    for setting in ("T", "T+S+R*"):
        (res,), _ = run(["crashes-2023"], AnalystAgentConfig(setting=setting, context_tokens=32000), responder, tmp_path)
        assert res["episode"]["status"] == "ok", res["episode"]["error"]
    assert "(no source documents)" in seen[0] and "crashes_2023.csv" not in seen[0]
    assert "<template>" in seen[1] and "Traffic Safety Report 2022" in seen[1] and "crashes_2023.csv" in seen[1]


@pytest.mark.slow
def test_agentic_tool_loop(tmp_path):
    script = [
        {"tool": "list_files"},
        {"tool": "grep", "pattern": "Northside", "path": "sources"},
        {"tool": "read", "path": "sources/vision_zero_update.md", "start": 1, "end": 3},
        {"tool": "read", "path": "../../etc/passwd"},
        {"tool": "python", "code": "import csv\nrows = list(csv.DictReader(open('sources/crashes_2023.csv')))\n"
                                   "print(sum(int(r['crashes']) for r in rows))\n"
                                   "open('figures/monthly.png', 'wb').write(b'\\x89PNG\\r\\n')"},
        {"tool": "python", "code": "open('/etc/escape-analyst.txt', 'w').write('x')"},
        {"tool": "write_report", "content": REPORT},
        {"tool": "finish"},
    ]

    def responder(messages, req):
        assert req["response_format"]["type"] == "json_schema"
        return json.dumps(script[sum(m["role"] == "assistant" for m in messages)])

    (res,), reqs = run(["crashes-2023"], AnalystAgentConfig(mode="agentic"), responder, tmp_path)
    ep = res["episode"]
    assert ep["status"] == "ok", ep["error"]
    assert ep["finish_reason"] == "finish" and ep["output"] == REPORT
    assert ep["steps"] == 8 and ep["code_runs"] == 2 and ep["code_failures"] == 1
    assert ep["figures_written"] == ["figures/monthly.png"]
    obs = [s["result"] for s in res["steps"]]
    assert "sources/crashes_2023.csv" in obs[0]
    assert "sources/crashes_2023.csv:" in obs[1] and "Northside" in obs[1]
    assert obs[2].startswith("sources/vision_zero_update.md lines 1-3")
    assert "outside the working directory" in obs[3]
    assert "2767" in obs[4]
    assert "Read-only file system" in obs[5]          # nothing but the folder and a private /tmp is writable
    assert not Path("/etc/escape-analyst.txt").exists()
    workdir = tmp_path / "artifacts" / ep["episode_id"]
    assert (workdir / "report.md").read_text() == REPORT


def test_agentic_caps_and_missing_report(tmp_path):
    one = dict(mode="agentic", report_attempts=1)
    (res,), reqs = run(["crashes-2023"], AnalystAgentConfig(**one, max_steps=3),
                       lambda m, r: '{"tool": "list_files"}', tmp_path)
    assert res["episode"]["finish_reason"] == "step_cap" and res["episode"]["output"] == "" and len(reqs) == 3
    (res,), reqs = run(["crashes-2023"], AnalystAgentConfig(**one, max_episode_tokens=50),
                       lambda m, r: '{"tool": "list_files"}', tmp_path)
    assert res["episode"]["finish_reason"] == "token_cap" and len(reqs) == 1
    (res,), _ = run(["crashes-2023"], AnalystAgentConfig(**one), lambda m, r: '{"tool": "finish"}', tmp_path)
    assert res["episode"]["finish_reason"] == "no_report"
    (res,), _ = run(["crashes-2023"], AnalystAgentConfig(**one, max_steps=2), lambda m, r: "not json", tmp_path)
    assert res["episode"]["parse_failures"] == 2


@pytest.mark.slow
def test_judge_rounds_and_metrics(tmp_path, embedder):
    # crashes-2023 ships no checklist: a built one in a checklist store (as analyst-checklists writes it)
    store = tmp_path / "checklists"
    store.mkdir()
    criteria = [f"The response should state fact {i}.\n" + "\n".join(f"- {s}: x" for s in range(1, 6)) for i in range(3)]
    ref = TASKS["crashes-2023"].reference
    (store / f"crashes-2023-{reference_sha256(ref)[:12]}.json").write_text(json.dumps(
        {"criteria": criteria, "generated_by": {"judge": "j", "model": "m"}, "reference_sha256": reference_sha256(ref)}))
    bench = AnalystBenchmarkConfig(checklists_dir=str(store))
    (res,), _ = run(["crashes-2023"], AnalystAgentConfig(), lambda m, r: REPORT, tmp_path, bench=bench)
    row = res["episode"]
    cid = checklist_id(criteria)
    round1 = BENCH.judge_requests(row, {})
    assert sorted(r.key for r in round1) == ["claims:0", *[f"criterion:{cid}:{i:02d}" for i in range(3)]]
    assert {r.episode_id for r in round1} == {row["episode_id"]}          # nothing task-level: the rubric is fixed
    judged = {row["episode_id"]: {"claims:0": BENCH.parse_judgement(
        "claims:0", '{"The city recorded 2,767 crashes in 2023": "2,767 crashes", "Crashes fell": "x"}')}}
    round2 = BENCH.judge_requests(row, judged)
    keys = sorted(r.key for r in round2)
    assert keys == ["claim:0:00", "claim:0:01", *[f"criterion:{cid}:{i:02d}" for i in range(3)]]
    verify = next(r for r in round2 if r.key == "claim:0:00").messages[0]["content"]
    assert "crashes_2023.csv" in verify and "SUPPORTED or UNSUPPORTED" in verify
    mine = judged[row["episode_id"]]
    mine.update({f"criterion:{cid}:00": "5", f"criterion:{cid}:01": "3", f"criterion:{cid}:02": None,
                 "claim:0:00": "SUPPORTED", "claim:0:01": "UNSUPPORTED"})
    assert BENCH.judge_requests(row, judged) == []
    row["judgements"] = mine
    # a criterion without a rating: the episode's checklist score is missing and counted, never a
    # score over the criteria the judge happened to finish (80 % over two of three)
    m = metrics_of(BENCH, [row])
    assert "checklist_pct" not in m and m["criteria_unscored"].value == 1.0
    assert m["checklist_missing_unscored"].value == 1.0
    mine[f"criterion:{cid}:02"] = "4"
    m = metrics_of(BENCH, [row])
    assert m["checklist_pct"].value == pytest.approx(80.0) and m["criteria_unscored"].value == 0.0
    assert m["hallucination_pct"].value == 50.0
    # the reference has two figures; the report's one caption matches the monthly chart only
    assert m["visual_coverage_pct"].value == 50.0
    assert m["no_report"].value == 0.0 and m["report_attempts"].value == 1.0
    # ratings given against another checklist (another judge's rubric, or an old run's) do not count
    other = dict(row, judgements={"criterion:00": "5", "criterion:deadbeef:00": "5", **{
        k: v for k, v in mine.items() if not k.startswith("criterion:")}})
    mo = metrics_of(BENCH, [other])
    assert "checklist_pct" not in mo and mo["checklist_missing_unscored"].value == 1.0
    # a claims answer that copied the prompt's example keys (stored before the parser rejected it)
    # is read as invalid: nothing to verify, no hallucination rate from it
    bad = dict(row, judgements={"claims:0": '{"Atomic claim 1 here": "2,767 crashes"}', "claim:0:00": "UNSUPPORTED"})
    assert "hallucination_pct" not in metrics_of(BENCH, [bad])
    assert not [r for r in BENCH.judge_requests(bad, {row["episode_id"]: bad["judgements"]}) if r.key.startswith("claim:")]
    # a run judged before claims were chunked (one "claims" key, "claim:NN" verdicts) still reads
    legacy = dict(row, judgements={"claims": mine["claims:0"], "claim:00": "UNSUPPORTED", "claim:01": "UNSUPPORTED"})
    assert metrics_of(BENCH, [legacy])["hallucination_pct"].value == 100.0
    # the report's intervals resample these per-episode values: their means are the metrics
    (vals,) = BENCH.episode_values([dict(row, judge="j")])
    assert vals and all(m[k].value == pytest.approx(v) for k, v in vals.items())
    assert BENCH.parse_judgement(f"criterion:{cid}:00", "therefore, the rating is: 4") == "4"
    assert BENCH.parse_judgement("claim:0:00", "maybe") is None
    t = BENCH.tables([{"benchmark": "analyst", "model": "fake", "config_hash": "h", "agent": row["agent"],
                       "data": row["data"], "metric": x.metric, "value": x.value, "n": x.n} for x in m.values()])
    assert "| fake | Vanilla (map-reduce) | T+S+ToC |" in t["table3"] and "n/a (no vision judge)" in t["table3"]
    assert re.search(r"\| 80\.0 \(n=1\) \|", t["table3"])


@pytest.mark.slow
def test_a_running_snippet_does_not_stall_the_workers_other_episodes(tmp_path):
    """Snippets run in a thread: while one episode's code sleeps 2 s, another episode of the same
    worker takes all its turns (before, the subprocess blocked the worker's event loop)."""
    import time

    arrivals: dict[str, list[float]] = {"2022": [], "2023": []}
    t0 = time.monotonic()

    def responder(messages, req):
        which = "2022" if "2022" in messages[1]["content"] else "2023"
        arrivals[which].append(time.monotonic() - t0)
        turn = sum(m["role"] == "assistant" for m in messages)
        if which == "2022":
            script = [{"tool": "python", "code": "import time\ntime.sleep(2)\nprint('slept')"},
                      {"tool": "write_report", "content": REPORT}, {"tool": "finish"}]
        else:
            script = [{"tool": "list_files"}] * 4 + [{"tool": "write_report", "content": REPORT}, {"tool": "finish"}]
        return json.dumps(script[turn])

    res, _ = run(["crashes-2022", "crashes-2023"], AnalystAgentConfig(mode="agentic", code_timeout_s=20),
                 responder, tmp_path)
    assert all(r["episode"]["status"] == "ok" for r in res), [r["episode"]["error"] for r in res]
    slow_code_done = arrivals["2022"][1]          # the turn after the sleeping snippet
    assert slow_code_done >= 2
    assert len(arrivals["2023"]) == 6 and arrivals["2023"][-1] < slow_code_done, arrivals
    assert json.loads(res[0]["episode"]["generation_info"])["isolation"] == "bwrap"
