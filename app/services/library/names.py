"""What a file's path says: folder and file-name words, with UCS CatIDs expanded and take numbers dropped.

Sound libraries carry their meaning in names (`Animals/Birds/lark.ogg`, `DOORWood_Creak Slow_01.wav`). The name
words are split at every boundary people use (`snake_case`, `camelCase`, `kebab-case`, letters/digits, any
script: `\\w` is Unicode-aware), lowercased; take and version numbers (`_01`, `v2`) and hash-like tokens
(`a3f9c1e2`, long digit runs) are dropped because they say nothing, unless the name is only a number
(`Numbers/7.ogg`: "7 seven"). A UCS CatID (the Universal Category System,
`data/ucs_categories.csv`) at the start of a name or as a folder name adds its category and subcategory words,
so `DOORWood_...` is found by "wooden door" and "doors".

`word_spans` gives the same words with their character offsets in the original string: the search results
highlight matched words in the name as the user sees it.
"""

from __future__ import annotations

import csv
import difflib
import functools
import re
from dataclasses import dataclass
from pathlib import Path

NUMBER_WORDS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
                "sixteen seventeen eighteen nineteen twenty").split()
TENS = {30: "thirty", 40: "forty", 50: "fifty", 60: "sixty", 70: "seventy", 80: "eighty", 90: "ninety",
        100: "hundred"}


def number_word(token: str) -> str | None:
    """'7' -> 'seven', '07' -> 'seven', '40' -> 'forty'; None for other tokens."""
    if not token.isdigit():
        return None
    n = int(token)
    return NUMBER_WORDS[n] if n < len(NUMBER_WORDS) else TENS.get(n)


UCS_FILE = Path(__file__).parent / "data" / "ucs_categories.csv"

