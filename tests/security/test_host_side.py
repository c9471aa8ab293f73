"""The host's side of the analyst sandbox, attacked end to end through the real driver.

tests/security/test_red_team.py attacks the boundary itself; this module attacks what the host
does around it: the code that supervises a snippet, and the code that handles what a snippet left
(issue 30). One ``dateline run`` with its run dir on S3 (a moto server on loopback), so every
episode's folder is uploaded when it ends, against a scripted model whose episodes each carry one
attack:

1. supervision made to fail (a folder chain deeper than a recursive walk goes; files that vanish
   while they are counted) with a process that tries to outlive the snippet;
2. a folder swapped for a link to a host folder while the host walks it, timed with inotify (by a
   survivor, for the next snippet's walks; and from inside the snippet, for the quota walk);
3. the disk quota: a preallocation, 20,000 folders, files deleted while still open;
5. the artifact upload: files swapped for links to a host file, timed with inotify, during it;
6. three forked children that together hold more than the memory limit;
8. the model's observations (thousands of names), socket families it never needs (AF_VSOCK,
   AF_NETLINK, AF_ALG), and a folder chain thousands deep left for the next attempt and the upload.

Class 4 (a non-UTF-8 name, end to end) has a run of its own, and class 7 (a bwrap that ignores its
options) a driver that must refuse to start. Each test here fails on the code before issue 30.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from engine.benchmarks.analyst import BENCHMARK, attempt_seed
from engine.storage import EpisodeStore
from ray_jobs.cluster.session import Session
from ray_jobs.config.compose import compose
from ray_jobs.run import run_sweep
from tests.fake_openai import FakeOpenAI
from tests.helpers import REPO

pytestmark = [pytest.mark.ray, pytest.mark.timeout(1800)]

HOST, REF = "HOSTSECRET-4e1b07", "REFSECRET-0d9a55"
BUCKET = "dateline-host-side"

# Helpers every attack snippet starts with: a folder chain made and removed one level at a time
# (no recursion), and a process that leaves the snippet's session (fork, setsid, fork).
PRELUDE = '''
import ctypes, os, sys, time
def chain(n, top="chain"):
    os.mkdir(top)
    d = os.open(top, os.O_RDONLY)
    for _ in range(n):
        os.mkdir("a", dir_fd=d)
        nd = os.open("a", os.O_RDONLY, dir_fd=d)
        os.close(d)
        d = nd
    os.close(d)
def unchain(top="chain"):
    here = os.getcwd()
    os.chdir(top)
    n = 0
    while os.path.isdir("a"):
        os.chdir("a")
        n += 1
    for _ in range(n):
        os.chdir("..")
        os.rmdir("a")
    os.chdir(here)
    os.rmdir(top)
def survive(body):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            try:
                body()
            finally:
                os._exit(0)
        os._exit(0)
libc = ctypes.CDLL(None, use_errno=True)
def wait_open(path):
    """Block until someone opens ``path`` (inotify IN_OPEN)."""
    ino = libc.inotify_init()
    assert libc.inotify_add_watch(ino, path.encode(), 0x20) >= 0, ctypes.get_errno()
    os.read(ino, 4096)
'''


def py(code: str) -> dict:
    return {"tool": "python", "code": PRELUDE + code}


REPORT = {"tool": "write_report", "content": "# Brief\n\nDone.\n"}
NAMES = 2001        # files in the swapped folder, and in the host folder it is swapped for

# name -> (actions of attempt 1, actions of attempt 2 or None, seconds the model waits before each turn)
ATTACKS: dict[str, tuple[list[dict], list[dict] | None, dict[int, float]]] = {
    # 1. supervision: the old poll loop's recursive walk raised on a deep chain, and left the tree running
    "a chain breaks the supervisor": ([py(
        "def beat():\n    while True:\n        open('heartbeat', 'w').write(str(time.time()))\n        time.sleep(0.2)\n"
        "survive(beat)\nchain(1200)\ntime.sleep(30)\n"), REPORT], None, {}),
    "vanishing files break the supervisor": ([py(
        "import threading\nos.mkdir('churn')\n"
        "def churn():\n    while True:\n        for i in range(300):\n            open(f'churn/{i}', 'w').close()\n"
        "        for i in range(300):\n            os.unlink(f'churn/{i}')\n"
        "survive(churn)\nthreading.Thread(target=churn, daemon=True).start()\ntime.sleep(30)\n"), REPORT], None, {}),
    # 2. a survivor swaps the folder the next snippet's host walk is in for a link to a host folder
    "a survivor swaps a folder during the next walk": ([py(
        f"os.makedirs('w/sub')\nfor i in range({NAMES}):\n    open(f'w/sub/f{{i:04d}}', 'w').close()\n"
        "def swap():\n    time.sleep(1.0)\n    unchain()\n    wait_open('w/sub')\n"
        "    os.rename('w/sub', 'w/old')\n    os.symlink('{hostdir}', 'w/sub')\n    time.sleep(600)\n"
        "survive(swap)\nchain(1200)\ntime.sleep(30)\n"),
        {"tool": "python", "code": "print('second snippet ran')"}, REPORT], None, {1: 5.0}),
    # ... and the snippet itself swaps it while the supervisor's quota walk is in it
    "a folder swapped during the quota walk": ([py(
        f"import threading\nos.makedirs('w/sub')\nfor i in range({NAMES}):\n    open(f'w/sub/f{{i:04d}}', 'w').close()\n"
        "def swap():\n    for _ in range(50):\n        wait_open('w/sub')\n"
        "        os.rename('w/sub', 'w/old')\n        os.symlink('{hostdir}', 'w/sub')\n"
        "        time.sleep(0.05)\n        os.unlink('w/sub')\n        os.rename('w/old', 'w/sub')\n"
        "threading.Thread(target=swap, daemon=True).start()\ntime.sleep(3)\nprint('swapped')\n"),
        {"tool": "list_files"}, REPORT], None, {}),
    # 3. the quota counts what the disk holds
    "preallocation": ([py(
        "fd = os.open('big.bin', os.O_CREAT | os.O_WRONLY)\n"
        "r = libc.fallocate(fd, 1, ctypes.c_long(0), ctypes.c_long(1 << 30))\n"
        "print('fallocate', r, ctypes.get_errno(), os.fstat(fd).st_blocks * 512, flush=True)\n"
        "try:\n    os.posix_fallocate(fd, 0, 1 << 30)\nexcept OSError as e:\n    print('posix_fallocate', e)\n"
        "print('allocated', os.fstat(fd).st_blocks * 512, flush=True)\ntime.sleep(2)\n"), REPORT], None, {}),
    "20,000 folders": ([py(
        "for i in range(20_000):\n    os.mkdir(f'd{i}')\nprint('made 20,000 folders', flush=True)\ntime.sleep(2)\n"),
        REPORT], None, {}),
    "files deleted while open": ([py(
        "held = []\nfor i in range(3):\n    f = open(f'held{i}.bin', 'wb')\n    f.write(b'0' * (40 << 20))\n"
        "    f.flush()\n    os.unlink(f'held{i}.bin')\n    held.append(f)\n"
        "print('holding 120 MB', flush=True)\ntime.sleep(4)\nprint('held them all')\n"), REPORT], None, {}),
    # 5. the upload reads what it listed, not what a link swapped in afterwards points to
    "files swapped for links during the upload": ([py(
        "os.makedirs('figures', exist_ok=True)\nfor i in range(40):\n    open(f'figures/f{i:02d}.png', 'wb').write(b'PNG clean')\n"
        "def swap():\n    time.sleep(1.0)\n    unchain()\n    ino = libc.inotify_init()\n"
        "    for i in range(40):\n        libc.inotify_add_watch(ino, f'figures/f{i:02d}.png'.encode(), 0x20)\n"
        "    os.read(ino, 4096)\n    for i in range(40):\n        try:\n            os.unlink(f'figures/f{i:02d}.png')\n"
        "            os.symlink('{host}', f'figures/f{i:02d}.png')\n        except OSError:\n            pass\n"
        "    time.sleep(600)\nsurvive(swap)\nchain(1200)\ntime.sleep(30)\n"), REPORT], None, {1: 3.0}),
    # 6. memory is the tree's
    "forked children share the memory limit": ([py(
        "kids = []\nfor i in range(3):\n    pid = os.fork()\n    if pid == 0:\n        x = b'x' * (600 << 20)\n"
        "        print('a child holds', len(x) >> 20, 'MB', flush=True)\n        time.sleep(3)\n        os._exit(0)\n"
        "    kids.append(pid)\nok = sum(os.waitpid(p, 0)[1] == 0 for p in kids)\n"
        "print(f'{ok} of 3 children held 600 MB', flush=True)\n"), REPORT], None, {}),
    # 8. observations, socket families, a chain left over
    "thousands of names": ([py(
        "for i in range(3000):\n    open(f'a-file-with-a-rather-long-name-{i:05d}.txt', 'w').close()\n"),
        {"tool": "list_files"}, REPORT], None, {}),
    "unneeded socket families": ([py(
        "import socket\nfor fam, kind, name in ((40, 1, 'vsock'), (16, 3, 'netlink'), (38, 5, 'alg'), (17, 3, 'packet')):\n"
        "    try:\n        socket.socket(fam, kind)\n        print(name, 'created')\n"
        "    except OSError as e:\n        print(name, 'refused', e.errno)\n"), REPORT], None, {}),
    "a chain left for the next attempt": ([py("chain(3000)\nprint('left a chain')\n"), {"tool": "finish"}],
                                          [{"tool": "list_files"}, REPORT], {}),
    "a chain left for the upload": ([py("chain(1500)\nprint('left a chain')\n"), REPORT], None, {}),
}
NAMES_ORDER = list(ATTACKS)


def _sandbox_processes() -> list[str]:
    """Processes of any sandbox uid (200000-299999): none may outlive its snippet."""
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                uid = os.stat(f"/proc/{p}").st_uid
                if 200_000 <= uid < 300_000:
                    state = Path(f"/proc/{p}/stat").read_bytes().rpartition(b")")[2].split()[0]
                    if state not in (b"Z", b"X"):
                        out.append(f"{p} uid {uid}")
            except (OSError, IndexError):
                pass
    return out


def _script(name: str, attempt: int, fmt: dict) -> list[dict]:
    first, second, _ = ATTACKS[name]
    actions = first if attempt == 1 or second is None else second
    script = [{k: (v.replace("{hostdir}", fmt["hostdir"]).replace("{host}", fmt["host"]) if isinstance(v, str) else v)
               for k, v in a.items()} for a in actions]
    if script[-1].get("tool") != "finish":
        script.append({"tool": "finish"})
    return script


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server on loopback (no AWS account) and a bucket in it."""
    from moto.server import ThreadedMotoServer

    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                     "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                     "AWS_EC2_METADATA_DISABLED": "true"}.items():
            mp.setenv(k, v)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        try:
            fs = pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{port}", scheme="http", allow_bucket_creation=True)
            fs.create_dir(BUCKET)
            yield f"http://127.0.0.1:{port}", fs
        finally:
            server.stop()


