"""The preview's selected part: drag across the waveform to select it, Play plays it alone (Loop loops it), a
click outside gives the whole sound back, Export writes it as a file of its own and the drag handle carries it
into other programs. The part's samples are the file's own (every channel, bit for bit)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtWidgets import QApplication

from app.ui.search_tab import SearchTab
from tests.gui.test_preview_waveform import at, drag
from tests.gui.test_search_tab import make_library, preview_long_file, shown_tab, tiny_registry

pytestmark = pytest.mark.slow


def waveform_point(tab: SearchTab, seconds: float) -> QPoint:
    """The waveform viewport's pixel at `seconds`, halfway up."""
    return at(tab.preview_pane.waveform, seconds)


def mouse_drag(tab: SearchTab, a: float, b: float) -> None:
    """A real left-button drag across the waveform, from `a` to `b` seconds."""
    wave = tab.preview_pane.waveform
    drag(wave, at(wave, a), at(wave, b))


@pytest.fixture
def previewed(qtbot, tmp_path: Path, monkeypatch) -> Iterator[SearchTab]:
    """long/mixed.wav (5 s: a tone, noise, silence) previewed, with fake speakers and Autoplay off."""
    monkeypatch.setenv("EARSHOT_CACHE_DIR", str(tmp_path / "cache"))
    registry = tiny_registry(tmp_path / "models")
    tab = shown_tab(qtbot, registry)
    preview_long_file(qtbot, tab, registry, make_library(tmp_path / "lib"))
    yield tab
    tab.shutdown()


def test_a_dragged_part_plays_alone_and_a_click_outside_gives_the_whole_sound_back(previewed: SearchTab) -> None:
    pane = previewed.preview_pane
    assert pane.selected_part() is None and not pane.export_button.isEnabled() and pane.drag_handle.isEnabled()
    mouse_drag(previewed, 1.0, 3.0)
    a, b = pane.selected_part()
    assert a == pytest.approx(1.0, abs=0.1) and b == pytest.approx(3.0, abs=0.1)
    assert pane.export_button.isEnabled() and pane.selection_label.text().startswith("1.")
    assert pane.start_s == pytest.approx(a)

    pane.toggle_play()  # the part alone, from its start
    assert pane.player.playing and pane.player.duration == pytest.approx(b - a, abs=1e-3)
    assert pane.player.position == pytest.approx(0.0)
    pane.seek_to(2.0)  # a click inside the part: from there, still the part alone
    assert pane.selected_part() == (a, b) and pane.player.position == pytest.approx(2.0 - a, abs=1e-3)
    pane._tick_playhead()
    assert pane.waveform.playhead.value() == pytest.approx(2.0, abs=1e-3)  # the file's time, not the part's
    pane.stop_playback()

    pane.seek_to(4.5)  # a click outside: the whole sound again
    assert pane.selected_part() is None and not pane.export_button.isEnabled()
    pane.toggle_play()
    assert pane.player.duration == pytest.approx(5.0, abs=1e-3) and pane.player.position == pytest.approx(4.5)
    pane.stop_playback()


def test_a_click_is_not_a_selection_and_another_sound_drops_it(qtbot, previewed: SearchTab) -> None:
    pane = previewed.preview_pane
    pane.select_part(2.0, 2.001, True)  # a click's worth of drag
    assert pane.selected_part() is None
    pane.select_part(3.0, 0.5, True)  # dragged right to left
    assert pane.selected_part() == pytest.approx((0.5, 3.0))
    pane.select_part(-4.0, 99.0, True)  # past both ends: the sound's ends
    assert pane.selected_part() == pytest.approx((0.0, 5.0))
    row = [h.rel_path for h in previewed.state.hits].index("engines/noise.wav")
    with qtbot.waitSignal(previewed.preview_shown, timeout=20_000):
        previewed.table.selectRow(row)
    assert pane.selected_part() is None


