"""The SQLite catalog: where it lives, its schema, versioned migrations, connecting, and the row record.

`<library>/.earshot/catalog.sqlite` (opened read-only when it exists but cannot be written: a shared library),
or `<user data dir>/libraries/<sha256(abs path)[:16]>/` when the library folder cannot be written. SQLite in WAL
mode; every file's result is one transaction, so a crash (even kill -9) loses at most the file in flight. The
catalog is the source of truth; the FAISS files next to it are caches. `PRAGMA user_version` is the schema
version: `MIGRATIONS[v]` brings a catalog from version v to v + 1 inside one transaction, so adding a table
(e.g. a text channel) is one more function and one more version.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from platformdirs import user_data_dir

from app.services.library.records import LibraryError, PathLike
from app.services.library.scan import CATALOG_DIR
from core.display import display_name

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
    refused for NaN/inf outputs says why (the `models` table's `error` column); each index file's checksum
    (index_files)."""
    db.execute("ALTER TABLE files ADD COLUMN available INTEGER NOT NULL DEFAULT 1")
    db.execute("ALTER TABLE models ADD COLUMN error TEXT")
    db.execute("CREATE TABLE index_files(model_id TEXT PRIMARY KEY REFERENCES models(model_id) ON DELETE CASCADE,"
               " sha256 TEXT NOT NULL, vectors INTEGER NOT NULL)")


def _migrate_v2(db: sqlite3.Connection) -> None:
    """v3: the text channel. Each file's format (extension); its derived text (name, folder and tag words, the
    path and mtime it was derived from, what went wrong reading its tags) in `texts`, searched through the FTS5
    table `text_fts` (rowid = file id; porter stemming over unicode61; prefix indexes; BM25 weighted by column);
    the user's tags and favourites. Existing rows keep their vectors: the next index run derives their text
    without reading any audio."""
    db.execute("ALTER TABLE files ADD COLUMN format TEXT")
    for fid, path in db.execute("SELECT id, path FROM files").fetchall():
        db.execute("UPDATE files SET format = ? WHERE id = ?", (file_format(bytes(path)), fid))
    _execute_script(db, _SCHEMA_V3)
    db.execute(_TRIGGER_V3)
    db.execute("INSERT INTO text_fts(text_fts, rank) VALUES ('rank', ?)", (f"bm25({FTS_WEIGHTS})",))


# the text channel (version 3)
FTS_COLUMNS = ("name", "folder", "tags", "user_tags")
FTS_WEIGHTS = "4.0, 1.5, 1.0, 3.0"  # BM25 weight per column: a word in the name counts most, then user tags
_SCHEMA_V3 = f"""
CREATE INDEX files_format ON files(format);
CREATE INDEX files_unavailable ON files(id) WHERE available = 0;  -- "any hidden file?" on every search, at once
CREATE TABLE texts(
    file_id INTEGER PRIMARY KEY REFERENCES files(id) ON DELETE CASCADE,
    path BLOB NOT NULL,                     -- the path the name words were derived from (a rename re-derives)
    mtime_ns INTEGER NOT NULL,              -- and the mtime (new tags re-derive)
    version INTEGER NOT NULL,               -- of the derivation rules (names.py, tags.py)
    name TEXT NOT NULL,                     -- name words, UCS CatID expanded
    folder TEXT NOT NULL,                   -- folder words
    tags TEXT NOT NULL,                     -- embedded tag text
    problem TEXT,                           -- what went wrong reading the tags (the file is indexed anyway)
    embedded TEXT                           -- digest of the sentence the text vector was made from
);
CREATE TABLE user_tags(
    file_id INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
    tag TEXT NOT NULL,
    added_at REAL NOT NULL,
    PRIMARY KEY (file_id, tag)
) WITHOUT ROWID;
CREATE INDEX user_tags_tag ON user_tags(tag);
CREATE TABLE favourites(
    file_id INTEGER PRIMARY KEY REFERENCES files(id) ON DELETE CASCADE,
    added_at REAL NOT NULL
);
CREATE VIRTUAL TABLE text_fts USING fts5({", ".join(FTS_COLUMNS)},
    tokenize = 'porter unicode61 remove_diacritics 2', prefix = '2 3')
"""
# a file row that goes (deleted, or gone from the folder) takes its search text along
_TRIGGER_V3 = ("CREATE TRIGGER files_text_gone AFTER DELETE ON files"
               " BEGIN DELETE FROM text_fts WHERE rowid = old.id; END")


def file_format(key: bytes) -> str:
    """The format filter's value for a relative path: its extension, lowercased, without the dot ('wav')."""
    name = key.rsplit(b"/", 1)[-1]
    return os.fsdecode(name.rsplit(b".", 1)[-1]).lower() if b"." in name else ""


