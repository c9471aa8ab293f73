"""Convert a RealTime QA dump into a newsagent dataset folder (see :mod:`.data`).

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
"""

from __future__ import annotations

import argparse
import bisect
import datetime as dt
import hashlib
import json
import logging
import math
import re
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

from engine.benchmarks.newsagent.data import HistoricalObject, NewsTask, write_dataset
from engine.errors import BadDataError, DataError
from engine.inputs.jsonl import UniqueIds, field_date, field_id, field_str, read_jsonl
from engine.inputs.quarantine import ON_BAD_ROWS, Quarantine, check_mode, reject, write_quarantine_file
from engine.runtime.logs import configure as configure_logging

log = logging.getLogger(__name__)

MIN_LINE_WORDS = 8
MIN_SENTENCE_WORDS = 4
MIN_CONTENT_TOKENS = 5
MIN_FIRSTHAND = 3
REFERENCE_ARTICLE_SENTENCES = 60
QUOTE_MIN_FRACTION = 0.6
MAX_ARTICLE_CHARS = 5_000_000      # characters of one search result's text or title

SKIP_REASONS = ("no_search_results", "no_target_article", "no_reference_evidence", "too_few_firsthand")

# --------------------------------------------------------------------------------------------
# Text: cleaning, sentence splitting, tokens
# --------------------------------------------------------------------------------------------

_BOILERPLATE_PREFIXES = (
    "editor's note", "editor’s note", "editors note", "follow ", "follow:", "sign up", "signup",
    "read more", "related:", "related coverage", "subscribe", "click here", "advertisement",
    "copyright", "©", "all rights reserved", "contributing:", "contact ", "reach ", "watch:",
    "listen:", "share this", "photo:", "image:", "getty images", "this story has been updated",
    "this article has been updated", "this story was updated", "correction:", "more:", "see also",
    "download the", "get the", "video ad feedback",
)
_URL_LINE = re.compile(r"^(?:https?://|www\.)\S*$", re.I)
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")
_LINK_TEASER = re.compile(r"^[^.!?]{1,60}[?!]?:(?=[A-Z\"“'‘])")
_FINAL_PUNCT = re.compile(r"[.!?][\"'”’)\]]*$")
_DATELINE = re.compile(
    r"^(?:[A-Z][A-Za-z.,'’ -]{0,40}?\s*)?(?:\((?:AP|CNN|Reuters|AFP|CNN Business)\)|CNN(?: Business)?)\s*[—–-]+\s*")
_WS = re.compile(r"\s+")
_FRAGMENT = re.compile(r"^[a-z][a-z]")  # starts mid-sentence (scraping artifact)

_NO_BREAK = frozenset(
    "mr mrs ms messrs dr prof sen sens rep reps gov gen lt col sgt capt cmdr adm maj cpl pvt "
    "st ft mt ave blvd rev hon pres atty supt det insp fr vs v".split())
_MONTHS = frozenset("jan feb mar apr jun jul aug sep sept oct nov dec".split())
_MAYBE_END = frozenset("jr sr inc co corp ltd llc bros etc".split())
_STARTERS = frozenset(
    "The He She It They We I You But And In A An This That These Those There His Her Their Its Our "
    "So Yet Still Then Now When While After Before On At As If For Some Many Most All".split())
_BOUNDARY = re.compile(r"([.!?]+)([\"'”’)\]]*)\s+(?=[\"“‘'(\[]?[A-Z0-9])")
_ACRONYM = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]")

_STOPWORDS = frozenset("""
a about above after again against all also am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further had has
have having he her here hers herself him himself his how i if in into is it its itself just me more
most my myself no nor not now of off on once only or other our ours ourselves out over own said
same say says she should so some such than that the their theirs them themselves then there these
they this those through to too under until up very was we were what when where which while who
whom why will with would you your yours yourself yourselves told according one
mr mrs ms dr sen rep gov st im ive youre youve dont doesnt didnt isnt wasnt arent werent cant
couldnt wont wouldnt shouldnt hasnt havent hadnt thats theres hes shes theyre theyve weve were lets
""".split())
_TOKEN = re.compile(r"[a-z0-9]+")
_POSSESSIVE = re.compile(r"'s\b")