@pytest.fixture(scope="module")
def host_side_run(tmp_path_factory, s3):
    """One real agentic analyst run (Ray, the sandbox, an S3 run dir on moto) whose scripted model
    plays every attack; the tests of this module read what it left. Why it takes minutes (about 4 on
    2 busy cores): each attack is an episode of sandboxed snippets, and they run as one job so that
    the host-side code sees them together, as a real run would."""
    endpoint, fs = s3
    tmp = tmp_path_factory.mktemp("hostside")
    tasks = tmp / "tasks"
    import shutil

    src = REPO / "engine" / "benchmarks" / "analyst" / "sample_tasks" / "unemployment-brief"
    shutil.copytree(src, tasks / "unemployment-brief")
    ref = tasks / "unemployment-brief" / "reference.md"
    ref.write_text(ref.read_text() + f"\nThe key fact is {REF}.\n")
    host = tmp / "host-secret.png"
    host.write_text(f"{HOST}\n")
    hostdir = tmp / "host-owned"           # root-owned files, one setuid, named as the swapped folder's
    hostdir.mkdir()
    for i in range(NAMES):
        (hostdir / f"f{i:04d}").write_text(f"{HOST}\n")
    os.chmod(hostdir / "f0000", 0o4755)
    owners = {p.name: (p.stat().st_uid, p.stat().st_mode) for p in hostdir.iterdir()}

    seeds = {attempt_seed(s, a): (NAMES_ORDER[s], a) for s in range(len(NAMES_ORDER)) for a in (1, 2)}
    fmt = {"hostdir": str(hostdir), "host": str(host)}

    def model(messages, req):
        name, attempt = seeds[req["seed"]]
        turn = sum(m["role"] == "assistant" for m in messages)
        delay = ATTACKS[name][2].get(turn, 0.0) if attempt == 1 else 0.0
        if delay:
            time.sleep(delay)
        script = _script(name, attempt, fmt)
        return json.dumps(script[min(turn, len(script) - 1)])

    uri = f"s3://{BUCKET}/runs/host-side"
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
           "AWS_ENDPOINT_URL": endpoint, "DATELINE_LOCAL_DIR": str(tmp / "local")}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with FakeOpenAI(model) as srv:
            cfg = compose(["benchmark=analyst", "agent=analyst_agentic", f"benchmark.tasks_dir={tasks}",
                           "agent.setting=T+S", "agent.report_attempts=2", "agent.max_steps=6",
                           "agent.code_timeout_s=5", "agent.code_memory_mb=1024", "agent.code_disk_mb=64",
                           f"run.num_seeds={len(ATTACKS)}", "model=openai_compatible", f"model.base_url={srv.base_url}",
                           "model.name=attacker", "model.api_key_env=", f"run.dir={uri}",
                           "run.progress=false", "cluster.num_cpus=4", "cluster.episodes_per_worker=4"])
            session = Session()
            try:
                info = run_sweep([cfg], session)[0]
            finally:
                session.close()
            ended = time.time()
        store = EpisodeStore(uri, BENCHMARK.episode_fields)
        eps = {NAMES_ORDER[e["seed"]]: e for e in store.episodes().to_pylist()}
        steps: dict[str, list[dict]] = {}
        by_id = {e["episode_id"]: n for n, e in eps.items()}
        for s in store.steps().to_pylist():
            steps.setdefault(by_id[s["episode_id"]], []).append(s)
        for v in steps.values():
            v.sort(key=lambda s: s["step"])
        local = Path(env["DATELINE_LOCAL_DIR"])
        yield {"info": info, "eps": eps, "steps": steps, "hostdir": hostdir, "owners": owners, "host": host,
               "store": store, "fs": fs, "uri": uri, "local": local, "ended": ended}
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        # the chains the attacks left are deeper than pytest's own clean-up can remove (it recurses)
        from engine.inputs import fdtree

        fdtree.remove(tmp)


