"""The dispatch's scheduler without Ray (ray_jobs/run/queues.py, in the spirit of inspect_ai's
SampleScheduler): the order episodes go out in (a group's points in turn), a requeued episode first,
a paused point's episodes held aside and put back at the front in their order, and a point taken
off the queue with exactly what was queued for it. The loop around it is tests/e2e/test_sweep_queue.py."""

from __future__ import annotations

from engine.runtime.dispatch import EpisodeSpec
from ray_jobs.run.queues import EpisodeQueues, interleave


def specs(point: str, n: int) -> list[EpisodeSpec]:
    """``n`` episodes of a point, not yet tagged with it (the plan's ``todo``)."""
    return [EpisodeSpec(f"{point}{i}", "hash", None, f"t{i}", 0) for i in range(1, n + 1)]


def queues() -> EpisodeQueues:
    """Group "g": points a (3 episodes), b (1) and c (2); group "h": point d (2)."""
    q = EpisodeQueues()
    q.add("g", [("a", specs("a", 3)), ("b", specs("b", 1)), ("c", specs("c", 2))])
    q.add("h", [("d", specs("d", 2))])
    return q


def drain(q: EpisodeQueues, g: str, wants=lambda key: True) -> list[str]:
    out = []
    while (s := q.next(g, wants)) is not None:
        out.append(s.episode_id)
    return out


def test_the_points_of_a_group_go_out_in_turn_each_tagged_with_its_point():
    q = queues()
    assert (q.total(), q.total(but="h"), q.queued("g"), q.waiting()) == (8, 6, 6, {"g", "h"})
    s = q.next("g", lambda key: True)
    assert s is not None and (s.episode_id, s.point) == ("a1", "a")
    assert drain(q, "g") == ["b1", "c1", "a2", "c2", "a3"]
    assert q.waiting() == {"h"} and q.next("g", lambda key: True) is None
    assert [s.episode_id for s in interleave([specs("x", 2), [], specs("y", 1)])] == ["x1", "y1", "x2"]


def test_a_requeued_episode_goes_out_next_and_its_attempts_are_counted():
    q = queues()
    first = q.next("g", lambda key: True)
    assert first is not None
    q.dispatched(first)
    q.requeue_front("g", first)                 # its worker was lost
    again = q.next("g", lambda key: True)
    assert again is first
    q.dispatched(again)
    assert q.attempts_of("a1") == 2 and q.attempts_of("b1") == 0
    assert drain(q, "g") == ["b1", "c1", "a2", "c2", "a3"]


def test_a_paused_points_episodes_are_held_and_resume_at_the_front_in_their_order():
    q = queues()
    paused = {"a"}
    s = q.next("g", lambda key: key not in paused)
    assert s is not None and s.episode_id == "b1"               # a1 held aside, b1 goes
    assert q.holds("a") and not q.holds("b") and q.held_points() == ["a"]
    assert drain(q, "g", lambda key: key not in paused) == ["c1", "c2"]
    assert q.queued("g") == 0 and q.waiting_for({"a"}, ["g"]) and not q.waiting_for({"c"}, ["g"])
    q.requeue_front("g", EpisodeSpec("c9", "hash", None, "t9", 0, point="c"))
    assert q.resume("g", "a") == 3 and not q.holds("a") and q.resume("g", "a") == 0
    assert drain(q, "g") == ["a1", "a2", "a3", "c9"]              # before what was queued


def test_take_point_returns_what_was_queued_and_held_and_leaves_the_rest():
    q = queues()
    assert q.next("g", lambda key: key != "a") is not None        # a1 held, b1 out
    assert q.has("g", "a") and q.has("g", "c") and not q.has("g", "b")
    gone = q.take_point("g", "a")
    assert [s.episode_id for s in gone] == ["a2", "a3", "a1"]     # queued in order, then the held one
    assert not q.has("g", "a") and not q.holds("a")
    assert drain(q, "g") == ["c1", "c2"] and q.take_point("g", "a") == []
    assert drain(q, "h") == ["d1", "d2"]


def test_a_stopped_points_held_episodes_come_first():
    q = queues()
    assert q.next("g", lambda key: key != "a") is not None        # a1 held, b1 out
    assert [s.episode_id for s in q.take_point("g", "a", held_first=True)] == ["a1", "a2", "a3"]
    assert drain(q, "g") == ["c1", "c2"]
