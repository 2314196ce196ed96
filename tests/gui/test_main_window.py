"""GUI smoke: the window opens offscreen with its four tabs, states are clear, settings persist."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPoint, Qt, QUrl
from PySide6.QtGui import QDropEvent

from app.services.registry import ModelRegistry
from app.ui.main_window import MainWindow, demo_library, freeze_long_lived_objects


@pytest.fixture
def window(qtbot, tmp_path: Path) -> MainWindow:
    registry = ModelRegistry(folders=[(tmp_path / "models", "user")])
    win = MainWindow(registry=registry)
    qtbot.addWidget(win)
    win.show()
    qtbot.waitUntil(lambda: win.environment is not None, timeout=60_000)
    qtbot.waitUntil(lambda: win._probe is not None and not win._probe.is_running(), timeout=10_000)
    return win


def test_every_tab_opens_and_is_captured(window: MainWindow, tmp_path: Path) -> None:
    names = [window.tabs.tabText(i) for i in range(window.tabs.count())]
    assert names == ["Search", "Units", "Words", "Train"]
    for i in range(window.tabs.count()):
        window.tabs.setCurrentIndex(i)
        shot = window.grab()
        path = tmp_path / f"tab-{names[i].lower()}.png"
        assert shot.save(str(path)) and path.stat().st_size > 5_000
        image = shot.toImage()
        colours = {image.pixel(x, y) for x in range(0, image.width(), 37) for y in range(0, image.height(), 37)}
        assert len(colours) > 3, f"{names[i]} tab rendered blank"


def test_the_window_and_each_loaded_model_are_kept_out_of_full_garbage_collections(window: MainWindow) -> None:
    """A full collection walked the ~530,000 objects of the libraries and the model with the GIL held: 0.4-1.2 s
    of frozen window every few clicks on a big library. The app freezes what lives as long as it does: once the
    window is built, again when a tab's model has loaded (on the GUI thread, after the worker made it)."""
    try:
        freeze_long_lived_objects(window)
        assert gc.get_freeze_count() > 0
        gc.unfreeze()
        window.search_tab.models_loaded.emit()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()  # the rest of the test run collects as usual


def test_status_bar_reports_device_audio_and_models(window: MainWindow) -> None:
    env = window.environment
    assert env is not None and env.device in env.devices
    assert window.device_label.text() == f"Device: {env.device}"
    assert window.models_label.text().startswith("Models: 0 installed")
    assert window.audio_label.text().startswith("Audio:")
    assert window.audio_label.toolTip()  # says why audio is (not) available


def test_the_status_bar_leaves_room_for_messages_in_the_smallest_window(window: MainWindow, monkeypatch) -> None:
    """At 720x480 the models label ("Models: 5 installed, retrieval-default, units-default, words-default loaded")
    took over half the status bar, and a tab's message in front of it was cut to "Unit". It counts the models
    now; their names are in its tooltip."""
    loaded = ["retrieval-default", "units-default", "words-default"]
    monkeypatch.setattr(window.registry, "loaded", lambda: loaded)
    window.resize(720, 480)
    window.update_models_label()
    labels = (window.device_label, window.models_label, window.audio_label)
    assert 720 - sum(label.sizeHint().width() for label in labels) >= 300  # was 65 px for the tab's message
    assert window.models_label.text() == "Models: 0 installed, 3 loaded"
    assert all(name in window.models_label.toolTip() for name in loaded)


def test_tabs_explain_missing_models(window: MainWindow) -> None:
    for tab in (window.search_tab, window.units_tab, window.words_tab):
        assert tab.stack.currentWidget() is tab.empty
        assert f"No {tab.kind} model loaded" in tab.empty.message.text()
    assert str(demo_library()) in window.search_tab.empty.message.text()


def test_demo_library_opens_by_default_and_has_clips(window: MainWindow) -> None:
    assert window.library == demo_library()
    assert window.windowTitle() == "demo library"  # the platform adds " — Earshot" (the display name) once
    assert len(list(demo_library().rglob("*.wav"))) >= 30
    assert (demo_library() / "ATTRIBUTION.md").is_file()


