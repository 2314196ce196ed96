"""Rebuilding a damaged catalog from every row that still reads and checks out, and saying what was lost.

Rows are read through SQL (stepping over damaged pages), off the pages themselves (pages.py), and through the
indexes that hold a second copy of them. The damaged file is kept beside the new one. What a salvage kept, set
aside and lost is a `SalvageReport`; the library adds what it restored from the user-tags mirror (user_tags.py)
and derives the text channel again (Library.open).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from app.services.library.catalog import CATALOG_NAME, connect, file_format, transaction
from app.services.library.pages import raw_rows


@dataclass
class TableCount:
    """One table's rows before and after a salvage. `before` counts every row any copy still names (the table,
    its indexes, the rows of other tables that point at it, the user-tags mirror); `reread`: file rows kept to be
    read again; `restored`: rows put back from the mirror (user_tags.py)."""

    before: int = 0
    kept: int = 0
    reread: int = 0
    restored: int = 0

    @property
    def lost(self) -> int:
        return max(0, self.before - self.kept - self.reread - self.restored)


@dataclass
class SalvageReport:
    """What rebuilding a damaged catalog set aside, kept and lost. `str()` is the one-line message for the
    library's events (CLI standard error, GUI status); `as_dict()` the same for JSON."""

    damaged_copy: Path  # the damaged file, moved aside as it was (its WAL beside it)
    files: TableCount
    vectors: TableCount
    user_tags: TableCount
    favourites: TableCount
    reread: list[str] = field(default_factory=list)  # files whose rows were damaged: failed until indexed again
    uncounted: list[str] = field(default_factory=list)  # tables damaged with no second copy: losses not countable
    mirror: str | None = None  # the user-tags mirror that rows were restored from

    LABELS = {"files": "files", "vectors": "vectors", "user_tags": "user tags", "favourites": "favourites"}

    def tables(self) -> dict[str, TableCount]:
        return {"files": self.files, "vectors": self.vectors, "user_tags": self.user_tags,
                "favourites": self.favourites}

    @property
    def lost(self) -> dict[str, int]:
        """Rows known to be lost, per table (tables that lost none are left out)."""
        return {name: t.lost for name, t in self.tables().items() if t.lost}

    def restored_from(self, mirror: str, table: str, known: int, restored: int, reread: Sequence[str] = ()) -> None:
        """Count rows of `table` put back from the mirror `mirror`, which lists `known` of them (and the files it
        named that had no row any more, now rows to read again): its count replaces an uncountable loss."""
        t = self.tables()[table]
        self.mirror = mirror
        t.restored += restored
        t.before = max(t.before, known, t.kept + t.reread + t.restored)
        if table in self.uncounted:
            self.uncounted.remove(table)
        if reread:
            self.reread.extend(reread)
            self.files.reread += len(reread)
            self.files.before = max(self.files.before, self.files.kept + self.files.reread)

    def as_dict(self) -> dict[str, Any]:
        return {"damaged_copy": str(self.damaged_copy), "reread": self.reread, "uncounted": self.uncounted,
                "lost": self.lost, "mirror": self.mirror,
                **{name: {"before": t.before, "kept": t.kept, "reread": t.reread, "restored": t.restored}
                   for name, t in self.tables().items()}}

    def __str__(self) -> str:
        kept = ", ".join(f"{t.kept} {self.LABELS[n]}" if n in self.uncounted else f"{t.kept} of {t.before} "
                         f"{self.LABELS[n]}" for n, t in self.tables().items())
        out = [f"damaged catalog moved to {self.damaged_copy.name}; rebuilt from what was intact: kept {kept}"]
        if self.reread:
            out.append(f"{len(self.reread)} files whose rows were damaged are listed as failed until `earshot index` "
                       "reads them again")
        restored = {n: t.restored for n, t in self.tables().items() if t.restored}
        if restored:
            out.append(f"restored from {self.mirror}: " + ", ".join(f"{k} {self.LABELS[n]}"
                                                                    for n, k in restored.items()))
        lost = self.lost
        if lost:
            out.append("lost: " + ", ".join(f"{n} {self.LABELS[t]}" for t, n in lost.items())
                       + (" (`earshot index` reads those files again)" if set(lost) & {"files", "vectors"} else ""))
        for name in self.uncounted:
            out.append(f"{self.LABELS[name]}: the damaged pages held an unknown number of rows, lost")
        if not lost and not self.uncounted:
            out.append("nothing lost")
        return "; ".join(out)


