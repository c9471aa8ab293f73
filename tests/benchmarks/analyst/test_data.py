"""Analyst task folders: the bundled sample loads; bad folders fail naming file and field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine.benchmarks.analyst.data import load_tasks
from engine.benchmarks.analyst.sources import source_texts
from engine.errors import DataError

SAMPLE = Path(__file__).resolve().parents[3] / "engine" / "benchmarks" / "analyst" / "sample_tasks"


def test_sample_tasks_load():
    tasks = {t.task_id: t for t in load_tasks(SAMPLE)}
    assert set(tasks) == {"crashes-2022", "crashes-2023", "unemployment-brief"}
    c = tasks["crashes-2023"]
    assert c.toc and c.excluded and not c.checklist
    assert c.template == tasks["crashes-2022"].reference          # R*: the other variant's report
    assert len(tasks["unemployment-brief"].checklist) == 8
    texts = {s.name: s.text for s in source_texts(c.sources_dir)}
    assert set(texts) == {"council_minutes_excerpt.md", "crashes_2023.csv", "vision_zero_update.md"}
    assert "60 rows x 7 columns" in texts["crashes_2023.csv"]


@pytest.fixture
def copy(tmp_path):
    dst = tmp_path / "tasks"
    shutil.copytree(SAMPLE, dst)
    return dst


@pytest.mark.parametrize("edit,where", [
    (lambda d: (d / "crashes-2023" / "task.json").write_text("{"), r"crashes-2023/task.json, row 1: invalid JSON"),
    (lambda d: (d / "crashes-2023" / "task.json").write_text(json.dumps({"task_id": "crashes-2023"})),
     r"task.json, row 1, field 'instruction': missing"),
    (lambda d: (d / "crashes-2023" / "task.json").write_text(json.dumps({"task_id": "x", "instruction": "i"})),
     r"field 'task_id': 'x' differs from the folder name"),
    (lambda d: (d / "crashes-2023" / "reference.md").unlink(), r"crashes-2023/reference.md: file not found"),
    (lambda d: shutil.rmtree(d / "crashes-2023" / "sources"), r"crashes-2023/sources: a task needs a sources/ folder"),
    (lambda d: (d / "unemployment-brief" / "checklist.json").write_text('["The response should x."]'),
     r"checklist.json, row 1, field 'criterion': expected a description line"),
    (lambda d: shutil.rmtree(d / "crashes-2022"), r"field 'template_from': no task 'crashes-2022'"),
])
def test_bad_task_folders(copy, edit, where):
    edit(copy)
    with pytest.raises(DataError, match=where):
        load_tasks(copy)