_SPEECH_VERBS = (r"(?:said|says|added|adds|told|tells|wrote|writes|explained|noted|continued|asked|recalled|"
                 r"argued|tweeted|posted|stated|warned|insisted|declared|replied|responded|acknowledged|"
                 r"admitted|announced|claimed|urged|quipped|joked|concluded|remarked)")
_NAME = r"[A-Z][\w'’.-]*(?:\s+(?:[A-Z][\w'’.-]*|de|da|van|von|al|bin|del|la|le)){0,5}"
_QUOTE_NAME_VERB = re.compile(
    rf"^[\"“](?P<q>[^\"“”]+?)(?P<p>[,.?!]?)[\"”],?\s+(?P<who>{_NAME})\s+{_SPEECH_VERBS}\b")
_QUOTE_VERB_NAME = re.compile(
    rf"^[\"“](?P<q>[^\"“”]+?)(?P<p>[,.?!]?)[\"”],?\s+{_SPEECH_VERBS}\s+(?P<who>{_NAME})")
_NOT_SPEAKERS = frozenset(
    "He She They It We I You The A An This That His Her Their Its Our One Some Officials Police".split())


def _lines(text: str) -> list[str]:
    return [_WS.sub(" ", ln).strip() for ln in text.replace("\r", "\n").split("\n")]


def normalize(text: str) -> str:
    """Lowercase, punctuation-free, single-spaced form (dedupe key; stopwords kept)."""
    return " ".join(_TOKEN.findall(_POSSESSIVE.sub("", text.lower().replace("’", "'")).replace("'", "")))


def content_tokens(text: str) -> frozenset[str]:
    """The matching tokens of a sentence: normalized words minus single letters and stopwords."""
    return frozenset(t for t in normalize(text).split()
                     if t not in _STOPWORDS and (len(t) > 1 or t.isdigit()))


def is_match(a: frozenset[str], b: frozenset[str], threshold: float = 0.6) -> bool:
    """The matching rule of step 5 on two content-token sets (the index computes the same)."""
    if len(a) < MIN_CONTENT_TOKENS or len(b) < MIN_CONTENT_TOKENS:
        return False
    return len(a & b) >= threshold * min(len(a), len(b)) - 1e-9


def is_boilerplate_line(line: str) -> bool:
    """Per-line rules of step 2 (the cross-article frequency rule is applied by the converter)."""
    if len(line.split()) < MIN_LINE_WORDS:
        return True
    low = line.lower().lstrip("•*-–— ")
    if low.startswith(_BOILERPLATE_PREFIXES):
        return True
    if _URL_LINE.match(line) or _EMAIL.search(line) or _LINK_TEASER.match(line):
        return True
    if line == line.upper() and line != line.lower():  # ALL-CAPS header
        return True
    return not _FINAL_PUNCT.search(line)


def _no_break(before: str, after: str) -> bool:
    """True when the period ending ``before`` (a whitespace-free token, period stripped) is not a sentence end."""
    word = before.lstrip("\"“‘'([")
    low = word.lower()
    nxt = after.lstrip("\"“‘'([")
    if low in _NO_BREAK:
        return True
    if len(word) == 1 and word.isalpha() and word.isupper():
        return True  # an initial: George W. Bush
    if low in _MONTHS or low == "no":
        return nxt[:1].isdigit()
    if low in _MAYBE_END or _ACRONYM.fullmatch(word):
        first = re.match(r"[\w'’]+", nxt)
        return not (first and first.group(0) in _STARTERS)
    return False


def split_sentences(line: str) -> list[str]:
    """Split one paragraph into sentences (step 3)."""
    out: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(line):
        if m.group(1) == "." and not m.group(2):
            head = line[start:m.start()].rsplit(None, 1)
            if head and _no_break(head[-1], line[m.end():m.end() + 40]):
                continue
        out.append(line[start:m.end()].strip())
        start = m.end()
    tail = line[start:].strip()
    if tail:
        out.append(tail)
    return out