def _obs(r: dict, name: str) -> list[str]:
    return [s["result"] for s in r["steps"][name] if s["turn"] == "action"]


def _folder(r: dict, name: str) -> Path:
    from engine.storage import local_root

    folder = local_root(r["uri"]) / "artifacts" / r["eps"][name]["episode_id"]
    assert folder.is_dir(), folder
    return folder


def _allocated(folder: Path) -> tuple[int, int]:
    """(allocated bytes, entries) below ``folder``, links not followed."""
    total = n = 0
    for d, dirs, files in os.walk(folder):
        for x in dirs + files:
            n += 1
            total += os.lstat(os.path.join(d, x)).st_blocks * 512
    return total, n


def test_every_episode_ran_and_the_run_completed(host_side_run):
    eps = host_side_run["eps"]
    assert set(eps) == set(ATTACKS)
    bad = {n: e["error"] for n, e in eps.items() if e["status"] != "ok"}
    assert not bad, bad


def test_1_no_process_outlives_its_snippet_even_when_supervision_is_attacked(host_side_run):
    r = host_side_run
    for name in ("a chain breaks the supervisor", "vanishing files break the supervisor"):
        first = _obs(r, name)[0]
        assert first.startswith("[timed out"), (name, first[:300])
    time.sleep(1)
    assert _sandbox_processes() == []
    beat = _folder(r, "a chain breaks the supervisor") / "heartbeat"
    assert beat.exists()
    last = float(beat.read_text() or 0)
    time.sleep(1)
    assert float(beat.read_text() or 0) == last                   # nothing writes it any more