def test_dropping_a_folder_opens_it_as_library(window: MainWindow, tmp_path: Path) -> None:
    folder = tmp_path / "sounds"
    folder.mkdir()
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(folder))])
    event = QDropEvent(QPoint(10, 10).toPointF(), Qt.DropAction.CopyAction, mime,
                       Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    window.dropEvent(event)
    assert window.library == folder
    assert str(folder) in window.search_tab.empty.message.text()
    assert window.settings.value("library") == str(folder)


def test_opening_a_missing_folder_is_a_message(window: MainWindow, tmp_path: Path) -> None:
    assert not window.open_library(tmp_path / "nope")
    assert "Not a folder" in window.statusBar().currentMessage()


def test_preferences_and_geometry_persist(qtbot, window: MainWindow, tmp_path: Path) -> None:
    window.resize(760, 520)  # the offscreen screen is 800x600; the minimum is 720x480
    window.tabs.setCurrentIndex(2)
    window.apply_preferences("cpu", 1)
    qtbot.waitUntil(lambda: not window._probe.is_running(), timeout=30_000)
    window.close()
    again = MainWindow(registry=ModelRegistry(folders=[(tmp_path / "models", "user")]))
    qtbot.addWidget(again)
    assert (again.width(), again.height()) == (760, 520)
    assert again.tabs.currentIndex() == 2
    assert again.registry.device_preference == "cpu"
    qtbot.waitUntil(lambda: again.environment is not None, timeout=30_000)
    qtbot.waitUntil(lambda: not again._probe.is_running(), timeout=10_000)


def test_unavailable_device_preference_falls_back_with_a_reason(qtbot, tmp_path: Path) -> None:
    registry = ModelRegistry(folders=[(tmp_path / "models", "user")], device="cuda")
    win = MainWindow(registry=registry)
    qtbot.addWidget(win)
    qtbot.waitUntil(lambda: win.environment is not None, timeout=30_000)
    qtbot.waitUntil(lambda: not win._probe.is_running(), timeout=10_000)
    if "cuda" in win.environment.devices:
        pytest.skip("this machine has CUDA")
    assert win.environment.device == "cpu"
    assert "not available" in win.device_label.toolTip()


def test_dialogs_open(qtbot, window: MainWindow) -> None:
    from app.ui.dialogs import AboutDialog, PreferencesDialog

    prefs = PreferencesDialog("cpu", 1, ["cpu"], 2)
    qtbot.addWidget(prefs)
    assert prefs.values() == ("cpu", 1)
    cuda_index = prefs.device.findData("cuda")
    assert not prefs.device.model().item(cuda_index).isEnabled()
    about = AboutDialog([])
    qtbot.addWidget(about)
    about.show()
    assert about.windowTitle() == "About Earshot"
    from PySide6.QtWidgets import QLabel

    page = next(w for w in about.findChildren(QLabel) if "Your models" in w.text())
    assert page.textInteractionFlags() & Qt.TextInteractionFlag.TextSelectableByMouse  # the folders can be copied


@pytest.mark.slow
@pytest.mark.parametrize("close_after_ms", [300])
def test_closing_while_starting_up_exits_cleanly(tmp_path: Path, close_after_ms: int) -> None:
    """Closing the window while it still probes devices, opens the library or loads a model must not abort
    (a QThread destroyed while running kills the process)."""
    import os
    import subprocess
    import sys

    script = f"""
import app.ui.main_window as mw
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

make = mw.create_application
def create_and_schedule_close():
    app = make()
    QTimer.singleShot({close_after_ms}, lambda: [w.close() for w in QApplication.topLevelWidgets()])
    return app
mw.create_application = create_and_schedule_close
raise SystemExit(mw.run_gui())
"""
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "XDG_DATA_HOME": str(tmp_path / "data"),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "HOME": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[2])
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Destroyed while thread" not in run.stderr


