"""The Units tab's state without Qt: loading a model, recording, a file, the resynthesis asked for while busy,
the voice and loudness choices, what the controls allow, the live view's window; plus the proof that it
imports no Qt or torch."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from app.ui.units_state import AUTO_VOICE, LIVE_SECONDS, UnitsState
from tests.heard import Heard

ROOT = Path(__file__).resolve().parents[1]
RATE = 16000


def session(seconds: float = 1.0, loud: bool = True, finished: bool = True) -> SimpleNamespace:
    """What the state reads of a `UnitsSession`: an utterance of a tone (or silence), 100 frames a second."""
    n = int(seconds * RATE)
    audio = (0.3 * np.sin(np.arange(n) * 2 * np.pi * 220 / RATE)).astype(np.float32) if loud \
        else np.zeros(n, np.float32)
    return SimpleNamespace(
        codebook_size=8, unit_seconds=0.04, hop_seconds=0.01, lookahead_ms=80.0, speakers=["ann", "bob"],
        audio=audio, sample_rate=RATE, n_samples=n, duration=seconds, nonfinite=0, clipped=0, finished=finished,
        units=[1, 2, 2, 3], spectrogram=np.zeros((int(seconds * 100), 4), np.float32), n_frames=int(seconds * 100),
        source=None, voice_fit=SimpleNamespace(name="bob"), codebook_histogram=lambda: np.array([0, 1, 2, 1]))


def devices(input_ok: bool = True, output_ok: bool = True) -> SimpleNamespace:
    return SimpleNamespace(input_ok=input_ok, output_ok=output_ok)


@pytest.fixture
def state() -> UnitsState:
    s = UnitsState()
    s.set_audio_status(devices())
    s.begin_loading("tiny")
    s.model_loaded("tiny", session())
    s.jobs_done()
    return s


def test_a_model_loads_only_when_idle_and_says_what_it_is() -> None:
    state = UnitsState()
    heard = Heard(state)
    assert state.begin_loading("tiny") and state.phase == "loading"
    assert not state.begin_loading("other") and "Busy" in state.message
    state.model_loaded("tiny", session())
    assert state.loaded_name == "tiny" and state.voice_override is None
    assert heard.names()[-4:] == ["model", "cleared", "voice_fit", "message"]
    assert heard.events[-1] == ("message", state.message, False)  # the model's description is not news
    assert "8 units, one every 40 ms" in state.message and "recording is unavailable" in state.message
    assert not state.jobs_done() and state.phase == "idle"


def test_the_controls_follow_the_phase_and_the_devices(state: UnitsState) -> None:
    c = state.controls()
    assert c.record and c.open_file and c.choose_model and c.voice and c.play_original and c.export_units
    assert not c.play_resynthesis and not c.export_wav  # nothing resynthesised yet
    state.recording_started()
    c = state.controls()
    assert c.recording and c.record and not c.open_file and not c.choose_model and not c.voice
    state.recording_stopped("")
    assert state.phase == "finishing" and not state.controls().record and state.controls().voice
    state.jobs_done()
    state.set_audio_status(devices(input_ok=False, output_ok=False))
    c = state.controls()
    assert not c.record and c.open_file and not c.play_original


def test_a_recording_is_reviewed_then_resynthesised_once_the_live_worker_has_ended(state: UnitsState) -> None:
    state.recording_started()
    assert state.phase == "recording" and "Recording… units appear about 80 ms" in state.message
    heard = Heard(state)
    assert not state.add_live([], np.zeros((0, 4), np.float32))  # nothing came: nothing to redraw
    assert state.add_live([1, 2], np.zeros((10, 4), np.float32))
    assert heard.names() == ["live", "voice_fit"] and state.frames == 10 and state.units == [1, 2]
    state.recording_stopped("", "")
    state.live_done([1, 2, 2, 3])
    assert "4 units in 1.00 s (3 different)" in state.message and "review" in heard.names()
    assert state.begin_resynthesis() is None  # still finishing: asked for, it waits
    assert state.jobs_done() and not state.pending_resynthesis  # the tab starts it now
    assert state.begin_resynthesis() == (None, True) and state.phase == "resynthesising"
    result = SimpleNamespace(audio=np.zeros(RATE, np.float32), sample_rate=RATE, speaker="bob", loudness=True)
    state.resynthesised(result)
    assert state.resynthesis is result and "as bob (the voice that fits the speech best). P plays it." in \
        state.message
    state.jobs_done()
    assert state.controls().play_resynthesis and state.controls().export_wav


def test_a_silent_recording_says_why_and_is_not_resynthesised(state: UnitsState) -> None:
    state.session = session(loud=False)
    state.recording_started()
    state.recording_stopped("the input closed")
    state.live_done([0, 0])
    assert state.message.startswith("Only silence was recorded") and "(the input closed)" in state.message
    assert not state.jobs_done()


def test_a_file_is_drawn_whole_and_queued_for_resynthesis(state: UnitsState) -> None:
    state.session.source = Path("/x/seven.wav")
    state.encoding_started("seven.wav")
    assert state.phase == "encoding" and state.message == "Encoding seven.wav…"
    heard = Heard(state)
    state.file_encoded([1, 2, 2, 3])
    assert heard.names()[0] == "live" and state.frames == 100
    assert state.message.startswith("seven.wav: 4 units in 1.00 s") and state.pending_resynthesis
    assert state.default_stem() == "seven"


def test_a_chosen_voice_sticks_until_auto_and_loudness_asks_again(state: UnitsState) -> None:
    assert state.choose_voice(2) and state.voice_override == 1
    assert not state.choose_voice(-1) and state.voice_override == 1  # the combo cleared: nothing chosen
    assert state.begin_resynthesis() == (1, True)
    state.jobs_done()
    assert state.set_follow_loudness(False) and state.begin_resynthesis() == (1, False)
    state.jobs_done()
    assert state.choose_voice(0) and state.voice_override is None
    assert state.auto_voice_text(None) == AUTO_VOICE and state.auto_voice_text(state.session.voice_fit) == \
        "Auto: bob"


def test_nothing_is_resynthesised_before_the_utterance_is_finished(state: UnitsState) -> None:
    state.session.finished = False
    assert not state.choose_voice(1) and state.begin_resynthesis() is None and state.phase == "idle"


def test_the_live_window_keeps_the_last_seconds_and_scrolls(state: UnitsState) -> None:
    state.recording_started()
    window = state.live_window()
    assert window.frames.shape[0] == 0 and window.x_range == (0.0, LIVE_SECONDS)
    state.add_live(list(range(300)), np.zeros((1200, 4), np.float32))  # 12 s of frames, 12 s of units
    window = state.live_window()
    assert window.frames.shape[0] == 800 and window.start == pytest.approx(4.0)
    assert window.x_range == pytest.approx((4.0, 12.0))
    assert len(window.units) == 201 and window.units_start == pytest.approx(99 * 0.04)


def test_a_new_model_forgets_the_voice_and_the_resynthesis(state: UnitsState) -> None:
    state.choose_voice(1)
    state.resynthesis = SimpleNamespace(audio=np.zeros(1), sample_rate=RATE)
    state.begin_loading("other")
    state.model_loaded("other", session())
    assert state.voice_override is None and state.resynthesis is None
    state.no_model()
    assert state.session is None and not state.controls().record


def test_a_resynthesis_asked_for_while_busy_starts_when_the_jobs_are_done(state: UnitsState) -> None:
    assert state.begin_resynthesis() == (None, True)  # the first one runs now
    assert state.choose_voice(1) and state.begin_resynthesis() is None  # another voice meanwhile: it waits
    assert state.jobs_done() and state.begin_resynthesis() == (0, True)
    assert not state.jobs_done()  # asked once, run once
