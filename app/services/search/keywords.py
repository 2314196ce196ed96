"""Which query words a file really holds, and how much each says: the names channel's keyword evidence, 0..1.

FTS5 finds the candidates (porter stems, compound parts, prefixes: a wide net, fast). This module then reads
each candidate's own words and counts a query word only where the file holds that word: as written, as one of
its inflections (plural, -ing, -ed: `inflection_key`), its other spellings (number, ligature, typo fixed, the
library word it makes with the next query word), or, for a compound the library splits ("gunshot"), every one
of its parts. A word that merely shares a stem or a substring is not a match: "waterfall" is not "fall",
"explosive" is not "explosion" (issue 38). Which of two homographs a name means ("crowing" and the bird
`crow.ogg`) is the sentence cosine's call: keywords are a bounded boost beside it (fusion.names_score).

Where a word is found weighs too: the file's own name and the user's tags fully, its tags and folders less,
and a folder or tag word shared by many files less again, by how specific it is (`cats/` lifts no tiger); a
synonym (thesaurus.py) by its weight.
    query_readings(query, vocabulary) -> [WordReading]    one per content word of the query
    strengths(readings, rows, frequency, files) -> {file id: 0..1}
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from app.services.library.names import split_words

if TYPE_CHECKING:
    from app.services.search.query import Query
    from app.services.search.vocabulary import Vocabulary

NAME, FOLDER, TAGS, USER_TAGS = range(4)  # the columns of TextChannel.keyword_fields, in order
FIELD_WEIGHTS = (1.0, 0.5, 0.6, 1.0)  # a word in the name says most; a folder word is shared by its neighbours
SHARED_FIELDS = (FOLDER, TAGS)  # fields whose words many files share: weighed by how specific the word is
MIN_SPECIFIC = 0.1  # a folder word every file holds still says a little
_SEPARATORS = re.compile(r"[\W_]+")


@dataclass(frozen=True)
class WordReading:
    """One query word as the files may hold it."""

    word: str
    forms: frozenset[str]  # inflection keys; any one of them found in a file counts
    prefixes: tuple[str, ...] = ()  # the word cut short or being typed: a file word beginning so counts
    parts: tuple[str, ...] = ()  # the compound's parts (keys): count only when the file holds every one
    synonyms: Mapping[str, float] = field(default_factory=dict)  # thesaurus.py: key -> how much it counts


def singular(word: str) -> str:
    """A plural's singular ("bubbles" -> "bubble", "glasses" -> "glass", "flies" -> "fly")."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith(("sses", "ches", "shes", "xes", "zes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


@functools.lru_cache(maxsize=1 << 16)
def inflection_key(word: str) -> str:
    """One key for a word's inflections, and only theirs: plural, -ing and -ed ("bubbles", "bubbling" and
    "bubble" -> "bubbl"; "slamming" -> "slam"; "creaked" -> "creak"). Unlike a stemmer it never cuts other
    suffixes, and never a compound's part: "waterfall" keeps its key, and "fall" is another word. What is left
    must hold a vowel ("string" is not "str" + "ing"; "speed" is not "spe" + "ed")."""
    w = singular(word.lower())
    for suffix in ("ing", "ed"):
        rest = w[: -len(suffix)]
        if w.endswith(suffix) and len(rest) >= 3 and any(c in "aeiouy" for c in rest) \
                and not (suffix == "ed" and rest.endswith("e")):
            w = rest[:-1] if len(rest) > 3 and rest[-1] == rest[-2] and rest[-1] not in "lsz" else rest
            break
    return w[:-1] if len(w) > 3 and w.endswith("e") else w


def query_readings(query: Query, vocab: Vocabulary | None, prefix_last: bool = False,
                   synonyms_of: Callable[[str], Mapping[str, float]] | None = None) -> list[WordReading]:
    """The readings of a query's plain words (as the FTS5 parts read them, with their synonyms: key -> weight,
    thesaurus.Thesaurus.of), its phrases' words and its prefixes."""
    last = query.typed_last(prefix_last)
    groups, fixes = query.read(vocab, last)
    split_of = vocab.split if vocab is not None else (lambda _w: None)
    out = readings(groups, lambda w: split_of(fixes.get(w, w)), last)
    if synonyms_of is not None:
        out = [replace(r, synonyms={k: v for k, v in synonyms_of(fixes.get(r.word, r.word)).items()
                                    if k not in r.forms}) for r in out]
    phrase_words = {inflection_key(w) for p in query.phrases for w in split_words(p)}
    out += [WordReading(w, frozenset({w})) for w in sorted(phrase_words)]
    return out + [WordReading(p, frozenset(), (p.lower(),)) for p in query.prefixes]


