"""`Library`: a folder of sounds with its catalog and one FAISS index per model, and search over them.

The catalog (SQLite, see catalog.py) is the source of truth; the FAISS file next to it is a cache, repaired
or rebuilt from the vectors in SQLite when it is missing, damaged or out of date. Vector ids come from an
AUTOINCREMENT column and are never reused, so "the same set of ids" means "the same vectors".
Paths are stored relative to the library root, '/'-separated, as BLOBs of the raw file-system bytes
(`os.fsencode`): non-UTF-8 names round-trip exactly; in Python they are `os.fsdecode` strings
(surrogate-escaped), and `audio.display_name` makes them printable.
Moved or renamed files are recognised by hash and keep their row and vectors; a copy of a known file gets a
copy of its vector (`record_file`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from app.services.audio import display_name
from app.services.library import catalog
from app.services.library.catalog import CATALOG_NAME, KNOWN_CONTENT, CatalogRow, id_chunks, normalise
from app.services.library.embedding import embed_file
from app.services.library.records import (
    BrokenModelError,
    DiskFullError,
    Embedder,
    FailedFile,
    Hit,
    LibraryError,
    LibraryStats,
    PathLike,
    SearchFilters,
)
from app.services.library.scan import ScannedFile
from app.services.library.textchannel import TextChannelMixin, is_text_model
from app.services.vector_index import IndexConfig, IndexFileError, VectorIndex


class Library(TextChannelMixin):
    """A folder of sounds with its catalog and per-model vector indexes. Thread-safe (one lock, `lock`)."""

    def __init__(self, root: Path, catalog_dir: Path, db: sqlite3.Connection, index_config: IndexConfig) -> None:
        self.root = root
        self.catalog_dir = catalog_dir
        self.db = db  # read it under `lock`; write only through the methods below
        self.index_config = index_config
        self.events: list[str] = []  # what opening had to repair, for logs and tests
        self.lock = threading.RLock()
        self._read_db: sqlite3.Connection | None = None  # keyword_search's read-only connection, opened on first use
        self._read_lock: threading.Lock | threading.RLock = self.lock
        self._indexes: dict[str, VectorIndex] = {}
        self._dirty: set[str] = set()  # models whose in-memory index differs from its file
        self._indexing = False

    # ---------------------------------------------------------------------------------------- open/close

    @classmethod
    def open(cls, root: PathLike, index_config: IndexConfig | None = None) -> Library:
        root = Path(os.path.abspath(root))
        if not root.is_dir():
            raise LibraryError(f"{display_name(root)}: not a folder")
        catalog_dir = catalog.catalog_dir_for(root)
        events = []
        for stale in catalog_dir.glob(".index-*.tmp"):  # an interrupted index write
            with contextlib.suppress(OSError):
                stale.unlink()
        path = catalog_dir / CATALOG_NAME
        try:
            try:
                db = catalog.connect(path)
                problems = catalog.quick_check(db)
            except sqlite3.OperationalError:
                raise  # locked, disk full, ...: not damage
            except sqlite3.DatabaseError as e:  # "not a database", "malformed"
                db, problems = None, [str(e)]
            if problems:
                if db is not None:
                    db.close()
                events.append(f"{catalog.salvage(path)} [{'; '.join(problems)[:300]}]")
                for index_file in catalog_dir.glob("index-*.faiss"):  # rebuilt from the kept vectors
                    with contextlib.suppress(OSError):
                        index_file.unlink()
                db = catalog.connect(path)
        except sqlite3.OperationalError as e:
            if catalog.is_disk_full(e):
                raise DiskFullError(catalog.disk_full_message(path)) from None
            raise LibraryError(f"{display_name(path)}: cannot open the catalog ({e})") from None
        lib = cls(root, catalog_dir, db, index_config or IndexConfig())
        lib.events.extend(events)
        return lib

    def close(self) -> None:
        with self.lock:
            if self.db is None:
                return
            for model_id in list(self._dirty):
                self.save_index(model_id)
            self.close_reader()
            self.db.close()
            self.db = None  # type: ignore[assignment]
            self._indexes.clear()

    def __enter__(self) -> Library:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def catalog_path(self) -> Path:
        return self.catalog_dir / CATALOG_NAME

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One transaction; a full disk becomes a DiskFullError (nothing committed before is lost)."""
        with self.lock:
            try:
                with catalog.transaction(self.db) as db:
                    yield db
            except sqlite3.OperationalError as e:
                if catalog.is_disk_full(e):
                    raise DiskFullError(catalog.disk_full_message(self.catalog_path)) from None
                raise

    @contextlib.contextmanager
    def indexing(self) -> Iterator[None]:
        """Held by the one indexing job a library may run at a time; a second one gets a LibraryError."""
        with self.lock:
            if self._indexing:
                raise LibraryError(f"{display_name(self.root)} is already being indexed")
            self._indexing = True
        try:
            yield
        finally:
            self._indexing = False

    # ------------------------------------------------------------------------------------------- models

    def register_model(self, e: Embedder) -> None:
        """Record (or check) the model's dimension, sample rate and window length."""
        with self._tx() as db:
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

    def index_path(self, model_id: str) -> Path:
        return self.catalog_dir / f"index-{hashlib.sha256(model_id.encode()).hexdigest()[:16]}.faiss"

    def _fetch_vectors(self, model_id: str, ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(ids, vectors) from the catalog: all of a model's, or just `ids`. (N,), (N, D)"""
        if ids is None:
            rows = self.db.execute("SELECT id, vector FROM vectors WHERE model_id = ? ORDER BY id",
                                   (model_id,)).fetchall()
        else:
            rows = []
            for part, marks in id_chunks(ids):
                rows += self.db.execute(f"SELECT id, vector FROM vectors WHERE id IN ({marks})", part).fetchall()
        out_ids = np.array([r[0] for r in rows], dtype=np.int64)
        vecs = np.stack([np.frombuffer(r[1], dtype=np.float32) for r in rows]) if rows else None
        return out_ids, vecs

    def vector_index(self, model_id: str) -> VectorIndex | None:
        """The model's index, loaded once and made to agree with the catalog; None for an unknown model.

        The file is trusted when its SHA-256 is the one recorded when it was written. Otherwise (damaged in
        place, copied from another library, written before checksums, or left stale by a crash) its
        vectors are compared with the catalog's: any that differ -> rebuilt from the catalog; all agree ->
        only the ids missing or extra are repaired.
        """
        with self.lock:
            if model_id in self._indexes:
                return self._indexes[model_id]
            row = self.db.execute("SELECT dim FROM models WHERE model_id = ?", (model_id,)).fetchone()
            if row is None:
                return None
            dim = int(row[0])
            path = self.index_path(model_id)
            catalog_ids = np.array([r[0] for r in self.db.execute(
                "SELECT id FROM vectors WHERE model_id = ?", (model_id,))], dtype=np.int64)
            vi: VectorIndex | None = None
            if path.exists():
                try:
                    vi = VectorIndex.load(path, dim, self.index_config)
                except IndexFileError as e:
                    self.events.append(f"rebuilding index: {e}")
                if vi is not None and len(np.unique(vi.ids())) != len(vi):
                    self.events.append(f"rebuilding index: {path.name} holds duplicate ids")
                    vi = None
                if vi is not None and not self._checksum_matches(model_id, path) and self._vectors_differ(
                        model_id, vi):
                    self.events.append(f"rebuilding index: {path.name} holds vectors that differ from the catalog")
                    vi = None
            elif len(catalog_ids):
                self.events.append(f"rebuilding index: {path.name} is missing")
            if vi is None:
                ids, vecs = self._fetch_vectors(model_id)
                vi = VectorIndex.build(dim, ids, vecs if vecs is not None else np.zeros((0, dim)),
                                       self.index_config)
                changed = True
            else:
                have = vi.ids()
                extra, missing = np.setdiff1d(have, catalog_ids), np.setdiff1d(catalog_ids, have)
                if len(extra):
                    vi.remove(extra)
                if len(missing):
                    vi.add(*self._fetch_vectors(model_id, missing))
                changed = bool(len(extra) or len(missing))
                if changed:
                    self.events.append(f"repaired index {path.name}: +{len(missing)} -{len(extra)} vectors")
            self._indexes[model_id] = vi
            if changed:
                self._dirty.add(model_id)
                self.save_index(model_id)
            return vi

    def _checksum_matches(self, model_id: str, path: Path) -> bool:
        r = self.db.execute("SELECT sha256 FROM index_files WHERE model_id = ?", (model_id,)).fetchone()
        return r is not None and r[0] == _sha256(path)

    def _vectors_differ(self, model_id: str, vi: VectorIndex) -> bool:
        """Does any vector in the index differ from the catalog's vector with the same id?"""
        have, vecs = vi.ids(), vi.vectors()  # (N,), (N, D)
        ids, ref = self._fetch_vectors(model_id, have)
        if not len(ids):
            return False
        pos = {int(i): k for k, i in enumerate(have.tolist())}
        mine = vecs[[pos[int(i)] for i in ids]]
        return not bool(np.all(np.abs(mine - ref) <= 1e-5))  # NaN compares False: differs

    def save_index(self, model_id: str) -> None:
        """Write the model's index atomically if it changed, and record its checksum in the catalog; a failure
        (full disk, ...) only costs a repair next time."""
        with self.lock:
            vi = self._indexes.get(model_id)
            if vi is None or model_id not in self._dirty:
                return
            path = self.index_path(model_id)
            try:
                vi.save(path)
                self._dirty.discard(model_id)
                digest = _sha256(path)
                with self._tx() as db:
                    db.execute("INSERT OR REPLACE INTO index_files(model_id, sha256, vectors) VALUES (?, ?, ?)",
                               (model_id, digest, len(vi)))
            except (OSError, RuntimeError, sqlite3.Error, LibraryError) as e:  # faiss raises RuntimeError
                self.events.append(f"could not write index: {e}")

    def index_kind(self, model_id: str) -> str | None:
        vi = self.vector_index(model_id)
        return None if vi is None else vi.kind

    # ------------------------------------------------------------------------------------ catalog writes

    def _row_at(self, key: bytes, model_id: str) -> CatalogRow | None:
        r = self.db.execute(
            "SELECT id, path, size, mtime_ns, hash, status,"
            " EXISTS(SELECT 1 FROM vectors v WHERE v.file_id = f.id AND v.model_id = ?)"
            " FROM files f WHERE path = ?", (model_id, key)).fetchone()
        return CatalogRow(*r[:6], bool(r[6])) if r else None

    def rows(self, model_id: str) -> dict[bytes, CatalogRow]:
        """Every file row by relative path key; has_vector says whether `model_id` has its vector."""
        with self.lock:
            rows = self.db.execute(
                "SELECT id, path, size, mtime_ns, hash, status,"
                " EXISTS(SELECT 1 FROM vectors v WHERE v.file_id = f.id AND v.model_id = ?)"
                " FROM files f", (model_id,)).fetchall()
        return {bytes(r[1]): CatalogRow(r[0], bytes(r[1]), *r[2:6], bool(r[6])) for r in rows}

    def file_error(self, key: bytes) -> str:
        """The recorded error of the file at relative path key ('' if none)."""
        with self.lock:
            r = self.db.execute("SELECT error FROM files WHERE path = ?", (key,)).fetchone()
        return (r[0] or "") if r else ""

    def _drop_vectors(self, db: sqlite3.Connection, file_id: int, model_id: str | None = None) -> list[int]:
        """Delete a file's vectors (of one model or all); returns the ids that were in `model_id`'s index."""
        q = "SELECT id, model_id FROM vectors WHERE file_id = ?" + (" AND model_id = ?" if model_id else "")
        args: tuple[Any, ...] = (file_id, model_id) if model_id else (file_id,)
        rows = db.execute(q, args).fetchall()
        db.execute("DELETE FROM vectors WHERE file_id = ?" + (" AND model_id = ?" if model_id else ""), args)
        return [r[0] for r in rows]

    def _unindex(self, vector_ids: list[int]) -> None:
        """Take vectors out of the loaded indexes (any model; ids are unique across models)."""
        if not vector_ids:
            return
        for model_id, vi in self._indexes.items():
            if vi.remove(vector_ids):
                self._dirty.add(model_id)

    def record_file(self, model_id: str, f: ScannedFile, size: int, mtime_ns: int, digest: str | None,
                    seen: set[bytes], *, meta: dict[str, Any] | None = None,
                    vectors: tuple[np.ndarray, np.ndarray] | None = None, reuse: bool = False) -> str:
        """Record one file's outcome in one transaction; returns embedded|moved|copied|touched|failed|stale.

        seen: relative path keys present in the folder (a row whose path is not seen may be adopted as a
        move). meta: duration, sample_rate, channels, status, error of newly read content. vectors: (mean (D,),
        windows (W, D)) for `model_id`, L2-normalised. reuse: the content (digest) is already in the catalog:
        take metadata and vector from there ('stale' when it no longer is). The in-memory index follows;
        its file is written by `save_index`.
        """
        key = f.key
        outcome = "failed" if meta and meta["status"] == "error" else "embedded"
        with self._tx() as db:
            if reuse and db.execute(KNOWN_CONTENT + " LIMIT 1", (digest, model_id, -1)).fetchone() is None:
                return "stale"  # the content was replaced during this run: the caller reads the file after all
            removed: list[int] = []
            target = self._row_at(key, model_id)
            if target is None and digest is not None:
                for r in db.execute("SELECT id, path FROM files WHERE hash = ? ORDER BY id", (digest,)):
                    if bytes(r[1]) not in seen:  # its file is gone: this is where it went
                        db.execute("UPDATE files SET path = ? WHERE id = ?", (key, r[0]))
                        target = self._row_at(key, model_id)
                        outcome = "moved"
                        break
            if target is not None and target.hash != digest:
                removed += self._drop_vectors(db, target.id)  # new content: every model's vector is stale
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
                    removed += self._drop_vectors(db, target.id)
            added: tuple[int, np.ndarray] | None = None
            if vectors is not None or (reuse and meta["status"] == "ok" and not target.has_vector):
                if vectors is not None:
                    mean, windows = vectors
                    blob, wblob, n = mean.tobytes(), windows.tobytes(), len(windows)
                else:
                    blob, n, wblob = db.execute(
                        "SELECT v.vector, v.n_windows, v.windows FROM vectors v JOIN files f ON f.id = v.file_id"
                        " WHERE f.hash = ? AND v.model_id = ? LIMIT 1", (digest, model_id)).fetchone()
                removed += self._drop_vectors(db, target.id, model_id)
                cur = db.execute("INSERT INTO vectors(model_id, file_id, vector, n_windows, windows)"
                                 " VALUES (?, ?, ?, ?, ?)", (model_id, target.id, blob, n, wblob))
                added = (int(cur.lastrowid), np.frombuffer(blob, dtype=np.float32))
        # the catalog has committed: bring the in-memory index along (the file is written at checkpoints)
        with self.lock:
            self._unindex(removed)
            if added is not None:
                vi = self.vector_index(model_id)
                if vi is not None:
                    vi.add([added[0]], added[1][None])
                    self._dirty.add(model_id)
        return outcome

    def set_unavailable(self, file_ids: Sequence[int]) -> None:
        """Mark exactly these files unavailable (under a folder that cannot be listed right now): their rows
        and vectors are kept but hidden from results; every other file is available again."""
        with self._tx() as db:
            db.execute("UPDATE files SET available = 1 WHERE available = 0")
            for part, marks in id_chunks(file_ids):
                db.execute(f"UPDATE files SET available = 0 WHERE id IN ({marks})", part)

    def set_model_error(self, model_id: str, error: str | None) -> None:
        """Record why a model was refused (None: it works); other models are not touched."""
        with self._tx() as db:
            db.execute("UPDATE models SET error = ? WHERE model_id = ?", (error, model_id))

    def model_errors(self) -> dict[str, str]:
        """model_id -> why it was refused, for models refused as broken."""
        with self.lock:
            return dict(self.db.execute("SELECT model_id, error FROM models WHERE error IS NOT NULL").fetchall())

    def delete_files(self, file_ids: Sequence[int]) -> int:
        """Remove file rows and all their vectors (one transaction); returns how many."""
        if not file_ids:
            return 0
        removed: list[int] = []
        with self._tx() as db:
            for fid in file_ids:
                removed += self._drop_vectors(db, fid)
                db.execute("DELETE FROM files WHERE id = ?", (fid,))
        self._unindex(removed)
        return len(file_ids)

    # -------------------------------------------------------------------------------------------- reading

    def stats(self) -> LibraryStats:
        with self.lock:
            files, ok, secs = self.db.execute(
                "SELECT count(*), coalesce(sum(status = 'ok'), 0), coalesce(sum(CASE WHEN status = 'ok'"
                " THEN duration END), 0) FROM files").fetchone()
            vectors = dict(self.db.execute(
                "SELECT m.model_id, count(v.id) FROM models m LEFT JOIN vectors v ON v.model_id = m.model_id"
                " GROUP BY m.model_id").fetchall())
            away = self.db.execute("SELECT count(*) FROM files WHERE available = 0").fetchone()[0]
            problems = self.db.execute("SELECT count(*) FROM texts WHERE problem IS NOT NULL").fetchone()[0]
        text = sum(n for m, n in vectors.items() if is_text_model(m))
        audio = {m: n for m, n in vectors.items() if not is_text_model(m)}
        return LibraryStats(self.root, self.catalog_path, files, ok, files - ok, float(secs), audio, away, text,
                            problems)

    def failed_files(self) -> list[FailedFile]:
        with self.lock:
            rows = self.db.execute("SELECT id, path, error FROM files WHERE status = 'error' ORDER BY path"
                                   ).fetchall()
        return [FailedFile(os.fsdecode(bytes(p)), e or "", i) for i, p, e in rows]

    def file_id(self, path: PathLike) -> int | None:
        """Catalog id of a file given relative to the root or as an absolute path inside it."""
        key = self._rel_key(path)
        with self.lock:
            r = self.db.execute("SELECT id FROM files WHERE path = ?", (key,)).fetchone()
        return r[0] if r else None

    def _rel_key(self, path: PathLike) -> bytes:
        p = os.fspath(path)
        if os.path.isabs(p):
            p = os.path.relpath(p, self.root)
        return os.fsencode(p.replace(os.sep, "/")).strip(b"/")

    # ------------------------------------------------------------------------------------------- searching

    def search_text(self, query: str, embedder: Embedder, k: int = 10, filters: SearchFilters | None = None
                    ) -> list[Hit]:
        """The k files that best match a description."""
        _check_k(k)
        if self.vector_index(embedder.model_id) is None:
            return []
        q = np.asarray(embedder.embed_text([query]), dtype=np.float32).reshape(-1)  # (D,)
        return self.search_vector(q, embedder.model_id, k, filters)

    def similar(self, path_or_file_id: PathLike | int, embedder: Embedder, k: int = 10,
                filters: SearchFilters | None = None) -> list[Hit]:
        """Files that sound like a catalogued file (excluding itself), or like any audio file outside."""
        _check_k(k)
        model_id = embedder.model_id
        fid = path_or_file_id if isinstance(path_or_file_id, int) else self.file_id(path_or_file_id)
        if fid is None:
            path = Path(path_or_file_id if os.path.isabs(path_or_file_id) else self.root / path_or_file_id)
            if not path.is_file():
                raise LibraryError(f"{display_name(path)}: not in the library")
            mean, _ = embed_file(path, embedder)
            return self.search_vector(mean, model_id, k, filters)
        with self.lock:
            r = self.db.execute("SELECT vector FROM vectors WHERE file_id = ? AND model_id = ?",
                                (fid, model_id)).fetchone()
        if r is None:
            raise LibraryError(f"file {fid} has no vector for model {model_id!r} (index the library first)")
        return self.search_vector(np.frombuffer(r[0], dtype=np.float32), model_id, k, filters, exclude=[fid])

    def search_vector(self, query: np.ndarray, model_id: str, k: int = 10, filters: SearchFilters | None = None,
                      exclude: Sequence[int] = (), windows: bool = True) -> list[Hit]:
        """Top-k files by cosine similarity to `query` (D,), with optional filters, excluding file ids and
        files under folders that are unavailable. k >= 1; more than the library holds gives them all.
        windows=False skips the per-window scores (the text channel has one vector per file)."""
        _check_k(k)
        q = self._query_vector(query, model_id)
        with self.lock:
            found, k = self.top_vectors(q, model_id, k, filters, len(exclude))
            if not found:
                return []
            rows = {r[0]: r for r in self.db.execute(
                "SELECT v.id, f.id, f.path, f.duration, " + ("v.windows" if windows else "NULL") + ","
                " m.window_seconds FROM vectors v JOIN files f ON f.id = v.file_id"
                " JOIN models m ON m.model_id = v.model_id"
                f" WHERE v.id IN ({','.join('?' * len(found))})", [i for i, _ in found])}
        hits = []
        for vid, score in found:
            r = rows.get(vid)
            if r is None or r[1] in exclude:
                continue
            hits.append(self._hit(r[1:], q, score))
            if len(hits) == k:
                break
        return hits

    def top_vectors(self, q: np.ndarray, model_id: str, k: int, filters: SearchFilters | None, extra: int = 0
                    ) -> tuple[list[tuple[int, float]], int]:
        """(vector id, cosine) of the best k + extra vectors of a normalised query (files hidden or filtered out
        left out), and k capped at the index size."""
        with self.lock:
            vi = self.vector_index(model_id)
            if vi is None or len(vi) == 0:
                return [], k
            if len(q) != vi.dim:
                raise LibraryError(f"query has {len(q)} dimensions, model {model_id!r} has {vi.dim}")
            hide = self.db.execute("SELECT EXISTS(SELECT 1 FROM files WHERE available = 0)").fetchone()[0]
            allowed = None
            if hide or (filters is not None and filters.active):
                allowed = self._allowed_ids(model_id, filters or SearchFilters())
                if not len(allowed):
                    return [], k
            k = min(k, len(vi))  # a huge k costs nothing: there are no more files than this
            scores, ids = vi.search(q[None], min(k + extra, len(vi)), allowed)  # (1, k')
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0], strict=True) if i >= 0], k

    def _query_vector(self, query: np.ndarray, model_id: str) -> np.ndarray:
        q = np.asarray(query, dtype=np.float32).reshape(-1)  # (D,)
        if not np.isfinite(q).all():
            raise BrokenModelError(f"model {model_id!r} produced NaN/inf for the query: it is broken")
        return normalise(q)

    def _hit(self, row: tuple, q: np.ndarray | None, score: float) -> Hit:
        """A Hit from (file id, path, duration, windows blob or None, window seconds)."""
        fid, path, duration, wblob, window_s = row
        rel = os.fsdecode(bytes(path))
        wscores: list[float] = []
        best = 0
        if wblob is not None and q is not None:
            windows = np.frombuffer(wblob, dtype=np.float32).reshape(-1, len(q))  # (W, D)
            ws = windows @ q  # (W,)
            best, wscores = (int(np.argmax(ws)) if len(ws) else 0), ws.tolist()
        return Hit(path=self.root / rel, score=score, duration=float(duration or 0.0), folder=rel.rpartition("/")[0],
                   best_window_start_s=best * float(window_s or 0.0), window_scores=wscores, file_id=fid,
                   rel_path=rel)

    def hits_for(self, file_ids: Sequence[int], model_id: str, query: np.ndarray | None) -> dict[int, Hit]:
        """Hits of given files, with their per-window similarity to `query` under `model_id` (none for a file
        without a vector, or when query is None). Their score is left at 0: the caller ranks (fusion)."""
        q = self._query_vector(query, model_id) if query is not None else None
        out: dict[int, Hit] = {}
        with self.lock:
            for part, marks in id_chunks(file_ids):
                for r in self.db.execute(
                        "SELECT f.id, f.path, f.duration, v.windows, m.window_seconds FROM files f"
                        " LEFT JOIN vectors v ON v.file_id = f.id AND v.model_id = ?"
                        f" LEFT JOIN models m ON m.model_id = v.model_id WHERE f.id IN ({marks})", (model_id, *part)):
                    out[r[0]] = self._hit(r, q, 0.0)
        return out

    def _allowed_ids(self, model_id: str, filters: SearchFilters) -> np.ndarray:
        where, args = ["v.model_id = ?", "f.status = 'ok'", "f.available = 1"], [model_id]
        self._filter_sql(filters, where, args)
        rows = self.db.execute("SELECT v.id FROM vectors v JOIN files f ON f.id = v.file_id WHERE "
                               + " AND ".join(where), args).fetchall()
        return np.array([r[0] for r in rows], dtype=np.int64)

    def _filter_sql(self, filters: SearchFilters, where: list[str], args: list[Any]) -> None:
        """SQL conditions on `files f` for every filter."""
        if filters.min_duration is not None:
            where.append("f.duration >= ?")
            args.append(filters.min_duration)
        if filters.max_duration is not None:
            where.append("f.duration <= ?")
            args.append(filters.max_duration)
        if filters.folder:
            prefix = self._rel_key(filters.folder)
            if prefix and prefix != b".":
                prefix += b"/"
                where.append("substr(f.path, 1, ?) = ?")  # byte prefix; no LIKE escaping needed
                args += [len(prefix), prefix]
        if filters.formats:
            fmts = filters.format_set
            where.append(f"f.format IN ({','.join('?' * len(fmts))})")
            args += fmts
        for column, op, value in (("sample_rate", ">=", filters.min_sample_rate),
                                  ("sample_rate", "<=", filters.max_sample_rate), ("channels", "=", filters.channels)):
            if value is not None:
                where.append(f"f.{column} {op} ?")
                args.append(int(value))
        if filters.favourites_only:
            where.append("EXISTS(SELECT 1 FROM favourites fav WHERE fav.file_id = f.id)")

    def allowed_files(self, file_ids: Sequence[int], filters: SearchFilters | None) -> set[int]:
        """The files among `file_ids` that are searchable (ok, available) and pass the filters."""
        filters = filters or SearchFilters()
        out: set[int] = set()
        with self.lock:
            for part, marks in id_chunks(file_ids):
                where = [f"f.id IN ({marks})", "f.status = 'ok'", "f.available = 1"]
                args: list[Any] = list(part)
                self._filter_sql(filters, where, args)
                out.update(r[0] for r in self.db.execute("SELECT f.id FROM files f WHERE " + " AND ".join(where),
                                                         args))
        return out


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise LibraryError(f"the number of results must be a whole number of at least 1 (got {k!r})")
