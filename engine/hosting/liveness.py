"""Is a replica's engine making progress? From vLLM's ``/metrics``, not only ``/health``.

``GET /health`` says the API server answers; it says nothing of the engine behind it. Two ways it
misleads, both seen on GPU clusters:

* **saturated**: a server with a full batch answers ``/health`` late (the API server's event loop
  is busy streaming); restarting it kills every request in flight and reloads the weights;
* **wedged**: the engine is stuck (a hung collective, a dead EngineCore the API server has not
  noticed) but ``/health`` still answers 200, so the replica stays in rotation and every episode
  routed to it waits out its request timeout.

vLLM's Prometheus counters tell them apart: while requests are running or waiting, the prompt and
generation token counters must advance. But a slow engine is not a dead one: on a CPU a whole
prompt is one engine step that counts no token until it ends (74 s for 1,500 tokens in bfloat16 on
an AVX2-only CPU), so the window a stall is judged over comes from the replica's own measured speed,
and the canary answering, the engine's processes computing or its GPUs being busy count as progress
too (:class:`Liveness`). :class:`Liveness` keeps the previous sample of one replica and turns each
check into a verdict (:data:`OK`, :data:`SATURATED`, :data:`WEDGED`, :data:`DOWN`);
:class:`engine.hosting.replica.ModelPool` takes a wedged or down replica out of rotation at once,
restarts it after ``model.unhealthy_checks`` such checks in a row (doubling its window after a
stall, giving it up after ``model.max_stall_restarts`` in a row), and never restarts a saturated
one.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

OK, SATURATED, WEDGED, DOWN = "ok", "saturated", "wedged", "down"

# vLLM's metric names (vllm/v1/metrics/loggers.py); counters carry the ``_total`` suffix in the
# text format. Values are summed over label sets (one per served model name / engine).
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"


@dataclass(frozen=True)
class EngineSample:
    """One scrape of ``/metrics``: requests in the engine and tokens processed so far."""
    t: float
    running: float
    waiting: float
    prompt_tokens: float
    generation_tokens: float

    @property
    def tokens(self) -> float:
        return self.prompt_tokens + self.generation_tokens

    @property
    def busy(self) -> bool:
        return self.running + self.waiting > 0


def parse_metrics(text: str, t: float | None = None) -> EngineSample | None:
    """The progress metrics in Prometheus text ``text``; None when the running-requests gauge or
    both token counters are missing (not a vLLM server, or one too old to tell)."""
    sums: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        name_labels, _, rest = line.rpartition(" ")
        if not name_labels:
            continue
        name = name_labels.split("{", 1)[0].strip()
        if name in (RUNNING, WAITING, PROMPT_TOKENS, GENERATION_TOKENS):
            try:
                sums[name] = sums.get(name, 0.0) + float(rest)
            except ValueError:
                continue
    if RUNNING not in sums or (PROMPT_TOKENS not in sums and GENERATION_TOKENS not in sums):
        return None
    return EngineSample(time.monotonic() if t is None else t, sums[RUNNING], sums.get(WAITING, 0.0),
                        sums.get(PROMPT_TOKENS, 0.0), sums.get(GENERATION_TOKENS, 0.0))


def scrape(base: str, timeout_s: float) -> EngineSample | None:
    """``GET base/metrics`` (vLLM serves it without the API key); None when it does not answer."""
    try:
        with urllib.request.urlopen(base + "/metrics", timeout=timeout_s) as r:
            return parse_metrics(r.read().decode(errors="replace"))
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError, ValueError):
        return None


CANARY_HEADER = "X-Dateline-Canary"

# The window covers this many times the longest engine step the replica has taken, or a whole
# max_num_batched_tokens prefill at its measured prompt rate.
STEP_MARGIN = 1.5
# A prompt-counter advance of at least this many tokens measures the prompt rate (smaller ones are
# a decode step's bookkeeping), smoothed over checks with this weight for the newest.
MIN_RATE_TOKENS = 32
RATE_EMA = 0.3
# The engine's processes using at least this many cores over a check is progress: a long prefill
# on a CPU counts no token until it ends, but it computes.
CPU_BUSY_CORES = 0.25


def canary(base: str, model: str, api_key: str, timeout_s: float) -> bool:
    """One completion of one token: True when it finished. Marked with :data:`CANARY_HEADER`
    (vLLM ignores it; the test server answers it without its scripted responder)."""
    import json

    req = urllib.request.Request(
        base + "/v1/chat/completions", method="POST",
        data=json.dumps({"model": model, "messages": [{"role": "user", "content": "1"}], "max_tokens": 1,
                         "temperature": 0.0}).encode(),
        headers={"Content-Type": "application/json", CANARY_HEADER: "1",
                 **({"Authorization": f"Bearer {api_key}"} if api_key else {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError, ValueError):
        return False


def tree_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) used so far by process ``pid`` and every descendant (vLLM's API
    server, its EngineCore, tensor-parallel workers); None when it cannot be read. A descendant
    that exits takes its seconds with it: the sum can drop, which reads as no progress."""
    import psutil  # type: ignore[import-untyped]

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            continue
    return total


