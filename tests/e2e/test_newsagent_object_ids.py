"""Issue 31, finding 12, through the real driver: two objects whose texts differ only in punctuation
(the same sentence on two dates, as the RealTimeQA converter makes them) are two objects in
retrieval, insertion and scoring.

A one-task dataset, the rule-based baseline (it searches the title and inserts the top five hits by
id), the real MiniLM index (top-5, cosine > 0.7, strictly before the release date). Five objects
are close to the title and three are the reference evidence, one of them (r3) the punctuation twin
of a non-reference object (n1). By hand: the search returns r1, r2, r3, n1, n2 (any order), so
search precision = 3/5 = 0.600 and recall = 3/3 = 1; the draft holds the same five, so edit
precision 3/5 and recall 1. When the twins collapsed (the code before the fix), one of them was
neither retrieved nor insertable: 5 retrieved became 4 (precision 2/4 or 3/4, recall 2/3 or 1).
The values are read back from ``dateline metrics``, the report's Markdown and the Python API
(newsagent has no ``dateline tables``).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import REPO

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]

TITLE = "Harbor city opens new ferry terminal"
OBJECTS = [
    ("r1", "2024-01-08", "The harbor city opened its new ferry terminal on Monday."),
    ("r2", "2024-01-09", "A new ferry terminal opened in the harbor city this week."),
    ("r3", "2024-01-10", "The harbor city's new ferry terminal, built for $40 million, opens to passengers."),
    ("n1", "2024-01-12", "The harbor city's new ferry terminal; built for $40 million; opens to passengers."),
    ("n2", "2024-01-11", "The harbor city celebrates the opening of its new ferry terminal."),
    ("x1", "2024-01-05", "Wheat prices fell across the Midwest after a mild winter."),
    ("x2", "2024-01-06", "The school board approved a new bus schedule for spring."),
    ("x3", "2024-01-07", "A local bakery won a regional award for its sourdough bread."),
]


def test_punctuation_twins_are_two_objects_in_every_output(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    with open(data / "objects.jsonl", "w") as f:
        for oid, date, text in OBJECTS:
            f.write(json.dumps({"object_id": oid, "date": date, "text": text, "kind": "description",
                                "source": "test"}) + "\n")
    task = {"task_id": "ferry", "title": TITLE, "release_date": "2024-02-01",
            "firsthand": ["Passengers boarded the first ferries at the new terminal on Thursday morning."],
            "reference_evidence": ["r1", "r2", "r3"], "reference_article": "The harbor city opened a ferry terminal."}
    (data / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    run_dir = tmp_path / "run"
    env_cmd = [sys.executable, "-m", "dateline"]
    out = subprocess.run([*env_cmd, "run", "agent=newsagent_rule_based", f"benchmark.data_dir={data}",
                          "benchmark.dataset=twins", f"run.dir={run_dir}", "run.progress=false", "cluster.num_cpus=4"],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]

    from dateline import results
    from engine.benchmarks.newsagent import BENCHMARK
    from engine.storage import EpisodeStore

    r = results(str(run_dir))
    ep = EpisodeStore(run_dir, BENCHMARK.episode_fields).episodes().to_pylist()[0]
    assert sorted(ep["retrieved_ids"]) == ["n1", "n2", "r1", "r2", "r3"], ep["retrieved_ids"]
    assert sorted(ep["draft_ids"]) == ["n1", "n2", "r1", "r2", "r3"], ep["draft_ids"]
    want = {"search_precision": 0.6, "search_recall": 1.0, "edit_precision": 0.6, "edit_recall": 1.0}
    rows = {m["metric"]: m for m in r.metrics().to_pylist() if m["metric"] in want}
    assert {k: round(v["value"], 3) for k, v in rows.items()} == want
    metrics = subprocess.run([*env_cmd, "metrics", str(run_dir), "newsagent"], cwd=REPO, capture_output=True, text=True,
                             timeout=300)
    rep = subprocess.run([*env_cmd, "report", str(run_dir), "--out", str(tmp_path / "report"), "--boot", "20"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert rep.returncode == 0, rep.stderr[-2000:]
    for name, text in (("metrics", metrics.stdout), ("report.md", (tmp_path / "report" / "report.md").read_text())):
        assert metrics.returncode == 0, metrics.stderr[-2000:]
        for metric, value in want.items():
            lines = [ln for ln in text.splitlines() if metric in [c.strip() for c in ln.split("|")]]
            assert lines and all(f"{value:.3f}" in ln or f"{value:g}" in ln for ln in lines), (name, metric, text[-3000:])
