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
import struct
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
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


# MIGRATIONS[v]: catalog at version v -> v + 1. A new catalog is created at version 1 and migrated up.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {0: _migrate_v0, 1: _migrate_v1, 2: _migrate_v2}
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
        db.execute("PRAGMA secure_delete = ON")  # deleted rows are zeroed: salvage cannot bring them back
        if _schema_version(db, path) < SCHEMA_VERSION:
            upgrade(db, path)
        db.execute("SELECT count(*) FROM files").fetchone()  # a damaged file fails here at the latest
    except BaseException:
        db.close()
        raise
    return db


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


# ----------------------------------------------------------- reading records off the pages themselves
# When a table's root or interior page is damaged, SQL cannot reach its intact leaf pages. SQLite's file
# format is documented (https://www.sqlite.org/fileformat2.html) and stable: walk every page, parse the live
# cells of table-leaf pages (skipping the freelist, which holds deleted rows), and recognise our rows by shape.


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    """(value, next offset) of the SQLite varint at buf[i]."""
    v = 0
    for k in range(8):
        b = buf[i + k]
        v = (v << 7) | (b & 0x7F)
        if b < 0x80:
            return v, i + k + 1
    return (v << 8) | buf[i + 8], i + 9


def _decode_record(payload: bytes) -> tuple:
    header_size, i = _varint(payload, 0)
    types = []
    while i < header_size:
        t, i = _varint(payload, i)
        types.append(t)
    out, pos = [], header_size
    for t in types:
        if t == 0:
            out.append(None)
        elif 1 <= t <= 6:
            n = (1, 2, 3, 4, 6, 8)[t - 1]
            out.append(int.from_bytes(payload[pos:pos + n], "big", signed=True))
            pos += n
        elif t == 7:
            out.append(struct.unpack(">d", payload[pos:pos + 8])[0])
            pos += 8
        elif t in (8, 9):
            out.append(t - 8)
        elif t >= 12:
            n = (t - 12) // 2
            raw = payload[pos:pos + n]
            out.append(raw if t % 2 == 0 else raw.decode("utf-8"))
            pos += n
        else:
            raise ValueError("reserved serial type")
    if pos > len(payload):
        raise ValueError("record runs past its payload")
    return tuple(out)