def readings(groups: Sequence[Sequence[str]], split_of: Callable[[str], Sequence[str] | None],
             typing: str | None = None) -> list[WordReading]:
    """One reading per query word from its FTS5 alternatives (vocabulary.alternatives: the word first; a
    trailing '*' marks a prefix). `split_of(word)`: the compound parts the vocabulary split it into, if any;
    `typing`: the word being typed, which also counts as a prefix."""
    out = []
    for group in groups:
        word = group[0].rstrip("*")
        parts = {inflection_key(p) for p in (split_of(word) or [])}
        prefixes = [a[:-1] for a in group if a.endswith("*")] + ([word] if word == typing else [])
        forms = frozenset(inflection_key(a) for a in group
                          if (not a.endswith("*") and inflection_key(a) not in parts) or a == word)
        out.append(WordReading(word, forms, tuple(dict.fromkeys(prefixes)), tuple(sorted(parts))))
    return out


@functools.lru_cache(maxsize=1 << 14)  # folder and tag texts repeat across files and queries
def field_words(text: str) -> frozenset[str]:
    """A field's words as inflection keys, with each pair of neighbours joined ("foot step" holds "footstep")."""
    words = [inflection_key(w) for w in split_words(text)]
    return frozenset((*words, *(a + b for a, b in zip(words, words[1:], strict=False))))


def found_in(reading: WordReading, words: frozenset[str]) -> tuple[str, float] | None:
    """The file word by which `words` holds the reading and how much it counts (1: the word itself; less: a
    synonym), or None."""
    for form in reading.forms:
        if form in words:
            return form, 1.0
    for prefix in reading.prefixes:
        hit = next((w for w in words if w.startswith(prefix)), None)
        if hit is not None:
            return hit, 1.0
    if reading.parts and all(p in words for p in reading.parts):
        return max(reading.parts, key=len), 1.0
    best = max(((w, reading.synonyms[w]) for w in words & reading.synonyms.keys()), key=lambda x: x[1],
               default=None)
    return best


def specificity(df: int, files: int) -> float:
    """How much a word shared by `df` of `files` files tells them apart: 1 for one file, MIN_SPECIFIC for all."""
    if files <= 1 or df <= 1:
        return 1.0
    return max(MIN_SPECIFIC, 1.0 - math.log(df) / math.log(files))


def strength(reading: WordReading, fields: Sequence[frozenset[str]], frequency: Callable[[str], int], files: int
             ) -> float:
    """How strongly one file's fields hold one query word, 0..1: its best field's weight, shared fields
    weighed by the word's specificity."""
    best = 0.0
    for i, words in enumerate(fields):
        if FIELD_WEIGHTS[i] <= best:
            continue
        hit = found_in(reading, words)
        if hit is not None:
            weight = FIELD_WEIGHTS[i] * hit[1]
            if i in SHARED_FIELDS:
                weight *= specificity(frequency(hit[0]), files)
            best = max(best, weight)
    return best


def strengths(reading_list: Sequence[WordReading], rows: Mapping[int, Sequence[str]],
              frequency: Callable[[str], int], files: int) -> dict[int, float]:
    """file id -> the mean strength of the query's words in that file's keyword row (TextChannel.keyword_fields),
    0..1; every file of `rows` is listed (0: it holds none of them). A row none of whose text could hold a
    reading (`needles`, one regular expression search) is not split into words: most candidates are not."""
    out = {fid: 0.0 for fid in rows}
    could = needles(reading_list)
    if could is None:  # no reading has a word to look for: no row can hold one
        return out
    for fid, row in rows.items():
        text = " ".join(row).lower()
        if could.search(text) or could.search(_SEPARATORS.sub("", text)):  # "foot_step"
            fields = [field_words(text) if text else frozenset() for text in row]
            out[fid] = sum(strength(r, fields, frequency, files) for r in reading_list) / len(reading_list)
    return out


def needles(reading_list: Sequence[WordReading]) -> re.Pattern[str] | None:
    """A pattern found in the lower-cased text of every row that holds one of the readings (each key, cut
    before the letters an inflection may change: "fly" is in "flies" as "fl"); None when the readings have
    no key to look for."""
    keys = {k for r in reading_list for k in (*r.forms, *r.prefixes, *r.parts, *r.synonyms)}
    cut = sorted({k[:-1] if len(k) > 2 and k[-1] in "ye" else k for k in keys if k}, key=len, reverse=True)
    return re.compile("|".join(map(re.escape, cut))) if cut else None
