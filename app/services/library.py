"""The sound library behind the Search tab: folder scan, SQLite catalog, FAISS index per model, search.

No Qt and no model code: the library takes an `Embedder` (anything with the attributes and methods of the
protocol below), so the retrieval model can change without touching this module.

Decisions (each one tested in tests/test_library.py):
- Catalog: `<library>/.earshot/catalog.sqlite`, or `<user data dir>/libraries/<sha256(abs path)[:16]>/` when
  the library folder cannot be written. SQLite in WAL mode; every file's result is one transaction, so a
  crash (even kill -9) loses at most the file in flight. The catalog is the source of truth; the FAISS file
  next to it is a cache, repaired or rebuilt from the vectors in SQLite when it is missing, damaged or out
  of date. Vector ids come from an AUTOINCREMENT column and are never reused, so "the same set of ids" means
  "the same vectors".
- Paths are stored relative to the library root, '/'-separated, as BLOBs of the raw file-system bytes
  (`os.fsencode`): non-UTF-8 names round-trip exactly; in Python they are `os.fsdecode` strings
  (surrogate-escaped), and `audio.display_name` makes them printable.
- Content hash: SHA-256 of all the bytes. It is only computed for new files and files whose size or mtime
  changed, and embedding costs far more than reading, so the full hash is affordable and, unlike a
  first+last-MiB sketch, catches in-place edits in the middle of a long recording.
- A file is embedded window by window (`embedder.window_seconds`, streamed with `audio.iter_blocks`, never
  loaded whole). The file vector is the mean of its window vectors weighted by how much real audio each
  window covers (the zero-padded tail counts less), L2-normalised; per-window vectors are kept (float32) to
  show where in a long file the match is.
- Moved or renamed files are recognised by hash and keep their row and vectors; a copy of a known file gets
  a copy of its vector. Files that fail (corrupt, empty, header only) are recorded with status 'error' and
  skipped until they change; files that could not be read at all (no hash) are retried every run.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
from platformdirs import user_data_dir

from app.services.audio import SUPPORTED_EXTENSIONS, AudioError, audio_info, display_name, iter_blocks
from app.services.jobs import Job, Progress
from app.services.vector_index import IndexConfig, IndexFileError, VectorIndex

PathLike = str | os.PathLike
APP_NAME = "earshot"
CATALOG_DIR = ".earshot"
CATALOG_NAME = "catalog.sqlite"
SCHEMA_VERSION = 1


class LibraryError(Exception):
    """A library that cannot be opened or used (newer catalog, conflicting model, no such file)."""


@runtime_checkable
class Embedder(Protocol):
    """What the library needs from a retrieval model."""

    model_id: str  # identifies the weights (e.g. checkpoint name + hash); one index per model_id
    sample_rate: int  # audio is decoded to this rate, mono
    dim: int
    window_seconds: float  # files are cut into windows of this length (the last one zero-padded)

    def embed_windows(self, audio_windows: np.ndarray) -> np.ndarray:
        """(W, samples) float32 -> (W, dim), one vector per window."""
        ...

    def embed_text(self, texts: list[str]) -> np.ndarray:
        """N texts -> (N, dim) in the same space as the audio vectors."""
        ...


# ---------------------------------------------------------------------------------------------- scanning


@dataclass
class ScannedFile:
    rel: str  # relative to the library root, '/'-separated, os.fsdecode form
    path: str  # absolute
    size: int
    mtime_ns: int

    @property
    def key(self) -> bytes:
        return os.fsencode(self.rel)


@dataclass
class ScanResult:
    files: list[ScannedFile]
    errors: list[str]  # folders that could not be listed


def scan_folder(root: PathLike, include_hidden: bool = False) -> ScanResult:
    """Every audio file under `root` (by extension), sorted by relative path.

    Symlinks are followed, but every folder and file is visited once (by device + inode), so symlink loops
    end and a folder linked twice is not listed twice. `.earshot/` is always skipped, other dot-names unless
    include_hidden. Broken links are ignored; folders that cannot be listed are reported in `errors`.
    """
    root_s = os.fspath(os.path.abspath(root))
    files: list[ScannedFile] = []
    errors: list[str] = []
    st = os.stat(root_s)
    seen_dirs = {(st.st_dev, st.st_ino)}
    seen_files: set[tuple[int, int]] = set()
    stack = [(root_s, "")]
    while stack:
        folder, rel = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: os.fsencode(e.name))
        except OSError as e:
            errors.append(f"{display_name(folder)}: cannot list folder ({e.strerror or e})")
            continue
        subdirs = []
        for entry in entries:
            name = entry.name
            if name == CATALOG_DIR or (name.startswith(".") and not include_hidden):
                continue
            entry_rel = f"{rel}/{name}" if rel else name
            try:
                st = entry.stat()  # follows symlinks; a broken link raises
                is_dir = entry.is_dir()
            except OSError:
                continue
            ident = (st.st_dev, st.st_ino)
            if is_dir:
                if ident not in seen_dirs:
                    seen_dirs.add(ident)
                    subdirs.append((entry.path, entry_rel))
            elif entry.is_file() and os.path.splitext(name)[1].lower() in SUPPORTED_EXTENSIONS:
                if st.st_ino and ident in seen_files:
                    continue
                seen_files.add(ident)
                files.append(ScannedFile(entry_rel, entry.path, st.st_size, st.st_mtime_ns))
        stack.extend(reversed(subdirs))
    files.sort(key=lambda f: f.key)
    return ScanResult(files, errors)


def hash_file(path: PathLike, stop: threading.Event | None = None, chunk: int = 1 << 20) -> str | None:
    """SHA-256 hex of the file's bytes; None if `stop` was set while reading."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
            if stop is not None and stop.is_set():
                return None
    return h.hexdigest()


