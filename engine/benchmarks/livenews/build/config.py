"""Schemas behind ``conf/benchmark/livenews_qa.yaml`` and ``conf/agent/livenews_qa.yaml``: the
settings of the LiveNewsBench question builder (``dateline build build=livenews``)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class LivenewsBuildConfig:
    name: str = "livenews:qa"
    # Dated articles: JSON Lines files (url, title, text, publish_date, outlet), folders of them, or
    # folders of RealTime QA *_gcs.jsonl.gz dumps. Nothing is fetched.
    articles: list[str] = field(default_factory=lambda: ["engine/benchmarks/livenews/build/sample_data/articles.jsonl"])
    events: str | None = None              # JSON Lines of date, summary (Wikipedia Current Events form); None: group
    dataset: str = "sample"
    outlets: list[str] = field(default_factory=list)   # registered domains allowed (empty: all); `paper`: figure 4's
    before_days: int = 3                   # an event's article window: 3 days before its date ...
    after_days: int = 11                   # ... to 11 after (section 2.1)
    group_window_days: int = 3             # without an event list: articles within this many days ...
    # ... and this MiniLM cosine of each other are one event (two reports of one quake in RealTime QA's
    # slice: 0.43; 0.35 / 0.45 / 0.55 made 224 / 248 / 281 events of 400 articles)
    group_threshold: float = 0.4
    knowledge_date: str | None = None      # a pair must not be answerable before it (None: the first event's month)
    max_article_chars: int = 6000          # article text shown to the generator and the verifier
    task_ids: list[str] = field(default_factory=list)
    limit: int | None = None
    on_bad_rows: str = "error"             # error | skip (quarantined, counted)
    # What changes only the checks or the release, never a draft (evaluation_fields):
    dedupe_threshold: float = 0.9          # MiniLM cosine of two questions that makes the later a duplicate
    as_of: str | None = None               # the date split's reference (None: the latest event)
    review: str | None = None              # CSV of id, decision (accept | reject): the human-verified subset
    # The guideline check (section 2.2's last filter); false keeps every pair the comparison passed:
    # an ablation (what does the check remove?), said in the manifest and the card.
    check_adherence: bool = True
    answer_max_tokens: int = 48
    adherence_max_tokens: int = 160


@dataclass
class LivenewsDraftConfig:
    check_relevance: bool = True           # figure 5's check before drafting
    relevance_max_tokens: int = 160
    draft_max_tokens: int = 400
