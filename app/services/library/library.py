"""`Library`: a folder of sounds, its catalog, and the parts that work on them.

A `Library` opens (and, when damaged, salvages) the SQLite catalog and owns one connection to it, its lock and
its transactions; everything else is a part it owns, each with one job, talking to the others through their
public methods:

    library.files      the files table: what the indexer records, moves, copies, failures (file_table.py)
    library.vectors    one FAISS index per model, kept in agreement with the catalog (vectors.py)
    library.search     nearest files by a model's vectors, with filters (vector_search.py)
    library.text       the text channel: names, folders, tags -> keywords (FTS5) and sentence vectors
                       (text_channel.py)
    library.user_tags  the user's tags and favourites (user_tags.py)

A text search asks it two things (candidates.py): `candidates`, each channel's candidates scored over their
union, and `hits`, the chosen files ready to show.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from app.services.audio import display_name
from app.services.library import catalog, clean_close
from app.services.library.candidates import CandidateRequest, Candidates, QueryVectors, explained_hits, gather
from app.services.library.catalog import CATALOG_NAME
from app.services.library.file_table import FileTable
from app.services.library.records import DiskFullError, Embedder, Hit, LibraryError, LibraryStats, PathLike
from app.services.library.salvage import REREAD, SalvageReport, salvage
from app.services.library.tag_mirror import MIRROR_NAME
from app.services.library.text_channel import TextChannel, is_text_model
from app.services.library.user_tags import UserTags
from app.services.library.vector_search import VectorSearch
from app.services.library.vectors import VectorStore
from app.services.vector_index import IndexConfig

INDEX_LOCK_NAME = "index.lock"  # held (flock) by the indexing job of any process
LOCK_TRIES = 5  # 0.2 s: past another job's probe of the lock, not past another job


@contextlib.contextmanager
def _process_lock(path: Path, name: str) -> Iterator[None]:
    """An exclusive advisory lock on `path` for as long as the block runs; LibraryError if another open file holds
    it (another process indexing the library: both would read and embed every file). The kernel drops it when the
    process dies, so a killed run never leaves the library locked. Without flock (Windows) or when the lock file
    cannot be made, nothing is locked: the catalog stays consistent, only the work may be done twice."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        yield
        return
    try:
        for attempt in range(LOCK_TRIES):  # `indexed_elsewhere` holds it for an instant: not an indexing job
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt == LOCK_TRIES - 1:
                    raise LibraryError(busy_message(name)) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # releases the lock


def busy_message(name: str) -> str:
    return f"{name} is already being indexed (by another Earshot window or command); try again when it has finished"


def busy_refusal(root: Path | str) -> str | None:
    """Why an indexing job of the library at `root` would be refused now (another process indexes it), or None.
    Asked before a model is loaded for such a job (the job still takes the lock; a folder that cannot be opened
    says so there)."""
    root = Path(os.path.abspath(root))
    try:
        if not root.is_dir():
            return None
        catalog_dir, read_only = catalog.locate(root)
    except (LibraryError, OSError):
        return None
    return busy_message(display_name(root)) if not read_only and _lock_held(catalog_dir / INDEX_LOCK_NAME) else None


def _lock_held(path: Path) -> bool:
    """Does some open file hold the lock `_process_lock` takes on `path` (without waiting for it)?"""
    try:
        import fcntl
    except ImportError:
        return False
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False  # never made: no library was ever indexed with a lock here
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


