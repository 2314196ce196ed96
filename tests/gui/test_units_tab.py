"""Units tab fed by a fake microphone (a thread calling the Recorder's callback with real FSDD speech)."""

from __future__ import annotations

import csv
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import sounddevice as sd
import torch
from praatio import textgrid
from PySide6.QtCore import Qt

from app.services.devices import DeviceStatus, Player, Recorder
from app.services.registry import ModelRegistry
from app.services.units.levels import InputLevel
from app.services.units.units_session import parse_units_text
from app.ui.unit_plots import METER_TEXT_WIDTH, LevelMeter, unit_colour
from app.ui.units_tab import UnitsTab
from core.audio import decode
from core.checkpoints import save_checkpoint
from models.frontends import MFCC, frontend_to_dict
from models.inverter import InverterConfig
from models.units import UnitsConfig, UnitsModel
from models.vqvae import VQVAEConfig
from tests.fake_streams import FakeSpeakers

MIC_ONLY = DeviceStatus(True, False, "input: fake mic; no audio output device found", ["fake mic"], [])
MIC_AND_SPEAKERS = DeviceStatus(True, True, "input: fake mic; output: fake speakers", ["fake mic"], ["fake"])
NO_DEVICE = DeviceStatus(False, False, "no audio input device (microphone) found; no audio output device found",
                         output_problem="no audio output device found")


