"""Cost accounting from what runs record: tokens per call (every episode and judgement row) and
replica uptime (every run's info JSON), priced by the model config. Every price rule lives here:
the report, the run budget, the pre-run estimate and pairwise judging all ask these functions.

* API models (``model.kind=openai_compatible``): tokens x ``price_input_per_mtok`` /
  ``price_output_per_mtok`` (per million).
* Hosted models: replica uptime x ``price_gpu_hour`` x GPUs per replica (tensor x pipeline
  parallel). A CPU-only replica is charged as one unit per hour (the instance), so CPU runs can
  be priced too. Uptime counts from the replica's start (startup is paid for) to the end of the
  run's judge stage; in a sweep each run pays for the uptime during that run.
* Judges (:func:`judge_prices`): an API judge (``judge.kind=openai_compatible``) pays its own
  token prices (``judge.price_*_per_mtok``); a hosted judge pays its model's (``judge.hosted_model``,
  else the run's model), whose replica uptime is charged as the model's.
* Overrides (``dateline report --price MODEL=IN,OUT[,HOUR[,UNITS]]``, :func:`parse_overrides`)
  re-price after the fact by model name: a hosted model by its name, an API judge by its
  ``judge.name`` or ``judge.model``. Runs and pairwise stages are re-priced by the same rules.

An episode's share of the uptime is proportional to its tokens (prompt + completion) among the
episodes generated under the same configuration: on a busy replica, cost follows work.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

API = "openai_compatible"       # the endpoint kind billed per token by someone else


@dataclass(frozen=True)
class Prices:
    input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0
    gpu_hour: float = 0.0
    units_per_replica: float = 1.0      # GPUs per replica, or 1 for a CPU-only replica

    @property
    def configured(self) -> bool:
        return bool(self.input_per_mtok or self.output_per_mtok or self.gpu_hour)

    @property
    def tokens_only(self) -> Prices:
        """The token prices alone (no uptime)."""
        return Prices(self.input_per_mtok, self.output_per_mtok)

    @classmethod
    def of_model(cls, model: Mapping[str, Any]) -> Prices:
        gpus = float(model.get("num_gpus") or 0.0)
        return cls(float(model.get("price_input_per_mtok") or 0.0), float(model.get("price_output_per_mtok") or 0.0),
                   float(model.get("price_gpu_hour") or 0.0), gpus if gpus > 0 else 1.0)

    @classmethod
    def of_judge(cls, judge: Mapping[str, Any], model: Mapping[str, Any]) -> Prices:
        """Token prices of a judge: its own for an external judge, else ``model``'s (the model
        that hosts it, whose uptime is already charged to the run)."""
        if judge.get("kind") == API:
            return cls(float(judge.get("price_input_per_mtok") or 0.0), float(judge.get("price_output_per_mtok") or 0.0))
        return cls.of_model(model).tokens_only

    @classmethod
    def parse(cls, spec: str) -> Prices:
        """``IN,OUT[,HOUR[,UNITS]]`` (per million input/output tokens, per unit-hour, units per replica)."""
        parts = [float(x) for x in spec.split(",")]
        if not 2 <= len(parts) <= 4 or any(p < 0 for p in parts):
            raise ValueError(f"price {spec!r}: expected IN,OUT[,HOUR[,UNITS]] with non-negative numbers")
        return cls(*parts)


def parse_overrides(specs: Iterable[str]) -> dict[str, Prices]:
    """``MODEL=IN,OUT[,HOUR[,UNITS]]`` specs (``--price``, repeatable) as prices by model name;
    ValueError names a malformed spec."""
    out: dict[str, Prices] = {}
    for spec in specs:
        model, _, rest = spec.partition("=")
        if not model or not rest:
            raise ValueError(f"--price {spec!r}: expected MODEL=IN,OUT[,HOUR[,UNITS]]")
        out[model] = Prices.parse(rest)
    return out


def model_prices(model: Mapping[str, Any], overrides: Mapping[str, Prices] | None = None,
                 name: str | None = None) -> Prices:
    """A model's prices: the override for its name (``name``, else ``model["name"]``) when there
    is one, else what its config says."""
    key = name if name is not None else str(model.get("name") or "")
    over = (overrides or {}).get(key) if key else None
    return over if over is not None else Prices.of_model(model)


@dataclass(frozen=True)
class JudgePrices:
    """What a judge's work costs: ``tokens`` prices its calls; ``uptime`` the replicas of a hosted
    judge (its own pool's, or the run's model's), nothing for an API judge."""
    tokens: Prices
    uptime: Prices

    def cost(self, tokens_in: float, tokens_out: float, replica_seconds: float = 0.0) -> float:
        return uptime_cost(replica_seconds, self.uptime) + token_cost(tokens_in, tokens_out, self.tokens)


def judge_prices(judge: Mapping[str, Any], model: Mapping[str, Any],
                 overrides: Mapping[str, Prices] | None = None) -> JudgePrices:
    """The prices of ``judge`` (a judge config as plain data) next to the run's ``model``.

    An API judge is priced by an override under its ``judge.name`` or ``judge.model``, else by its
    own ``judge.price_*_per_mtok``; it has no replicas. A hosted judge runs on
    ``judge.hosted_model`` (else ``model``) and pays that model's prices: an override under its
    name, else its config's token prices for the calls and its uptime prices for the replicas."""
    overrides = overrides or {}
    if judge.get("kind") == API:
        names = [str(judge.get(k) or "") for k in ("name", "model")]
        over = next((overrides[n] for n in names if n and n in overrides), None)
        return JudgePrices(over if over is not None else Prices.of_judge(judge, {}), Prices())
    hosted: Mapping[str, Any] = judge.get("hosted_model") or model
    name = str(hosted.get("name") or "")
    over = overrides.get(name) if name else None
    if over is not None:
        return JudgePrices(over, over)
    return JudgePrices(Prices.of_judge(judge, hosted), Prices.of_model(hosted))


def token_cost(tokens_in: float, tokens_out: float, p: Prices) -> float:
    return tokens_in * p.input_per_mtok / 1e6 + tokens_out * p.output_per_mtok / 1e6


def uptime_cost(replica_seconds: float, p: Prices) -> float:
    return replica_seconds / 3600.0 * p.gpu_hour * p.units_per_replica


def unit_hours(replica_seconds: float, p: Prices) -> float:
    """Replica uptime in unit-hours (GPU hours; a CPU-only replica counts one unit)."""
    return replica_seconds / 3600.0 * p.units_per_replica


def episode_costs(tokens: Sequence[tuple[float, float]], p: Prices, replica_seconds: float) -> list[float]:
    """Cost per episode: its own tokens, plus the configuration's uptime cost split by tokens."""
    total = sum(a + b for a, b in tokens)
    up = uptime_cost(replica_seconds, p)
    return [token_cost(a, b, p) + (up * (a + b) / total if total > 0 else 0.0) for a, b in tokens]
