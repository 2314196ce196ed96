"""Auditioning in the Search tab (issue 24), offscreen with fake speakers: Autoplay plays each result the user
selects (click, arrow keys) and not the ones a search selects; Space/Enter toggle, Escape stops; Loop and the
volume act on the sound playing and are remembered; audio failures are said in the user's words everywhere."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import sounddevice as sd
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from test_search_tab import NO_AUDIO, SPEAKERS, make_library, open_and_index, search, tiny_registry

from app.services.devices import DeviceStatus, Player, Recorder
from app.services.registry import ModelRegistry
from app.services.search.recording import record_job
from app.ui.results_table import ResultsTable
from app.ui.search_tab import SearchTab
from tests.fake_streams import FakeStream

GONE = "Error opening InputStream: Illegal combination of I/O devices [PaErrorCode -9993]"  # as seen for real


class Speakers(FakeStream):
    """Stands in for sounddevice.OutputStream: it stays active and the test pulls blocks through the callback."""

    opened: list[Speakers] = []

    def __init__(self, callback, blocksize, channels, **_: object) -> None:  # noqa: ANN001
        self.callback, self.blocksize, self.channels = callback, blocksize, channels
        self.active = False
        Speakers.opened.append(self)

    def pull(self) -> np.ndarray:
        out = np.zeros((self.blocksize, self.channels), np.float32)
        t = threading.Thread(target=lambda: self.callback(out, self.blocksize, None, sd.CallbackFlags()))
        t.start()
        t.join()
        return out[:, 0]


def refuses(**_: object) -> object:
    raise sd.PortAudioError(GONE, -9993)


@pytest.fixture
def registry(tmp_path: Path) -> ModelRegistry:
    return tiny_registry(tmp_path / "models")


def new_tab(qtbot, registry: ModelRegistry) -> SearchTab:
    widget = SearchTab()
    qtbot.addWidget(widget)
    widget.resize(1100, 700)
    widget.set_audio_status(SPEAKERS)
    widget.set_registry(registry)
    widget.preview_pane.player = Player(stream_factory=Speakers)
    widget.show()
    return widget


@pytest.fixture
def tab(qtbot, registry: ModelRegistry, tmp_path: Path) -> Iterator[SearchTab]:
    Speakers.opened = []
    widget = new_tab(qtbot, registry)
    open_and_index(qtbot, widget, registry, make_library(tmp_path / "lib"))
    yield widget
    widget.shutdown()


def press(qtbot, tab: SearchTab, key: Qt.Key) -> None:
    """A key into the results that selects another row: wait for that row's sound to be loaded."""
    with qtbot.waitSignal(tab.preview_shown, timeout=20_000):
        QTest.keyClick(tab.table, key)


def playing_preview(tab: SearchTab) -> bool:
    """The player plays the previewed sound (its length), from where Play starts."""
    p, player = tab.state.preview, tab.preview_pane.player
    return (p is not None and player.playing and player.duration == pytest.approx(len(p.audio) / p.sample_rate)
            and player.position == pytest.approx(tab.preview_pane.start_s - p.offset_s, abs=1e-3))


