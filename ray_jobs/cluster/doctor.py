"""``dateline doctor [--no-probe] [OVERRIDES...]``: what this machine gives a CPU replica, and how
fast the model runs here.

1. What was detected (``engine/hosting/machine.py``): architecture, the CPU flags that decide
   vLLM's speed, the usable cores (affinity, cgroup CPU quota) and the memory available (cgroup
   limit included).
2. What a replica of the configured model (composed as ``dateline run`` composes it, Hydra
   overrides accepted) would run with here, and why.
3. A ~10 s probe (unless ``--no-probe``): the real vLLM server with those settings, one
   prefill-heavy request (~1,000 prompt tokens) and a few concurrent short decodes; prompt and
   decode tokens/s, and what they mean for command 1 (``bash scripts/run.sh``).

Exit status 2 with a named reason when the model is missing or cannot run here.
"""

from __future__ import annotations

import asyncio
import math
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# Command 1's model episodes (22 newsagent tasks) on the reference machine, a 2-core Xeon with
# AVX512_BF16 and AMX: 6.2 min at ~1,200 prompt and ~100 generated tokens/s (README), so ~446,000
# prompt and ~37,000 generated tokens. The probe below measured REF_PREFILL and REF_DECODE there
# (the median of three runs on a machine shared with other jobs: 388-648 prompt, 20-50 decode tok/s).
REF_MINUTES = 6.2
REF_PROMPT_TOKENS = 446_000
REF_GENERATED_TOKENS = 37_000
REF_PREFILL = 465.0
REF_DECODE = 27.0
# Below this prompt rate a newsagent turn (~1,000 prompt tokens) takes 20 s or more.
SLOW_PREFILL = 50.0

PROBE_PROMPT_WORDS = 650         # ~1,000 prompt tokens
PROBE_DECODES = 4                # concurrent short requests
PROBE_DECODE_TOKENS = 32
PROBE_DECODE_WORDS = 16


def command1_minutes(prefill: float, decode: float) -> float:
    """Command 1's model episodes at these probe rates: the reference time, its prefill and decode
    shares (the reference's tokens at the reference's probe rates) each scaled by how much slower
    or faster this machine's probe is."""
    t_prefill, t_decode = REF_PROMPT_TOKENS / REF_PREFILL, REF_GENERATED_TOKENS / REF_DECODE
    share = t_prefill / (t_prefill + t_decode)
    return REF_MINUTES * (share * REF_PREFILL / prefill + (1 - share) * REF_DECODE / decode)


def meaning(rates: dict[str, float], args: dict[str, Any], stall_timeout_s: float) -> list[str]:
    """What the probe's rates mean for command 1: an estimate, and warnings."""
    prefill, decode = rates["prefill_tok_s"], rates["decode_tok_s"]
    lines = [f"command 1: its 22 model episodes would take about {command1_minutes(prefill, decode):.0f} min here "
             f"({REF_MINUTES:g} min on the reference 2-core AVX512_BF16 machine, probe {REF_PREFILL:.0f} prompt / "
             f"{REF_DECODE:.0f} decode tok/s), plus ~1-2 min of server start and setup"]
    if prefill < SLOW_PREFILL:
        lines.append(f"WARNING: prefill at {prefill:.0f} tok/s is below ~{SLOW_PREFILL:.0f}: each newsagent turn "
                     "(~1,000 prompt tokens) takes 20 s or more and command 1 takes hours. Check the dtype above "
                     "(bfloat16 without native support is emulated: ++model.engine_args.dtype=float32) and the cores")
    from engine.hosting.replica_actor import batched_tokens  # what the liveness check sizes its window by

    step = batched_tokens(args)
    step_s = step / prefill
    if step_s > stall_timeout_s:
        lines.append(f"WARNING: one engine step of up to {step} prompt tokens (max_num_batched_tokens) takes ~{step_s:.0f} s "
                     f"at this rate, more than model.stall_timeout_s ({stall_timeout_s:g} s), the stall window a replica "
                     "starts with: a long prefill can look like a wedged engine until the replica's own rate is measured. "
                     f"Set model.stall_timeout_s={math.ceil(1.5 * step_s)}, or lower max_num_batched_tokens")
    return lines