def as_quote(sentence: str) -> tuple[str, str] | None:
    """(speaker, quoted words) when the sentence is mostly an attributed quotation (step 4)."""
    for pat in (_QUOTE_NAME_VERB, _QUOTE_VERB_NAME):
        m = pat.match(sentence)
        if not m:
            continue
        who = m.group("who").rstrip(".,")
        if not who or who.split()[0] in _NOT_SPEAKERS:
            return None
        quote = m.group("q").strip()
        if len(quote) < QUOTE_MIN_FRACTION * len(sentence):
            return None
        end = m.group("p")
        return who, quote + (end if end in (".", "?", "!") else ".")
    return None


def clean_article(text: str, boilerplate: frozenset[str] = frozenset(),
                  limit: int | None = None) -> list[list[str]]:
    """Paragraphs of sentences after steps 2-3, at most ``limit`` sentences in all;
    ``boilerplate`` holds normalized lines to drop."""
    paragraphs: list[list[str]] = []
    seen: set[str] = set()
    n = 0
    for line in _lines(text):
        if limit is not None and n >= limit:
            break
        if not line or is_boilerplate_line(line) or normalize(line) in boilerplate:
            continue
        line = _DATELINE.sub("", line, count=1)
        para = []
        for s in split_sentences(line):
            if (len(s.split()) < MIN_SENTENCE_WORDS or s.lower().startswith(_BOILERPLATE_PREFIXES)
                    or _FRAGMENT.match(s)):
                continue
            key = normalize(s)
            if key and key not in seen and (limit is None or n < limit):
                seen.add(key)
                para.append(s)
                n += 1
        if para:
            paragraphs.append(para)
    return paragraphs


# --------------------------------------------------------------------------------------------
# Input
# --------------------------------------------------------------------------------------------

_WEEK_FILE = re.compile(r"^(\d{8})_qa\.jsonl(?:\.gz)?$")


def _parse_date(path: Path, row: int, fld: str, raw: Any) -> dt.date:
    return field_date(path, row, fld, raw)


def _req_str(path: Path, row: int, obj: dict[str, Any], key: str, where: str = "") -> str:
    return field_str(path, row, obj, key, name=where + key, max_chars=MAX_ARTICLE_CHARS)


def _opt_str(path: Path, row: int, obj: dict[str, Any], key: str, where: str = "") -> str:
    return field_str(path, row, obj, key, required=False, strip=False, name=where + key, max_chars=MAX_ARTICLE_CHARS)


_SEARCH_TIME = re.compile(r"^(\d{4})[/-](\d{2})[/-](\d{2})(?:[/ T](\d{2}):(\d{2})(?::\d{2}(?:\.\d+)?)?)?$")


def _parse_search_time(path: Path, row: int, raw: Any) -> dt.datetime | None:
    """The crawl time of a gcs row (step 1); None when absent."""
    if raw is None or raw == "":
        return None
    m = _SEARCH_TIME.match(raw.strip()) if isinstance(raw, str) else None
    if m is None:
        raise BadDataError("bad_date", path, row, "search_time", f"expected YYYY/MM/DD/HH:MM, got {raw!r:.60}")
    try:
        y, mo, d, h, mi = (int(g) if g else 0 for g in m.groups())
        return dt.datetime(y, mo, d, h, mi)
    except ValueError as e:
        raise BadDataError("impossible_date", path, row, "search_time", f"no such time {raw!r:.60} ({e})") from None


def _crawled_by(crawled: dt.datetime | None, cutoff: dt.datetime | None) -> bool:
    """A crawl made at or before a cutoff (an unknown time on either side constrains nothing)."""
    return crawled is None or cutoff is None or crawled <= cutoff


def _target_rank(a: _Article) -> tuple[int, int, str]:
    """The target article of a question: the latest publish date, then the longest text, then the URL."""
    assert a.date is not None       # only dated articles are eligible
    return -a.date.toordinal(), -len(a.text), a.url