def test_2_no_host_walk_goes_through_a_swapped_in_link(host_side_run):
    r = host_side_run
    now = {p.name: (p.stat().st_uid, p.stat().st_mode) for p in r["hostdir"].iterdir()}
    changed = [n for n in r["owners"] if now[n] != r["owners"][n]]
    assert not changed, f"{len(changed)} host files changed owner or mode, e.g. {changed[:3]}"
    assert now["f0000"][1] & stat.S_ISUID
    assert "second snippet ran" in _obs(r, "a survivor swaps a folder during the next walk")[1]
    assert "swapped" in _obs(r, "a folder swapped during the quota walk")[0]
    listed = _obs(r, "a folder swapped during the quota walk")[1]
    assert HOST not in listed


def test_3_the_quota_counts_what_the_disk_holds(host_side_run):
    r = host_side_run
    pre = _obs(r, "preallocation")[0]
    assert "fallocate -1 95" in pre, pre[:500]                     # EOPNOTSUPP: denied by seccomp
    for name in ("preallocation", "20,000 folders", "files deleted while open"):
        size, entries = _allocated(_folder(r, name))
        assert size <= 64 << 20 and entries < 10_000, (name, size, entries)
    assert "disk quota exceeded" in _obs(r, "20,000 folders")[0]
    held = _obs(r, "files deleted while open")[0]
    assert "disk quota exceeded" in held and "held them all" not in held, held[:500]


