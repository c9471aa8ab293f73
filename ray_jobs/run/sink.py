"""Where one dispatch's rows go: each point's finished episodes (their steps, model calls and the
messages those refer to) buffered, handed to the background store writer
(``engine/runtime/writer.py``) at each flush, and once stored handed to the point's judges. It also
takes the rows of episodes that never start (a budget closed, an adaptive stop) and remembers which
episodes got a row from this run. Handing rows over never waits on storage; the writer's errors come
back at the next flush."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from engine.runtime.dispatch import EpisodeSpec
from engine.runtime.writer import StoreWriter
from engine.storage import EpisodeStore
from ray_jobs.cluster import signals as stopping
from ray_jobs.judging.fleet import JudgeFleet
from ray_jobs.judging.stream import JudgeStream
from ray_jobs.run.planning import Point

# per point: finished episodes, their steps, their model calls and the messages those refer to
Buf = tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], dict[str, dict[str, Any]]]


class RowSink:
    """Per point (its key) its rows not handed to the writer yet and its store; the episodes with a
    row from this run; the judged points, by (store URI, config hash), and their judge stream."""

    def __init__(self, stores: dict[str, EpisodeStore], judged: dict[tuple[str, str], str],
                 stream: JudgeStream | JudgeFleet, flush_interval_s: float, flush_bytes: int,
                 writer: Callable[..., StoreWriter] | None = None) -> None:
        self.stream = stream
        self.bufs: dict[str, Buf] = defaultdict(lambda: ([], [], [], {}))
        self.stores = stores
        self.stored: set[str] = set()                                     # episodes with a row from this run
        self.judged = judged
        # one shard per table per run dir per flush, across points (``writer``: a fake's in a test)
        self.writer = (writer or StoreWriter)(flush_interval_s, flush_bytes=flush_bytes,
                                              on_written=self.written if self.judged else None)

    @classmethod
    def of_points(cls, points: list[Point], stream: JudgeStream | JudgeFleet) -> RowSink:
        """The sink of these points: the shortest flush interval and size of theirs."""
        return cls({p.key: p.store for p in points},
                   {(p.store.uri, p.plan.config_hash): p.key for p in points if p.judge}, stream,
                   min(p.cfg.run.flush_interval_s for p in points), min(p.cfg.run.flush_bytes for p in points))

    def add_result(self, key: str, res: dict[str, Any]) -> dict[str, Any]:
        """A worker's result for point ``key`` buffered (its episode row, steps, calls, messages);
        the episode row."""
        row: dict[str, Any] = res["episode"]
        self.stored.add(row["episode_id"])
        buf = self.bufs[key]
        buf[0].append(row)
        buf[1].extend(res["steps"])
        buf[2].extend(res.get("calls", ()))
        buf[3].update(res.get("messages", {}))
        return row

    def add_unstarted(self, key: str, rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """Rows of point ``key``'s episodes that never start (budget exhausted, stopped early)
        buffered; the rows."""
        out = []
        for row in rows:
            self.bufs[key][0].append(row)
            self.stored.add(row["episode_id"])
            out.append(row)
        return out

    def unstored(self, specs: Iterable[EpisodeSpec]) -> int:
        """How many of ``specs`` got no row from this run."""
        return sum(1 for s in specs if s.episode_id not in self.stored)

    def written(self, store: EpisodeStore, rows: list[dict[str, Any]]) -> None:
        """Stored rows go to their point's judges (on the writer's thread; a hand-off)."""
        if stopping.requested():        # a signal: judging them waits for the next run (it judges what is missing)
            return
        per: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            if row["status"] == "ok" and (k := self.judged.get((store.uri, row["config_hash"]))) is not None:
                per[k].append(row)
        for k, rs in per.items():
            self.stream.submit(k, rs)

    def flush(self, final: bool = False) -> None:
        """The buffered rows to the writer (a hand-off: it writes by size or ``run.flush_interval_s``);
        ``final``: the writer closed, everything written in order before reduce or judge read the store."""
        try:
            self.writer.check()
            for k, (eps, steps, calls, messages) in list(self.bufs.items()):
                if eps:
                    self.writer.put(self.stores[k], eps, steps, calls, messages)
                    self.bufs[k] = ([], [], [], {})
        finally:
            if final:
                self.writer.close()
