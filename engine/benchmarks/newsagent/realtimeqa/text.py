"""Text rules of the converter (steps 2 to 5 of the specification in the package docstring): the
boilerplate tests of a line, the sentence splitter, attributed quotes, and the tokens and matching
rule that compare two sentences. Pure functions on strings; no files, no dates."""

from __future__ import annotations

import re

MIN_LINE_WORDS = 8
MIN_SENTENCE_WORDS = 4
MIN_CONTENT_TOKENS = 5
QUOTE_MIN_FRACTION = 0.6

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


def one_line(text: str) -> str:
    """``text`` with each run of whitespace made one space, stripped."""
    return _WS.sub(" ", text).strip()


def lines_of(text: str) -> list[str]:
    """The lines (paragraphs) of an article's text, each made one line."""
    return [one_line(ln) for ln in text.replace("\r", "\n").split("\n")]


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
    for line in lines_of(text):
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