def test_5_the_upload_never_reads_through_a_swapped_in_link(host_side_run):
    r = host_side_run
    fs, base = r["fs"], r["uri"].removeprefix("s3://")
    ep = r["eps"]["files swapped for links during the upload"]["episode_id"]
    infos = fs.get_file_info(pafs.FileSelector(f"{base}/artifacts", recursive=True))
    keys = [i.path for i in infos if i.type == pafs.FileType.File]
    assert any(k.endswith(f"{ep}/report.md") for k in keys)
    leaks = []
    for k in keys:
        with fs.open_input_stream(k) as f:
            if HOST.encode() in f.read():
                leaks.append(k)
    assert not leaks, leaks[:5]
    figs = [k for k in keys if f"/{ep}/figures/" in k]
    assert figs                                                     # the figures themselves went up
    # a chain thousands deep costs the upload nothing: the episode's report is there
    deep = r["eps"]["a chain left for the upload"]["episode_id"]
    assert any(k.endswith(f"{deep}/report.md") for k in keys)


def test_6_memory_is_limited_for_the_whole_tree(host_side_run):
    out = _obs(host_side_run, "forked children share the memory limit")[0]
    assert "3 of 3 children held" not in out, out[:800]
    assert "memory limit" in out or "MemoryError" in out, out[:800]