def _stat(path: PathLike) -> os.stat_result:
    return os.stat(path)  # a seam for tests that simulate files changing under us


def _os_message(path: PathLike, e: OSError) -> str:
    if isinstance(e, PermissionError):
        return f"{display_name(path)}: permission denied"
    return f"{display_name(path)}: cannot read file ({e.strerror or e})"


# ------------------------------------------------------------------------------------------ results types


@dataclass
class SearchFilters:
    min_duration: float | None = None  # seconds
    max_duration: float | None = None
    folder: str | None = None  # relative folder (or absolute inside the library); matches it and below

    @property
    def active(self) -> bool:
        return self.min_duration is not None or self.max_duration is not None or bool(self.folder)


@dataclass
class Hit:
    path: Path  # absolute
    score: float  # cosine similarity with the query
    duration: float
    folder: str  # relative folder, '' for the library root
    best_window_start_s: float  # where in the file the best-matching window starts
    window_scores: list[float]  # similarity of every window
    file_id: int = 0
    rel_path: str = ""

    @property
    def name(self) -> str:
        return display_name(self.rel_path or self.path)


@dataclass
class FailedFile:
    path: str  # relative, os.fsdecode form
    error: str
    file_id: int = 0


@dataclass
class LibraryStats:
    root: Path
    catalog: Path
    files: int
    ok: int
    errors: int
    audio_seconds: float
    vectors: dict[str, int]  # model_id -> vectors in the catalog


@dataclass
class IndexReport:
    model_id: str
    files_seen: int = 0
    unchanged: int = 0
    embedded: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)  # new paths of moved/renamed files (not re-embedded)
    copied: list[str] = field(default_factory=list)  # copies of known content (vector reused)
    touched: int = 0  # mtime changed, content did not
    failed: list[FailedFile] = field(default_factory=list)
    removed: int = 0  # catalog rows of files that are gone
    requeued: int = 0  # files that changed while being read
    windows: int = 0  # windows embedded
    audio_seconds: float = 0.0  # audio embedded
    elapsed_s: float = 0.0
    scan_errors: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------------------ catalog

_SCHEMA = """
CREATE TABLE files(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    path BLOB NOT NULL UNIQUE,              -- relative, '/'-separated, raw file-system bytes
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    hash TEXT,                              -- sha256 of the bytes, NULL when the file could not be read
    duration REAL,
    sample_rate INTEGER,
    channels INTEGER,
    status TEXT NOT NULL CHECK (status IN ('ok', 'error')),
    error TEXT,
    indexed_at REAL NOT NULL
);
CREATE INDEX files_hash ON files(hash);
CREATE TABLE models(
    model_id TEXT PRIMARY KEY,
    dim INTEGER NOT NULL,
    sample_rate INTEGER NOT NULL,
    window_seconds REAL NOT NULL
);
CREATE TABLE vectors(
    id INTEGER PRIMARY KEY AUTOINCREMENT,   -- the FAISS id, never reused
    model_id TEXT NOT NULL REFERENCES models(model_id) ON DELETE CASCADE,
    file_id INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
    vector BLOB NOT NULL,                   -- float32 (dim,), L2-normalised
    n_windows INTEGER NOT NULL,
    windows BLOB NOT NULL,                  -- float32 (n_windows, dim), each row L2-normalised
    UNIQUE(model_id, file_id)
);
CREATE INDEX vectors_file ON vectors(file_id);
"""


def _migrate_v0(db: sqlite3.Connection) -> None:
    """v0 (the prototype): files(path TEXT PRIMARY KEY, size, mtime REAL seconds, sha256, duration) and
    embeddings(path TEXT, model TEXT, vector BLOB float32), no per-window vectors, no error rows."""
    db.execute("ALTER TABLE files RENAME TO files_v0")
    has_embeddings = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'embeddings'").fetchone()
    if has_embeddings:
        db.execute("ALTER TABLE embeddings RENAME TO embeddings_v0")
    _create_schema(db)
    now = time.time()
    for path, size, mtime, sha, duration in db.execute(
            "SELECT path, size, mtime, sha256, duration FROM files_v0").fetchall():
        ok = duration is not None
        db.execute(
            "INSERT INTO files(path, size, mtime_ns, hash, duration, status, error, indexed_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (os.fsencode(path), int(size or 0), round(float(mtime or 0) * 1e9), sha, duration,
             "ok" if ok else "error", None if ok else "failed in an older version of Earshot", now))
    if has_embeddings:
        for path, model, blob in db.execute("SELECT path, model, vector FROM embeddings_v0").fetchall():
            row = db.execute("SELECT id FROM files WHERE path = ?", (os.fsencode(path),)).fetchone()
            if row is None:
                continue
            v = _normalise(np.frombuffer(blob, dtype=np.float32))
            # sample rate and window length were not recorded: 0 until an embedder of this model registers
            db.execute("INSERT OR IGNORE INTO models(model_id, dim, sample_rate, window_seconds)"
                       " VALUES (?, ?, 0, 0)", (model, len(v)))
            db.execute("INSERT OR IGNORE INTO vectors(model_id, file_id, vector, n_windows, windows)"
                       " VALUES (?, ?, ?, 1, ?)", (model, row[0], v.tobytes(), v.tobytes()))
        db.execute("DROP TABLE embeddings_v0")
    db.execute("DROP TABLE files_v0")