@dataclass
class _Article:
    url: str
    title: str
    date: dt.date | None
    text: str
    paragraphs: list[list[str]] = field(default_factory=list)
    crawled: dt.datetime | None = None   # search_time of the crawl this version comes from
    crawls: int = 1                      # search results seen for this URL

    def sentences(self, limit: int) -> list[str]:
        return list(chain.from_iterable(self.paragraphs))[:limit]

    def usable(self) -> bool:
        return self.date is not None and bool(self.text.strip())

    def better_than(self, other: _Article) -> bool:
        """Step 1: the earliest usable crawl; then publish date, longest text, latest date, title."""
        if self.usable() != other.usable():
            return self.usable()
        if self.usable() and self.crawled != other.crawled:
            return other.crawled is None or (self.crawled is not None and self.crawled < other.crawled)

        def key(a: _Article) -> tuple[Any, ...]:
            return (a.date is not None, len(a.text), a.date or dt.date.min, a.title)
        return key(self) > key(other)


@dataclass
class _Question:
    qid: str
    date: dt.date
    urls: list[str] | None = None  # None: no search-results row
    crawled: dt.datetime | None = None  # its search_time: the cutoff for the crawls it may use


def _week_files(src: Path, weeks: Iterable[Any] | None) -> list[tuple[str, Path, Path]]:
    if not src.is_dir():
        raise BadDataError("missing_file", src, None, None, "source folder not found")

    def pick(week: str, kind: str) -> Path:
        for name in (f"{week}_{kind}.jsonl.gz", f"{week}_{kind}.jsonl"):
            if (src / name).exists():
                return src / name
        raise BadDataError("missing_file", src / f"{week}_{kind}.jsonl.gz", None, None, "file not found")

    if weeks is None:
        names = sorted({m.group(1) for p in src.iterdir() if (m := _WEEK_FILE.match(p.name))})
    else:
        names = []
        for w in weeks:
            s = w.strftime("%Y%m%d") if isinstance(w, dt.date) else re.sub(r"[^0-9]", "", str(w))
            if len(s) != 8:
                raise ValueError(f"week {w!r}: expected YYYYMMDD")
            names.append(s)
        names = sorted(set(names))
    return [(w, pick(w, "qa"), pick(w, "gcs")) for w in names]


def _gcs_row(path: Path, row: int, obj: dict[str, Any]) -> tuple[str, dt.datetime | None, list[_Article]]:
    """(question id, search time, one article per search result) of a gcs row, all checked
    before any of it is used (a bad result rejects its whole row)."""
    qid = field_id(path, row, obj, "question_id")
    items = obj.get("search_result")
    if items is None:
        raise BadDataError("missing_field", path, row, "search_result", "missing")
    if not isinstance(items, list):
        raise BadDataError("wrong_type", path, row, "search_result", f"expected a list, got {type(items).__name__}")
    crawled = _parse_search_time(path, row, obj.get("search_time"))
    found = []
    for k, item in enumerate(items):
        where = f"search_result[{k}]."
        if not isinstance(item, dict):
            raise BadDataError("wrong_type", path, row, f"search_result[{k}]", "expected an object")
        url = _req_str(path, row, item, "url", where)
        raw_date = item.get("publish_date")
        date = None if raw_date in (None, "") else _parse_date(path, row, where + "publish_date", raw_date)
        found.append(_Article(url, _WS.sub(" ", _opt_str(path, row, item, "title", where)).strip(), date,
                              _opt_str(path, row, item, "text", where), crawled=crawled))
    return qid, crawled, found


