"""Varispeed and Reverse in the Search tab's preview (issue 40), offscreen with fake speakers: the samples sent to
the player are the sound's backwards, or resampled by 2 ** (semitones / 12) (a tone's pitch and length measured),
live while it plays (the same stream, from the moment heard), the play head and clicks mapped through them, a
long sound made in a worker, the settings remembered; at 0 the player gets the sound's own samples. And once
through a real output (real_audio_stack.py): the pitch heard changes live, with no underflow."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QSettings
from real_audio_stack import PulseStack, running_stack
from test_search_audition import Speakers, new_tab
from test_search_tab import make_library, open_and_index, search, tiny_registry

from app.services.devices import Player, Recorder, device_status
from app.services.registry import ModelRegistry
from app.ui import preview_audition
from app.ui.search_tab import SearchTab
from app.ui.search_transport import VARISPEED_KEY, TransportBar

TONE_HZ = 700  # make_library's birds/tone.wav: 0.8 s of it at 32 kHz


class Heard(Player):
    """A player on fake speakers that keeps what it was given to play: (samples (N,), rate, start seconds)."""

    def __init__(self) -> None:
        super().__init__(stream_factory=Speakers)
        self.sent: list[tuple[np.ndarray, int, float]] = []

    def play(self, audio: np.ndarray, sample_rate: int, start_seconds: float = 0.0) -> None:
        self.sent.append((np.asarray(audio).reshape(len(audio), -1)[:, 0].copy(), sample_rate, start_seconds))
        super().play(audio, sample_rate, start_seconds)


@pytest.fixture
def registry(tmp_path: Path) -> ModelRegistry:
    return tiny_registry(tmp_path / "models")


@pytest.fixture
def tab(qtbot, registry: ModelRegistry, tmp_path: Path) -> Iterator[SearchTab]:
    Speakers.opened = []
    widget = new_tab(qtbot, registry)
    widget.preview_pane.player = Heard()
    widget.preview_pane.transport.autoplay_button.setChecked(False)
    open_and_index(qtbot, widget, registry, make_library(tmp_path / "lib"))
    yield widget
    widget.shutdown()


def preview(qtbot, tab: SearchTab, rel_path: str) -> None:
    """`rel_path` of make_library's sounds selected and drawn."""
    search(qtbot, tab, "tone")
    row = [h.rel_path for h in tab.state.hits].index(rel_path)
    tab.table.selectRow(row)
    qtbot.waitUntil(lambda: tab.state.preview is not None and tab.state.preview.path == tab.state.hits[row].path
                    and tab.preview_pane._drawn is tab.state.preview, timeout=20_000)


def pitch(x: np.ndarray, sr: int) -> float:
    """The strongest frequency of `x` (Hz), to a fraction of a bin (parabolic peak)."""
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x)), 8 * len(x)))
    k = int(spectrum.argmax())
    a, b, c = np.log(spectrum[k - 1:k + 2])
    return (k + 0.5 * (a - c) / (a - 2 * b + c)) * sr / (8 * len(x))


def played(tab: SearchTab) -> tuple[np.ndarray, int, float]:
    """Play, and what the player was given; stopped again."""
    pane = tab.preview_pane
    pane.toggle_play()
    assert pane.player.playing
    sent = pane.player.sent[-1]
    pane.stop_playback()
    return sent


def test_reverse_sends_the_sound_backwards_and_the_play_head_runs_from_its_end(qtbot, tab: SearchTab) -> None:
    preview(qtbot, tab, "birds/tone.wav")
    pane, p = tab.preview_pane, tab.state.preview
    pane.transport.reverse_button.click()
    pane.toggle_play()
    samples, sr, start = pane.player.sent[-1]
    assert np.array_equal(samples, p.audio[::-1]) and sr == p.sample_rate and start == 0.0
    pane._tick_playhead()
    assert pane.waveform.playhead.value() == pytest.approx(p.end_s)  # heard first: the sound's end
    written = Speakers.opened[-1].pull()
    np.testing.assert_array_equal(written, p.audio[::-1][:len(written)])
    pane._tick_playhead()
    assert pane.waveform.playhead.value() == pytest.approx(p.end_s - len(written) / sr)  # and moving left
    pane.seek_to(0.3)  # a click: from there, backwards
    assert pane.player.position == pytest.approx(p.end_s - 0.3)
    pane.stop_playback()


@pytest.mark.parametrize("semitones", [12, 5, -7, -12])
def test_varispeed_resamples_by_its_ratio_pitch_and_length_together(qtbot, tab: SearchTab, semitones: int) -> None:
    preview(qtbot, tab, "birds/tone.wav")
    pane, p = tab.preview_pane, tab.state.preview
    pane.transport.speed_slider.setValue(semitones)
    samples, sr, _ = played(tab)
    ratio = 2 ** (semitones / 12)
    assert sr == p.sample_rate  # the same stream: only the samples change
    assert len(samples) == pytest.approx(len(p.audio) / ratio, abs=2)
    assert pitch(samples, sr) == pytest.approx(TONE_HZ * ratio, rel=2e-3)
    assert pitch(p.audio, sr) == pytest.approx(TONE_HZ, rel=2e-3)  # the measure, on the sound as recorded
    assert pane.transport.speed_label.text() == f"{'+' if semitones > 0 else '−'}{abs(semitones)} st"


