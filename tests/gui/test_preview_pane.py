"""The Search tab's preview pane on its own (app/ui/search_preview.py), fed a preview directly (no library,
fast): how playback follows the part the user selects."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from app.services.devices import Player
from app.services.library.records import Hit
from app.services.search.preview import Preview
from app.ui.search_preview import PreviewPane
from app.ui.search_state import SearchState
from app.ui.search_tab import SearchTab
from tests.fake_streams import FakeSpeakers
from tests.gui.test_search_tab import SPEAKERS

SR = 8000


@pytest.fixture
def pane(qtbot) -> Iterator[PreviewPane]:
    """The preview of a 700-s file: 10 s of it from 600 s (a long file is previewed as an excerpt)."""
    state = SearchState()
    pane = PreviewPane(state)
    qtbot.addWidget(pane)
    pane.player = Player(stream_factory=FakeSpeakers)
    pane.set_audio_status(SPEAKERS)
    path = Path("/library/ambience/wind.wav")
    audio = (np.random.default_rng(0).standard_normal(10 * SR) * 0.1).astype(np.float32)
    state.preview_hit = Hit(path, 0.5, 700.0, "ambience", 605.0, [0.1] * 70)
    state.preview = Preview(path, audio, SR, 600.0, 700.0, np.zeros((10, 20), np.float32), 1.0, SR / 2)
    pane.draw()
    yield pane
    pane.stop()


def test_selecting_while_playing_moves_playback_to_the_part_once_the_drag_ends(pane: PreviewPane,
                                                                             monkeypatch) -> None:
    """Playback used to restart at the part's start at every mouse move of the drag (a stutter, Loop on or off)."""
    pane.transport.loop_button.setChecked(True)
    pane.toggle_play()
    plays: list[float] = []
    real = pane.player.play
    monkeypatch.setattr(pane.player, "play", lambda audio, rate, start_seconds=0.0: (
        plays.append(len(audio) / rate), real(audio, rate, start_seconds=start_seconds)))
    for b in np.linspace(601.5, 603.0, 10):  # the drag's moves
        pane.select_part(601.0, float(b), False)
    assert plays == [] and pane.player.playing  # the sound plays on while the user drags
    pane.select_part(601.0, 603.0, True)  # released: the part alone, looped
    assert plays == [pytest.approx(2.0)] and pane.player.loop and pane.selected_part() == (601.0, 603.0)


def test_find_similar_is_off_for_a_sound_whose_audio_is_not_indexed_yet(pane: PreviewPane) -> None:
    """The big-library trial: a sound listed by its name before its audio was embedded offered Find similar,
    which then failed with "not indexed yet"."""
    pane.state.ready = True
    pane.update_actions()
    assert pane.similar_button.isEnabled()
    pane.state.preview_hit.embedded = False
    pane.update_actions()
    assert not pane.similar_button.isEnabled() and "not indexed yet" in pane.similar_button.toolTip()


def test_the_selected_part_is_said_to_the_tenth_in_one_style_with_its_length(pane: PreviewPane) -> None:
    """A 4-s part of a long file read "2:24 – 2:28" (its length and tenths lost), and one across the minute
    "59.1 s – 1:03" (two styles in one span)."""
    pane.select_part(601.1, 605.1, True)
    assert pane.selection_label.text() == "10:01.1 – 10:05.1 (4.0 s)"
    pane.state.preview = replace(pane.state.preview, offset_s=55.0)
    pane.draw()
    pane.select_part(59.1, 63.1, True)
    assert pane.selection_label.text() == "0:59.1 – 1:03.1 (4.0 s)"
    pane.select_part(56.0, 58.0, True)
    assert pane.selection_label.text() == "56.0 – 58.0 s (2.0 s)"


def test_escape_stops_the_sound_then_drops_the_selected_part(qtbot) -> None:
    """Only a click outside the part gave the whole sound back; Escape stopped the sound and did nothing more."""
    tab = SearchTab()
    qtbot.addWidget(tab)
    pane = tab.preview_pane
    pane.player = Player(stream_factory=FakeSpeakers)
    pane.set_audio_status(SPEAKERS)
    state = tab.state
    state.preview_hit = Hit(Path("/library/wind.wav"), 0.5, 10.0, "", 0.0, [0.1])
    state.preview = Preview(Path("/library/wind.wav"), np.zeros(10 * SR, np.float32), SR, 0.0, 10.0,
                            np.zeros((10, 20), np.float32), 1.0, SR / 2)
    pane.draw()
    pane.select_part(2.0, 6.0, True)
    pane.toggle_play()
    tab.stop_shortcut.activated.emit()
    assert not pane.player.playing and pane.selected_part() == (2.0, 6.0)  # first the sound
    tab.stop_shortcut.activated.emit()
    assert pane.selected_part() is None and pane.start_s == 2.0  # then the part; Play starts where it began
    tab.shutdown()


def test_reveal_without_a_file_manager_says_so_and_copies_the_folder(pane: PreviewPane, qtbot) -> None:
    """Issue 40: with no file manager (openUrl returns False) Reveal in folder did nothing and said nothing."""
    from PySide6.QtGui import QGuiApplication

    opened: list[str] = []
    pane.open_url = lambda url: opened.append(url.toLocalFile()) or False
    QGuiApplication.clipboard().setText("before")
    with qtbot.waitSignal(pane.message, timeout=1000) as blocker:
        pane.reveal_selected()
    assert opened == ["/library/ambience"] and QGuiApplication.clipboard().text() == "/library/ambience"
    assert "file manager" in blocker.args[0] and "copied" in blocker.args[0]
    pane.open_url = lambda url: True  # a file manager opened it: nothing to say, the clipboard left alone
    QGuiApplication.clipboard().setText("before")
    with qtbot.assertNotEmitted(pane.message):
        pane.reveal_selected()
    assert QGuiApplication.clipboard().text() == "before"