def doctor(overrides: Sequence[str] = (), probe: bool = True, say: Callable[[str], object] = print) -> int:
    """Print the report (``say`` each line) and return 0; :class:`DoctorError` names why the model
    cannot be probed (missing, or its settings do not fit this machine)."""
    from engine.hosting.machine import describe, detect
    from engine.hosting.vllm_server import derives_cpu_settings, resolved_engine
    from ray_jobs.config.compose import compose
    from ray_jobs.config.overrides import check_overrides

    check_overrides("config", list(overrides))      # a misspelt override: one line, exit status 2, before the report
    facts = detect()
    s = facts.summary()
    say("machine")
    say(f"  arch            {s['arch']}  ({s['cpu'] or 'model name unknown'})")
    say(f"  CPU flags       {', '.join(s['flags']) or 'none of those that matter'}")
    quota = (f"cgroup quota {facts.cpu_quota:g} CPUs ({facts.cpu_quota_source})" if facts.cpu_quota is not None
             else "no cgroup CPU quota")
    say(f"  usable cores    {facts.usable_cpus}  (affinity {s['affinity']}; {quota})")
    mem = facts.memory_available
    cg = (f"cgroup: {s['cgroup_mem_free_gib']} GiB free ({facts.cgroup_mem_source})" if facts.cgroup_mem_free is not None
          else "no cgroup memory limit")
    say(f"  memory          {s['memory_available_gib'] if mem is not None else 'unknown'} GiB available  "
        f"(MemAvailable {s['mem_available_gib']} GiB; {cg})")

    m = compose(list(overrides)).model
    say(f"model {m.name} ({m.kind}{', ' + str(m.num_gpus) + ' GPU(s)' if m.num_gpus else ''}): {m.path or m.base_url}")
    if m.kind != "vllm":
        say("  an external endpoint: nothing is hosted on this machine")
        return 0
    if not derives_cpu_settings(m):
        say("  a GPU model: its engine settings are the config's (nothing derived from this machine)")
    try:
        args, _env, chosen = resolved_engine(m, facts)
    except ValueError as e:
        raise DoctorError(f"cannot run here: {e}") from e
    for line in describe(chosen):
        say(f"  {line}")
    if not Path(m.path).exists():
        raise DoctorError(f"model missing: {m.path} does not exist (model.path); bash scripts/setup.sh prepares the "
                          "offline model")
    if not probe or not derives_cpu_settings(m):
        return 0
    rates = run_probe(m)
    say(f"probe ({rates['startup_s']:.0f} s to start the server, {rates['probe_s']:.0f} s to measure)")
    say(f"  prompt (prefill)  {rates['prefill_tok_s']:.0f} tok/s  (one request of {rates['prompt_tokens']} prompt tokens)")
    say(f"  decode            {rates['decode_tok_s']:.1f} tok/s  ({rates['requests']} requests at once, "
        f"{rates['gen_tokens']} tokens in all)")
    for line in meaning(rates, args, m.stall_timeout_s):
        say(line)
    return 0


class DoctorError(Exception):
    """The model cannot be probed here: a named reason, exit status 2."""


def run_probe(m: Any) -> dict[str, Any]:
    """Start ``m``'s server with the settings a replica gets here, measure, stop it."""
    from engine.hosting.probe import measure, start_server

    with tempfile.TemporaryDirectory(prefix="dateline-doctor-") as tmp:
        t0 = time.perf_counter()
        server = start_server(m, Path(tmp) / "vllm.log")
        startup_s = time.perf_counter() - t0
        try:
            t1 = time.perf_counter()
            rates = asyncio.run(measure(server.local_url(), m.served_name or m.name, prompt_words=PROBE_PROMPT_WORDS,
                                        requests=PROBE_DECODES, gen_tokens=PROBE_DECODE_TOKENS,
                                        decode_prompt_words=PROBE_DECODE_WORDS))
            return {**rates, "startup_s": startup_s, "probe_s": time.perf_counter() - t1}
        finally:
            server.stop()