def _page_records(path: Path) -> Iterator[tuple[int, tuple]]:
    """(rowid, record) of every live cell on every table-leaf page that parses; damaged ones are skipped."""
    data = path.read_bytes()
    if len(data) < 100:
        return
    trunk = 0
    if data.startswith(b"SQLite format 3\0"):
        ps = int.from_bytes(data[16:18], "big")
        ps = 65536 if ps == 1 else ps
        usable, trunk = ps - data[20], int.from_bytes(data[32:36], "big")
    else:  # the header page itself is damaged: the page size we create catalogs with, freelist unknown
        ps = usable = 4096
    n_pages = len(data) // ps
    page = lambda n: data[(n - 1) * ps:n * ps]  # noqa: E731 - 1-based page numbers, as in the format
    free: set[int] = set()
    budget = n_pages
    while 0 < trunk <= n_pages and trunk not in free and budget > 0:  # the freelist: deleted rows live there
        free.add(trunk)
        t = page(trunk)
        count = min(int.from_bytes(t[4:8], "big"), (usable - 8) // 4)
        free.update(int.from_bytes(t[8 + 4 * k:12 + 4 * k], "big") for k in range(count))
        trunk, budget = int.from_bytes(t[0:4], "big"), budget - 1
    max_local = usable - 35
    min_local = (usable - 12) * 32 // 255 - 23
    for n in range(1, n_pages + 1):
        if n in free:
            continue
        p = page(n)
        base = 100 if n == 1 else 0
        if p[base] != 0x0D:  # table leaf
            continue
        n_cells = int.from_bytes(p[base + 3:base + 5], "big")
        for c in range(n_cells):
            try:
                off = int.from_bytes(p[base + 8 + 2 * c:base + 10 + 2 * c], "big")
                size, i = _varint(p, off)
                rowid, i = _varint(p, i)
                if size <= max_local:
                    payload = p[i:i + size]
                else:
                    k = min_local + (size - min_local) % (usable - 4)
                    local = k if k <= max_local else min_local
                    chunks, nxt = [p[i:i + local]], int.from_bytes(p[i + local:i + local + 4], "big")
                    got, seen = local, set()
                    while got < size and 0 < nxt <= n_pages and nxt not in seen:
                        seen.add(nxt)
                        o = page(nxt)
                        chunks.append(o[4:usable][:size - got])
                        got += len(chunks[-1])
                        nxt = int.from_bytes(o[0:4], "big")
                    payload = b"".join(chunks)
                if len(payload) != size:
                    continue
                yield rowid, _decode_record(payload)
            except (IndexError, ValueError, struct.error, UnicodeDecodeError):
                continue


def _recognise(record: tuple) -> str | None:
    """Which of our tables a raw record belongs to, by its shape (None: another table, or garbage)."""
    n = len(record)
    if n in (11, 12, 13) and isinstance(record[1], bytes) and record[8] in ("ok", "error") and all(
            isinstance(record[k], int) for k in (2, 3)):
        return "files"
    if n == 6 and isinstance(record[1], str) and isinstance(record[2], int) and isinstance(record[3], bytes) \
            and isinstance(record[4], int) and isinstance(record[5], bytes):
        return "vectors"
    if n in (4, 5) and isinstance(record[0], str) and isinstance(record[1], int) and isinstance(record[2], int) \
            and isinstance(record[3], float | int):
        return "models"
    return None


def _raw_rows(path: Path) -> dict[str, list[tuple]]:
    """Rows of files/vectors/models found on the pages, in the column order of _SALVAGE."""
    found: dict[str, list[tuple]] = {"files": [], "vectors": [], "models": []}
    try:
        records = list(_page_records(path))
    except OSError:
        return found
    for rowid, rec in sorted(records, key=lambda r: -r[0]):  # newest first: it wins any UNIQUE conflict
        kind = _recognise(rec)
        if kind == "files":
            found["files"].append((rowid, *rec[1:11]))
        elif kind == "vectors":
            found["vectors"].append((rowid, *rec[1:6]))
        elif kind == "models":
            found["models"].append(rec[:4])
    return found


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
        with contextlib.suppress(sqlite3.DatabaseError):
            old.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the pages read below must be the latest
        raw = _raw_rows(path)
        try:
            with transaction(new):
                dims: dict[str, int] = {}
                for row in _merged(_salvage_table(old, "models"), raw["models"], key=0):
                    with contextlib.suppress(sqlite3.Error):
                        new.execute(f"INSERT INTO models({_SALVAGE['models']}) VALUES (?, ?, ?, ?)", row)
                        dims[row[0]] = int(row[1])
                        kept["models"] += 1
                file_ids = set()
                for row in _merged(_salvage_table(old, "files"), raw["files"]):
                    seen["files"] += 1
                    with contextlib.suppress(sqlite3.Error, TypeError, ValueError):
                        new.execute(f"INSERT INTO files({_SALVAGE['files']}) VALUES ({','.join('?' * 11)})", row)
                        file_ids.add(row[0])
                        kept["files"] += 1
                for row in _merged(_salvage_table(old, "vectors"), raw["vectors"]):
                    seen["vectors"] += 1
                    if row[2] in file_ids and _good_vector(row, dims):
                        with contextlib.suppress(sqlite3.Error):
                            new.execute(f"INSERT INTO vectors({_SALVAGE['vectors']}) VALUES (?, ?, ?, ?, ?, ?)", row)
                            kept["vectors"] += 1
                for table, cols in (("user_tags", "file_id, tag, added_at"), ("favourites", "file_id, added_at")):
                    _copy_user_rows(old, new, table, cols, file_ids)  # the user's own work: keep what reads
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


def _copy_user_rows(old: sqlite3.Connection, new: sqlite3.Connection, table: str, cols: str, file_ids: set[int]
                    ) -> None:
    """Rows of a user table (tags, favourites) of kept files, as far as SQL can still read them."""
    try:
        rows = old.execute(f"SELECT {cols} FROM {table}").fetchall()
    except sqlite3.DatabaseError:
        return  # an older catalog without the table, or the table itself is damaged
    for row in rows:
        if row[0] in file_ids:
            with contextlib.suppress(sqlite3.Error):
                new.execute(f"INSERT OR IGNORE INTO {table}({cols}) VALUES ({','.join('?' * len(row))})", row)


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


def _salvage_table(db: sqlite3.Connection, table: str) -> Iterator[tuple]:
    """_readable_rows, or nothing when the table cannot be read at all (e.g. not a database)."""
    try:
        yield from _readable_rows(db, table)
    except sqlite3.DatabaseError:
        return