def parse_gpu_utilization(text: str) -> list[float]:
    """``nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits``: one percentage a line."""
    out = []
    for line in text.splitlines():
        try:
            out.append(float(line.strip().rstrip("%").strip()))
        except ValueError:
            continue
    return out


def gpus_busy(ids: str, timeout_s: float = 5.0) -> bool | None:
    """Whether any of the GPUs ``ids`` (``CUDA_VISIBLE_DEVICES``: "0,3") is computing now: NVML
    (``pynvml``, which vLLM's CUDA build installs) where it loads, else ``nvidia-smi``; None where
    neither answers (a CPU node) or no GPU is named."""
    wanted = [x.strip() for x in ids.split(",") if x.strip()]
    if not wanted:
        return None
    try:
        import pynvml  # type: ignore[import-not-found, unused-ignore]

        pynvml.nvmlInit()
        try:
            util = [float(pynvml.nvmlDeviceGetUtilizationRates(pynvml.nvmlDeviceGetHandleByIndex(int(i))).gpu)
                    for i in wanted]
        finally:
            pynvml.nvmlShutdown()
        return any(u > 0 for u in util)
    except Exception:  # noqa: BLE001 - no NVML here: ask nvidia-smi
        pass
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return None
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                            "-i", ",".join(wanted)], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError):
        return None
    util = parse_gpu_utilization(r.stdout) if r.returncode == 0 else []
    return any(u > 0 for u in util) if util else None


def health_ok(base: str, timeout_s: float) -> bool:
    try:
        with urllib.request.urlopen(base + "/health", timeout=timeout_s) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError, ValueError):
        return False


