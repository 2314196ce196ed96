"""The Units tab recording through a real audio stack: speech played into a PulseAudio null sink is the
microphone (its monitor), as in tests/test_real_audio.py. The tab's own device check, Recorder and Player
are used unchanged: nothing is injected but the model registry."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from real_audio_stack import PulseStack, aligned, running_stack

from app.services.devices import Recorder
from app.services.registry import ModelRegistry
from app.ui.units_tab import UnitsTab
from core.audio import decode

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def pulse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PulseStack]:
    yield from running_stack(tmp_path_factory)


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # the GUI thread, PortAudio's thread and the worker share 2 cores
    yield
    torch.set_num_threads(before)


def speech(fsdd: Path, n: int = 4) -> np.ndarray:
    """n spoken digits at 16 kHz with 0.15 s pauses (about 2 s for n = 4)."""
    with open(fsdd / "metadata.csv", newline="") as f:
        paths = [fsdd / r["path"] for r in list(csv.DictReader(f))[:n]]
    pause = np.zeros(2400, np.float32)
    return np.concatenate([np.concatenate([decode(p, sample_rate=16000).audio, pause]) for p in paths])


@pytest.fixture
def make_tab(qtbot) -> Iterator[Callable[[], UnitsTab]]:
    registry = ModelRegistry(folders=[(ROOT / "resources" / "models", "default")])
    tabs: list[UnitsTab] = []

    def make() -> UnitsTab:
        tab = UnitsTab()  # real device_status, Recorder and Player
        qtbot.addWidget(tab)
        tab.set_registry(registry)
        tab.set_models(registry.scan())
        tab.resize(1100, 700)
        tab.show()
        qtbot.waitUntil(lambda: tab.session is not None and tab.state == "idle", timeout=30_000)
        tabs.append(tab)
        return tab

    yield make
    for tab in tabs:
        tab.shutdown()


def test_live_units_and_resynthesis_from_speech_in_the_sink(qtbot, pulse: PulseStack, make_tab, fsdd: Path) -> None:
    pulse.add_sink("speakers", rate=16000)
    tab = make_tab()
    tab.refresh_devices()
    assert tab.record_button.isEnabled() and tab.device_label.text() == ""
    said = speech(fsdd)
    tab.toggle_recording()
    assert tab.state == "recording"
    pulse.play("speakers", said, 16000)
    qtbot.waitUntil(lambda: len(tab.live_strip.units) >= 20, timeout=10_000)  # units scroll while speaking
    assert tab.live_view.n_frames > 50
    qtbot.wait(round(len(said) / 16) + 300)  # until the speech has been played
    tab.toggle_recording()
    qtbot.waitUntil(lambda: tab.resynthesis is not None and tab.state == "idle", timeout=60_000)

    s = tab.session
    heard, lag = aligned(s.audio, said)
    assert len(heard) == len(said), "the speech is not all in the recording"
    np.testing.assert_allclose(heard, said, atol=1e-3)  # what the tab recorded is what was played
    assert len(s.units) == pytest.approx(s.duration / s.unit_seconds, abs=2)
    assert len(set(s.units[lag // 640: (lag + len(said)) // 640])) >= 10
    assert tab.original_view.n_frames == s.n_frames and tab.histogram.counts.sum() == len(s.units)
    assert abs(len(tab.resynthesis.audio) - s.n_samples) <= 640 and np.abs(tab.resynthesis.audio).max() > 0.01
    assert tab.play_resynth_button.isEnabled()  # the sink is an output device too
    assert "Resynthesised" in tab.status_label.text()


def test_unplugging_the_microphone_keeps_the_recording_and_says_why(qtbot, pulse: PulseStack, make_tab,
                                                                   fsdd: Path) -> None:
    mic = pulse.add_sink("usb-mic", rate=16000)  # the only source
    tab = make_tab()
    tab.refresh_devices()
    messages: list[str] = []
    tab.status_changed.connect(messages.append)
    said = speech(fsdd)
    tab.toggle_recording()
    pulse.play("usb-mic", said, 16000)
    qtbot.waitUntil(lambda: len(tab.live_strip.units) >= 15, timeout=10_000)
    pulse.unload(mic)
    qtbot.waitUntil(lambda: tab.state == "idle" and tab.recorder is None, timeout=10_000)
    assert any(m.startswith("Recording stopped: audio input stopped unexpectedly (device disconnected?)")
               for m in messages), messages
    assert any("The recording ended by itself" in m and "what came before is kept" in m for m in messages)
    s = tab.session
    assert s.duration > 0.5 and len(s.units) >= 15  # the audio before the unplugging is kept and encoded
    heard, _ = aligned(s.audio, said[:4000])
    np.testing.assert_allclose(heard, said[:4000], atol=1e-3)
    qtbot.waitUntil(lambda: tab.resynthesis is not None and tab.state == "idle", timeout=60_000)


def test_a_silent_input_gives_a_message_not_an_empty_utterance(qtbot, pulse: PulseStack, make_tab) -> None:
    pulse.add_sink("idle", rate=16000)  # nothing plays into it
    tab = make_tab()
    tab.refresh_devices()
    tab.toggle_recording()
    qtbot.wait(1000)
    tab.toggle_recording()
    qtbot.waitUntil(lambda: tab.state == "idle" and tab.live is not None and tab.live.done, timeout=20_000)
    qtbot.wait(200)
    text = tab.status_label.text()
    assert text.startswith("Only silence was recorded in") and "digital silence" in text, text
    assert "is the microphone muted" in text
    assert tab.resynthesis is None and not tab.play_resynth_button.isEnabled()
    assert tab.record_button.isEnabled()  # and the tab is ready to try again


def test_a_source_sending_nothing_ends_the_recording_with_a_message(qtbot, pulse: PulseStack, make_tab) -> None:
    pulse.add_sink("idle", rate=16000)
    pulse.pactl("suspend-sink", "idle", "1")  # its monitor sends no audio at all
    tab = make_tab()
    tab.refresh_devices()
    tab.recorder_factory = lambda: Recorder(sample_rate=16000, first_audio_seconds=1.0, stall_seconds=1.0)
    tab.toggle_recording()
    qtbot.waitUntil(lambda: tab.state == "idle" and tab.recorder is None, timeout=10_000)
    qtbot.waitUntil(lambda: tab.live is not None and tab.live.done, timeout=10_000)
    qtbot.wait(200)
    assert tab.status_label.text() == ("Nothing was recorded: the input device delivered no audio in 1 s "
                                       "(disconnected, or in use?)")
    assert tab.resynthesis is None and tab.record_button.isEnabled()