def test_back_to_0_the_player_gets_the_sounds_own_samples(qtbot, tab: SearchTab) -> None:
    preview(qtbot, tab, "birds/tone.wav")
    transport, p = tab.preview_pane.transport, tab.state.preview
    assert not transport.speed_reset.isEnabled()
    transport.speed_slider.setValue(-3)
    transport.reverse_button.click()
    assert not np.array_equal(played(tab)[0][:len(p.audio)], p.audio)
    transport.speed_reset.click()
    transport.reverse_button.click()
    assert transport.speed_slider.value() == 0 and not transport.speed_reset.isEnabled()
    samples, _, _ = played(tab)
    assert np.array_equal(samples, p.audio)  # bit for bit: no resampler between the file and the speakers


def test_a_change_while_playing_goes_on_from_the_moment_heard(qtbot, tab: SearchTab) -> None:
    preview(qtbot, tab, "long/mixed.wav")  # 5 s: a tone, noise, silence
    pane, player = tab.preview_pane, tab.preview_pane.player
    pane.seek_to(0.5)
    pane.toggle_play()
    speakers = Speakers.opened[-1]
    for _ in range(10):
        speakers.pull()
    heard = pane.heard_now()
    assert heard == pytest.approx(0.5 + 10 * 1024 / 32000)
    pane.transport.speed_slider.setValue(12)  # live: twice as fast from here
    assert len(player.sent) == 2 and Speakers.opened[-1] is speakers  # the stream runs on, its sound replaced
    assert pane.heard_now() == pytest.approx(heard, abs=1e-4) and player.position == pytest.approx(heard / 2, abs=1e-4)
    speakers.pull()
    assert pane.heard_now() == pytest.approx(heard + 2 * 1024 / 32000, abs=1e-3)
    pane.transport.reverse_button.click()  # backwards from the moment heard
    at = pane.heard_now()
    speakers.pull()
    assert pane.heard_now() == pytest.approx(at - 2 * 1024 / 32000, abs=1e-3)
    pane.seek_to(4.0)  # a click: twice as fast, backwards, from 4 s
    assert player.position == pytest.approx((5.0 - 4.0) / 2, abs=1e-4)
    pane._tick_playhead()
    assert pane.waveform.playhead.value() == pytest.approx(4.0, abs=1e-3)
    pane.stop_playback()


def test_a_selected_part_plays_backwards_from_its_end(qtbot, tab: SearchTab) -> None:
    preview(qtbot, tab, "long/mixed.wav")
    pane, p = tab.preview_pane, tab.state.preview
    pane.transport.reverse_button.click()
    pane.select_part(1.0, 3.0, True)
    pane.toggle_play()
    samples, sr, start = pane.player.sent[-1]
    assert np.array_equal(samples, p.audio[sr:3 * sr][::-1]) and start == 0.0
    pane._tick_playhead()
    assert pane.waveform.playhead.value() == pytest.approx(3.0)
    pane.stop_playback()


def test_a_long_sound_at_another_speed_is_made_in_a_worker_then_played(qtbot, tab: SearchTab, monkeypatch) -> None:
    monkeypatch.setattr(preview_audition, "SYNC_FRAMES", 1000)  # every sound here is "long"
    preview(qtbot, tab, "long/mixed.wav")
    pane, player, p = tab.preview_pane, tab.preview_pane.player, tab.state.preview
    pane.transport.speed_slider.setValue(12)
    pane.toggle_play()
    assert not player.playing and pane.play_button.text() == "Stop"  # on its way
    pane.transport.speed_slider.setValue(-12)  # moved while the first was made: what plays is what it says now
    qtbot.waitUntil(lambda: player.playing, timeout=10_000)
    assert len(player.sent) == 1 and len(player.sent[0][0]) == pytest.approx(2 * len(p.audio), abs=2)
    pane.stop_playback()
    pane.toggle_play()  # made once: played again at once
    assert player.playing and len(player.sent) == 2
    pane.stop_playback()
    pane.transport.speed_slider.setValue(7)
    pane.toggle_play()
    pane.stop_playback()  # stopped before it came: it does not start by itself
    qtbot.waitUntil(lambda: not pane.audition.busy(), timeout=10_000)
    qtbot.wait(50)
    assert not player.playing and len(player.sent) == 2 and pane.play_button.text() == "Play"


