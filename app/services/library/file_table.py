"""`FileTable`: the catalog's rows of files, as the indexer records them and the views read them.

Paths are stored relative to the library root, '/'-separated, as BLOBs of the raw file-system bytes
(`os.fsencode`): non-UTF-8 names round-trip exactly; in Python they are `os.fsdecode` strings (surrogate-escaped),
and `audio.display_name` makes them printable. Moved or renamed files are recognised by hash and keep their row
and vectors; a copy of a known file gets a copy of its vector (`record`).

Names first: the indexer's first pass adds a row for every new file before any audio is read (`add_named`: path,
size, mtime, the header's duration; no hash, no vector), so that names, folders and tags are searchable at once.
Such a row is *named*: status 'ok', hash NULL. When the second pass finds that its content is a catalogued file
that moved, the moved row is kept (its vectors, user tags, favourites) and the named row goes (`record`).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from app.services.library import catalog
from app.services.library.catalog import KNOWN_CONTENT, CatalogRow, id_chunks
from app.services.library.records import FailedFile, PathLike
from app.services.library.scan import ScannedFile
from core.display import natural_path_key

if TYPE_CHECKING:
    from app.services.library.storage import Catalog
    from app.services.library.text_channel import TextChannel
    from app.services.library.user_tags import UserTags
    from app.services.library.vectors import VectorStore
    from core.audio import AudioInfo

_ROW = ("SELECT id, path, size, mtime_ns, hash, status,"
        " EXISTS(SELECT 1 FROM vectors v WHERE v.file_id = f.id AND v.model_id = ?{}), duration FROM files f")


class FileTable:
    """The files of a library's catalog (`library.files`): the owner of the `files` and `mount_points` tables. A
    file's vectors, text and tags are its siblings' to write: recording a file asks them."""

    def __init__(self, store: Catalog, vectors: VectorStore, text: TextChannel, user_tags: UserTags) -> None:
        self.catalog = store
        self.vectors = vectors
        self.text = text
        self.user_tags = user_tags

    # -------------------------------------------------------------------------------------------- reading

    def rows(self, model_id: str, categorised: bool = False) -> dict[bytes, CatalogRow]:
        """Every file row by relative path key; has_vector says whether `model_id` has its vector (`categorised`:
        one with the sound's categories, which a vector stored before the model had heads lacks)."""
        sql = _ROW.format(" AND v.categories IS NOT NULL" if categorised else "")
        with self.catalog.lock:
            rows = self.catalog.db.execute(sql, (model_id,)).fetchall()
        return {bytes(r[1]): CatalogRow(r[0], bytes(r[1]), *r[2:6], bool(r[6]), r[7]) for r in rows}

    def id_of(self, path: PathLike) -> int | None:
        """Catalog id of a file given relative to the root or as an absolute path inside it."""
        with self.catalog.lock:
            r = self.catalog.db.execute("SELECT id FROM files WHERE path = ?", (self.key(path),)).fetchone()
        return r[0] if r else None

    def key(self, path: PathLike) -> bytes:
        """The catalog's key of a path relative to the root, absolute inside it, or relative to the working folder
        and inside the root (`LIB/x.wav` typed next to `--library LIB`, also once x.wav is deleted: the catalog
        still knows it): '/'-separated bytes."""
        p = os.fspath(path)
        root = os.fspath(self.catalog.root)
        if not os.path.isabs(p) and not os.path.lexists(os.path.join(root, p)) and (
                os.path.lexists(p) or _inside(os.path.abspath(p), os.path.abspath(root))):
            p = os.path.abspath(p)
        if os.path.isabs(p):
            p = os.path.relpath(p, root)
        return os.fsencode(p.replace(os.sep, "/")).strip(b"/")

    def error_of(self, key: bytes) -> str:
        """The recorded error of the file at relative path key ('' if none)."""
        with self.catalog.lock:
            r = self.catalog.db.execute("SELECT error FROM files WHERE path = ?", (key,)).fetchone()
        return (r[0] or "") if r else ""

    def row_of(self, file_id: int) -> tuple[str, str, str] | None:
        """(relative path, status, recorded error or '') of a file, or None when there is no such file."""
        with self.catalog.lock:
            r = self.catalog.db.execute("SELECT path, status, error FROM files WHERE id = ?", (file_id,)).fetchone()
        return (os.fsdecode(bytes(r[0])), r[1], r[2] or "") if r else None

    def count(self) -> int:
        """How many readable files the catalog holds (embedded or only named so far)."""
        with self.catalog.lock:
            return int(self.catalog.db.execute("SELECT count(*) FROM files WHERE status = 'ok'").fetchone()[0])

    def unavailable_count(self) -> int:
        """How many files are hidden because their folder could not be listed at the last index run."""
        with self.catalog.lock:
            return int(self.catalog.db.execute("SELECT count(*) FROM files WHERE available = 0").fetchone()[0])

    def id_bound(self) -> int:
        """An upper bound on how many files the catalog holds, at once (ids are never reused): caps a search's k."""
        with self.catalog.lock:
            return int(self.catalog.db.execute("SELECT coalesce(max(id), 0) FROM files").fetchone()[0])

    def duration_of(self, file_id: int) -> float | None:
        """A file's length in seconds as catalogued (None when not known)."""
        with self.catalog.lock:
            r = self.catalog.db.execute("SELECT duration FROM files WHERE id = ?", (file_id,)).fetchone()
        return float(r[0]) if r and r[0] is not None else None

    def failed(self) -> list[FailedFile]:
        """Files that could not be read, by path."""
        with self.catalog.lock:
            rows = self.catalog.db.execute("SELECT id, path, error FROM files WHERE status = 'error' ORDER BY path"
                                           ).fetchall()
        return [FailedFile(os.fsdecode(bytes(p)), e or "", i) for i, p, e in rows]

    def folders(self) -> list[str]:
        """Relative folders holding catalogued sounds (and their parents), in natural order (a folder before what
        it holds); '' (the root) excluded."""
        with self.catalog.lock:
            rows = self.catalog.db.execute("SELECT path FROM files WHERE status = 'ok'").fetchall()
        found: set[str] = set()
        for (p,) in rows:
            parts = os.fsdecode(bytes(p)).split("/")[:-1]
            for i in range(1, len(parts) + 1):
                found.add("/".join(parts[:i]))
        return sorted(found, key=natural_path_key)

    # -------------------------------------------------------------------------------------------- writing

    def record(self, model_id: str, f: ScannedFile, size: int, mtime_ns: int, digest: str | None,
               seen: set[bytes], *, meta: dict[str, Any] | None = None,
               vectors: tuple[np.ndarray, np.ndarray] | None = None, categories: str | None = None,
               reuse: bool = False) -> str:
        """Record one file's outcome in one transaction; returns embedded|moved|copied|touched|failed|stale.

        seen: relative path keys present in the folder (a row whose path is not seen may be adopted as a
        move). meta: duration, sample_rate, channels, status, error of newly read content. vectors: (mean (D,),
        windows (W, D)) for `model_id`, L2-normalised; categories: what the model's heads heard, as stored
        (embedding.pool_categories). reuse: the content (digest) is already in the catalog:
        take metadata and vector from there ('stale' when it no longer is). The in-memory index follows;
        its file is written by `library.vectors.save`.
        """
        store = self.vectors
        key = f.key
        outcome = "failed" if meta and meta["status"] == "error" else "embedded"
        with self.catalog.transaction() as db:
            if reuse and db.execute(KNOWN_CONTENT + " LIMIT 1", (digest, model_id, -1)).fetchone() is None:
                return "stale"  # the content was replaced during this run: the caller reads the file after all
            removed: list[int] = []
            target = self._row_at(key, model_id)
            named = target is not None and target.hash is None and target.status == "ok"  # from the first pass
            if (target is None or named) and digest is not None:
                for r in db.execute("SELECT id, path FROM files WHERE hash = ? ORDER BY id", (digest,)):
                    if bytes(r[1]) not in seen:  # its file is gone: this is where it went
                        if named:  # the moved row, with its vectors and the user's marks, replaces the named one
                            removed += self._fold_into(db, target.id, r[0])
                        db.execute("UPDATE files SET path = ? WHERE id = ?", (key, r[0]))
                        target = self._row_at(key, model_id)
                        outcome, named = "moved", False
                        break
            if target is not None and target.hash != digest:
                # new content: every model's vector is stale; a named row has only its text vector, which is not
                removed += store.drop_sound(db, target.id) if named else store.drop(db, target.id)
                target.has_vector = False
            if reuse:
                src = db.execute(KNOWN_CONTENT + " LIMIT 1", (digest, model_id, target.id if target else -1)
                                 ).fetchone()
                meta = dict(zip(("duration", "sample_rate", "channels", "status", "error"), src[1:], strict=True))
                if target is not None and target.id == src[0]:
                    outcome = "moved" if outcome == "moved" else "touched"
                elif outcome != "moved":
                    outcome = "failed" if meta["status"] == "error" else "copied"
            now = time.time()
            if target is None:
                cur = db.execute(
                    "INSERT INTO files(path, size, mtime_ns, hash, status, indexed_at) VALUES (?, ?, ?, ?, 'ok', ?)",
                    (key, size, mtime_ns, digest, now))
                target = CatalogRow(int(cur.lastrowid), key, size, mtime_ns, digest, "ok", False)
            db.execute("UPDATE files SET size = ?, mtime_ns = ?, hash = ?, indexed_at = ?, format = ? WHERE id = ?",
                       (size, mtime_ns, digest, now, catalog.file_format(key), target.id))
            if meta is not None:
                db.execute("UPDATE files SET duration = ?, sample_rate = ?, channels = ?, status = ?, error = ?"
                           " WHERE id = ?", (meta["duration"], meta["sample_rate"], meta["channels"],
                                             meta["status"], meta["error"], target.id))
                if meta["status"] == "error":
                    removed += store.drop(db, target.id)
            added: tuple[int, np.ndarray] | None = None
            if vectors is not None or (reuse and meta["status"] == "ok" and not target.has_vector):
                if vectors is not None:
                    mean, windows = vectors
                    blob, wblob, n = mean.tobytes(), windows.tobytes(), len(windows)
                else:
                    blob, n, wblob, categories = store.stored_of_content(db, digest, model_id)
                removed += store.drop(db, target.id, model_id)
                added = (store.insert(db, model_id, target.id, blob, n, wblob, categories),
                         np.frombuffer(blob, dtype=np.float32))
        # the catalog has committed: bring the in-memory index along (the file is written at checkpoints)
        with self.catalog.lock:
            store.unindex(removed)
            if added is not None:
                store.add(model_id, [added[0]], added[1][None])
        return outcome

    def add_named(self, files: Sequence[tuple[ScannedFile, AudioInfo | None]]) -> int:
        """The first pass: a row for each new file (path, size, mtime, format, what its header says; no hash, no
        vector) in one transaction, so that its name can be searched before its audio is read. A path that has a
        row already is left alone. Returns how many rows were added."""
        now, added = time.time(), 0
        with self.catalog.transaction() as db:
            for f, info in files:
                facts = (info.duration, info.sample_rate, info.channels) if info is not None else (None, None, None)
                cur = db.execute(
                    "INSERT OR IGNORE INTO files(path, size, mtime_ns, hash, duration, sample_rate, channels, status,"
                    " indexed_at, format) VALUES (?, ?, ?, NULL, ?, ?, ?, 'ok', ?, ?)",
                    (f.key, f.size, f.mtime_ns, *facts, now, catalog.file_format(f.key)))
                added += cur.rowcount
        return added

    def placeholders(self, files: Sequence[tuple[int, bytes]], reason: str) -> list[str]:
        """Rows for files known only by id and path (after a salvage): failed with `reason` until the next index
        run reads them; an id or path that has a row already is left alone. Returns the paths added."""
        added = []
        with self.catalog.transaction() as db:
            for fid, key in files:
                if db.execute("SELECT 1 FROM files WHERE id = ? OR path = ?", (fid, key)).fetchone():
                    continue
                db.execute("INSERT INTO files(id, path, size, mtime_ns, status, error, indexed_at, format)"
                           " VALUES (?, ?, -1, 0, 'error', ?, ?, ?)", (fid, key, reason, time.time(),
                                                                       catalog.file_format(key)))
                added.append(os.fsdecode(key))
        return added

    def set_unavailable(self, file_ids: Sequence[int]) -> None:
        """Mark exactly these files unavailable (under a folder that cannot be listed right now): their rows
        and vectors are kept but hidden from results; every other file is available again."""
        with self.catalog.transaction() as db:
            db.execute("UPDATE files SET available = 1 WHERE available = 0")
            for part, marks in id_chunks(file_ids):
                db.execute(f"UPDATE files SET available = 0 WHERE id IN ({marks})", part)

    def rewritten_same_audio(self, file_id: int, digest: str) -> None:
        """A file rewritten with its audio unchanged (tags written into it, the audio verified equal): its row
        takes the new bytes' hash, so the next index run finds the content known ("touched": its names and tags
        read again, its audio not embedded again, and not reported as new)."""
        with self.catalog.transaction() as db:
            db.execute("UPDATE files SET hash = ? WHERE id = ?", (digest, int(file_id)))

    def mount_points(self) -> list[str]:
        """Relative folders that were mount points when the folder was last scanned."""
        with self.catalog.lock:
            return [os.fsdecode(bytes(r[0])) for r in self.catalog.db.execute("SELECT folder FROM mount_points")]

    def set_mount_points(self, folders: Sequence[str]) -> None:
        if set(folders) == set(self.mount_points()):
            return
        with self.catalog.transaction() as db:
            db.execute("DELETE FROM mount_points")
            db.executemany("INSERT OR IGNORE INTO mount_points(folder) VALUES (?)",
                           [(os.fsencode(f),) for f in folders])

    def delete(self, file_ids: Sequence[int]) -> int:
        """Remove file rows and all their vectors (one transaction); returns how many."""
        if not file_ids:
            return 0
        removed: list[int] = []
        with self.catalog.transaction() as db:
            for fid in file_ids:
                removed += self.vectors.drop(db, fid)
                db.execute("DELETE FROM files WHERE id = ?", (fid,))
        self.vectors.unindex(removed)
        return len(file_ids)

    def _fold_into(self, db: sqlite3.Connection, named: int, moved: int) -> list[int]:
        """A named row turned out to be a catalogued file that moved (inside the caller's transaction): the moved
        row keeps its sound vectors and takes the named row's text (derived from the new path) and text vectors,
        and the user's tags and favourite given to it meanwhile; the named row goes. Returns the vector ids to
        unindex (the moved row's text vectors of its old path)."""
        removed = self.vectors.fold_text_vectors(db, named, moved)
        self.text.fold(db, named, moved)
        self.user_tags.fold(db, named, moved)
        db.execute("DELETE FROM files WHERE id = ?", (named,))
        self.text.write_keywords(db, moved)
        return removed

    def _row_at(self, key: bytes, model_id: str) -> CatalogRow | None:
        r = self.catalog.db.execute(_ROW.format("") + " WHERE path = ?", (model_id, key)).fetchone()
        return CatalogRow(*r[:6], bool(r[6])) if r else None


def _inside(path: str, folder: str) -> bool:
    """Is absolute `path` inside absolute `folder` (by name: the file need not exist)?"""
    return os.path.commonpath([path, folder]) == folder and path != folder
