"""Words tab: spoken and written words in one embedding space.

Left: the collection (spoken words from files or the microphone, written words with their phonemes), the
model picker and the nearest neighbours of the selected item. Right: a similarity-matrix heat map and a
2-D PCA map (`word_views.py`), and a spoken-term search page (a longer recording, a query, scores over time, best hits).
Every model call runs in a `JobRunner`; errors land in the status line and `status_changed`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QColor, QIcon, QKeyEvent, QPainter, QPixmap
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.services.audio import DeviceStatus, Player, Recorder, device_status
from app.services.jobs import Job, format_progress
from app.services.registry import ModelEntry, ModelRegistry
from app.services.words import (
    SAMPLE_RATE,
    LoadResult,
    TermSearchResult,
    WordItem,
    WordSet,
    WordSpace,
    load_items_job,
    load_recording_job,
    load_space_job,
    query_vector_job,
    recording_item_job,
    reembed_job,
    term_search_job,
    text_items_job,
)
from app.ui.audio_files import ADD_AUDIO_FILES, OPEN_AUDIO_FILE, add_audio_files, open_audio_file
from app.ui.tab_base import ModelTab
from app.ui.widgets import DeviceLine, WaveformPlot, envelope
from app.ui.word_views import SPOKEN_COLOUR, WRITTEN_COLOUR, CompareViews, short

SPEECH_LEVEL = 0.02  # peak amplitude that counts as speech while recording
SPEECH_SECONDS = 2.0  # recording stops this long after speech starts
MAX_RECORD_SECONDS = 6.0  # ... or after this long in any case



def waveform_icon(audio: np.ndarray, width: int = 48, height: int = 20) -> QIcon:
    """A small min/max envelope picture of a spoken word for the item list."""
    pix = QPixmap(width, height)
    pix.fill(QColor(0, 0, 0, 0))
    _, y = envelope(audio, SAMPLE_RATE, points=width)
    peak = max(float(np.abs(y).max()), 1e-6) if len(y) else 1.0
    painter = QPainter(pix)
    painter.setPen(QColor(SPOKEN_COLOUR))
    lo, hi = (y[0::2], y[1::2]) if len(y) >= 2 * width else (y, y)
    for x in range(min(width, len(hi))):
        mid = height / 2
        painter.drawLine(x, int(mid - hi[x] / peak * mid), x, int(mid - lo[x] / peak * mid))
    painter.end()
    return QIcon(pix)


class _DeleteKeyFilter(QObject):
    """Delete / Backspace on the item list removes the selected item."""

    def __init__(self, callback: Callable[[], None], parent: QObject) -> None:
        super().__init__(parent)
        self._callback = callback

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt API)
        if event.type() == QEvent.Type.KeyPress and isinstance(event, QKeyEvent):
            if event.key() in (Qt.Key.Key_Delete, Qt.Key.Key_Backspace):
                self._callback()
                return True
        return False


class WordsTab(ModelTab):
    kind = "words"
    title = "Words"
    purpose = (
        "Record or load spoken words, type written words, and compare them in one space: a similarity "
        "matrix, a 2-D map, and search of recordings by a typed or spoken word."
    )

    model_ready = Signal(str)  # a words model is loaded (its name)
    items_changed = Signal()  # the collection changed and the views were redrawn
    search_finished = Signal(object)  # TermSearchResult
    job_prefix = "words"

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.registry: ModelRegistry | None = None
        self.space: WordSpace | None = None
        self._loaded_device = ""
        self.words = WordSet()
        self.audio = DeviceStatus(False, False, "audio devices not checked yet")
        self.recorder: Recorder | None = None
        self.make_recorder: Callable[[], Recorder] = lambda: Recorder(sample_rate=SAMPLE_RATE)
        self.player = Player()
        self._recorded: list[np.ndarray] = []
        self._speech_at: float | None = None  # seconds into the recording when speech started
        self._recordings = 0
        self._record_timer = QTimer(self)
        self._record_timer.setInterval(33)  # ~30 Hz
        self._record_timer.timeout.connect(self._drain_recorder)
        self.search_audio: np.ndarray | None = None
        self.search_result: TermSearchResult | None = None
        self._build()
        self.set_audio_status(device_status())

    # ------------------------------------------------------------------------------------------ building

    def has_working_view(self) -> bool:
        return True

    def _build(self) -> None:
        page = QVBoxLayout(self.page)
        page.setContentsMargins(6, 6, 6, 6)

        bar = QHBoxLayout()
        self.build_model_chooser()
        self.add_files_button = QPushButton(ADD_AUDIO_FILES)
        self.add_files_button.setToolTip("Add spoken words from audio files: one word a file, named by the file")
        self.add_files_button.clicked.connect(self.choose_files)
        self.record_button = QPushButton("● Record")
        self.record_button.setCheckable(True)
        self.record_button.clicked.connect(self.toggle_recording)
        self.word_edit = QLineEdit()
        self.word_edit.setPlaceholderText("Type a word or phonemes")
        self.word_edit.setToolTip("A word from the CMU Pronouncing Dictionary, or ARPAbet phonemes (S EH V AH N)")
        self.word_edit.returnPressed.connect(self.add_typed_word)
        self.add_word_button = QPushButton("Add")
        self.add_word_button.clicked.connect(self.add_typed_word)
        self.device_label = DeviceLine()
        for w in (self.model_label, self.model_combo, self.add_files_button, self.record_button, self.device_label):
            bar.addWidget(w)
        bar.addSpacing(12)
        bar.addWidget(self.word_edit, 1)
        bar.addWidget(self.add_word_button)
        page.addLayout(bar)

        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self._build_collection())
        self.views = QTabWidget()
        self.compare = CompareViews()
        self.compare.item_clicked.connect(self.items_list.setCurrentRow)
        self.views.addTab(self.compare, "Compare")
        self.views.addTab(self._build_search(), "Search a recording")
        split.addWidget(self.views)
        split.setStretchFactor(0, 0)
        split.setStretchFactor(1, 1)
        split.setSizes([280, 820])
        page.addWidget(split, 1)

        page.addWidget(self.build_status_label())
        self._set_controls_enabled(False)

    def _build_collection(self) -> QWidget:
        box = QWidget()
        col = QVBoxLayout(box)
        col.setContentsMargins(0, 0, 0, 0)
        heading = QLabel("Words")
        heading.setToolTip("Delete removes the selected word; double-click plays a spoken word")
        col.addWidget(heading)
        self.items_list = QListWidget()
        self.items_list.currentRowChanged.connect(self._selection_changed)
        self.items_list.itemDoubleClicked.connect(lambda _: self.play_selected())
        self.items_list.installEventFilter(_DeleteKeyFilter(self.remove_selected, self))
        col.addWidget(self.items_list, 3)
        row = QHBoxLayout()
        self.remove_button = QPushButton("Remove")
        self.remove_button.clicked.connect(self.remove_selected)
        self.clear_button = QPushButton("Clear")
        self.clear_button.clicked.connect(self.clear_items)
        row.addWidget(self.remove_button)
        row.addWidget(self.clear_button)
        col.addLayout(row)
        self.nearest_label = QLabel("Nearest neighbours")
        col.addWidget(self.nearest_label)
        self.nearest_list = QListWidget()
        col.addWidget(self.nearest_list, 2)
        return box

    def _build_search(self) -> QWidget:
        box = QWidget()
        col = QVBoxLayout(box)
        row = QHBoxLayout()
        self.open_recording_button = QPushButton(OPEN_AUDIO_FILE)
        self.open_recording_button.setToolTip("A recording to search for a spoken word (any format, rate and "
                                              "channel count)")
        self.open_recording_button.clicked.connect(self.choose_recording)
        self.recording_label = QLabel("no audio file open")
        self.query_combo = QComboBox()
        self.query_combo.setEditable(True)
        self.query_combo.setMinimumContentsLength(8)
        self.query_combo.lineEdit().setPlaceholderText("query: pick an item or type a word")
        self.search_button = QPushButton("Search")
        self.search_button.clicked.connect(self.run_search)
        self.recording_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        row.addWidget(self.open_recording_button)
        row.addWidget(self.recording_label, 1)
        col.addLayout(row)
        row = QHBoxLayout()
        row.addWidget(QLabel("Query:"))
        row.addWidget(self.query_combo, 1)
        row.addWidget(self.search_button)
        col.addLayout(row)
        self.search_wave = WaveformPlot()
        self.score_plot = pg.PlotWidget()
        self.score_plot.setMenuEnabled(False)
        self.score_plot.setMouseEnabled(x=False, y=False)
        self.score_plot.hideButtons()
        self.score_plot.setLabel("left", "cosine")
        self.score_plot.getAxis("left").enableAutoSIPrefix(False)  # cosines, never "cosine (x0.001)" up to 300
        self.score_plot.setLabel("bottom", "time", units="s")
        self.score_plot.setXLink(self.search_wave)
        self.score_curve = self.score_plot.plot(pen=pg.mkPen(WRITTEN_COLOUR, width=2))
        self._hit_regions: list[pg.LinearRegionItem] = []
        col.addWidget(self.search_wave, 2)
        col.addWidget(self.score_plot, 2)
        for plot in (self.search_wave, self.score_plot):
            plot.setMinimumHeight(50)
        self.hits_list = QListWidget()
        self.hits_list.setMinimumHeight(40)
        self.hits_list.itemClicked.connect(self._hit_clicked)
        col.addWidget(self.hits_list, 1)
        return box

    # --------------------------------------------------------------------------------------- model setup

    @Slot(list)
    def set_models(self, entries: list[ModelEntry]) -> None:
        super().set_models(entries)
        chosen = self.fill_model_combo(self.model_combo, self.model_label)
        if not chosen:
            self.space = None
            self._set_controls_enabled(False)
        elif (self.space is None or self.space.name != chosen
              or self._loaded_device != self.device_preference()):
            self._model_chosen(self.model_combo.currentIndex())  # new model, or the device preference changed


    @Slot(int)
    def _model_chosen(self, index: int) -> None:
        entry = self.model_entry_at(index)
        if entry is None:
            return
        self._set_controls_enabled(False)
        registry = self.registry
        self._loaded_device = self.device_preference()
        self.run_job(lambda: load_space_job(registry, entry), f"load-{entry.name}", self._space_loaded)

    @Slot(object)
    def _space_loaded(self, space: WordSpace) -> None:
        self.space = space
        self._set_controls_enabled(True)
        self.status(f"Model {space.name} ready ({space.dim}-d space).")
        if self.words.items:
            self.run_job(lambda: reembed_job(space, list(self.words.items)), "reembed", self._reembedded)
        self.model_ready.emit(space.name)

    @Slot(object)
    def _reembedded(self, items: list[WordItem]) -> None:
        self.words = WordSet(items)
        self._refresh()

    def _set_controls_enabled(self, on: bool) -> None:
        for w in (self.add_files_button, self.word_edit, self.add_word_button, self.search_button,
                  self.open_recording_button):
            w.setEnabled(on)
        self.record_button.setEnabled(on and self.audio.input_ok)

    # ------------------------------------------------------------------------------------------ devices

    def set_audio_status(self, status: DeviceStatus) -> None:
        """Enable recording and playback according to the audio devices (none is a normal state)."""
        self.audio = status
        self.record_button.setEnabled(status.input_ok and self.space is not None)
        self.record_button.setToolTip(
            "Record one word from the microphone (stops after ~2 s of speech or on a second click)"
            if status.input_ok else status.recording_unavailable()
        )
        tip = "Click a match to play from there" if status.output_ok else status.playback_unavailable()
        self.hits_list.setToolTip(tip)
        self.items_list.setToolTip("Double-click a spoken word to play it" if status.output_ok else tip)
        self.device_label.show_status(status)  # stays: the status line
        # below is soon taken by the model's and the jobs' messages

    # --------------------------------------------------------------------------------------- running jobs

    @Slot(dict)
    def job_progress(self, progress: dict) -> None:
        self.status(format_progress(progress))


    # ------------------------------------------------------------------------------------------- adding

    @Slot()
    def choose_files(self) -> None:
        paths = add_audio_files(self)
        if paths:
            self.add_files(paths)

    def add_files(self, paths: list[Path]) -> None:
        space = self.space
        if space is None:
            self.error("No words model loaded yet.")
            return
        self.run_job(lambda: load_items_job(space, paths), "files", self._items_loaded)

    @Slot()
    def add_typed_word(self) -> None:
        text = self.word_edit.text().strip()
        if not text:
            self.error("Type a word (or ARPAbet phonemes such as S EH V AH N) first.")
            return
        self.add_words([text])
        self.word_edit.clear()

    def add_words(self, texts: list[str]) -> None:
        space = self.space
        if space is None:
            self.error("No words model loaded yet.")
            return
        self.run_job(lambda: text_items_job(space, texts), "text", self._items_loaded)

    @Slot(object)
    def _items_loaded(self, result: LoadResult) -> None:
        self._add_items(result.items)
        if result.errors:
            more = f" (and {len(result.errors) - 1} more)" if len(result.errors) > 1 else ""
            self.error(result.errors[0] + more)
        elif result.items:
            self.status(f"Added {', '.join(it.label for it in result.items)}.")

    def _add_items(self, items: list[WordItem]) -> None:
        if not items:
            return
        self.words.add(items)
        self._refresh(select=len(self.words) - 1)

    @Slot()
    def remove_selected(self) -> None:
        row = self.items_list.currentRow()
        if 0 <= row < len(self.words):
            removed = self.words.remove(row)
            self._refresh(select=min(row, len(self.words) - 1))
            self.status(f"Removed {removed.label}.")

    @Slot()
    def clear_items(self) -> None:
        self.words.clear()
        self._refresh()

    # ------------------------------------------------------------------------------------------ recording

    @Slot()
    def toggle_recording(self) -> None:
        if self.recorder is not None:
            self._stop_recording()
            return
        if not self.audio.input_ok or self.space is None:
            self.record_button.setChecked(False)
            self.error(self.audio.recording_unavailable())
            return
        recorder = self.make_recorder()
        try:
            recorder.start()
        except Exception as e:  # NoAudioDeviceError and PortAudio surprises: a message, not a crash
            self.record_button.setChecked(False)
            self.error(f"Cannot record: {e}")
            return
        self.recorder = recorder
        self._recorded, self._speech_at = [], None
        self.record_button.setChecked(True)
        self.record_button.setText("■ Stop")
        self.status("Recording… say one word.")
        self._record_timer.start()

    @Slot()
    def _drain_recorder(self) -> None:
        recorder = self.recorder
        if recorder is None:
            return
        block = recorder.drain().reshape(-1)
        before = sum(len(b) for b in self._recorded)
        if len(block):
            self._recorded.append(block)
        seconds = (before + len(block)) / recorder.sample_rate
        loud = np.flatnonzero(np.abs(block) >= SPEECH_LEVEL)
        if self._speech_at is None and len(loud):
            self._speech_at = (before + int(loud[0])) / recorder.sample_rate
        if recorder.error:
            self._stop_recording()
        elif (self._speech_at is not None and seconds - self._speech_at >= SPEECH_SECONDS) or \
                seconds >= MAX_RECORD_SECONDS:
            self._stop_recording()

    def _stop_recording(self) -> None:
        recorder, self.recorder = self.recorder, None
        self._record_timer.stop()
        self.record_button.setChecked(False)
        self.record_button.setText("● Record")
        if recorder is None:
            return
        recorder.stop()
        rest = recorder.drain()
        if len(rest):
            self._recorded.append(rest.reshape(-1))
        if recorder.error:
            self.error(recorder.error)
            return
        audio = np.concatenate(self._recorded) if self._recorded else np.zeros(0, np.float32)
        space = self.space
        if space is None:
            return
        self._recordings += 1
        label = f"recording {self._recordings}"
        self.run_job(lambda: recording_item_job(space, audio, recorder.sample_rate, label), "recording",
                     lambda item: self._add_items([item]))

    # ------------------------------------------------------------------------------------------ playback

    def _play(self, audio: np.ndarray, start_s: float = 0.0) -> None:
        if not self.audio.output_ok:
            self.error(self.audio.playback_unavailable())
            return
        try:
            self.player.play(audio, SAMPLE_RATE, start_seconds=start_s)
        except Exception as e:  # no device after all: a message
            self.error(f"Cannot play: {e}")

    @Slot()
    def play_selected(self) -> None:
        row = self.items_list.currentRow()
        if 0 <= row < len(self.words) and self.words.items[row].audio is not None:
            self._play(self.words.items[row].audio)

    # ------------------------------------------------------------------------------------------- drawing

    def _refresh(self, select: int | None = None) -> None:
        """Redraw list, matrix, map, nearest neighbours and the query picker from `self.words`."""
        items = self.words.items
        row = self.items_list.currentRow() if select is None else select
        self.items_list.blockSignals(True)
        self.items_list.clear()
        for it in items:
            if it.kind == "spoken":
                entry = QListWidgetItem(waveform_icon(it.audio) if it.audio is not None else QIcon(),
                                        f"{it.label}  ·  {it.duration:.2f} s")
            else:
                entry = QListWidgetItem(f"“{it.label}”  /{' '.join(it.phonemes)}/")
                entry.setForeground(QColor(WRITTEN_COLOUR).darker(130))
            entry.setToolTip(it.source)
            self.items_list.addItem(entry)
        self.items_list.blockSignals(False)
        if items:
            self.items_list.setCurrentRow(max(0, min(row, len(items) - 1)))
        self.compare.draw(self.words)
        self._selection_changed(self.items_list.currentRow())
        typed = self.query_combo.currentText()
        self.query_combo.blockSignals(True)
        self.query_combo.clear()
        for it in items:
            self.query_combo.addItem(it.label)
        self.query_combo.setEditText(typed)
        self.query_combo.blockSignals(False)
        self.items_changed.emit()

    @Slot(int)
    def _selection_changed(self, row: int) -> None:
        self.nearest_list.clear()
        if not 0 <= row < len(self.words):
            self.nearest_label.setText("Nearest neighbours")
            return
        item = self.words.items[row]
        self.nearest_label.setText(f"Nearest to “{short(item.label, 24)}”")
        for j, score in self.words.nearest(row, k=8):
            other = self.words.items[j]
            mark = "♪" if other.kind == "spoken" else "✎"
            self.nearest_list.addItem(f"{score:+.3f}  {mark} {other.label}")

    # ------------------------------------------------------------------------------------ term search

    @Slot()
    def choose_recording(self) -> None:
        path = open_audio_file(self)
        if path is not None:
            self.open_recording(path)

    def open_recording(self, path: Path) -> None:
        resampler = self.space.resampler if self.space is not None else "soxr"  # the model's, as in training
        self.run_job(lambda: load_recording_job(path, resampler), "open-recording",
                     lambda audio: self.set_search_audio(audio, path.name))

    def set_search_audio(self, audio: np.ndarray, label: str = "recording") -> None:
        """The recording to search, 16 kHz mono."""
        self.search_audio = np.asarray(audio, dtype=np.float32)
        self.search_result = None
        self.recording_label.setText(f"{label} · {len(audio) / SAMPLE_RATE:.1f} s")
        self.search_wave.set_audio(self.search_audio, SAMPLE_RATE)
        self.score_curve.setData([], [])
        self.hits_list.clear()
        self._clear_hit_regions()

    @Slot()
    def run_search(self) -> None:
        space, audio = self.space, self.search_audio
        if space is None:
            self.error("No words model loaded yet.")
            return
        if audio is None:
            self.error("Open an audio file to search first.")
            return
        text = self.query_combo.currentText().strip()
        if not text:
            self.error("Pick an item or type a word to search for.")
            return
        labels = [it.label for it in self.words.items]
        row = self.items_list.currentRow()
        if 0 <= row < len(labels) and labels[row] == text:
            query: WordItem | str = self.words.items[row]
        elif text in labels:
            query = self.words.items[labels.index(text)]
        else:
            query = text
        self.search_button.setEnabled(False)

        def job() -> Job[TermSearchResult]:
            vector, duration, _ = yield from query_vector_job(space, query)
            return (yield from term_search_job(space, audio, SAMPLE_RATE, vector, query_duration_s=duration))

        runner = self.run_job(job, "search", self._search_done)
        runner.finished.connect(lambda: self.search_button.setEnabled(self.space is not None))

    @Slot(object)
    def _search_done(self, result: TermSearchResult) -> None:
        self.search_result = result
        self.score_curve.setData(result.times, result.scores)
        self._clear_hit_regions()
        self.hits_list.clear()
        for rank, hit in enumerate(result.hits):
            region = pg.LinearRegionItem((hit.start_s, hit.end_s), movable=False,
                                         brush=pg.mkBrush(232, 150, 76, 90 if rank == 0 else 40))
            self.search_wave.addItem(region)
            self._hit_regions.append(region)
            entry = QListWidgetItem(f"{hit.start_s:6.2f}–{hit.end_s:.2f} s   cosine {hit.score:+.3f}")
            entry.setData(Qt.ItemDataRole.UserRole, hit.start_s)
            self.hits_list.addItem(entry)
        if result.hits:
            best = result.hits[0]
            self.status(f"Best match at {best.start_s:.2f}–{best.end_s:.2f} s (cosine {best.score:.3f}).")
        self.search_finished.emit(result)

    def _clear_hit_regions(self) -> None:
        for region in self._hit_regions:
            self.search_wave.removeItem(region)
        self._hit_regions = []

    @Slot(QListWidgetItem)
    def _hit_clicked(self, entry: QListWidgetItem) -> None:
        if self.search_audio is not None:
            self._play(self.search_audio, float(entry.data(Qt.ItemDataRole.UserRole)))

    # ------------------------------------------------------------------------------------------ shutdown

    def shutdown(self, timeout_ms: int = 5000) -> None:
        """Stop recording/playback and wait for this tab's jobs (tests, window close)."""
        if self.recorder is not None:
            self._record_timer.stop()
            self.recorder.stop()
            self.recorder = None
        self.player.stop()
        self.stop_jobs(timeout_ms)
