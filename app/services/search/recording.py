"""Record a short sound from the microphone to search with (Sononym-style "search by recording"). No Qt.

`record_job` drives the one `Recorder` (audio callback -> ring buffer, drained here every ~30 ms) for a
few seconds, stops early if the device fails, and trims leading and trailing silence with the one trim
of `core.audio`. What comes out is a `Recording`; a recording with nothing in it is an error that says
why (no audio arrived at all, or only silence), never an empty query. The Search tab runs the job in a
worker; `earshot similar --record` runs it in the terminal. `save` writes it as a WAV file, and a saved
recording is an ordinary file to "find similar" with (`SearchSession.similar` accepts files outside the
library).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from app.services.devices import Recorder
from app.services.jobs import Job
from core.audio import AudioError, PathLike, TrimConfig, frame_energy_db, save_wav, trim_span

RECORD_RATE = 32000  # the retrieval models' rate; the decoder resamples for any other
MAX_SECONDS = 30.0  # the recorder's ring buffer holds this much
POLL_SECONDS = 0.03  # drain the ring buffer at ~30 Hz, as the GUI does


class NothingRecordedError(AudioError):
    """The input delivered no audio, or only silence; the message says which and what to check."""


@dataclass
class Recording:
    audio: np.ndarray  # (N,) float32 mono, leading and trailing silence trimmed
    sample_rate: int
    recorded_seconds: float  # before trimming
    problem: str = ""  # why the recording ended early (device gone ...); '' when it ran its full length

    @property
    def duration(self) -> float:
        return len(self.audio) / self.sample_rate

    def save(self, path: PathLike) -> Path:
        """Write the (trimmed) recording as a 16-bit WAV file, atomically."""
        return save_wav(path, self.audio, self.sample_rate)


def default_name(now: datetime | None = None) -> str:
    """`recording-2025-01-31-142501.wav`: what a saved recording is called unless the user says otherwise."""
    return f"recording-{(now or datetime.now()):%Y-%m-%d-%H%M%S}.wav"


def check_seconds(seconds: float) -> float:
    if not 0.2 <= seconds <= MAX_SECONDS:
        raise ValueError(f"a recording lasts from 0.2 to {MAX_SECONDS:g} seconds, not {seconds:g}")
    return float(seconds)


def record_job(seconds: float, sample_rate: int = RECORD_RATE,
               recorder_factory: Callable[[int], Recorder] | None = None,
               trim: TrimConfig | None = None, stop: threading.Event | None = None) -> Job[Recording]:
    """Job: record `seconds` of audio from the default input, then trim silence.

    The seconds count from the first audio that arrives (a device can take a moment to start), and the
    progress says when that was: `{"listening": True, "message": "recording ... make the sound now"}`,
    about every 30 ms. Raises NoAudioDeviceError without an input device and NothingRecordedError when
    nothing but silence came. Setting `stop` ends the recording early (what came is kept); closing the
    job (cancel) stops the microphone and returns nothing."""
    seconds = check_seconds(seconds)
    make = recorder_factory or (lambda rate: Recorder(sample_rate=rate, capacity_seconds=MAX_SECONDS + 1))
    recorder = make(sample_rate)
    recorder.start()  # NoAudioDeviceError: the message names the problem
    blocks: list[np.ndarray] = []
    wanted = round(seconds * sample_rate)
    got = 0
    try:
        yield {"step": 0.0, "total": seconds, "listening": False, "message": "waiting for the microphone"}
        while got < wanted:
            time.sleep(POLL_SECONDS)
            block = recorder.drain()
            blocks.append(block)
            got += len(block)
            if not recorder.recording or (stop is not None and stop.is_set()):
                break  # stopped by the user, or the device failed, vanished or never delivered: keep what came
            if got:
                yield {"step": round(got / sample_rate, 1), "total": seconds, "listening": True,
                       "message": f"recording {got / sample_rate:.1f} of {seconds:g} s: make the sound now"}
    finally:
        recorder.stop()
        blocks.append(recorder.drain())  # what arrived between the last drain and the stop
    audio = np.concatenate(blocks)[:wanted] if blocks else np.zeros(0, np.float32)
    return finish(audio, sample_rate, recorder.error, trim)


def silence_problem(audio: np.ndarray, sample_rate: int, problem: str = "", trim: TrimConfig | None = None,
                    source: str = "") -> str:
    """'' when the recording (N,) holds sound; otherwise what the user is told: nothing came, or only silence.

    `problem` is why the recording ended (the recorder's error), if it did by itself. `source` names a file the
    audio came from: then the message is about that file (no microphone to check)."""
    if len(audio) == 0:
        return (f"{source} holds no audio" if source
                else f"nothing was recorded: {problem or 'the input device delivered no audio'}")
    if trim_span(audio, trim or TrimConfig(), sample_rate) is not None:
        return ""
    loudest = float(frame_energy_db(audio, sample_rate).max(initial=-np.inf))
    level = "digital silence" if not np.any(audio) else f"the loudest moment is {loudest:.0f} dBFS"
    if source:
        return f"{source} holds only silence ({level})"
    return (f"only silence was recorded in {len(audio) / sample_rate:.1f} s ({level}): is the microphone "
            "muted, turned down, or is another input selected?" + (f" ({problem})" if problem else ""))


def finish(audio: np.ndarray, sample_rate: int, problem: str = "", trim: TrimConfig | None = None) -> Recording:
    """Trim a raw recording (N,); refuse one with no sound in it, saying why."""
    audio = np.asarray(audio, dtype=np.float32).reshape(-1)
    trim = trim or TrimConfig()
    span = trim_span(audio, trim, sample_rate) if len(audio) else None
    if span is None:  # nothing came, or only silence: say which
        raise NothingRecordedError(silence_problem(audio, sample_rate, problem, trim))
    return Recording(audio[span[0]: span[1]].copy(), sample_rate, len(audio) / sample_rate, problem)
