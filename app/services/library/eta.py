"""How long indexing has left, from the rate it is measured going at: never a guess.

Work is counted in seconds of audio (from each file's header, read in the first pass: decoding, resampling and
the model all scale with it) plus FILE_COST_S per file, so a folder of long music before a folder of one-shots
does not fool it as a files-per-second rate would. The rate is measured from the first file committed (model
loading and warm-up come before it and are not the steady rate) over a sliding window of the last WINDOW_S
seconds (it follows a machine that gets busier), and only after MIN_FILES files and MIN_SECONDS: before that the
estimate is None ("estimating…"). Time the job spent paused is left out. Pure Python: tests drive it with their
own clock.
"""

from __future__ import annotations

import math
from collections import deque

FILE_COST_S = 0.25  # what a file costs beyond its audio, in seconds of audio: little, as readers open and decode
# the next files while the model runs (bench/eta_check.py, default model, flare library: 109 one-shots with 311 s of
# audio took 1.97 s after its music ran at 143 s of audio a second); not 0, so a folder of clicks is not free
MIN_FILES = 3  # files committed before an estimate is given
MIN_SECONDS = 2.0  # seconds of measured work before an estimate is given
WINDOW_S = 60.0  # the rate is measured over the last minute of work


def work_of(duration: float | None, file_cost_s: float | None = None) -> float | None:
    """The work of a file, in seconds of audio: its length and the cost of a file; None when not known."""
    if duration is None or not math.isfinite(duration) or duration < 0:
        return None
    return duration + (FILE_COST_S if file_cost_s is None else file_cost_s)


class RateEta:
    """Remaining time = remaining work / measured rate, counted down between completions."""

    def __init__(self, min_files: int = MIN_FILES, min_seconds: float = MIN_SECONDS,
                 window_s: float = WINDOW_S) -> None:
        self.min_files, self.min_seconds, self.window_s = min_files, min_seconds, window_s
        self.samples: deque[tuple[float, float]] = deque()  # (time without pauses, cumulative work), oldest first
        self.files = 0
        self.work = 0.0
        self.first: float | None = None  # when the first file was committed
        self.paused = 0.0  # seconds spent paused so far

    def pause(self, seconds: float) -> None:
        """The job was paused (or otherwise not running) this long: not time the work took."""
        self.paused += max(0.0, seconds)

    def done(self, now: float, work: float) -> None:
        """A file was committed at `now` (monotonic seconds): `work` (its seconds of audio and cost) is done."""
        t = now - self.paused
        self.files += 1
        self.work += max(0.0, work)
        if self.first is None:
            self.first = t
        self.samples.append((t, self.work))
        while len(self.samples) > 2 and t - self.samples[1][0] >= self.window_s:
            self.samples.popleft()  # keep one sample at least window_s old: the window spans window_s

    def rate(self) -> float | None:
        """Work (seconds of audio) done per second over the measured window; None until there is enough to say."""
        if self.files < self.min_files or len(self.samples) < 2:
            return None
        (t0, w0), (t1, w1) = self.samples[0], self.samples[-1]
        if t1 - t0 < self.min_seconds or w1 <= w0:
            return None
        return (w1 - w0) / (t1 - t0)

    def eta(self, now: float, remaining: float) -> float | None:
        """Seconds left for `remaining` work, counted down since the last completion; None while estimating."""
        if remaining <= 0:
            return 0.0
        rate = self.rate()
        if rate is None:
            return None
        since = (now - self.paused) - self.samples[-1][0]
        return max(0.0, remaining / rate - since)
