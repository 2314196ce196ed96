"""Words that mean the same sound: UCS's subcategories and synonyms (21 languages) and the user's own list.

UCS lists, for each of its 752 subcategories, synonyms in 21 languages (ucs_thesaurus.tsv, written by
tools/ucs_thesaurus.py; CC0, credit in that file). A subcategory's head words (its name: "crow", "porte") and its
synonyms ("raven", "cawing", "corbeau") are each other's neighbours, in either direction, so a query word and a
name word are read alike on both sides: "raven" finds `crow.wav`, "door" finds `porte_grince.wav`. Only specific
words take part: one that heads or fills more than MAX_GROUPS subcategories ("metal", "car", "ambience") says
too little to stand for another. The user's synonyms file (SYNONYMS_FILE: one group per line, comma-separated,
`kick, bd, bassdrum`) adds groups of their own, always read and weighed fully. Keys are inflection keys
(keywords.inflection_key), so "ravens" and "cawed" read as "raven" and "caw".
"""

from __future__ import annotations

import functools
import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from platformdirs import user_config_dir

from app.services.search.keywords import inflection_key

UCS_FILE = Path(__file__).resolve().parents[1] / "library" / "data" / "ucs_thesaurus.tsv"
SYNONYMS_FILE = "synonyms.txt"  # in the user's config folder (user_config_dir("earshot")), or $EARSHOT_SYNONYMS
MAX_GROUPS = 3  # a word in more UCS subcategories than this is too general to stand for another
UCS_WEIGHT = 0.5  # a UCS neighbour counts this much of the word itself; the user's own synonyms count fully


@dataclass(frozen=True)
class Thesaurus:
    """inflection key -> {neighbour key: weight}."""

    neighbours: dict[str, dict[str, float]] = field(default_factory=dict)

    def of(self, word: str) -> dict[str, float]:
        return self.neighbours.get(inflection_key(word), {})


def ucs_rows(path: Path = UCS_FILE) -> list[tuple[str, list[str], list[str]]]:
    """(CatID, head keys, synonym keys) of each UCS subcategory in the thesaurus file."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith(("#", "CatID\t")):
                continue
            cat, head, syns = (line.rstrip("\n").split("\t") + ["", ""])[:3]
            out.append((cat, [inflection_key(w) for w in head.split()], [inflection_key(w) for w in syns.split()]))
    return out


def ucs_groups(path: Path = UCS_FILE) -> list[tuple[list[str], list[str]]]:
    """(head keys, synonym keys) of each UCS subcategory."""
    return [(head, syns) for _, head, syns in ucs_rows(path)]


def user_groups(path: Path | None) -> list[list[str]]:
    """The user's synonym groups: one line each, comma-separated single words ('#' starts a comment); a file
    that is missing or unreadable gives none."""
    if path is None:
        return []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    groups = []
    for line in text.splitlines():
        terms = [t.strip().lower() for t in line.split("#", 1)[0].split(",")]
        keys = [inflection_key(t) for t in terms if t and " " not in t]
        if len(keys) >= 2:
            groups.append(keys)
    return groups


def build(ucs: Iterable[tuple[list[str], list[str]]], own: Iterable[list[str]] = ()) -> Thesaurus:
    """The neighbours of every specific word: heads <-> synonyms within a UCS subcategory (UCS_WEIGHT), and
    every pair within one of the user's groups (1.0)."""
    ucs = list(ucs)
    groups_of: dict[str, int] = defaultdict(int)
    for heads, syns in ucs:
        for w in set(heads) | set(syns):
            groups_of[w] += 1
    table: dict[str, dict[str, float]] = defaultdict(dict)
    for heads, syns in ucs:
        heads = [h for h in dict.fromkeys(heads) if groups_of[h] <= MAX_GROUPS]
        syns = [s for s in dict.fromkeys(syns) if groups_of[s] <= MAX_GROUPS]
        for h in heads:
            for s in [*heads, *syns]:
                if s != h:
                    table[h].setdefault(s, UCS_WEIGHT)
                    table[s].setdefault(h, UCS_WEIGHT)
    for keys in own:
        for a in keys:
            for b in keys:
                if a != b:
                    table[a][b] = 1.0
    return Thesaurus(dict(table))


def user_file() -> Path:
    env = os.environ.get("EARSHOT_SYNONYMS")
    return Path(env) if env else Path(user_config_dir("earshot", appauthor=False)) / SYNONYMS_FILE


@functools.cache
def _ucs() -> tuple[tuple[list[str], list[str]], ...]:
    return tuple(ucs_groups())


def load(own: Path | None = None) -> Thesaurus:
    """UCS and the user's synonyms file (`own`, default user_file()), built again only when that file changes
    (the user may have just edited it)."""
    path = own if own is not None else user_file()
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        stamp = None
    return _built(str(path), stamp)


@functools.lru_cache(maxsize=4)
def _built(path: str, stamp: int | None) -> Thesaurus:
    return build(_ucs(), user_groups(Path(path)) if stamp is not None else [])