def _migrate_v3(db: sqlite3.Connection) -> None:
    """v4: the folders that were mount points when last scanned (relative, '/'-separated bytes), so that one found
    empty later (unmounted) hides its files' rows instead of deleting them."""
    db.execute("CREATE TABLE mount_points(folder BLOB PRIMARY KEY)")


def _migrate_v4(db: sqlite3.Connection) -> None:
    """v5: opening a large library without reading all of it. Each index file's size and mtime when written
    (`index_files.stat`: a file that still has them is trusted without hashing it); a generation number of the
    words of names, folders and tags (`counters.words`, bumped by triggers) and a random number of this catalog
    (`counters.catalog`: a catalog made anew starts its generations again), which key the cached vocabulary."""
    db.execute("ALTER TABLE index_files ADD COLUMN stat TEXT")
    db.execute("CREATE TABLE counters(name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID")
    db.execute("INSERT INTO counters VALUES ('words', 0)")
    db.execute("INSERT INTO counters VALUES ('catalog', abs(random()))")  # this catalog, not a rebuilt one
    for table, update in (("texts", "UPDATE OF name, folder, tags"), ("user_tags", "UPDATE")):
        for name, event in (("insert", "INSERT"), ("update", update), ("delete", "DELETE")):
            db.execute(f"CREATE TRIGGER {table}_words_{name} AFTER {event} ON {table}"
                       " BEGIN UPDATE counters SET value = value + 1 WHERE name = 'words'; END")


def _migrate_v5(db: sqlite3.Connection) -> None:
    """v6: the embedded tags split in two: `texts.tags` keeps what says what the sound is (the sentence encoder
    reads it), `texts.credits` the artist, source, tool and licence lines (keywords only). The text rule version
    changed with it, so the next index run derives every row again (no audio is read)."""
    db.execute("ALTER TABLE texts ADD COLUMN credits TEXT NOT NULL DEFAULT ''")


def _migrate_v6(db: sqlite3.Connection) -> None:
    """v7: what the sound is, from the model's category heads (core/aisfx_heads.py): `vectors.categories`, the
    file's likeliest UCS categories as 'NAME confidence' pairs joined by ';', best first (NULL: the model has no
    heads, or the vector came before them). Stored beside the vector because it comes from the same audio pass
    and goes wherever the vector goes (a move, a copy, a new content)."""
    db.execute("ALTER TABLE vectors ADD COLUMN categories TEXT")


# MIGRATIONS[v]: catalog at version v -> v + 1. A new catalog is created at version 1 and migrated up.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {0: _migrate_v0, 1: _migrate_v1, 2: _migrate_v2,
                                                               3: _migrate_v3, 4: _migrate_v4, 5: _migrate_v5,
                                                               6: _migrate_v6}
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
    duration: float | None = None  # what its header said when it was listed


SQL_CHUNK = 500  # ids per `IN (...)` list: below SQLite's bound-variable limit on every build (999 on old ones)


def id_chunks(ids: Iterable[int]) -> Iterator[tuple[list[int], str]]:
    """Ids in parts that fit one statement, each with its placeholders: ([3, 7], '?,?')."""
    ids = [int(i) for i in ids]
    for i in range(0, len(ids), SQL_CHUNK):
        part = ids[i:i + SQL_CHUNK]
        yield part, ",".join("?" * len(part))


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


def locate(root: PathLike) -> tuple[Path, bool]:
    """(where the catalog of `root` lives, whether it is read-only): `<root>/.earshot`; the same, read-only, when
    a catalog is there that cannot be written (a shared library indexed by someone else); else, when root cannot
    be written, a private one in the user data dir."""
    root = Path(os.path.abspath(root))
    check_enterable(root)
    local = root / CATALOG_DIR
    existing = local / CATALOG_NAME
    if can_write(local) and (not existing.exists() or os.access(existing, os.W_OK)):
        return local, False
    if existing.is_file():
        return local, True
    fallback = _private_dir(root)
    fallback.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        (fallback / "library.txt").write_text(display_name(root) + "\n", encoding="utf-8")
    return fallback, False


def check_enterable(root: Path) -> None:
    """LibraryError naming `root` when it cannot be entered (no execute permission): everything in it, the
    catalog included, would otherwise fail with a permission error naming a file the user never gave."""
    try:
        os.stat(root / CATALOG_DIR)
    except PermissionError:
        raise LibraryError(f"{display_name(root)}: permission denied (this folder cannot be opened)") from None
    except OSError:
        pass  # no catalog there yet, or a name too long: the callers find out


def _private_dir(root: Path) -> Path:
    """Where the catalog of a library folder that cannot be written lives: the user data dir."""
    digest = hashlib.sha256(os.fsencode(root)).hexdigest()[:16]
    return Path(user_data_dir(APP_NAME, appauthor=False)) / "libraries" / digest


