"""Shared fixtures, and the two test tiers.

* ``@pytest.mark.ray``: the test starts Ray (``ray.init``, a ``cluster_utils`` cluster, a
  ``dateline run`` subprocess, ``ray start``...). Enforced: every Ray session started during a
  test lands under this pytest run's own ``RAY_TMPDIR`` (set below), and a test without the
  marker that leaves a new ``session_*`` folder there errors at teardown. So
  ``pytest -m "not real and not ray and not slow"`` (the fast tier) never starts Ray.
* ``@pytest.mark.slow``: the test takes over about 0.4 s on a 2-core machine (a sandbox, a
  browser, a server or driver process, moto S3, a whole run in process). The fast tier
  (``-m "not real and not ray and not slow"``) leaves it out; the full suite runs it. A fast-tier
  run lists the unmarked tests that took over a second, so the tier stays fast.
* ``@pytest.mark.real``: the test needs the prepared offline model (and most start vLLM), or,
  as ``real(model=False)``, real data too large for the dev loop. When
  the model is not prepared it is skipped with the folder and the command that prepares it,
  unless ``DATELINE_CI=1`` (``scripts/test.sh`` sets it): then a missing model is a failure, so
  the whole suite never passes by skipping them. Those that only need a model to answer share one
  vLLM server per pytest process (the ``shared_vllm`` fixture); tests of hosting start their own.
* ``@pytest.mark.serial``: the test must never run beside another. ``scripts/test.sh`` runs the
  rest on two xdist workers, then the ``real`` and ``serial`` tests one at a time.

``DATELINE_CI=1`` also selects the full example counts of the fuzz tests (``tests.helpers.FULL``).
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import tempfile
from pathlib import Path

import pytest

# PYTHONDONTWRITEBYTECODE=1 is set on these machines and in CI: nothing wrote the repository's
# .pyc files, so every pytest worker, sandbox snippet and Ray worker compiled its 27k lines again
# (3.5 s of CPU per process). Tests write them (under the ignored __pycache__ folders); every later
# process reads them, whatever its own setting.
sys.dont_write_bytecode = False

from tests.helpers import REPO, SharedModelServer, prepared_model_dir, ray_temp_dir  # noqa: E402 (after the switch)

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

SAMPLE = REPO / "engine" / "benchmarks" / "newsagent" / "sample_data"

# Every Ray this run starts (in process, in a subprocess, `ray start`) keeps its sessions here:
# the marker check below reads it, and runs of other users of the machine stay out of it. One per
# pytest process: an xdist worker (which inherits its controller's environment) makes its own beside
# the controller's, not inside it. Short, because Ray's unix socket paths (at most 107 characters)
# live under it.
_RAY_BASE = os.environ.setdefault("DATELINE_TEST_RAY_BASE", os.environ.get("RAY_TMPDIR", "/tmp"))
os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="dl-ray-", dir=_RAY_BASE)

# The one vLLM server of this pytest process that real-model tests needing only an endpoint share
# (the ``shared_vllm`` fixture): stopped after the last test using it (or at the session's end).
_shared_model = SharedModelServer()


def _ray_sessions() -> set[str]:
    try:
        return {p.name for p in ray_temp_dir().iterdir() if p.name.startswith("session_") and p.name != "session_latest"}
    except FileNotFoundError:
        return set()


_sessions_before: dict[str, set[str]] = {}
_runs_before: dict[str, set[str]] = {}
RUNS = REPO / "runs"           # the user's results: tests write under tmp_path, never here


def _runs() -> set[str]:
    try:
        return {p.name for p in RUNS.iterdir()}
    except FileNotFoundError:
        return set()


@pytest.hookimpl(trylast=True)          # after -m and -k have deselected
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    shared = {i.nodeid for i in items if SharedModelServer.FIXTURE in getattr(i, "fixturenames", ())}
    _shared_model.users = shared
    # the tests on the shared server run last, one after another: it starts once, and it never sits
    # idle (about 7 GB of a 24 GB machine) while other tests host vLLM servers of their own. Before
    # them, whole modules with a slow or Ray test come first, so that on two xdist workers the
    # minute-long tests start early instead of leaving one worker alone at the end (modules stay
    # together: a module-scoped fixture is set up once)
    heavy = {i.module.__name__ for i in items if i.module is not None
             and (i.get_closest_marker("slow") or i.get_closest_marker("ray"))}
    items.sort(key=lambda i: (i.nodeid in shared, i.module is None or i.module.__name__ not in heavy))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _sessions_before[item.nodeid] = _ray_sessions()
    _runs_before[item.nodeid] = _runs()
    real = item.get_closest_marker("real")
    if real is not None and real.kwargs.get("model", True):      # real(model=False): real data, no model
        prepared_model_dir()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    result = yield
    _shared_model.release(item.nodeid)
    made = _runs() - _runs_before.pop(item.nodeid, set())
    if made:
        raise pytest.fail.Exception(
            f"{item.nodeid} (or a test running beside it) wrote {sorted(made)} into {RUNS}, the user's results: "
            "give it a run.dir under tmp_path", pytrace=False)
    new = _ray_sessions() - _sessions_before.pop(item.nodeid, set())
    if new and item.get_closest_marker("ray") is None:
        raise pytest.fail.Exception(
            f"{item.nodeid} started Ray ({len(new)} session(s) under {ray_temp_dir()}) but is not marked "
            "@pytest.mark.ray: mark it (or its module's pytestmark), so the fast tier "
            '(-m "not real and not ray and not slow") stays free of Ray', pytrace=False)
    return result


_SLOW_S = 1.0
_slow_unmarked: list[tuple[float, str]] = []


_clock: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.duration > _SLOW_S and "slow" not in report.keywords:
        _slow_unmarked.append((report.duration, report.nodeid))
    if os.environ.get("DATELINE_TEST_CLOCK"):      # scripts/test.sh's serial part: a test's wall time as it ends
        _clock[report.nodeid] = _clock.get(report.nodeid, 0.0) + report.duration
        if report.when == "teardown":
            tr = _config[0].pluginmanager.get_plugin("terminalreporter") if _config else None
            if tr is not None:
                tr.write_line(f"\n[{dt.datetime.now():%H:%M:%S}] {_clock.pop(report.nodeid):7.1f} s  {report.nodeid}")


_config: list[pytest.Config] = []


def pytest_configure(config: pytest.Config) -> None:
    _config.append(config)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    if _slow_unmarked and "not slow" in (config.option.markexpr or ""):
        terminalreporter.write_line(f"fast tier: {len(_slow_unmarked)} test(s) without @pytest.mark.slow took over "
                                    f"{_SLOW_S:.0f} s (mark them, or make them faster):")
        for d, nodeid in sorted(_slow_unmarked, reverse=True)[:10]:
            terminalreporter.write_line(f"  {d:5.2f} s  {nodeid}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remove this run's Ray temp dir, unless a test failed after Ray ran (its logs are kept)."""
    import shutil
    import sys

    _shared_model.stop()
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        sys.modules["ray"].shutdown()
    if exitstatus == 0 or not _ray_sessions():
        shutil.rmtree(os.environ["RAY_TMPDIR"], ignore_errors=True)