def test_export_writes_the_files_own_samples_without_replacing_anything(qtbot, previewed: SearchTab,
                                                                       tmp_path: Path) -> None:
    pane = previewed.preview_pane
    out = tmp_path / "exports"
    out.mkdir()
    asked = []
    pane.ask_folder = lambda start: asked.append(start) or str(out)
    pane.select_part(1.0, 3.0, True)
    messages = []
    pane.message.connect(messages.append)
    for _ in range(2):
        with qtbot.waitSignal(pane.message, timeout=10_000):
            pane.export_button.click()
    names = sorted(p.name for p in out.iterdir())
    assert names == ["mixed (1.00-3.00 s) 2.wav", "mixed (1.00-3.00 s).wav"]  # the second did not replace it
    source, sr = sf.read(previewed.state.preview_hit.path, dtype="int16")
    part, part_sr = sf.read(out / names[1], dtype="int16")
    assert part_sr == sr and sf.info(out / names[1]).subtype == "PCM_16"
    assert np.array_equal(part, source[sr:3 * sr])  # bit for bit
    assert messages[0] == f"Exported {names[1]} to {out}"
    assert asked[0] == str(previewed.state.preview_hit.path.parent)  # first time: the sound's own folder

    pane.ask_folder = lambda start: asked.append(start) or ""  # cancelled: nothing written
    pane.export_button.click()
    assert asked[-1] == str(out) and len(list(out.iterdir())) == 2  # remembered from last time


def test_export_into_a_folder_that_cannot_be_written_says_so(qtbot, previewed: SearchTab, tmp_path: Path) -> None:
    pane = previewed.preview_pane
    pane.ask_folder = lambda start: str(tmp_path / "no" / "such" / "folder")
    pane.select_part(1.0, 2.0, True)
    with qtbot.waitSignal(pane.error, timeout=10_000) as blocker:
        pane.export_button.click()
    assert blocker.args[0].startswith("Cannot export the selection: ") and "mixed (1.00-2.00 s).wav" in \
        blocker.args[0]


def test_the_drag_handle_carries_the_part_or_the_whole_file(previewed: SearchTab, tmp_path: Path) -> None:
    pane = previewed.preview_pane
    whole = pane.drag_mime()
    assert [u.toLocalFile() for u in whole.urls()] == [str(previewed.state.preview_hit.path)]
    pane.select_part(2.0, 2.5, True)
    urls = pane.drag_mime().urls()
    path = Path(urls[0].toLocalFile())
    assert path.parent == tmp_path / "cache" / "dragged-parts" and path.name == "mixed (2.00-2.50 s).wav"
    assert sf.info(path).frames == 16000


def test_the_wheel_zooms_into_the_waveform_drawn_anew_and_a_double_click_shows_it_all(qtbot, previewed: SearchTab
                                                                                      ) -> None:
    from PySide6.QtCore import QPoint as Point
    from PySide6.QtGui import QWheelEvent

    wave = previewed.preview_pane.waveform
    viewbox = wave.getPlotItem().getViewBox()
    at = waveform_point(previewed, 2.0)
    wheel = QWheelEvent(QPointF(at), QPointF(wave.viewport().mapToGlobal(at)), Point(0, 0), Point(0, 120 * 6),
                        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(wave.viewport(), wheel)
    x0, x1 = viewbox.viewRange()[0]
    assert x1 - x0 < 3.0 and x0 < 2.0 < x1  # zoomed in, about the pointer
    s0, s1 = previewed.preview_pane.spectrogram.getPlotItem().getViewBox().viewRange()[0]
    assert s1 - s0 < 3.5 and s0 < 2.0 < s1  # the spectrogram follows (aligned on screen, its axis is wider)
    def step() -> float:  # seconds between the envelope's buckets, as drawn
        return float(np.diff(wave._curve.getData()[0][::2]).max())

    zoomed = step()
    assert zoomed <= 3 * (x1 - x0) / 3000 + 1 / 32000  # drawn anew for the view, not the whole file's buckets
    wave.show_all()
    assert viewbox.viewRange()[0] == pytest.approx([0.0, 5.0], abs=1e-6) and step() > 1.5 * zoomed
    for _ in range(3):  # zooming out stops at the whole sound
        QApplication.sendEvent(wave.viewport(), QWheelEvent(
            QPointF(at), QPointF(wave.viewport().mapToGlobal(at)), Point(0, 0), Point(0, -120 * 6),
            Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False))
    assert viewbox.viewRange()[0] == pytest.approx([0.0, 5.0], abs=1e-6)


def test_a_part_too_large_to_write_while_the_mouse_waits_goes_through_export(previewed: SearchTab,
                                                                              monkeypatch) -> None:
    import app.ui.search_preview as search_preview

    pane = previewed.preview_pane
    monkeypatch.setattr(search_preview, "MAX_DRAG_BYTES", 100_000)  # 0.5 s here is 64 kB, 1 s 128 kB
    errors: list[str] = []
    pane.error.connect(errors.append)
    pane.select_part(2.0, 2.5, True)
    assert pane.drag_mime() is not None and not errors
    pane.select_part(1.0, 2.0, True)
    assert pane.drag_mime() is None
    assert errors == ["Drag takes parts up to 0.1 MB; this one is 0.128 MB: use Export selection… for it"]
