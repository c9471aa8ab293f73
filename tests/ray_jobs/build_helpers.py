"""Scripted models and hand-made articles for the tests of ``dateline build build=livenews``.

Six events, nine articles. What the scripted generator and verifier do with each article is
written in its title, so every stage's keep and reject path is taken once at least:

* ``[off]``: the generator finds the article irrelevant to its event (relevance rejects);
* ``[skip]``: the generator skips it (drafting rejects);
* ``[differ]``: the verifier's own answer differs (the match rejects: answers_differ);
* ``[unanswerable]``: the verifier finds no answer in the article;
* ``[vague]``: the guideline check fails ``unambiguous`` (adherence rejects);
* ``[changing]``: the guideline check fails only ``stable`` (kept, in the longitudinal set);
* ``[twin]``: the same question as the article before it (dedupe rejects);
* the rest are kept in the main set.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

ARTICLES = [
    # (event date, days after it, outlet, title, fact)
    ("2025-03-03", 0, "apnews.com", "Port strike ends after 12 days", "twelve days"),
    ("2025-03-03", 1, "reuters.com", "Port strike deal [off] unrelated weather story", "rain"),
    ("2025-04-10", 0, "bbc.co.uk", "Bridge reopens in Lisbon [skip]", "none"),
    ("2025-05-20", 0, "apnews.com", "Rover lands on Mars crater Jezero-2 [differ]", "Jezero-2"),
    ("2025-06-14", 2, "reuters.com", "Election turnout record in Chile [vague]", "82 percent"),
    ("2025-06-14", 3, "apnews.com", "Chile cabinet named [changing]", "Minister Rojas"),
    ("2025-07-01", 0, "bbc.co.uk", "Heatwave record in Madrid", "44.1 C"),
    ("2025-07-01", 1, "apnews.com", "Heatwave record in Madrid again [twin]", "44.1 C"),
    ("2025-08-08", 0, "reuters.com", "Glacier survey finds loss [unanswerable]", "3 km"),
]


def write_inputs(folder: Path) -> tuple[Path, Path]:
    """articles.jsonl and events.jsonl under ``folder``."""
    import datetime as dt

    folder.mkdir(parents=True, exist_ok=True)
    arts, events = folder / "articles.jsonl", folder / "events.jsonl"
    seen: dict[str, str] = {}
    with arts.open("w") as f:
        for i, (day, after, outlet, title, fact) in enumerate(ARTICLES):
            date = (dt.date.fromisoformat(day) + dt.timedelta(days=after)).isoformat()
            text = f"{title}. Reporters confirmed the figure: {fact}. " + "Background paragraph. " * 20
            f.write(json.dumps({"url": f"https://www.{outlet}/story/{i}", "title": title, "text": text,
                                "publish_date": date}) + "\n")
            seen.setdefault(day, title.split(" [")[0])
    with events.open("w") as f:
        for day, summary in seen.items():
            f.write(json.dumps({"date": day, "summary": summary}) + "\n")
    return arts, events


def _title(prompt: str) -> str:
    """The article's title: the one found last in the prompt (an event summary comes before it)."""
    found = [(prompt.rfind(t), t) for t in (a[3] for a in ARTICLES) if t in prompt]
    return max(found)[1] if found else ""


def _fact(title: str) -> str:
    return next(a[4] for a in ARTICLES if a[3] == title)


def generator(messages: list[dict[str, Any]], req: dict[str, Any]) -> str:
    p = messages[0]["content"]
    title = _title(p)
    if "News event summary:" in p:                              # figure 5
        return "The article reports it.\nAnswer: " + ("No" if "[off]" in title else "Yes")
    if "Temporal Stability" in p:                               # figure 6
        if "[skip]" in title:
            return "Question: N/A\nAnswer: N/A\nTemporal Stability: N/A\nExplanation: too thin."
        base = title.split(" [")[0].replace(" again", "")
        return (f"Candidates considered.\nQuestion: What figure was reported about: {base}?\nAnswer: {_fact(title)}\n"
                "Temporal Stability: Unlikely to change over time\nExplanation: fixed fact.")
    return "?"


def verifier(messages: list[dict[str, Any]], req: dict[str, Any]) -> str:
    p = messages[0]["content"]
    if "Gold target:" in p:                                     # the grader
        new = p.split("Here is a new example.")[-1]
        gold, pred = re.search(r"Gold target: (.*)", new), re.search(r"Predicted answer: (.*)", new)
        return "A" if gold and pred and gold.group(1).strip() == pred.group(1).strip() else "B"
    title = _title(p)
    if "reply exactly: N/A" in p:                               # the verifier's own answer
        if "[unanswerable]" in title:
            return "N/A"
        return "a different thing" if "[differ]" in title else _fact(title)
    if "Rules:" in p:                                           # the guideline check
        rules = {r: True for r in ("from_article", "self_contained", "unambiguous", "not_self_answering",
                                   "short_answer", "not_known_before", "objective", "stable")}
        if "[vague]" in title:
            rules["unambiguous"] = False
        if "[changing]" in title:
            rules["stable"] = False
        return json.dumps(rules)
    return "?"


def build_overrides(gen_url: str, ver_url: str, folder: Path, run_dir: Path, *extra: str) -> list[str]:
    arts, events = write_inputs(folder)
    return ["build=livenews", f"benchmark.articles=[{arts}]", f"benchmark.events={events}",
            "model=openai_compatible", f"model.base_url={gen_url}", "model.name=gen", "model.api_key_env=",
            "judge=openai_compatible", f"judge.base_url={ver_url}", "judge.model=ver", "judge.api_key_env=",
            f"run.dir={run_dir}", "run.progress=false", "run.flush_interval_s=0", "cluster.num_workers=1",
            "cluster.episodes_per_worker=2", "cluster.num_cpus=4", *extra]


def build_in_process(overrides: list[str]) -> tuple[Path, dict[str, Any]]:
    """``dateline build`` in this process (compose, the build checks, the run, the publish step):
    the release folder and its manifest. Starts Ray: a test calling it is marked ``ray``."""
    from ray_jobs.build.entry import check_builds, publish_all
    from ray_jobs.build.publish import release_dir
    from ray_jobs.cluster.session import Session
    from ray_jobs.config.compose import compose
    from ray_jobs.run.sweep import run_sweep

    cfg = compose(overrides)
    check_builds([cfg])
    session = Session()
    try:
        infos = run_sweep([cfg], session, print_summary=False)
        publish_all([cfg], infos)
    finally:
        session.close()
    out = release_dir(cfg)
    return out, json.loads((out / "manifest.json").read_text())