def test_long_status_messages_are_cut_to_fit_beside_the_labels(window: MainWindow) -> None:
    window.flash("word " * 400)
    shown = window.statusBar().currentMessage()
    assert shown.endswith("…") and len(shown) < 400
    window.flash("short")
    assert window.statusBar().currentMessage() == "short"


def test_every_long_status_message_ends_in_an_ellipsis_with_the_whole_text_in_the_tooltip(
        qtbot, window: MainWindow, tmp_path: Path) -> None:
    """An earlier trial: a long message ("Library: <a deep folder>", an unexpected error) was clipped at the device
    label without a sign that text was missing; only the tabs' messages were cut with "…"."""
    folder = tmp_path / "Sound Library 2026" / "Weapons" / "Medieval_Siege_Engines" / "Catapults_Trebuchets_Ballistae"
    folder.mkdir(parents=True)
    bar = window.statusBar()
    window.resize(1024, 700)
    qtbot.wait(20)
    window.open_library(folder)
    said = f"Library: {folder}"
    assert bar.currentMessage().endswith("…") and said.startswith(bar.currentMessage()[:-1])
    assert bar.toolTip() == said
    cut = len(bar.currentMessage())
    window.resize(1440, 900)  # room for more of it
    qtbot.waitUntil(lambda: len(bar.currentMessage()) > cut, timeout=2_000)
    assert said.startswith(bar.currentMessage().removesuffix("…")) and bar.toolTip() in ("", said)
    window.flash("short")
    assert bar.currentMessage() == "short" and bar.toolTip() == ""
    window.flash("word " * 400)
    bar.clearMessage()
    assert bar.toolTip() == ""  # no message, nothing to say whole


def test_choosing_audio_files_is_worded_the_same_in_every_tab(window: MainWindow) -> None:
    """An earlier trial: one file to look at or search was "Load file…" in the Units tab and "Open recording…" in
    the Words tab, beside the Words tab's "Add audio files…" (files added to a set). One wording per act now."""
    from PySide6.QtWidgets import QPushButton

    units, words = window.units_tab, window.words_tab
    assert units.load_button.text().replace("&", "") == words.open_recording_button.text() == "Open audio file…"
    assert words.add_files_button.text() == "Add audio files…"
    texts = {b.text().replace("&", "") for tab in (units, words) for b in tab.findChildren(QPushButton)}
    assert not {t for t in texts if t.startswith(("Load", "Open recording"))}


def test_a_tab_status_reaches_the_status_bar_only_from_a_tab_behind_with_its_name(window: MainWindow) -> None:
    """A first-contact trial: every message showed twice (the tab's line and the status bar), and at start the
    Search tab's status bar read the Units tab's model message as if it were its own."""
    window.tabs.setCurrentWidget(window.search_tab)
    window.statusBar().clearMessage()
    window.search_tab.status("Indexed 3 sounds")
    assert window.statusBar().currentMessage() == ""  # the Search tab shows its own line
    window.units_tab.status("units-default: 128 units")
    assert window.statusBar().currentMessage() == "Units: units-default: 128 units"


def test_the_status_bar_says_a_models_folder_cannot_be_read(qtbot, tmp_path: Path, monkeypatch) -> None:
    """Issue 42 item 3: an unreadable user models folder made the user's models vanish without a word."""
    import os

    folder = tmp_path / "models"
    folder.mkdir()
    listdir = os.listdir

    def denied(path: object = ".") -> list[str]:
        if Path(str(path)) == folder:
            raise PermissionError(13, "Permission denied", str(path))
        return listdir(path)

    monkeypatch.setattr("app.services.registry.os.listdir", denied)
    win = MainWindow(registry=ModelRegistry(folders=[(folder, "user")]))
    qtbot.addWidget(win)
    win.show()
    qtbot.waitUntil(lambda: win.environment is not None, timeout=60_000)
    qtbot.waitUntil(lambda: win._probe is not None and not win._probe.is_running(), timeout=10_000)
    assert win.models_label.text() == "Models: 0 installed, none loaded, 1 problem"
    assert f"problem: your models folder {folder} cannot be read (Permission denied)" in win.models_label.toolTip()
