"""`VectorStore`: the library's vectors, one FAISS index per model, kept in agreement with the catalog.

The catalog (SQLite) is the source of truth; each FAISS file next to it is a cache, repaired or rebuilt from the
vectors in SQLite when it is missing, damaged or out of date. Vector ids come from an AUTOINCREMENT column and are
never reused (across models too), so "the same set of ids" means "the same vectors". An index changed in memory
is written at checkpoints (`save`), with its SHA-256 recorded so that the next open can trust it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from app.services.library.catalog import id_chunks
from app.services.library.records import LibraryError, is_text_model
from app.services.library.vector_index import IndexFileError, VectorIndex
from core.files import hash_file

if TYPE_CHECKING:
    from app.services.library.records import Embedder
    from app.services.library.storage import Catalog
    from app.services.library.vector_index import IndexConfig


class VectorStore:
    """The models, their vectors and the per-model vector indexes of a library (`library.vectors`): the owner of
    the `models`, `vectors` and `index_files` tables. Thread-safe under the catalog's lock."""

    def __init__(self, store: Catalog, index_config: IndexConfig) -> None:
        self.catalog = store
        self.index_config = index_config
        self._indexes: dict[str, VectorIndex] = {}
        self._dirty: set[str] = set()  # models whose in-memory index differs from its file

    @property
    def lock(self) -> threading.RLock:
        return self.catalog.lock

    # ------------------------------------------------------------------------------------------ the models

    def register_model(self, e: Embedder) -> None:
        """Record (or check) a sound model's dimension, sample rate and window length."""
        with self.catalog.transaction() as db:
            row = db.execute("SELECT dim, sample_rate, window_seconds FROM models WHERE model_id = ?",
                             (e.model_id,)).fetchone()
            if row is None:
                db.execute("INSERT INTO models(model_id, dim, sample_rate, window_seconds) VALUES (?, ?, ?, ?)",
                           (e.model_id, int(e.dim), int(e.sample_rate), float(e.window_seconds)))
            elif row[0] != e.dim:
                raise LibraryError(f"model {e.model_id!r} has {e.dim}-d vectors but the catalog holds {row[0]}-d")
            elif row[1] != e.sample_rate or row[2] != e.window_seconds:
                db.execute("UPDATE models SET sample_rate = ?, window_seconds = ? WHERE model_id = ?",
                           (int(e.sample_rate), float(e.window_seconds), e.model_id))

    def register_text_model(self, model_id: str, dim: int) -> None:
        """Record (or check) a sentence encoder's dimension (no sample rate, no windows)."""
        with self.catalog.transaction() as db:
            row = db.execute("SELECT dim FROM models WHERE model_id = ?", (model_id,)).fetchone()
            if row is None:
                db.execute("INSERT INTO models(model_id, dim, sample_rate, window_seconds) VALUES (?, ?, 0, 0)",
                           (model_id, int(dim)))
            elif row[0] != dim:
                raise LibraryError(f"text model {model_id!r} has {dim}-d vectors, the catalog {row[0]}-d")

    def set_model_error(self, model_id: str, error: str | None) -> None:
        """Record why a model was refused (None: it works); other models are not touched."""
        with self.catalog.transaction() as db:
            db.execute("UPDATE models SET error = ? WHERE model_id = ?", (error, model_id))

    def model_errors(self) -> dict[str, str]:
        """model_id -> why it was refused, for models refused as broken."""
        with self.catalog.lock:
            return dict(self.catalog.db.execute("SELECT model_id, error FROM models WHERE error IS NOT NULL"
                                                ).fetchall())

    # ----------------------------------------------------------------------------------------- the indexes

    def path(self, model_id: str) -> Path:
        """The model's FAISS file."""
        return self.catalog.catalog_dir / f"index-{hashlib.sha256(model_id.encode()).hexdigest()[:16]}.faiss"

    def index(self, model_id: str) -> VectorIndex | None:
        """The model's index, loaded once and made to agree with the catalog; None for an unknown model.

        The file is trusted when its SHA-256 is the one recorded when it was written. Otherwise (damaged in
        place, copied from another library, written before checksums, or left stale by a crash) its
        vectors are compared with the catalog's: any that differ -> rebuilt from the catalog; all agree ->
        only the ids missing or extra are repaired. Extra ids are routine: removing a file drops its vectors of
        every model from the catalog, but only the loaded indexes follow at once (`unindex`).
        """
        db, events = self.catalog.db, self.catalog.events
        with self.lock:
            if model_id in self._indexes:
                return self._indexes[model_id]
            row = db.execute("SELECT dim FROM models WHERE model_id = ?", (model_id,)).fetchone()
            if row is None:
                return None
            dim = int(row[0])
            path = self.path(model_id)
            catalog_ids = np.array([r[0] for r in db.execute(
                "SELECT id FROM vectors WHERE model_id = ?", (model_id,))], dtype=np.int64)
            vi: VectorIndex | None = None
            # while another process indexes, a file behind the catalog is expected (written at its checkpoints):
            # searched as the catalog has it, neither reported nor written here
            elsewhere = functools.cache(self.catalog.indexed_elsewhere)
            if path.exists():
                try:
                    vi = VectorIndex.load(path, dim, self.index_config)
                except IndexFileError as e:
                    events.append(f"rebuilding index: {e}")
                if vi is not None and has_duplicates(vi.ids()):
                    events.append(f"rebuilding index: {path.name} holds duplicate ids")
                    vi = None
                if vi is not None and not self._checksum_matches(model_id, path) and self._differs(model_id, vi):
                    events.append(f"rebuilding index: {path.name} holds vectors that differ from the catalog")
                    vi = None
            elif len(catalog_ids) and not elsewhere():
                events.append(f"rebuilding index: {path.name} is missing")
            if vi is None:
                ids, vecs = self._fetch(model_id)
                vi = VectorIndex.build(dim, ids, vecs if vecs is not None else np.zeros((0, dim)),
                                       self.index_config)
                changed = True
            else:
                have = vi.ids()
                # both unique (checked above; a primary key): sorting beats numpy's hashing 10x at 1M ids
                extra = np.setdiff1d(have, catalog_ids, assume_unique=True)
                missing = np.setdiff1d(catalog_ids, have, assume_unique=True)
                if len(extra):
                    vi.remove(extra)
                if len(missing):
                    vi.add(*self._fetch(model_id, missing))
                changed = bool(len(extra) or len(missing))
                # only missing vectors are news (a run stopped before its checkpoint): vectors deleted from the
                # catalog while this index was not loaded (a removed file's, for every model) are taken out here
                if len(missing) and not elsewhere():
                    events.append(f"repaired index {path.name}: +{len(missing)} -{len(extra)} vectors")
            self._indexes[model_id] = vi
            vi.copy_in_background(self.lock)  # a mapped 1M-file index: searched now, in memory in a few seconds
            if changed and not elsewhere():
                self._dirty.add(model_id)
                self.save(model_id)
            return vi

    def kind(self, model_id: str) -> str | None:
        """The FAISS tier of the model's index (flat, ivf, ...); None for an unknown model."""
        vi = self.index(model_id)
        return None if vi is None else vi.kind

    def count(self, model_id: str) -> int:
        """How many vectors a model's (in-memory) index holds: files searchable by it (0: it has nothing to say)."""
        vi = self.index(model_id)
        return len(vi) if vi is not None else 0

    def counts(self, model_ids: Sequence[str]) -> list[int]:
        """`count` of several models at once."""
        return [self.count(m) for m in model_ids]

    def save(self, model_id: str) -> None:
        """Write the model's index atomically if it changed, and record its checksum in the catalog; a failure
        (full disk, ...) only costs a repair next time."""
        with self.lock:
            vi = self._indexes.get(model_id)
            if vi is None or model_id not in self._dirty or self.catalog.read_only:
                return  # a read-only library keeps its repaired indexes in memory
            path = self.path(model_id)
            try:
                vi.save(path)
                self._dirty.discard(model_id)
                digest, stat = hash_file(path), file_stat(path)
                with self.catalog.transaction() as db:
                    db.execute("INSERT OR REPLACE INTO index_files(model_id, sha256, vectors, stat)"
                               " VALUES (?, ?, ?, ?)", (model_id, digest, len(vi), stat))
            except (OSError, RuntimeError, sqlite3.Error, LibraryError) as e:  # faiss raises RuntimeError
                self.catalog.events.append(f"could not write index: {e}")

    def save_all(self) -> None:
        """Write every index that changed (closing the library)."""
        with self.lock:
            for model_id in list(self._dirty):
                self.save(model_id)

    def wait_in_memory(self, timeout: float | None = None) -> bool:
        """Wait for the loaded indexes' background copies (a mapped 1M-file index); True when all are in memory."""
        with self.lock:
            loaded = [vi for vi in self._indexes.values() if vi is not None]
        return all([vi.wait_copied(timeout) for vi in loaded])

    def unload(self) -> None:
        """Forget the loaded indexes (after `save_all`, when the library closes)."""
        with self.lock:
            for vi in self._indexes.values():
                if vi is not None:
                    vi.abandon()
            self._indexes.clear()
            self._dirty.clear()

    # ------------------------------------------------------------------------------------- keeping in step

    def add(self, model_id: str, vector_ids: Sequence[int], vectors: np.ndarray) -> None:
        """Add committed catalog vectors (N, D) to the model's loaded index; the file follows at `save`. An index
        not loaded yet is loaded from the catalog, which holds them already: they are not added twice."""
        with self.lock:
            loaded = model_id in self._indexes
            vi = self.index(model_id)
            if loaded and vi is not None and len(vector_ids):
                vi.add(list(vector_ids), vectors)
                self._dirty.add(model_id)

    def unindex(self, vector_ids: Sequence[int]) -> None:
        """Take vectors out of the loaded indexes (any model; ids are unique across models)."""
        if not vector_ids:
            return
        with self.lock:
            for model_id, vi in self._indexes.items():
                if vi.remove(list(vector_ids)):
                    self._dirty.add(model_id)

    @staticmethod
    def drop(db: sqlite3.Connection, file_id: int, model_id: str | None = None) -> list[int]:
        """Delete a file's vectors (of one model or all) inside the caller's transaction; returns their ids, to
        `unindex` once it has committed."""
        q = "SELECT id, model_id FROM vectors WHERE file_id = ?" + (" AND model_id = ?" if model_id else "")
        args: tuple[Any, ...] = (file_id, model_id) if model_id else (file_id,)
        rows = db.execute(q, args).fetchall()
        db.execute("DELETE FROM vectors WHERE file_id = ?" + (" AND model_id = ?" if model_id else ""), args)
        return [r[0] for r in rows]

    @staticmethod
    def insert(db: sqlite3.Connection, model_id: str, file_id: int, vector: bytes, n_windows: int, windows: bytes,
               categories: str | None = None) -> int:
        """Store a file's vector (its windows' vectors, what its sound's categories are) inside the caller's
        transaction; returns its id, to `add` to the loaded index once it has committed."""
        cur = db.execute("INSERT INTO vectors(model_id, file_id, vector, n_windows, windows, categories)"
                         " VALUES (?, ?, ?, ?, ?, ?)", (model_id, file_id, vector, n_windows, windows, categories))
        return int(cur.lastrowid)

    @staticmethod
    def stored_of_content(db: sqlite3.Connection, digest: str, model_id: str
                          ) -> tuple[bytes, int, bytes, str | None]:
        """(vector, n_windows, windows, categories) a file with this content already has for `model_id` (a
        copy's)."""
        return db.execute("SELECT v.vector, v.n_windows, v.windows, v.categories FROM vectors v"
                          " JOIN files f ON f.id = v.file_id WHERE f.hash = ? AND v.model_id = ? LIMIT 1",
                          (digest, model_id)).fetchone()

    @staticmethod
    def fold_text_vectors(db: sqlite3.Connection, named: int, moved: int) -> list[int]:
        """A named row turned out to be a catalogued file that moved (inside the caller's transaction): the moved
        row's text vectors (of its old path) go, and it takes the named row's (derived from the new path; their
        ids kept). Returns the ids to `unindex`."""
        removed = [v for (v, m) in db.execute("SELECT id, model_id FROM vectors WHERE file_id = ?", (moved,)
                                              ).fetchall() if is_text_model(m)]
        db.execute(f"DELETE FROM vectors WHERE id IN ({','.join('?' * len(removed))})", removed)
        db.execute("UPDATE vectors SET file_id = ? WHERE file_id = ?", (moved, named))
        return removed

    def drop_sound(self, db: sqlite3.Connection, file_id: int) -> list[int]:
        """Delete a file's sound vectors, keeping its text vector (which follows its text, not its bytes)."""
        models = [m for (m,) in db.execute("SELECT model_id FROM vectors WHERE file_id = ?", (file_id,))]
        return [v for m in dict.fromkeys(models) if not is_text_model(m) for v in self.drop(db, file_id, m)]

    # -------------------------------------------------------------------------------------------- reading

    def of_files(self, model_id: str, file_ids: Sequence[int]) -> dict[int, np.ndarray]:
        """file id -> its vector for `model_id` (files without one are left out). (D,) each"""
        out = {}
        with self.lock:
            for part, marks in id_chunks(file_ids):
                for fid, blob in self.catalog.db.execute(
                        f"SELECT file_id, vector FROM vectors WHERE model_id = ? AND file_id IN ({marks})",
                        (model_id, *part)):
                    out[fid] = np.frombuffer(blob, dtype=np.float32)
        return out

    def categories_of(self, model_id: str, file_ids: Sequence[int] | None = None
                      ) -> dict[int, list[tuple[str, float]]]:
        """file id -> its sound's likeliest categories for `model_id`, best first (files without are left out);
        every file's when `file_ids` is None."""
        out: dict[int, list[tuple[str, float]]] = {}
        query = "SELECT file_id, categories FROM vectors WHERE model_id = ? AND categories IS NOT NULL"
        with self.lock:
            rows = (self.catalog.db.execute(query, (model_id,)).fetchall() if file_ids is None else
                    [r for part, marks in id_chunks(file_ids)
                     for r in self.catalog.db.execute(query + f" AND file_id IN ({marks})", (model_id, *part))])
        for fid, text in rows:
            if parsed := parse_categories(text):
                out[int(fid)] = parsed
        return out

    def windows(self, model_id: str, file_id: int) -> np.ndarray | None:
        """A file's per-window vectors for `model_id`, (W, D); None when it has none."""
        with self.lock:
            row = self.catalog.db.execute("SELECT windows, length(vector) FROM vectors WHERE file_id = ? AND"
                                          " model_id = ?", (file_id, model_id)).fetchone()
        if row is None:
            return None
        return np.frombuffer(row[0], dtype=np.float32).reshape(-1, row[1] // 4)

    def scores(self, model_id: str, file_ids: Sequence[int], q: np.ndarray) -> dict[int, float]:
        """file id -> cosine of its `model_id` vector to the unit query q (D,), the vectors read from the loaded
        FAISS index by id (a few hundred index lookups, no vector blobs read from SQLite); files without a
        vector are left out. Same values as `of_files(...) @ q`."""
        ids = [int(i) for i in file_ids]
        pairs: list[tuple[int, int]] = []
        with self.lock:
            for part, marks in id_chunks(ids):
                pairs += self.catalog.db.execute(
                    f"SELECT file_id, id FROM vectors WHERE model_id = ? AND file_id IN ({marks})",
                    (model_id, *part)).fetchall()
            vi = self.index(model_id)
            try:
                vecs = vi.reconstruct([v for _, v in pairs]) if vi is not None and pairs else None  # (M, D)
            except RuntimeError:  # a vector not (yet) in the index: read them all from the catalog
                vecs = None
        if vecs is None or vecs.shape[1] != len(q):
            return {f: float(v @ q) for f, v in self.of_files(model_id, ids).items() if len(v) == len(q)}
        return dict(zip([f for f, _ in pairs], (vecs @ q).tolist(), strict=True))

    # ------------------------------------------------------------------------------------------- repairing

    def _fetch(self, model_id: str, ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """(ids, vectors) from the catalog: all of a model's, or just `ids`. (N,), (N, D)"""
        db = self.catalog.db
        if ids is None:
            rows = db.execute("SELECT id, vector FROM vectors WHERE model_id = ? ORDER BY id", (model_id,)).fetchall()
        else:
            rows = []
            for part, marks in id_chunks(ids):
                rows += db.execute(f"SELECT id, vector FROM vectors WHERE id IN ({marks})", part).fetchall()
        out_ids = np.array([r[0] for r in rows], dtype=np.int64)
        vecs = np.stack([np.frombuffer(r[1], dtype=np.float32) for r in rows]) if rows else None
        return out_ids, vecs

    def _checksum_matches(self, model_id: str, path: Path) -> bool:
        """The file is the one this catalog wrote: the same size and mtime as when written (hashing a 1M-file
        index costs seconds), else the same SHA-256 (a copy with a new mtime)."""
        r = self.catalog.db.execute("SELECT sha256, stat FROM index_files WHERE model_id = ?",
                                    (model_id,)).fetchone()
        stat = file_stat(path)
        if r is None or r[1] == stat:
            return r is not None
        if r[0] != hash_file(path):
            return False
        if not self.catalog.read_only:  # the same bytes with a new mtime (copied, or written before v5)
            with contextlib.suppress(sqlite3.Error, LibraryError), self.catalog.transaction() as db:
                db.execute("UPDATE index_files SET stat = ? WHERE model_id = ?", (stat, model_id))
        return True

    def _differs(self, model_id: str, vi: VectorIndex) -> bool:
        """Does any vector in the index differ from the catalog's vector with the same id?"""
        have, vecs = vi.ids(), vi.vectors()  # (N,), (N, D)
        ids, ref = self._fetch(model_id, have)
        if not len(ids):
            return False
        pos = {int(i): k for k, i in enumerate(have.tolist())}
        mine = vecs[[pos[int(i)] for i in ids]]
        return not bool(np.all(np.abs(mine - ref) <= 1e-5))  # NaN compares False: differs


def file_stat(path: Path) -> str:
    """'size:mtime_ns' of a file ('' when it cannot be read)."""
    try:
        st = path.stat()
    except OSError:
        return ""
    return f"{st.st_size}:{st.st_mtime_ns}"


def has_duplicates(ids: np.ndarray) -> bool:
    """Does an id appear twice? (N,) -- by sorting: np.unique hashes, 0.45 s per call at 1M ids."""
    s = np.sort(ids)
    return bool(len(s) > 1 and (s[1:] == s[:-1]).any())


def parse_categories(text: str | None) -> list[tuple[str, float]]:
    """A stored `vectors.categories` value -> [(category, confidence)], best first ([] for NULL or a damaged
    value; written by embedding.pool_categories)."""
    out: list[tuple[str, float]] = []
    for part in (text or "").split(";"):
        name, _, conf = part.rpartition(" ")
        try:
            value = float(conf)
        except ValueError:
            continue
        if name and 0.0 <= value <= 1.0:
            out.append((name, value))
    return out
