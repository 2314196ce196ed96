"""`Catalog`: the storage layer under the library's parts (as beets' dbcore under its Library).

One SQLite connection with its lock, transactions that turn a full disk into a DiskFullError, the read-only flag,
the events opening and use have to tell, the paths, damage met in use (`guard`) and the one indexing job a
catalog may run at a time, in this process or any other (a lock file beside it). Each part of the library
(file_table, vectors, text_channel, user_tags) gets this handle, never the Library, and owns its own tables.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from app.services.library import catalog, clean_close
from app.services.library.catalog import CATALOG_NAME
from app.services.library.records import DiskFullError, LibraryError
from core.display import display_name

INDEX_LOCK_NAME = "index.lock"  # held (flock) by the indexing job of any process
TAG_WRITE_LOCK_NAME = "tag-write.lock"  # held (flock) by the tag writing job of any process
LOCK_TRIES = 5  # 0.2 s: past another job's probe of the lock, not past another job


class Catalog:
    """A library's catalog connection and what goes with it. Thread-safe: read under `lock`, write only through
    `transaction`."""

    def __init__(self, root: Path, catalog_dir: Path, db: sqlite3.Connection, read_only: bool = False) -> None:
        self.root = root
        self.catalog_dir = catalog_dir
        self.db = db  # None once closed
        self.read_only = read_only  # no write access: searched, never written (indexes kept in memory)
        self.events: list[str] = []  # what opening had to repair and failed writes, for logs and tests
        self.lock = threading.RLock()
        self.damaged = False  # damage was met in use: no clean stamp on close, the next open checks in full
        self._indexing = False

    @property
    def path(self) -> Path:
        return self.catalog_dir / CATALOG_NAME

    @property
    def closed(self) -> bool:
        return self.db is None

    @property
    def read_only_message(self) -> str:
        return read_only_message(self.catalog_dir)

    def close(self) -> None:
        with self.lock:
            if self.db is not None:
                self.db.close()
                self.db = None  # type: ignore[assignment]

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
                    raise DiskFullError(catalog.disk_full_message(self.path)) from None
                raise

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Damage SQLite meets while the library is in use (a page that no longer reads) becomes a LibraryError
        that says so, and the next open runs the full check, which repairs it (no clean stamp is left)."""
        try:
            yield
        except sqlite3.DatabaseError as e:
            if not catalog.is_damage(e):
                raise  # locked, disk full, ...: not damage
            self.mark_damaged(f"catalog damaged while in use: {e}")
            clean_close.forget(self.path)
            raise LibraryError(f"The catalog of {display_name(self.root)} is damaged ({e}): Earshot repairs it the "
                               "next time this library is opened") from None

    def mark_damaged(self, event: str) -> None:
        self.damaged = True
        self.events.append(event)

    @contextlib.contextmanager
    def indexing(self) -> Iterator[None]:
        """Held by the one indexing job a catalog may run at a time, in this process or any other (a lock file
        in the catalog folder); a second one gets a LibraryError."""
        with self.lock:
            if self.read_only:
                raise LibraryError(f"cannot index: {self.read_only_message}")
            if self._indexing:
                raise LibraryError(f"{display_name(self.root)} is already being indexed")
            self._indexing = True
        try:
            with process_lock(self.catalog_dir / INDEX_LOCK_NAME, display_name(self.root)):
                yield
        finally:
            self._indexing = False

    @contextlib.contextmanager
    def tag_writing(self) -> Iterator[None]:
        """Held by the one job writing tags into the library's files at a time, in this process or any other: two
        at once would clean up each other's copies and replace a file the other is writing; a second one gets a
        LibraryError."""
        name = display_name(self.root)
        with process_lock(self.catalog_dir / TAG_WRITE_LOCK_NAME, name,
                          f"{name}'s tags are already being written into its files (by another Earshot window or "
                          "command); try again when it has finished"):
            yield

    def indexed_elsewhere(self) -> bool:
        """Another process is indexing this catalog now: its index files are behind the catalog until that job's
        next checkpoint, and they are that job's to write."""
        return not self._indexing and not self.read_only and lock_held(self.catalog_dir / INDEX_LOCK_NAME)


def read_only_message(catalog_dir: Path) -> str:
    return (f"{display_name(catalog_dir)} is read-only (no write access): searching only; indexing and tagging "
            "need write access to it")


@contextlib.contextmanager
def process_lock(path: Path, name: str, busy: str | None = None) -> Iterator[None]:
    """An exclusive advisory lock on `path` for as long as the block runs; LibraryError if another open file holds
    it (the message `busy`, by default another process indexing the library: both would read and embed every
    file). The kernel drops it when the process dies, so a killed run never leaves the library locked. Without
    flock (Windows) or when the lock file cannot be made, nothing is locked: the catalog stays consistent, only the
    work may be done twice."""
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
                    raise LibraryError(busy or busy_message(name)) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # releases the lock


def busy_message(name: str) -> str:
    return f"{name} is already being indexed (by another Earshot window or command); try again when it has finished"


def lock_held(path: Path) -> bool:
    """Does some open file hold the lock `process_lock` takes on `path` (without waiting for it)?"""
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
