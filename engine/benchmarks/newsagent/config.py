"""Schemas behind ``conf/benchmark/newsagent*.yaml`` and ``conf/agent/newsagent*.yaml``."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class NewsagentBenchmarkConfig:
    name: str = "newsagent"
    # Dataset folder with tasks.jsonl and objects.jsonl (relative: from the working folder, else the bundled samples).
    data_dir: str = "engine/benchmarks/newsagent/sample_data"
    # A short name of the data: the default run dir is runs/<name>-<dataset>.
    dataset: str = "sample"
    # Only these tasks (empty: all), then only the first N (null: all).
    task_ids: list[str] = field(default_factory=list)
    limit: int | None = None
    # A bad row in the data: "error" stops before anything runs (a DataError naming file, row and
    # field); "skip" drops it and records it in RUN_DIR/quarantine (docs/design/data.md).
    on_bad_rows: str = "error"


@dataclass
class NewsagentAgentConfig:
    # "1-step": the action JSON carries its arguments. "2-step": pick the action, then give its
    # arguments in a second turn. "rule-based": the paper's baseline (title search, insert top 5).
    mode: str = "1-step"
    # Cap on Search/Insert/Remove operations, failed ones included (paper: 20).
    max_operations: int = 20
    # Hard cap on model turns (unparseable outputs count as failed operations too).
    max_turns: int = 45
    # Constrain each action to the JSON schema with vLLM structured outputs.
    guided_json: bool = False
    # Generation budget per action turn.
    max_tokens_action: int = 256
    # System prompt: "paper" (appendix B.1 verbatim, both settings) or "extended" (adds section
    # headers, remove/terminate examples and, in 2-step mode, a note on the two turns).
    prompt_variant: str = "paper"
    # Observation size: the most recent retrieved objects shown (older ones stay insertable).
    max_retrieved_in_observation: int = 25
    # Rephrase the final draft into an article (paper section 3.2.3).
    rephrase: bool = True
    rephrase_max_tokens: int = 512
    # Traceability check: a rephrased sentence is traceable when its best cosine similarity to
    # the selected objects is above trace_threshold; re-run the rephrase at most
    # rephrase_attempts - 1 times while the share of untraceable sentences exceeds trace_tolerance.
    rephrase_attempts: int = 2
    trace_threshold: float = 0.7
    trace_tolerance: float = 0.0