def _load(files: list[tuple[str, Path, Path]], stats: dict[str, Any], bad: Quarantine | None = None
          ) -> tuple[list[_Question], dict[str, _Article]]:
    questions: dict[str, _Question] = {}
    where_q = UniqueIds()
    for _, qa_path, _ in files:
        for row, obj in read_jsonl(qa_path, bad):
            try:
                qid = field_id(qa_path, row, obj, "question_id")
                where_q.check(qid, qa_path, row, "question_id")
                date = _parse_date(qa_path, row, "question_date", obj.get("question_date"))
            except DataError as e:
                reject(bad, e, obj)
                continue
            where_q.add(qid, qa_path, row)
            questions[qid] = _Question(qid, date)

    articles: dict[str, _Article] = {}
    seen_gcs = UniqueIds()
    results = 0
    for _, _, gcs_path in files:
        for row, obj in read_jsonl(gcs_path, bad):
            try:
                qid, crawled, found = _gcs_row(gcs_path, row, obj)
                seen_gcs.check(qid, gcs_path, row, "question_id")
            except DataError as e:
                reject(bad, e, obj)
                continue
            seen_gcs.add(qid, gcs_path, row)
            urls: list[str] = []
            for art in found:
                url = art.url
                results += 1
                old = articles.get(url)
                if old is not None:
                    art.crawls = old.crawls + 1
                    if not art.better_than(old):
                        old.crawls = art.crawls
                        art = old
                articles[url] = art
                if url not in urls:
                    urls.append(url)
            q = questions.get(qid)
            if q is None:
                stats["results_without_question"] += 1
            else:
                q.urls = urls
                q.crawled = crawled
    stats["search_results"] = results
    return list(questions.values()), articles


# --------------------------------------------------------------------------------------------
# Database and matching
# --------------------------------------------------------------------------------------------


@dataclass
class DbObject:
    object_id: str
    date: dt.date
    sentence: str
    text: str
    kind: str
    source: str
    tokens: frozenset[str]
    urls: set[str]


def _render(sentence: str) -> tuple[str, str]:
    q = as_quote(sentence)
    return (f"[{q[0]}] {q[1]}", "quote") if q else (sentence, "description")


def _object_id(url: str, sentence: str, taken: dict[str, Any]) -> str:
    digest = hashlib.sha1(f"{url}\n{sentence}".encode()).hexdigest()
    for n in (12, 16, 24, 40):  # longer only on a (never yet seen) 48-bit collision
        oid = "rtqa-" + digest[:n]
        if oid not in taken:
            return oid
    raise RuntimeError(f"object id collision for {url}")


class Index:
    """Inverted index over database objects (object indices ascending = date ascending)."""

    def __init__(self, objects: list[DbObject]) -> None:
        self.objects = objects
        self.ordinals = [o.date.toordinal() for o in objects]
        self.sizes = [len(o.tokens) for o in objects]
        self.postings: dict[str, list[int]] = {}
        for i, o in enumerate(objects):
            if len(o.tokens) >= MIN_CONTENT_TOKENS:
                for t in o.tokens:
                    self.postings.setdefault(t, []).append(i)

    def matches(self, tokens: frozenset[str], before: dt.date, threshold: float) -> list[int]:
        """Indices of objects dated strictly before ``before`` that match ``tokens``."""
        if len(tokens) < MIN_CONTENT_TOKENS:
            return []
        cut = bisect.bisect_left(self.ordinals, before.toordinal())
        lists = []
        for t in tokens:
            p = self.postings.get(t)
            if p:
                lists.append(p[:bisect.bisect_left(p, cut)])
        n = len(tokens)
        counts = Counter(chain.from_iterable(lists))
        floor = math.ceil(threshold * MIN_CONTENT_TOKENS - 1e-9)  # no match shares fewer tokens
        sizes = self.sizes
        out = [i for i, c in counts.items() if c >= floor and c >= threshold * min(n, sizes[i]) - 1e-9]
        out.sort()
        return out


# --------------------------------------------------------------------------------------------
# Conversion
# --------------------------------------------------------------------------------------------


def _first_sentences(paragraphs: list[list[str]], limit: int) -> str:
    out, n = [], 0
    for p in paragraphs:
        if n >= limit:
            break
        out.append(" ".join(p[:limit - n]))
        n += len(p[:limit - n])
    return "\n\n".join(out)