class Library:
    """A folder of sounds with its catalog and per-model vector indexes. Thread-safe (one lock, `lock`)."""

    def __init__(self, root: Path, catalog_dir: Path, db: sqlite3.Connection, index_config: IndexConfig,
                 read_only: bool = False) -> None:
        self.root = root
        self.catalog_dir = catalog_dir
        self.db = db  # read it under `lock`; write only through `transaction`; None once closed
        self.index_config = index_config
        self.read_only = read_only  # a catalog without write access: searched, never written (indexes in memory)
        self.events: list[str] = []  # what opening had to repair, for logs and tests
        self.repair: SalvageReport | None = None  # what opening a damaged catalog kept, restored and lost
        self.lock = threading.RLock()
        self._indexing = False
        self._checked_at = time.time()  # when a full integrity check last passed (clean_close.py)
        self._check: clean_close.BackgroundCheck | None = None
        self._damaged = False  # the background check found damage: no clean stamp on close
        self.files = FileTable(self)
        self.vectors = VectorStore(self)
        self.search = VectorSearch(self)
        self.text = TextChannel(self)
        self.user_tags = UserTags(self)

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
            lib = cls(root, catalog_dir, _connect_read_only(catalog_dir / CATALOG_NAME), index_config or IndexConfig(),
                      read_only=True)
            lib.events.append(lib.read_only_message)
            return lib
        for stale in [*catalog_dir.glob(".index-*.tmp"), *catalog_dir.glob(f".{MIRROR_NAME}.*.tmp")]:
            with contextlib.suppress(OSError):  # an interrupted index or mirror write
                stale.unlink()
        stamp = clean_close.take_stamp(catalog_dir / CATALOG_NAME)
        db, damage = _connect_or_salvage(catalog_dir / CATALOG_NAME, check=stamp is None)
        lib = cls(root, catalog_dir, db, index_config or IndexConfig())
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
        self.user_tags.restore(report, REREAD)
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
        return (f"{display_name(self.catalog_dir)} is read-only (no write access): searching only; indexing and "
                "tagging need write access to it")

    def close(self) -> None:
        with self.lock:
            if self.db is None:
                return
            self.vectors.save_all()
            self.text.close_reader()
            self.db.close()
            self.db = None  # type: ignore[assignment]
            self.vectors.unload()
            self._stamp_clean_close()

    def _stamp_clean_close(self) -> None:
        """Say that the catalog was closed consistent, so that the next open can skip the full check."""
        check, self._check = self._check, None
        if check is not None:
            check.stop()
            if check.problems == []:
                self._checked_at = check.finished_at
        if not self.read_only and not self._damaged:
            clean_close.write_stamp(self.catalog_path, self._checked_at)

    def _damage_found(self, problems: list[str]) -> None:
        """The background check found damage: repaired when the library is opened next (no clean stamp)."""
        self._damaged = True
        self.events.append(f"The catalog is damaged ({'; '.join(problems)[:200]}): Earshot repairs it the next "
                           "time this library is opened")

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Damage SQLite meets while the library is in use (a page that no longer reads) becomes a LibraryError
        that says so, and the next open runs the full check, which repairs it (no clean stamp is left)."""
        try:
            yield
        except sqlite3.DatabaseError as e:
            if not catalog.is_damage(e):
                raise  # locked, disk full, ...: not damage
            self._mark_damaged(e)
            raise LibraryError(f"The catalog of {display_name(self.root)} is damaged ({e}): Earshot repairs it the "
                               "next time this library is opened") from None

    def _mark_damaged(self, error: BaseException) -> None:
        self._damaged = True
        clean_close.forget(self.catalog_path)
        self.events.append(f"catalog damaged while in use: {error}")

    @property
    def closed(self) -> bool:
        return self.db is None

    def __enter__(self) -> Library:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def catalog_path(self) -> Path:
        return self.catalog_dir / CATALOG_NAME

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One transaction under the lock; a full disk becomes a DiskFullError (nothing committed before is
        lost)."""
        with self.lock:
            if self.db is None:
                raise LibraryError("the library is closed")
            if self.read_only:
                raise LibraryError(self.read_only_message)
            try:
                with catalog.transaction(self.db) as db:
                    yield db
            except sqlite3.OperationalError as e:
                if catalog.is_disk_full(e):
                    raise DiskFullError(catalog.disk_full_message(self.catalog_path)) from None
                raise

    @contextlib.contextmanager
    def indexing(self) -> Iterator[None]:
        """Held by the one indexing job a library may run at a time, in this process or any other (a lock file
        in the catalog folder); a second one gets a LibraryError."""
        with self.lock:
            if self.read_only:
                raise LibraryError(f"cannot index: {self.read_only_message}")
            if self._indexing:
                raise LibraryError(f"{display_name(self.root)} is already being indexed")
            self._indexing = True
        try:
            with _process_lock(self.catalog_dir / INDEX_LOCK_NAME, display_name(self.root)):
                yield
        finally:
            self._indexing = False

    def indexed_elsewhere(self) -> bool:
        """Another Library (another process, mostly) is indexing this library now: its index files are behind the
        catalog until that job's next checkpoint, and they are that job's to write."""
        return not self._indexing and not self.read_only and _lock_held(self.catalog_dir / INDEX_LOCK_NAME)

    # ------------------------------------------------------------------------------------------- models

    def register_model(self, e: Embedder) -> None:
        """Record (or check) the model's dimension, sample rate and window length."""
        with self.transaction() as db:
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

    def set_model_error(self, model_id: str, error: str | None) -> None:
        """Record why a model was refused (None: it works); other models are not touched."""
        with self.transaction() as db:
            db.execute("UPDATE models SET error = ? WHERE model_id = ?", (error, model_id))

    def model_errors(self) -> dict[str, str]:
        """model_id -> why it was refused, for models refused as broken."""
        with self.lock:
            return dict(self.db.execute("SELECT model_id, error FROM models WHERE error IS NOT NULL").fetchall())

    # ------------------------------------------------------------------------------------ a query, in two calls

    def candidates(self, request: CandidateRequest, encode: Callable[[], QueryVectors]) -> Candidates:
        """A text query's candidates from both channels, scored over their union (candidates.py); the keywords
        are ranked on another thread while `encode()` computes the query's vectors on this one."""
        return gather(self, request, encode)

    def hits(self, file_ids: Sequence[int], model_id: str, query: np.ndarray | None) -> dict[int, Hit]:
        """The hits of chosen files: per-window scores against `query` (D,), the text to highlight, the user's
        tags, the favourite mark (candidates.py)."""
        return explained_hits(self, file_ids, model_id, query)

    # -------------------------------------------------------------------------------------------- reading

    def counts(self, model_ids: Sequence[str]) -> list[int]:
        """How many vectors each model's index holds (in memory) and, last, an upper bound on the files catalogued
        (ids are never reused): while indexing runs, names are searchable before their files have any vector."""
        with self.lock:
            return [*self.vectors.counts(model_ids), self.files.id_bound()]

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
