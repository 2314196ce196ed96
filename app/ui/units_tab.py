"""Units tab: speak, watch discovered speech units scroll by, hear speech rebuilt from units alone.

The tab draws a Qt-free `UnitsState` (`units_state.py`: the phase, the model, the utterance, its resynthesis)
with its panels: `units_controls.py` (the top bar, the playback bar) and `units_views.py` (live view, review).
Live path (Friture style): the Recorder's audio callback only copies into its ring buffer; a ~30 Hz QTimer
drains it on the GUI thread and hands the blocks to a `LiveStream`, whose job runs the front end and the
streaming encoder in a worker (`run_job`); the same timer takes the new spectrogram frames and units back
into the state, which redraws the scrolling view, and feeds the input level meter. Stop (or loading a file)
shows the whole utterance and resynthesises it in another worker. The voice combo's "Auto" is the training
voice the session fitted to the first second of speech (in the worker); a voice the user picks overrides it
for every utterance until Auto is picked again.

Keys: Space records/stops, P plays the resynthesis, Ctrl+E exports the units (text or Praat TextGrid),
Ctrl+Shift+E the WAV.
Tests inject audio through `recorder_factory`, `player_factory` and `device_status_fn`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import Qt, QTimer, Slot
from PySide6.QtGui import QKeySequence, QShortcut, QShowEvent
from PySide6.QtWidgets import QFileDialog, QLabel, QSizePolicy, QVBoxLayout, QWidget

from app.services.devices import DeviceStatus, Player, Recorder, device_status
from app.services.jobs import format_progress
from app.services.registry import ModelEntry
from app.services.units.levels import InputLevel
from app.services.units.units_session import LiveStream, Resynthesis, UnitsSession, VoiceFit, load_session
from app.ui.audio_files import open_audio_file
from app.ui.tab_base import ModelTab
from app.ui.units_controls import PlaybackBar, UnitsBar
from app.ui.units_state import LIVE_PHASES, UnitsState
from app.ui.units_views import LivePane, ReviewPane
from app.workers import JobRunner
from core.audio import AudioError

UNITS_TEXT_FILTER = "Units (*.txt)"
TEXTGRID_FILTER = "Praat TextGrid (*.TextGrid)"
TEXTGRID_SUFFIX = ".TextGrid"
TICK_MS = 33  # ~30 Hz drain + redraw
CHECKING_DEVICES = DeviceStatus(False, False, "checking audio devices…")  # before the first look at the devices


def _quiet(_progress: dict) -> None:
    """The live job's progress: the timer draws what it brings, the status line keeps its message."""


def is_textgrid(path: Path) -> bool:
    return path.suffix.lower() == TEXTGRID_SUFFIX.lower()


def default_recorder() -> Recorder:
    return Recorder(sample_rate=16000, channels=1, block_size=512, capacity_seconds=30.0)


