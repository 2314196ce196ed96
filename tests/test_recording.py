"""services.recording with a fake input stream (the real one is in test_real_audio*.py): the seconds count
from the first audio, silence is trimmed, stop ends early, cancel closes the microphone."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from app.services.devices import Recorder
from app.services.search.recording import NothingRecordedError, finish, record_job

RATE = 16000


class SlowStartMic:
    """Delivers nothing for `delay` seconds (a device starting), then `sound` and silence, at 4x real time."""

    def __init__(self, samplerate, channels, blocksize, dtype, callback, device, sound, delay=0.3) -> None:
        self.callback, self.blocksize, self.sound, self.delay = callback, blocksize, sound, delay
        self.active = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.active = True
        self._thread.start()

    def _run(self) -> None:
        if self._stop.wait(self.delay):
            return
        i = 0
        while not self._stop.wait(self.blocksize / RATE / 4):
            block = np.zeros((self.blocksize, 1), np.float32)
            piece = self.sound[i:i + self.blocksize]
            block[:len(piece), 0] = piece
            self.callback(block, self.blocksize, None, None)
            i += self.blocksize

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.active = False

    def close(self) -> None:
        self.stop()


def tone(seconds: float, start: float = 0.5) -> np.ndarray:
    t = np.arange(round(seconds * RATE)) / RATE
    return np.concatenate([np.zeros(round(start * RATE)), 0.3 * np.sin(2 * np.pi * 440 * t)]).astype(np.float32)


def recorder_with(sound: np.ndarray, mics: list | None = None, **kw: object):
    def factory(**kwargs: object) -> SlowStartMic:
        mic = SlowStartMic(**kwargs, sound=sound, **kw)
        if mics is not None:
            mics.append(mic)
        return mic

    return lambda rate: Recorder(sample_rate=rate, stream_factory=factory)


def run(job):
    progress = []
    try:
        while True:
            progress.append(next(job))
    except StopIteration as done:
        return done.value, progress


def test_seconds_count_from_the_first_audio_and_silence_is_trimmed() -> None:
    recording, progress = run(record_job(2.0, RATE, recorder_with(tone(0.6))))
    assert recording.recorded_seconds == pytest.approx(2.0, abs=0.01)  # not shortened by the slow start
    assert recording.duration == pytest.approx(0.6 + 0.095, abs=0.02)  # the tone, 3 frames each side, a window
    assert progress[0]["listening"] is False and progress[-1]["listening"] is True
    assert "make the sound now" in progress[-1]["message"] and recording.problem == ""


def test_stop_ends_early_and_keeps_what_came() -> None:
    stop = threading.Event()
    job = record_job(30.0, RATE, recorder_with(tone(0.4, start=0.1)), stop=stop)
    while True:
        p = next(job)
        if p.get("step", 0) >= 1.0:
            stop.set()
            break
    recording, _ = run(job)
    assert 0.9 < recording.recorded_seconds < 2.0  # stopped after a second of the 30 asked for
    assert recording.duration == pytest.approx(0.4 + 0.095, abs=0.02)


def test_cancel_closes_the_microphone() -> None:
    mics: list[SlowStartMic] = []
    job = record_job(5.0, RATE, recorder_with(tone(1.0), mics))
    next(job)
    job.close()
    assert mics and not mics[0].active and not mics[0]._thread.is_alive()


def test_silence_and_nothing_are_refused_with_a_reason() -> None:
    with pytest.raises(NothingRecordedError, match=r"only silence was recorded in 1.0 s \(digital silence\)"):
        finish(np.zeros(RATE, np.float32), RATE)
    with pytest.raises(NothingRecordedError, match=r"the loudest moment is -7\d dBFS"):
        finish(np.full(RATE, 2e-4, np.float32), RATE)
    with pytest.raises(NothingRecordedError, match="nothing was recorded: device gone"):
        finish(np.zeros(0, np.float32), RATE, problem="device gone")
    with pytest.raises(ValueError, match="from 0.2 to 30 seconds"):
        next(record_job(31.0, RATE, recorder_with(tone(1.0))))
