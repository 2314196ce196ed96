"""Whether a catalog needs SQLite's integrity check when it is opened, and the check in the background.

`PRAGMA quick_check` reads the whole catalog: 2 s at 100k files and minutes at 1M, on every open. It finds
damage that SQLite's own journal cannot prevent (a bad disk, a foreign tool writing the file, a copy cut short),
so it is skipped only where it cannot find anything new: Earshot closed the catalog cleanly (`catalog.clean`
written after the last connection closed, naming the file's size and mtime), nothing has touched the file since
(same size and mtime, no write-ahead log left), and a full check passed less than `RECHECK_S` ago. Opening
removes the stamp, so a crash while open means a check next time. When the last full check is older, the
library opens at once and `BackgroundCheck` runs it on its own read-only connection; damage found there is
reported and the library is repaired the next time it opens (no stamp is written).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from core.files import atomic_path

STAMP_NAME = "catalog.clean"
RECHECK_S = 7 * 24 * 3600.0  # a full check at least weekly, in the background


@dataclass(frozen=True)
class Stamp:
    size: int
    mtime_ns: int
    checked_at: float  # time.time() of the last full check that passed


def _stat(catalog: Path) -> tuple[int, int] | None:
    try:
        st = catalog.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def take_stamp(catalog: Path) -> Stamp | None:
    """The stamp left by the last clean close when the catalog is exactly as it left it (else None); the stamp is
    removed either way (a crash from now on must not leave a stale one)."""
    path = catalog.parent / STAMP_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, ValueError):
        text = None
    forget(catalog)
    try:  # anything odd in it (a number too large, nesting too deep, other types): no stamp
        doc = json.loads(text) if text is not None and len(text) < 4096 else None
        stamp = Stamp(int(doc["size"]), int(doc["mtime_ns"]), float(doc["checked_at"])) if doc else None
    except Exception:
        stamp = None
    if stamp is None or _wal_in_use(catalog) or _stat(catalog) != (stamp.size, stamp.mtime_ns):
        return None
    return stamp


def forget(catalog: Path) -> None:
    """Remove the stamp: the next open runs the full check (the catalog was found damaged while in use)."""
    with contextlib.suppress(OSError):
        (catalog.parent / STAMP_NAME).unlink()


def _wal_in_use(catalog: Path) -> bool:
    """A write-ahead log with content: writes the main file does not have yet (an empty one is what a reader
    that opened the catalog read-only leaves behind)."""
    try:
        return catalog.with_name(catalog.name + "-wal").stat().st_size > 0
    except OSError:
        return False


def write_stamp(catalog: Path, checked_at: float) -> None:
    """After the last connection closed: the catalog is consistent as it is now (a failure only costs a check)."""
    st = _stat(catalog)
    if st is None or _wal_in_use(catalog):
        return  # another process still has it open: its writes would outdate the stamp
    with contextlib.suppress(OSError), atomic_path(catalog.parent / STAMP_NAME) as tmp:
        tmp.write_text(json.dumps({"size": st[0], "mtime_ns": st[1], "checked_at": checked_at}), encoding="utf-8")


class BackgroundCheck:
    """`quick_check` of the catalog on a read-only connection of its own, in a daemon thread; `stop` interrupts it.
    `problems` is None while it runs (or when it was stopped), else what SQLite reported ([] = sound)."""

    def __init__(self, catalog: Path, on_damage: Callable[[list[str]], None]) -> None:
        self.catalog, self.on_damage = catalog, on_damage
        self.problems: list[str] | None = None
        self.finished_at = 0.0
        self._db: sqlite3.Connection | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="earshot-catalog-check", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from app.services.library.catalog import quick_check

        try:
            self._db = sqlite3.connect(Path(os.path.abspath(self.catalog)).as_uri() + "?mode=ro", uri=True,
                                       check_same_thread=False)
            if self._stopped.is_set():
                return
            problems = quick_check(self._db)
        except sqlite3.Error:
            return  # interrupted (closing), locked, gone: the next open checks again
        finally:
            if self._db is not None:
                with contextlib.suppress(sqlite3.Error):
                    self._db.close()
        self.problems, self.finished_at = problems, time.time()
        if problems:
            self.on_damage(problems)

    def stop(self) -> None:
        self._stopped.set()
        db = self._db
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.interrupt()
        self._thread.join(timeout=10)