_WORD = re.compile(r"[^\W_]+")  # letters and digits of any script; '_' and punctuation separate
# inside a word: lower->Upper (camelCase), UPPER->Upperlower (DOORWood -> DOOR|Wood), letter<->digit
_CAMEL = re.compile(r"(?<=[^\W\d_])(?=\d)|(?<=\d)(?=[^\W\d_])|(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_HEX = re.compile(r"[0-9a-f]{8,}")
_TAKE = re.compile(r"(v|take|tk|t|var|version)?(\d{1,2}|0\d+)")  # take/version numbers: 01, 3, v2, take12, 007


# What recorders, phones and DAWs name their files and session folders by (device, date, take): such names say
# nothing of the sound, like hash names, so they are silent (issue 38: "ZOOM" matched "camera", "field day" "rain")
_RECORDED_FILE = re.compile(r"(zoom|rec|dr|tascam|ste|audio|take|memo|new recording|recording)"
                            r"([ _-]?\d+([ _-]\d+)*|[ _-](?=[0-9a-f]*\d)[0-9a-f]{4,})"  # REC_0001, REC_1A2B3C4D
                            r"|\d{6}[ _-]\d{3,4}|\d{8}[ _-]?\d{4,6}", re.I)
_DATE = re.compile(r"(?<!\d)(\d{4}[-_.]?\d{2}[-_.]?\d{2}|\d{2}[-_.]\d{2}[-_.]\d{4})(?!\d)")
_DEVICE = re.compile(r"\b(zoom[ _-]?[hf]\d+n?|h[1-6]n|tascam|dr[ _-]?\d{2,3}|mixpre|olympus[ _-]?ls|pcm[ _-]?"
                     r"[a-z]?\d+)\b", re.I)
_RECORDER_FOLDERS = {"my recordings", "recordings", "voice memos", "voice recorder", "recorder", "audio recordings"}


def recorder_named(part: str, folder: bool = False) -> bool:
    """A file stem (or, `folder`, a folder name) that a recorder, phone or DAW gave: `REC_0001`, `ZOOM0003`,
    `230518_001`, `Audio 01`; folders holding a date or a recorder model, or called "My Recordings"."""
    text = part.strip()
    if _RECORDED_FILE.fullmatch(text):
        return True
    return folder and (bool(_DATE.search(text)) or bool(_DEVICE.search(text))
                       or " ".join(split_words(text)) in _RECORDER_FOLDERS)


# Abbreviations sample libraries and game packs write in file names, read as what they stand for (issue 38, class
# 3: "kick drum" found PowR_BD_1 at rank 93). The token stays (typing "CHH" finds CHH_1); its words are added.
# Two-letter ones count only in capitals as written ("BD", "CR"): "rd" or "cr" in lower case may be anything.
ABBREVIATIONS = {
    "bd": "bass drum kick", "kd": "kick drum", "kik": "kick drum", "kck": "kick drum", "sd": "snare drum",
    "sn": "snare drum", "snr": "snare drum", "hh": "hi hat", "chh": "closed hi hat", "ohh": "open hi hat",
    "phh": "pedal hi hat", "cr": "crash cymbal", "crsh": "crash cymbal", "rd": "ride cymbal", "cym": "cymbal",
    "clp": "clap", "perc": "percussion", "fx": "effects", "sfx": "sound effects", "amb": "ambience",
    "vox": "vocal voice", "gtr": "guitar", "pno": "piano", "m16": "automatic rifle gun", "ak47": "assault rifle gun",
    "m60": "machine gun", "uzi": "submachine gun", "mp5": "submachine gun",
}
_CAPITALS_ONLY = {abbr for abbr in ABBREVIATIONS if len(abbr) <= 2}


def expansion(token: str) -> list[str]:
    """The words an abbreviation as written stands for ("BD" -> bass drum kick); [] for other tokens."""
    key = token.lower()
    if key not in ABBREVIATIONS or (key in _CAPITALS_ONLY and not token.isupper()):
        return []
    return ABBREVIATIONS[key].split()


@dataclass(frozen=True)
class UcsEntry:
    cat_id: str
    category: str
    subcategory: str

    @property
    def words(self) -> list[str]:
        """'DOORS', 'WOOD' -> ['doors', 'wood']; '&' and 'MISC' (says nothing) left out."""
        text = f"{self.category} {self.subcategory}".lower().replace("&", " ")
        return [w for w in _WORD.findall(text) if w != "misc"]


@functools.cache
def ucs_table() -> dict[str, UcsEntry]:
    """CatID (as written) -> entry, from the committed UCS list."""
    table: dict[str, UcsEntry] = {}
    with open(UCS_FILE, encoding="utf-8", newline="") as f:
        rows = csv.reader(line for line in f if not line.startswith("#"))
        next(rows)  # header
        for cat_id, category, sub in rows:
            table[cat_id] = UcsEntry(cat_id, category, sub)
    return table


@functools.cache
def ucs_categories() -> tuple[str, ...]:
    """The UCS categories' names, sorted ('AIR', 'AIRCRAFT', ..., 'DIRT & SAND', ...)."""
    return tuple(sorted({e.category for e in ucs_table().values()}))


def ucs_category(text: str) -> str:
    """A UCS category as the user typed it ('doors', 'Dirt and sand') -> its name ('DOORS'); ValueError naming
    the closest ones when there is none."""
    want = " ".join(text.upper().replace(" AND ", " & ").split())
    if want in ucs_categories():
        return want
    close = difflib.get_close_matches(want, ucs_categories(), n=3, cutoff=0.5)
    raise ValueError(f"{text!r} is not a UCS category; " + (f"did you mean {', '.join(close)}?" if close else
                                                           f"they are {', '.join(ucs_categories())}"))


@functools.cache
def _ucs_folded() -> dict[str, UcsEntry]:
    return {k.lower(): v for k, v in ucs_table().items()}


def ucs_entry(token: str) -> UcsEntry | None:
    """The UCS entry of a CatID: as written, or in another case when the token mixes cases and has 5+ letters
    ('DoorWood'), so that ordinary words such as 'rain', 'Rain' or 'mix' are not taken for CatIDs."""
    table = ucs_table()
    if token in table:
        return table[token]
    mixed = not token.islower() and not token.isupper() and not token.istitle()
    return _ucs_folded().get(token.lower()) if len(token) >= 5 and mixed else None


def split_words(text: str) -> list[str]:
    """Words of a name: split at separators, camelCase, letter/digit boundaries; lowercased. Nothing dropped."""
    out = []
    for chunk in _WORD.findall(text):
        out.extend(p.lower() for p in _CAMEL.split(chunk) if p)
    return out


def meaningless(word: str) -> bool:
    """Take/version numbers and hash-like tokens: they tell nothing about the sound."""
    if _TAKE.fullmatch(word):
        return True
    if _HEX.fullmatch(word) and any(c.isdigit() for c in word):
        return True
    return word.isdigit() and len(word) >= 6


def name_words(stem: str) -> list[str]:
    """Words of a file name without its extension, UCS CatID expanded, meaningless tokens dropped; none for a
    name a recorder gave."""
    if recorder_named(stem):
        return []
    words = []
    first = re.split(r"[_\s.-]", stem, maxsplit=1)[0]
    entry = ucs_entry(first)
    if entry is not None:
        words.extend(entry.words)
    for chunk in _WORD.findall(stem):
        # a hash or a hex id is one chunk: judge it whole before camelCase splitting cuts it into pieces
        if meaningless(chunk.lower()):
            continue
        words.extend(w for w in split_words(chunk) if not meaningless(w))
        words.extend(expansion(chunk) or [w for part in _CAMEL.split(chunk) if part for w in expansion(part)])
    if not words and stem.strip().isdigit() and number_word(stem.strip()):  # only a number: 7 -> "7 seven"
        words = [str(int(stem.strip())), number_word(stem.strip())]
    return dedupe(words)


def folder_words(rel_folder: str) -> list[str]:
    """Words of the folders a file is in (every level), CatID folders expanded; a recorder's session folder
    ("ZOOM H5 2024-05-18 field day", "My Recordings") says nothing."""
    words = []
    for part in rel_folder.split("/"):
        if not part or recorder_named(part, folder=True):
            continue
        entry = ucs_entry(part)
        if entry is not None:
            words.extend(entry.words)
        words.extend(name_words(part))
    return dedupe(words)


def dedupe(words: list[str]) -> list[str]:
    return list(dict.fromkeys(words))


def word_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, lowercased word) of each word in `text`, split like `split_words`."""
    spans = []
    for m in _WORD.finditer(text):
        start, chunk = m.start(), m.group()
        pos = 0
        for part in _CAMEL.split(chunk):
            if part:
                spans.append((start + pos, start + pos + len(part), part.lower()))
                pos += len(part)
    return spans


def stem(word: str) -> str:
    """A light English stemmer for highlighting (FTS5's porter stemmer does the searching): plural and
    -ing/-ed endings, so that "doors", "creaking" and "creaked" highlight "door" and "creak"."""
    w = word.lower()
    for suffix, keep in (("ies", "y"), ("sses", "ss"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            return w[: len(w) - len(suffix)] + keep
    return w