def test_a_long_sound_moved_while_playing_plays_on_until_its_new_samples_come(qtbot, tab: SearchTab,
                                                                              monkeypatch) -> None:
    monkeypatch.setattr(preview_audition, "SYNC_FRAMES", 1000)
    preview(qtbot, tab, "long/mixed.wav")
    pane, player, p = tab.preview_pane, tab.preview_pane.player, tab.state.preview
    pane.seek_to(0.5)
    pane.toggle_play()  # as recorded: its own samples, at once
    assert player.playing and len(player.sent) == 1
    pane.transport.speed_slider.setValue(12)
    assert player.playing and len(player.sent) == 1  # the sound plays on meanwhile
    qtbot.waitUntil(lambda: len(player.sent) == 2, timeout=10_000)
    assert len(player.sent[1][0]) == pytest.approx(len(p.audio) / 2, abs=2)
    assert pane.heard_now() == pytest.approx(0.5, abs=1e-3) and player.position == pytest.approx(0.25, abs=1e-3)
    pane.stop_playback()


def test_varispeed_and_reverse_are_remembered(qtbot, tab: SearchTab, registry: ModelRegistry) -> None:
    transport = tab.preview_pane.transport
    assert transport.speed_slider.value() == 0 and not transport.reverse_button.isChecked()
    transport.speed_slider.setValue(-5)
    transport.reverse_button.click()
    again = new_tab(qtbot, registry)  # the next session starts as this one was left
    try:
        t = again.preview_pane.transport
        assert (t.speed_slider.value(), t.reverse_button.isChecked(), t.speed_label.text()) == (-5, True, "−5 st")
        assert t.audition.semitones == -5 and t.audition.reverse
    finally:
        again.shutdown()


def test_a_stored_speed_out_of_reach_or_not_a_number_is_read_safely(qtbot) -> None:
    for stored, shown in (("junk", 0), (99, 12), (-40, -12), (3, 3)):
        QSettings().setValue(VARISPEED_KEY, stored)
        bar = TransportBar()
        qtbot.addWidget(bar)
        assert bar.speed_slider.value() == shown, stored


@pytest.fixture
def pulse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PulseStack]:
    yield from running_stack(tmp_path_factory)


@pytest.mark.slow
def test_through_a_real_output_the_speed_changes_live_and_nothing_underflows(qtbot, pulse: PulseStack,
                                                                             registry: ModelRegistry,
                                                                             tmp_path: Path) -> None:
    """PortAudio's own callback plays the preview into a PulseAudio null sink whose monitor is recorded: the
    tone is heard an octave up, then (moved while it plays) an octave down, with no underflow at the change."""
    pulse.add_sink("speakers", rate=32000)
    widget = SearchTab()
    qtbot.addWidget(widget)
    widget.resize(1100, 700)
    widget.set_audio_status(device_status())
    widget.set_registry(registry)
    widget.preview_pane.transport.autoplay_button.setChecked(False)
    widget.show()
    blocks = []
    try:
        open_and_index(qtbot, widget, registry, make_library(tmp_path / "lib"))
        preview(qtbot, widget, "long/mixed.wav")
        pane = widget.preview_pane
        pane.select_part(0.0, 2.0, True)  # its 500-Hz tone
        recorder = Recorder(sample_rate=32000, block_size=1024)
        recorder.start()

        def listen(ms: int) -> None:
            for _ in range(ms // 50):
                qtbot.wait(50)
                blocks.append(recorder.drain())

        listen(300)
        pane.transport.speed_slider.setValue(12)
        pane.toggle_play()
        listen(500)
        pane.transport.speed_slider.setValue(-12)  # live
        listen(1500)
        assert pane.player.playing and pane.player.underflows == 0
        pane.stop_playback()
        recorder.stop()
    finally:
        widget.shutdown()
    audio = np.concatenate(blocks)
    loud = np.flatnonzero(np.abs(audio) > 0.05)
    first, last = loud[0], loud[-1]
    assert pitch(audio[first + 3200:first + 9600], 32000) == pytest.approx(1000, rel=0.01)
    assert pitch(audio[last - 9600:last - 3200], 32000) == pytest.approx(250, rel=0.01)


def test_the_transport_takes_one_row_where_it_is_wide_and_two_where_it_is_narrow(qtbot) -> None:
    """A stacked preview (under the results) is short of height, a side-by-side one of width."""
    bar = TransportBar()
    qtbot.addWidget(bar)
    bar.show()
    for width, one in ((900, True), (420, False), (900, True)):
        bar.resize(width, bar.sizeHint().height())
        qtbot.waitUntil(lambda one=one: bar.one_row() == one, timeout=2_000)
        qtbot.wait(20)  # the layout takes the move in
        for w in (bar.play_button, bar.autoplay_button, bar.volume_label, bar.reverse_button, bar.speed_label,
                  bar.speed_reset):
            assert w.isVisible() and w.width() >= w.minimumSizeHint().width(), (width, w)
        assert bar.volume_slider.width() >= 50 and bar.speed_slider.width() >= 50, width
        top = bar.reverse_button.mapTo(bar, bar.reverse_button.rect().topLeft()).y()
        assert (top < bar.play_button.height()) == one, (width, top)
    assert bar.minimumSizeHint().width() < 420  # one row never holds the pane wide