REREAD = "its catalog row was damaged and rebuilt: index again to read it"

# the version-1 columns every later version still has: what salvage copies
_SALVAGE = {
    "models": "model_id, dim, sample_rate, window_seconds",
    "files": "id, path, size, mtime_ns, hash, duration, sample_rate, channels, status, error, indexed_at",
    "vectors": "id, model_id, file_id, vector, n_windows, windows",
    "texts": "file_id, path, mtime_ns, version, name, folder, tags, problem, embedded",
}
# second copies of rows, read through a covering index alone: a damaged table page does not take these along
_COPIES = {
    "files": ("SELECT id, path FROM files INDEXED BY sqlite_autoindex_files_1",
              "SELECT id, NULL FROM files INDEXED BY files_hash"),
    "vectors": ("SELECT id, file_id FROM vectors INDEXED BY vectors_file",
                "SELECT id, file_id FROM vectors INDEXED BY sqlite_autoindex_vectors_1"),
    "user_tags": ("SELECT file_id, tag, NULL FROM user_tags INDEXED BY user_tags_tag",),
}


class _Reader:
    """Reads what it can of the damaged catalog, noting which tables had rows it could not reach."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.damaged: set[str] = set()  # tables with at least one damaged read
        self.complete: set[str] = set()  # tables of which one full copy (table or index) was read

    def rows(self, table: str, sql: str, args: tuple = ()) -> list[tuple]:
        """The rows `sql` yields before any damage stops it; a missing table (an older catalog) gives []."""
        out: list[tuple] = []
        try:
            cur = self.db.execute(sql, args)
            while (row := cur.fetchone()) is not None:
                out.append(row)
        except sqlite3.DatabaseError as e:
            if not str(e).startswith(("no such table", "no such index", "no such column")):
                self.damaged.add(table)
            return out
        self.complete.add(table)
        return out

    def table(self, table: str) -> Iterator[tuple]:
        """_readable_rows (damaged pages stepped over), or nothing when the table cannot be read at all."""
        try:
            yield from _readable_rows(self.db, table, self.damaged)
        except sqlite3.DatabaseError:
            self.damaged.add(table)
        if table not in self.damaged:
            self.complete.add(table)

    def uncounted(self, table: str) -> bool:
        return table in self.damaged and table not in self.complete


def _upper_rowid(db: sqlite3.Connection, table: str) -> int:
    """The highest rowid the damaged table may hold (its AUTOINCREMENT counter or max(rowid))."""
    best = 0
    for q in (f"SELECT max(rowid) FROM {table}", "SELECT seq FROM sqlite_sequence WHERE name = ?"):
        with contextlib.suppress(sqlite3.DatabaseError):
            r = db.execute(q, (table,) if "?" in q else ()).fetchone()
            best = max(best, int(r[0] or 0) if r else 0)
    return best


def _readable_rows(db: sqlite3.Connection, table: str, damaged: set[str]) -> Iterator[tuple]:
    """Every row of `table` that can still be read, in rowid order; damaged pages are stepped over (and the
    table is added to `damaged`)."""
    cols, last = _SALVAGE[table], 0
    upper = _upper_rowid(db, table)
    while True:
        try:
            r = db.execute(f"SELECT rowid, {cols} FROM {table} WHERE rowid > ? ORDER BY rowid LIMIT 1",
                           (last,)).fetchone()
        except sqlite3.DatabaseError:
            damaged.add(table)
            r = False  # the b-tree below `last` is damaged: probe rowid by rowid
        if r is None:
            return
        if r is False:
            if last >= upper:
                return
            last += 1
            with contextlib.suppress(sqlite3.DatabaseError):
                row = db.execute(f"SELECT rowid, {cols} FROM {table} WHERE rowid = ?", (last,)).fetchone()
                if row is not None:
                    yield row[1:]
            continue
        last = r[0]
        yield r[1:]


def _good_vector(row: tuple, dims: dict[str, int]) -> bool:
    _, model_id, _, vector, n_windows, windows = row
    dim = dims.get(model_id)
    if dim is None or not isinstance(vector, bytes) or not isinstance(windows, bytes):
        return False
    if len(vector) != 4 * dim or len(windows) != 4 * dim * int(n_windows or 0):
        return False
    v = np.frombuffer(vector, dtype=np.float32)
    w = np.frombuffer(windows, dtype=np.float32)
    return bool(np.isfinite(v).all() and np.isfinite(w).all() and abs(float(np.linalg.norm(v)) - 1) < 1e-3)


def salvage(path: Path) -> SalvageReport:
    """Rebuild a damaged catalog from every row that can still be read and checks out, and say exactly what was
    kept and lost, table by table. Rows are read through SQL (stepping over damaged pages), off the pages
    themselves, and through the indexes that hold a second copy of them: a file whose row was damaged but whose
    path is still known is kept as a failed row to read again, with its tags and favourite mark. The damaged file
    is kept next to the catalog as `catalog.sqlite.damaged-<time>` (its WAL beside it)."""
    fresh = path.with_name(f"{CATALOG_NAME}.salvage")
    for p in (fresh, Path(f"{fresh}-wal"), Path(f"{fresh}-shm")):
        p.unlink(missing_ok=True)
    new = connect(fresh)
    try:
        old = sqlite3.connect(os.fsencode(path), isolation_level=None)
        with contextlib.suppress(sqlite3.DatabaseError):
            old.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the pages read below must be the latest
        try:
            with transaction(new):
                counts, reread, uncounted = _rebuild(_Reader(old), new, raw_rows(path))
                for table in ("files", "vectors"):  # ids stay never-reused
                    new.execute("UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?",
                                (_upper_rowid(old, table), table))
        finally:
            old.close()
    finally:
        new.close()
    aside = _aside_name(path)
    os.replace(path, aside)
    if Path(f"{path}-wal").exists():  # frames the checkpoint could not move: part of the damaged copy
        os.replace(f"{path}-wal", f"{aside}-wal")
    for p in (Path(f"{path}-shm"), Path(f"{fresh}-wal"), Path(f"{fresh}-shm")):
        p.unlink(missing_ok=True)
    os.replace(fresh, path)
    return SalvageReport(aside, **counts, reread=reread, uncounted=uncounted)


def _aside_name(path: Path) -> Path:
    """`catalog.sqlite.damaged-<time>`, never one an earlier repair left."""
    stem = f"{CATALOG_NAME}.damaged-{int(time.time())}"
    aside, n = path.with_name(stem), 1
    while aside.exists():
        aside, n = path.with_name(f"{stem}-{n}"), n + 1
    return aside


def _rebuild(old: _Reader, new: sqlite3.Connection, raw: dict[str, list[tuple]]
             ) -> tuple[dict[str, TableCount], list[str], list[str]]:
    """Copy what reads and checks out from `old` into the empty catalog `new`, counting every table's rows."""
    counts = {name: TableCount() for name in ("files", "vectors", "user_tags", "favourites")}
    dims: dict[str, int] = {}
    for row in _merged(old.table("models"), raw["models"], key=0):
        with contextlib.suppress(sqlite3.Error):
            new.execute(f"INSERT INTO models({_SALVAGE['models']}) VALUES (?, ?, ?, ?)", row)
            dims[row[0]] = int(row[1])

    # files: the rows, then the ids and paths their indexes, texts and the rows that point at them still name
    rows = list(_merged(old.table("files"), raw["files"]))
    paths: dict[int, bytes | None] = {}
    for fid, key in [r for q in _COPIES["files"] for r in old.rows("files", q)] + old.rows(
            "texts", "SELECT file_id, path FROM texts"):  # texts: the path each file's name words came from
        if isinstance(fid, int) and paths.get(fid) is None:
            paths[fid] = key
    vectors = list(_merged(old.table("vectors"), raw["vectors"]))
    vector_ids = {r[0]: r[2] for r in vectors} | {r[0]: r[1] for q in _COPIES["vectors"]
                                                  for r in old.rows("vectors", q)}
    tags = {(r[0], r[1]): r[2] for q in (*_COPIES["user_tags"], "SELECT file_id, tag, added_at FROM user_tags")
            for r in old.rows("user_tags", q)}
    favourites = _favourites(old, raw["favourites"], {r[0] for r in rows} | set(paths))
    known = {r[0] for r in rows} | set(paths) | set(vector_ids.values()) | {f for f, _ in tags} | set(favourites)
    counts["files"].before = len(known)
    file_ids: set[int] = set()
    for row in rows:
        with contextlib.suppress(sqlite3.Error, TypeError, ValueError):
            new.execute(f"INSERT INTO files({_SALVAGE['files']}, format) VALUES ({','.join('?' * 12)})",
                        (*row, file_format(bytes(row[1]))))
            file_ids.add(row[0])
    reread = []
    for fid in sorted(known - file_ids):
        key = paths.get(fid)
        if isinstance(key, bytes) and key:
            with contextlib.suppress(sqlite3.Error):
                new.execute("INSERT INTO files(id, path, size, mtime_ns, status, error, indexed_at, format)"
                            " VALUES (?, ?, -1, 0, 'error', ?, ?, ?)", (fid, key, REREAD, time.time(),
                                                                         file_format(key)))
                reread.append(os.fsdecode(key))
    counts["files"].kept, counts["files"].reread = len(file_ids), len(reread)

    counts["vectors"].before = len(vector_ids)
    for row in vectors:
        if row[2] in file_ids and _good_vector(row, dims):
            with contextlib.suppress(sqlite3.Error):
                new.execute(f"INSERT INTO vectors({_SALVAGE['vectors']}) VALUES (?, ?, ?, ?, ?, ?)", row)
                counts["vectors"].kept += 1
    _copy_texts(old, new)
    for (folder,) in old.rows("mount_points", "SELECT folder FROM mount_points"):  # an unmounted share stays away
        with contextlib.suppress(sqlite3.Error):
            new.execute("INSERT OR IGNORE INTO mount_points(folder) VALUES (?)", (folder,))
    # the user's own work: kept for every file that still has a row, rows to read again included
    with_rows = {r[0] for r in new.execute("SELECT id FROM files")}
    counts["user_tags"].before, counts["favourites"].before = len(tags), len(favourites)
    for (fid, tag), added in tags.items():
        if fid in with_rows:
            with contextlib.suppress(sqlite3.Error):
                new.execute("INSERT INTO user_tags(file_id, tag, added_at) VALUES (?, ?, ?)",
                            (fid, tag, added if added is not None else time.time()))
                counts["user_tags"].kept += 1
    for fid, added in favourites.items():
        if fid in with_rows:
            with contextlib.suppress(sqlite3.Error):
                new.execute("INSERT INTO favourites(file_id, added_at) VALUES (?, ?)", (fid, added))
                counts["favourites"].kept += 1
    uncounted = [name for name in counts if old.uncounted(name)]
    return counts, reread, uncounted


