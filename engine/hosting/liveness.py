"""Is a replica's engine making progress? From vLLM's ``/metrics``, not only ``/health``.

``GET /health`` says the API server answers; it says nothing of the engine behind it. Two ways it
misleads, both seen on GPU clusters:

* **saturated**: a server with a full batch answers ``/health`` late (the API server's event loop
  is busy streaming); restarting it kills every request in flight and reloads the weights;
* **wedged**: the engine is stuck (a hung collective, a dead EngineCore the API server has not
  noticed) but ``/health`` still answers 200, so the replica stays in rotation and every episode
  routed to it waits out its request timeout.

vLLM's Prometheus counters tell them apart: while requests are running or waiting, the prompt and
generation token counters must advance. :class:`Liveness` keeps the previous sample of one
replica and turns each check into a verdict (:data:`OK`, :data:`SATURATED`, :data:`WEDGED`,
:data:`DOWN`); :class:`engine.hosting.replica.ModelPool` takes a wedged or down replica out of
rotation at once and restarts it after ``model.unhealthy_checks`` such checks in a row, and never
restarts a saturated one.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from dataclasses import dataclass

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


def health_ok(base: str, timeout_s: float) -> bool:
    try:
        with urllib.request.urlopen(base + "/health", timeout=timeout_s) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError, ValueError):
        return False


class Liveness:
    """The verdicts of one replica's checks; :meth:`reset` after a restart."""

    def __init__(self, stall_s: float = 0.0) -> None:
        # how long work may sit in the engine without one token before it is wedged
        # (model.stall_timeout_s): longer than the longest engine step, e.g. a whole prompt's
        # prefill in one step on a CPU
        self.stall_s = stall_s
        self.prev: EngineSample | None = None
        self.stall_from: EngineSample | None = None     # the first sample of the current stall
        self.tokens_per_s = 0.0

    def reset(self) -> None:
        self.prev = None
        self.stall_from = None
        self.tokens_per_s = 0.0

    def observe(self, alive: bool, healthy: bool, sample: EngineSample | None, canary_overdue: bool = False) -> str:
        """The verdict of one check: the server process lives (``alive``), ``/health`` answered
        200 in time (``healthy``), what ``/metrics`` said (None: no answer), and whether the
        one-token canary request sent at an earlier check is still unanswered
        (``canary_overdue``: work pending for a whole period even where the engine's gauges read
        0, as in a wedge where vLLM showed no running request, vllm#46811)."""
        prev, self.prev = self.prev, sample
        if not alive:
            self.reset()
            return DOWN
        advancing = prev is not None and sample is not None and sample.tokens > prev.tokens
        if prev is not None and sample is not None and sample.t > prev.t:
            self.tokens_per_s = max(0.0, sample.tokens - prev.tokens) / (sample.t - prev.t)
        # work in the engine, and not one token processed for stall_s since the stall began
        stalled = False
        if sample is not None and (sample.busy or canary_overdue) and not advancing:
            if self.stall_from is None:
                self.stall_from = prev if prev is not None and (prev.busy or canary_overdue) else sample
            stalled = self.stall_from is not sample and sample.t - self.stall_from.t >= self.stall_s
        elif sample is not None:
            self.stall_from = None
        if healthy:
            return WEDGED if stalled else OK
        if advancing:
            return SATURATED            # late /health, but the engine works: leave it alone
        return WEDGED if stalled else DOWN
