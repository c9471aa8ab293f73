"""A stand-in for ``python -m vllm.entrypoints.openai.api_server``: hosted replicas without vLLM.
It serves :class:`tests.fake_openai.FakeOpenAI` (the one fake server of the tests) with vLLM's
routes and failure modes (:class:`tests.fake_openai.EngineBehaviour`).

A replica runs ``python -m <model.server_module> --model ... --served-model-name ... --host ...
--port ... [engine args]`` (``engine/hosting/vllm_server.py``); with
``model.server_module=tests.fake_vllm_server`` it runs this module instead, with the same command
line and environment. Flags it does not know (every engine arg) are ignored. It answers:

* ``GET /health`` (200), ``GET /v1/models`` (the served name);
* ``POST /v1/chat/completions`` with a scripted reply and ``usage`` (whitespace-word counts), or
  404 for a model name it does not serve, as vLLM does;
* ``GET /info``: its pid, command line and ``CUDA_VISIBLE_DEVICES`` (what the replica gave it),
  and the pid of its engine child (``--fake-spawn-child``);
* ``GET /metrics``: vLLM's progress metrics in Prometheus text (``vllm:num_requests_running``,
  ``vllm:num_requests_waiting``, ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``).

Failure modes a replica's lifecycle must handle (flags or environment):

* ``--fake-spawn-child`` / ``$FAKE_VLLM_SPAWN_CHILD=1``: start a child process that lives as long as
  it is not killed, as vLLM's EngineCore does (and keeps its GPU when the server is killed alone);
* ``--fake-wedge-after N`` / ``$FAKE_VLLM_WEDGE_AFTER``: after N completions every request hangs
  forever while ``/health`` still answers 200 (a wedged engine: requests running, no tokens);
* ``--fake-blackhole-after N`` / ``$FAKE_VLLM_BLACKHOLE_AFTER``: after N completions every request,
  ``/health`` and ``/metrics`` included, is accepted and never answered (a node lost silently);
  with ``$FAKE_VLLM_BLACKHOLE_ONE=PATH``, only the first server to create PATH does (one replica
  of a pool; its restart serves), and appends a line to PATH for each episode call it holds;
* ``--fake-health-delay-s S`` / ``$FAKE_VLLM_HEALTH_DELAY_S``: ``/health`` answers after S seconds
  (a saturated server) while completions go on and the token counters advance;
* ``--fake-fail-once PATH`` / ``$FAKE_VLLM_FAIL_ONCE``: the first server to create PATH exits at
  once with code 3 (one replica of a pool that fails to start; its restart finds PATH and serves).
* ``--fake-busy`` / ``$FAKE_VLLM_BUSY=1``: the completion delay (``--fake-delay-s``) computes
  instead of sleeping (one long engine step on a CPU: counters still, the process busy);
* ``--fake-canary behind`` / ``$FAKE_VLLM_CANARY=behind``: the liveness canary waits until no
  completion is in its delay (as behind a long step in one engine), so during a step only the
  process's CPU shows progress.
* With ``$VLLM_API_KEY`` set (every hosted replica: a key per model pool), ``/v1`` routes answer
  401 without ``Authorization: Bearer <key>``, as vLLM does; ``/health`` and ``/info`` are open.

The reply is, in order of precedence: ``--fake-responder module:function`` /
``$FAKE_VLLM_RESPONDER`` (called as ``function(messages, request) -> str``, like
:class:`tests.fake_openai.FakeOpenAI`'s responder), ``--fake-reply TEXT`` / ``$FAKE_VLLM_REPLY``,
else ``"ok"``. ``--fake-delay-s`` / ``$FAKE_VLLM_DELAY_S`` delays every completion. Every request
is logged as one line on stdout (the replica's log file), e.g. ``POST /v1/chat/completions 200``.
Give the server process ``PYTHONPATH=<repo>`` (``model.env``) so ``tests`` is importable.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from tests.fake_openai import EngineBehaviour, FakeOpenAI


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="fake_vllm_server", allow_abbrev=False)
    p.add_argument("--model", required=True)
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--tensor-parallel-size", type=int, default=1)
    p.add_argument("--fake-reply", default=os.environ.get("FAKE_VLLM_REPLY", "ok"))
    p.add_argument("--fake-responder", default=os.environ.get("FAKE_VLLM_RESPONDER", ""))
    p.add_argument("--fake-delay-s", type=float, default=float(os.environ.get("FAKE_VLLM_DELAY_S", "0") or 0))
    p.add_argument("--fake-spawn-child", action="store_true", default=os.environ.get("FAKE_VLLM_SPAWN_CHILD") == "1")
    p.add_argument("--fake-wedge-after", type=int, default=int(os.environ.get("FAKE_VLLM_WEDGE_AFTER", "-1") or -1))
    p.add_argument("--fake-blackhole-after", type=int,
                   default=int(os.environ.get("FAKE_VLLM_BLACKHOLE_AFTER", "-1") or -1))
    p.add_argument("--fake-fail-once", default=os.environ.get("FAKE_VLLM_FAIL_ONCE", ""))
    p.add_argument("--fake-busy", action="store_true", default=os.environ.get("FAKE_VLLM_BUSY") == "1")
    p.add_argument("--fake-canary", choices=("answer", "behind"), default=os.environ.get("FAKE_VLLM_CANARY") or "answer")
    p.add_argument("--fake-health-delay-s", type=float,
                   default=float(os.environ.get("FAKE_VLLM_HEALTH_DELAY_S", "0") or 0))
    args, _unknown = p.parse_known_args(list(argv))     # vLLM's engine args: accepted, ignored
    return args


def load_responder(spec: str, reply: str) -> Callable[[list[dict[str, Any]], dict[str, Any]], str]:
    if not spec:
        return lambda messages, request: reply
    module, _, name = spec.partition(":")
    fn = getattr(importlib.import_module(module), name)
    return lambda messages, request: str(fn(messages, request))


def make_server(args: argparse.Namespace, child_pid: int = 0) -> FakeOpenAI:
    names = args.served_model_name or [args.model]
    info = {"pid": os.getpid(), "argv": list(sys.argv), "model": args.model, "served": names,
            "tensor_parallel_size": args.tensor_parallel_size,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "child_pid": child_pid}
    blackhole = args.fake_blackhole_after
    if blackhole >= 0 and (claim := os.environ.get("FAKE_VLLM_BLACKHOLE_ONE")):
        try:
            os.close(os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            blackhole = -1                  # another replica is the black hole
    engine = EngineBehaviour(served=names, info=info, wedge_after=args.fake_wedge_after,
                             blackhole_after=blackhole, held_log=claim if blackhole >= 0 and claim else "",
                             health_delay_s=args.fake_health_delay_s, busy=args.fake_busy, canary=args.fake_canary,
                             api_key=os.environ.get("VLLM_API_KEY", ""))
    return FakeOpenAI(load_responder(args.fake_responder, args.fake_reply), args.fake_delay_s, args.port,
                      host=args.host, engine=engine)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.fake_fail_once:
        try:
            os.close(os.open(args.fake_fail_once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            pass
        else:
            print("fake vLLM server: failing to start (--fake-fail-once)", flush=True)
            sys.exit(3)
    child = None
    if args.fake_spawn_child:               # like vLLM's EngineCore: a process of its own
        import subprocess

        child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(60)"])
    server = make_server(args, child.pid if child else 0)
    print(f"fake vLLM server {os.getpid()}: {args.served_model_name or [args.model]} on {args.host}:{args.port}",
          flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
