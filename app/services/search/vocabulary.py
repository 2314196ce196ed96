"""Reading a query's words as people mean them, against the words of the library it searches.

Before a query word reaches FTS5: intent words ("a", "the", "sound of") never match on their own; numbers match
as digits and words; compounds are split and joined ("gunshot" -> "gun", "shot"; "black cat" -> "blackcat");
ligatures both ways ("coeur"/"cœur"); typos are corrected to the most frequent library word one edit away
("did you mean"), else read as a prefix; a short library word stands for the longer one it begins. The
library's words (`Vocabulary`) are counted once per generation of its names and kept beside the catalog
(`vocabulary.json`), since counting is linear in the library and a look-up is a few set look-ups per word. Each
rule with its limits and examples: docs/search-fusion.md, "Query words as people mean them".
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from app.services.library.names import NUMBER_WORDS, TENS, number_word
from core.files import atomic_path

# query words that say what kind of query it is ("someone says a number", "the sound of rain"), not what to find
INTENT_WORDS = frozenset("""
a an the of to in on at by for with and or from into
someone somebody something sound sounds sounding noise noises sfx effect effects
says say saying said is are was were be being been it its this that some like
""".split())

_NUMBER_OF = {**{w: str(i) for i, w in enumerate(NUMBER_WORDS)}, **{w: str(n) for n, w in TENS.items()}}
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
LIGATURES = {"œ": "oe", "æ": "ae", "ß": "ss", "ĳ": "ij"}  # what typists write for them
MIN_PART = 3  # a compound's parts have at least this many letters ("gun", "cat")
MIN_TYPO = 5  # words shorter than this are not corrected (too many neighbours one edit away)
MIN_PREFIX = 4  # an unknown word this long also matches as the start of a word ("stadi" -> "stadium")
MAX_ABBREVIATION = 4  # library words this short may abbreviate a longer query word ("res" -> "residential")
MIN_COMPLETED = 3  # a word being typed this long is also looked for as the library words it begins
MAX_COMPLETIONS = 8  # of those, the most frequent
MAX_SCANNED = 5000  # library words read per completion (a short prefix of a 1M-file library)


def number_forms(word: str) -> list[str]:
    """The other forms of a number: '7' -> ['seven'], 'seven' -> ['7']; [] for other words."""
    other = number_word(word) if word.isdigit() else _NUMBER_OF.get(word)
    return [other] if other else []


def ligature_forms(word: str) -> list[str]:
    """The word with its ligatures written out, and with its letter pairs as ligatures ('cœur' <-> 'coeur',
    'straße' <-> 'strasse'): FTS5's tokenizer folds accents but not ligatures. Every such form, not the word."""
    forms = {"".join(LIGATURES.get(c, c) for c in word)}
    forms |= {word.replace(pair, lig) for lig, pair in LIGATURES.items() if pair in word}
    return sorted(forms - {word})


