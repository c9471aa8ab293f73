"""Convert a RealTime QA dump into a newsagent dataset folder (see :mod:`engine.benchmarks.newsagent.data`).

Input: a folder of weekly file pairs (gzipped JSON Lines; ``.jsonl`` without ``.gz`` is also read)::

    YYYYMMDD_qa.jsonl.gz   {"question_id", "question_date": "2023/01/06", "question_source", "question_url",
                            "question_sentence", "choices": [4], "answer": ["<idx>"], "evidence"}
    YYYYMMDD_gcs.jsonl.gz  {"question_id", "search_time",
                            "search_result": [{"url", "title", "text", "authors", "publish_date": "YYYY/MM/DD"}]}

Required fields: ``question_id`` and ``question_date`` (qa), ``question_id`` and ``search_result`` (gcs),
``url`` in every search result. ``search_time`` (gcs; "YYYY/MM/DD/HH:MM" or "YYYY/MM/DD") is optional. ``title``, ``text`` and ``publish_date`` of a result may be missing or
null (the real dumps have a few such results); such an article is unusable and only counted. A
present but malformed value, a bad JSON line, bad UTF-8, a truncated gzip, an unsafe or duplicate
question id or a text over ``MAX_ARTICLE_CHARS`` raises :class:`~engine.errors.BadDataError` naming
the file, the 1-based line and the field; with ``on_bad_rows="skip"`` (``--on-bad-rows skip``) the
row is left out instead and listed in ``OUT/quarantine.parquet`` (``docs/design/data.md``).

Construction (this is the specification of the converter):

1. **Articles.** Search results are deduplicated by URL over all weeks. Each search result is a
   *crawl* of its URL, made at its row's ``search_time`` (a row without one counts as crawled
   after every timed crawl). Sites revise articles after release, so a later crawl can carry text
   written after the release date (updates, new paragraphs), which would put post-release facts
   into the target and into database objects dated at the release. The version kept is therefore
   the **earliest usable crawl** (one with a publish date and non-blank text). Ties (usable crawls
   at the same time) and URLs without any usable crawl keep the version with a publish date, then
   the longest text, then the latest date, then the greatest title (independent of input order).
   **Cutoff**: a question's cutoff is its own ``search_time``, the moment the dump saw the web for
   it; a question never uses a crawl made after its cutoff. The kept (earliest) version is at or
   before the cutoff of every question whose own copy was usable; an article whose only usable
   crawls come after a question's cutoff (its copy for that question had no text or date) is not
   a target candidate for that question (step 6; counted as ``targets_crawled_later``). The
   database (step 7) keeps the earliest usable crawl of every article regardless: every crawl
   postdates the publish date that dates its objects, and the earliest is the closest to it.
2. **Cleaning.** Article text is split into lines (paragraphs). A line is dropped as boilerplate
   when it has fewer than 8 words; starts with a boilerplate prefix ("Editor's note", "Follow",
   "Sign up", "Read more", "Related:", "Subscribe", "Contact", "This story has been updated", ...);
   is a URL; is an all-caps header; has no sentence-final punctuation (headlines, inline links);
   is an inline-link teaser ("Label:Headline"); contains an e-mail address; or occurs (normalized)
   in at least ``boilerplate_min_articles`` (default 5) distinct articles of the dump (newsletter
   and privacy blurbs). A leading wire dateline ("WASHINGTON (AP) —", "(CNN) —") is removed.
3. **Sentences.** Each kept line is split with a deterministic regex splitter: a break is a run of
   ``.!?`` (plus closing quotes/brackets) followed by whitespace and an upper-case letter, digit or
   opening quote. No break after titles (Mr., Dr., Sen., Gov., St., ...), single initials (W.),
   month abbreviations or "No." before a number; dotted acronyms (U.S., D.C., a.m.) and Jr./Inc.
   end a sentence only before a typical sentence opener (The, He, But, ...). Decimals never break
   (no whitespace). Sentences under 4 words and repeats within the article are dropped; each
   article keeps its first ``max_sentences`` (default 40) sentences.
4. **Quotes.** A sentence that is mostly (>= 60% of its characters) one quotation attributed to a
   named speaker (``"...," Name said.`` / ``"...," said Name.``; pronouns do not count) becomes
   kind ``quote`` with text ``[Name] quoted words``; everything else is ``description``.
5. **Matching** is lexical: lowercase, drop apostrophes / possessive 's, keep ``[a-z0-9]+`` tokens,
   drop single letters and a small stopword list. Sentences A and B match when both have >= 5
   content tokens and ``|A & B| / min(|A|, |B|) >= threshold`` (default 0.6). An inverted index
   over the database (postings in date order, cut by bisection at the release date) makes this
   one pass over the candidate postings per target sentence.
6. **Target.** For each question, among its search results that have a publish date on or before
   the question date and at least one sentence and whose kept crawl is at or before the question's
   cutoff (step 1), the most recent is the target article (ties:
   longer text, then smaller URL). ``release_date`` = its publish date, ``title`` = its title,
   ``reference_article`` = its first 60 cleaned sentences (paragraphs kept), ``source`` =
   question id, ``task_id`` = ``"rtqa-" + question_id``.
7. **Historical database** (``objects.jsonl``, shared by all tasks): every sentence of every
   dated article in the dump (articles ordered by date, URL), deduplicated by (normalized text,
   date), restricted to dates strictly before the latest release date of an emitted task (the
   environment filters per task: only objects dated strictly before a task's release date are
   visible). ``object_id`` = ``"rtqa-" + sha1(url + "\\n" + sentence)[:12]``, ``date`` = the
   article's publish date, ``source`` = its URL.
8. **Firsthand**: the target's sentences (first ``max_sentences``) that match no database object
   dated strictly before the release date (an article published on the release date is never
   historical), rendered as in 4 and deduplicated.
9. **Reference evidence**: the database objects dated strictly before the release date that come
   from an article in the same question's search results (counting every URL that produced the
   deduplicated object) and match some target sentence; in database order.
10. **Skips.** A question is skipped, with one reason counted, when it has no search results
    (``no_search_results``), no usable article dated on or before the question date
    (``no_target_article``), no reference evidence (``no_reference_evidence``) or fewer than 3
    firsthand objects (``too_few_firsthand``). Several questions may share a target article; each
    becomes its own task (counted as ``shared_targets``).

``convert`` returns (and logs) a stats dict. CLI::

    python -m engine.benchmarks.newsagent.realtimeqa SRC OUT [--max-sentences N] [--threshold X] [--weeks W,...]

Parts: :mod:`.text` (steps 2-5 on strings), :mod:`.dump` (the input and step 1), :mod:`.database`
(step 7's objects and the index of step 5), :mod:`.conversion` (:func:`convert`: the steps in
order) and :mod:`.cli` (the command line). This module re-exports their public names.
"""