class Liveness:
    """The verdicts of one replica's checks; :meth:`reset` after a restart.

    A replica is **wedged** when work sits in its engine (requests running or waiting, or the
    canary unanswered) and nothing shows progress for the stall window. Progress is any of: a
    token counted (prompt or generation), the one-token canary answered, the engine's processes
    using CPU (at least :data:`CPU_BUSY_CORES` cores over the check), or its GPUs busy. The
    window is judged against the replica's own measured speed, never a constant alone:

    ``window_s = factor x max(stall_s, STEP_MARGIN x longest step seen, STEP_MARGIN x
    max_batched_tokens / measured prompt rate)``

    where a *step* is the time between two token advances while busy (on a CPU a whole prompt is
    one engine step), the prompt rate is measured from the prompt counter, and ``factor`` doubles
    after every restart for a stall (:meth:`reset`)."""

    def __init__(self, stall_s: float = 0.0, max_batched_tokens: int = 0, factor: float = 1.0) -> None:
        # model.stall_timeout_s: the least window, before anything is measured
        self.stall_s = stall_s
        self.max_batched_tokens = max_batched_tokens
        self.factor = factor
        self.prev: EngineSample | None = None
        self.stall_from: float | None = None        # when the current stall began
        self.busy_since: float | None = None        # the last token advance (or when work arrived)
        self.tokens_per_s = 0.0
        self.prompt_rate = 0.0                      # prompt tokens/s, measured (0: not yet)
        self.longest_step_s = 0.0
        self.seen: dict[str, bool] = {}             # what showed progress at the last check
        self._cpu: tuple[float, float] | None = None     # (t, engine CPU seconds) at the last check
        self._cpu_at_stall: tuple[float, float] | None = None     # ... at the check before the stall

    def reset(self, factor: float | None = None) -> None:
        """After a restart: the samples and the stall go; what was measured of the engine's speed
        stays (the same engine on the same node); ``factor`` sets the window's multiplier."""
        self.prev = None
        self.stall_from = None
        self.busy_since = None
        self.tokens_per_s = 0.0
        self._cpu = self._cpu_at_stall = None
        if factor is not None:
            self.factor = factor

    @property
    def window_s(self) -> float:
        """How long work may sit in the engine with no sign of progress before it is wedged."""
        derived = [self.stall_s, STEP_MARGIN * self.longest_step_s]
        if self.prompt_rate > 0 and self.max_batched_tokens > 0:
            derived.append(STEP_MARGIN * self.max_batched_tokens / self.prompt_rate)
        return self.factor * max(derived)

    def stalled_for(self, now: float) -> float:
        return 0.0 if self.stall_from is None else max(0.0, now - self.stall_from)

    def _measure(self, prev: EngineSample, sample: EngineSample) -> bool:
        """Rates and step lengths from two samples; True when a token was counted between them."""
        dt = sample.t - prev.t
        if dt > 0:
            self.tokens_per_s = max(0.0, sample.tokens - prev.tokens) / dt
        if sample.tokens <= prev.tokens:
            return False
        if self.busy_since is not None and (prev.busy or sample.busy):
            step = sample.t - self.busy_since
            self.longest_step_s = max(self.longest_step_s, step)
            prompt = sample.prompt_tokens - prev.prompt_tokens
            if prompt >= MIN_RATE_TOKENS and step > 0:
                rate = prompt / step         # a lower bound: decode steps share that time
                self.prompt_rate = rate if self.prompt_rate <= 0 else \
                    (1 - RATE_EMA) * self.prompt_rate + RATE_EMA * rate
        return True

    def _cpu_busy(self, t: float, cpu_s: float | None) -> bool:
        """The engine computed since the last check, or on average since the stall began (one
        check's interval can fall where the scheduler left it out on a loaded machine)."""
        prev, self._cpu = self._cpu, (None if cpu_s is None else (t, cpu_s))
        if cpu_s is None or prev is None or t <= prev[0]:
            self._cpu_at_stall = None
            return False
        if (cpu_s - prev[1]) / (t - prev[0]) >= CPU_BUSY_CORES:
            return True
        if self.stall_from is None:
            self._cpu_at_stall = prev
            return False
        at = self._cpu_at_stall
        return at is not None and t > at[0] and (cpu_s - at[1]) / (t - at[0]) >= CPU_BUSY_CORES

    def observe(self, alive: bool, healthy: bool, sample: EngineSample | None, canary_overdue: bool = False,
                canary_done: bool = False, cpu_s: float | None = None, gpu_busy: bool | None = None,
                t: float | None = None) -> str:
        """The verdict of one check: the server process lives (``alive``), ``/health`` answered
        200 in time (``healthy``), what ``/metrics`` said (None: no answer), whether the one-token
        canary sent at an earlier check is still unanswered (``canary_overdue``: work pending for
        a whole period even where the engine's gauges read 0, as in a wedge where vLLM showed no
        running request, vllm#46811) or one was answered since the last check (``canary_done``),
        the CPU seconds the server's processes have used so far (``cpu_s``), and whether its GPUs
        are busy (``gpu_busy``; None where that cannot be read). ``t``: when, where ``/metrics``
        gave no sample (default: now)."""
        prev, self.prev = self.prev, sample
        if not alive:
            self.reset()
            return DOWN
        now = sample.t if sample is not None else (time.monotonic() if t is None else t)
        advancing = prev is not None and sample is not None and self._measure(prev, sample)
        cpu = self._cpu_busy(now, cpu_s)
        self.seen = {"tokens": advancing, "canary": canary_done, "cpu": cpu, "gpu": bool(gpu_busy)}
        work = sample is not None and (sample.busy or canary_overdue)
        if advancing or not work:
            self.busy_since = now if work else None
        elif self.busy_since is None:
            self.busy_since = prev.t if prev is not None and prev.busy else now
        progress = advancing or canary_done or cpu or bool(gpu_busy)
        stalled = False
        if work and not progress:
            if self.stall_from is None:
                self.stall_from = prev.t if prev is not None and (prev.busy or canary_overdue) else now
            stalled = now > self.stall_from and now - self.stall_from >= self.window_s
        elif sample is not None:
            self.stall_from = None
        if healthy:
            return WEDGED if stalled else OK
        if advancing or (progress and sample is not None):
            # late /health, but the engine works (tokens, or a long step computing, and /metrics
            # answered): leave it alone. Computing behind a server that answers nothing is down.
            return SATURATED
        return WEDGED if stalled else DOWN


def verdict_line(h: dict[str, Any]) -> str:
    """A verdict with the numbers behind it, for logs and diagnoses."""
    if h.get("verdict") == WEDGED:
        return (f"wedged ({h.get('running') or 0:g} running, {h.get('waiting') or 0:g} waiting"
                f"{', canary unanswered' if h.get('canary_overdue') else ''}; no token, no canary answer, no engine "
                f"CPU or GPU activity for {float(h.get('stalled_for_s') or 0):.0f} s, "
                f"window {float(h.get('window_s') or 0):.0f} s)")
    if not h.get("alive"):
        return "down (its server process or actor is gone)"
    return "down (no /health and no progress)" if h.get("verdict") == DOWN else str(h.get("verdict"))


def verdict_record(h: dict[str, Any]) -> dict[str, Any]:
    """The metrics behind a verdict, as an event stores them."""
    keys = ("verdict", "alive", "healthy", "running", "waiting", "tokens_per_s", "prompt_tokens_per_s",
            "longest_step_s", "window_s", "stalled_for_s", "canary_overdue", "progress")
    return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in h.items() if k in keys}
