"""The analyst sandbox leaks nothing: a snippet cannot read the task's reference, checklist or ToC,
the other episodes' folders, the run dir's judgements or the repository, by any of the routes a
model-written snippet might take. Each route runs under both isolations: ``bwrap`` (its own file
system; the default, and it must work here) and ``audit_unsafe`` (the audit hook alone). The
red-team suite (tests/security/) attacks the boundary itself."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.sandbox import Limits, Sandbox

SECRET = "SECRET-7f3a9c"
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def layout(tmp_path):
    """A task folder and a run dir as a real run has them, every file outside the episode
    folder carrying the secret."""
    task = tmp_path / "tasks" / "crashes-2023"
    (task / "sources").mkdir(parents=True)
    (task / "sources" / "crashes.csv").write_text(f"month,crashes\n1,{SECRET}\n")
    (task / "reference.md").write_text(f"# Reference\n{SECRET}\n")
    (task / "checklist.json").write_text(f'{{"criteria": ["{SECRET}"]}}')
    (task / "toc.md").write_text(f"1. {SECRET}\n")
    run = tmp_path / "run"
    other = run / "artifacts" / "0000000000000001"
    other.mkdir(parents=True)
    (other / "report.md").write_text(f"other episode {SECRET}\n")
    (run / "judgements").mkdir()
    pq.write_table(pa.table({"episode_id": ["0000000000000001"], "text": [SECRET]}),
                   run / "judgements" / "part-0.parquet")
    box_root = run / "artifacts" / "0000000000000002"
    box_root.mkdir()
    (box_root / "sources").mkdir()
    (box_root / "sources" / "crashes.csv").write_text("month,crashes\n1,10\n")
    return {"task": task, "run": run, "other": other, "root": box_root, "repo": REPO}


# (name, code): each prints the secret if the read succeeds
ROUTES = [
    ("open an absolute path", "print(open('{task}/reference.md').read())"),
    ("os.listdir of the task folder", "print(os.listdir('{task}'))\nprint(open('{task}/' + "
                                      "[n for n in os.listdir('{task}') if n.startswith('check')][0]).read())"),
    ("pathlib", "print(pathlib.Path('{task}/checklist.json').read_text())"),
    ("a symlink made inside the folder", "os.symlink('{task}/toc.md', 'toc_link.md')\nprint(open('toc_link.md').read())"),
    ("'..' to another episode", "print(open('../0000000000000001/report.md').read())"),
    ("/proc/self/cwd", "print(open('/proc/self/cwd/../0000000000000001/report.md').read())"),
    ("/proc/self/root", "print(open('/proc/self/root{task}/reference.md').read())"),
    ("pandas read_csv", "import pandas as pd\nprint(pd.read_csv('{task}/sources/crashes.csv').to_string())"),
    ("pandas read_parquet (native reader)", "import pandas as pd\nprint(pd.read_parquet('{run}/judgements').to_string())"),
    ("numpy", "import numpy as np\nprint(np.loadtxt('{task}/toc.md', dtype=str, delimiter='|'))"),
    ("pyarrow C++ filesystem", "import pyarrow.parquet as pq\nprint(pq.read_table('{run}/judgements/part-0.parquet'))"),
    ("os.open + os.read", "fd = os.open('{task}/reference.md', os.O_RDONLY)\nprint(os.read(fd, 1000).decode())"),
    ("glob over the run dir", "import glob\nfor f in glob.glob('{run}/**/*.md', recursive=True):\n    print(open(f).read())"),
    ("os.walk up from the folder", "def boom(e):\n    raise e\nfor d, _, fs in os.walk('..', onerror=boom):\n"
                                   "    for f in fs:\n"
                                   "        print(open(os.path.join(d, f), errors='replace').read())"),
    ("shutil.copy in, then read", "import shutil\nshutil.copy('{task}/reference.md', 'ref.md')\nprint(open('ref.md').read())"),
    ("runpy (io.open_code)", "import runpy\nprint(runpy.run_path('{task}/toc.md'))"),
    ("the repository", "print(open('{repo}/engine/benchmarks/analyst/sample_tasks/crashes-2023/reference.md').read(),"
                       " '{secret}')"),
]

# bwrap never skips: it is the default, and tests/engine/sandbox/test_sandbox.py fails where it cannot start
ISOLATIONS = ["bwrap", "audit_unsafe"]


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("name,code", ROUTES, ids=[r[0] for r in ROUTES])
def test_no_route_reads_outside_the_episode_folder(layout, isolation, name, code):
    box = Sandbox(layout["root"], Limits(timeout_s=60, memory_mb=2048), isolation=isolation)
    assert box.isolation == isolation
    snippet = "import os, pathlib\n" + code.format(**layout, secret=SECRET)
    res = box.run_python(snippet)
    # (the repository route prints the secret after any successful read of the real file)
    assert SECRET not in res.stdout, f"{name}: read outside the folder under {isolation}:\n{res.stdout[:500]}"
    # under bwrap a walk over what is not there may find nothing and succeed; every read fails
    if isolation == "audit_unsafe" or not name.startswith(("glob", "os.walk")):
        assert not res.ok, f"{name}: should have failed under {isolation}"
        assert "Error" in res.stderr, res.stderr[-1000:]


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_inside_the_folder_everything_works(layout, isolation):
    box = Sandbox(layout["root"], Limits(timeout_s=90, memory_mb=2048), isolation=isolation)
    res = box.run_python(
        "import os, glob, tempfile, pandas as pd, numpy as np, matplotlib.pyplot as plt\n"
        "df = pd.read_csv('sources/crashes.csv')\nprint(int(np.asarray(df.crashes).sum()))\n"
        "print(sorted(glob.glob('sources/*')), sorted(os.listdir('.')))\n"
        "with tempfile.NamedTemporaryFile('w', suffix='.txt') as f:\n    f.write('scratch')\n"
        "os.makedirs('figures', exist_ok=True)\nplt.plot(df.month, df.crashes)\nplt.savefig('figures/a.png')\n")
    assert res.ok, res.stderr[-2000:]
    assert res.stdout.splitlines()[0] == "10"
    assert "sources/crashes.csv" in res.stdout
    assert res.new_files == ["figures/a.png"]


def test_bwrap_snippets_hold_no_capabilities_and_see_only_their_folder(layout):
    box = Sandbox(layout["root"], Limits(timeout_s=30), isolation="bwrap")
    # os.stat and os.path.exists raise no audit event: what they see is the file system itself
    res = box.run_python(
        "import os\n"
        f"print(os.path.exists('{layout['task']}'), os.path.exists('{layout['run']}/judgements'),\n"
        f"      os.path.exists('{layout['other']}'), os.path.exists('{REPO}/README.md'),\n"
        f"      os.path.exists('sources/crashes.csv'), os.getpid() <= 2, os.getuid() != 0)\n"
        "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])\n")
    assert res.ok, res.stderr
    assert res.stdout.split() == ["False", "False", "False", "False", "True", "True", "True", "0000000000000000"]


def test_nothing_of_the_runner_is_in_the_writable_folder(layout):
    """The snippet's code goes in on stdin: nothing in the folder a snippet could rewrite is run
    or read by the next run."""
    box = Sandbox(layout["root"], Limits(timeout_s=30))
    res = box.run_python("import os\nprint(sorted(os.listdir('.')))")
    assert res.ok, res.stderr
    assert res.stdout.strip() == "['sources']"
    res = box.run_python(f"print(open('{layout['task']}/reference.md').read())")
    assert not res.ok and SECRET not in res.stdout


def test_unknown_isolation_is_refused(layout):
    with pytest.raises(ValueError, match="isolation"):
        Sandbox(layout["root"], isolation="none")
