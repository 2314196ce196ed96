"""The app's recorder and player through a real audio stack (PulseAudio null sinks, see real_audio_stack.py).

Nothing here is faked: PortAudio's own callback thread calls the Recorder's and the Player's callbacks with
audio that went through the ALSA pulse plugin and the PulseAudio server. Breaking the callback path (the
Recorder not writing into its ring buffer, the Player not copying its blocks) fails these tests.
"""

from __future__ import annotations

import csv
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from real_audio_stack import PulseStack, aligned, running_stack

from app.services.devices import Player, Recorder, device_status
from app.services.registry import ModelRegistry
from app.services.search.recording import NothingRecordedError, record_job
from app.services.units.units_session import load_session
from core.audio import decode

ROOT = Path(__file__).resolve().parents[1]
CLIP = ROOT / "resources" / "demo" / "Animals" / "sheep-bleat.wav"  # 32 kHz mono, 1.2 s


@pytest.fixture
def pulse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PulseStack]:
    yield from running_stack(tmp_path_factory)


def speech(fsdd: Path, n: int = 3, rate: int = 16000) -> np.ndarray:
    """n spoken digits (FSDD, 8 kHz, resampled) with 0.15 s pauses, about 1.5 s for n = 3."""
    with open(fsdd / "metadata.csv", newline="") as f:
        paths = [fsdd / r["path"] for r in list(csv.DictReader(f))[:n]]
    pause = np.zeros(round(0.15 * rate), np.float32)
    return np.concatenate([np.concatenate([decode(p, sample_rate=rate).audio, pause]) for p in paths])


def record_while(recorder: Recorder, seconds: float, stop_early: bool = True) -> np.ndarray:
    """Drain the recorder every 30 ms (as the GUI does) for `seconds` or until it ends by itself."""
    blocks = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.03)
        blocks.append(recorder.drain())
        if stop_early and not recorder.recording:
            break
    recorder.stop()
    blocks.append(recorder.drain())
    return np.concatenate(blocks)


def units_session():  # the shipped units model, as the Units tab loads it
    registry = ModelRegistry(folders=[(ROOT / "resources" / "models", "default")])
    registry.scan()
    job = load_session(registry, "units-default")
    try:
        while True:
            next(job)
    except StopIteration as done:
        return done.value


@pytest.mark.slow
def test_speech_played_into_the_sink_is_recorded_and_encoded_into_units(pulse: PulseStack, fsdd: Path) -> None:
    pulse.add_sink("speakers", rate=16000)
    status = device_status()
    assert status.input_ok and status.output_ok, status.message
    said = speech(fsdd)
    recorder = Recorder(sample_rate=16000, block_size=512)
    recorder.start()
    time.sleep(0.3)  # the stream is running before the speech starts
    pulse.play("speakers", said, 16000)
    audio = record_while(recorder, len(said) / 16000 + 1.0)
    assert recorder.error == "" and recorder.overflows == 0
    heard, lag = aligned(audio, said)
    assert len(heard) == len(said), f"recording too short: {len(audio)} samples, speech at {lag}"
    # same sample rate end to end: the only change is the 16-bit sink (error <= 2^-15 per sample)
    np.testing.assert_allclose(heard, said, atol=1e-3)

    session = units_session()
    session.reset()
    for i in range(0, len(audio), 512):  # fed block by block, as the live view does
        session.feed(audio[i:i + 512])
    session.finish()
    assert session.duration == pytest.approx(len(audio) / 16000)
    assert len(session.units) == pytest.approx(session.duration / session.unit_seconds, abs=2)
    speech_units = session.units[round(lag / 640): round((lag + len(said)) / 640)]
    assert len(set(speech_units)) >= 10  # speech goes through many units, silence through few
    resynth = session.resynthesize(0, n_iter=8)
    assert abs(len(resynth) - len(audio)) <= 640 and np.isfinite(resynth).all() and np.abs(resynth).max() > 0.01


def test_what_the_player_plays_is_what_the_sink_receives(pulse: PulseStack) -> None:
    pulse.add_sink("speakers", rate=32000)  # the clip's own rate: no resampling anywhere
    clip = decode(CLIP)
    assert clip.sample_rate == 32000
    recorder = Recorder(sample_rate=32000, block_size=1024)
    recorder.start()
    time.sleep(0.3)
    player = Player()
    player.play(clip.audio, clip.sample_rate)
    deadline = time.monotonic() + clip.duration + 3.0
    blocks = []
    while player.playing and time.monotonic() < deadline:
        time.sleep(0.03)
        blocks.append(recorder.drain())
    assert not player.playing and player.error == "", player.error
    blocks.append(record_while(recorder, 0.5, stop_early=False))  # the tail still on its way
    audio = np.concatenate(blocks)
    heard, lag = aligned(audio, clip.audio)
    assert len(heard) == len(clip.audio), f"captured {len(audio)} samples, clip at {lag}"
    np.testing.assert_allclose(heard, clip.audio, atol=1e-3)  # sample for sample, within 16-bit rounding
    assert player.underflows == 0


def test_input_removed_mid_recording_keeps_the_audio_and_says_why(pulse: PulseStack, fsdd: Path) -> None:
    mic = pulse.add_sink("usb-mic", rate=16000)  # the only source: when it goes, nothing takes its place
    said = speech(fsdd, 4)
    recorder = Recorder(sample_rate=16000, block_size=512, stall_seconds=1.0)
    recorder.start()
    pulse.play("usb-mic", said, 16000)
    blocks = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < 1.0:
        time.sleep(0.03)
        blocks.append(recorder.drain())
    pulse.unload(mic)  # unplugged
    blocks.append(record_while(recorder, 5.0))
    audio = np.concatenate(blocks)
    assert "device disconnected" in recorder.error or "stopped unexpectedly" in recorder.error, recorder.error
    assert not recorder.recording
    assert 0.8 < len(audio) / 16000 < 2.5  # what came before the unplugging is kept
    heard, _ = aligned(audio, said[:8000])
    np.testing.assert_allclose(heard, said[:8000], atol=1e-3)  # and it is the speech


def test_a_source_that_delivers_only_silence_is_refused_with_a_reason(pulse: PulseStack) -> None:
    pulse.add_sink("idle", rate=32000)  # nothing plays into it: its monitor hears silence
    with pytest.raises(NothingRecordedError, match="only silence was recorded in 1.0 s .digital silence.: "
                                                   "is the microphone muted"):
        job = record_job(1.0)
        while True:
            next(job)


def test_a_source_that_delivers_nothing_is_reported_not_recorded(pulse: PulseStack) -> None:
    pulse.add_sink("idle", rate=16000)
    pulse.pactl("suspend-sink", "idle", "1")  # its monitor sends no audio at all: no callbacks
    recorder = Recorder(sample_rate=16000, stall_seconds=1.0, first_audio_seconds=1.0)
    recorder.start()
    audio = record_while(recorder, 60.0)  # ended by the stall check, not the 60 s; stopping it must not hang either
    assert len(audio) == 0 and not recorder.recording
    assert recorder.error == "the input device delivered no audio in 1 s (disconnected, or in use?)"
