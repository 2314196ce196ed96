"""The only bridge between Qt and long work: runs job generators off the GUI thread.

A `JobRunner` takes a function that creates a job (see `app.services.jobs`), runs it in a QThread and
reports through signals that Qt delivers on the GUI thread: `progress(dict)`, `result(object)`,
`error(str)`, `cancelled()` and, always last, `finished()`. Pause and cancel act between yields.
An exception in a job becomes an `error` message; it never reaches Qt as a traceback.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot

from app.services.jobs import Job, JobCancelled
from core.audio import AudioError
from core.checkpoints import CheckpointError

log = logging.getLogger(__name__)
_ACTIVE: weakref.WeakSet[JobRunner] = weakref.WeakSet()
_KEEP: set[JobRunner] = set()  # a running runner stays alive even if its owner drops it


def active_runners() -> list[JobRunner]:
    """Runners whose thread has not finished yet (tests fail if any are left)."""
    return [r for r in _ACTIVE if r.is_running()]


USER_ERRORS = (AudioError, CheckpointError, OSError)  # what the user's files or folders are like: logged in a
# line, not as a traceback (the user gets the message; a traceback in the terminal would read as a crash)


def describe_error(exc: BaseException) -> str:
    """A message for the user: the error's own text, with its type only when the text is empty."""
    text = str(exc).strip()
    if isinstance(exc, (ValueError, OSError, KeyError, LookupError)) or type(exc).__module__ != "builtins":
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _JobWorker(QObject):
    progress = Signal(dict)
    result = Signal(object)
    error = Signal(str)
    cancelled = Signal()
    done = Signal()

    def __init__(self, factory: Callable[[], Job[Any]], name: str) -> None:
        super().__init__()
        self._factory = factory
        self._name = name
        self._cancel = threading.Event()
        self._resume = threading.Event()
        self._resume.set()

    @Slot()
    def run(self) -> None:
        job = None
        try:
            job = self._factory()
            while True:
                self._resume.wait()
                if self._cancel.is_set():
                    job.close()
                    self.cancelled.emit()
                    return
                try:
                    progress = next(job)
                except StopIteration as stop:
                    self.result.emit(stop.value)
                    return
                self.progress.emit(dict(progress) if isinstance(progress, dict) else {"message": str(progress)})
        except JobCancelled:
            self.cancelled.emit()
        except Exception as exc:  # a job's failure is a message for the user, not a crash
            if isinstance(exc, USER_ERRORS):
                log.warning("job %s: %s", self._name, describe_error(exc))
            else:  # a bug: its traceback is what a report needs
                log.exception("job %s failed", self._name)
            self.error.emit(describe_error(exc))
        finally:
            self.done.emit()


class JobRunner(QObject):
    """Runs one job in its own QThread. Create, connect signals, `start()`."""

    progress = Signal(dict)
    result = Signal(object)
    error = Signal(str)
    cancelled = Signal()
    finished = Signal()

    def __init__(self, factory: Callable[[], Job[Any]], name: str = "job", parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.name = name
        self._thread = QThread()
        self._thread.setObjectName(f"earshot-{name}")
        self._worker = _JobWorker(factory, name)
        self._worker.moveToThread(self._thread)
        self._thread.started.connect(self._worker.run)
        self._worker.progress.connect(self.progress)
        self._worker.result.connect(self.result)
        self._worker.error.connect(self.error)
        self._worker.cancelled.connect(self.cancelled)
        # direct: QThread.quit is thread-safe, and a GUI thread blocked in wait() must not have to deliver it
        self._worker.done.connect(self._thread.quit, Qt.ConnectionType.DirectConnection)
        self._thread.finished.connect(self._on_thread_finished)
        self._started = False
        self._finished = False

    def __repr__(self) -> str:
        return f"<JobRunner {self.name} running={self.is_running()}>"

    def start(self) -> None:
        if self._started:
            raise RuntimeError(f"job {self.name} was already started")
        self._started = True
        _ACTIVE.add(self)
        _KEEP.add(self)
        self._thread.start()

    def cancel(self) -> None:
        """Ask the job to stop at its next yield (a paused job is woken to stop)."""
        self._worker._cancel.set()
        self._worker._resume.set()

    def pause(self) -> None:
        self._worker._resume.clear()

    def resume(self) -> None:
        self._worker._resume.set()

    def is_paused(self) -> bool:
        return not self._worker._resume.is_set()

    def is_running(self) -> bool:
        return self._started and not self._finished

    def wait(self, timeout_ms: int = 10_000) -> bool:
        """Block until the thread ends (for shutdown and tests); True if it ended."""
        if not self._started:
            return True
        return self._thread.wait(timeout_ms)

    @Slot()
    def _on_thread_finished(self) -> None:
        self._finished = True
        _KEEP.discard(self)
        self.finished.emit()


def cancel_all(timeout_ms: int = 5_000) -> None:
    """Cancel every running job and wait for the threads, `timeout_ms` in all (application shutdown)."""
    runners = active_runners()
    for r in runners:
        r.cancel()
    deadline = time.monotonic() + timeout_ms / 1000
    for r in runners:
        r.wait(max(0, int(1000 * (deadline - time.monotonic()))))