def convert(src_dir: str | Path, out_dir: str | Path, max_sentences: int = 40, threshold: float = 0.6,
            weeks: Iterable[Any] | None = None, boilerplate_min_articles: int = 5,
            on_bad_rows: str = "error") -> dict[str, Any]:
    """Convert the RealTime QA weeks in ``src_dir`` into a newsagent dataset folder ``out_dir``.
    ``on_bad_rows``: "error" raises on the first bad row; "skip" leaves bad rows out, writes them
    to ``out_dir/quarantine.parquet`` and counts them (``bad_rows_skipped``)."""
    check_mode(on_bad_rows)
    if max_sentences < 1:
        raise ValueError("max_sentences must be >= 1")
    if not 0.0 < threshold <= 1.0:
        raise ValueError("threshold must be in (0, 1]")
    t0 = time.monotonic()
    src = Path(src_dir)
    stats: dict[str, Any] = Counter()
    files = _week_files(src, weeks)
    bad = Quarantine() if on_bad_rows == "skip" else None
    questions, articles = _load(files, stats, bad)

    # Step 2: lines repeated across many articles are boilerplate.
    line_freq: Counter[str] = Counter()
    for a in articles.values():
        line_freq.update({normalize(ln) for ln in _lines(a.text) if len(ln.split()) >= MIN_LINE_WORDS})
    boilerplate = frozenset(k for k, c in line_freq.items() if c >= boilerplate_min_articles and k)
    keep = max(max_sentences, REFERENCE_ARTICLE_SENTENCES)
    for a in articles.values():
        if a.text.strip():
            a.paragraphs = clean_article(a.text, boilerplate, keep)

    # Step 7: the database, in (date, url) order, deduplicated by (normalized text, date).
    objects: list[DbObject] = []
    by_key: dict[tuple[str, dt.date], DbObject] = {}
    by_id: dict[str, DbObject] = {}
    dated = sorted((a for a in articles.values() if a.date is not None and a.paragraphs),
                   key=lambda a: (a.date, a.url))
    for a in dated:
        assert a.date is not None
        for s in a.sentences(max_sentences):
            key = (normalize(s), a.date)
            if key in by_key:
                by_key[key].urls.add(a.url)
                continue
            text, kind = _render(s)
            o = DbObject(_object_id(a.url, s, by_id), a.date, s, text, kind, a.url, content_tokens(s), {a.url})
            by_key[key] = o
            by_id[o.object_id] = o
            objects.append(o)
    index = Index(objects)

    # Steps 6, 8, 9: tasks.
    tasks: list[NewsTask] = []
    skipped: Counter[str] = Counter({r: 0 for r in SKIP_REASONS})
    target_cache: dict[str, list[tuple[str, list[int]]]] = {}
    target_uses: Counter[str] = Counter()
    for q in questions:
        if not q.urls:
            skipped["no_search_results"] += 1
            continue
        eligible = [articles[u] for u in q.urls
                    if (published := articles[u].date) is not None and published <= q.date and articles[u].paragraphs]
        in_time = [a for a in eligible if _crawled_by(a.crawled, q.crawled)]
        stats["targets_crawled_later"] += len(eligible) - len(in_time)
        eligible = in_time
        if not eligible:
            skipped["no_target_article"] += 1
            continue
        target = min(eligible, key=_target_rank)
        assert target.date is not None
        release = target.date
        if target.url not in target_cache:
            target_cache[target.url] = [(s, index.matches(content_tokens(s), release, threshold))
                                        for s in target.sentences(max_sentences)]
        matched = target_cache[target.url]
        firsthand: list[str] = []
        seen: set[str] = set()
        for s, hits in matched:
            norm = normalize(s)
            if not hits and norm not in seen:
                seen.add(norm)
                firsthand.append(_render(s)[0])
        qurls = set(q.urls)
        refs = sorted({i for _, hits in matched for i in hits if objects[i].urls & qurls})
        if not refs:
            skipped["no_reference_evidence"] += 1
            continue
        if len(firsthand) < MIN_FIRSTHAND:
            skipped["too_few_firsthand"] += 1
            continue
        target_uses[target.url] += 1
        reference_article = _first_sentences(target.paragraphs, REFERENCE_ARTICLE_SENTENCES)
        title = target.title or target.sentences(1)[0][:200]
        tasks.append(NewsTask(f"rtqa-{q.qid}", title, release, tuple(firsthand),
                              tuple(objects[i].object_id for i in refs), reference_article, q.qid))

    horizon = max((t.release_date for t in tasks), default=dt.date.min)
    out_objects = [HistoricalObject(o.object_id, o.date, o.text, o.kind, o.source)
                   for o in objects if o.date < horizon]
    write_dataset(out_dir, tasks, out_objects)
    write_quarantine_file(Path(out_dir) / "quarantine.parquet", bad.rows if bad else [])

    n_tasks = len(tasks)
    result: dict[str, Any] = {
        "weeks": len(files),
        "questions": len(questions),
        "tasks": n_tasks,
        "skipped": dict(skipped),
        "search_results": stats["search_results"],
        "articles": len(articles),
        "articles_undated": sum(1 for a in articles.values() if a.date is None),
        "articles_without_text": sum(1 for a in articles.values() if not a.text.strip()),
        "articles_without_sentences": sum(1 for a in articles.values() if a.text.strip() and not a.paragraphs),
        "articles_crawled_more_than_once": sum(1 for a in articles.values() if a.crawls > 1),
        "targets_crawled_later": stats["targets_crawled_later"],
        "results_without_question": stats["results_without_question"],
        "boilerplate_lines": len(boilerplate),
        "objects": len(out_objects),
        "objects_quote": sum(1 for o in out_objects if o.kind == "quote"),
        "reference_evidence_total": sum(len(t.reference_evidence) for t in tasks),
        "firsthand_total": sum(len(t.firsthand) for t in tasks),
        "firsthand_mean": round(sum(len(t.firsthand) for t in tasks) / n_tasks, 2) if n_tasks else 0.0,
        "reference_evidence_mean": (round(sum(len(t.reference_evidence) for t in tasks) / n_tasks, 2)
                                    if n_tasks else 0.0),
        "shared_targets": sum(c - 1 for c in target_uses.values() if c > 1),
        "bad_rows_skipped": len(bad) if bad else 0,
        "seconds": round(time.monotonic() - t0, 2),
    }
    log.info("realtimeqa: %s -> %s: %s", src, out_dir, json.dumps(result, sort_keys=True))
    return result


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The converter's options (``dateline convert-realtimeqa``'s subparser, and :func:`main`)."""
    p.add_argument("src", type=Path, help="folder with YYYYMMDD_qa.jsonl.gz / YYYYMMDD_gcs.jsonl.gz pairs (RealTime "
                                          "QA's weekly dumps: github.com/realtimeqa/realtimeqa_public, past/)")
    p.add_argument("out", type=Path, help="output dataset folder (objects.jsonl, tasks.jsonl)")
    p.add_argument("--max-sentences", type=int, default=40, help="sentences kept per article (default 40)")
    p.add_argument("--threshold", type=float, default=0.6, help="token containment for a match (default 0.6)")
    p.add_argument("--weeks", default=None, help="comma-separated YYYYMMDD weeks (default: all)")
    p.add_argument("--on-bad-rows", choices=ON_BAD_ROWS, default="error",
                   help="error: stop at the first bad row (default); skip: leave bad rows out and list them "
                        "in OUT/quarantine.parquet")


DESCRIPTION = "Convert a RealTime QA dump into a newsagent dataset folder."


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.benchmarks.newsagent.realtimeqa", description=DESCRIPTION)
    add_arguments(p)
    return run(p.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Convert; bad data is one line on stderr and exit status 2."""
    configure_logging()
    weeks = [w.strip() for w in args.weeks.split(",") if w.strip()] if args.weeks else None
    try:
        stats = convert(args.src, args.out, args.max_sentences, args.threshold, weeks, on_bad_rows=args.on_bad_rows)
    except (DataError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(stats, indent=2, sort_keys=True))
    return 0

