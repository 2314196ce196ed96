"""`UserTags`: the user's own tags and favourite marks of a library's files.

They live in their own tables and belong to the file row, so they survive re-indexing, renames and moves. A tag
change rewrites the file's keyword row at once (the text channel's `write_keywords`); re-embedding its sentence
is the caller's (search/tag_editor.py: `TagEditor`), which holds the sentence encoder. Every change is also mirrored
into `user-tags.json` beside the catalog (tag_mirror.py), from which a salvage gets back what a damaged page took.
A tag is one tag whatever its case, spelled as the library first had it (tag_case.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from app.services.library.catalog import id_chunks
from app.services.library.records import LibraryError
from app.services.library.tag_case import MergedTag, TagSpellings, case_variants, first_used, one_spelling, tag_key
from app.services.library.tag_mirror import MIRROR_NAME, MirroredFile, read_mirror, write_mirror

if TYPE_CHECKING:
    from app.services.library.salvage import SalvageReport
    from app.services.library.storage import Catalog
    from app.services.library.text_channel import TextChannel

MAX_TAG_CHARS = 64
TAG_SEPARATOR = ";"  # between tags in the CSV export/import and on the command line
_BAD_TAG = re.compile(r"[\x00-\x1f\x7f;]")


def normalise_tag(tag: str) -> str:
    """A user tag as stored: whitespace collapsed; refused (ValueError, saying why) when empty, too long, or
    containing ';' (the export's separator) or control characters."""
    if not isinstance(tag, str):
        raise ValueError(f"a tag must be text, got {tag!r}")
    t = " ".join(tag.split())
    if not t:
        raise ValueError("empty tag")
    if len(t) > MAX_TAG_CHARS:
        raise ValueError(f"tag {t[:20]!r}… is {len(t)} characters long (at most {MAX_TAG_CHARS})")
    if _BAD_TAG.search(t):
        raise ValueError(f"tag {t!r} contains ';' or a control character")
    return t


class UserTags:
    """The user's tags and favourites of a library (`library.user_tags`): the owner of the `user_tags` and
    `favourites` tables; each edit rewrites the files' keyword rows through `text`."""

    def __init__(self, store: Catalog, text: TextChannel) -> None:
        self.catalog = store
        self.text = text
        self._deferred = 0  # > 0: inside `deferred()`, the mirror is written once at its end
        self._stale = False  # a change not mirrored yet
        self.spellings = TagSpellings()  # the library's spelling of each tag: "door" is added as its "Door"

    # -------------------------------------------------------------------------------------------- editing

    def add(self, file_ids: Sequence[int], tags: Sequence[str]) -> list[int]:
        """Add tags to files (several at once), each in the library's spelling when it has the tag in another
        case; returns the files whose tags changed. Unknown ids: LibraryError."""
        clean = [normalise_tag(t) for t in tags]

        def insert(db: sqlite3.Connection) -> Callable[[int], int]:
            spelled = self.spellings.spell(db, clean, adding=True)
            return lambda fid: sum(
                db.execute("INSERT OR IGNORE INTO user_tags(file_id, tag, added_at) VALUES (?, ?, ?)",
                           (fid, t, time.time())).rowcount for t in spelled)

        return self._edit(file_ids, insert, adding=True)

    def remove(self, file_ids: Sequence[int], tags: Sequence[str]) -> list[int]:
        """Remove tags from files, whatever the case they are given in; returns the files whose tags changed."""
        clean = [" ".join(str(t).split()) for t in tags]

        def delete(db: sqlite3.Connection) -> Callable[[int], int]:
            spelled = self.spellings.spell(db, clean)
            return lambda fid: sum(db.execute("DELETE FROM user_tags WHERE file_id = ? AND tag = ?",
                                              (fid, t)).rowcount for t in spelled)

        return self._edit(file_ids, delete)

    def library_spelling(self, tags: Sequence[str]) -> dict[str, str]:
        """{tag as given: as the library spells it} for the given tags it has in another case (for messages)."""
        out = {}
        with self.catalog.lock:
            spelling = self.spellings.spelling(self.catalog.db)
            for t in tags:
                given = " ".join(t.split())
                if spelling.get(tag_key(given), given) != given:
                    out[t] = spelling[tag_key(given)]
        return out

    def set_favourite(self, file_ids: Sequence[int], on: bool) -> None:
        changed = 0
        with self.catalog.transaction() as db:
            for fid in self._known_ids(db, file_ids):
                if on:
                    changed += db.execute("INSERT OR IGNORE INTO favourites(file_id, added_at) VALUES (?, ?)",
                                          (fid, time.time())).rowcount
                else:
                    changed += db.execute("DELETE FROM favourites WHERE file_id = ?", (fid,)).rowcount
        if changed:
            self.mirror()

    # -------------------------------------------------------------------------------------------- reading

    def of(self, file_id: int) -> list[str]:
        """One file's tags, sorted."""
        return self.of_files([file_id]).get(int(file_id), [])

    def of_files(self, file_ids: Sequence[int]) -> dict[int, list[str]]:
        """file id -> its tags, sorted (files without tags left out)."""
        out: dict[int, list[str]] = {}
        with self.catalog.lock:
            for part, marks in id_chunks(file_ids):
                for fid, tag in self.catalog.db.execute(
                        f"SELECT file_id, tag FROM user_tags WHERE file_id IN ({marks})"
                        " ORDER BY tag COLLATE NOCASE, tag", part):
                    out.setdefault(fid, []).append(tag)
            return {fid: self._one_spelling(tags) for fid, tags in out.items()}

    def favourites(self, file_ids: Sequence[int] | None = None) -> set[int]:
        """The favourite files (among `file_ids`, when given)."""
        db = self.catalog.db
        with self.catalog.lock:
            if file_ids is None:
                return {r[0] for r in db.execute("SELECT file_id FROM favourites")}
            out = set()
            for part, marks in id_chunks(file_ids):
                out.update(r[0] for r in db.execute(f"SELECT file_id FROM favourites WHERE file_id IN ({marks})",
                                                    part))
            return out

    def all(self) -> list[str]:
        """Every tag in use, sorted without regard to case."""
        with self.catalog.lock:
            return self._one_spelling([r[0] for r in self.catalog.db.execute(
                "SELECT DISTINCT tag FROM user_tags ORDER BY tag COLLATE NOCASE")])

    def _one_spelling(self, tags: list[str]) -> list[str]:
        """A read-only catalog an older Earshot wrote may hold a tag in two cases, and cannot be merged on
        opening (merge_case_variants): merged as it is read. (Under the lock.)"""
        if not self.catalog.read_only:
            return tags
        return one_spelling(tags, self.spellings.spelling(self.catalog.db))

    def table(self) -> Iterator[tuple[str, list[str], bool]]:
        """(relative path, tags, favourite) of every file with tags or a favourite mark, by path: the export."""
        for f in self._marked("path"):
            yield f.path, f.tags, f.favourite

    # ---------------------------------------------------------------------------------------------- inside

    def _edit(self, file_ids: Sequence[int], edit_for: Callable[[sqlite3.Connection], Callable[[int], int]],
              adding: bool = False) -> list[int]:
        """One transaction: `edit_for(db)` (spelling the tags once) gives the edit of one file, which returns how
        many rows it changed; keyword rows and the mirror follow."""
        changed = []
        try:
            with self.catalog.transaction() as db:
                ids = self._known_ids(db, file_ids)
                edit = edit_for(db)
                for fid in ids:
                    if edit(fid):
                        self.text.write_keywords(db, fid)
                        changed.append(fid)
                if adding and ids:
                    self.spellings.settle(db)
                elif adding:
                    self.spellings.forget()  # nothing added: what `spell` learnt is not in the catalog
        except BaseException:
            self.spellings.forget()  # rolled back: what it learnt was never written
            raise
        if changed:
            self.mirror()
        return changed

    def _marked(self, order: str) -> list[MirroredFile]:
        """Every file with tags or a favourite mark (id, relative path, tags sorted, mark), by `order` ("id" |
        "path"): what the export and the mirror write."""
        assert order in ("id", "path")
        with self.catalog.lock:
            rows = self.catalog.db.execute(
                "SELECT f.id, f.path, (SELECT group_concat(tag, char(31)) FROM (SELECT tag FROM user_tags u"
                " WHERE u.file_id = f.id ORDER BY tag COLLATE NOCASE, tag)),"
                " EXISTS(SELECT 1 FROM favourites v WHERE v.file_id = f.id)"
                " FROM files f WHERE EXISTS(SELECT 1 FROM user_tags u WHERE u.file_id = f.id)"
                f" OR EXISTS(SELECT 1 FROM favourites v WHERE v.file_id = f.id) ORDER BY f.{order}").fetchall()
            return [MirroredFile(fid, os.fsdecode(bytes(p)), self._one_spelling(tags.split("\x1f") if tags else []),
                                 bool(fav)) for fid, p, tags, fav in rows]

    @staticmethod
    def _known_ids(db: sqlite3.Connection, file_ids: Sequence[int]) -> list[int]:
        ids = list(dict.fromkeys(int(i) for i in file_ids))
        known = set()
        for part, marks in id_chunks(ids):
            known.update(r[0] for r in db.execute(f"SELECT id FROM files WHERE id IN ({marks})", part))
        missing = [i for i in ids if i not in known]
        if missing:
            raise LibraryError(f"no such file in the library: id {', '.join(map(str, missing[:5]))}"
                               f"{' …' if len(missing) > 5 else ''}")
        return ids

    def merge_case_variants(self) -> None:
        """Make each tag that an older Earshot kept in several cases ('Door' and 'door') one tag, spelled as it was
        first used, in one transaction (on opening a catalog that can be written); the user is told what was
        merged (`library.events`). The files' sentence vectors follow on the next index run."""
        with self.catalog.lock:
            variants = case_variants(self.catalog.db)
        if not variants:
            return
        self.spellings.forget()
        try:
            with self.catalog.transaction() as db:
                merged, files = merge_variants(db, variants)
                for fid in files:
                    self.text.write_keywords(db, fid)
        except (LibraryError, sqlite3.Error) as e:  # a full disk, say: rolled back whole, tried on the next open
            self.catalog.events.append(f"tags that differ only in case were left as they are for now ({e})")
            return
        self.mirror()
        self.catalog.events.append("tags that differed only in case are now one tag: "
                                   + "; ".join(str(m) for m in merged))

    # ------------------------------------------------------------------------------------------- the mirror

    @property
    def mirror_path(self) -> Path:
        return self.catalog.catalog_dir / MIRROR_NAME

    def mirror(self) -> None:
        """Write every tag and favourite mark to the mirror (at the end of `deferred()` when inside one). A failed
        write is an event, never a failed edit: the catalog holds the change."""
        if self._deferred:
            self._stale = True
            return
        self._stale = False
        files = self._marked("id")
        if not files and not self.mirror_path.exists():
            return  # never tagged: no file to write
        try:
            write_mirror(self.mirror_path, files)
        except OSError as e:
            self.catalog.events.append(f"could not write {MIRROR_NAME} (the catalog has every change): {e}")

    def mirror_if_missing(self) -> None:
        """Write the mirror of a library tagged before there were mirrors."""
        if self.mirror_path.exists():
            return
        with self.catalog.lock:
            tagged = self.catalog.db.execute("SELECT EXISTS(SELECT 1 FROM user_tags) OR EXISTS(SELECT 1 FROM"
                                             " favourites)").fetchone()[0]
        if tagged:
            self.mirror()

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Many edits, one mirror write (an import of thousands of rows)."""
        self._deferred += 1
        try:
            yield
        finally:
            self._deferred -= 1
            if not self._deferred and self._stale:
                self.mirror()

    def restore(self, report: SalvageReport, reread_reason: str,
                placeholders: Callable[[Sequence[tuple[int, bytes]], str], list[str]]) -> None:
        """After a salvage: put back the tags and favourite marks the mirror has and the catalog lost, matched by
        file id (never reused), else by path; a file with no row left gets one to read again (`placeholders`, the
        file table's, with `reread_reason`). The report counts what came back."""
        try:
            files = read_mirror(self.mirror_path)
        except ValueError as e:
            self.catalog.events.append(f"{MIRROR_NAME}: {e}; nothing restored from it")
            return
        if files is None:
            return
        reread = placeholders([(f.id, os.fsencode(f.path)) for f in files], reread_reason)
        tags = favs = 0
        with self.catalog.transaction() as db:
            for f in files:
                fid = self._row_for(db, f)
                if fid is None:
                    continue
                for tag in f.tags:
                    with contextlib.suppress(ValueError):
                        tags += db.execute("INSERT OR IGNORE INTO user_tags(file_id, tag, added_at) VALUES (?, ?, ?)",
                                           (fid, normalise_tag(tag), time.time())).rowcount
                if f.favourite:
                    favs += db.execute("INSERT OR IGNORE INTO favourites(file_id, added_at) VALUES (?, ?)",
                                       (fid, time.time())).rowcount
        report.restored_from(MIRROR_NAME, "user_tags", sum(len(f.tags) for f in files), tags, reread)
        report.restored_from(MIRROR_NAME, "favourites", sum(f.favourite for f in files), favs)

    @staticmethod
    def fold(db: sqlite3.Connection, named: int, moved: int) -> None:
        """A named row turned out to be a catalogued file that moved (inside the caller's transaction): the tags
        and favourite mark given to the named row meanwhile go to the moved one."""
        db.execute("INSERT OR IGNORE INTO user_tags(file_id, tag, added_at) SELECT ?, tag, added_at FROM user_tags"
                   " WHERE file_id = ?", (moved, named))
        db.execute("INSERT OR IGNORE INTO favourites(file_id, added_at) SELECT ?, added_at FROM favourites"
                   " WHERE file_id = ?", (moved, named))

    @staticmethod
    def _row_for(db: sqlite3.Connection, f: MirroredFile) -> int | None:
        if db.execute("SELECT 1 FROM files WHERE id = ?", (f.id,)).fetchone():
            return f.id
        row = db.execute("SELECT id FROM files WHERE path = ?", (os.fsencode(f.path),)).fetchone()
        return row[0] if row else None


def merge_variants(db: sqlite3.Connection, variants: dict[str, list[str]]) -> tuple[list[MergedTag], set[int]]:
    """Fold each key's spellings into the first used, inside the caller's transaction: a file that held several
    keeps one row, with the earliest time any of them was added. Returns what was merged and the files whose
    tags changed (their keyword rows are the caller's to rewrite)."""
    merged, files = [], set()
    for spellings in variants.values():
        kept = first_used(db, spellings)
        others = [s for s in spellings if s != kept]
        changed = set()
        for other in others:
            for fid, added_at in db.execute("SELECT file_id, added_at FROM user_tags WHERE tag = ?",
                                            (other,)).fetchall():
                db.execute("INSERT OR IGNORE INTO user_tags(file_id, tag, added_at) VALUES (?, ?, ?)",
                           (fid, kept, added_at))
                db.execute("UPDATE user_tags SET added_at = min(added_at, ?) WHERE file_id = ? AND tag = ?",
                           (added_at, fid, kept))
                changed.add(fid)
            db.execute("DELETE FROM user_tags WHERE tag = ?", (other,))
        merged.append(MergedTag(kept, others, len(changed)))
        files |= changed
    return merged, files
