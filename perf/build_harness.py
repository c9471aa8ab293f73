"""Build harness ceiling: stage calls per second ``dateline build build=livenews`` sustains when the
generator and the verifier answer instantly, beside a plain ``dateline run`` livenews job against
the same kind of server (issue 45: the build must not be the bottleneck).

    python perf/build_harness.py                       # 2,000 articles, ~300 events (a few minutes on 2 cores)
    python perf/build_harness.py --articles 300 --events 50      # quick

What runs, in this process, as the tests run a build (compose, ``check_builds``, ``run_sweep``,
``publish_all``) and share one Ray session (a one-episode warm-up starts it, untimed):

* **inputs**: ``--articles`` synthetic articles (JSON Lines in a temporary folder), dated over four
  months (2025-03-01 to 2025-06-30) and written about ``--events`` events (a place, a subject and a
  reported figure each; one to three days of reports), no event list: the intake groups them by
  date window and MiniLM similarity, as with RealTime QA's dumps;
* **intake**, timed alone before the job: reading the file, loading MiniLM, then embedding and
  grouping (the embedding cache is a temporary folder, so it is cold); the job then finds the
  items in the intake's per-process cache, so its wall time is the harness's;
* **the build job**: two scripted OpenAI-compatible servers (``tests/fake_openai.py``, threads of
  this process, instant replies): the generator (relevance Yes, ~5% No; a figure-6 pair, ~3%
  skipped) and the verifier (its answer, ~5% different; the grader; the guidelines as JSON, ~4%
  failing ``stable``). Stage calls are the manifest's ``usage`` (generator / verifier);
* **publish**: verdicts, near-duplicate questions (MiniLM again, over the kept questions), the
  date split, the release files, the manifest, card and report;
* **the plain run**: ``benchmark=livenews`` (the 12 bundled questions x ``run.num_seeds``, about as
  many episodes as articles): Search, Click, Finish on the offline web, then the grader on a
  second server (``judge=openai_compatible``: the grade and its two probes), as the build's checks
  run on the verifier.

Cluster settings (both jobs): ``cluster.num_workers=1``, ``cluster.episodes_per_worker=32``,
``model.max_inflight_per_replica=32``, ``judge.max_inflight=32``, ``cluster.num_cpus=4`` (Ray's
logical CPUs, as the tests use on 2 cores). How to read it: ``calls/s`` is model calls (generator
and verifier, or agent and judge) answered per second of the job's wall time with a server that
costs nothing: the harness's ceiling. Both jobs stream the checks while episodes run ("episodes s"
and "judge s" overlap), so the wall is the slower of the two streams. A draft makes fewer calls than
a livenews episode (2 against 3), and an episode's fixed costs (dispatch, its row, its steps) bound
both, so compare episodes/s too: a ratio build / plain run near 1 says the build's stages (the
memo service, two judge rounds, verdicts) add no overhead beyond a run's. The servers are threads
of this process and share its CPU with the driver, in both jobs alike.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import logging
import os
import random
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tests.fake_openai import FakeOpenAI  # noqa: E402
from tests.helpers import livenews_responder  # noqa: E402

START = dt.date(2025, 3, 1)
DAYS = 122                                    # to 2025-06-30
PLACES = ("Lisbon", "Nairobi", "Osaka", "Quito", "Tallinn", "Hanoi", "Accra", "Perth", "Bergen", "Cusco",
          "Tbilisi", "Dakar", "Valencia", "Manila", "Oaxaca", "Gdansk", "Izmir", "Recife", "Kigali", "Sapporo")
SUBJECTS = ("port workers' strike", "bridge reopening", "city council election", "wildfire", "flood defences",
            "metro line opening", "hospital funding", "heatwave", "chess tournament", "wind farm approval",
            "teachers' pay deal", "airport expansion", "museum theft", "marathon", "water shortage",
            "bus fare rise", "earthquake drill", "film festival", "rail strike", "housing plan")
UNITS = ("days", "percent", "million euros", "kilometres", "people", "hectares")
FACT = re.compile(r"The figure reported by desk (\w+) was ([^.]+)\.")
EVENT = re.compile(r"Officials in (.+?) gave an update on the (.+?) on (.+?)\. ")
FIGURE6 = ("Question: {q}\nAnswer: {a}\nTemporal Stability: Unlikely to change over time\n"
           "Explanation: a figure the article reports.")


def make_articles(folder: Path, n: int, n_events: int, seed: int) -> Path:
    """``n`` articles about ``n_events`` events as JSON Lines; each names its figure (see FACT)."""
    rng = random.Random(seed)
    events = [(START + dt.timedelta(days=rng.randrange(DAYS - 3)), rng.choice(PLACES), rng.choice(SUBJECTS))
              for _ in range(n_events)]
    path = folder / "articles.jsonl"
    with path.open("w") as f:
        for i in range(n):
            day, place, subject = events[i % n_events]
            desk = f"D{i:05d}"
            figure = f"{rng.randrange(2, 999)} {rng.choice(UNITS)}"
            text = (f"Officials in {place} gave an update on the {subject} on {day:%d %B %Y}. "
                    f"The figure reported by desk {desk} was {figure}. Residents described the {subject} "
                    f"as the main news in {place} this week. " + "Further background on the story. " * 12)
            f.write(json.dumps({"url": f"https://www.example{i % 7}.com/{place.lower()}/{i}",
                                "title": f"{subject.capitalize()} in {place}: desk {desk} reports",
                                "text": text, "publish_date": (day + dt.timedelta(days=i % 3)).isoformat()}) + "\n")
    return path


def _share(key: str, salt: str) -> float:
    """A stable number in [0, 1) per article and purpose (which ones are rejected, and where)."""
    return int(hashlib.sha256(f"{salt}:{key}".encode()).hexdigest()[:8], 16) / 16**8


def generator(messages: list[dict[str, Any]], req: dict[str, Any]) -> str:
    p = messages[0]["content"]
    m = FACT.search(p)
    desk, figure = m.groups() if m else ("?", "?")
    if "News event summary:" in p:                                  # figure 5
        return "It reports the event.\nAnswer: " + ("No" if _share(desk, "off") < 0.05 else "Yes")
    if _share(desk, "skip") < 0.03:                                 # figure 6, skipped
        return FIGURE6.format(q="N/A", a="N/A")
    # one question per event, as a model would write from any of its reports: near-duplicates
    # across an event's articles, which the publish step's dedupe removes
    place, subject, day = e.groups() if (e := EVENT.search(p)) else ("?", "?", "?")
    return FIGURE6.format(q=f"What figure was reported about the {subject} in {place} on {day}?", a=figure)


def verifier(messages: list[dict[str, Any]], req: dict[str, Any]) -> str:
    p = messages[0]["content"]
    if "Gold target:" in p:                                         # the grader (the build's match, the run's grade)
        new = p.split("Here is a new example.")[-1]
        gold, pred = re.search(r"Gold target: (.*)", new), re.search(r"Predicted answer: (.*)", new)
        return "A" if gold is None or pred is None or gold.group(1).strip() == pred.group(1).strip() else "B"
    m = FACT.search(p)
    desk, figure = m.groups() if m else ("?", "?")
    if "reply exactly: N/A" in p:                                   # the verifier's own answer
        return "another figure" if _share(desk, "differ") < 0.05 else figure
    rules = ("from_article", "self_contained", "unambiguous", "not_self_answering", "short_answer",
             "not_known_before", "objective", "stable")
    return json.dumps({r: not (r == "stable" and _share(desk, "stable") < 0.04) for r in rules})


CLUSTER = ["cluster.num_workers=1", "cluster.episodes_per_worker=32", "model.max_inflight_per_replica=32",
           "judge.max_inflight=32", "cluster.num_cpus=4", "run.progress=false"]


def endpoints(gen_url: str, ver_url: str) -> list[str]:
    return ["model=openai_compatible", f"model.base_url={gen_url}", "model.name=gen", "model.api_key_env=",
            "judge=openai_compatible", f"judge.base_url={ver_url}", "judge.model=ver", "judge.api_key_env="]


def timed(f: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = f()
    return out, time.perf_counter() - t0


def time_intake(cfg: Any, cache: Path) -> dict[str, Any]:
    """Reading alone, MiniLM's load, then the whole intake (reading, embedding, grouping) into the
    per-process cache the job then reads; the embedding cache is ``cache`` (empty: cold)."""
    from engine.benchmarks.livenews.build import intake as intake_mod
    from engine.benchmarks.livenews.build.articles import read_articles
    from engine.inputs.paths import data_path

    intake_mod.cache_dir = lambda: cache                   # a cold embedding cache of its own
    arts, read_s = timed(lambda: read_articles([data_path(p) for p in cfg.benchmark.articles]))
    _, load_s = timed(lambda: intake_mod.embed_texts(["loads MiniLM"]))
    ink, total_s = timed(lambda: intake_mod.intake(cfg.benchmark))
    return {"articles": len(arts), "read_s": read_s, "minilm_load_s": load_s, "intake_s": total_s,
            "items": len(ink.items), "events": ink.counts.get("groups", 0)}


def run_build(session: Any, tmp: Path, a: argparse.Namespace) -> dict[str, Any]:
    from ray_jobs.build.entry import check_builds, publish_all
    from ray_jobs.build.publish import release_dir
    from ray_jobs.config.compose import compose
    from ray_jobs.run.sweep import run_sweep

    folder = tmp / "in"
    folder.mkdir()
    arts = make_articles(folder, a.articles, a.events, a.seed)
    with FakeOpenAI(generator) as gen, FakeOpenAI(verifier) as ver:
        cfg = compose(["build=livenews", f"benchmark.articles=[{arts}]", f"run.dir={tmp / 'build'}",
                       *endpoints(gen.base_url, ver.base_url), *CLUSTER])
        intake = time_intake(cfg, tmp / "embeddings")
        check_builds([cfg])
        infos, job_s = timed(lambda: run_sweep([cfg], session, print_summary=False))
        _, publish_s = timed(lambda: publish_all([cfg], infos))
        served = {"generator": len(gen.requests), "verifier": len(ver.requests)}
    m = json.loads((release_dir(cfg) / "manifest.json").read_text())
    usage = {role: m["usage"].get(role, {}).get("calls", 0) for role in ("generator", "verifier")}
    return {**intake, "job_s": job_s, "publish_s": publish_s, "usage": usage, "served": served,
            "kept": m["kept"], "drafts": m["items"], "pending": m["pending"], "stages": m["stages"],
            "episodes_s": infos[0].get("run_s") or 0.0, "judge_s": (infos[0].get("judge") or {}).get("wall_s") or 0.0}


def run_plain(session: Any, tmp: Path, seeds: int, limit: int | None = None) -> dict[str, Any]:
    from ray_jobs.config.compose import compose
    from ray_jobs.run.sweep import run_sweep

    with FakeOpenAI(livenews_responder()) as gen, FakeOpenAI(livenews_responder()) as ver:
        cfg = compose(["benchmark=livenews", "agent=livenews", f"run.num_seeds={seeds}",
                       *([f"benchmark.limit={limit}"] if limit else []), f"run.dir={tmp}",
                       *endpoints(gen.base_url, ver.base_url), *CLUSTER])
        infos, job_s = timed(lambda: run_sweep([cfg], session, print_summary=False))
        served = {"model": len(gen.requests), "judge": len(ver.requests)}
    return {"job_s": job_s, "served": served, "episodes": infos[0].get("episodes_planned", 0),
            "episodes_s": infos[0].get("run_s") or 0.0, "judge_s": (infos[0].get("judge") or {}).get("wall_s") or 0.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--articles", type=int, default=2000)
    ap.add_argument("--events", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plain-seeds", type=int, default=0,
                    help="run.num_seeds of the plain livenews run (0: about as many episodes as articles)")
    a = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from ray_jobs.cluster.session import Session

    tmp = Path(tempfile.mkdtemp(prefix="build-harness-"))
    seeds = a.plain_seeds or max(1, round(a.articles / 12))
    session = Session()
    try:
        _, warm_s = timed(lambda: run_plain(session, tmp / "warmup", 1, limit=1))
        build = run_build(session, tmp, a)
        plain = run_plain(session, tmp / "plain", seeds)
    finally:
        session.close()
    report(a, build, plain, warm_s, tmp)


def report(a: argparse.Namespace, b: dict[str, Any], p: dict[str, Any], warm_s: float, tmp: Path) -> None:
    gen, ver = b["usage"]["generator"], b["usage"]["verifier"]
    calls, plain_calls = gen + ver, sum(p["served"].values())
    build_rate, plain_rate = calls / b["job_s"], plain_calls / p["job_s"]
    build_eps, plain_eps = b["drafts"] / b["job_s"], p["episodes"] / p["job_s"]
    print(f"\nbuild harness: {a.articles} synthetic articles, {a.events} events written, instant scripted servers "
          f"(warm-up run, untimed: {warm_s:.1f} s; files under {tmp})")
    print(f"intake: {b['articles']} articles read in {b['read_s']:.2f} s; MiniLM load {b['minilm_load_s']:.1f} s; "
          f"read + embed + group (cold embedding cache) {b['intake_s']:.1f} s -> {b['items']} items in "
          f"{b['events']} grouped events")
    print(f"build: {b['drafts']} drafts, {b['kept']} kept, {b['pending']} pending; stage calls: generator {gen}, "
          f"verifier {ver} (the servers saw {b['served']['generator']} and {b['served']['verifier']})")
    order = ("intake", "relevance", "draft", "answer", "match", "adherence", "dedupe", "split")
    print("  per stage (in -> passed): " + ", ".join(f"{s} {b['stages'][s]['in']}->{b['stages'][s]['passed']}"
                                                    for s in order if s in b["stages"]))
    print(f"\n{'job':<30}{'wall s':>8}{'episodes':>10}{'ep/s':>7}{'model calls':>13}{'judge calls':>13}{'calls/s':>9}"
          f"{'episodes s':>12}{'judge s':>9}")
    print(f"{'dateline build (run_sweep)':<30}{b['job_s']:>8.1f}{b['drafts']:>10}{build_eps:>7.1f}{gen:>13}{ver:>13}"
          f"{build_rate:>9.1f}{b['episodes_s']:>12.1f}{b['judge_s']:>9.1f}")
    print(f"{'dateline run livenews':<30}{p['job_s']:>8.1f}{p['episodes']:>10}{plain_eps:>7.1f}{p['served']['model']:>13}"
          f"{p['served']['judge']:>13}{plain_rate:>9.1f}{p['episodes_s']:>12.1f}{p['judge_s']:>9.1f}")
    print(f"{'build publish (dedupe, files)':<30}{b['publish_s']:>8.1f}")
    print(f"\nstage calls per second of the build harness alone: {build_rate:.1f}; ratio build / plain run: "
          f"{build_rate / plain_rate:.2f} in calls/s, {build_eps / plain_eps:.2f} in episodes/s (a draft makes "
          f"{gen / max(1, b['drafts']):.1f} generator calls, a livenews episode {p['served']['model'] / max(1, p['episodes']):.1f})")
    print(f"the whole build (intake, job, publish): {b['intake_s'] + b['job_s'] + b['publish_s']:.1f} s, "
          f"{calls / (b['intake_s'] + b['job_s'] + b['publish_s']):.1f} stage calls/s")


if __name__ == "__main__":
    main()
