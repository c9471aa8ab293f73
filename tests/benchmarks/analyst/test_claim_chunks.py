"""Claim extraction over long reports: one figure-17 request per chunk, chunks covering the
whole report, claims merged, verification spread over the chunks."""

from __future__ import annotations

import json

from engine.benchmarks import get_benchmark
from engine.benchmarks.analyst.config import AnalystBenchmarkConfig
from tests.factories import episode_row
from tests.helpers import metrics_of

BENCH = get_benchmark("analyst")


def _row(report: str, **bench) -> dict:
    return episode_row("analyst", episode_id="e1", output=report, report_tokens=100,
                       data=json.dumps({"tasks_dir": "engine/benchmarks/analyst/sample_tasks", **bench}))


def _doc(req) -> str:
    text = req.messages[0]["content"]
    return text.split("\nDocument:\n", 1)[1].rsplit("\n\nReturn the claims in the following json object", 1)[0]


LONG = "# District report\n\n" + "\n\n".join(
    f"## Section {i:02d}\n\n" + f"In district D{i:02d} the city recorded {1000 + i} crashes in 2023, "
    f"{i % 7} of them fatal, after {900 + i} in 2022; the rate per 10,000 residents was {i}.{i % 10}. " * 6
    for i in range(60))


def test_long_report_claims_requests_cover_it_whole():
    from engine.benchmarks.analyst.claims import ApproxTokens

    b = AnalystBenchmarkConfig()
    assert ApproxTokens()(LONG) > 4 * b.claims_chunk_tokens          # far beyond one request
    reqs = [r for r in BENCH.judge_requests(_row(LONG), {}) if r.key.startswith("claims")]
    assert [r.key for r in reqs] == [f"claims:{k}" for k in range(len(reqs))] and len(reqs) >= 5
    docs = [_doc(r) for r in reqs]
    assert all(ApproxTokens()(d) <= b.claims_chunk_tokens for d in docs)
    assert all(r.max_tokens == b.claims_max_tokens for r in reqs)
    # in order, nothing left out: every paragraph of the report is in exactly one request
    paragraphs = [p for p in LONG.split("\n\n") if p.strip()]
    assert all(sum(p in d.split("\n\n") for d in docs) == 1 for p in paragraphs)
    assert "\n\n".join(docs) == LONG


def test_short_report_is_one_request_with_all_of_it():
    report = "# Report\n\nThe city recorded 2,767 crashes in 2023.\n"
    (req,) = [r for r in BENCH.judge_requests(_row(report), {}) if r.key.startswith("claims")]
    assert req.key == "claims:0" and _doc(req) == report


def test_claims_of_all_chunks_are_merged_and_verified_evenly(embedder):
    from engine.benchmarks.analyst.claims import quotas

    reqs = [r for r in BENCH.judge_requests(_row(LONG), {}) if r.key.startswith("claims")]
    n = len(reqs)
    answers = {r.key: BENCH.parse_judgement(r.key, json.dumps(
        {f"chunk {r.key} claim {i}": "quote" for i in range(30)})) for r in reqs}
    verify = [r for r in BENCH.judge_requests(_row(LONG), {"e1": answers}) if r.key.startswith("claim:")]
    b = AnalystBenchmarkConfig()
    assert len(verify) == b.max_claims
    per_chunk = {k: sum(r.key.startswith(f"claim:{k}:") for r in verify) for k in range(n)}
    assert sorted(per_chunk.values()) == sorted(quotas(n, b.max_claims)) and min(per_chunk.values()) >= 1
    assert f"chunk claims:{n - 1} claim 0" in next(r for r in verify if r.key == f"claim:{n - 1}:00").messages[0]["content"]
    # one chunk's extraction failed: counted, and the others still give a rate
    judged = {**answers, "claims:1": None, **{r.key: "UNSUPPORTED" if r.key.startswith("claim:0:") else "SUPPORTED"
                                              for r in verify}}
    m = metrics_of(BENCH, [dict(_row(LONG), judgements=judged)])
    assert m["claims_per_report"].value == 30 * (n - 1)
    assert m["claim_chunks_failed"].value == 1.0
    q = quotas(n, b.max_claims)
    assert m["hallucination_pct"].value == 100.0 * q[0] / (sum(q) - q[1])


def test_quotas():
    from engine.benchmarks.analyst.claims import quotas, report_chunks

    assert quotas(3, 40) == [14, 13, 13] and quotas(1, 40) == [40] and quotas(0, 40) == []
    assert report_chunks("", 100) == [] and report_chunks("a b", 100) == ["a b"]
