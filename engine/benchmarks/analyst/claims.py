"""Claim extraction over long reports: the report in chunks, one figure-17 request per chunk.

One extraction call over a whole long report either overflows the judge's window or, more
often, runs out of answer tokens: figure 17 answers with every claim *and* its verbatim quote,
so the answer is longer than the text it covers, and a cut JSON object parses as nothing (the
report would go unscored). So a report is split, at paragraph, then line, then word boundaries
(``sources.chunk_text``), into chunks of at most ``benchmark.claims_chunk_tokens`` estimated
tokens, each extracted by its own request (``claims:0``, ``claims:1``, ...) with an answer
budget of ``benchmark.claims_max_tokens``. The chunks cover the whole report, in order.

Tokens are estimated as UTF-8 bytes / 3 (the judge's tokenizer is not known when requests are
made, and the split must not depend on the judge): English prose runs ~4 bytes per token in
byte-level BPE vocabularies and digits and Markdown tables fewer, so the estimate errs towards
smaller chunks. ``max_claims`` claims are verified per report, spread over the chunks (the
first ``quota`` of each chunk's claims, quotas differing by at most one), so a long report's
hallucination rate is not its opening's.
"""

from __future__ import annotations

import math

from engine.benchmarks.analyst.sources import chunk_text


class ApproxTokens:
    """UTF-8 bytes / 3, rounded up: a judge-independent token estimate."""
    name = "utf8-bytes/3"

    def __call__(self, text: str) -> int:
        return math.ceil(len(text.encode("utf-8")) / 3)


def report_chunks(report: str, chunk_tokens: int) -> list[str]:
    """The report in chunks of at most ``chunk_tokens`` estimated tokens (one when it fits)."""
    if not report.strip():
        return []
    return chunk_text(report, max(chunk_tokens, 1), ApproxTokens()) or [report]


def quotas(n_chunks: int, max_claims: int) -> list[int]:
    """Claims verified per chunk: ``max_claims`` spread over the chunks, earlier ones first."""
    base, extra = divmod(max(max_claims, 0), n_chunks) if n_chunks else (0, 0)
    return [base + (k < extra) for k in range(n_chunks)]
