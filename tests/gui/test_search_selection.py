"""The preview's selected part: drag across the waveform to select it, Play plays it alone (Loop loops it), a
click outside gives the whole sound back, Export writes it as a file of its own (the dialog: a name with the
window's times, a format, fades, a folder outside the library) and the drag handle carries it into other
programs. The part's samples are the file's own (every channel, bit for bit)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from PySide6.QtCore import QPoint, QPointF, QSettings, Qt
from PySide6.QtWidgets import QApplication, QDialog

from app.ui import export_dialog
from app.ui.export_dialog import ExportDialog, default_export_folder, inside
from app.ui.search_preview import EXPORT_FOLDER_KEY, PreviewPane
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


def save_into(folder: Path, fmt: str = "", fade_in_ms: int = 0, fade_out_ms: int = 0, shape: str = "",
              seen: list[dict[str, object]] | None = None, name: str = "") -> Callable[[ExportDialog], bool]:
    """The export dialog's seam: note what the dialog offers (in `seen`), fill it in as a user would and press
    Save; whether it closed accepted (it stays open on a problem)."""
    def fill(dialog: ExportDialog) -> bool:
        if seen is not None:
            seen.append({"folder": dialog.folder_edit.text(), "name": dialog.name_edit.text(),
                         "formats": [dialog.format_box.itemText(i) for i in range(dialog.format_box.count())],
                         "format": dialog.format_box.currentText(), "fades": (dialog.fade_in_box.value(),
                                                                              dialog.fade_out_box.value())})
        dialog.folder_edit.setText(str(folder))
        if name:
            dialog.name_edit.setText(name)
        if fmt:
            dialog.format_box.setCurrentIndex(dialog.format_box.findText(fmt))
        if shape:
            dialog.shape_box.setCurrentIndex(dialog.shape_box.findText(shape))
        dialog.fade_in_box.setValue(fade_in_ms)
        dialog.fade_out_box.setValue(fade_out_ms)
        dialog.save_button.click()
        return dialog.result() == QDialog.DialogCode.Accepted
    return fill


def export(qtbot, pane: PreviewPane, fill: Callable[[ExportDialog], bool]) -> str:
    """Export selection… through `fill`; the message it ends with."""
    pane.ask_export = fill
    with qtbot.waitSignal(pane.message, timeout=10_000) as blocker:
        pane.export_button.click()
    return blocker.args[0]


def test_export_names_the_file_by_the_times_the_window_shows(qtbot, previewed: SearchTab, tmp_path: Path) -> None:
    """The window said "1.0 – 3.0 s (2.0 s)" and the file was named "(1.00-2.97 s)": now the name's times are
    the window's, and the file holds the part's own samples, bit for bit."""
    pane, out = previewed.preview_pane, tmp_path / "exports"
    out.mkdir()
    pane.select_part(1.0, 2.97, True)
    assert pane.selection_label.text() == "1.0 – 3.0 s (2.0 s)"
    seen: list[dict[str, object]] = []
    message = export(qtbot, pane, save_into(out, seen=seen))
    assert seen[0]["name"] == "mixed (1.0-3.0 s)" and seen[0]["fades"] == (0, 0)
    assert seen[0]["formats"] == ["WAV 16-bit (as the source)", "WAV 24-bit", "FLAC 16-bit", "FLAC 24-bit"]
    assert seen[0]["format"] == "WAV 16-bit (as the source)"  # a lossless source: its own format first
    assert message == f"Exported mixed (1.0-3.0 s).wav to {out}"
    source, sr = sf.read(previewed.state.preview_hit.path, dtype="int16")
    part, part_sr = sf.read(out / "mixed (1.0-3.0 s).wav", dtype="int16")
    assert part_sr == sr and np.array_equal(part, source[sr:round(2.97 * sr)])  # the file's own samples


@pytest.mark.parametrize("label, fmt, subtype", [("WAV 24-bit", "WAV", "PCM_24"), ("FLAC 16-bit", "FLAC", "PCM_16"),
                                                 ("FLAC 24-bit", "FLAC", "PCM_24")])
def test_each_format_writes_its_own_kind_of_file(qtbot, previewed: SearchTab, tmp_path: Path, label: str, fmt: str,
                                                 subtype: str) -> None:
    pane, out = previewed.preview_pane, tmp_path / "exports"
    out.mkdir()
    pane.select_part(0.5, 1.5, True)
    export(qtbot, pane, save_into(out, fmt=label))
    path = out / f"mixed (0.5-1.5 s).{fmt.lower()}"
    info = sf.info(path)
    assert (info.format, info.subtype, info.samplerate, info.channels, info.frames) == (fmt, subtype, 32000, 1, 32000)
    source, sr = sf.read(previewed.state.preview_hit.path, dtype="int32")
    assert np.array_equal(sf.read(path, dtype="int32")[0], source[sr // 2:3 * sr // 2])  # 16 bits in 24: the same


@pytest.mark.parametrize("shape", ["Linear", "Equal power"])
def test_fades_change_the_ends_of_the_part_and_nothing_between(qtbot, previewed: SearchTab, tmp_path: Path,
                                                               shape: str) -> None:
    pane, out = previewed.preview_pane, tmp_path / "exports"
    out.mkdir()
    pane.select_part(0.5, 1.5, True)  # the 500-Hz tone
    export(qtbot, pane, save_into(out, fade_in_ms=50, fade_out_ms=100, shape=shape))
    source, sr = sf.read(previewed.state.preview_hit.path, dtype="int16")
    want = source[sr // 2:3 * sr // 2].astype(np.float64)
    part = sf.read(out / "mixed (0.5-1.5 s).wav", dtype="int16")[0].astype(np.float64)
    n_in, n_out = sr // 20, sr // 10
    assert part[0] == 0 and part[-1] == 0  # no click at either end
    assert np.array_equal(part[n_in:-n_out], want[n_in:-n_out])  # the middle untouched, bit for bit
    t = np.arange(n_in) / n_in
    gain = t if shape == "Linear" else np.sin(t * np.pi / 2)
    assert np.abs(part[:n_in] - np.rint(want[:n_in] * gain)).max() <= 1
    assert np.abs(part[:n_in]).max() < np.abs(want[:n_in]).max()
    assert np.abs(part[-n_out // 10:]).max() < 0.2 * np.abs(want[-n_out // 10:]).max()  # the last tenth near silence


def test_the_default_folder_is_outside_the_library_and_the_last_one_is_remembered(qtbot, previewed: SearchTab,
                                                                                   tmp_path: Path) -> None:
    pane, out = previewed.preview_pane, tmp_path / "exports"
    out.mkdir()
    library = previewed.state.library
    QSettings().setValue(EXPORT_FOLDER_KEY, str(library / "long"))  # an older version offered the sound's folder
    pane.select_part(1.0, 2.0, True)
    seen: list[dict[str, object]] = []
    export(qtbot, pane, save_into(out, seen=seen))
    first = Path(str(seen[0]["folder"]))
    assert first.is_dir() and not inside(first, [library]) and first != library / "long"
    export(qtbot, pane, save_into(out, seen=seen, name="again"))
    assert seen[1]["folder"] == str(out) and QSettings().value(EXPORT_FOLDER_KEY) == str(out)
    assert (out / "again.wav").is_file()


def test_the_default_folder_skips_standard_folders_inside_the_library(tmp_path: Path, monkeypatch) -> None:
    music, documents = tmp_path / "Music", tmp_path / "Documents"
    for folder in (music, documents):
        folder.mkdir()
    monkeypatch.setattr(export_dialog, "standard_folders", lambda: [music, documents])
    assert default_export_folder([music], "") == documents  # a library of the whole Music folder
    assert default_export_folder([music / "Samples"], "") == music
    assert default_export_folder([None, documents / "sfx", music], "") == documents  # several locations
    assert default_export_folder([None], str(documents)) == documents  # the one chosen last time
    assert default_export_folder([tmp_path], "") == tmp_path.parent  # all inside: the folder above the library


def test_a_target_that_cannot_be_written_is_said_and_nothing_is_written(qtbot, previewed: SearchTab, tmp_path: Path,
                                                                         monkeypatch) -> None:
    pane = previewed.preview_pane
    pane.select_part(1.0, 2.0, True)
    a_file = tmp_path / "a file"
    a_file.write_text("not a folder")
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    read_only.chmod(0o555)
    if os.geteuid() == 0:  # root writes anywhere the file system allows: judge the folder as a user would
        monkeypatch.setattr(export_dialog, "writable", lambda folder: os.stat(folder).st_mode & 0o200 != 0)
    cases = [(tmp_path / "no" / "such", "", "does not exist"), (a_file, "", "is a file, not a folder"),
             (read_only, "", "may not write into"), (tmp_path, "a/b", "cannot hold /"), (tmp_path, " ", "a name")]
    try:
        for folder, name, said in cases:
            shown: list[str] = []

            def fill(dialog: ExportDialog, folder: Path = folder, name: str = name, shown: list[str] = shown) -> bool:
                accepted = save_into(folder, name=name)(dialog)
                shown.append(dialog.problem_label.text() if dialog.problem_label.isVisibleTo(dialog) else "")
                return accepted

            pane.ask_export = fill
            pane.export_button.click()  # the dialog stays open with the reason: closed here as Cancel would
            assert said in shown[0], (folder, name, shown)
        assert not previewed.preview_pane._exports and list(read_only.iterdir()) == []
    finally:
        read_only.chmod(0o755)


def test_a_folder_gone_before_the_write_is_a_clear_error(qtbot, previewed: SearchTab, tmp_path: Path) -> None:
    """A drive unplugged between Save and the write: the status line says which file could not be written."""
    pane, out = previewed.preview_pane, tmp_path / "usb"
    out.mkdir()
    pane.select_part(1.0, 2.0, True)

    def unplugged(dialog: ExportDialog) -> bool:
        accepted = save_into(out)(dialog)
        out.rmdir()
        return accepted

    pane.ask_export = unplugged
    with qtbot.waitSignal(pane.error, timeout=10_000) as blocker:
        pane.export_button.click()
    text = blocker.args[0]
    assert text.startswith("Cannot export the selection: ") and "mixed (1.0-2.0 s).wav" in text, text


def test_a_file_of_that_name_is_replaced_only_when_the_user_agrees(qtbot, previewed: SearchTab, tmp_path: Path
                                                                  ) -> None:
    pane, out = previewed.preview_pane, tmp_path / "exports"
    out.mkdir()
    old = out / "mixed (1.0-2.0 s).wav"
    old.write_bytes(b"an older take")
    pane.select_part(1.0, 2.0, True)
    asked: list[Path] = []

    def answer(yes: bool) -> Callable[[ExportDialog], bool]:
        def fill(dialog: ExportDialog) -> bool:
            dialog.confirm_replace = lambda target: asked.append(target) or yes
            return save_into(out)(dialog)
        return fill

    pane.ask_export = answer(False)
    pane.export_button.click()  # No: the dialog stays open, nothing written
    assert asked == [old] and old.read_bytes() == b"an older take" and not pane._exports
    export(qtbot, pane, answer(True))
    assert len(asked) == 2 and sf.info(old).frames == 32000 and sorted(p.name for p in out.iterdir()) == [old.name]


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
