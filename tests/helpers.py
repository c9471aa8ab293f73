"""Helpers shared by test modules (what conftest.py needs too lives here, so it is imported once)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
# DATELINE_CI=1 (scripts/test.sh): the full suite. Real-model tests fail instead of skipping
# when the model is missing, and the fuzz tests draw their full example counts.
FULL = os.environ.get("DATELINE_CI") == "1"


def ray_temp_dir() -> Path:
    """Ray's temp dir in this test run (``$RAY_TMPDIR/ray``, set per run by conftest.py): its
    ``session_*`` folders and the ``ray_current_cluster`` file."""
    return Path(os.environ["RAY_TMPDIR"]) / "ray"


def prepared_model_dir() -> Path:
    """The prepared offline model's folder. Not prepared: the test is skipped, naming the folder
    and the command that prepares it; under ``DATELINE_CI=1`` it fails instead."""
    from engine.hosting.prepare_model import default_model_dir, is_prepared

    d = default_model_dir()
    if is_prepared(d):
        return d
    why = (f"the offline model is not prepared: {d} has no dateline-source.json of the pinned GGUF; "
           "prepare it with `bash scripts/setup.sh`")
    if FULL:
        pytest.fail(why + " (DATELINE_CI=1: the full suite runs every real-model test)", pytrace=False)
    pytest.skip(why)


class SharedModelServer:
    """One vLLM server on the prepared model for the real-model tests that need *a* model endpoint,
    not a server of their own (the ``shared_vllm`` fixture of tests/conftest.py): started by the
    first of them with the engine arguments and environment a replica of the default model gets on
    this machine (``engine_settings``, as in ``dateline run``), and stopped after the last of them
    in this pytest run (``release``), or at the run's end. Tests of hosting itself (a replica's
    start, kill, restart, stop, reproducible mode, its process tree) start their own."""

    FIXTURE = "shared_vllm"

    def __init__(self) -> None:
        self.server: Any = None
        self.endpoint: Any = None
        self.users: set[str] = set()        # node ids of the tests still to run that use it
        self.starts = 0

    def get(self, model_dir: Path, log_path: Path) -> Any:
        """The server's endpoint (an ``engine.llm.Endpoint``), started on first use."""
        if self.server is None:
            from engine.hosting.vllm_server import VLLMServer, engine_settings
            from engine.llm import Endpoint
            from ray_jobs.config.compose import compose

            cfg = compose([f"model.path={model_dir}"]).model
            args, env = engine_settings(cfg)            # what a replica of it runs with on this machine
            server = VLLMServer(str(model_dir), cfg.served_name, engine_args=args, env=env, host="127.0.0.1",
                                log_path=log_path, niceness=cfg.niceness)
            server.start()
            try:
                server.wait_healthy(cfg.startup_timeout_s)
            except BaseException:
                server.stop()
                raise
            self.server, self.starts = server, self.starts + 1
            self.endpoint = Endpoint(server.local_url() + "/v1", cfg.served_name)
        return self.endpoint

    def release(self, nodeid: str) -> None:
        """Test ``nodeid`` is done: stop the server when no test left in this run uses it."""
        self.users.discard(nodeid)
        if not self.users:
            self.stop()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = self.endpoint = None


def run_module(module: str, *args: str, timeout: float, **kw: Any) -> subprocess.CompletedProcess[str]:
    """``python -m module args...`` from the repository root, with Ray's usage stats and auth off,
    output captured as text (``dateline run`` is ``run_module("ray_jobs.run", ...)``)."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", **kw.pop("env", {})}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout, **kw)


def livenews_responder(grade: str | None = None):
    """A scripted livenews model: Search, Click the first result, Finish "Buffalo Bills". As the
    grader it answers ``A`` (correct) for every answer, or, with ``grade="Buffalo Bills"``, only
    for that one and ``B`` otherwise."""
    def respond(messages: list[dict[str, Any]], req: dict[str, Any]) -> str:
        if "Gold target:" in messages[0]["content"]:              # the grader
            return "A" if grade is None or f"Predicted answer: {grade}" in messages[0]["content"] else "B"
        turn = sum(m["role"] == "assistant" for m in messages)
        if turn == 0:
            return "Search.\n```action\ntype: Search\nDamar Hamlin\n```"
        urls = re.findall(r"URL: (\S+)", messages[-1]["content"])
        if turn == 1 and urls:
            return f"Read it.\n```action\ntype: Click\n{urls[0]}\n```"
        return "Done.\n```action\ntype: Finish\nBuffalo Bills\n```"

    return respond


# for a hosted fake server (``FAKE_VLLM_RESPONDER=tests.helpers:livenews_script``): grades only "Buffalo Bills" right
livenews_script = livenews_responder(grade="Buffalo Bills")


def metrics_of(bench: Any, rows: list[dict[str, Any]], judged: bool = True, policy: str = "as_wrong",
               planned: Any = None) -> dict[str, Any]:
    """``{metric: MetricRow}`` of ``rows`` as the run computes them (engine/scoring/outcomes.py: means of
    the benchmark's episode values over the plan, the benchmark's other metrics), seen through a
    judge (``judged``) or none; the rows are their own plan unless ``planned`` is given."""
    from engine.protocol import MetricRow
    from engine.scoring import outcomes

    rows = [dict(r, judge=r.get("judge", "j" if judged else "")) for r in rows]
    out, c = outcomes.metric_rows(bench, rows, planned, policy, judged)
    return {"scored_share": MetricRow("scored_share", c.n_scored / c.n_planned, c.n_planned), **{m.metric: m for m in out}}


def judge_as_a_run_does(cfg: Any, bench: Any, store: Any, config_hash: str,
                        endpoints: Any = lambda m: []) -> dict[str, Any]:
    """Judge one configuration's stored episodes the way ``dateline run`` does
    (``ray_jobs/run/judging.py`` and ``waves.py``): a :class:`~ray_jobs.judging.stream.JudgeStream` on the
    judge's endpoints (``endpoints(model_config)`` hosts a judge model), fed the configuration's
    ok rows, then finished. Returns its stats (requests, ok, failed, ...)."""
    from ray_jobs.judging.stream import JudgeStream, judge_endpoints

    stream = JudgeStream(flush_s=0.05)
    try:
        stream.add("point", cfg, bench, store, judge_endpoints(cfg, endpoints), None, None, config_hash)
        stream.submit("point", store.episodes(config_hash=config_hash, ok_only=True).to_pylist())
        return stream.finish("point")
    finally:
        stream.close()
