"""A live progress line (done/total, steps/s, tokens/s, ETA) and the closing summary table."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO


class Progress:
    def __init__(self, total: int, enabled: bool = True, stream: TextIO | None = None,
                 every_s: float | None = None) -> None:
        self.total = total
        self.enabled = enabled
        stream = stream if stream is not None else sys.stderr      # the current one, not import time's
        self.stream = stream
        self._tty = stream.isatty()
        # Redraw in place on a terminal; in logs, a line every 15 s is plenty.
        self.every_s = every_s if every_s is not None else (1.0 if self._tty else 15.0)
        self.t0 = time.monotonic()
        self.done = self.failed = self.steps = self.tokens_in = self.tokens_out = 0
        # episodes that call a model: the ETA is theirs (a baseline's instant episodes say nothing
        # of how long the model's take); 0: every episode counts
        self.model_total = self.model_done = 0
        self.note = ""          # e.g. why a model has no replica in rotation
        self._last = 0.0
        self._closed = False    # the closing line (every episode done) was written

    def update(self, episode: dict[str, Any], model: bool = False) -> None:
        self.done += 1
        self.model_done += model
        self.failed += episode.get("status") != "ok"
        self.render()

    def set_live(self, steps: int, tokens_in: int, tokens_out: int) -> None:
        """Counters over all steps so far, in-flight episodes included (polled from workers)."""
        self.steps, self.tokens_in, self.tokens_out = steps, tokens_in, tokens_out

    def line(self) -> str:
        el = max(time.monotonic() - self.t0, 1e-9)
        done, total = (self.model_done, self.model_total) if self.model_total else (self.done, self.total)
        rate = done / el
        eta = (total - done) / rate if rate > 0 else float("inf")
        eta_s = ("?" if done < total else "0.0 min") if eta == float("inf") else f"{eta / 60:.1f} min"
        return (f"episodes {self.done}/{self.total} ({self.failed} failed) | {self.steps / el:.2f} steps/s | "
                f"{(self.tokens_in + self.tokens_out) / el:.0f} tok/s ({self.tokens_out / el:.1f} gen) | "
                f"elapsed {el / 60:.1f} min | ETA {eta_s}" + (f" | {self.note}" if self.note else ""))

    def render(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        finished = self.done >= self.total
        if not force and ((now - self._last < self.every_s and not finished) or (finished and self._closed)):
            return              # throttled, or the closing line is out already (it is written once)
        self._closed = finished
        self._last = now
        end = "\r" if self._tty and self.done < self.total else "\n"
        self.stream.write(("\x1b[2K" if self._tty else "") + self.line() + end)
        self.stream.flush()


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return "nan" if v != v else (f"{v:.3f}" if abs(v) < 1000 else f"{v:.0f}")
        return str(v)

    cells = [[fmt(v) for v in r] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(headers)]
    out = [" | ".join(h.ljust(w) for h, w in zip(headers, widths)), "-+-".join("-" * w for w in widths)]
    out += [" | ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join(out)
