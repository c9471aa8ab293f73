"""Cost accounting from what runs record: tokens per call (every episode and judgement row) and
replica uptime (every run's info JSON), priced by the model config.

* API models (``model.kind=openai_compatible``): tokens x ``price_input_per_mtok`` /
  ``price_output_per_mtok`` (per million).
* Hosted models: replica uptime x ``price_gpu_hour`` x GPUs per replica (tensor x pipeline
  parallel). A CPU-only replica is charged as one unit per hour (the instance), so CPU runs can
  be priced too. Uptime counts from the replica's start (startup is paid for) to the end of the
  run's judge stage; in a sweep each run pays for the uptime during that run.

An episode's share of the uptime is proportional to its tokens (prompt + completion) among the
episodes generated under the same configuration: on a busy replica, cost follows work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence


@dataclass(frozen=True)
class Prices:
    input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0
    gpu_hour: float = 0.0
    units_per_replica: float = 1.0      # GPUs per replica, or 1 for a CPU-only replica

    @property
    def configured(self) -> bool:
        return bool(self.input_per_mtok or self.output_per_mtok or self.gpu_hour)

    @classmethod
    def of_model(cls, model: Mapping[str, Any]) -> "Prices":
        gpus = float(model.get("num_gpus") or 0.0)
        return cls(float(model.get("price_input_per_mtok") or 0.0), float(model.get("price_output_per_mtok") or 0.0),
                   float(model.get("price_gpu_hour") or 0.0), gpus if gpus > 0 else 1.0)

    @classmethod
    def of_judge(cls, judge: Mapping[str, Any], model: Mapping[str, Any]) -> "Prices":
        """Token prices of a judge: its own for an external judge, else the hosted model's
        (whose uptime is already charged to the run)."""
        if judge.get("kind") == "openai_compatible":
            return cls(float(judge.get("price_input_per_mtok") or 0.0), float(judge.get("price_output_per_mtok") or 0.0))
        p = cls.of_model(model)
        return cls(p.input_per_mtok, p.output_per_mtok)

    @classmethod
    def parse(cls, spec: str) -> "Prices":
        """``IN,OUT[,HOUR[,UNITS]]`` (per million input/output tokens, per unit-hour, units per replica)."""
        parts = [float(x) for x in spec.split(",")]
        if not 2 <= len(parts) <= 4 or any(p < 0 for p in parts):
            raise ValueError(f"price {spec!r}: expected IN,OUT[,HOUR[,UNITS]] with non-negative numbers")
        return cls(*parts)


def token_cost(tokens_in: float, tokens_out: float, p: Prices) -> float:
    return tokens_in * p.input_per_mtok / 1e6 + tokens_out * p.output_per_mtok / 1e6


def uptime_cost(replica_seconds: float, p: Prices) -> float:
    return replica_seconds / 3600.0 * p.gpu_hour * p.units_per_replica


def episode_costs(tokens: Sequence[tuple[float, float]], p: Prices, replica_seconds: float) -> list[float]:
    """Cost per episode: its own tokens, plus the configuration's uptime cost split by tokens."""
    total = sum(a + b for a, b in tokens)
    up = uptime_cost(replica_seconds, p)
    return [token_cost(a, b, p) + (up * (a + b) / total if total > 0 else 0.0) for a, b in tokens]
