"""One user tag whatever its case: "Door", "door" and "DOOR" are the same tag, spelled as the library first had it.

A sound designer who tagged sounds "Door" and later types "door" means the same tag: seeing both in the tag
list, or removing "door" and still finding "Door" on the file, would be wrong. So a tag's identity is its key
(`tag_key`: Unicode NFC, case folded, as Python compares text without regard to case) and the library keeps one
spelling per key: the one it first had (the earliest `added_at`). `TagSpellings` maps keys to those spellings
for the edits (user_tags.py); `case_variants` finds (and user_tags.py merges) the spellings a catalog made
by an older Earshot holds side by side (done when the library is opened, in one transaction).
"""

from __future__ import annotations

import sqlite3
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def tag_key(tag: str) -> str:
    """What makes two tags one: 'Door', 'door', 'DOOR' (and 'Straße', 'STRASSE') have the same key."""
    return unicodedata.normalize("NFC", tag).casefold()


def split_tags(text: str) -> list[str]:
    """'rain, Window ,, night' -> ['rain', 'Window', 'night']: comma-separated, trimmed, no empties or repeats
    (how the tag dialog and `earshot tags add/remove -t` read what is typed)."""
    return list(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))


def words_generation(db: sqlite3.Connection) -> int:
    """The catalog's words counter, bumped by triggers on every user-tag change (in any process)."""
    return int(db.execute("SELECT value FROM counters WHERE name = 'words'").fetchone()[0])


def first_used(db: sqlite3.Connection, spellings: Sequence[str]) -> str:
    """Of several spellings of one tag, the one the library had first (earliest added; ties by spelling)."""
    marks = ",".join("?" * len(spellings))
    row = db.execute(f"SELECT tag FROM user_tags WHERE tag IN ({marks}) GROUP BY tag ORDER BY min(added_at), tag"
                     " LIMIT 1", list(spellings)).fetchone()
    return row[0] if row else spellings[0]


def case_variants(db: sqlite3.Connection) -> dict[str, list[str]]:
    """Keys the catalog holds in more than one spelling ({} in a catalog this version wrote), each spelling once."""
    by_key: dict[str, list[str]] = {}
    for (tag,) in db.execute("SELECT DISTINCT tag FROM user_tags"):  # the tag index: no table scan
        by_key.setdefault(tag_key(tag), []).append(tag)
    return {k: sorted(v) for k, v in by_key.items() if len(v) > 1}


def library_spellings(db: sqlite3.Connection) -> dict[str, str]:
    """key -> the spelling the library uses for it (the first used, where an older catalog holds several)."""
    spelling = {tag_key(tag): tag for (tag,) in db.execute("SELECT DISTINCT tag FROM user_tags")}
    for key, variants in case_variants(db).items():
        spelling[key] = first_used(db, variants)
    return spelling


def one_spelling(tags: Iterable[str], spelling: dict[str, str]) -> list[str]:
    """`tags` in the library's spellings, each tag once, in their order (reading an older catalog that holds a
    tag in several spellings and cannot be written: merged as it is read)."""
    return list(dict.fromkeys(spelling.get(tag_key(t), t) for t in tags))


class TagSpellings:
    """The library's spelling of each tag, read again when the catalog's words generation moved (another process
    or thread changed tags, or an index run changed names). Use under the library's lock."""

    def __init__(self) -> None:
        self._generation: int | None = None
        self._spelling: dict[str, str] = {}

    def spelling(self, db: sqlite3.Connection) -> dict[str, str]:
        generation = words_generation(db)
        if generation != self._generation:
            self._spelling, self._generation = library_spellings(db), generation
        return self._spelling

    def spell(self, db: sqlite3.Connection, tags: Iterable[str], adding: bool = False) -> list[str]:
        """`tags` as the library spells them: a tag it has in another case takes its spelling; a new one stays
        as given (the first of several spellings given at once: 'Door, door' is 'Door'). Each once. `adding`:
        they are about to be added in the transaction open on `db`: remember them, and `settle` when added."""
        spelling = self.spelling(db)
        out: dict[str, str] = {}
        for t in tags:
            out.setdefault(tag_key(t), spelling.get(tag_key(t), t))
        if adding:
            spelling.update(out)
        return list(dict.fromkeys(out.values()))

    def settle(self, db: sqlite3.Connection) -> None:
        """The tags `spell(adding=True)` gave were added, in the transaction still open on `db`: what is cached is
        the catalog as of now (nothing else can have changed since: the transaction holds the write lock), so a
        10,000-row import does not read every tag again for every row."""
        self._generation = words_generation(db)

    def forget(self) -> None:
        """A transaction that learnt spellings was rolled back: read them again next time."""
        self._generation = None


@dataclass
class MergedTag:
    """One tag an older catalog held in several spellings: kept as `kept`, `merged` folded into it."""

    kept: str
    merged: list[str]
    files: int  # files that held one of the merged spellings

    def __str__(self) -> str:
        others = ", ".join(f"“{m}”" for m in self.merged)
        return f"{others} → “{self.kept}” ({self.files} file{'' if self.files == 1 else 's'})"
