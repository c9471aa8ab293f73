"""The drain reserve of an adaptive run under a budget (ray_jobs/run/adaptive.py: drain_reason): dispatch
stops while what is left still covers the episodes in flight, one more mean episode and the largest
worst case a call asked the ledger for; the end-to-end case is tests/e2e/test_adaptive_run.py."""

from __future__ import annotations

from ray_jobs.run.adaptive import DRAIN_MARGIN, drain_reason

MEAN = {"tokens_in": 400.0, "tokens_out": 8.0, "usd": 0.01, "wall_s": 30.0}


def test_dispatch_goes_on_while_the_reserve_fits_and_stops_before_it_does_not():
    caps = {"max_output_tokens": 100, "max_usd": None, "max_input_tokens": None, "max_gpu_hours": None}
    need = DRAIN_MARGIN * 3 * 8 + 16               # two in flight and one more, plus a call's worst case
    assert drain_reason(caps, {"tokens_out": 100 - need - 1}, 2, MEAN, 1.0, {"tokens_out": 16}) == ""
    why = drain_reason(caps, {"tokens_out": 100 - need + 1}, 2, MEAN, 1.0, {"tokens_out": 16})
    assert why.startswith("drain reserve:") and "run.budget.max_output_tokens" in why and "2 episodes in flight" in why


def test_every_cap_is_checked_and_none_without_caps_or_history():
    assert drain_reason({}, {"usd": 1e9}, 5, MEAN, 1.0) == ""
    assert drain_reason({"max_usd": 1.0}, {"usd": 0.0}, 5, {}, 1.0) == ""          # nothing finished yet
    assert "max_usd" in drain_reason({"max_usd": 1.0}, {"usd": 0.95}, 5, MEAN, 1.0, {"usd": 0.02})
    assert "max_input_tokens" in drain_reason({"max_input_tokens": 10_000}, {"tokens_in": 8_600}, 2, MEAN, 1.0)
    # GPU hours: the replicas' uptime for one more mean episode (8 GPUs x 30 s)
    hours = DRAIN_MARGIN * 30.0 * 8 / 3600
    assert drain_reason({"max_gpu_hours": 1.0}, {"gpu_hours": 1.0 - hours - 0.001}, 4, MEAN, 8.0) == ""
    assert "max_gpu_hours" in drain_reason({"max_gpu_hours": 1.0}, {"gpu_hours": 1.0 - hours + 0.001}, 4, MEAN, 8.0)