@pytest.fixture(scope="session")
def model_dir() -> Path:
    return prepared_model_dir()


@pytest.fixture
def shared_vllm(model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """An ``Endpoint`` of this run's one shared vLLM server on the prepared model, with the engine
    settings a replica gets here (:class:`tests.helpers.SharedModelServer`): for a real-model test
    that needs a model to answer, not a server of its own. Started by the first test asking for it
    (its log: ``shared-vllm.log`` under pytest's base temp folder), stopped after the last."""
    return _shared_model.get(model_dir, tmp_path_factory.getbasetemp() / "shared-vllm.log")


@pytest.fixture(scope="session")
def embedder():
    import torch

    from indexes.embeddings import Embedder

    # Tests encode a sentence at a time: with torch's default of one thread per core, a one-query
    # encode took 0.37 s instead of 15 ms on a busy 2-core machine (threads waiting on each other).
    torch.set_num_threads(1)
    return Embedder()


@pytest.fixture(scope="session")
def sample_dataset():
    from engine.benchmarks.newsagent.data import load_dataset

    return load_dataset(SAMPLE)


@pytest.fixture(scope="session")
def sample_embeddings() -> Path:
    """The embedding cache of the sample objects (filled by ``sample_index``), kept under
    ``DATELINE_CACHE`` like a run's (keyed by content hash and model, shards written atomically):
    later sessions, and other indexes over the sample, reuse the vectors instead of embedding again."""
    from engine.hosting.prepare_model import cache_dir

    return cache_dir() / "test-embeddings"


@pytest.fixture(scope="session")
def sample_index(embedder, sample_dataset, sample_embeddings):
    from indexes.corpus import Document
    from indexes.service import LocalIndex

    docs = [Document(o.object_id, o.text, o.date) for o in sample_dataset.objects]
    return LocalIndex(docs, embedder, sample_embeddings)


def d(s: str) -> dt.date:
    return dt.date.fromisoformat(s)