def _copy_texts(old: _Reader, new: sqlite3.Connection) -> None:
    """The derived text of readable files whose path it came from is unchanged, marked to be derived again (the
    tag credits are not among the columns salvage copies; deriving reads tags, never audio, and keeps a sentence
    vector whose sentence is unchanged). The library derives the rest, and the keyword index from all of it, at
    Library.open."""
    paths = {fid: bytes(p) for fid, p in new.execute("SELECT id, path FROM files WHERE status = 'ok'")}
    cols = _SALVAGE["texts"]
    version = cols.split(", ").index("version")
    for row in old.table("texts"):
        if isinstance(row[1], bytes) and paths.get(row[0]) == row[1]:
            row = (*row[:version], 0, *row[version + 1:])
            with contextlib.suppress(sqlite3.Error):
                new.execute(f"INSERT INTO texts({cols}) VALUES ({','.join('?' * len(row))})", row)


def _favourites(old: _Reader, on_pages: list[tuple], file_ids: set[int]) -> dict[int, float]:
    """file id -> when marked, for every favourite still readable: the table, then each known file id looked up
    by itself (past a damaged interior page), then the rows found on the pages."""
    found = {r[0]: r[1] for r in old.rows("favourites", "SELECT file_id, added_at FROM favourites")}
    if "favourites" in old.damaged:
        for fid in sorted(file_ids - set(found)):
            with contextlib.suppress(sqlite3.DatabaseError):
                row = old.db.execute("SELECT added_at FROM favourites WHERE file_id = ?", (fid,)).fetchone()
                if row is not None:
                    found[fid] = row[0]
        for fid, added in on_pages:
            found.setdefault(fid, added)
    return found


def _merged(through_sql: Iterator[tuple], on_pages: list[tuple], key: int = 0) -> Iterator[tuple]:
    """Rows read through SQL, then rows found only on the pages (a damaged interior page hid them)."""
    have = set()
    for row in through_sql:
        have.add(row[key])
        yield row
    for row in on_pages:
        if row[key] not in have:
            have.add(row[key])
            yield row
