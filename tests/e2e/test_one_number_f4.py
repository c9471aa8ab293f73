"""Issue 31, finding 4 (and finding 13's episode pages and empty figure): an episode's values in
``dateline show``, ``Results.transcript`` and its report page are the ones ``dateline metrics``
averages, through the same judged views and each judge's evaluation settings. Real driver
(Hydra, Ray, workers, the judge stage, Parquet) against scripted servers:

* livenews, two questions (one answered right, one wrong), one judge: the ``no judge`` block has
  no ``accuracy`` (it had ``accuracy: 0`` for the right answer); the judge's block says 1 and 0,
  whose mean is the 0.5 ``dateline metrics`` prints for that judge;
* analyst, 40 claims (30 supported, 6 unsupported, 4 unparseable) judged under ``max_claims`` 40
  (hallucination 25 %), then re-judged under ``benchmark.max_claims=20`` (a second judge id:
  claims 0-19, all supported, 0 %): each judge's block says its own value, equal to ``metrics``
  (the second said 50: 20 of 40 unverified under the generation-time 40); the episode index has
  one column per judge, headed with it;
* two run dirs of the rule-based newsagent (one configuration hash in both, 2 and 3 tasks) in one
  report: each dir's link opens its own index, listing as many episodes as the link says (the
  second dir's pages overwrote the first's); no tokens figure when no episode used a token.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from engine.benchmarks.analyst.data import load_tasks
from engine.inputs.paths import data_path
from engine.storage import EpisodeStore
from ray_jobs.config.compose import compose
from tests.e2e.test_analyst_numbers import CLAIMS, REPORT, verdict
from tests.e2e.test_what_a_number_means import FINISH, grader, judged, live_cfg, questions, sweep, which
from tests.everywhere import cell_lines, rows_with, seen
from tests.fake_openai import FakeOpenAI

pytestmark = pytest.mark.ray


def blocks(text: str) -> dict[str, dict[str, float]]:
    """The ``=== metrics (...)`` blocks of a transcript: heading -> metric -> value."""
    out: dict[str, dict[str, float]] = {}
    cur = None
    for ln in text.splitlines():
        if ln.startswith("=== "):
            cur = out.setdefault(ln[len("=== metrics ("):-1], {}) if ln.startswith("=== metrics (") else None
        elif cur is not None and ": " in ln:
            k, v = ln.split(": ", 1)
            cur[k] = float(v)
    return out


def page_blocks(html: str) -> dict[str, dict[str, float]]:
    """The metrics tables of an episode page: heading -> metric -> value."""
    out: dict[str, dict[str, float]] = {}
    for head, table in re.findall(r"<h2>Metrics \((.*?)\)</h2>(<table>.*?</table>)", html):
        cells = [ln.split(" | ") for ln in cell_lines(table)]
        out[head] = {k: float(v) for k, v in cells}
    return out


def printed(metrics_text: str, metric: str, judge: str) -> float:
    """The value ``dateline metrics`` prints for ``metric`` under ``judge``."""
    (line,) = rows_with(metrics_text, metric, judge)
    cells = [c.strip() for c in line.split("|")]
    return float(cells[cells.index(metric) + 1])


def index_links(report_html: str) -> list[tuple[str, int]]:
    """(href, count) of the report's "N episodes" links."""
    return [(h, int(n)) for h, n in re.findall(r'<a href="(episodes/[^"]+/index\.html)">(\d+) episodes</a>',
                                               report_html)]


def page_of(out: Path, report_html: str, eid: str) -> str:
    """An episode's page, found from the report's link to its configuration's index."""
    (href, _), = index_links(report_html)
    return (out / "report" / href).parent.joinpath(f"{eid}.html").read_text()


def everywhere(s, out: Path, eid: str) -> list[tuple[str, dict[str, dict[str, float]]]]:
    """An episode's metrics blocks as ``show``, ``Results.transcript`` and its page give them."""
    return [("show", blocks(s.show[eid])), ("transcript", blocks(s.transcript[eid])),
            ("page", page_blocks(page_of(out, s.report_html, eid)))]


def test_livenews_no_judge_has_no_accuracy_and_the_judge_block_is_what_metrics_averages(tmp_path):
    qs = questions(2)

    def model(messages, req):
        return FINISH.format("RIGHT" if which(messages, qs) == 0 else "WRONG")

    run = tmp_path / "run"
    with FakeOpenAI(model) as m, FakeOpenAI(grader) as j:
        sweep([live_cfg(m.base_url, run, "benchmark.limit=2", *judged(j.base_url))])
    store = EpisodeStore(run)
    (jid,) = store.judges()
    right = {e["episode_id"]: "RIGHT" in (e["output"] or "") for e in store.episodes(["episode_id", "output"]).to_pylist()}
    assert sorted(right.values()) == [False, True]
    s = seen(run, "livenews", tmp_path, export=False)
    assert printed(s.metrics, "accuracy", jid) == pytest.approx(0.5)          # 1 right of 2
    for eid, ok in right.items():
        for where, b in everywhere(s, tmp_path, eid):
            assert "accuracy" not in b["no judge"], (where, b)                    # before: accuracy 0
            assert b["no judge"]["searches_mean"] == b[f"judge {jid}"]["searches_mean"]
            assert b[f"judge {jid}"]["accuracy"] == (1.0 if ok else 0.0), (where, b)
    per_episode = [blocks(s.show[e])[f"judge {jid}"]["accuracy"] for e in right]
    assert sum(per_episode) / len(per_episode) == pytest.approx(printed(s.metrics, "accuracy", jid))


