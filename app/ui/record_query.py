"""Search by a recorded sound (the Search tab's "● Record" control): make a sound, find what sounds like it.

Record records a few seconds from the microphone in a worker (`app.services.search.recording.record_job`: the
Recorder, then silence trimmed), writes the trimmed sound to a temporary WAV file and runs the tab's
find-similar with it (`SearchSession.similar` takes files outside the library). "Save recording…" keeps
that file wherever the user wants. While recording, the button stops early and searches with what came.

The widget needs from its tab only public things: `status`/`error` to talk, `session` and `state` (the
`SearchState`, which it asks for sounds like the recording), and `run_job`, so that the job is the tab's and
closing the tab stops the microphone. No audio library is touched here: the job runs in the tab's `JobRunner`.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import QDoubleSpinBox, QFileDialog, QHBoxLayout, QPushButton, QWidget

from app.services.devices import DeviceStatus
from app.services.jobs import Job
from app.services.search.recording import Recording, default_name, record_job

DEFAULT_SECONDS = 3.0


class RecordQuery(QWidget):
    recorded = Signal(object)  # Path of the trimmed recording: what the search ran with

    def __init__(self, tab: Any, parent: QWidget | None = None) -> None:  # noqa: ANN401 - the SearchTab
        super().__init__(parent or tab)
        self.tab = tab
        self.record_factory: Callable[..., Job[Recording]] = record_job  # (seconds, stop=Event): a seam for tests
        self.recording: Recording | None = None
        self.path: Path | None = None  # the last recording, as a temporary WAV file
        self.runner: Any = None
        self.audio = DeviceStatus(True, True, "")  # until the tab has looked at the devices
        self._stop = threading.Event()
        self._tmp = tempfile.TemporaryDirectory(prefix="earshot-recordings-")
        self._searching: float | None = None  # the recording's seconds, while its search runs

        self.record_button = QPushButton("● Record")
        self.record_button.clicked.connect(self.toggle)
        self.seconds_spin = QDoubleSpinBox()
        self.seconds_spin.setRange(0.5, 30.0)
        self.seconds_spin.setSingleStep(0.5)
        self.seconds_spin.setDecimals(1)
        self.seconds_spin.setValue(DEFAULT_SECONDS)
        self.seconds_spin.setSuffix(" s")
        self.seconds_spin.setToolTip("How long Record listens (silence before and after the sound is trimmed)")
        self.save_button = QPushButton("Save recording…")
        self.save_button.setToolTip("Keep the last recording as a WAV file")
        self.save_button.setEnabled(False)
        self.save_button.clicked.connect(lambda: self.save())
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for w in (self.record_button, self.seconds_spin, self.save_button):
            layout.addWidget(w)
        self._update()

    # ------------------------------------------------------------------------------------------ state

    def set_audio_status(self, status: DeviceStatus) -> None:
        self.audio = status
        self._update()

    def recording_now(self) -> bool:
        return self.runner is not None and self.runner.is_running()

    def _update(self) -> None:
        busy = self.recording_now()
        self.record_button.setText("■ Stop" if busy else "● Record")
        self.record_button.setEnabled(busy or self.audio.input_ok)
        self.record_button.setToolTip(
            "Stop now and search with what was recorded so far" if busy else
            "Record a sound from the microphone (a vocal imitation, a tap on the desk) and find sounds like it"
            if self.audio.input_ok else self.audio.recording_unavailable())
        self.seconds_spin.setEnabled(not busy)
        self.save_button.setEnabled(self.path is not None and not busy)
        self.save_button.setVisible(self.path is not None)  # nothing to save yet: its room is the query's

    # ------------------------------------------------------------------------------------------ record

    @Slot()
    def toggle(self) -> None:
        if self.recording_now():
            self._stop.set()  # the job stops listening and returns what came
            return
        self.start()

    def start(self) -> None:
        if self.tab.session is None:
            self.tab.error("Open a sound library first: a recording is searched for in a library.")
            return
        seconds, factory, stop = self.seconds_spin.value(), self.record_factory, threading.Event()
        self._stop = stop
        self.tab.status("Opening the microphone…")
        self.runner = runner = self.tab.run_job(
            lambda: factory(seconds, stop=stop), "record", self._recorded, on_progress=self._progress,
            on_error=lambda message: self.tab.error(f"Recording failed: {message}"))
        runner.cancelled.connect(lambda: self.tab.status("Recording stopped; nothing was searched."))
        runner.finished.connect(lambda: self._finished(runner))
        self._update()

    @Slot(dict)
    def _progress(self, progress: dict) -> None:
        if progress.get("message"):
            self.tab.status(f"Recording: {progress['message']}" if progress.get("listening") else
                            "Opening the microphone…")

    def _recorded(self, recording: Recording) -> None:
        self.recording = recording
        path = recording.save(Path(self._tmp.name) / default_name())
        self.path = path
        self.tab.status(f"Recorded {recording.duration:.1f} s of sound"
                        + (f" (the recording ended early: {recording.problem})" if recording.problem else "")
                        + "; finding sounds like it…")
        self.recorded.emit(path)
        self._searching = recording.duration
        self.search(path)

    def results_came(self, results: Any) -> None:  # noqa: ANN401 - the tab's Results
        """The recording's results are here: "finding sounds like it…" gives way to what was found."""
        if self._searching is None or getattr(results, "mode", "") != "similar":
            return
        n, seconds, self._searching = len(results.hits), self._searching, None
        self.tab.status(f"{n} sound{'' if n == 1 else 's'} like your {seconds:.1f}-s recording, closest first" if n
                        else f"Nothing in the library sounds like your {seconds:.1f}-s recording")

    def _finished(self, runner: Any) -> None:  # noqa: ANN401 - a JobRunner
        if runner is self.runner:
            self.runner = None
        self._update()

    def search(self, path: Path) -> None:
        """Find-similar with a file outside the library: the same search as a result's "Find similar"."""
        if self.tab.session is None:
            return
        self.tab.state.find_similar(path)

    # ------------------------------------------------------------------------------------------ save

    def save(self, path: Path | None = None) -> Path | None:
        if self.path is None:
            return None
        if path is None:
            chosen, _ = QFileDialog.getSaveFileName(self, "Save Recording", str(Path.home() / self.path.name),
                                                    "WAV (*.wav)")
            if not chosen:
                return None
            path = Path(chosen)
        try:
            shutil.copyfile(self.path, path)
        except OSError as e:
            self.tab.error(f"Cannot save the recording: {e}")
            return None
        self.tab.status(f"Recording saved to {path}")
        return path
