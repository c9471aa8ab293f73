"""Schemas behind ``conf/benchmark/livenews*.yaml`` and ``conf/agent/livenews*.yaml``."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.errors import ConfigError
from indexes.web import ARCHIVE_DOMAINS


@dataclass
class LivenewsBenchmarkConfig:
    name: str = "livenews"
    source: str = "livenewsbench"          # livenewsbench (questions + pages JSONL) | realtimeqa (dumps folder)
    questions: str = "engine/benchmarks/livenews/sample_data/questions.jsonl"
    pages: str = "engine/benchmarks/livenews/sample_data/pages.jsonl"   # realtimeqa: the dumps folder
    # A release of `dateline build build=livenews` (or any folder in its layout): questions and pages
    # are read from it (they override the two above); `split` picks questions_<split>.jsonl.
    data_dir: str | None = None
    split: str = ""                        # "" (every question) | train | validation | test | verified | longitudinal
    dataset: str = "sample"                # a short name of the data: the default run dir is runs/<name>-<dataset>
    task_ids: list[str] = field(default_factory=list)   # only these questions (empty: all), then limit
    limit: int | None = None
    results_per_query: int = 10            # "the top 10 results for each query"
    visit_max_tokens: int = 8000           # whitespace tokens of page text returned by a visit
    date_window: bool = True               # only pages dated on or before the question's cutoff
    window_days: int | None = None      # ... and not older than this many days (None: no lower bound)
    block_source_domain: bool = True
    blocked_domains: list[str] = field(default_factory=lambda: sorted(ARCHIVE_DOMAINS))
    judge_probes: bool = True              # also grade the gold answer and a wrong choice: judge reliability
    # A bad row in the questions or pages: "error" stops before anything runs (a DataError naming
    # file, row and field); "skip" drops it and records it in RUN_DIR/quarantine (docs/design/data.md).
    on_bad_rows: str = "error"

    def __post_init__(self) -> None:
        if self.data_dir:
            self.source = "livenewsbench"
            self.questions = data_dir_file(self.data_dir, self.split)
            self.pages = f"{self.data_dir.rstrip('/')}/pages.jsonl"


SPLIT_FILES = {"": "questions.jsonl", "train": "questions_train.jsonl", "validation": "questions_validation.jsonl",
               "test": "questions_test.jsonl", "verified": "questions_verified.jsonl",
               "longitudinal": "longitudinal.jsonl"}


def data_dir_file(data_dir: str, split: str) -> str:
    """The questions file of ``split`` in a release folder."""
    if split not in SPLIT_FILES:
        raise ConfigError(f"benchmark.split: must be one of {sorted(SPLIT_FILES)}, got {split!r}")
    return f"{data_dir.rstrip('/')}/{SPLIT_FILES[split]}"


@dataclass
class LivenewsAgentConfig:
    mode: str = "search"                   # search | no_search (answers from memory: Table 4)
    max_searches: int = 5                  # individual queries, over the whole episode
    max_visits: int = 5                    # individual URLs, over the whole episode
    max_turns: int | None = None        # None: derived, turn_cap(); explicit: >= max_searches + max_visits + 1
    max_tokens_turn: int = 512
    tell_date: bool = True                 # state the question's date in the user turn
    guided_actions: bool = False           # constrain decoding to reasoning + one action block (vLLM)


# Turns the derived cap allows beyond the budgets' own need. A turn that searches or clicks spends
# at least one unit of budget, so max_searches + max_visits + 1 turns (the last one Finish) are
# always enough, and today a format violation ends the episode (the paper: it "results in task
# failure") without costing a turn. The slack is headroom so that the cap still never binds before
# the budgets if a turn that spends nothing is ever allowed to continue (e.g. re-asking after a
# parse failure): the budgets, not the cap, must be what a Table 3 sweep over max_searches varies.
PARSE_FAILURE_SLACK = 2


def turn_cap(agent: LivenewsAgentConfig) -> int:
    """The model turns an episode may take: ``agent.max_turns``, or when that is None
    ``max_searches + max_visits + 1 + PARSE_FAILURE_SLACK``; always 1 in ``no_search`` mode."""
    if agent.mode == "no_search":
        return 1
    if agent.max_turns is not None:
        return agent.max_turns
    return agent.max_searches + agent.max_visits + 1 + PARSE_FAILURE_SLACK