def test_autoplay_plays_what_the_user_selects_and_keys_control_it(qtbot, tab: SearchTab) -> None:
    pane, player = tab.preview_pane, tab.preview_pane.player
    assert pane.transport.autoplay and pane.transport.autoplay_button.isChecked()  # on by default

    search(qtbot, tab, "noise")  # the results come with a row selected: shown, not played (typing)
    qtbot.waitUntil(lambda: tab.state.preview is not None, timeout=20_000)
    assert tab.table.selectedItems() and not player.playing

    tab.table.setFocus()
    row = tab.table.currentRow()
    step = 1 if row + 2 < tab.table.rowCount() else -1
    for move in (step, step, -step):  # the arrows walk the list: each sound plays as it is selected
        press(qtbot, tab, Qt.Key.Key_Down if move > 0 else Qt.Key.Key_Up)
        row += move
        assert tab.table.currentRow() == row and tab.state.preview_hit is tab.state.hits[row]
        assert playing_preview(tab) and pane.play_button.text() == "Stop"
    assert len(Speakers.opened) == 1  # one stream for the whole walk: no open per sound

    QTest.keyClick(tab.table, Qt.Key.Key_Escape)  # Escape stops
    assert not player.playing and pane.play_button.text() == "Play"
    QTest.keyClick(tab.table, Qt.Key.Key_Return)  # Enter toggles
    assert playing_preview(tab)
    QTest.keyClick(tab.table, Qt.Key.Key_Enter)
    assert not player.playing
    QTest.keyClick(tab.table, Qt.Key.Key_Space)  # Space toggles
    assert playing_preview(tab)
    tab.query_edit.setFocus()
    QTest.keyClick(tab.query_edit, Qt.Key.Key_Escape)  # from the query box too
    assert not player.playing and tab.query_edit.text() == "noise"

    # a click on a row plays it
    long_row = [h.rel_path for h in tab.state.hits].index("long/mixed.wav")
    if tab.table.currentRow() == long_row:  # a click on the selected row selects nothing new
        tab.table.setFocus()
        press(qtbot, tab, Qt.Key.Key_Down if long_row == 0 else Qt.Key.Key_Up)
    rect = tab.table.visualItemRect(tab.table.item(long_row, ResultsTable.NAME))
    with qtbot.waitSignal(tab.preview_shown, timeout=20_000):
        QTest.mouseClick(tab.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    hit = tab.state.hits[long_row]
    assert playing_preview(tab) and pane.start_s == hit.best_window_start_s  # long: from the best match, as Play

    # Autoplay off: selecting only shows
    pane.transport.autoplay_button.click()
    tab.table.setFocus()
    press(qtbot, tab, Qt.Key.Key_Down if long_row + 1 < tab.table.rowCount() else Qt.Key.Key_Up)
    assert not player.playing


def test_loop_and_volume_act_on_the_sound_playing_and_are_remembered(qtbot, tab: SearchTab,
                                                                     registry: ModelRegistry) -> None:
    pane, player = tab.preview_pane, tab.preview_pane.player
    transport = pane.transport
    assert transport.volume == 1.0 and not transport.loop and transport.volume_label.text() == "100 %"
    search(qtbot, tab, "tone")
    qtbot.waitUntil(lambda: tab.state.preview is not None, timeout=20_000)
    tab.table.setFocus()
    press(qtbot, tab, Qt.Key.Key_Down)
    assert player.playing and player.volume == 1.0

    transport.volume_slider.setValue(40)  # live, on the sound playing
    assert player.volume == pytest.approx(0.4) and transport.volume_label.text() == "40 %"
    audio = tab.state.preview.audio.reshape(-1)
    at = round(player.position * tab.state.preview.sample_rate)
    written = Speakers.opened[-1].pull()
    np.testing.assert_allclose(written, 0.4 * audio[at:at + len(written)], atol=1e-6)

    transport.loop_button.click()
    assert player.loop
    transport.autoplay_button.click()
    QTest.keyClick(tab.table, Qt.Key.Key_Space)  # Play (Space) after a stop uses them too
    QTest.keyClick(tab.table, Qt.Key.Key_Space)
    assert player.loop and player.volume == pytest.approx(0.4)

    again = new_tab(qtbot, registry)  # the next session starts as this one was left
    try:
        t = again.preview_pane.transport
        assert (t.autoplay, t.loop, t.volume_slider.value()) == (False, True, 40)
        assert t.volume_label.text() == "40 %"
    finally:
        again.shutdown()


def test_the_transport_fits_a_narrow_preview(qtbot, tab: SearchTab) -> None:
    tab.resize(1024, 700)
    qtbot.wait(50)
    transport = tab.preview_pane.transport
    for w in (transport.play_button, transport.loop_button, transport.autoplay_button, transport.volume_label,
              transport.reverse_button, transport.speed_caption, transport.speed_label, transport.speed_reset):
        assert w.isVisible() and w.width() >= w.minimumSizeHint().width(), w
        assert w.geometry().right() <= transport.width()
    assert transport.volume_slider.width() >= 50 and transport.speed_slider.width() >= 50


def test_without_an_output_device_selecting_only_shows(qtbot, tab: SearchTab) -> None:
    tab.set_audio_status(NO_AUDIO)  # a normal state: no red line at each selection, Play's tooltip says why
    search(qtbot, tab, "noise")
    qtbot.waitUntil(lambda: tab.state.preview is not None, timeout=20_000)
    tab.table.setFocus()
    press(qtbot, tab, Qt.Key.Key_Down if tab.table.currentRow() + 1 < tab.table.rowCount() else Qt.Key.Key_Up)
    assert not tab.preview_pane.player.playing and "unavailable" not in tab.status_label.text()
    assert "no audio output device" in tab.preview_pane.play_button.toolTip()


def test_audio_failures_are_said_in_the_users_words(qtbot, tab: SearchTab) -> None:
    search(qtbot, tab, "noise")
    qtbot.waitUntil(lambda: tab.state.preview is not None, timeout=20_000)
    tab.preview_pane.player = Player(stream_factory=refuses)
    tab.preview_pane.toggle_play()
    text = tab.status_label.text()
    assert text.startswith("Cannot play: The output device is no longer available — choose another in"), text

    # Search's Record, on an input that went away with the sound server
    tab.record_query.set_audio_status(DeviceStatus(True, True, "fine"))
    tab.record_query.record_factory = lambda seconds, stop: record_job(
        seconds, stop=stop, recorder_factory=lambda rate: Recorder(sample_rate=rate, stream_factory=refuses))
    tab.record_query.toggle()
    qtbot.waitUntil(lambda: not tab.record_query.recording_now(), timeout=10_000)
    text = tab.status_label.text()
    assert text.startswith("Recording failed: The input device is no longer available — choose another in"), text
    assert "PaErrorCode" not in text and "Illegal" not in text