def _create_schema(db: sqlite3.Connection) -> None:
    # statement by statement: executescript() would commit the surrounding transaction
    for stmt in _SCHEMA.split(";"):
        if stmt.strip():
            db.execute(stmt)


_MIGRATIONS = {0: _migrate_v0}

# rows holding content `hash` that needs no reading for `model_id` (a vector, or a recorded failure),
# the row with id ? first
_KNOWN_CONTENT = (
    "SELECT f.id, duration, sample_rate, channels, status, error FROM files f WHERE hash = ? AND"
    " (status = 'error' OR EXISTS(SELECT 1 FROM vectors v WHERE v.file_id = f.id AND v.model_id = ?))"
    " ORDER BY (f.id = ?) DESC, f.id")  # from version -> function bringing it to version + 1


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    n = np.linalg.norm(x, axis=-1, keepdims=True)
    return (x / np.maximum(n, 1e-12)).astype(np.float32)


def _can_write(folder: Path) -> bool:
    """Create `folder` if needed and try to write a file there (the only reliable test, e.g. as root)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
        return True
    except OSError:
        return False


def catalog_dir_for(root: PathLike) -> Path:
    """Where the catalog of `root` lives: `<root>/.earshot`, or the user data dir when root is read-only."""
    root = Path(os.path.abspath(root))
    local = root / CATALOG_DIR
    if _can_write(local):
        return local
    digest = hashlib.sha256(os.fsencode(root)).hexdigest()[:16]
    fallback = Path(user_data_dir(APP_NAME, appauthor=False)) / "libraries" / digest
    fallback.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        (fallback / "library.txt").write_text(display_name(root) + "\n", encoding="utf-8")
    return fallback


@dataclass
class _Row:
    id: int
    path: bytes
    size: int
    mtime_ns: int
    hash: str | None
    status: str
    has_vector: bool


class Library:
    """A folder of sounds with its catalog and per-model vector indexes. Thread-safe (one lock)."""

    def __init__(self, root: Path, catalog_dir: Path, db: sqlite3.Connection, index_config: IndexConfig) -> None:
        self.root = root
        self.catalog_dir = catalog_dir
        self.db = db
        self.index_config = index_config
        self.events: list[str] = []  # what opening had to repair, for logs and tests
        self._lock = threading.RLock()
        self._indexes: dict[str, VectorIndex] = {}
        self._dirty: set[str] = set()  # models whose in-memory index differs from its file
        self._indexing = False

    # ---------------------------------------------------------------------------------------- open/close

    @classmethod
    def open(cls, root: PathLike, index_config: IndexConfig | None = None) -> Library:
        root = Path(os.path.abspath(root))
        if not root.is_dir():
            raise LibraryError(f"{display_name(root)}: not a folder")
        catalog_dir = catalog_dir_for(root)
        events = []
        for stale in catalog_dir.glob(".index-*.tmp"):  # an interrupted index write
            with contextlib.suppress(OSError):
                stale.unlink()
        path = catalog_dir / CATALOG_NAME
        try:
            db = cls._connect(path)
        except sqlite3.DatabaseError as e:
            if isinstance(e, sqlite3.OperationalError):  # locked, disk full, ...: not damage, say so
                raise LibraryError(f"{display_name(path)}: cannot open the catalog ({e})") from None
            # "not a database" / "malformed": indexing again re-creates it; keep the old file for inspection
            aside = path.with_name(f"{CATALOG_NAME}.damaged-{int(time.time())}")
            os.replace(path, aside)
            for name in (f"{CATALOG_NAME}-wal", f"{CATALOG_NAME}-shm", *[p.name for p in
                                                                          catalog_dir.glob("index-*.faiss")]):
                with contextlib.suppress(OSError):
                    (catalog_dir / name).unlink()
            events.append(f"damaged catalog ({e}) moved to {aside.name}; starting a new one")
            db = cls._connect(path)
        lib = cls(root, catalog_dir, db, index_config or IndexConfig())
        lib.events.extend(events)
        return lib

    @staticmethod
    def _connect(path: Path) -> sqlite3.Connection:
        db = sqlite3.connect(os.fsencode(path), isolation_level=None, check_same_thread=False, timeout=30)
        try:
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: durable across process crashes
            db.execute("PRAGMA foreign_keys = ON")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise LibraryError(f"{display_name(path)}: catalog version {version} was written by a newer "
                                   f"Earshot (this one reads up to {SCHEMA_VERSION})")
            has_files = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'files'"
                                   ).fetchone()
            if version < SCHEMA_VERSION:
                db.execute("BEGIN IMMEDIATE")
                try:
                    if not has_files:
                        _create_schema(db)
                    else:
                        for v in range(version, SCHEMA_VERSION):
                            _MIGRATIONS[v](db)
                    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                    db.execute("COMMIT")
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
            db.execute("SELECT count(*) FROM files").fetchone()  # a damaged file fails here at the latest
        except BaseException:
            db.close()
            raise
        return db

    def close(self) -> None:
        with self._lock:
            if self.db is None:
                return
            for model_id in list(self._dirty):
                self._save_index(model_id)
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
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")

    # ------------------------------------------------------------------------------------------- models

    def _register_model(self, e: Embedder) -> None:
        with self._tx() as db:
            row = db.execute("SELECT dim, sample_rate, window_seconds FROM models WHERE model_id = ?",
                             (e.model_id,)).fetchone()
            if row is None:
                db.execute("INSERT INTO models VALUES (?, ?, ?, ?)",
                           (e.model_id, int(e.dim), int(e.sample_rate), float(e.window_seconds)))
            elif row[0] != e.dim:
                raise LibraryError(f"model {e.model_id!r} has {e.dim}-d vectors but the catalog holds {row[0]}-d")
            elif row[1] != e.sample_rate or row[2] != e.window_seconds:
                db.execute("UPDATE models SET sample_rate = ?, window_seconds = ? WHERE model_id = ?",
                           (int(e.sample_rate), float(e.window_seconds), e.model_id))

    def _index_path(self, model_id: str) -> Path:
        return self.catalog_dir / f"index-{hashlib.sha256(model_id.encode()).hexdigest()[:16]}.faiss"

    def _fetch_vectors(self, model_id: str, ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(ids, vectors) from the catalog: all of a model's, or just `ids`. (N,), (N, D)"""
        if ids is None:
            rows = self.db.execute("SELECT id, vector FROM vectors WHERE model_id = ? ORDER BY id",
                                   (model_id,)).fetchall()
        else:
            rows = []
            id_list = [int(i) for i in ids]
            for i in range(0, len(id_list), 500):
                part = id_list[i:i + 500]
                rows += self.db.execute(f"SELECT id, vector FROM vectors WHERE id IN ({','.join('?' * len(part))})",
                                        part).fetchall()
        out_ids = np.array([r[0] for r in rows], dtype=np.int64)
        vecs = np.stack([np.frombuffer(r[1], dtype=np.float32) for r in rows]) if rows else None
        return out_ids, vecs

    def _index(self, model_id: str) -> VectorIndex | None:
        """The model's index, loaded once and made to agree with the catalog; None for an unknown model."""
        with self._lock:
            if model_id in self._indexes:
                return self._indexes[model_id]
            row = self.db.execute("SELECT dim FROM models WHERE model_id = ?", (model_id,)).fetchone()
            if row is None:
                return None
            dim = int(row[0])
            path = self._index_path(model_id)
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
                self._save_index(model_id)
            return vi

    def _save_index(self, model_id: str) -> None:
        """Write the model's index atomically; a failure only costs a rebuild next time."""
        with self._lock:
            vi = self._indexes.get(model_id)
            if vi is None or model_id not in self._dirty:
                return
            try:
                vi.save(self._index_path(model_id))
                self._dirty.discard(model_id)
            except OSError as e:
                self.events.append(f"could not write index: {e}")

    def index_kind(self, model_id: str) -> str | None:
        vi = self._index(model_id)
        return None if vi is None else vi.kind

    # ------------------------------------------------------------------------------------ catalog writes

    def _row_at(self, key: bytes, model_id: str) -> _Row | None:
        r = self.db.execute(
            "SELECT id, path, size, mtime_ns, hash, status,"
            " EXISTS(SELECT 1 FROM vectors v WHERE v.file_id = f.id AND v.model_id = ?)"
            " FROM files f WHERE path = ?", (model_id, key)).fetchone()
        return _Row(*r[:6], bool(r[6])) if r else None

    def _all_rows(self, model_id: str) -> dict[bytes, _Row]:
        rows = self.db.execute(
            "SELECT id, path, size, mtime_ns, hash, status,"
            " EXISTS(SELECT 1 FROM vectors v WHERE v.file_id = f.id AND v.model_id = ?)"
            " FROM files f", (model_id,)).fetchall()
        return {bytes(r[1]): _Row(r[0], bytes(r[1]), *r[2:6], bool(r[6])) for r in rows}

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

    def _store(self, model_id: str, f: ScannedFile, size: int, mtime_ns: int, digest: str | None,
               seen: set[bytes], *, meta: dict[str, Any] | None = None,
               vectors: tuple[np.ndarray, np.ndarray] | None = None, reuse: bool = False) -> str:
        """Record one file's outcome in one transaction; returns embedded|moved|copied|touched|failed|stale.

        meta: duration, sample_rate, channels, status, error of newly read content. vectors: (mean (D,),
        windows (W, D)) for `model_id`. reuse: the content (digest) is already in the catalog: take metadata
        and vector from there. A vanished row with the same digest is adopted as a move.
        """
        key = f.key
        outcome = "failed" if meta and meta["status"] == "error" else "embedded"
        with self._tx() as db:
            if reuse and db.execute(_KNOWN_CONTENT + " LIMIT 1", (digest, model_id, -1)).fetchone() is None:
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
                src = db.execute(_KNOWN_CONTENT + " LIMIT 1", (digest, model_id, target.id if target else -1)
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
                target = _Row(int(cur.lastrowid), key, size, mtime_ns, digest, "ok", False)
            db.execute("UPDATE files SET size = ?, mtime_ns = ?, hash = ?, indexed_at = ? WHERE id = ?",
                       (size, mtime_ns, digest, now, target.id))
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
        with self._lock:
            self._unindex(removed)
            if added is not None:
                vi = self._index(model_id)
                if vi is not None:
                    vi.add([added[0]], added[1][None])
                    self._dirty.add(model_id)
        return outcome

    def _delete_rows(self, file_ids: Sequence[int]) -> int:
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
        with self._lock:
            files, ok, secs = self.db.execute(
                "SELECT count(*), coalesce(sum(status = 'ok'), 0), coalesce(sum(CASE WHEN status = 'ok'"
                " THEN duration END), 0) FROM files").fetchone()
            vectors = dict(self.db.execute(
                "SELECT m.model_id, count(v.id) FROM models m LEFT JOIN vectors v ON v.model_id = m.model_id"
                " GROUP BY m.model_id").fetchall())
        return LibraryStats(self.root, self.catalog_path, files, ok, files - ok, float(secs), vectors)

    def failed_files(self) -> list[FailedFile]:
        with self._lock:
            rows = self.db.execute("SELECT id, path, error FROM files WHERE status = 'error' ORDER BY path"
                                   ).fetchall()
        return [FailedFile(os.fsdecode(bytes(p)), e or "", i) for i, p, e in rows]

    def file_id(self, path: PathLike) -> int | None:
        """Catalog id of a file given relative to the root or as an absolute path inside it."""
        key = self._rel_key(path)
        with self._lock:
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
        if self._index(embedder.model_id) is None:
            return []
        q = np.asarray(embedder.embed_text([query]), dtype=np.float32).reshape(-1)  # (D,)
        return self.search_vector(q, embedder.model_id, k, filters)

    def similar(self, path_or_file_id: PathLike | int, embedder: Embedder, k: int = 10,
                filters: SearchFilters | None = None) -> list[Hit]:
        """Files that sound like a catalogued file (excluding itself), or like any audio file outside."""
        model_id = embedder.model_id
        fid = path_or_file_id if isinstance(path_or_file_id, int) else self.file_id(path_or_file_id)
        if fid is None:
            path = Path(path_or_file_id if os.path.isabs(path_or_file_id) else self.root / path_or_file_id)
            if not path.is_file():
                raise LibraryError(f"{display_name(path)}: not in the library")
            mean, _ = embed_file(path, embedder)
            return self.search_vector(mean, model_id, k, filters)
        with self._lock:
            r = self.db.execute("SELECT vector FROM vectors WHERE file_id = ? AND model_id = ?",
                                (fid, model_id)).fetchone()
        if r is None:
            raise LibraryError(f"file {fid} has no vector for model {model_id!r} (index the library first)")
        return self.search_vector(np.frombuffer(r[0], dtype=np.float32), model_id, k, filters, exclude=[fid])

    def search_vector(self, query: np.ndarray, model_id: str, k: int = 10, filters: SearchFilters | None = None,
                      exclude: Sequence[int] = ()) -> list[Hit]:
        """Top-k files by cosine similarity to `query` (D,), with optional filters, excluding file ids."""
        q = _normalise(np.asarray(query, dtype=np.float32).reshape(-1))  # (D,)
        with self._lock:
            vi = self._index(model_id)
            if vi is None or len(vi) == 0 or k <= 0:
                return []
            if len(q) != vi.dim:
                raise LibraryError(f"query has {len(q)} dimensions, model {model_id!r} has {vi.dim}")
            allowed = self._allowed_ids(model_id, filters) if filters is not None and filters.active else None
            if allowed is not None and not len(allowed):
                return []
            scores, ids = vi.search(q[None], k + len(exclude), allowed)  # (1, k')
            found = [(int(i), float(s)) for i, s in zip(ids[0], scores[0], strict=True) if i >= 0]
            if not found:
                return []
            rows = {r[0]: r for r in self.db.execute(
                "SELECT v.id, f.id, f.path, f.duration, v.windows, m.window_seconds FROM vectors v"
                " JOIN files f ON f.id = v.file_id JOIN models m ON m.model_id = v.model_id"
                f" WHERE v.id IN ({','.join('?' * len(found))})", [i for i, _ in found])}
        hits = []
        for vid, score in found:
            r = rows.get(vid)
            if r is None or r[1] in exclude:
                continue
            rel = os.fsdecode(bytes(r[2]))
            windows = np.frombuffer(r[4], dtype=np.float32).reshape(-1, len(q))  # (W, D)
            wscores = windows @ q  # (W,)
            best = int(np.argmax(wscores)) if len(wscores) else 0
            hits.append(Hit(
                path=self.root / rel, score=score, duration=float(r[3] or 0.0), folder=rel.rpartition("/")[0],
                best_window_start_s=best * float(r[5]), window_scores=wscores.tolist(), file_id=r[1],
                rel_path=rel))
            if len(hits) == k:
                break
        return hits

    def _allowed_ids(self, model_id: str, filters: SearchFilters) -> np.ndarray:
        where, args = ["v.model_id = ?", "f.status = 'ok'"], [model_id]
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
        rows = self.db.execute("SELECT v.id FROM vectors v JOIN files f ON f.id = v.file_id WHERE "
                               + " AND ".join(where), args).fetchall()
        return np.array([r[0] for r in rows], dtype=np.int64)

    # ------------------------------------------------------------------------------------------- indexing

    def index(self, embedder: Embedder, **kwargs: Any) -> Job[IndexReport]:
        return index_library(self, embedder, **kwargs)


# -------------------------------------------------------------------------------------------- embedding


def _windows_of(path: PathLike, embedder: Embedder, batch: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(windows (w, S), coverage (w,)) batches of a file, streamed; coverage = real-audio fraction."""
    size = round(embedder.window_seconds * embedder.sample_rate)
    buf: list[np.ndarray] = []
    cover: list[float] = []
    for block in iter_blocks(path, embedder.sample_rate, embedder.window_seconds, pad_last=False):
        cover.append(len(block) / size)
        buf.append(block if len(block) == size else np.pad(block, (0, size - len(block))))
        if len(buf) == batch:
            yield np.stack(buf), np.array(cover, dtype=np.float32)
            buf, cover = [], []
    if buf:
        yield np.stack(buf), np.array(cover, dtype=np.float32)


def _pool(windows: np.ndarray, cover: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Coverage-weighted mean of raw window vectors, L2-normalised, and normalised windows. (D,), (W, D)"""
    mean = (cover[:, None] * windows).sum(0) / max(float(cover.sum()), 1e-12)
    return _normalise(mean), _normalise(windows)


def _embed(embedder: Embedder, windows: np.ndarray) -> np.ndarray:
    out = np.asarray(embedder.embed_windows(windows), dtype=np.float32)
    if out.shape != (len(windows), embedder.dim):
        raise ValueError(f"embedder returned shape {out.shape} for {len(windows)} windows, "
                         f"expected ({len(windows)}, {embedder.dim})")
    return out


def embed_file(path: PathLike, embedder: Embedder, batch: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """(file vector (D,), window vectors (W, D)) of one file, streamed window by window."""
    vecs, covers = [], []
    for windows, cover in _windows_of(path, embedder, batch):
        vecs.append(_embed(embedder, windows))
        covers.append(cover)
    return _pool(np.concatenate(vecs), np.concatenate(covers))


# ---------------------------------------------------------------------------------------- the index job


@dataclass
class _Task:
    file: ScannedFile
    digest: str | None = None  # known and unchanged: no need to hash again
    tries: int = 0  # times re-queued because the file changed while it was read
    reuse: bool = True  # False: read it even if its content is known


@dataclass
class _Pending:
    """Windows of one file embedded so far."""

    vectors: list[np.ndarray] = field(default_factory=list)  # [(w, D)]
    cover: list[np.ndarray] = field(default_factory=list)  # [(w,)]
    done: tuple[Any, ...] | None = None  # (digest, info, stat) once the reader finished


class _Reader:
    """Runs in the thread pool: hash a file, then decode it into batches of windows onto the queue."""

    def __init__(self, embedder: Embedder, known: frozenset[str], batch: int, out: queue.Queue,
                 stop: threading.Event) -> None:
        self.embedder, self.known, self.batch, self.out, self.stop = embedder, known, batch, out, stop

    def put(self, msg: tuple[Any, ...]) -> bool:
        while not self.stop.is_set():
            try:
                self.out.put(msg, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __call__(self, idx: int, task: _Task) -> None:
        path, digest, st0 = task.file.path, task.digest, None
        try:
            st0 = _stat(path)
            digest = digest or hash_file(path, self.stop)
            if digest is None:
                return  # stopped
            if digest in self.known and task.reuse:
                self.put(("known", idx, digest, st0))
                return
            info = audio_info(path)
            for windows, cover in _windows_of(path, self.embedder, self.batch):
                if self.stop.is_set() or not self.put(("windows", idx, windows, cover)):
                    return
            if self._changed(path, st0):
                self.put(("changed", idx))
                return
            self.put(("done", idx, digest, info, st0))
        except FileNotFoundError:
            self.put(("gone", idx))
        except Exception as e:
            if not os.path.lexists(path):
                self.put(("gone", idx))
            elif st0 is not None and self._changed(path, st0):
                self.put(("changed", idx))
            else:
                if isinstance(e, AudioError):
                    message = str(e)
                elif isinstance(e, OSError):
                    message = _os_message(path, e)
                else:
                    message = f"{display_name(path)}: unexpected error ({e!r})"
                # name the file relative to the library, which may move
                message = message.replace(display_name(path), display_name(task.file.rel))
                self.put(("error", idx, digest, message, st0))

    @staticmethod
    def _changed(path: str, st0: os.stat_result) -> bool:
        try:
            st1 = _stat(path)
        except OSError:
            return True
        return (st1.st_size, st1.st_mtime_ns) != (st0.st_size, st0.st_mtime_ns)


class _IndexRun:
    """State of one `index_library` run; the generator is `run()`."""

    def __init__(self, lib: Library, embedder: Embedder, workers: int, batch_size: int, queue_size: int,
                 checkpoint_seconds: float, include_hidden: bool, retry_failed: bool, max_requeue: int) -> None:
        self.lib, self.embedder, self.model_id = lib, embedder, embedder.model_id
        self.workers, self.batch_size, self.checkpoint_seconds = max(1, workers), batch_size, checkpoint_seconds
        self.include_hidden, self.retry_failed, self.max_requeue = include_hidden, retry_failed, max_requeue
        self.report = IndexReport(self.model_id)
        self.t0 = time.monotonic()
        self.stop = threading.Event()
        self.out: queue.Queue = queue.Queue(maxsize=max(1, queue_size))
        self.pool: ThreadPoolExecutor | None = None
        self.reader: _Reader | None = None
        self.tasks: list[_Task] = []
        self.seen: set[bytes] = set()  # relative paths present in the folder
        self.state: dict[int, _Pending] = {}  # files being embedded
        self.batch: list[tuple[int, np.ndarray, np.ndarray]] = []  # (task, windows (w, S), coverage (w,))
        self.done = self.done_bytes = self.total_bytes = 0
        self.outstanding = 0  # tasks the readers have not finished

    # ------------------------------------------------------------------------------------------ planning

    def plan(self) -> frozenset[str]:
        """Decide which files to read; drop rows that cannot have moved; return the hashes known already."""
        lib, r = self.lib, self.report
        scan = scan_folder(lib.root, self.include_hidden)
        r.files_seen, r.scan_errors = len(scan.files), scan.errors
        lib._register_model(self.embedder)
        lib._index(self.model_id)  # load and repair before changing anything
        with lib._lock:
            rows = lib._all_rows(self.model_id)
        self.seen = {f.key for f in scan.files}
        for f in scan.files:
            row = rows.get(f.key)
            if row is None or (row.size, row.mtime_ns) != (f.size, f.mtime_ns):
                self.tasks.append(_Task(f))
            elif (row.status == "ok" and row.has_vector) or (
                    row.status == "error" and row.hash is not None and not self.retry_failed):
                r.unchanged += 1  # unreadable files (no hash) are retried: permissions change without mtime
            else:
                self.tasks.append(_Task(f, row.hash if row.status == "ok" else None))
        # vanished rows whose size matches no file to read cannot have moved: drop them now
        sizes = {t.file.size for t in self.tasks}
        r.removed += lib._delete_rows([w.id for k, w in rows.items() if k not in self.seen and w.size not in sizes])
        self.total_bytes = sum(t.file.size for t in self.tasks) or 1
        return frozenset(w.hash for w in rows.values()
                         if w.hash and (w.has_vector or (w.status == "error" and not self.retry_failed)))

    # -------------------------------------------------------------------------------------------- running

    def progress(self, message: str) -> Progress:
        elapsed = time.monotonic() - self.t0
        eta = elapsed * (self.total_bytes - self.done_bytes) / self.done_bytes if self.done_bytes else None
        n = len(self.tasks)
        return {"step": self.done, "total": n, "files_done": self.done, "files_total": n,
                "audio_seconds": self.report.audio_seconds, "eta_s": eta, "message": message}

    def run(self) -> Job[IndexReport]:
        yield {**self.progress("scanning folder"), "eta_s": None}
        self.reader = reader = _Reader(self.embedder, self.plan(), self.batch_size, self.out, self.stop)
        self.pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="earshot-index")
        for i, t in enumerate(self.tasks):
            self.pool.submit(reader, i, t)
        self.outstanding = len(self.tasks)
        last_beat = last_save = time.monotonic()
        while self.outstanding or self.state:
            try:
                msg = self.out.get(timeout=0.05 if self.batch else 0.25)
            except queue.Empty:
                msg = None
            if msg is None:  # the readers are behind: embed what we have; let the runner pause/cancel
                if self.batch or any(p.done for p in self.state.values()):
                    self.flush()
                    yield self.progress(f"embedded {self.done}/{len(self.tasks)} files")
                elif time.monotonic() - last_beat > 0.5:
                    last_beat = time.monotonic()
                    yield self.progress("reading files")
                continue
            if self.handle(msg):
                yield self.progress(display_name(self.tasks[msg[1]].file.rel))
            if time.monotonic() - last_save > self.checkpoint_seconds:
                self.lib._save_index(self.model_id)
                last_save = time.monotonic()
        # what vanished and was not found elsewhere leaves the catalog and the index
        with self.lib._lock:
            rows = self.lib._all_rows(self.model_id)
        self.report.removed += self.lib._delete_rows([w.id for k, w in rows.items() if k not in self.seen])
        self.lib._save_index(self.model_id)
        self.report.elapsed_s = time.monotonic() - self.t0
        yield {**self.progress("done"), "step": len(self.tasks)}
        return self.report

    def shutdown(self) -> None:
        self.stop.set()
        if self.pool is not None:
            # readers see `stop` within ~0.1 s (even when blocked on the full queue); queued tasks are dropped
            self.pool.shutdown(wait=True, cancel_futures=True)
            with contextlib.suppress(queue.Empty):
                while True:
                    self.out.get_nowait()
        if self.lib.db is not None:
            self.lib._save_index(self.model_id)

    # ------------------------------------------------------------------------------------------ messages

    def handle(self, msg: tuple[Any, ...]) -> bool:
        """Act on one reader message; True when there is progress to report."""
        kind, i = msg[0], msg[1]
        t = self.tasks[i]
        if kind == "windows":
            new = len(msg[2])
            flushed = bool(self.batch) and sum(len(w) for _, w, _ in self.batch) + new > self.batch_size
            if flushed:
                self.flush()
            self.state.setdefault(i, _Pending())
            self.batch.append((i, msg[2], msg[3]))
            return flushed
        if kind == "done":
            self.state.setdefault(i, _Pending()).done = msg[2:]
            self.outstanding -= 1
            if sum(len(w) for _, w, _ in self.batch) >= self.batch_size:
                self.flush()
                return True
            return False
        self.forget(i)
        if kind == "changed":
            self.report.requeued += 1
            if t.tries < self.max_requeue:
                t.tries, t.digest = t.tries + 1, None
                self.pool.submit(self.reader, i, t)
                return False
            msg = ("error", i, None, f"{display_name(t.file.rel)}: the file kept changing while it was being "
                   "indexed", None)
            kind = "error"
        if kind == "known":
            if not self.store_known(t, *msg[2:]):
                t.reuse = False  # its content was replaced meanwhile: read it after all
                self.pool.submit(self.reader, i, t)
                return False
        elif kind == "error":
            self.store_error(t, *msg[2:])
        elif kind == "gone":
            self.seen.discard(t.file.key)
        self.outstanding -= 1
        self.done, self.done_bytes = self.done + 1, self.done_bytes + t.file.size
        return True

    def forget(self, i: int) -> None:
        """Drop what was read of a file (it changed, failed late, or is known after all)."""
        if self.state.pop(i, None) is not None:
            self.batch[:] = [b for b in self.batch if b[0] != i]

    def flush(self) -> None:
        """Embed the batch, then commit the files whose windows are all embedded."""
        if self.batch:
            vecs = _embed(self.embedder, np.concatenate([w for _, w, _ in self.batch]))  # (B, D)
            start = 0
            for i, w, c in self.batch:
                self.state[i].vectors.append(vecs[start:start + len(w)])
                self.state[i].cover.append(c)
                start += len(w)
            self.batch.clear()
        for i in [i for i, p in self.state.items() if p.done is not None]:
            self.store_embedded(i)

    # ---------------------------------------------------------------------------------------- committing

    def store_embedded(self, i: int) -> None:
        t, p = self.tasks[i], self.state.pop(i)
        digest, info, st = p.done
        vecs, cover = np.concatenate(p.vectors), np.concatenate(p.cover)  # (W, D), (W,)
        meta = {"duration": info.duration, "sample_rate": info.sample_rate, "channels": info.channels,
                "status": "ok", "error": None}
        if not np.isfinite(vecs).all():
            meta.update(status="error", error=f"{display_name(t.file.rel)}: the model produced NaN/inf")
            self.lib._store(self.model_id, t.file, st.st_size, st.st_mtime_ns, digest, self.seen, meta=meta)
            self.report.failed.append(FailedFile(t.file.rel, meta["error"]))
        else:
            outcome = self.lib._store(self.model_id, t.file, st.st_size, st.st_mtime_ns, digest, self.seen,
                                      meta=meta, vectors=_pool(vecs, cover))
            (self.report.moved if outcome == "moved" else self.report.embedded).append(t.file.rel)
            self.report.windows += len(vecs)
            self.report.audio_seconds += info.duration
        self.done, self.done_bytes = self.done + 1, self.done_bytes + t.file.size

    def store_known(self, t: _Task, digest: str, st: os.stat_result) -> bool:
        """Content already catalogued (moved, copied, touched); False if it no longer is."""
        lib, r = self.lib, self.report
        outcome = lib._store(self.model_id, t.file, st.st_size, st.st_mtime_ns, digest, self.seen, reuse=True)
        if outcome == "stale":
            return False
        if outcome == "failed":
            with lib._lock:
                err = lib.db.execute("SELECT error FROM files WHERE path = ?", (t.file.key,)).fetchone()
            r.failed.append(FailedFile(t.file.rel, err[0] if err else ""))
        elif outcome == "touched":
            r.touched += 1
        else:
            (r.moved if outcome == "moved" else r.copied).append(t.file.rel)
        return True

    def store_error(self, t: _Task, digest: str | None, message: str, st: os.stat_result | None) -> None:
        size, mtime_ns = (st.st_size, st.st_mtime_ns) if st else (t.file.size, t.file.mtime_ns)
        meta = {"duration": None, "sample_rate": None, "channels": None, "status": "error", "error": message}
        self.lib._store(self.model_id, t.file, size, mtime_ns, digest, self.seen, meta=meta)
        self.report.failed.append(FailedFile(t.file.rel, message))


def index_library(
    library: Library | PathLike,
    embedder: Embedder,
    *,
    workers: int = 2,
    batch_size: int = 16,
    queue_size: int = 4,
    checkpoint_seconds: float = 60.0,
    include_hidden: bool = False,
    retry_failed: bool = False,
    max_requeue: int = 2,
) -> Job[IndexReport]:
    """Bring the catalog and `embedder`'s index up to date with the folder; returns an IndexReport.

    Only new and changed files are read. `workers` threads hash and decode ahead of the embedder through a
    bounded queue (`queue_size` batches of up to `batch_size` windows); this generator embeds in batches
    and commits each file in its own transaction. The index file is written every `checkpoint_seconds`, at
    the end, and when the job is cancelled (closed). One indexing job per Library at a time.
    """
    own = not isinstance(library, Library)
    lib = Library.open(library) if own else library
    with lib._lock:
        if lib._indexing:
            if own:
                lib.close()
            raise LibraryError(f"{display_name(lib.root)} is already being indexed")
        lib._indexing = True
    job = _IndexRun(lib, embedder, workers, batch_size, queue_size, checkpoint_seconds, include_hidden,
                    retry_failed, max_requeue)
    try:
        return (yield from job.run())
    finally:
        try:
            job.shutdown()
        finally:
            lib._indexing = False
            if own:
                lib.close()