def light_stem(word: str) -> str:
    """Plural and -ing/-ed endings off ("steps" -> "step", "explosions" -> "explosion")."""
    for suffix, keep in (("ies", "y"), ("sses", "ss"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: len(word) - len(suffix)] + keep
    return word


def edits1(word: str) -> set[str]:
    """Every string one deletion, transposition, substitution or insertion away (Damerau-Levenshtein 1)."""
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    deletes = {a + b[1:] for a, b in splits if b}
    transposes = {a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1}
    replaces = {a + c + b[1:] for a, b in splits if b for c in _LETTERS}
    inserts = {a + c + b for a, b in splits for c in _LETTERS}
    return (deletes | transposes | replaces | inserts) - {word}


@dataclass
class Vocabulary:
    """The words of a library's names, folders and tags with how many files use them, and English words (the
    sentence encoder's whole-word tokens) that are never taken for typos."""

    counts: Counter[str] = field(default_factory=Counter)
    english: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        self._sorted: list[str] | None = None  # the words in order, for completions (made on first use)
        self.stems: Counter[str] = Counter()
        for w, c in self.counts.items():
            self.stems[light_stem(w)] += c

    @classmethod
    def of_texts(cls, texts: Iterable[str], english: Iterable[str] = ()) -> Vocabulary:
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(set(re.findall(r"[^\W_]+", text.lower())))
        return cls(counts, english_words(english))

    def has(self, word: str) -> bool:
        """The library uses this word (or another form of it: "steps" for "step")."""
        return word in self.counts or light_stem(word) in self.stems

    def frequency(self, word: str) -> int:
        return self.counts.get(word, 0) + self.stems.get(light_stem(word), 0)

    def split(self, word: str) -> list[str] | None:
        """A word the library lacks as the library or English words it is made of (one library word at least),
        fewest parts first, then the most frequent in the library: 'gunshot' -> ['gun', 'shot'],
        'footsteps' -> ['foot', 'steps']; None when it is a library word or no such split exists."""
        if not word.isalpha() or self.has(word) or len(word) < 2 * MIN_PART:
            return None
        best: dict[int, tuple[int, int, list[str]]] = {0: (0, 0, [])}  # end -> (parts, -frequency, parts)
        for end in range(MIN_PART, len(word) + 1):
            for start in range(0, end - MIN_PART + 1):
                part = word[start:end]
                if start not in best or len(part) == len(word) or not (self.has(part) or part in self.english):
                    continue
                n, f, parts = best[start]
                cand = (n + 1, f - self.frequency(part), [*parts, part])
                if end not in best or cand[:2] < best[end][:2]:
                    best[end] = cand
        found = best.get(len(word))
        if found is None or found[0] < 2 or not any(self.has(p) for p in found[2]):
            return None  # one part at least must be the library's: else the split finds nothing
        return found[2]

    def join(self, first: str, second: str) -> str | None:
        """Two adjacent query words as the one library word they make ('black', 'cat' -> 'blackcat')."""
        joined = first + second
        return joined if joined.isalpha() and joined in self.counts else None

    def abbreviations(self, word: str) -> list[str]:
        """Short library words (3-4 letters, at most half the word) that begin a word the library lacks: the
        abbreviations sound libraries use ('res' for "residential", 'amb' for "ambience")."""
        if not word.isalpha() or self.has(word):
            return []
        return [word[:i] for i in range(MIN_PART, min(MAX_ABBREVIATION, len(word) // 2) + 1) if word[:i] in self.counts]

    def completions(self, prefix: str, limit: int = MAX_COMPLETIONS) -> list[str]:
        """The library's most frequent words that begin with `prefix` (not itself), for a word cut short: FTS5
        stems what it indexes ("explosion" -> "explos"), so the prefix query "explosi*" alone misses it."""
        if len(prefix) < MIN_COMPLETED or not prefix.isalpha():
            return []
        if self._sorted is None:
            self._sorted = sorted(self.counts)
        found = []
        for w in itertools.islice(self._sorted, bisect.bisect_right(self._sorted, prefix), None):
            if not w.startswith(prefix) or len(found) >= MAX_SCANNED:
                break
            found.append(w)
        return sorted(found, key=lambda w: (-self.counts[w], w))[:limit]

    def truncated(self, word: str) -> bool:
        """A word neither the library nor English knows, long enough to be the start of one ("stadi")."""
        return len(word) >= MIN_PREFIX and word.isalpha() and not self.has(word) and word not in self.english

    def correct(self, word: str) -> str | None:
        """The most frequent library word one edit away from a word neither the library nor English knows."""
        if len(word) < MIN_TYPO or not word.isalpha() or self.has(word) or word in self.english \
                or light_stem(word) in self.english:
            return None
        near = [w for w in edits1(word) if w in self.counts or w in self.stems]
        return max(near, key=lambda w: (self.frequency(w), w)) if near else None


def alternatives(words: list[str], vocab: Vocabulary | None, typing: str | None = None
                 ) -> tuple[list[list[str]], dict[str, str]]:
    """For each content word (intent words dropped), the words to look for, itself first (a trailing '*': as a
    prefix); and the corrections. `typing`: the last word, still being typed: the library words it begins are
    looked for too, and it is not "corrected" while it begins one ("explo" is not a typo of "expl")."""
    content = [w.lower() for w in words if w.lower() not in INTENT_WORDS]
    out: list[list[str]] = []
    fixes: dict[str, str] = {}
    for i, w in enumerate(content):
        alts = [w, *number_forms(w)]
        completed = vocab.completions(w) if vocab is not None and typing == w and i == len(content) - 1 else []
        spelled = [f for f in ligature_forms(w) if vocab is not None and f in vocab.counts]  # 'coeur' for 'cœur'
        alts += completed + spelled
        if vocab is not None:
            fix = None if completed or spelled else vocab.correct(w)
            if fix:
                fixes[w] = fix
                alts.append(fix)
            alts += vocab.split(fix or w) or []
            if fix is None and not spelled and vocab.truncated(w):  # cut short ("stadi"): the words it begins
                alts += [w + "*", *(completed or vocab.completions(w))]
            if fix is None:
                alts += vocab.abbreviations(w)
            if i + 1 < len(content):
                alts += [j for j in [vocab.join(w, content[i + 1])] if j]
        out.append(list(dict.fromkeys(alts)))
    return out, fixes


def english_words(words: Iterable[str]) -> frozenset[str]:
    return frozenset(w for w in words if w.isalpha())


def cached_counts(path: Path, generation: str, texts: Callable[[], Iterable[str]], write: bool = True
                  ) -> Counter[str]:
    """The word counts of the library's texts at `generation`: from `path` when it holds that generation, else
    counted from `texts()` and written there (atomically; not when `write` is False: a read-only library)."""
    try:  # anything odd in the file (other types, numbers too large, nesting too deep): counted again
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc["generation"] == generation:
            return Counter({str(w): int(c) for w, c in doc["counts"].items()})
    except Exception:
        pass
    counts: Counter[str] = Counter()
    for text in texts():
        counts.update(set(re.findall(r"[^\W_]+", text.lower())))
    if write:
        with contextlib.suppress(OSError), atomic_path(path) as tmp:
            tmp.write_text(json.dumps({"generation": generation, "counts": counts}), encoding="utf-8")
    return counts
