"""Schemas behind ``conf/benchmark/livenews*.yaml`` and ``conf/agent/livenews*.yaml``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from indexes.web import ARCHIVE_DOMAINS


@dataclass
class LivenewsBenchmarkConfig:
    name: str = "livenews"
    source: str = "livenewsbench"          # livenewsbench (questions + pages JSONL) | realtimeqa (dumps folder)
    questions: str = "engine/benchmarks/livenews/sample_data/questions.jsonl"
    pages: str = "engine/benchmarks/livenews/sample_data/pages.jsonl"   # realtimeqa: the dumps folder
    limit: Optional[int] = None
    results_per_query: int = 10            # "the top 10 results for each query"
    visit_max_tokens: int = 8000           # whitespace tokens of page text returned by a visit
    date_window: bool = True               # only pages dated on or before the question's cutoff
    window_days: Optional[int] = None      # ... and not older than this many days (None: no lower bound)
    block_source_domain: bool = True
    blocked_domains: list[str] = field(default_factory=lambda: sorted(ARCHIVE_DOMAINS))
    judge_probes: bool = True              # also grade the gold answer and a wrong choice: judge reliability


@dataclass
class LivenewsAgentConfig:
    mode: str = "search"                   # search | no_search (answers from memory: Table 4)
    max_searches: int = 5                  # individual queries, over the whole episode
    max_visits: int = 5                    # individual URLs, over the whole episode
    max_turns: int = 12
    max_tokens_turn: int = 512
    tell_date: bool = True                 # state the question's date in the user turn
    guided_actions: bool = False           # constrain decoding to reasoning + one action block (vLLM)