def existing_catalog(root: PathLike) -> Path | None:
    """The catalog file of `root` if it was ever indexed, without creating anything (search asks before opening)."""
    root = Path(os.path.abspath(root))
    check_enterable(root)
    for folder in (root / CATALOG_DIR, _private_dir(root)):
        if (folder / CATALOG_NAME).is_file():
            return folder / CATALOG_NAME
    return None


def connect_read_only(path: Path) -> sqlite3.Connection:
    """Open a catalog that cannot be written, read-only: SQLite's `mode=ro`, or `immutable=1` when even its WAL
    index cannot be made (a read-only folder or file system). Raises sqlite3.DatabaseError for a damaged file,
    LibraryError for a catalog of another version (upgrading it needs write access)."""
    uri = Path(os.path.abspath(path)).as_uri()
    try:
        db = _connect_uri(f"{uri}?mode=ro")
    except sqlite3.OperationalError:  # "unable to open database file": no WAL index can be made
        db = _connect_uri(f"{uri}?immutable=1")
    try:
        version = _schema_version(db, path)
        if version < SCHEMA_VERSION:
            raise LibraryError(f"{display_name(path)}: catalog version {version} needs upgrading to version "
                               f"{SCHEMA_VERSION}, which needs write access to its folder")
    except BaseException:
        db.close()
        raise
    return db


def _connect_uri(uri: str) -> sqlite3.Connection:
    db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=30)
    try:
        db.execute("PRAGMA query_only = ON")
        db.execute("SELECT count(*) FROM files").fetchone()
    except BaseException:
        db.close()
        raise
    return db


def connect(path: Path) -> sqlite3.Connection:
    """Open (creating or migrating) the catalog at `path`. Raises sqlite3.DatabaseError for a damaged file,
    LibraryError for a catalog written by a newer Earshot."""
    db = sqlite3.connect(os.fsencode(path), isolation_level=None, check_same_thread=False, timeout=30)
    try:
        _use_wal(db)
        db.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: durable across process crashes
        db.execute("PRAGMA foreign_keys = ON")
        db.execute("PRAGMA secure_delete = ON")  # deleted rows are zeroed: salvage cannot bring them back
        if _schema_version(db, path) < SCHEMA_VERSION:
            upgrade(db, path)
        db.execute("SELECT count(*) FROM files").fetchone()  # a damaged file fails here at the latest
    except BaseException:
        db.close()
        raise
    return db


def _use_wal(db: sqlite3.Connection, patience_s: float = 30.0) -> None:
    """Switch to WAL. SQLite answers "database is locked" at once, without its busy handler, when two
    connections switch a new catalog's journal mode together: retried until `patience_s` has passed."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _schema_version(db: sqlite3.Connection, path: Path) -> int:
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise LibraryError(f"{display_name(path)}: catalog version {version} was written by a newer "
                           f"Earshot (this one reads up to {SCHEMA_VERSION})")
    return version


def upgrade(db: sqlite3.Connection, path: Path) -> None:
    """Bring the catalog to SCHEMA_VERSION in one write transaction. The version is read again once the write
    lock is held: a second process that opened the old catalog at the same moment waits for the first and
    then finds nothing left to do (every migration runs exactly once)."""
    with transaction(db):
        version = _schema_version(db, path)
        if version >= SCHEMA_VERSION:
            return
        if not db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'files'").fetchone():
            create_v1(db)
            version = 1
        for v in range(version, SCHEMA_VERSION):
            MIGRATIONS[v](db)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


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


# ------------------------------------------------------------------------------------------- integrity


def is_damage(e: sqlite3.DatabaseError) -> bool:
    """Does this error say the file is damaged? Locked, busy or full (OperationalError) is not, except the
    messages FTS5 gives for a keyword index it cannot read."""
    return not isinstance(e, sqlite3.OperationalError) or "vtable constructor" in str(e) or "corrupt" in str(e)


def fts_problems(db: sqlite3.Connection) -> list[str]:
    """Damage in the keyword index that `quick_check` does not see (FTS5's own integrity check); [] when sound."""
    try:
        db.execute("INSERT INTO text_fts(text_fts) VALUES ('integrity-check')")
    except sqlite3.DatabaseError as e:
        if not is_damage(e):
            raise  # locked, disk full: not damage
        return [f"keyword index: {e}"]
    return []


def quick_check(db: sqlite3.Connection) -> list[str]:
    """Problems SQLite's `PRAGMA quick_check` finds (page-level damage); [] when the file is sound."""
    try:
        rows = [r[0] for r in db.execute("PRAGMA quick_check").fetchall()]
    except sqlite3.OperationalError:
        raise  # locked, disk full: not damage
    except sqlite3.DatabaseError as e:
        return [str(e)]
    return [] if rows == ["ok"] else rows
