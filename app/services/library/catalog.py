"""The SQLite catalog: where it lives, its schema, versioned migrations, connecting, and the row record.

`<library>/.earshot/catalog.sqlite`, or `<user data dir>/libraries/<sha256(abs path)[:16]>/` when the library
folder cannot be written. SQLite in WAL mode; every file's result is one transaction, so a crash (even
kill -9) loses at most the file in flight. The catalog is the source of truth; the FAISS files next to it
are caches. `PRAGMA user_version` is the schema version: `MIGRATIONS[v]` brings a catalog from version v to
v + 1 inside one transaction, so adding a table (e.g. a text channel) is one more function and one more
version.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from platformdirs import user_data_dir

from app.services.audio import display_name
from app.services.library.records import LibraryError, PathLike
from app.services.library.scan import CATALOG_DIR

APP_NAME = "earshot"
CATALOG_NAME = "catalog.sqlite"

# version 1: files, models, vectors
_SCHEMA_V1 = """
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


def _execute_script(db: sqlite3.Connection, script: str) -> None:
    # statement by statement: executescript() would commit the surrounding transaction
    for stmt in script.split(";"):
        if stmt.strip():
            db.execute(stmt)


def create_v1(db: sqlite3.Connection) -> None:
    _execute_script(db, _SCHEMA_V1)


def _migrate_v0(db: sqlite3.Connection) -> None:
    """v0 (the prototype): files(path TEXT PRIMARY KEY, size, mtime REAL seconds, sha256, duration) and
    embeddings(path TEXT, model TEXT, vector BLOB float32), no per-window vectors, no error rows."""
    db.execute("ALTER TABLE files RENAME TO files_v0")
    has_embeddings = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'embeddings'").fetchone()
    if has_embeddings:
        db.execute("ALTER TABLE embeddings RENAME TO embeddings_v0")
    create_v1(db)
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
            v = normalise(np.frombuffer(blob, dtype=np.float32))
            # sample rate and window length were not recorded: 0 until an embedder of this model registers
            db.execute("INSERT OR IGNORE INTO models(model_id, dim, sample_rate, window_seconds)"
                       " VALUES (?, ?, 0, 0)", (model, len(v)))
            db.execute("INSERT OR IGNORE INTO vectors(model_id, file_id, vector, n_windows, windows)"
                       " VALUES (?, ?, ?, 1, ?)", (model, row[0], v.tobytes(), v.tobytes()))
        db.execute("DROP TABLE embeddings_v0")
    db.execute("DROP TABLE files_v0")


# MIGRATIONS[v]: catalog at version v -> v + 1. A new catalog is created at version 1 and migrated up.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {0: _migrate_v0}
SCHEMA_VERSION = max(MIGRATIONS) + 1

# rows holding content `hash` that needs no reading for `model_id` (a vector, or a recorded failure),
# the row with id ? first
KNOWN_CONTENT = (
    "SELECT f.id, duration, sample_rate, channels, status, error FROM files f WHERE hash = ? AND"
    " (status = 'error' OR EXISTS(SELECT 1 FROM vectors v WHERE v.file_id = f.id AND v.model_id = ?))"
    " ORDER BY (f.id = ?) DESC, f.id")


@dataclass
class CatalogRow:
    """One file's row, as the indexer needs it (has_vector: for the model the rows were read for)."""

    id: int
    path: bytes
    size: int
    mtime_ns: int
    hash: str | None
    status: str
    has_vector: bool


def normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    n = np.linalg.norm(x, axis=-1, keepdims=True)
    return (x / np.maximum(n, 1e-12)).astype(np.float32)


def can_write(folder: Path) -> bool:
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
    if can_write(local):
        return local
    digest = hashlib.sha256(os.fsencode(root)).hexdigest()[:16]
    fallback = Path(user_data_dir(APP_NAME, appauthor=False)) / "libraries" / digest
    fallback.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        (fallback / "library.txt").write_text(display_name(root) + "\n", encoding="utf-8")
    return fallback


def connect(path: Path) -> sqlite3.Connection:
    """Open (creating or migrating) the catalog at `path`. Raises sqlite3.DatabaseError for a damaged file,
    LibraryError for a catalog written by a newer Earshot."""
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
            with transaction(db):
                if not has_files:
                    create_v1(db)
                    version = 1
                for v in range(version, SCHEMA_VERSION):
                    MIGRATIONS[v](db)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("SELECT count(*) FROM files").fetchone()  # a damaged file fails here at the latest
    except BaseException:
        db.close()
        raise
    return db


@contextlib.contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE ... COMMIT; rolled back on any error."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