def test_8_observations_sockets_and_leftovers(host_side_run):
    r = host_side_run
    steps = [s for s in r["steps"]["thousands of names"] if s["turn"] == "action"]
    # observation_chars of a step: how long the observation before it was
    assert all(s["observation_chars"] <= 4000 + 300 for s in steps[1:]), [s["observation_chars"] for s in steps]
    assert len(steps) >= 3 and steps[2]["observation_chars"] > 3000        # list_files: clipped, not empty
    socks = _obs(r, "unneeded socket families")[0]
    assert "vsock refused 97" in socks and "netlink refused 97" in socks and "alg refused 97" in socks, socks
    assert "created" not in socks
    left = r["eps"]["a chain left for the next attempt"]
    assert left["attempts"] == 2 and left["output"], left["error"]
    assert "chain" not in _obs(r, "a chain left for the next attempt")[-2]   # attempt 2's folder is fresh


# -- 4. names are data -------------------------------------------------------------------------
def test_4_a_non_utf8_name_end_to_end(tmp_path):
    """A snippet writes files whose names are not UTF-8: the run completes, every episode is
    stored, the names are shown escaped (observation, figures_written), nothing is lost."""
    code = ("open(b'figures/chart\\xff.png', 'wb').write(b'PNG')\nopen(b'notes\\xfe.txt', 'w').write('x')\n"
            "import os\nos.mkdir(b'dir\\xfd')\nopen(b'dir\\xfd/inner.txt', 'w').write('y')\n")
    script = [{"tool": "python", "code": code}, {"tool": "list_files"},
              {"tool": "grep", "pattern": "y", "path": "."}, REPORT, {"tool": "finish"}]

    def model(messages, req):
        return json.dumps(script[min(sum(m["role"] == "assistant" for m in messages), len(script) - 1)])

    with FakeOpenAI(model) as srv:
        cfg = compose(["benchmark=analyst", "agent=analyst_agentic", "benchmark.task_ids=[unemployment-brief]",
                       "agent.report_attempts=1", "run.num_seeds=4", "model=openai_compatible",
                       f"model.base_url={srv.base_url}", "model.name=m", "model.api_key_env=",
                       f"run.dir={tmp_path}", "run.progress=false", "cluster.num_cpus=4"])
        session = Session()
        try:
            info = run_sweep([cfg], session)[0]
        finally:
            session.close()
    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    eps = store.episodes().to_pylist()
    assert len(eps) == 4 and all(e["status"] == "ok" for e in eps), info
    assert all(e["figures_written"] == ["figures/chart\\xff.png"] for e in eps)
    steps = [s for s in store.steps().to_pylist() if s["turn"] == "action"]
    assert sum("notes\\xfe.txt" in s["result"] and "chart\\xff.png" in s["result"] for s in steps) >= 8
    assert any("dir\\xfd/inner.txt" in s["result"] for s in steps)
    folder = tmp_path / "artifacts" / eps[0]["episode_id"]
    assert (folder / os.fsdecode(b"figures/chart\xff.png")).exists()          # the file itself is kept


# -- 7. a bwrap that ignores its options -------------------------------------------------------
FAKE_BWRAP = """#!/bin/sh
# a bwrap that keeps the file system options and drops the isolation ones: it starts Python fine
n=$#
i=0
while [ $i -lt $n ]; do
  a=$1; shift; i=$((i+1))
  case "$a" in
    --unshare-all|--unshare-user|--unshare-pid|--unshare-net|--die-with-parent|--new-session|--disable-userns) ;;
    --cap-drop|--seccomp) shift; i=$((i+1)) ;;
    *) set -- "$@" "$a" ;;
  esac
done
exec REAL "$@"
"""


