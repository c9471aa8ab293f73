"""Bad input names the file, the row and the field."""

from __future__ import annotations

import json

import pytest

from engine.benchmarks.newsagent.data import load_dataset
from engine.errors import DataError


def write(tmp_path, tasks, objects):
    (tmp_path / "tasks.jsonl").write_text("\n".join(t if isinstance(t, str) else json.dumps(t) for t in tasks))
    (tmp_path / "objects.jsonl").write_text("\n".join(o if isinstance(o, str) else json.dumps(o) for o in objects))


OBJ = {"object_id": "h1", "date": "2024-01-01", "text": "Old fact.", "kind": "description"}
TASK = {"task_id": "t1", "title": "T", "release_date": "2024-02-01", "firsthand": ["Now."], "reference_evidence": ["h1"]}


def test_sample_dataset_loads(sample_dataset):
    assert len(sample_dataset.tasks) >= 20 and len(sample_dataset.objects) >= 500
    for t in sample_dataset.tasks:
        assert all(sample_dataset.object(r).date < t.release_date for r in t.reference_evidence)


@pytest.mark.parametrize("tasks,objects,where", [
    ([TASK], [OBJ, "{not json"], "objects.jsonl, row 2: invalid JSON"),
    ([TASK], [dict(OBJ, date="2024-13-01")], "objects.jsonl, row 1, field 'date'"),
    ([TASK], [dict(OBJ, kind="poem")], "objects.jsonl, row 1, field 'kind'"),
    ([TASK], [OBJ, OBJ], "objects.jsonl, row 2, field 'object_id': duplicate id 'h1' (first at row 1)"),
    ([dict(TASK, firsthand=[])], [OBJ], "tasks.jsonl, row 1, field 'firsthand'"),
    ([{k: v for k, v in TASK.items() if k != "title"}], [OBJ], "tasks.jsonl, row 1, field 'title': missing"),
    ([TASK, dict(TASK, task_id="t2", reference_evidence=["h9"])], [OBJ],
     "tasks.jsonl, row 2, field 'reference_evidence': unknown object id 'h9'"),
    ([dict(TASK, release_date="2024-01-01")], [OBJ],
     "tasks.jsonl, row 1, field 'reference_evidence': object 'h1' is dated 2024-01-01, not before the release date"),
    (["[1, 2]"], [OBJ], "tasks.jsonl, row 1: expected a JSON object"),
])
def test_errors_name_file_row_field(tmp_path, tasks, objects, where):
    write(tmp_path, tasks, objects)
    with pytest.raises(DataError) as e:
        load_dataset(tmp_path)
    assert where in str(e.value) and str(tmp_path) in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="objects.jsonl: file not found"):
        load_dataset(tmp_path)
