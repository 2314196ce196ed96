"""Search query syntax, as in Soundminer and Sononym: `-word` excludes, `"exact phrase"`, `word*` prefix, plain words.

Plain words and prefixes rank; a quoted phrase and an exclusion are conditions, in every mode. `parse(text) ->
Query` never fails. `Query.fts_match()` quotes every word, so no input is an FTS5 syntax error or operator
(`NEAR`, `column:`); `Query.free_text` is what the encoders read. Plain words are then read as people mean them
(app/services/search/vocabulary.py; docs/search-fusion.md).

    >>> q = parse('creak -metal "wooden door" foot*')
    >>> q.fts_match(), q.fts_exclude(), q.fts_require(), q.free_text
    ('"creak" OR "wooden door" OR "foot"*', '"metal"', '"wooden door"', 'creak wooden door foot')
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field, replace

from app.services.search.vocabulary import INTENT_WORDS, Vocabulary, alternatives

Reading = tuple[list[list[str]], dict[str, str]]  # vocabulary.alternatives: words to look for, corrections

# a token: optional '-', then a quoted phrase (closing quote optional) or a run of non-space characters
_TOKEN = re.compile(r'(-?)"([^"]*)"?|(-?)(\S+)')
_HAS_WORD = re.compile(r"[^\W_]")  # at least one letter or digit (any script)
MAX_QUERY_CHARS = 1000  # a pasted novel is cut, not refused (and the user told: Query.shortened_from)
# control characters (FTS5 ends a string at NUL) and lone surrogates (undecodable command-line bytes, which
# SQLite cannot be given) separate words, as a space would
_NOT_TEXT = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


@dataclass
class Query:
    raw: str
    words: list[str] = field(default_factory=list)  # plain words
    phrases: list[str] = field(default_factory=list)  # "exact phrase"
    prefixes: list[str] = field(default_factory=list)  # word* (without the star)
    excluded: list[str] = field(default_factory=list)  # -word or -"phrase"
    positive: list[str] = field(default_factory=list)  # words, phrases and prefixes in the order typed
    shortened_from: int | None = None  # the length typed, when it was over MAX_QUERY_CHARS and cut to that
    open_phrase: bool = False  # the last phrase's closing quote is not typed (yet)
    # the last reading of the words against a vocabulary: (vocabulary, word being typed, (groups, fixes))
    _reading: tuple[Vocabulary | None, str | None, Reading] | None = field(default=None, repr=False, compare=False)

    @property
    def free_text(self) -> str:
        """The positive words in the order typed: what the sound and semantic channels embed."""
        return " ".join(self.positive)

    @property
    def empty(self) -> bool:
        return not self.positive

    @property
    def terms(self) -> list[str]:
        """Single words to look for when highlighting (phrases split into their words)."""
        out = [w for p in self.words + self.phrases + self.prefixes for w in re.findall(r"[^\W_]+", p.lower())]
        return list(dict.fromkeys(out))

    def fts_parts(self, vocab: Vocabulary | None = None, prefix_last: bool = False) -> list[str]:
        """One FTS5 part per positive content word (its other forms OR-ed in: see vocabulary.py), phrase and
        prefix (with its '*'). `prefix_last`: the last word, when plain, also matches as a prefix (the word being
        typed: "hors" finds "horse")."""
        last = self.typed_last(prefix_last)
        groups, _ = self.read(vocab, last)
        parts = []
        for group in groups:
            alts = [quote(a[:-1]) + "*" if a.endswith("*") else quote(a) for a in group]
            if last is not None and group[0] == last and last.isalpha() and last not in INTENT_WORDS:
                alts.append(quote(last) + "*")
            alts = list(dict.fromkeys(alts))
            parts.append(alts[0] if len(alts) == 1 else "(" + " OR ".join(alts) + ")")
        return parts + self._phrase_parts(prefix_last) + [quote(p) + "*" for p in self.prefixes]

    def _phrase_parts(self, prefix_last: bool) -> list[str]:
        """Each phrase as an FTS5 string; one still open at the end being typed ends in a prefix ("gate sl"*)."""
        parts = [quote(p) for p in self.phrases]
        if prefix_last and self.open_phrase and parts:
            parts[-1] += "*"
        return parts

    def read(self, vocab: Vocabulary | None, last: str | None) -> Reading:
        """vocabulary.alternatives of the plain words, computed once per vocabulary (a search asks for both the
        FTS5 parts and the corrected query)."""
        if self._reading is None or self._reading[0] is not vocab or self._reading[1] != last:
            self._reading = (vocab, last, alternatives(self.words, vocab, typing=last))
        return self._reading[2]

    def typed_last(self, prefix_last: bool) -> str | None:
        """The last word when it may still be being typed (`prefix_last` and a plain word last), else None."""
        return self.positive[-1].lower() if prefix_last and self.positive and self.positive[-1] in self.words \
            else None

    def corrected(self, vocab: Vocabulary | None, prefix_last: bool = False) -> Query | None:
        """The query with its typos corrected against the library's words (`raw`: as typed, the words fixed); None
        when none was. `prefix_last`: the last word is being typed, and is not corrected while it begins a library
        word. Derived from this reading, not parsed again."""
        _, fixes = self.read(vocab, self.typed_last(prefix_last))
        if not fixes:
            return None

        def fix(text: str) -> str:
            return re.sub(r"[^\W_]+", lambda m: fixes.get(m.group().lower(), m.group()), text).strip()

        return replace(self, raw=fix(self.raw), words=[fix(w) for w in self.words],
                       phrases=[fix(p) for p in self.phrases], prefixes=[fix(p) for p in self.prefixes],
                       positive=[fix(p) for p in self.positive], _reading=None)

    def fts_match(self) -> str | None:
        """FTS5 expression for the positive parts (OR-ed), or None when there are none."""
        return " OR ".join(self.fts_parts()) or None

    def fts_exclude(self) -> str | None:
        """FTS5 expression matching any excluded word or phrase, or None."""
        return " OR ".join(quote(x) for x in self.excluded) or None

    @property
    def required_phrases(self) -> list[str]:
        """The quoted phrases, each once: every result holds them all."""
        return list(dict.fromkeys(self.phrases))

    def fts_require(self, prefix_last: bool = False) -> str | None:
        """FTS5 expression matching the files that hold every quoted phrase, or None when none was typed.
        `prefix_last`: a phrase still open at the end is being typed, so its last word may be cut short."""
        return " AND ".join(dict.fromkeys(self._phrase_parts(prefix_last))) or None


def quote(text: str) -> str:
    """An FTS5 string: in double quotes, inner quotes doubled; FTS5 then tokenises it as a phrase."""
    return '"' + text.replace('"', '""') + '"'


def parse(text: str) -> Query:
    """Split a query into words, "phrases", prefix* and -exclusions. Tokens without a letter or digit (a lone
    '-', '*' or quote, punctuation) are dropped; a stray quote opens a phrase to the end; control characters
    are spaces; over MAX_QUERY_CHARS, only the first are read (`shortened_from` says so). The text is NFKC-
    normalised first, as names are read: fullwidth ｈａｕｎｔｅｄ (an East Asian keyboard's) finds "haunted", and
    a fullwidth '－' or '＂' is the syntax it looks like."""
    text = text or ""
    q = Query(unicodedata.normalize("NFKC", _NOT_TEXT.sub(" ", text[:MAX_QUERY_CHARS])),
              shortened_from=len(text) if len(text) > MAX_QUERY_CHARS else None)
    text = q.raw
    for m in _TOKEN.finditer(text):
        if m.group(2) is not None:  # "phrase" or -"phrase"
            neg, body, quoted = m.group(1), " ".join(m.group(2).split()), True
        else:
            neg, body, quoted = m.group(3), m.group(4), False
        if not _HAS_WORD.search(body):
            continue
        if neg:
            q.excluded.append(body.rstrip("*") if not quoted else body)
        elif quoted:
            q.phrases.append(body)
            q.positive.append(body)
            q.open_phrase = not m.group(0).endswith('"')  # `"door` (a lone `"` has no words: dropped above)
        elif body.endswith("*"):
            stem = body.rstrip("*")
            if _HAS_WORD.search(stem):
                q.prefixes.append(stem)
                q.positive.append(stem)
        else:
            q.words.append(body)
            q.positive.append(body)
    return q