def _fake_bwrap(tmp_path: Path) -> Path:
    from engine.sandbox import bwrap_binary

    real = bwrap_binary()
    assert real
    (tmp_path / "bin").mkdir(mode=0o755)             # the sandbox's uid must reach it
    fake = tmp_path / "bin" / "bwrap"
    fake.write_text(FAKE_BWRAP.replace("REAL", os.path.realpath(real)))
    fake.chmod(0o755)
    return fake


def test_7_the_probe_refuses_a_bwrap_that_ignores_its_isolation_options(tmp_path, monkeypatch):
    from engine.sandbox import isolation as sandbox

    monkeypatch.setenv("DATELINE_BWRAP", str(_fake_bwrap(tmp_path)))
    sandbox._probe.cache_clear()
    try:
        ok, why = sandbox.bwrap_status()
    finally:
        sandbox._probe.cache_clear()
    assert not ok and "does not isolate" in why, why
    for words in ("pid namespace is the worker's", "net namespace is the worker's", "no seccomp filter"):
        assert words in why, (words, why)


def test_7_a_fake_bwrap_is_refused_and_the_run_fails_closed(tmp_path):
    """The same wrapper through the driver: the agentic run refuses to start."""
    fake = _fake_bwrap(tmp_path)
    cmd = [sys.executable, "-m", "ray_jobs.run", "benchmark=analyst", "agent=analyst_agentic",
           "model=openai_compatible", "model.base_url=http://127.0.0.1:9/v1", "model.name=m", "model.api_key_env=",
           f"run.dir={tmp_path / 'run'}", "run.progress=false"]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "DATELINE_BWRAP": str(fake)}
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0, out.stdout[-2000:]
    assert "does not isolate" in out.stderr and "namespace is the worker's" in out.stderr, out.stderr[-3000:]
    assert not (tmp_path / "run" / "episodes").exists() or not list((tmp_path / "run" / "episodes").iterdir())


def test_the_real_bwrap_passes_the_isolation_probe():
    from engine.sandbox import isolation as sandbox

    sandbox._probe.cache_clear()
    ok, why = sandbox.bwrap_status()
    assert ok, why


@pytest.mark.parametrize("plant,words", [
    ("name", ["notes\\xff.csv", "not UTF-8"]),
    ("hard link", ["reference.md", "hard link"]),
    ("link", ["toc.md", "is a link"]),
], ids=["non-utf8 source name", "hard-linked reference", "linked toc"])
def test_4_8_a_task_folder_with_a_bad_name_or_a_link_is_refused_by_the_driver(tmp_path, plant, words):
    """Through ``dateline run``: the task loader refuses, naming the entry, before any episode."""
    import shutil

    src = REPO / "engine" / "benchmarks" / "analyst" / "sample_tasks" / "unemployment-brief"
    task = tmp_path / "tasks" / "unemployment-brief"
    shutil.copytree(src, task)
    if plant == "name":
        (task / "sources" / os.fsdecode(b"notes\xff.csv")).write_text("a,b\n1,2\n")
    elif plant == "hard link":
        os.link(task / "reference.md", tmp_path / "elsewhere.md")
    else:
        (tmp_path / "toc.md").write_text("# ToC\n")
        (task / "toc.md").unlink(missing_ok=True)
        (task / "toc.md").symlink_to(tmp_path / "toc.md")
    out = subprocess.run([sys.executable, "-m", "dateline", "run", "benchmark=analyst", "agent=analyst_agentic",
                          f"benchmark.tasks_dir={tmp_path / 'tasks'}", "model=openai_compatible",
                          "model.base_url=http://127.0.0.1:9/v1", "model.name=m", "model.api_key_env=",
                          f"run.dir={tmp_path / 'run'}", "run.progress=false"],
                         cwd=REPO, env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode != 0
    tail = out.stderr[-3000:]
    assert all(w in tail for w in words) and "Traceback" not in tail, tail
    assert not (tmp_path / "run" / "episodes").exists() or not list((tmp_path / "run" / "episodes").iterdir())
