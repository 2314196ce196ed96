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


def _migrate_v1(db: sqlite3.Connection) -> None:
    """v2: rows under a folder that could not be listed are kept but hidden (files.available = 0); a model
    refused for NaN/inf outputs says why (models.error); each index file's checksum (index_files)."""
    db.execute("ALTER TABLE files ADD COLUMN available INTEGER NOT NULL DEFAULT 1")
    db.execute("ALTER TABLE models ADD COLUMN error TEXT")
    db.execute("CREATE TABLE index_files(model_id TEXT PRIMARY KEY REFERENCES models(model_id) ON DELETE CASCADE,"
               " sha256 TEXT NOT NULL, vectors INTEGER NOT NULL)")


# MIGRATIONS[v]: catalog at version v -> v + 1. A new catalog is created at version 1 and migrated up.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {0: _migrate_v0, 1: _migrate_v1}
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
    """BEGIN IMMEDIATE ... COMMIT; rolled back on any error, the COMMIT's included. SQLite may already have
    rolled back by itself (e.g. on a full disk): then the original error is raised, not "cannot rollback"."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
        raise


def is_disk_full(e: BaseException) -> bool:
    return isinstance(e, sqlite3.OperationalError) and ("full" in str(e) or getattr(e, "sqlite_errorcode", 0) == 13)


def disk_full_message(path: Path) -> str:
    return (f"{display_name(path)}: the disk holding the catalog is full; everything committed before is kept "
            "— free some space and index again to resume")


# ------------------------------------------------------------------------------------- integrity, salvage


def quick_check(db: sqlite3.Connection) -> list[str]:
    """Problems SQLite's `PRAGMA quick_check` finds (page-level damage); [] when the file is sound."""
    try:
        rows = [r[0] for r in db.execute("PRAGMA quick_check").fetchall()]
    except sqlite3.OperationalError:
        raise  # locked, disk full: not damage
    except sqlite3.DatabaseError as e:
        return [str(e)]
    return [] if rows == ["ok"] else rows


# the version-1 columns every later version still has: what salvage copies
_SALVAGE = {
    "models": "model_id, dim, sample_rate, window_seconds",
    "files": "id, path, size, mtime_ns, hash, duration, sample_rate, channels, status, error, indexed_at",
    "vectors": "id, model_id, file_id, vector, n_windows, windows",
}


def _upper_rowid(db: sqlite3.Connection, table: str) -> int:
    """The highest rowid the damaged table may hold (its AUTOINCREMENT counter or max(rowid))."""
    best = 0
    for q in (f"SELECT max(rowid) FROM {table}", "SELECT seq FROM sqlite_sequence WHERE name = ?"):
        with contextlib.suppress(sqlite3.DatabaseError):
            r = db.execute(q, (table,) if "?" in q else ()).fetchone()
            best = max(best, int(r[0] or 0) if r else 0)
    return best


def _readable_rows(db: sqlite3.Connection, table: str) -> Iterator[tuple]:
    """Every row of `table` that can still be read, in rowid order; damaged pages are stepped over."""
    cols, last = _SALVAGE[table], 0
    upper = _upper_rowid(db, table)
    while True:
        try:
            r = db.execute(f"SELECT rowid, {cols} FROM {table} WHERE rowid > ? ORDER BY rowid LIMIT 1",
                           (last,)).fetchone()
        except sqlite3.DatabaseError:
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


def salvage(path: Path) -> str:
    """Rebuild a damaged catalog from every row that can still be read and checks out; the damaged file is
    kept next to it as `catalog.sqlite.damaged-<time>`. Returns what happened, for the library's events."""
    fresh = path.with_name(f"{CATALOG_NAME}.salvage")
    for p in (fresh, Path(f"{fresh}-wal"), Path(f"{fresh}-shm")):
        p.unlink(missing_ok=True)
    kept = {"models": 0, "files": 0, "vectors": 0}
    seen = {"files": 0, "vectors": 0}
    new = connect(fresh)
    try:
        old = sqlite3.connect(os.fsencode(path), isolation_level=None)
        try:
            with transaction(new):
                dims: dict[str, int] = {}
                for row in _salvage_table(old, "models"):
                    with contextlib.suppress(sqlite3.Error):
                        new.execute(f"INSERT INTO models({_SALVAGE['models']}) VALUES (?, ?, ?, ?)", row)
                        dims[row[0]] = int(row[1])
                        kept["models"] += 1
                file_ids = set()
                for row in _salvage_table(old, "files"):
                    seen["files"] += 1
                    with contextlib.suppress(sqlite3.Error, TypeError, ValueError):
                        new.execute(f"INSERT INTO files({_SALVAGE['files']}) VALUES ({','.join('?' * 11)})", row)
                        file_ids.add(row[0])
                        kept["files"] += 1
                for row in _salvage_table(old, "vectors"):
                    seen["vectors"] += 1
                    if row[2] in file_ids and _good_vector(row, dims):
                        with contextlib.suppress(sqlite3.Error):
                            new.execute(f"INSERT INTO vectors({_SALVAGE['vectors']}) VALUES (?, ?, ?, ?, ?, ?)", row)
                            kept["vectors"] += 1
                for table in ("files", "vectors"):  # ids stay never-reused
                    new.execute("UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?",
                                (_upper_rowid(old, table), table))
        finally:
            old.close()
    finally:
        new.close()
    aside = path.with_name(f"{CATALOG_NAME}.damaged-{int(time.time())}")
    os.replace(path, aside)
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
        Path(f"{fresh}{suffix}").unlink(missing_ok=True)
    os.replace(fresh, path)
    return (f"damaged catalog moved to {aside.name}; rebuilt from what was intact: kept {kept['files']} files "
            f"and {kept['vectors']} vectors ({seen['files'] - kept['files']} file rows and "
            f"{seen['vectors'] - kept['vectors']} vectors lost: index again to read those files)")


def _salvage_table(db: sqlite3.Connection, table: str) -> Iterator[tuple]:
    """_readable_rows, or nothing when the table cannot be read at all (e.g. not a database)."""
    try:
        yield from _readable_rows(db, table)
    except sqlite3.DatabaseError:
        return
