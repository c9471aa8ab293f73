"""Schemas behind ``conf/benchmark/analyst.yaml`` and ``conf/agent/analyst*.yaml``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class AnalystBenchmarkConfig:
    name: str = "analyst"
    tasks_dir: str = "engine/benchmarks/analyst/sample_tasks"
    dataset: str = "sample"              # a short name of the data: the default run dir is runs/<name>-<dataset>
    limit: int | None = None
    task_ids: list[str] = field(default_factory=list)   # run only these tasks (empty: all), then limit
    # Checklists (``checklists.py``): one per task, built once (``dateline analyst-checklists``)
    # and used by every system and judge. Read from the task folder's checklist.json, else from
    # ``checklists_dir`` (relative: from the working folder); "" builds into the task folders.
    checklists_dir: str = ""
    n_criteria: int = 15                 # criteria asked of the checklist draft (figure 15)
    checklist_max_tokens: int = 3000     # the draft call
    checklist_refine_rounds: int = 1     # refine-and-recheck passes against the reference report
    checklist_pass_rating: int = 5       # the reference must get this (figure 16, 1-5) on a kept criterion
    figure_match_threshold: float = 0.6  # MiniLM caption cosine for figure coverage (the paper gives none)
    evidence_k: int = 4                  # source passages shown to the claim verifier
    max_claims: int = 40                 # claims verified per report, spread evenly over its chunks
    # Answer budgets of the judge calls: the paper's (table 9: evaluation and claim extraction at
    # max_tokens=65,535). A criterion whose reasoning is cut short has no rating: its episode's
    # checklist score is then missing (counted), never computed over the criteria that finished,
    # and every judgement records whether it was truncated. vLLM caps a request at the context
    # window it has left; an API with a smaller output limit needs these lowered.
    judge_max_tokens: int = 65535        # per criterion-scoring call (and per checklist refinement)
    claims_chunk_tokens: int = 1000      # report tokens (estimated) per claim-extraction call
    claims_max_tokens: int = 65535       # answer budget per claim-extraction call (claims + quotes)
    # A bad task folder: "error" stops before anything runs (a DataError naming file, row and
    # field); "skip" drops the folder and records it in RUN_DIR/quarantine (docs/design/data.md).
    on_bad_rows: str = "error"


@dataclass
class AnalystAgentConfig:
    mode: str = "vanilla"                # vanilla | agentic
    setting: str = "T+S+ToC"             # T | T+S | T+S+ToC | T+S+R*
    context_tokens: int = 8192           # the served model's window (conf/model/local_cpu.yaml)
    map_max_tokens: int = 512
    report_max_tokens: int = 1536
    preview_rows: int = 10
    full_table_rows: int = 40
    # Sampling temperature of every generation call of an episode (map, reduce, report, agent
    # turns): the paper generates at 0.6 (its table 7). null: the model's own (model.temperature).
    temperature: float | None = 0.6
    max_steps: int = 16                  # agentic: turns per attempt
    report_attempts: int = 2             # fresh attempts while no report is written (then scored 0)
    max_episode_tokens: int = 150000     # agentic: prompt + completion tokens over all turns
    max_tokens_action: int = 1024
    guided_json: bool = True             # agentic: actions constrained to the tool schema (vLLM)
    # agentic: where model-written snippets run (engine/sandbox/). "bwrap":
    # bubblewrap namespaces, seccomp, a folder of their own; a run refuses to start where it
    # cannot. "audit_unsafe": an audit hook alone, NOT a boundary (hostile code switches it off);
    # only by explicit choice, and the report marks every number such a run produced.
    sandbox: str = "bwrap"
    code_timeout_s: float = 30.0         # per snippet: the whole process tree is killed then
    code_memory_mb: int = 2048           # per process (RLIMIT_AS)
    code_disk_mb: int = 256              # the whole episode folder (sources included)
    code_max_procs: int = 64             # processes and threads a snippet may have at once
    observation_chars: int = 4000


def row_config(row: dict[str, Any]) -> AnalystBenchmarkConfig:
    """The benchmark config an episode row is judged and scored under: the one it was produced
    under (its ``data`` column), with the evaluation settings of the judgements it is seen
    through (``row["evaluation"]``, set by the judge stage and by engine.scoring.judges.judged_views):
    evaluation settings apply at evaluation time, never from the stored row alone."""
    import json

    data = json.loads(row["data"]) if row.get("data") else {}
    return AnalystBenchmarkConfig(**{**data, **(row.get("evaluation") or {})})
