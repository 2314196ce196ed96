"""Audio devices in Preferences and the status bar (issue 24), offscreen, over a fake sounddevice: the output and
input lists ("System default" first, or "No audio device found" disabled), the choice remembered and applied to
the next stream, a vanished device falling back with a message, and the status bar following a device that
fails instead of saying "Audio: in+out" after the sound server went away."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import sounddevice as sd

from app.services import devices
from app.services.devices import Player
from app.services.registry import ModelRegistry
from app.ui.dialogs import NO_AUDIO_DEVICE, SYSTEM_DEFAULT, PreferencesDialog
from app.ui.main_window import MainWindow

MIC = {"name": "USB mic", "max_input_channels": 1, "max_output_channels": 0}
SPEAKERS = {"name": "Speakers", "max_input_channels": 0, "max_output_channels": 2}
HEADPHONES = {"name": "Headphones", "max_input_channels": 0, "max_output_channels": 2}


class FakeSoundDevice:
    """What sounddevice tells about the devices: `plugged` changes as the test plugs and unplugs."""

    def __init__(self, plugged: list[dict]) -> None:
        self.plugged = plugged
        self.opened: list[dict] = []
        self.CallbackStop = sd.CallbackStop

    def query_devices(self, kind: str | None = None) -> object:
        if kind is None:
            return list(self.plugged)
        for d in self.plugged:
            if d[f"max_{kind}_channels"] > 0:
                return d
        raise sd.PortAudioError("Error querying device -1")

    def OutputStream(self, **kwargs: object) -> object:  # noqa: N802 (sounddevice's name)
        self.opened.append(kwargs)
        return SimpleNamespace(start=lambda: None, stop=lambda: None, close=lambda: None, active=True)

    InputStream = OutputStream


@pytest.fixture
def fake_sd(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSoundDevice]:
    fake = FakeSoundDevice([MIC, SPEAKERS, HEADPHONES])
    monkeypatch.setattr(devices, "_import_sounddevice", lambda: fake)
    yield fake
    devices.choose_devices("", "")


def make_window(qtbot, tmp_path: Path) -> MainWindow:
    win = MainWindow(registry=ModelRegistry(folders=[(tmp_path / "models", "user")]))
    qtbot.addWidget(win)
    win.show()
    qtbot.waitUntil(lambda: win.environment is not None, timeout=60_000)
    wait_idle(qtbot, win)
    return win


def wait_idle(qtbot, win: MainWindow) -> None:
    qtbot.waitUntil(lambda: not (win._probe and win._probe.is_running())
                    and not (win._audio_probe and win._audio_probe.is_running()), timeout=30_000)


def items(combo) -> list[tuple[str, bool]]:  # noqa: ANN001
    return [(combo.itemText(i), combo.model().item(i).isEnabled()) for i in range(combo.count())]


def test_preferences_list_the_devices_system_default_first(qtbot, fake_sd: FakeSoundDevice) -> None:
    status = devices.device_status()
    dialog = PreferencesDialog("auto", 1, ["cpu"], 2, audio=status, audio_output="Headphones")
    qtbot.addWidget(dialog)
    assert [t for t, _ in items(dialog.audio_output)] == [SYSTEM_DEFAULT, "Speakers", "Headphones"]
    assert [t for t, _ in items(dialog.audio_input)] == [SYSTEM_DEFAULT, "USB mic"]
    assert dialog.audio_output.currentText() == "Headphones" and dialog.audio_input.currentText() == SYSTEM_DEFAULT
    dialog.audio_input.setCurrentIndex(1)
    assert dialog.audio_values() == ("USB mic", "Headphones")

    # a chosen device that is unplugged stays chosen (it is used again once back), and says so
    gone = PreferencesDialog("auto", 1, ["cpu"], 2, audio=status, audio_output="Studio monitors")
    qtbot.addWidget(gone)
    assert gone.audio_output.currentText() == "Studio monitors (not connected)"
    assert gone.audio_values() == ("", "Studio monitors")


def test_without_audio_devices_the_lists_say_so_disabled(qtbot, fake_sd: FakeSoundDevice) -> None:
    fake_sd.plugged = []
    dialog = PreferencesDialog("auto", 1, ["cpu"], 2, audio=devices.device_status(), audio_input="USB mic")
    qtbot.addWidget(dialog)
    for combo in (dialog.audio_output, dialog.audio_input):
        assert items(combo) == [(NO_AUDIO_DEVICE, True)] and not combo.isEnabled()
    assert dialog.audio_values() == ("USB mic", "")  # nothing to choose from: the choice is kept


def test_the_choice_is_remembered_and_the_next_sound_plays_there(qtbot, fake_sd: FakeSoundDevice,
                                                                 tmp_path: Path) -> None:
    win = make_window(qtbot, tmp_path)
    win.apply_preferences("cpu", 1, "USB mic", "Headphones")
    wait_idle(qtbot, win)
    assert (devices.CHOSEN.input, devices.CHOSEN.output) == ("USB mic", "Headphones")
    Player().play(np.zeros(100, np.float32), 8000)  # the app's own Player, no explicit device
    assert fake_sd.opened[-1]["device"] == 2
    assert win.audio_label.text() == "Audio: in+out" and "output: Headphones" in win.audio_label.toolTip()
    win.close()

    devices.choose_devices("", "")
    again = make_window(qtbot, tmp_path)  # the next session: the same devices
    assert (devices.CHOSEN.input, devices.CHOSEN.output) == ("USB mic", "Headphones")

    fake_sd.plugged = [MIC, SPEAKERS]  # the headphones are unplugged: the default, and a message that says so
    again.refresh_audio()
    wait_idle(qtbot, again)
    assert "“Headphones” is no longer available" in again.audio_label.toolTip()
    assert "“Headphones” is no longer available" in again.statusBar().currentMessage()
    player = Player()
    player.play(np.zeros(100, np.float32), 8000)
    assert fake_sd.opened[-1]["device"] is None and "system default" in player.notice


def test_the_status_bar_follows_a_device_that_fails(qtbot, fake_sd: FakeSoundDevice, tmp_path: Path) -> None:
    win = make_window(qtbot, tmp_path)
    assert win.audio_label.text() == "Audio: in+out"
    assert win.search_tab.preview_pane.audio.output_ok

    fake_sd.plugged = []  # the sound server went away; the app only learns it when a stream fails

    def refuses(**_: object) -> object:
        raise sd.PortAudioError("Error opening OutputStream: Illegal combination of I/O devices [PaErrorCode -9993]",
                                -9993)

    with pytest.raises(devices.NoAudioDeviceError):
        Player(stream_factory=refuses).play(np.zeros(10, np.float32), 8000)
    qtbot.waitUntil(lambda: win.audio_label.text() == "Audio: no device", timeout=10_000)
    wait_idle(qtbot, win)
    assert not win.search_tab.preview_pane.audio.output_ok  # the tabs follow: Play says why it is off
    assert not win.words_tab.audio.input_ok
    assert "no audio output device" in win.search_tab.preview_pane.play_button.toolTip()


def test_embedding_every_window_of_long_files_is_a_remembered_preference(qtbot, fake_sd: FakeSoundDevice,
                                                                         tmp_path: Path, monkeypatch) -> None:
    """Issue 25 item 2: long files are heard in spread windows by default; Preferences can ask for every window,
    the next indexing does so, and the choice is kept for the next session."""
    from app.services.search import search_jobs as jobs
    from app.ui import search_tab

    win = make_window(qtbot, tmp_path)
    dialog = PreferencesDialog("cpu", 1, ["cpu"], 2, every_window=win.search_tab.every_window)
    qtbot.addWidget(dialog)
    assert dialog.every_window.text() == "Embed every 10-s window of long files"
    assert not dialog.index_values() and not win.search_tab.every_window
    asked: list[dict] = []
    monkeypatch.setattr(search_tab, "index_session_job",
                        lambda session, **kw: asked.append(kw) or jobs.index_session_job(session, **kw))
    win.search_tab.session = SimpleNamespace()  # start_indexing's job factory is only called by the runner
    win.search_tab._run = lambda session, factory, *a, **k: factory  # run nothing: look at what it would ask
    win.search_tab.indexing.watch = lambda factory: factory()
    win.search_tab.indexing.running = lambda: False
    win.search_tab.start_indexing()
    win.apply_preferences("cpu", 1, every_window=True)
    win.search_tab.start_indexing()
    assert [a.get("max_windows") for a in asked] == [None, 0]
    win.search_tab.session = None
    win.close()
    again = make_window(qtbot, tmp_path)
    assert again.search_tab.every_window


def test_the_index_summary_says_how_many_long_files_were_heard_in_spread_windows() -> None:
    from app.services.library.records import IndexReport
    from app.services.search.search_jobs import IndexOutcome
    from app.ui.search_text import index_summary

    report = IndexReport("m", embedded=["a.wav", "b.ogg"], spread=1, audio_seconds=200.0, elapsed_s=1.0)
    text, _ = index_summary(IndexOutcome(report, [], [], 2))
    assert "1 long file heard in 6 spread windows (Preferences: every window)" in text


def test_the_index_summary_counts_a_copy_of_a_known_sound() -> None:
    """A first-contact trial: a copy of a file already indexed raised the count while the line said "0 new"."""
    from app.services.library.records import IndexReport
    from app.services.search.search_jobs import IndexOutcome
    from app.ui.search_text import index_summary

    text, changed = index_summary(IndexOutcome(IndexReport("m", copied=["copy.wav"]), [], [], 3))
    assert "0 new, 1 copy of a known sound, 0 moved" in text and changed == 1
