"""The job protocol: long work is a generator that yields progress dicts and returns its result.

    def index_folder(...) -> Job[Index]:
        for i, path in enumerate(paths):
            ...
            yield {"step": i + 1, "total": len(paths), "message": path.name}
        return index

One implementation, two front ends: `run_in_terminal` drives a job with a tqdm bar (the CLI);
`app.workers.JobRunner` drives it off the GUI thread with pause and cancel between yields.
A job cleans up in `finally` (or on `GeneratorExit`): both runners close the generator on cancel.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Generator, Mapping
from typing import Any, TypeVar

from tqdm import tqdm

R = TypeVar("R")
Progress = dict[str, Any]
Job = Generator[Progress, None, R]

# keys with a meaning to the runners; a job may add any others (metrics, audio_seconds, ...)
PROGRESS_KEYS = ("step", "total", "loss", "message")
tqdm.monitor_interval = 0  # no monitor thread: bars are updated from the job's own loop


class JobCancelled(Exception):
    """The user cancelled a job (Ctrl-C in the terminal, Cancel in the GUI)."""


def format_progress(progress: Mapping[str, Any]) -> str:
    """One human line for a progress dict: '12/40 loss 0.532 · reading foo.wav'."""
    parts = []
    if "step" in progress:
        total = progress.get("total")
        parts.append(f"{progress['step']}/{total}" if total else f"{progress['step']}")
    loss = progress.get("loss")
    if isinstance(loss, int | float) and math.isfinite(loss):
        parts.append(f"loss {loss:.4g}")
    if progress.get("message"):
        parts.append(str(progress["message"]))
    return " · ".join(parts)


def run_in_terminal(job: Job[R], desc: str = "", disable: bool | None = None,
                    describe: Callable[[Mapping[str, Any]], str] | None = None) -> R:
    """Drive `job` to completion with a tqdm bar; Ctrl-C closes the job and raises JobCancelled. `describe`: the
    progress in words, shown in place of the message and the job's other fields (an index run's files_done,
    eta_s, phase… are for the GUI, not for people)."""
    bar = tqdm(desc=desc, unit="step", disable=disable, dynamic_ncols=True)
    # no terminal (output sent to a log file): plain lines instead of a bar, at most every few seconds
    log = _LineLog(desc, describe) if disable is None and bar.disable else None
    try:
        while True:
            try:
                progress = next(job)
            except StopIteration as stop:
                return stop.value
            _update_bar(bar, {"message": describe(progress), **_counts(progress)} if describe else progress, desc)
            if log is not None:
                log.update(progress)
    except KeyboardInterrupt:
        job.close()  # runs the job's `finally`, e.g. to keep its last good checkpoint
        raise JobCancelled("cancelled by the user") from None
    finally:
        bar.close()


class _LineLog:
    """Progress as log lines on stderr: a line when the message changes (at most one a second) or every 30 s."""

    def __init__(self, desc: str, describe: Callable[[Mapping[str, Any]], str] | None = None) -> None:
        self.desc, self.describe, self.last_message, self.last_time = desc, describe, None, 0.0

    def update(self, progress: Mapping[str, Any]) -> None:
        now = time.monotonic()
        message = progress.get("message")
        changed = message != self.last_message and now - self.last_time >= 1.0
        if not changed and now - self.last_time < 30.0:
            return
        self.last_message, self.last_time = message, now
        if self.describe is not None:  # the job's words for people, not its fields
            progress = {"message": self.describe(progress), **_counts(progress)}
        step, total = progress.get("step"), progress.get("total")
        where = f"{step}/{total}" if step is not None and total else f"{step}" if step is not None else ""
        extra = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in progress.items()
                         if k not in ("step", "total", "message") and isinstance(v, int | float | str)
                         and not (isinstance(v, float) and math.isnan(v)))  # NaN: no value yet (before 1st eval)
        parts = [p for p in (f"[{self.desc}]" if self.desc else "", where, str(message or ""), extra) if p]
        print(" ".join(parts), file=sys.stderr, flush=True)


def _counts(progress: Mapping[str, Any]) -> dict[str, Any]:
    """The step and total of `progress`, which the bar counts by."""
    return {k: progress[k] for k in ("step", "total") if k in progress}


def _update_bar(bar: tqdm, progress: Mapping[str, Any], desc: str) -> None:
    total = progress.get("total")
    if total and bar.total != total:
        bar.total = total
    step = progress.get("step")
    if isinstance(step, int | float):
        bar.update(step - bar.n)
    postfix = {k: v for k, v in progress.items() if k not in ("step", "total", "message")}
    if postfix:
        bar.set_postfix({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in postfix.items()},
                        refresh=False)
    if progress.get("message"):
        bar.set_description_str(f"{desc}: {progress['message']}"[:60] if desc else str(progress["message"])[:60],
                                refresh=False)
    bar.refresh()


def drain(job: Job[R]) -> R:
    """Run a job with no front end (tests, scripts) and return its result."""
    while True:
        try:
            next(job)
        except StopIteration as stop:
            return stop.value
