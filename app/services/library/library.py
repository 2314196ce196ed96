"""`Library`: a folder of sounds, its catalog, and the parts that work on it. The Library opens (and, when
damaged, salvages) the catalog and assembles the parts over one `Catalog` handle (storage.py); each part owns
its tables and gets its siblings in its constructor:

    library.vectors    the models and their vectors, one FAISS index per model (vectors.py)
    library.text       names, folders, tags -> keywords (FTS5) and sentence vectors (text_channel.py)
    library.user_tags  the user's tags and favourites (user_tags.py)
    library.files      the files table: what the indexer records, moves, copies, failures (file_table.py)
    library.search     nearest files by a model's vectors, with filters (vector_search.py)
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path

from app.services.library import catalog, clean_close
from app.services.library.catalog import CATALOG_NAME
from app.services.library.file_table import FileTable
from app.services.library.records import DiskFullError, LibraryError, LibraryStats, PathLike
from app.services.library.salvage import REREAD, SalvageReport, salvage
from app.services.library.storage import INDEX_LOCK_NAME, Catalog, busy_message, lock_held, read_only_message
from app.services.library.tag_mirror import MIRROR_NAME
from app.services.library.text_channel import TextChannel, is_text_model
from app.services.library.user_tags import UserTags
from app.services.library.vector_index import IndexConfig
from app.services.library.vector_search import VectorSearch
from app.services.library.vectors import VectorStore
from core.display import display_name


def index_refusal(root: Path | str) -> str | None:
    """Why an indexing job of the library at `root` would be refused now (a read-only catalog, another process
    indexing it), or None. Asked before a model is loaded for such a job (the job still checks and takes the lock;
    a folder that cannot be opened says so there)."""
    root = Path(os.path.abspath(root))
    try:
        if not root.is_dir():
            return None
        catalog_dir, read_only = catalog.locate(root)
    except (LibraryError, OSError):
        return None
    if read_only:
        return f"cannot index: {read_only_message(catalog_dir)}"
    return busy_message(display_name(root)) if lock_held(catalog_dir / INDEX_LOCK_NAME) else None


class Library:
    """A folder of sounds with its catalog and per-model vector indexes. Thread-safe (one lock, `lock`)."""

    def __init__(self, store: Catalog, index_config: IndexConfig) -> None:
        self.catalog = store
        self.repair: SalvageReport | None = None  # what opening a damaged catalog kept, restored and lost
        self._checked_at = time.time()  # when a full integrity check last passed (clean_close.py)
        self._check: clean_close.BackgroundCheck | None = None
        self.vectors = VectorStore(store, index_config)
        self.text = TextChannel(store, self.vectors)
        self.user_tags = UserTags(store, self.text)
        self.files = FileTable(store, self.vectors, self.text, self.user_tags)
        self.search = VectorSearch(store, self.files, self.vectors)

    # what the parts share, for the callers that open a library (the indexer, the tag editor, tests)
    root = property(lambda self: self.catalog.root)
    catalog_dir = property(lambda self: self.catalog.catalog_dir)
    catalog_path = property(lambda self: self.catalog.path)
    db = property(lambda self: self.catalog.db)
    lock = property(lambda self: self.catalog.lock)
    read_only = property(lambda self: self.catalog.read_only)
    events = property(lambda self: self.catalog.events)
    index_config = property(lambda self: self.vectors.index_config)

    def transaction(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return self.catalog.transaction()

    def guard(self) -> contextlib.AbstractContextManager[None]:
        return self.catalog.guard()

    def indexing(self) -> contextlib.AbstractContextManager[None]:
        return self.catalog.indexing()

    def indexed_elsewhere(self) -> bool:
        return self.catalog.indexed_elsewhere()

    # ---------------------------------------------------------------------------------------- open/close

    @classmethod
    def open(cls, root: PathLike, index_config: IndexConfig | None = None) -> Library:
        """Open the library at `root`, creating its catalog or bringing it up to date; a damaged catalog is
        salvaged (`repair` says what was kept, restored and lost; `events` and `notice` say it in words)."""
        root = Path(os.path.abspath(root))
        if not root.is_dir():
            raise LibraryError(f"{display_name(root)}: not a folder")
        catalog_dir, read_only = catalog.locate(root)
        if read_only:
            store = Catalog(root, catalog_dir, _connect_read_only(catalog_dir / CATALOG_NAME), read_only=True)
            store.events.append(store.read_only_message)
            return cls(store, index_config or IndexConfig())
        for stale in [*catalog_dir.glob(".index-*.tmp"), *catalog_dir.glob(f".{MIRROR_NAME}.*.tmp")]:
            with contextlib.suppress(OSError):  # an interrupted index or mirror write
                stale.unlink()
        stamp = clean_close.take_stamp(catalog_dir / CATALOG_NAME)
        db, damage = _connect_or_salvage(catalog_dir / CATALOG_NAME, check=stamp is None)
        lib = cls(Catalog(root, catalog_dir, db), index_config or IndexConfig())
        lib._checked_at = time.time() if stamp is None else stamp.checked_at
        if stamp is not None and time.time() - stamp.checked_at > clean_close.RECHECK_S:
            lib._check = clean_close.BackgroundCheck(lib.catalog_path, lib._damage_found)
        try:
            if damage is not None:
                lib._after_salvage(*damage)
            else:
                lib.user_tags.mirror_if_missing()
            lib.user_tags.merge_case_variants()  # 'Door' and 'door' from an older Earshot (or its mirror): one tag
        except BaseException:
            lib.close()
            raise
        return lib

    def _after_salvage(self, report: SalvageReport, problems: list[str]) -> None:
        """Put back from the user-tags mirror what the salvage lost, derive the text channel again (the keyword
        index is derived, never salvaged), and say what happened."""
        self.repair = report
        self.user_tags.restore(report, REREAD, self.files.placeholders)
        self.text.rebuild()
        self.user_tags.mirror()
        self.events.append(f"{report} [{'; '.join(problems)[:300]}]")

    @property
    def notice(self) -> str:
        """What opening has to tell the user (a repair, a read-only catalog), for a status line; '' when nothing."""
        if self.read_only:
            return self.read_only_message
        return f"Catalog repaired: {self.repair}" if self.repair is not None else ""

    @property
    def read_only_message(self) -> str:
        return self.catalog.read_only_message

    def close(self) -> None:
        with self.lock:
            if self.db is None:
                return
            self.vectors.save_all()
            self.text.close_reader()
            self.catalog.close()
            self.vectors.unload()
            self._stamp_clean_close()

    def _stamp_clean_close(self) -> None:
        """Say that the catalog was closed consistent, so that the next open can skip the full check."""
        check, self._check = self._check, None
        if check is not None:
            check.stop()
            if check.problems == []:
                self._checked_at = check.finished_at
        if not self.read_only and not self.catalog.damaged:
            clean_close.write_stamp(self.catalog_path, self._checked_at)

    def _damage_found(self, problems: list[str]) -> None:
        """The background check found damage: repaired when the library is opened next (no clean stamp)."""
        self.catalog.mark_damaged(f"The catalog is damaged ({'; '.join(problems)[:200]}): Earshot repairs it the "
                                  "next time this library is opened")

    @property
    def closed(self) -> bool:
        return self.catalog.closed

    def __enter__(self) -> Library:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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


def _connect_or_salvage(path: Path, check: bool = True
                        ) -> tuple[sqlite3.Connection, tuple[SalvageReport, list[str]] | None]:
    """The catalog's connection, and (what salvaging it did, SQLite's complaints) when it was damaged; `check`:
    run the full integrity check (else only what connecting reads)."""
    damage = None
    try:
        try:
            db = catalog.connect(path)
            problems = (catalog.quick_check(db) or catalog.fts_problems(db)) if check else []
        except sqlite3.OperationalError:
            raise  # locked, disk full, ...: not damage
        except sqlite3.DatabaseError as e:  # "not a database", "malformed"
            db, problems = None, [str(e)]
        if problems:
            if db is not None:
                db.close()
            damage = (salvage(path), problems)
            for index_file in path.parent.glob("index-*.faiss"):  # rebuilt from the kept vectors
                with contextlib.suppress(OSError):
                    index_file.unlink()
            db = catalog.connect(path)
    except sqlite3.OperationalError as e:
        if catalog.is_disk_full(e):
            raise DiskFullError(catalog.disk_full_message(path)) from None
        raise LibraryError(f"{display_name(path)}: cannot open the catalog ({e})") from None
    return db, damage


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """A read-only catalog's connection; a damaged one cannot be repaired without write access: a LibraryError."""
    try:
        db = catalog.connect_read_only(path)
        problems = catalog.quick_check(db)
    except sqlite3.OperationalError as e:
        raise LibraryError(f"{display_name(path)}: cannot open the read-only catalog ({e})") from None
    except sqlite3.DatabaseError as e:
        problems, db = [str(e)], None
    if problems:
        if db is not None:
            db.close()
        raise LibraryError(f"{display_name(path)}: the catalog is damaged ({'; '.join(problems)[:200]}) and "
                           "read-only: repairing it needs write access to its folder")
    return db