def analyst_cfg(model_url: str, judge_url: str, tmp: Path, *extra: str):
    checklists = tmp / "checklists"
    checklists.mkdir(exist_ok=True)
    return compose(["benchmark=analyst", "agent=analyst", "benchmark.task_ids=[unemployment-brief]",
                    f"benchmark.checklists_dir={checklists}", "model=openai_compatible", f"model.base_url={model_url}",
                    "model.name=scripted", "model.api_key_env=", "judge=openai_compatible",
                    f"judge.base_url={judge_url}", "judge.model=grader", "judge.api_key_env=", "judge.max_attempts=1",
                    f"run.dir={tmp / 'run'}", "run.progress=false", "cluster.num_cpus=4", *extra])


def test_analyst_each_judge_is_shown_under_its_own_evaluation_settings(tmp_path):
    (task,) = [t for t in load_tasks(data_path("engine/benchmarks/analyst/sample_tasks"))
               if t.task_id == "unemployment-brief"]
    assert task.checklist                       # its own checklist: nothing to generate

    def judge(messages, req):
        text = messages[0]["content"]
        if "Evaluation criteria:" in text:
            return "The criterion is met, therefore, the rating is: 4"
        if "atomic factual claims" in text:
            return json.dumps(CLAIMS)
        return verdict(int(re.search(r"Claim number (\d+) about", text).group(1)))

    with FakeOpenAI(lambda messages, req: REPORT) as srv, FakeOpenAI(judge) as j:
        sweep([analyst_cfg(srv.base_url, j.base_url, tmp_path)])
        sweep([analyst_cfg(srv.base_url, j.base_url, tmp_path, "benchmark.max_claims=20")])
    run = tmp_path / "run"
    store = EpisodeStore(run)
    by_max = {json.loads(v["evaluation"])["max_claims"]: k for k, v in store.judges().items()}
    assert sorted(by_max) == [20, 40]
    (eid,) = store.episodes(["episode_id"]).column("episode_id").to_pylist()
    s = seen(run, "analyst", tmp_path, export=False)
    want = {by_max[40]: 25.0, by_max[20]: 0.0}          # (6 + 4) / 40; 0 of claims 0-19
    for jid, value in want.items():
        assert printed(s.metrics, "hallucination_pct", jid) == pytest.approx(value)
        for where, b in everywhere(s, tmp_path, eid):
            assert b[f"judge {jid}"]["hallucination_pct"] == pytest.approx(value), (where, jid, b)  # before: 50
        assert "hallucination_pct" not in blocks(s.show[eid])["no judge"]

    # the index: one column per judge, each headed with its judge, holding that judge's value
    (href, n), = index_links(s.report_html)
    lines = cell_lines((tmp_path / "report" / href).read_text())
    head = next(ln.split(" | ") for ln in lines if ln.startswith("episode | task"))
    (row,) = [ln.split(" | ") for ln in lines if ln.startswith(eid[:16])]
    assert n == 1 and len(head) == len(row)
    for jid, value in want.items():
        assert float(row[head.index(f"hallucination_pct [judge {jid}]")]) == pytest.approx(value)
    # its filter reads the column picked, not the last judge's: 10 % and up keeps the episode
    # under the first judge (25 %), none under the second (0 %)
    from tests.browser import Browser

    picks = [i for i, label in enumerate(head[6:]) if label.startswith("hallucination_pct [judge ")]
    with Browser() as b:
        shown = [b.open(tmp_path / "report" / href, wait_for=(
            f"(document.getElementById('episodes-column').value='{6 + i}', document.getElementById('episodes-from')"
            ".value='10', document.getElementById('episodes-from').dispatchEvent(new Event('input')), true)")
        ).text for i in picks]
    by_label = dict(zip((head[6 + i] for i in picks), shown))
    assert "1 of 1 shown" in by_label[f"hallucination_pct [judge {by_max[40]}]"]
    assert "0 of 1 shown" in by_label[f"hallucination_pct [judge {by_max[20]}]"]


def test_two_run_dirs_of_one_configuration_keep_their_own_pages_and_no_empty_figure(tmp_path):
    from ray_jobs.outputs.report import build

    dirs = [tmp_path / "two", tmp_path / "three"]
    sweep([compose(["benchmark=newsagent", "agent=newsagent_rule_based", f"benchmark.limit={n}", f"run.dir={d}",
                    "run.progress=false", "cluster.num_cpus=4"]) for d, n in zip(dirs, (2, 3))])
    hashes = {r["config_hash"] for d in dirs for r in EpisodeStore(d).episodes(["config_hash"]).to_pylist()}
    assert len(hashes) == 1                     # one configuration in both dirs
    out = tmp_path / "rep"
    build(dirs, out, n_boot=50)
    html = (out / "report.html").read_text()
    links = index_links(html)
    assert sorted(n for _, n in links) == [2, 3] and len({h for h, _ in links}) == 2, links
    from tests.browser import Browser

    with Browser() as b:            # what a reader clicking each dir's link sees
        for _, n in links:
            assert f"{n} of {n} shown" in b.click(out / "report.html", f"{n} episodes").text
    for href, n in links:
        index = (out / href).read_text()
        assert f'<span id="shown">{n}</span> of {n} shown' in index, (href, n)     # before: 3 of 3 behind "2"
        assert len(re.findall(r'<tr class="ep"', index)) == n
        for page in re.findall(r'<a href="([0-9a-f]+\.html)">', index):
            assert (out / href).parent.joinpath(page).is_file()
    # rule-based: no episode used a token, so no tokens figure and no caption for one
    md = (out / "report.md").read_text()
    assert not list(out.glob("*tokens-cost*.png")) and "tokens per episode, by configuration" not in md
    assert "tokens per episode, by configuration" not in html
