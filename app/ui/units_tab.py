"""Units tab: speak, watch discovered speech units scroll by, hear speech rebuilt from units alone.

Live path (Friture style): the Recorder's audio callback only copies into its ring buffer; a ~30 Hz QTimer
drains it on the GUI thread and hands the blocks to a `LiveStream`, whose job runs the front end and the
streaming encoder in a worker (`run_job`); the same timer takes the new spectrogram frames and units
back and redraws the scrolling view, and the input level meter from the blocks it drained. Stop (or loading
a file) shows the whole utterance, resynthesises it in another worker, and fills the side-by-side
spectrograms and the codebook-usage histogram (`unit_plots.py`). The voice combo's "Auto" is the training
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
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.services.audio import AudioError, DeviceStatus, Player, Recorder, device_status
from app.services.jobs import format_progress
from app.services.levels import InputLevel
from app.services.recording import silence_problem
from app.services.registry import ModelEntry
from app.services.units import LiveStream, Resynthesis, UnitsSession, VoiceFit, load_session
from app.ui.audio_files import open_audio_file
from app.ui.tab_base import ModelTab
from app.ui.unit_plots import LIVE_LEVELS, LevelMeter, SpectrogramPane, UnitStrip, UsageHistogram, robust_levels
from app.ui.widgets import DeviceLine
from app.workers import JobRunner

LIVE_SECONDS = 8.0  # the scrolling view shows this much recent audio
UNITS_TEXT_FILTER = "Units (*.txt)"
TEXTGRID_FILTER = "Praat TextGrid (*.TextGrid)"
TEXTGRID_SUFFIX = ".TextGrid"
RESYNTH_TITLE = {True: ("resynthesis (units + loudness)", "units + loudness"),  # wordings, longest first
                 False: ("resynthesis (from units only)", "units only")}
AUTO_VOICE = "Auto"  # the voice combo's first item: the voice fitted to the speech (then "Auto: <voice>")
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

        self.session: UnitsSession | None = None
        self.loaded_name = ""
        self.audio_status: DeviceStatus | None = None
        self.recorder: Recorder | None = None
        self.player: Player | None = None
        self.live: LiveStream | None = None
        self.resynthesis: Resynthesis | None = None
        self.state = "idle"  # idle | loading | recording | finishing | encoding | resynthesising
        self._pending_resynthesis = False
        self._stop_reason = ""  # why the last recording ended by itself ('' when the user stopped it)
        self.live_redraws = 0  # timer ticks that redrew the live view (tests read this)
        self._live_spec: list[np.ndarray] = []
        self._live_frames = 0  # frames received this recording
        self._live_units: list[int] = []
        self._levels: tuple[float, float] | None = None  # colour range of the original, reused for the resynthesis
        self.voice_override: int | None = None  # a voice the user chose; None: Auto (the one that fits)
        self.input_level = InputLevel()  # the meter's state: fed from the blocks `_tick` drains

        self.timer = QTimer(self)
        self.timer.setInterval(TICK_MS)
        self.timer.timeout.connect(self._tick)
        self._build()
        self._update_controls()

    # ------------------------------------------------------------------------------------------ building

    def _build(self) -> None:
        self.model_label = QLabel("Model:")
        self.model_combo = QComboBox()
        self.model_combo.setToolTip("Units model to use")
        self.model_combo.currentTextChanged.connect(self._model_chosen)
        self.record_button = QPushButton("● Record")
        self.record_button.setToolTip("Record from the microphone (Space)")
        self.record_button.clicked.connect(self.toggle_recording)
        self.load_button = QPushButton("Open audio &file…")  # audio_files.OPEN_AUDIO_FILE; Alt+L: Follow loudness
        self.load_button.setToolTip("Encode an audio file (any format, rate and channel count); no device needed")
        self.load_button.clicked.connect(self.choose_file)
        self.level_meter = LevelMeter()
        self.level_meter.setToolTip("Input level while recording: RMS (solid), peak (light), held peak (line); "
                                    "red from −1 dBFS up: the input clips, turn the gain down")
        self.device_label = DeviceLine()
        self.xrun_label = QLabel("xruns: 0")
        self.xrun_label.setToolTip("Input overflows: audio the app could not take in time (dropped)")

        top = QHBoxLayout()
        for w in (self.model_label, self.model_combo, self.record_button, self.level_meter, self.load_button,
                  self.device_label):
            top.addWidget(w)
        top.addWidget(self.xrun_label)

        # empty, the live view shows the window it fills while recording (0..LIVE_SECONDS, then it scrolls)
        self.live_view = SpectrogramPane((f"live (last {LIVE_SECONDS:g} s)",), empty_range=(0.0, LIVE_SECONDS))
        self.live_view.setMinimumHeight(100)
        self.live_strip = UnitStrip()
        self.live_strip.setXLink(self.live_view)
        self.status_label = QLabel("")
        self.status_label.setWordWrap(True)
        self.status_label.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)

        self.original_view = SpectrogramPane(("original (zoom in with the wheel to read unit ids)",
                                              "original (the wheel zooms)", "original"), zoomable=True)
        self.original_strip = UnitStrip()
        self.original_strip.setXLink(self.original_view)
        self.resynth_view = SpectrogramPane(RESYNTH_TITLE[True], zoomable=True)
        self.resynth_view.setXLink(self.original_view)
        self.histogram = UsageHistogram()
        review = QGridLayout()
        review.addWidget(self.original_view, 0, 0)
        review.addWidget(self.original_strip, 1, 0)
        review.addWidget(self.resynth_view, 0, 1)
        review.addWidget(self.histogram, 0, 2, 2, 1)
        review.setColumnStretch(0, 3)
        review.setColumnStretch(1, 3)
        review.setColumnStretch(2, 2)
        for w in (self.original_view, self.resynth_view, self.histogram):
            w.setMinimumHeight(100)

        self.speaker_label = QLabel("&Voice:")
        self.speaker_combo = QComboBox()
        self.speaker_combo.setToolTip("Voice of the resynthesis. Auto: the training voice that fits the first second "
                                      "of the speech best, chosen anew for each recording or file. A voice chosen "
                                      "here is kept for every recording until Auto is chosen again.")
        self.speaker_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.speaker_label.setBuddy(self.speaker_combo)
        self.speaker_combo.currentIndexChanged.connect(self._speaker_chosen)
        self.loudness_check = QCheckBox("Follow &loudness")
        self.loudness_check.setChecked(True)
        self.loudness_check.setToolTip("Resynthesise from the units and the speech's loudness per unit (6-dB steps, "
                                       "a few dozen bit/s beside the units), so it rises and falls with the speech. "
                                       "Off: from the units alone, to hear what they carry by themselves.")
        self.loudness_check.toggled.connect(self._loudness_toggled)
        self.play_original_button = QPushButton("Play &original")
        self.play_original_button.clicked.connect(self.play_original)
        self.play_resynth_button = QPushButton("Play &resynthesis")
        self.play_resynth_button.clicked.connect(self.play_resynthesis)
        self.export_units_button = QPushButton("Export &units…")
        self.export_units_button.setToolTip("Save the units as one line of START:ID tokens, seconds:unit id, or as a "
                                            "Praat TextGrid with a units tier (Ctrl+E)")
        self.export_units_button.clicked.connect(lambda: self.export_units())
        self.export_wav_button = QPushButton("Export &WAV…")
        self.export_wav_button.setToolTip("Save the resynthesis as a 16-bit WAV file (Ctrl+Shift+E)")
        self.export_wav_button.clicked.connect(lambda: self.export_wav())
        bottom = QHBoxLayout()
        for w in (self.speaker_label, self.speaker_combo, self.loudness_check, self.play_original_button,
                  self.play_resynth_button):
            bottom.addWidget(w)
        bottom.addStretch(1)
        bottom.addWidget(self.export_units_button)
        bottom.addWidget(self.export_wav_button)

        layout = QVBoxLayout(self.page)
        layout.addLayout(top)
        layout.addWidget(self.live_view, 3)
        layout.addWidget(self.live_strip)
        layout.addWidget(self.status_label)
        layout.addLayout(review, 3)
        layout.addLayout(bottom)

        order = [self.model_combo, self.record_button, self.load_button, self.speaker_combo, self.loudness_check,
                 self.play_original_button, self.play_resynth_button, self.export_units_button,
                 self.export_wav_button]
        for a, b in zip(order, order[1:], strict=False):
            QWidget.setTabOrder(a, b)

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

    def has_working_view(self) -> bool:
        return True

    # ------------------------------------------------------------------------------------------ models

    @Slot(list)
    def set_models(self, entries: list[ModelEntry]) -> None:
        super().set_models(entries)
        names = [e.name for e in self.models]
        current = self.model_combo.currentText()
        self.model_combo.blockSignals(True)
        self.model_combo.clear()
        self.model_combo.addItems(names)
        self.model_combo.blockSignals(False)
        several = len(names) > 1
        self.model_combo.setVisible(several)
        self.model_label.setText("Model:" if several else f"Model: {names[0]}" if names else "")
        if not names:
            self.session, self.loaded_name = None, ""
            self._update_controls()
            return
        if current not in names:
            default = self.registry.default_for(self.kind) if self.registry is not None else None
            current = default.name if default is not None and default.name in names else names[0]
        self.model_combo.blockSignals(True)
        self.model_combo.setCurrentText(current)
        self.model_combo.blockSignals(False)
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
        if self.state != "idle":
            self._say("Busy: stop the current work before switching models.")
            return
        registry = self.registry
        self.state = "loading"
        self._say(f"Loading units model {name}…")
        self.run_job(lambda: load_session(registry, name), f"load-{name}",
                     lambda session: self._model_loaded(name, session))
        self._update_controls()

    def _model_loaded(self, name: str, session: UnitsSession) -> None:
        self.session, self.loaded_name = session, name
        self.speaker_combo.blockSignals(True)
        self.speaker_combo.clear()
        self.speaker_combo.addItems([AUTO_VOICE, *session.speakers])  # item k + 1 is voice k
        self.speaker_combo.blockSignals(False)
        self.voice_override = None  # another model has another speaker table: back to Auto
        self.resynthesis = None  # the previous model's: its views are cleared below
        self._clear_views()  # nothing encoded with this model yet; the histogram spans its codebook
        can_record = self.audio_status is not None and self.audio_status.input_ok
        how = "Press Space to record or open an audio file." if can_record else \
            "Open an audio file (recording is unavailable)."
        self._say(f"{name}: {session.codebook_size} units, one every {session.unit_seconds * 1000:.0f} ms; "
                  f"look-ahead {session.lookahead_ms:.0f} ms. {how}", news=False)
        self.models_loaded.emit()

    # ------------------------------------------------------------------------------------------ devices

    def refresh_devices(self) -> None:
        self.set_audio_status(self.device_status_fn())

    def set_audio_status(self, status: DeviceStatus) -> None:
        self.audio_status = status
        self._update_controls()

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 (Qt API)
        super().showEvent(event)
        if self.models and self.state == "idle":
            self.refresh_devices()  # a microphone may have been plugged in meanwhile

    def _update_controls(self) -> None:
        status = self.audio_status or CHECKING_DEVICES
        ready = self.session is not None
        recording = self.state == "recording"
        idle = self.state == "idle"
        input_ok, output_ok = status.input_ok, status.output_ok
        self.record_button.setText("■ Stop" if recording else "● Record")
        self.record_button.setEnabled(recording or (idle and ready and input_ok))
        # one visible line says what is off and why; the disabled buttons' tooltips repeat it
        self.device_label.show_status(status)
        self.xrun_label.setVisible(input_ok)  # overflows of an input there is none of: noise
        self.record_button.setToolTip(status.recording_unavailable() if not input_ok
                                      else "Record from the microphone (Space)")
        self.level_meter.setEnabled(recording)  # idle or without a microphone: an empty trough
        self.load_button.setEnabled(idle and ready)
        self.model_combo.setEnabled(idle)
        has_units = ready and bool(self.session.units) and idle
        has_audio = ready and self.session.n_samples > 0 and idle
        has_resynth = self.resynthesis is not None and len(self.resynthesis.audio) > 0 and idle
        self.speaker_combo.setEnabled(ready and self.state != "recording")
        self.loudness_check.setEnabled(ready and self.state != "recording")
        self.play_original_button.setEnabled(has_audio and output_ok)
        self.play_resynth_button.setEnabled(has_resynth and output_ok)
        if not output_ok:
            for b in (self.play_original_button, self.play_resynth_button):
                b.setToolTip(status.playback_unavailable())
        else:
            self.play_original_button.setToolTip("Play what was recorded or loaded")
            self.play_resynth_button.setToolTip("Play the speech rebuilt from the units (P)")
        self.export_units_button.setEnabled(has_units)
        self.export_wav_button.setEnabled(has_resynth)

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
        if not self.busy():
            if self.state in ("recording", "finishing"):
                self._end_live()
            self.state = "idle"
            if self._pending_resynthesis and self.session is not None and self.session.finished:
                self._pending_resynthesis = False
                self.start_resynthesis()
        self._update_controls()

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
        if self.session is None or self.state != "idle":
            return
        try:
            recorder = self.recorder_factory()
            recorder.start()
        except AudioError as e:
            self._say(f"Cannot record: {e}")
            return
        self.recorder = recorder
        self._stop_reason = ""
        self.live = LiveStream(self.session)
        self.resynthesis = None
        self._clear_views()
        self.state = "recording"
        self.input_level.start(time.monotonic())
        self.level_meter.show_level(self.input_level)
        self._say(f"Recording… units appear about {self.session.lookahead_ms:.0f} ms behind the audio. "
                  "Space stops.")
        self.run_job(self.live.run, "live", self._live_done, self._live_error, on_progress=_quiet)
        self._update_controls()
        self.timer.start()

    def stop_recording(self, reason: str = "") -> None:
        """Stop the microphone; the worker finishes the utterance, then the resynthesis starts."""
        if self.state != "recording" or self.recorder is None or self.live is None:
            return
        recorder = self.recorder
        tail = [recorder.drain()]
        self._stop_reason = recorder.error  # set when the recording ended by itself (not by closing it now)
        recorder.stop()
        tail.append(recorder.drain())  # what arrived between the last tick and the stream's stop
        self._end_level()
        for block in tail:
            self.live.put(block)
        self.live.close()
        self.state = "finishing"
        self._say(reason or "Finishing the last units…")
        self._update_controls()

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
        if self.live is None or self.session is None:
            return
        units, frames = self.live.take()
        if not units and not len(frames):
            return
        self._live_units.extend(units)
        if len(frames):
            self._live_spec.append(frames)
            self._live_frames += len(frames)
        self._show_voice_fit(self.session.voice_fit)  # the worker fits it once a second of speech is in
        self._redraw_live()

    def _redraw_live(self) -> None:
        s = self.session
        keep = round(LIVE_SECONDS / s.hop_seconds)
        spec = np.concatenate(self._live_spec) if self._live_spec else np.zeros((0, 1), np.float32)
        spec = spec[-keep:]
        self._live_spec = [spec]
        end = self._live_frames * s.hop_seconds
        lo = max(0.0, end - LIVE_SECONDS)
        x_range = (lo, max(end, LIVE_SECONDS))
        self.live_view.set_frames(spec, s.hop_seconds, start=(self._live_frames - len(spec)) * s.hop_seconds,
                                  levels=LIVE_LEVELS, x_range=x_range)
        keep_units = int(np.ceil(LIVE_SECONDS / s.unit_seconds)) + 1
        first_unit = max(0, len(self._live_units) - keep_units)
        self.live_strip.set_units(self._live_units[first_unit:], s.unit_seconds, start=first_unit * s.unit_seconds)
        self.live_view.setXRange(*x_range, padding=0)
        self.live_redraws += 1

    def _live_done(self, units: list[int]) -> None:
        self._drain_live()
        self._end_live()
        s = self.session
        if s is None:
            return
        empty = silence_problem(s.audio, s.sample_rate, self._stop_reason)
        if empty:  # nothing to look at or resynthesise: say why instead of showing an empty utterance
            self._say(f"{empty[0].upper()}{empty[1:]}")
            if s.n_samples:
                self._show_review()
            return
        self._say(f"{len(units)} units in {s.duration:.2f} s ({len(set(units))} different)."
                  + (f" The recording ended by itself ({self._stop_reason}); what came before is kept."
                     if self._stop_reason else "")
                  + (f" {s.nonfinite} invalid samples were replaced by silence." if s.nonfinite else "")
                  + (" The input clipped." if s.clipped > 0.001 * max(s.n_samples, 1) else ""))
        self._show_review()
        self._pending_resynthesis = True  # starts once the live worker has finished

    def _live_error(self, message: str) -> None:
        self._end_live()
        self._say(f"Live encoding failed: {message}")

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
        if self.session is None or self.state != "idle":
            return
        session = self.session
        self.resynthesis = None
        self.live = None
        self._clear_views()
        self.state = "encoding"
        self._say(f"Encoding {Path(path).name}…")
        self.run_job(lambda: session.encode_file(path), "file", self._file_encoded)
        self._update_controls()

    def _file_encoded(self, units: list[int]) -> None:
        s = self.session
        if s is None:
            return
        self._live_spec, self._live_frames, self._live_units = [s.spectrogram], s.n_frames, list(units)
        self._redraw_live()
        name = s.source.name if s.source else "file"
        # the recording's check, for a file too: one unit repeated over silence is not a result
        empty = silence_problem(s.audio, s.sample_rate, source=name)
        if empty:
            self._say(f"{empty}: nothing to resynthesise.")
            if s.n_samples:
                self._show_review()
            return
        self._say(f"{name}: {len(units)} units in {s.duration:.2f} s ({len(set(units))} different)."
                  + (f" {s.nonfinite} invalid samples were replaced by silence." if s.nonfinite else ""))
        self._show_review()
        self._pending_resynthesis = True

    # ------------------------------------------------------------------------------------------ review

    def _clear_views(self) -> None:
        self._live_spec, self._live_frames, self._live_units = [], 0, []
        self.live_view.clear_frames()
        self.live_strip.set_units([], 0.04)
        self.original_view.clear_frames()
        self.original_strip.set_units([], 0.04)
        self.resynth_view.clear_frames()
        self.histogram.set_counts(np.zeros(self.session.codebook_size if self.session else 0, np.int64))
        self.histogram.set_titles("codebook usage")
        self._show_voice_fit(None)  # a new utterance: its voice is not fitted yet

    def _show_review(self) -> None:
        s = self.session
        spec = s.spectrogram
        self._levels = robust_levels(spec)
        self.original_view.set_frames(spec, s.hop_seconds, levels=self._levels)
        self.original_strip.set_units(s.units, s.unit_seconds)
        self.histogram.set_counts(s.codebook_histogram())
        used = int((s.codebook_histogram() > 0).sum())
        self._show_voice_fit(s.voice_fit)
        n = s.codebook_size
        self.histogram.set_titles(f"codebook usage: {used} of {n} units", f"{used} of {n} units used", f"{used}/{n}")

    def start_resynthesis(self) -> None:
        s = self.session
        if s is None or not s.finished:
            return
        if self.state != "idle":
            self._pending_resynthesis = True
            return
        speaker = self.voice_override  # None: the session's fitted voice (fitted in the job if not yet)
        follow = self.loudness_check.isChecked()
        self.state = "resynthesising"
        self.run_job(lambda: s.resynthesize_job(speaker, follow_loudness=follow), "resynth", self._resynthesised)
        self._update_controls()

    @Slot(int)
    def _speaker_chosen(self, index: int) -> None:
        if index < 0:
            return
        self.voice_override = index - 1 if index > 0 else None  # sticks across recordings until Auto again
        if self.session is not None and self.session.finished:
            self.start_resynthesis()

    @Slot(bool)
    def _loudness_toggled(self, _on: bool) -> None:
        if self.session is not None and self.session.finished:
            self.start_resynthesis()

    def _show_voice_fit(self, fit: VoiceFit | None) -> None:
        """Item 0 says which voice Auto stands for: the one fitted to this utterance's speech, once known."""
        text = f"{AUTO_VOICE}: {fit.name}" if fit is not None else AUTO_VOICE
        if self.speaker_combo.count() and self.speaker_combo.itemText(0) != text:
            self.speaker_combo.setItemText(0, text)

    def _resynthesised(self, result: Resynthesis) -> None:
        self.resynthesis = result
        s = self.session
        hop = s.hop_seconds if s else 0.01
        self.resynth_view.set_frames(result.spectrogram, hop, levels=self._levels)
        wordings = RESYNTH_TITLE[result.loudness]
        self.resynth_view.set_titles(*(f"{t} · {result.speaker}" for t in wordings), wordings[-1])
        self._show_voice_fit(s.voice_fit if s else None)
        why = " (the voice that fits the speech best)" if self.voice_override is None else ""
        if len(result.audio):
            # only offer P where it can play; without an output device the WAV is the way to hear it
            hear = "P plays it." if self._output_ok() else "Export WAV… saves it to play elsewhere."
            self._say(f"Resynthesised {len(result.audio) / result.sample_rate:.2f} s as {result.speaker}{why}. "
                      + hear)
        else:
            self._say("Too short for a single unit: nothing to resynthesise.")

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
        self._say(f"Playing {what} ({len(audio) / rate:.1f} s).")

    @Slot()
    def play_original(self) -> None:
        if self.session is not None and self.play_original_button.isEnabled():
            self._play(self.session.audio, self.session.sample_rate, "the original")

    @Slot()
    def play_resynthesis(self) -> None:
        if self.resynthesis is not None and self.play_resynth_button.isEnabled():
            self._play(self.resynthesis.audio, self.resynthesis.sample_rate, "the resynthesis")

    def _output_ok(self) -> bool:
        return self.audio_status is not None and self.audio_status.output_ok

    @Slot()
    def _play_key(self) -> None:
        if self.resynthesis is not None and self.state == "idle" and not self._output_ok():
            status = self.audio_status or CHECKING_DEVICES
            self._say(status.playback_unavailable())  # a key that did nothing would look broken
            return
        self.play_resynthesis()

    # ------------------------------------------------------------------------------------------ export

    def _default_stem(self) -> str:
        s = self.session
        return s.source.stem if s is not None and s.source is not None else "recording"

    def export_units(self, path: Path | None = None) -> Path | None:
        """Save the units as text (START:ID tokens) or, for a `.TextGrid` path, as a Praat TextGrid."""
        if not self.export_units_button.isEnabled() or self.session is None:
            return None
        if path is None:
            chosen, chosen_filter = QFileDialog.getSaveFileName(
                self, "Export Units", str(Path.home() / f"{self._default_stem()}.units.txt"),
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
                                                    f"{self._default_stem()}.resynth.wav"), "WAV (*.wav)")
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