class FakeMic:
    """Stands in for sounddevice.InputStream: its thread delivers `audio` (then silence) in blocks at
    `speed` x real time; with `vanish_after` blocks it goes inactive and stops, like an unplugged device."""

    def __init__(self, samplerate: int, channels: int, blocksize: int, dtype: str, callback: Callable,
                 device: object, audio: np.ndarray, speed: float = 1.0, vanish_after: int | None = None) -> None:
        self.rate, self.blocksize, self.callback = samplerate, blocksize, callback
        self.audio, self.speed, self.vanish_after = audio, speed, vanish_after
        self.active = False
        self.blocks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-mic", daemon=True)

    def start(self) -> None:
        self.active = True
        self._thread.start()

    def _run(self) -> None:
        n = self.blocksize
        start = time.monotonic()
        while not self._stop.is_set():
            if self.vanish_after is not None and self.blocks >= self.vanish_after:
                self.active = False  # PortAudio stops a stream whose device disappeared
                return
            block = np.zeros((n, 1), np.float32)
            piece = self.audio[self.blocks * n:(self.blocks + 1) * n]
            block[:len(piece), 0] = piece
            self.callback(block, n, None, SimpleNamespace(input_overflow=False))
            self.blocks += 1
            self._stop.wait(max(0.0, start + self.blocks * n / self.rate / self.speed - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.active = False

    def close(self) -> None:
        self.stop()


def tiny_units_model() -> UnitsModel:
    torch.manual_seed(0)
    config = UnitsConfig(
        vqvae=VQVAEConfig(
            d_model=32, n_heads=2, d_ff=64, layers_per_stage=(1, 1, 1), attn_left=4, attn_right=1, dropout=0.0,
            codebook_size=16, code_dim=8, decoder_channels=32, decoder_blocks=1, speaker_dim=8, n_speakers=2,
        ),
        inverter=InverterConfig(code_dim=8, d_model=32, n_heads=2, d_ff=64, n_layers=1, n_speakers=2),
        speakers=["ann", "bob"],
    )
    model = UnitsModel(config)
    model.vqvae.train()
    model.vqvae(torch.randn(2, 40, 39) * 5)  # spread the codebook over real-looking vectors
    return model.eval()


def fsdd_files(root: Path, n: int) -> list[Path]:
    with open(root / "metadata.csv", newline="") as f:
        return [root / r["path"] for r in list(csv.DictReader(f))[:n]]


def speech(root: Path, n: int = 4) -> np.ndarray:
    """n spoken digits at 16 kHz with 0.1 s pauses (about 2 s for n = 4)."""
    pause = np.zeros(1600, np.float32)
    return np.concatenate([np.concatenate([decode(p, sample_rate=16000).audio, pause]) for p in fsdd_files(root, n)])


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # the GUI thread, the fake mic and the worker share 2 cores
    yield
    torch.set_num_threads(before)


@pytest.fixture
def make_tab(qtbot, tmp_path: Path) -> Iterator[Callable[[DeviceStatus], UnitsTab]]:
    model = tiny_units_model()
    models = tmp_path / "models"
    save_checkpoint(models / "tiny-units.safetensors", "units", model, model.config,
                    features=frontend_to_dict(MFCC()))
    registry = ModelRegistry(folders=[(models, "user")])
    tabs: list[UnitsTab] = []

    def make(status: DeviceStatus) -> UnitsTab:
        tab = UnitsTab()
        qtbot.addWidget(tab)
        tab.device_status_fn = lambda: status
        tab.set_registry(registry)
        tab.set_models(registry.scan())
        tab.resize(1100, 700)
        tab.show()
        qtbot.waitUntil(lambda: tab.session is not None and tab.state == "idle", timeout=20_000)
        tabs.append(tab)
        return tab

    yield make
    for tab in tabs:
        tab.shutdown()


def record(qtbot, tab: UnitsTab, audio: np.ndarray, **mic: object) -> list[FakeMic]:
    mics: list[FakeMic] = []

    def factory(**kwargs: object) -> FakeMic:
        mics.append(FakeMic(**kwargs, audio=audio, **mic))
        return mics[-1]

    tab.recorder_factory = lambda: Recorder(sample_rate=16000, block_size=512, stream_factory=factory)
    return mics


def speech_rms_db(audio: np.ndarray) -> float:
    """Plain RMS (dBFS) over the span the one silence trim finds."""
    from core.audio import trim_span

    first, last = trim_span(audio, sample_rate=16000)
    return 20 * float(np.log10(np.sqrt(np.mean(np.square(audio[first:last], dtype=np.float64)))))


def save_for_review(tab: UnitsTab, name: str) -> None:
    """With EARSHOT_SCREENSHOTS=DIR, keep a screenshot there for looking at the layout by hand."""
    folder = os.environ.get("EARSHOT_SCREENSHOTS")
    if folder:
        tab.grab().save(str(Path(folder) / name))


def press(qtbot, tab: UnitsTab, key: Qt.Key, modifier: Qt.KeyboardModifier = Qt.KeyboardModifier.NoModifier
          ) -> None:
    tab.activateWindow()
    qtbot.waitUntil(tab.isActiveWindow, timeout=2_000)
    qtbot.keyClick(tab.record_button if tab.record_button.isEnabled() else tab, key, modifier)


def test_live_units_from_fake_microphone_then_resynthesis(qtbot, make_tab, fsdd: Path, tmp_path: Path) -> None:
    tab = make_tab(MIC_AND_SPEAKERS)
    tab.player_factory = lambda: Player(stream_factory=FakeSpeakers)
    audio = speech(fsdd, 4)
    audio *= np.float32(0.9 / np.abs(audio).max())  # a close microphone: peaks at -1 dBFS
    mics = record(qtbot, tab, audio)
    assert tab.record_button.isEnabled() and tab.device_label.text() == ""
    press(qtbot, tab, Qt.Key.Key_Space)  # space starts recording
    assert tab.state == "recording" and tab.record_button.text() == "■ Stop"

    qtbot.waitUntil(lambda: len(tab.live_strip.units) >= 5, timeout=10_000)
    redraws = tab.live_redraws  # the view follows the units as they come, not only once the recording stops
    qtbot.waitUntil(lambda: tab.live_redraws >= redraws + 10 and tab.live_view.n_frames > 100
                    and len(tab.live_strip.units) >= 25, timeout=10_000)  # units keep arriving while recording
    assert tab.state == "recording"
    live_units = list(tab.live_strip.units)

    press(qtbot, tab, Qt.Key.Key_Space)  # space stops
    qtbot.waitUntil(lambda: tab.resynthesis is not None and tab.state == "idle", timeout=30_000)
    assert not mics[0]._thread.is_alive() and not mics[0].active
    s = tab.session
    assert s.units[:len(live_units)] == live_units  # what scrolled by is what the utterance holds
    assert s.units == s.model.vqvae.encode(MFCC()(torch.from_numpy(s.audio))).tolist()  # = whole-file units
    np.testing.assert_array_equal(s.audio[:len(audio)], audio[:len(s.audio)])  # the mic's audio, in order
    assert tab.original_view.n_frames == s.n_frames > 0 and tab.original_strip.units == s.units
    assert tab.resynth_view.n_frames > 0.9 * s.n_frames
    assert tab.histogram.counts.sum() == len(s.units) and len(tab.histogram.counts) == 16
    fit = s.voice_fit  # fitted live, on the first second of speech: Auto resynthesises with it
    assert fit is not None and fit.end < 1.5 and tab.speaker_combo.currentText() == f"Auto: {fit.name}"
    assert abs(len(tab.resynthesis.audio) - s.n_samples) <= 160 and tab.resynthesis.speaker == fit.name
    # issue 41: what the tab plays is as loud as what was recorded, over the speech, and never clips
    played, recorded = speech_rms_db(tab.resynthesis.audio), speech_rms_db(s.audio)
    assert abs(played - recorded) <= 3.0 and np.abs(tab.resynthesis.audio).max() < 0.9, (played, recorded)
    assert tab.xrun_label.text() == "xruns: 0"
    for button in (tab.play_original_button, tab.play_resynth_button, tab.export_units_button,
                   tab.export_wav_button, tab.record_button, tab.load_button):
        assert button.isEnabled(), button.text()

    press(qtbot, tab, Qt.Key.Key_P)  # P plays the resynthesis
    assert tab.player is not None and tab.player.playing
    assert tab.player.duration == pytest.approx(len(tab.resynthesis.audio) / 16000)
    assert tab.status_label.text().startswith("Playing the resynthesis (")
    qtbot.waitUntil(lambda: tab.status_label.text().startswith("Played the resynthesis ("), timeout=20_000)  # issue
    # 40: "Playing the resynthesis (10.1 s)" stayed after it ended

    other = "bob" if fit.name == "ann" else "ann"
    tab.speaker_combo.setCurrentText(other)  # another voice: resynthesised again
    qtbot.waitUntil(lambda: tab.resynthesis.speaker == other and tab.state == "idle", timeout=30_000)
    with_loudness = tab.resynthesis
    tab.loudness_check.setChecked(False)  # from the units alone: resynthesised again, and the view says so
    qtbot.waitUntil(lambda: tab.resynthesis is not with_loudness and tab.state == "idle", timeout=30_000)
    assert tab.resynthesis.speaker == other and not np.allclose(tab.resynthesis.audio, with_loudness.audio)
    assert "units only" in tab.resynth_view.plotItem.titleLabel.text
    tab.loudness_check.setChecked(True)
    qtbot.waitUntil(lambda: "loudness" in tab.resynth_view.plotItem.titleLabel.text and tab.state == "idle",
                    timeout=30_000)

    tab.original_view.setXRange(0.0, 4.0, padding=0)
    assert tab.original_strip.labels_shown == 0  # 100 units across the view: too small for ids
    tab.original_view.setXRange(0.5, 1.0, padding=0)  # zoomed in (as with the wheel): ids written on units
    assert 10 <= tab.original_strip.labels_shown <= 14
    assert tab.resynth_view.viewRange()[0] == pytest.approx([0.5, 1.0])  # the two spectrograms move together

    shot = tmp_path / "units-tab.png"
    assert tab.grab().save(str(shot)) and shot.stat().st_size > 10_000
    save_for_review(tab, "units-tab-live.png")


def test_the_review_puts_the_resynthesis_under_the_original_and_says_what_they_show(qtbot, make_tab, fsdd: Path
                                                                                    ) -> None:
    """Issue 41: the two spectrograms one above the other on one time axis and one frequency scale, and a paragraph
    in plain words (a unit, every 40 ms, what to look for) that fits in the tab at 1024x700 (its page: 1024x620)."""
    from PySide6.QtCore import QPoint

    tab = make_tab(NO_DEVICE)
    tab.resize(1024, 620)
    path = fsdd_files(fsdd, 1)[0]
    tab.load_file(path)
    qtbot.waitUntil(lambda: tab.resynthesis is not None and tab.state == "idle", timeout=30_000)
    top, strip, bottom = (w.mapTo(tab, QPoint(0, 0)) for w in (tab.original_view, tab.original_strip,
                                                                 tab.resynth_view))
    assert top.y() < strip.y() < bottom.y() and top.x() == bottom.x()  # one above the other, flush
    assert tab.original_view.width() == tab.resynth_view.width()
    o, r = tab.original_view.getViewBox(), tab.resynth_view.getViewBox()
    assert (o.screenGeometry().left(), o.width()) == (r.screenGeometry().left(), r.width())  # the same pixels
    assert o.viewRange() == r.viewRange()  # ... for the same seconds and the same 0-8 kHz
    tab.original_view.setXRange(0.1, 0.3, padding=0)
    assert r.viewRange()[0] == pytest.approx([0.1, 0.3])
    about = tab.about_label
    assert about.isVisible() and about.wordWrap()
    text = about.text()
    assert "unit" in text and "every 40 ms" in text and "16 speech sounds" in text  # the tiny model's 16
    assert "same sound" in text and "same unit" in text and "words are kept" in text
    assert about.heightForWidth(about.width()) <= about.height()  # none of it cut off
    assert about.mapTo(tab, QPoint(0, 0)).x() > bottom.x() + tab.resynth_view.width() - 1  # beside, not over
    save_for_review(tab, "units-tab-review.png")


def red_pixels(widget) -> int:
    """Pixels of the meter drawn in clipping red (its 3-pixel tick at -1 dBFS is below any count checked)."""
    image = widget.grab().toImage()
    return sum(1 for x in range(image.width()) for y in range(image.height())
               if (c := image.pixelColor(x, y)).red() > 180 and c.green() < 90 and c.blue() < 90)


def test_the_input_meter_follows_the_recording_and_shows_clipping_in_red(qtbot, make_tab, fsdd: Path) -> None:
    tab = make_tab(MIC_ONLY)
    meter, level = tab.level_meter, tab.input_level
    assert not meter.isEnabled() and not level.active and red_pixels(meter) < 10  # idle: nothing shown
    voice = speech(fsdd, 2)
    voice = 0.3 * voice / np.abs(voice).max()  # peaks at -10.5 dBFS
    record(qtbot, tab, np.concatenate([voice, np.clip(voice * 20, -1, 1)]), speed=2.0)  # then clipped speech
    tab.toggle_recording()
    qtbot.waitUntil(lambda: level.peak_db > -30, timeout=10_000)
    assert meter.isEnabled() and level.active and -30 < level.peak_db < -10 and level.rms_db < level.peak_db
    assert not level.clipping and red_pixels(meter) < 10
    qtbot.waitUntil(lambda: level.clipping, timeout=10_000)
    assert red_pixels(meter) > 50  # the bar turns red
    tab.toggle_recording()
    qtbot.waitUntil(lambda: tab.state == "idle", timeout=30_000)
    assert not meter.isEnabled() and not level.active and red_pixels(meter) < 10  # stopped: empty again


def test_the_idle_meter_reads_as_no_signal_not_a_black_box(qtbot) -> None:
    """An earlier trial: before recording (or without a microphone) the meter was a black box, read as broken.
    Idle it is an empty light scale in a frame with "— dBFS"; recording, the level on the dark trough."""
    meter = LevelMeter()
    qtbot.addWidget(meter)
    meter.resize(meter.sizeHint())
    meter.setEnabled(False)
    bar_end = meter.width() - METER_TEXT_WIDTH
    idle = meter.grab().toImage()
    assert idle.pixelColor(bar_end // 4, meter.height() // 2).lightness() > 150  # light, empty
    background = idle.pixelColor(bar_end + 2, 1)
    text = sum(idle.pixelColor(x, y) != background for x in range(bar_end, meter.width())
               for y in range(meter.height()))
    assert text > 20  # "— dBFS": no number
    level = InputLevel()
    level.start(0.0)
    level.update(np.full(512, 0.01, np.float32), 0.0)  # -40 dBFS
    meter.setEnabled(True)
    meter.show_level(level)
    live = meter.grab().toImage()
    assert live.pixelColor(bar_end - 10, meter.height() // 2).lightness() < 80  # above the level: the dark trough


def test_device_vanishing_mid_recording_leaves_the_tab_usable(qtbot, make_tab, fsdd: Path) -> None:
    tab = make_tab(MIC_ONLY)
    messages: list[str] = []
    tab.status_changed.connect(messages.append)
    audio = speech(fsdd, 3)
    record(qtbot, tab, audio, speed=2.0, vanish_after=25)  # unplugged after 0.8 s of audio
    tab.toggle_recording()
    qtbot.waitUntil(lambda: tab.state == "idle" and tab.resynthesis is not None, timeout=30_000)
    assert any("Recording stopped" in m and "unexpectedly" in m for m in messages), messages
    assert tab.recorder is None and not tab.timer.isActive()
    assert 0.7 < tab.session.duration < 0.9 and len(tab.session.units) >= 15  # what came before is kept
    assert not tab.play_resynth_button.isEnabled()  # no output device: playback disabled, with a reason
    assert "Playback unavailable" in tab.play_resynth_button.toolTip()

    mics = record(qtbot, tab, audio, speed=2.0)  # plugged back in: recording works again
    tab.toggle_recording()
    qtbot.waitUntil(lambda: len(tab.live_strip.units) >= 10, timeout=10_000)
    tab.toggle_recording()
    qtbot.waitUntil(lambda: tab.state == "idle" and tab.resynthesis is not None, timeout=30_000)
    assert len(tab.session.units) >= 10 and mics and not mics[0]._thread.is_alive()


def test_load_file_and_export_without_any_device(qtbot, make_tab, fsdd: Path, tmp_path: Path, monkeypatch) -> None:
    tab = make_tab(NO_DEVICE)
    assert not tab.record_button.isEnabled() and not tab.level_meter.isEnabled()
    assert "Recording and playback unavailable: no audio input device" in tab.device_label.text()
    assert "no audio input device" in tab.record_button.toolTip()
    assert tab.xrun_label.isHidden()  # no input, no input overflows to count
    press(qtbot, tab, Qt.Key.Key_Space)  # nothing happens without a microphone
    assert tab.state == "idle" and tab.recorder is None

    path = fsdd_files(fsdd, 1)[0]  # 8 kHz file: resampled by the service
    tab.load_file(path)
    qtbot.waitUntil(lambda: tab.state == "idle" and tab.resynthesis is not None, timeout=30_000)
    s = tab.session
    assert s.source == path and len(s.units) > 5
    assert tab.original_view.n_frames == s.n_frames and tab.resynth_view.n_frames > 0
    assert tab.histogram.counts.sum() == len(s.units) and tab.live_strip.units == s.units
    assert not tab.play_original_button.isEnabled() and not tab.play_resynth_button.isEnabled()
    press(qtbot, tab, Qt.Key.Key_P)  # disabled: no crash, no player
    assert tab.player is None

    target = tmp_path / "out.units.txt"
    monkeypatch.setattr("app.ui.units_tab.QFileDialog.getSaveFileName", lambda *a, **k: (str(target), ""))
    press(qtbot, tab, Qt.Key.Key_E, Qt.KeyboardModifier.ControlModifier)  # Ctrl+E exports the units
    assert [u for _, u in parse_units_text(target.read_text())] == s.units
    dialogs: list[str] = []

    def save_as_textgrid(_parent, _title: str, _start: str, filters: str) -> tuple[str, str]:
        dialogs.append(filters)
        return str(tmp_path / "out.units.txt"), "Praat TextGrid (*.TextGrid)"  # the filter, the default name

    monkeypatch.setattr("app.ui.units_tab.QFileDialog.getSaveFileName", save_as_textgrid)
    grid_path = tab.export_units()
    assert dialogs == ["Units (*.txt);;Praat TextGrid (*.TextGrid)"] and grid_path == tmp_path / "out.units.TextGrid"
    grid = textgrid.openTextgrid(str(grid_path), includeEmptyIntervals=False)
    assert list(grid.tierNames) == ["units"] and grid.getTier("units").entries[0].start == 0.0
    assert "".join(e.label for e in grid.getTier("units").entries) == "".join(
        str(u) for i, u in enumerate(s.units) if i == 0 or u != s.units[i - 1])
    wav = tab.export_wav(tmp_path / "out.wav")
    assert wav is not None and decode(wav).duration == pytest.approx(s.duration, abs=0.011)

    save_for_review(tab, "units-tab-no-device.png")

    tab.load_file(tmp_path / "missing.wav")  # a bad file is a message, and the tab stays usable
    qtbot.waitUntil(lambda: tab.state == "idle", timeout=10_000)
    assert "not found" in tab.status_label.text()
    assert tab.load_button.isEnabled()


def test_a_chosen_voice_sticks_until_auto_is_chosen_again(qtbot, make_tab, fsdd: Path) -> None:
    tab = make_tab(NO_DEVICE)
    combo = tab.speaker_combo
    assert [combo.itemText(i) for i in range(combo.count())] == ["Auto", "ann", "bob"]

    def load(path: Path) -> str:
        tab.load_file(path)
        qtbot.waitUntil(lambda: tab.state == "idle" and tab.resynthesis is not None, timeout=30_000)
        return tab.session.voice_fit.name

    first, second = fsdd_files(fsdd, 12)[0], fsdd_files(fsdd, 12)[11]
    fitted = load(first)
    assert combo.currentText() == f"Auto: {fitted}" and tab.resynthesis.speaker == fitted
    chosen = "bob" if fitted == "ann" else "ann"
    combo.setCurrentText(chosen)  # the user overrides Auto
    qtbot.waitUntil(lambda: tab.state == "idle" and tab.resynthesis.speaker == chosen, timeout=30_000)

    fitted = load(second)  # a new utterance: the chosen voice stays, Auto still says what it would pick
    assert fitted != chosen, "pick another file: this one's fitted voice cannot tell a kept choice from Auto"
    assert tab.resynthesis.speaker == chosen and combo.currentText() == chosen
    assert combo.itemText(0) == f"Auto: {fitted}"

    combo.setCurrentIndex(0)  # Auto again: the fitted voice
    qtbot.waitUntil(lambda: tab.state == "idle" and tab.resynthesis.speaker == fitted, timeout=30_000)
    assert "fits the speech best" in tab.status_label.text()


def test_controls_reachable_by_tab_and_unit_colours_fixed(make_tab) -> None:
    tab = make_tab(MIC_ONLY)
    chain, w = [], tab.record_button
    for _ in range(100):
        chain.append(w)
        w = w.nextInFocusChain()
    for control in (tab.record_button, tab.load_button, tab.speaker_combo, tab.play_original_button,
                    tab.play_resynth_button, tab.export_units_button, tab.export_wav_button):
        assert control in chain and control.focusPolicy() & Qt.FocusPolicy.TabFocus
    assert tab.live_view.focusPolicy() == Qt.FocusPolicy.NoFocus
    colours = {unit_colour(u) for u in range(64)}
    assert len(colours) == 64 and unit_colour(7) == unit_colour(7)


def test_empty_views_show_their_frames(make_tab) -> None:
    """Before any audio: the live window, a neutral 1-s review frame and the whole codebook, in plain units."""
    tab = make_tab(MIC_ONLY)
    assert tab.live_view.viewRange()[0] == pytest.approx([0.0, 8.0])  # the window recording fills, then scrolls
    for view in (tab.original_view, tab.resynth_view):
        (x, y) = view.viewRange()
        assert x == pytest.approx([0.0, 1.0]) and y == pytest.approx([0.0, view.max_hz])
        assert not view.getAxis("bottom").autoSIPrefix
    # one time axis: "time (s)" under the resynthesis, which the original above shares
    assert tab.resynth_view.getAxis("bottom").labelString().find("(s)") > 0
    assert "(s)" not in tab.original_view.getAxis("bottom").labelString()
    (x, y), k = tab.histogram.viewRange(), tab.session.codebook_size
    assert x[0] <= 0 and x[1] >= k - 1 and x[1] - x[0] == pytest.approx(k, rel=0.05)  # every id of the codebook
    assert y[0] <= 0 and y[1] == pytest.approx(1.0, abs=0.1)
    assert tab.histogram.counts.sum() == 0 and len(tab.histogram.counts) == k


def test_the_loaded_model_message_stays_in_the_tab(qtbot, tmp_path: Path) -> None:
    """Every tab loads its model at start: the Units tab's "units-default: 128 units, ... Load a file" reached the
    window's status bar over whichever tab was in front, an instruction for a tab not shown."""
    model = tiny_units_model()
    save_checkpoint(tmp_path / "tiny-units.safetensors", "units", model, model.config,
                    features=frontend_to_dict(MFCC()))
    registry = ModelRegistry(folders=[(tmp_path, "user")])
    tab = UnitsTab()
    qtbot.addWidget(tab)
    tab.device_status_fn = lambda: NO_DEVICE
    said: list[str] = []
    tab.status_changed.connect(said.append)
    tab.set_registry(registry)
    tab.set_models(registry.scan())
    qtbot.waitUntil(lambda: tab.session is not None and tab.state == "idle", timeout=20_000)
    assert "units, one every" in tab.status_label.text() and not [m for m in said if "units, one every" in m]
    tab.shutdown()


def test_the_loaded_model_message_offers_recording_only_when_it_is_available(make_tab) -> None:
    assert "Open an audio file (recording is unavailable)" in make_tab(NO_DEVICE).status_label.text()
    assert "Press Space to record" in make_tab(MIC_ONLY).status_label.text()


def test_a_microphone_gone_with_the_sound_server_is_said_in_plain_words(qtbot, make_tab) -> None:
    tab = make_tab(MIC_ONLY)

    def refuses(**_: object) -> object:
        raise sd.PortAudioError("Error opening InputStream: Illegal combination of I/O devices [PaErrorCode -9993]",
                                -9993)

    tab.recorder_factory = lambda: Recorder(sample_rate=16000, block_size=512, stream_factory=refuses)
    tab.toggle_recording()
    text = tab.status_label.text()
    assert tab.state == "idle" and text.startswith("Cannot record: The input device is no longer available"), text
    assert "PaErrorCode" not in text and "Illegal" not in text


def test_without_an_output_device_the_resynthesis_is_not_offered_to_p(qtbot, make_tab, fsdd: Path) -> None:
    """"P plays it." after a resynthesis that cannot be played sent the user to a key that did nothing: without
    an output device the line says where to hear it (Export WAV…), and P says why it does not play."""
    tab = make_tab(NO_DEVICE)
    tab.load_file(fsdd_files(fsdd, 1)[0])
    qtbot.waitUntil(lambda: tab.state == "idle" and tab.resynthesis is not None, timeout=30_000)
    said = tab.status_label.text()
    assert said.startswith("Resynthesised") and "P plays it" not in said and "Export WAV" in said
    press(qtbot, tab, Qt.Key.Key_P)
    said = tab.status_label.text()
    assert tab.player is None and said.startswith("Playback unavailable:") and "no audio output device" in said
    assert "microphone" not in said  # playback's reason only


def test_with_an_output_device_p_is_offered(qtbot, make_tab, fsdd: Path) -> None:
    tab = make_tab(MIC_AND_SPEAKERS)
    tab.load_file(fsdd_files(fsdd, 1)[0])
    qtbot.waitUntil(lambda: tab.state == "idle" and tab.resynthesis is not None, timeout=30_000)
    assert tab.status_label.text().endswith("P plays it.")


def test_a_silent_file_is_said_to_be_silent_not_resynthesised(qtbot, make_tab, tmp_path: Path) -> None:
    """A recording of silence is told as such, but a silent file was "Resynthesised 1.00 s as ...", one unit
    repeated, as if it had worked: a file gets the same check, in a file's words (no microphone to blame)."""
    import soundfile as sf

    tab = make_tab(NO_DEVICE)
    path = tmp_path / "quiet.wav"
    sf.write(path, np.zeros(16000, np.float32), 16000)
    tab.load_file(path)
    qtbot.waitUntil(lambda: tab.state == "idle" and not tab.busy(), timeout=30_000)
    qtbot.wait(100)  # a resynthesis would start once the encoding job has ended
    said = tab.status_label.text()
    assert said.startswith("quiet.wav holds only silence") and "digital silence" in said, said
    assert "microphone" not in said and tab.resynthesis is None and not tab.export_wav_button.isEnabled()
    assert tab.load_button.isEnabled()


@pytest.mark.parametrize("width", [712, 1016])  # the tab in a 720x480 and a 1024x700 window
def test_the_plots_titles_fit_and_hold_no_plot_wider_than_its_place(qtbot, make_tab, fsdd: Path,
                                                                     width: int) -> None:
    """At 720x480 the review plots' titles read "original (zoom in with the wheel t" and "codebook usage: 4" (of
    "48 of 128 units"; at 1024x700 "... 128 unit"), and a title wider than its plot held the plot wider than its
    place: its right end, time axis included, was cut off. A plot takes the longest wording that fits."""
    tab = make_tab(NO_DEVICE)
    tab.resize(width, 480 if width < 1000 else 700)
    tab.load_file(fsdd_files(fsdd, 1)[0])
    qtbot.waitUntil(lambda: tab.state == "idle" and tab.resynthesis is not None, timeout=30_000)
    qtbot.wait(50)
    for view in (tab.live_view, tab.original_view, tab.resynth_view, tab.histogram):
        item = view.getPlotItem()
        assert item.width() <= view.width(), (item.titleLabel.text, item.width(), view.width())
        assert item.titleLabel.item.boundingRect().width() <= item.getViewBox().width() + 8, item.titleLabel.text
    used = int((tab.session.codebook_histogram() > 0).sum())
    assert str(used) in tab.histogram.getPlotItem().titleLabel.text
