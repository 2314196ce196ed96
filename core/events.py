"""Progress events as JSON lines: how one process follows another's job (`earshot train KIND --events PATH`).

The writer and the reader of the format live together here:

    {"time": t, "event": "progress", "step": .., "total": .., "loss": .., "message": .., ...}   (any number)
    {"time": t, "event": "result", "result": {...}}          |  the job's return value, or
    {"time": t, "event": "error", "message": "..", "type": ".."}  |  why it failed, or
    {"time": t, "event": "cancelled"}                         |  it was cancelled (Ctrl-C, the Train tab's Cancel)

The run service adds {"event": "started", "attempt": n} before each launch. Written to a file, the numeric
progress values also go to `metrics.csv` beside it in long form (`time,step,name,value`: one row per value),
for spreadsheets and pandas. No Qt, no torch: used by app/cli/kind_common.py and app/services/training/runs.py alike.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Generator
from pathlib import Path
from typing import IO, Any

Job = Generator[dict[str, Any], None, Any]
TERMINAL = ("result", "error", "cancelled")  # the last word of an attempt


class EventWriter:
    """Writes a job's events to `target` (a path, '-' for standard output, or None: nowhere)."""

    def __init__(self, target: str | os.PathLike[str] | None) -> None:
        self._file: IO[str] | None = None
        self._csv: IO[str] | None = None
        if target is not None and str(target) == "-":
            self._file = sys.stdout
        elif target:
            self._file = open(target, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
            path = Path(target).with_name("metrics.csv")
            new = not path.exists()
            self._csv = open(path, "a", encoding="utf-8", newline="")  # noqa: SIM115 - closed in close()
            if new:
                self._csv.write("time,step,name,value\n")

    def write(self, event: dict[str, Any]) -> None:
        if self._file is None:
            return
        now = round(time.time(), 3)
        self._file.write(json.dumps({"time": now, **event}, default=str) + "\n")
        self._file.flush()
        if self._csv is not None and event.get("event") == "progress":
            step = event.get("step", "")
            for name, value in event.items():
                if name not in ("event", "step", "total") and isinstance(value, int | float) \
                        and not isinstance(value, bool):
                    self._csv.write(f"{now},{step},{name},{value}\n")
            self._csv.flush()

    def tee(self, job: Job) -> Job:
        """`job`, passing its progress on and writing each as an event, then its result; closes `job` when
        closed itself (a cancel), so the job's own clean-up runs."""
        try:
            while True:
                try:
                    progress = next(job)
                except StopIteration as stop:
                    self.write({"event": "result", "result": stop.value})
                    return stop.value
                self.write({"event": "progress", **progress})
                yield progress
        finally:
            job.close()

    def error(self, exc: BaseException) -> None:
        self.write({"event": "error", "message": str(exc) or type(exc).__name__, "type": type(exc).__name__})

    def cancelled(self) -> None:
        self.write({"event": "cancelled"})

    def close(self) -> None:
        if self._file is not None and self._file is not sys.stdout:
            self._file.close()
        if self._csv is not None:
            self._csv.close()
        self._file = self._csv = None


class EventReader:
    """Reads new events from a file another process is still writing: only whole lines, from where it left off.

    Lines that are not JSON objects (a torn write after a crash, a foreign line) are skipped."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.offset = 0

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n") + 1  # only whole lines: the writer may be mid-line
        self.offset += end
        events = []
        for line in chunk[:end].splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(event, dict):
                events.append(event)
        return events


def append_event(path: str | os.PathLike[str], event: dict[str, Any]) -> None:
    """One event appended by a third party (the run service's 'started' line before a launch)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"time": round(time.time(), 3), **event}, default=str) + "\n")


def terminal_status(events: list[dict[str, Any]]) -> str | None:
    """'finished', 'failed' or 'cancelled' from the last terminal event of `events`, or None if there is none."""
    for event in reversed(events):
        kind = event.get("event")
        if kind in TERMINAL:
            return {"result": "finished", "error": "failed", "cancelled": "cancelled"}[kind]
    return None
