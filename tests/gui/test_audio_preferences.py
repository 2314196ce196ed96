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

from app.services import audio
from app.services.audio import Player
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
    monkeypatch.setattr(audio, "_import_sounddevice", lambda: fake)
    yield fake
    audio.choose_devices("", "")


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
    status = audio.device_status()
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
    dialog = PreferencesDialog("auto", 1, ["cpu"], 2, audio=audio.device_status(), audio_input="USB mic")
    qtbot.addWidget(dialog)
    for combo in (dialog.audio_output, dialog.audio_input):
        assert items(combo) == [(NO_AUDIO_DEVICE, True)] and not combo.isEnabled()
    assert dialog.audio_values() == ("USB mic", "")  # nothing to choose from: the choice is kept


def test_the_choice_is_remembered_and_the_next_sound_plays_there(qtbot, fake_sd: FakeSoundDevice,
                                                                 tmp_path: Path) -> None:
    win = make_window(qtbot, tmp_path)
    win.apply_preferences("cpu", 1, "USB mic", "Headphones")
    wait_idle(qtbot, win)
    assert (audio.CHOSEN.input, audio.CHOSEN.output) == ("USB mic", "Headphones")
    Player().play(np.zeros(100, np.float32), 8000)  # the app's own Player, no explicit device
    assert fake_sd.opened[-1]["device"] == 2
    assert win.audio_label.text() == "Audio: in+out" and "output: Headphones" in win.audio_label.toolTip()
    win.close()

    audio.choose_devices("", "")
    again = make_window(qtbot, tmp_path)  # the next session: the same devices
    assert (audio.CHOSEN.input, audio.CHOSEN.output) == ("USB mic", "Headphones")

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

    with pytest.raises(audio.NoAudioDeviceError):
        Player(stream_factory=refuses).play(np.zeros(10, np.float32), 8000)
    qtbot.waitUntil(lambda: win.audio_label.text() == "Audio: no device", timeout=10_000)
    wait_idle(qtbot, win)
    assert not win.search_tab.preview_pane.audio.output_ok  # the tabs follow: Play says why it is off
    assert not win.words_tab.audio.input_ok
    assert "no audio output device" in win.search_tab.preview_pane.play_button.toolTip()
