"""The RealTime QA -> newsagent converter (for now all of it is in :mod:`.conversion`)."""

from engine.benchmarks.newsagent.realtimeqa.conversion import (
    DESCRIPTION,
    MAX_ARTICLE_CHARS,
    MIN_CONTENT_TOKENS,
    MIN_FIRSTHAND,
    MIN_LINE_WORDS,
    MIN_SENTENCE_WORDS,
    QUOTE_MIN_FRACTION,
    REFERENCE_ARTICLE_SENTENCES,
    SKIP_REASONS,
    DbObject,
    Index,
    add_arguments,
    as_quote,
    clean_article,
    content_tokens,
    convert,
    is_boilerplate_line,
    is_match,
    main,
    normalize,
    run,
    split_sentences,
)

__all__ = [
    "DESCRIPTION", "MAX_ARTICLE_CHARS", "MIN_CONTENT_TOKENS", "MIN_FIRSTHAND", "MIN_LINE_WORDS",
    "MIN_SENTENCE_WORDS", "QUOTE_MIN_FRACTION", "REFERENCE_ARTICLE_SENTENCES", "SKIP_REASONS", "DbObject",
    "Index", "add_arguments", "as_quote", "clean_article", "content_tokens", "convert", "is_boilerplate_line",
    "is_match", "main", "normalize", "run", "split_sentences",
]