class UnitsTab(ModelTab):
    kind = "units"
    title = "Units"
    purpose = (
        "Record speech and watch discrete units, discovered without transcriptions, appear under the "
        "spectrogram; then hear it resynthesised from the units in your voice or another's."
    )
    job_prefix = "units"

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        # injection points (tests, other front ends): all audio I/O goes through these
        self.recorder_factory: Callable[[], Recorder] = default_recorder
        self.player_factory: Callable[[], Player] = Player
        self.device_status_fn: Callable[[], DeviceStatus] = device_status

        self.units_state = UnitsState()
        self.recorder: Recorder | None = None
        self.player: Player | None = None
        self.live: LiveStream | None = None
        self.input_level = InputLevel()  # the meter's state: fed from the blocks `_tick` drains

        self.timer = QTimer(self)
        self.timer.setInterval(TICK_MS)
        self.timer.timeout.connect(self._tick)
        self._build()
        self._listen()
        self._update_controls()

    # ------------------------------------------------------------------------------------ what the state holds

    @property
    def state(self) -> str:
        """The phase: idle | loading | recording | finishing | encoding | resynthesising."""
        return self.units_state.phase

    @property
    def session(self) -> UnitsSession | None:
        return self.units_state.session

    @property
    def resynthesis(self) -> Resynthesis | None:
        return self.units_state.resynthesis

    @property
    def loaded_name(self) -> str:
        return self.units_state.loaded_name

    @property
    def audio_status(self) -> DeviceStatus | None:
        return self.units_state.audio_status

    @property
    def live_redraws(self) -> int:
        """Redraws of the live view (tests read this)."""
        return self.live_pane.redraws

    # ------------------------------------------------------------------------------------------ building

    def _build(self) -> None:
        self.bar = UnitsBar()
        self.live_pane = LivePane(self.units_state)
        self.status_label = QLabel("")
        self.status_label.setWordWrap(True)
        self.status_label.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.review = ReviewPane(self.units_state)
        self.playback = PlaybackBar()
        layout = QVBoxLayout(self.page)
        layout.addWidget(self.bar)
        layout.addWidget(self.live_pane, 2)
        layout.addWidget(self.status_label)
        layout.addWidget(self.review, 3)  # two spectrograms one above the other
        layout.addWidget(self.playback)
        self._name_widgets()
        self._connect_widgets()
        self._tab_order()
        self._shortcuts()

    def _name_widgets(self) -> None:
        """The panels' widgets under the names the tab has always had (tests, screenshots)."""
        named = {self.bar: ("model_label", "model_combo", "record_button", "load_button", "level_meter",
                            "device_label", "xrun_label"),
                 self.playback: ("speaker_label", "speaker_combo", "loudness_check", "play_original_button",
                                 "play_resynth_button", "export_units_button", "export_wav_button"),
                 self.live_pane: ("live_view", "live_strip"),
                 self.review: ("original_view", "original_strip", "resynth_view", "histogram", "about_label")}
        for panel, names in named.items():
            for name in names:
                setattr(self, name, getattr(panel, name))

    def _connect_widgets(self) -> None:
        self.model_combo.currentTextChanged.connect(self._model_chosen)
        self.record_button.clicked.connect(self.toggle_recording)
        self.load_button.clicked.connect(self.choose_file)
        self.speaker_combo.currentIndexChanged.connect(self._speaker_chosen)
        self.loudness_check.toggled.connect(self._loudness_toggled)
        self.play_original_button.clicked.connect(self.play_original)
        self.play_resynth_button.clicked.connect(self.play_resynthesis)
        self.export_units_button.clicked.connect(lambda: self.export_units())
        self.export_wav_button.clicked.connect(lambda: self.export_wav())

    def _tab_order(self) -> None:
        order = [self.model_combo, self.record_button, self.load_button, self.speaker_combo, self.loudness_check,
                 self.play_original_button, self.play_resynth_button, self.export_units_button,
                 self.export_wav_button]
        for a, b in zip(order, order[1:], strict=False):
            QWidget.setTabOrder(a, b)

    def _shortcuts(self) -> None:
        def shortcut(key: QKeySequence | str, slot: Callable[[], Any]) -> QShortcut:
            # window-wide, but Qt ignores shortcuts of hidden widgets: active only while this tab shows
            s = QShortcut(QKeySequence(key), self)
            s.setContext(Qt.ShortcutContext.WindowShortcut)
            s.activated.connect(slot)
            return s

        self.shortcuts = [
            shortcut(QKeySequence(Qt.Key.Key_Space), self._space),
            shortcut("P", self._play_key),
            shortcut("Ctrl+E", lambda: self.export_units()),
            shortcut("Ctrl+Shift+E", lambda: self.export_wav()),
        ]

    def _listen(self) -> None:
        events = self.units_state.events
        events.phase.connect(self._update_controls)
        events.message.connect(self._say)
        events.model.connect(lambda: self.playback.set_voices(self.session.speakers))
        events.voice_fit.connect(self._show_voice_fit)

    def has_working_view(self) -> bool:
        return True

    # ------------------------------------------------------------------------------------------ models

    @Slot(list)
    def set_models(self, entries: list[ModelEntry]) -> None:
        super().set_models(entries)
        names = [e.name for e in self.models]
        current = self.model_combo.currentText()
        if names and current not in names:
            default = self.registry.default_for(self.kind) if self.registry is not None else None
            current = default.name if default is not None and default.name in names else names[0]
        self.bar.set_models(names, current if names else "")
        if not names:
            self.units_state.no_model()
            return
        self.refresh_devices()
        if current != self.loaded_name:
            self.load_model(current)

    @Slot(str)
    def _model_chosen(self, name: str) -> None:
        if name and name != self.loaded_name and self.state == "idle":
            self.load_model(name)

    def load_model(self, name: str) -> None:
        if self.registry is None:
            self._say("No model registry: cannot load a model.")
            return
        if not self.units_state.begin_loading(name):
            return
        registry = self.registry
        self.run_job(lambda: load_session(registry, name), f"load-{name}",
                     lambda session: self._model_loaded(name, session))

    def _model_loaded(self, name: str, session: UnitsSession) -> None:
        self.units_state.model_loaded(name, session)
        self.models_loaded.emit()

    # ------------------------------------------------------------------------------------------ devices

    def refresh_devices(self) -> None:
        self.set_audio_status(self.device_status_fn())

    def set_audio_status(self, status: DeviceStatus) -> None:
        self.units_state.set_audio_status(status)

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 (Qt API)
        super().showEvent(event)
        if self.models and self.state == "idle":
            self.refresh_devices()  # a microphone may have been plugged in meanwhile

    def _update_controls(self) -> None:
        status, controls = self.audio_status or CHECKING_DEVICES, self.units_state.controls()
        self.bar.draw(controls, status)
        self.playback.draw(controls, status)

    # ------------------------------------------------------------------------------------------ jobs

    @Slot(dict)
    def job_progress(self, progress: dict) -> None:
        text = format_progress(progress)
        if text:
            self.status_label.setText(text)

    @Slot(str)
    def job_failed(self, message: str) -> None:
        self._say(f"Error: {message}")

    def job_ended(self, runner: JobRunner) -> None:
        if self.busy():
            self._update_controls()
            return
        if self.state in LIVE_PHASES:
            self._end_live()
        if self.units_state.jobs_done():
            self.start_resynthesis()

    def _say(self, message: str, news: bool = True) -> None:
        """The tab's status line; `news` also goes to the window's status bar while another tab is in front (not
        the loaded model's description and what to do in this tab: every start would show it over the others)."""
        self.status_label.setText(message)
        if news:
            self.status_changed.emit(message)

    # ------------------------------------------------------------------------------------------ recording

    @Slot()
    def _space(self) -> None:
        if self.record_button.isEnabled():
            self.toggle_recording()

    @Slot()
    def toggle_recording(self) -> None:
        if self.state == "recording":
            self.stop_recording()
        else:
            self.start_recording()

    def start_recording(self) -> None:
        if not self.units_state.can_start():
            return
        try:
            recorder = self.recorder_factory()
            recorder.start()
        except AudioError as e:
            self._say(f"Cannot record: {e}")
            return
        self.recorder = recorder
        self.live = LiveStream(self.session)
        self.input_level.start(time.monotonic())
        self.level_meter.show_level(self.input_level)
        self.units_state.recording_started()
        self.run_job(self.live.run, "live", self._live_done, self._live_error, on_progress=_quiet)
        self.timer.start()

    def stop_recording(self, reason: str = "") -> None:
        """Stop the microphone; the worker finishes the utterance, then the resynthesis starts."""
        if self.state != "recording" or self.recorder is None or self.live is None:
            return
        recorder = self.recorder
        tail = [recorder.drain()]
        stop_reason = recorder.error  # set when the recording ended by itself (not by closing it now)
        recorder.stop()
        tail.append(recorder.drain())  # what arrived between the last tick and the stream's stop
        self._end_level()
        for block in tail:
            self.live.put(block)
        self.live.close()
        self.units_state.recording_stopped(stop_reason, reason)

    @Slot()
    def _tick(self) -> None:
        recorder = self.recorder
        if self.state == "recording" and recorder is not None and self.live is not None:
            block = recorder.drain()
            self.live.put(block)
            self.input_level.update(block, time.monotonic())  # a max and a mean over ~33 ms: cheap here
            self.level_meter.show_level(self.input_level)
            self.xrun_label.setText(f"xruns: {recorder.overflows}")
            if recorder.error or not recorder.recording:
                self.stop_recording(f"Recording stopped: {recorder.error or 'the input closed'}. "
                                    "What was recorded is kept.")
        self._drain_live()

    def _drain_live(self) -> None:
        if self.live is not None and self.session is not None:
            self.units_state.add_live(*self.live.take())

    def _live_done(self, units: list[int]) -> None:
        self._drain_live()
        self._end_live()
        self.units_state.live_done(units)

    def _live_error(self, message: str) -> None:
        self._end_live()
        self.units_state.live_failed(message)

    def _end_level(self) -> None:
        self.input_level.stop()
        self.level_meter.show_level(self.input_level)

    def _end_live(self) -> None:
        self.timer.stop()
        self._end_level()
        if self.recorder is not None:
            self.recorder.stop()
            self.xrun_label.setText(f"xruns: {self.recorder.overflows}")
        self.recorder = None

    # ------------------------------------------------------------------------------------------ files

    @Slot()
    def choose_file(self) -> None:
        path = open_audio_file(self)
        if path is not None:
            self.load_file(path)

    def load_file(self, path: Path) -> None:
        """Encode a file (no audio device needed), then show and resynthesise it like a recording."""
        if not self.units_state.can_start():
            return
        session = self.session
        self.live = None
        self.units_state.encoding_started(Path(path).name)
        self.run_job(lambda: session.encode_file(path), "file", self.units_state.file_encoded)

    # ------------------------------------------------------------------------------------------ resynthesis

    def start_resynthesis(self) -> None:
        asked = self.units_state.begin_resynthesis()
        if asked is None:
            return
        s, (speaker, follow) = self.session, asked
        self.run_job(lambda: s.resynthesize_job(speaker, follow_loudness=follow), "resynth",
                     self.units_state.resynthesised)

    @Slot(int)
    def _speaker_chosen(self, index: int) -> None:
        if self.units_state.choose_voice(index):
            self.start_resynthesis()

    @Slot(bool)
    def _loudness_toggled(self, on: bool) -> None:
        if self.units_state.set_follow_loudness(on):
            self.start_resynthesis()

    def _show_voice_fit(self, fit: VoiceFit | None) -> None:
        self.playback.show_auto_voice(self.units_state.auto_voice_text(fit))

    # ------------------------------------------------------------------------------------------ playback

    def _get_player(self) -> Player:
        if self.player is None:
            self.player = self.player_factory()
        return self.player

    def _play(self, audio: np.ndarray, rate: int, what: str) -> None:
        if len(audio) == 0:
            self._say(f"Nothing to play: no {what} yet.")
            return
        try:
            self._get_player().play(audio, rate)
        except AudioError as e:
            self._say(f"Cannot play: {e}")
            return
        seconds = len(audio) / rate
        playing = f"Playing {what} ({seconds:.1f} s)."
        self._say(playing)
        QTimer.singleShot(round(seconds * 1000) + 300, self, lambda: self._played(playing, what))  # (dropped
        # with the tab)

    def _played(self, playing: str, what: str) -> None:
        """Once the sound is over, "Playing ..." gives way (when nothing said anything since)."""
        if self.status_label.text() == playing:
            self._say(f"Played {what} ({playing.rpartition('(')[2]}", news=False)

    @Slot()
    def play_original(self) -> None:
        if self.session is not None and self.play_original_button.isEnabled():
            self._play(self.session.audio, self.session.sample_rate, "the original")

    @Slot()
    def play_resynthesis(self) -> None:
        if self.resynthesis is not None and self.play_resynth_button.isEnabled():
            self._play(self.resynthesis.audio, self.resynthesis.sample_rate, "the resynthesis")

    @Slot()
    def _play_key(self) -> None:
        if self.resynthesis is not None and self.state == "idle" and not self.units_state.output_ok():
            status = self.audio_status or CHECKING_DEVICES
            self._say(status.playback_unavailable())  # a key that did nothing would look broken
            return
        self.play_resynthesis()

    # ------------------------------------------------------------------------------------------ export

    def export_units(self, path: Path | None = None) -> Path | None:
        """Save the units as text (START:ID tokens) or, for a `.TextGrid` path, as a Praat TextGrid."""
        if not self.export_units_button.isEnabled() or self.session is None:
            return None
        if path is None:
            chosen, chosen_filter = QFileDialog.getSaveFileName(
                self, "Export Units", str(Path.home() / f"{self.units_state.default_stem()}.units.txt"),
                f"{UNITS_TEXT_FILTER};;{TEXTGRID_FILTER}")
            if not chosen:
                return None
            path = Path(chosen)
            if chosen_filter == TEXTGRID_FILTER and not is_textgrid(path):
                path = path.with_suffix(TEXTGRID_SUFFIX)  # the TextGrid filter with the default .txt name
        try:
            out = (self.session.export_textgrid(path) if is_textgrid(path)
                   else self.session.export_units_text(path))
        except OSError as e:
            self._say(f"Cannot export units: {e}")
            return None
        self._say(f"Units written to {out}")
        return out

    def export_wav(self, path: Path | None = None) -> Path | None:
        if not self.export_wav_button.isEnabled() or self.session is None:
            return None
        if path is None:
            chosen, _ = QFileDialog.getSaveFileName(self, "Export Resynthesis", str(Path.home() /
                                                    f"{self.units_state.default_stem()}.resynth.wav"), "WAV (*.wav)")
            if not chosen:
                return None
            path = Path(chosen)
        try:
            out = self.session.export_wav(path)
        except (OSError, ValueError) as e:
            self._say(f"Cannot export the resynthesis: {e}")
            return None
        self._say(f"Resynthesis written to {out}")
        return out

    # ------------------------------------------------------------------------------------------ shutdown

    def shutdown(self, timeout_ms: int = 10_000) -> None:
        """Stop recording and playback, cancel workers and wait for them (window close, tests)."""
        self.timer.stop()
        if self.live is not None:
            self.live.close()
        if self.recorder is not None:
            self.recorder.stop()
            self.recorder = None
        if self.player is not None:
            self.player.stop()
        self.stop_jobs(timeout_ms)