from engine.benchmarks.newsagent.realtimeqa.cli import DESCRIPTION, add_arguments, main, run
from engine.benchmarks.newsagent.realtimeqa.conversion import (
    MIN_FIRSTHAND,
    REFERENCE_ARTICLE_SENTENCES,
    SKIP_REASONS,
    convert,
)
from engine.benchmarks.newsagent.realtimeqa.database import DbObject, Index
from engine.benchmarks.newsagent.realtimeqa.dump import MAX_ARTICLE_CHARS
from engine.benchmarks.newsagent.realtimeqa.text import (
    MIN_CONTENT_TOKENS,
    MIN_LINE_WORDS,
    MIN_SENTENCE_WORDS,
    QUOTE_MIN_FRACTION,
    as_quote,
    clean_article,
    content_tokens,
    is_boilerplate_line,
    is_match,
    normalize,
    split_sentences,
)

__all__ = [
    "DESCRIPTION", "MAX_ARTICLE_CHARS", "MIN_CONTENT_TOKENS", "MIN_FIRSTHAND", "MIN_LINE_WORDS",
    "MIN_SENTENCE_WORDS", "QUOTE_MIN_FRACTION", "REFERENCE_ARTICLE_SENTENCES", "SKIP_REASONS", "DbObject",
    "Index", "add_arguments", "as_quote", "clean_article", "content_tokens", "convert", "is_boilerplate_line",
    "is_match", "main", "normalize", "run", "split_sentences",
]
