"""Search tab: describe a sound, hear the best matches from your library.

Top: the query (search as you type, debounced), duration and folder filters, and the indexing bar (files,
audio seconds, time left, Pause/Cancel). Left: results (drag a row out as a file; right-click for actions)
and the files that could not be indexed, with reasons. Right: the selected sound's waveform (click to seek),
per-window similarity for long files, spectrogram, and Play (space bar) / Find similar / Reveal / Copy path.

Every model, index and decode call runs in a `JobRunner` through `app.services.search`; this module only
draws. Opening a library with a retrieval model available indexes it incrementally, automatically.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QMimeData, QPoint, Qt, QTimer, QUrl, Signal, Slot
from PySide6.QtGui import QDesktopServices, QGuiApplication, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.services.audio import DeviceStatus, Player, device_status, display_name
from app.services.jobs import Job
from app.services.library import FailedFile, Hit, SearchFilters
from app.services.registry import ModelEntry, ModelRegistry
from app.services.search import (
    IndexOutcome,
    Preview,
    Results,
    RetrievalEmbedder,
    SearchSession,
    catalog_job,
    index_session_job,
    load_embedder_job,
    open_session_job,
    preview_job,
    search_job,
    similar_job,
    summarize,
)
from app.ui.record_query import RecordQuery
from app.ui.tab_base import ModelTab
from app.ui.widgets import SpectrogramView, WaveformPlot, envelope

DEBOUNCE_MS = 250  # search-as-you-type waits this long after the last key
RESULTS_K = 50
WAVE_COLOUR = "#4c9be8"
MATCH_COLOUR = "#e8964c"
PATH_ROLE = Qt.ItemDataRole.UserRole


def format_duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def format_progress(p: dict[str, Any]) -> str:
    """'Indexing 12/40 files · 35.2 s of audio · about 12 s left'."""
    parts = [f"Indexing {p.get('files_done', p.get('step', 0))}/{p.get('files_total', p.get('total', 0))} files"]
    if p.get("audio_seconds"):
        parts.append(f"{format_duration(float(p['audio_seconds']))} of audio")
    eta = p.get("eta_s")
    if isinstance(eta, int | float):
        parts.append(f"about {format_duration(max(0.0, float(eta)))} left")
    elif p.get("message"):
        parts.append(str(p["message"]))
    return " · ".join(parts)


# ------------------------------------------------------------------------------------------- widgets


class ResultsTable(QTableWidget):
    """Ranked results; dragging rows out hands the files (as URLs) to the file manager, a DAW, ..."""

    HEADERS = ("Name", "Folder", "Duration", "Score")

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, len(self.HEADERS), parent)
        self.setHorizontalHeaderLabels(list(self.HEADERS))
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setDragEnabled(True)
        self.setDragDropMode(QAbstractItemView.DragDropMode.DragOnly)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.verticalHeader().setVisible(False)
        self.setAlternatingRowColors(True)
        header = self.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for col in (1, 2, 3):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)

    def set_hits(self, hits: list[Hit]) -> None:
        self.setRowCount(0)
        self.setRowCount(len(hits))
        for row, hit in enumerate(hits):
            cells = (hit.name.rpartition("/")[2], display_name(hit.folder) or "·", format_duration(hit.duration),
                     f"{hit.score:.3f}")
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setData(PATH_ROLE, str(hit.path))
                item.setToolTip(display_name(hit.path))
                if col >= 2:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.setItem(row, col, item)

    def mimeTypes(self) -> list[str]:  # noqa: N802 (Qt API)
        return ["text/uri-list", "text/plain"]

    def mimeData(self, items: list[QTableWidgetItem]) -> QMimeData:  # noqa: N802 (Qt API)
        paths = list(dict.fromkeys(str(it.data(PATH_ROLE)) for it in items if it.data(PATH_ROLE)))
        mime = QMimeData()
        mime.setUrls([QUrl.fromLocalFile(p) for p in paths])
        mime.setText("\n".join(paths))
        return mime


class PreviewWaveform(WaveformPlot):
    """Waveform of the selected sound with a play head, the best-matching window, and click-to-seek."""

    clicked = Signal(float)  # seconds into the file

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.playhead = pg.InfiniteLine(0.0, angle=90, pen=pg.mkPen("#c0392b", width=2), movable=False)
        self.playhead.setVisible(False)
        self.addItem(self.playhead)
        self.best = pg.LinearRegionItem((0, 1), movable=False, brush=pg.mkBrush(232, 150, 76, 60))
        self.best.setVisible(False)
        self.addItem(self.best)
        self.scene().sigMouseClicked.connect(self._scene_clicked)
        self.clear_preview()

    def set_preview(self, p: Preview) -> None:
        x, y = envelope(p.audio, p.sample_rate, points=2000)
        self._curve.setData(x + p.offset_s, y)
        self.setXRange(p.offset_s, p.end_s, padding=0)
        peak = max(float(np.abs(p.audio).max()) if len(p.audio) else 0.0, 1e-3)
        self.setYRange(-peak, peak, padding=0.05)

    def clear_preview(self) -> None:
        self._curve.setData([], [])
        self.playhead.setVisible(False)
        self.best.setVisible(False)
        self.setXRange(0, 1, padding=0)  # a neutral frame, not pyqtgraph's ±0.5 around nothing
        self.setYRange(-1, 1, padding=0.05)

    def _scene_clicked(self, event: Any) -> None:  # noqa: ANN401 - a pyqtgraph mouse event
        if event.button() != Qt.MouseButton.LeftButton:
            return
        vb = self.getPlotItem().getViewBox()
        if vb.sceneBoundingRect().contains(event.scenePos()):
            self.clicked.emit(float(vb.mapSceneToView(event.scenePos()).x()))


class PreviewSpectrogram(SpectrogramView):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setLabel("left", "frequency", units="Hz")
        self.clear_preview()

    def set_preview(self, p: Preview) -> None:
        self.set_frames(p.spectrogram, p.hop_seconds)
        T = p.spectrogram.shape[0]
        self._image.setRect(p.offset_s, 0, T * p.hop_seconds, p.max_hz)
        self.setXRange(p.offset_s, p.offset_s + T * p.hop_seconds, padding=0)
        self.setYRange(0, p.max_hz, padding=0)

    def clear_preview(self) -> None:
        self._image.clear()
        self.setXRange(0, 1, padding=0)
        self.setYRange(0, 8000, padding=0)


# ------------------------------------------------------------------------------------------------ tab


class SearchTab(ModelTab):
    kind = "retrieval"
    title = "Search"
    purpose = "Type a description such as “a door creaks open” and hear the best matches from your sound library."

    session_ready = Signal()  # a library is open with a model (indexing starts next)
    indexing_finished = Signal(object)  # IndexOutcome, or None when cancelled or failed
    results_shown = Signal(object)  # Results
    preview_shown = Signal(object)  # Preview

    def __init__(self, parent: QWidget | None = None) -> None:
        self.library: Path | None = None
        super().__init__(parent)
        self.registry: ModelRegistry | None = None
        self.embedder: RetrievalEmbedder | None = None
        self.session: SearchSession | None = None
        self._loaded_device = ""
        self.runners: list[Any] = []  # JobRunner, tagged with the session they use
        self.index_runner: Any = None
        self._search_runner: Any = None
        self._search_pending = False
        self._request = 0  # id of the latest search request; older answers are dropped
        self._preview_request = 0
        self.mode = "text"  # what the results list shows: "text" search or "similar" to a file
        self.similar_to: Path | None = None
        self.results: Results | None = None
        self.hits: list[Hit] = []
        self.preview: Preview | None = None
        self.preview_hit: Hit | None = None
        self.start_s = 0.0  # where Play starts (click-to-seek sets it)
        self.failed: list[FailedFile] = []
        self.audio = DeviceStatus(False, False, "audio devices not checked yet")
        self.player = Player()
        self.open_url: Callable[[QUrl], Any] = QDesktopServices.openUrl  # a seam for tests
        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(DEBOUNCE_MS)
        self._debounce.timeout.connect(self.run_search)
        self._play_timer = QTimer(self)
        self._play_timer.setInterval(33)  # ~30 Hz play head
        self._play_timer.timeout.connect(self._tick_playhead)
        self._build()
        self.set_audio_status(device_status())
        self._update_view()

    # ------------------------------------------------------------------------------------------ building

    def has_working_view(self) -> bool:
        return True

    def _build(self) -> None:
        page = QVBoxLayout(self.page)
        page.setContentsMargins(6, 6, 6, 6)

        bar = QHBoxLayout()
        self.build_model_chooser()
        self.query_edit = QLineEdit()
        self.query_edit.setPlaceholderText("Describe a sound, e.g. “a door creaks open”")
        self.query_edit.setClearButtonEnabled(True)
        self.query_edit.textChanged.connect(self._query_changed)
        self.query_edit.returnPressed.connect(self._search_now)
        bar.addWidget(self.model_label)
        bar.addWidget(self.model_combo)
        bar.addWidget(self.query_edit, 1)
        self.record_query = RecordQuery(self)  # search by a recorded sound
        bar.addWidget(self.record_query)
        page.addLayout(bar)

        filters = QHBoxLayout()
        filters.addWidget(QLabel("Duration"))
        self.min_spin = self._duration_spin("any", "Shortest duration to show (0 = any)")
        self.max_spin = self._duration_spin("any", "Longest duration to show (0 = any)")
        filters.addWidget(self.min_spin)
        filters.addWidget(QLabel("to"))
        filters.addWidget(self.max_spin)
        filters.addSpacing(12)
        filters.addWidget(QLabel("Folder"))
        self.folder_combo = QComboBox()
        self.folder_combo.setMinimumContentsLength(14)
        self.folder_combo.addItem("All folders", "")
        self.folder_combo.currentIndexChanged.connect(self._filters_changed)
        filters.addWidget(self.folder_combo)
        filters.addStretch(1)
        self.library_label = QLabel("")
        self.library_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.library_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        filters.addWidget(self.library_label, 2)
        page.addLayout(filters)

        index_row = QHBoxLayout()
        self.index_label = QLabel("")
        self.index_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.index_bar = QProgressBar()
        self.index_bar.setMaximumWidth(220)
        self.index_bar.setTextVisible(False)
        self.pause_button = QPushButton("Pause")
        self.pause_button.setCheckable(True)
        self.pause_button.clicked.connect(self.toggle_pause)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel_indexing)
        self.reindex_button = QPushButton("Update index")
        self.reindex_button.setToolTip("Index new and changed files of the library (only those are read)")
        self.reindex_button.clicked.connect(self.start_indexing)
        index_row.addWidget(self.index_label, 1)
        for w in (self.index_bar, self.pause_button, self.cancel_button, self.reindex_button):
            index_row.addWidget(w)
        page.addLayout(index_row)

        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self._build_lists())
        split.addWidget(self._build_preview())
        split.setStretchFactor(0, 1)
        split.setStretchFactor(1, 1)
        split.setSizes([480, 620])
        page.addWidget(split, 1)

        page.addWidget(self.build_status_label())

        self.play_shortcut = QShortcut(QKeySequence(Qt.Key.Key_Space), self.page)
        self.play_shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self.play_shortcut.activated.connect(self.toggle_play)
        self._set_indexing_controls(running=False)
        self._set_preview_actions()

    def _duration_spin(self, special: str, tip: str) -> QDoubleSpinBox:
        spin = QDoubleSpinBox()
        spin.setRange(0.0, 36000.0)
        spin.setDecimals(1)
        spin.setSingleStep(0.5)
        spin.setSuffix(" s")
        spin.setSpecialValueText(special)
        spin.setToolTip(tip)
        spin.valueChanged.connect(self._filters_changed)
        return spin

    def _build_lists(self) -> QWidget:
        self.lists = QTabWidget()
        box = QWidget()
        col = QVBoxLayout(box)
        col.setContentsMargins(0, 4, 0, 0)
        self.results_header = QLabel("")
        self.results_header.setWordWrap(True)
        col.addWidget(self.results_header)
        self.results_stack = QStackedWidget()
        self.table = ResultsTable()
        self.table.itemSelectionChanged.connect(self._selection_changed)
        self.table.itemDoubleClicked.connect(lambda _: self.play_from_match())
        self.table.customContextMenuRequested.connect(self._context_menu)
        self.no_results = QLabel("")
        self.no_results.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.no_results.setWordWrap(True)
        self.results_stack.addWidget(self.table)
        self.results_stack.addWidget(self.no_results)
        col.addWidget(self.results_stack, 1)
        self.lists.addTab(box, "Results")
        self.failed_list = QListWidget()
        self.failed_list.setWordWrap(True)
        self.lists.addTab(self.failed_list, "Failed files (0)")
        return self.lists

    def _build_preview(self) -> QWidget:
        box = QWidget()
        col = QVBoxLayout(box)
        col.setContentsMargins(0, 0, 0, 0)
        self.preview_title = QLabel("Select a result to see and hear it.")
        self.preview_title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        col.addWidget(self.preview_title)
        row = QHBoxLayout()
        self.play_button = QPushButton("Play")
        self.play_button.clicked.connect(self.toggle_play)
        self.similar_button = QPushButton("Find similar")
        self.similar_button.setToolTip("Sounds in the library that sound like this one")
        self.similar_button.clicked.connect(self.find_similar)
        self.reveal_button = QPushButton("Reveal in folder")
        self.reveal_button.setToolTip("Open the folder holding this file in the file manager")
        self.reveal_button.clicked.connect(self.reveal_selected)
        self.copy_button = QPushButton("Copy path")
        self.copy_button.clicked.connect(self.copy_selected_path)
        for w in (self.play_button, self.similar_button, self.reveal_button, self.copy_button):
            row.addWidget(w)
        row.addStretch(1)
        col.addLayout(row)
        self.waveform = PreviewWaveform()
        self.waveform.clicked.connect(self.seek_to)
        self.waveform.setToolTip("Click to play from there")
        self.window_plot = pg.PlotWidget()
        self.window_plot.setMenuEnabled(False)
        self.window_plot.setMouseEnabled(x=False, y=False)
        self.window_plot.hideButtons()
        self.window_plot.setLabel("left", "match")
        self.window_plot.getAxis("left").enableAutoSIPrefix(False)  # cosine values, not milli-units
        self.window_plot.setToolTip("Similarity of each window of a long file to the query")
        self.window_plot.setXLink(self.waveform)
        self.window_plot.setMaximumHeight(90)
        self.window_curve = self.window_plot.plot(stepMode="center", fillLevel=None,
                                                  pen=pg.mkPen(MATCH_COLOUR, width=2))
        self.window_plot.setVisible(False)
        self.spectrogram = PreviewSpectrogram()
        self.spectrogram.setXLink(self.waveform)
        col.addWidget(self.waveform, 2)
        col.addWidget(self.window_plot, 1)
        col.addWidget(self.spectrogram, 3)
        for plot in (self.waveform, self.spectrogram):
            plot.setMinimumHeight(60)
        return box

    # ----------------------------------------------------------------------------------- empty states

    def empty_message(self) -> str:
        if self.library is None:
            where = "No library folder open (File → Open Library Folder…, or drop a folder on the window)."
        else:
            where = f"Library: {display_name(self.library)}"
        return f"{super().empty_message()}\n\n{where}"

    def _update_view(self) -> None:
        """No model -> the model empty state; no library -> the library empty state; else the working view."""
        if not self.models:
            self.empty.set_message(self.empty_message())
            self.stack.setCurrentWidget(self.empty)
        elif self.library is None:
            self.empty.set_message(
                f"{self.purpose}\n\nNo library yet: open a folder of sounds (File → Open Library Folder…, or drop "
                "a folder on the window). Earshot indexes it once; later only new and changed files are read.")
            self.stack.setCurrentWidget(self.empty)
        else:
            self.stack.setCurrentWidget(self.page)

    # --------------------------------------------------------------------------------------- model setup

    @Slot(list)
    def set_models(self, entries: list[ModelEntry]) -> None:
        super().set_models(entries)
        chosen = self.fill_model_combo(self.model_combo, self.model_label)
        self._update_view()
        if not chosen:
            self._retire_session()
            self.embedder = None
        elif (self.embedder is None or self.embedder.name != chosen
              or self._loaded_device != self.device_preference()):
            self._model_chosen(self.model_combo.currentIndex())


    @Slot(int)
    def _model_chosen(self, index: int) -> None:
        entry = self.model_entry_at(index)
        if entry is None:
            return
        registry = self.registry
        self._loaded_device = self.device_preference()
        self._retire_session()
        self.embedder = None
        self.status(f"Loading {entry.name}…")
        self._run(lambda: load_embedder_job(registry, entry.name if registry else str(entry.path)),
                  self._embedder_loaded, f"load-{entry.name}", session=None,
                  progress=lambda p: self.status(str(p.get("message", ""))))

    @Slot(object)
    def _embedder_loaded(self, embedder: RetrievalEmbedder) -> None:
        self.embedder = embedder
        self.models_loaded.emit()
        self.status(f"Model {embedder.name} ready.")
        self._open_session()

    # ------------------------------------------------------------------------------------------ library

    @Slot(Path)
    def set_library(self, path: Path) -> None:
        if self.library is not None and Path(path) == self.library and self.session is not None:
            return
        self.library = Path(path)
        self.library_label.setText(f"Library: {display_name(self.library.name or self.library)}")
        self.library_label.setToolTip(display_name(self.library))
        self._retire_session()
        self._show_results(None)
        self._update_view()
        self._open_session()

    def _open_session(self) -> None:
        embedder, library = self.embedder, self.library
        if embedder is None or library is None:
            return
        self._retire_session()
        self.index_label.setText(f"Opening {display_name(library)}…")
        self._run(lambda: open_session_job(library, embedder), self._session_opened, "open-library", session=None)

    @Slot(object)
    def _session_opened(self, session: SearchSession) -> None:
        same_folder = self.library is not None and session.root == Path(os.path.abspath(self.library))
        if not same_folder or session.embedder is not self.embedder:
            session.close()  # the user moved on meanwhile
            return
        self._retire_session()
        self.session = session
        self.session_ready.emit()
        self._run(lambda: catalog_job(session), self._catalog_read, "catalog", session=session)
        self.start_indexing()
        if self.query_edit.text().strip():
            self.run_search()

    def _retire_session(self) -> None:
        """Stop what uses the current session, then close it (once its jobs have ended)."""
        old, self.session = self.session, None
        self._search_pending = False
        if old is None:
            return
        self.player.stop()
        busy = [r for r in self.runners if r.is_running() and getattr(r, "session", None) is old]
        for r in busy:
            r.cancel()
        if not busy:
            old.close()
            return
        left = set(busy)

        def one_done(r: Any) -> None:  # noqa: ANN401 - a JobRunner
            left.discard(r)
            if not left:
                old.close()

        for r in busy:
            r.finished.connect(lambda r=r: one_done(r))

    # ----------------------------------------------------------------------------------------- indexing

    @Slot()
    def start_indexing(self) -> None:
        session = self.session
        if session is None or (self.index_runner is not None and self.index_runner.is_running()):
            return
        self.index_label.setText("Indexing: scanning the folder…")
        self.index_bar.setRange(0, 0)  # busy until the scan says how many files
        runner = self._run(lambda: index_session_job(session), self._indexed, "index", session=session,
                           progress=self._index_progress)
        runner.cancelled.connect(lambda: self._index_stopped("Indexing cancelled; what was indexed so far is kept."))
        runner.error.connect(lambda msg: self._index_stopped(f"Indexing failed: {msg}"))
        self.index_runner = runner
        self._set_indexing_controls(running=True)

    @Slot(dict)
    def _index_progress(self, p: dict[str, Any]) -> None:
        total = int(p.get("files_total") or p.get("total") or 0)
        if total:
            self.index_bar.setRange(0, total)
            self.index_bar.setValue(int(p.get("files_done", p.get("step", 0))))
        self.index_label.setText(format_progress(p))

    @Slot(object)
    def _indexed(self, outcome: IndexOutcome) -> None:
        s = summarize(outcome.report)
        changed = s["embedded"] + s["moved"] + s["copied"] + s["removed"]
        text = f"{outcome.indexed} sounds indexed"
        if changed or s["failed"]:
            text += (f" · this run: {s['embedded']} new, {s['moved']} moved, {s['removed']} removed, "
                     f"{s['failed']} failed")
        if s["audio_seconds"]:
            text += f" · {format_duration(s['audio_seconds'])} of audio at {s['x_realtime']:.0f}× real time"
        self.index_label.setText(text)
        self._catalog_read((outcome.failed, outcome.folders, outcome.indexed))
        if changed and self.mode == "text" and self.query_edit.text().strip():
            self.run_search()  # new sounds may match
        self.indexing_finished.emit(outcome)

    def _index_stopped(self, message: str) -> None:
        self.index_label.setText(message)
        self.indexing_finished.emit(None)

    def _set_indexing_controls(self, running: bool) -> None:
        self.index_bar.setVisible(running)
        self.pause_button.setVisible(running)
        self.cancel_button.setVisible(running)
        self.pause_button.setChecked(False)
        self.pause_button.setText("Pause")
        self.reindex_button.setVisible(not running)
        self.reindex_button.setEnabled(self.session is not None)

    @Slot()
    def toggle_pause(self) -> None:
        runner = self.index_runner
        if runner is None or not runner.is_running():
            return
        if runner.is_paused():
            runner.resume()
            self.pause_button.setText("Pause")
            self.pause_button.setChecked(False)
        else:
            runner.pause()
            self.pause_button.setText("Resume")
            self.pause_button.setChecked(True)
            self.index_label.setText(self.index_label.text().split(" (paused)")[0] + " (paused)")

    @Slot()
    def cancel_indexing(self) -> None:
        if self.index_runner is not None and self.index_runner.is_running():
            self.index_runner.cancel()

    @Slot(object)
    def _catalog_read(self, data: tuple[list[FailedFile], list[str], int]) -> None:
        failed, folders, _ = data
        self.failed = failed
        self.failed_list.clear()
        for f in failed:
            item = QListWidgetItem(f.error or f"{display_name(f.path)}: failed")
            item.setToolTip(display_name(f.path))
            self.failed_list.addItem(item)
        if not failed:
            self.failed_list.addItem("No failed files: every sound in the library could be read.")
        self.lists.setTabText(1, f"Failed files ({len(failed)})")
        current = self.folder_combo.currentData()
        self.folder_combo.blockSignals(True)
        self.folder_combo.clear()
        self.folder_combo.addItem("All folders", "")
        for folder in folders:
            self.folder_combo.addItem(display_name(folder), folder)
        index = self.folder_combo.findData(current)
        self.folder_combo.setCurrentIndex(max(index, 0))
        self.folder_combo.blockSignals(False)

    # ----------------------------------------------------------------------------------------- searching

    def filters(self) -> SearchFilters:
        lo, hi = self.min_spin.value(), self.max_spin.value()
        return SearchFilters(lo if lo > 0 else None, hi if hi > 0 else None, self.folder_combo.currentData() or None)

    @Slot(str)
    def _query_changed(self, _: str) -> None:
        self.mode = "text"
        self._debounce.start()

    @Slot()
    def _filters_changed(self) -> None:
        self._debounce.start()

    @Slot()
    def _search_now(self) -> None:
        self._debounce.stop()
        self.mode = "text"
        self.run_search()

    @Slot()
    def run_search(self) -> None:
        """Search for the query (or the 'similar' file) with the filters; one search at a time, latest wins."""
        session = self.session
        if session is None:
            return
        if self._search_runner is not None and self._search_runner.is_running():
            self._search_pending = True
            return
        self._search_pending = False
        self._request += 1
        request, filters, k = self._request, self.filters(), RESULTS_K
        if self.mode == "similar" and self.similar_to is not None:
            target = self.similar_to

            def factory() -> Job[Results]:
                return similar_job(session, target, k, filters)
        else:
            text = self.query_edit.text().strip()
            if not text:
                self._show_results(None)
                return

            def factory() -> Job[Results]:
                return search_job(session, text, k, filters)

        runner = self._run(factory, lambda r: self._results_ready(request, r), "search", session=session)
        runner.finished.connect(self._search_finished)
        self._search_runner = runner

    @Slot()
    def _search_finished(self) -> None:
        if self._search_pending:
            self.run_search()

    def _results_ready(self, request: int, results: Results) -> None:
        if request == self._request and not self._search_pending:
            self._show_results(results)

    def _show_results(self, results: Results | None) -> None:
        self.results = results
        self.hits = results.hits if results else []
        selected = self.preview_hit.path if self.preview_hit else None
        self.table.blockSignals(True)
        self.table.set_hits(self.hits)
        self.table.blockSignals(False)
        if results is None:
            self.results_header.setText("Type a description to search the library.")
            self.no_results.setText("Type what you want to hear, e.g. “rain on a window” or “a dog barks”.")
            self.results_stack.setCurrentWidget(self.no_results)
        elif not results.hits:
            if results.indexed == 0:
                msg = "No sounds are indexed yet" + (" — indexing is running." if self._indexing() else ".")
            elif results.filtered:
                msg = f"No sounds match “{results.query}” with these filters. Loosen the duration or folder filter."
            else:
                msg = f"No sounds match “{results.query}”."
            self.results_header.setText("No results")
            self.no_results.setText(msg)
            self.results_stack.setCurrentWidget(self.no_results)
        else:
            what = f"“{results.query}”" if results.mode == "text" else f"sounds like {results.query}"
            self.results_header.setText(f"{len(results.hits)} results for {what}"
                                        + (" (filtered)" if results.filtered else ""))
            self.results_stack.setCurrentWidget(self.table)
            paths = [h.path for h in self.hits]
            self.table.selectRow(paths.index(selected) if selected in paths else 0)
        self._selection_changed()
        if results is not None:
            self.results_shown.emit(results)

    def _indexing(self) -> bool:
        return self.index_runner is not None and self.index_runner.is_running()

    def selected_hit(self) -> Hit | None:
        rows = self.table.selectionModel().selectedRows()
        row = rows[0].row() if rows else -1
        return self.hits[row] if 0 <= row < len(self.hits) else None

    @Slot()
    def find_similar(self, hit: Hit | None = None) -> None:
        hit = hit or self.selected_hit()
        if hit is None or self.session is None:
            return
        self.mode, self.similar_to = "similar", hit.path
        self._debounce.stop()
        self.run_search()

    # ------------------------------------------------------------------------------------------ preview

    @Slot()
    def _selection_changed(self) -> None:
        hit = self.selected_hit()
        if hit is None:
            self.player.stop()
            self.preview, self.preview_hit = None, None
            self.waveform.clear_preview()
            self.spectrogram.clear_preview()
            self.window_plot.setVisible(False)
            self.preview_title.setText("Select a result to see and hear it.")
            self._set_preview_actions()
            return
        if self.preview_hit is not None and hit.path == self.preview_hit.path and self.preview is not None:
            self.preview_hit = hit  # same file, new scores (another query)
            self._draw_matches(hit)
            return
        self.player.stop()
        self.preview, self.preview_hit = None, hit
        self._preview_request += 1
        request = self._preview_request
        self.preview_title.setText(f"{hit.name} · loading…")
        self._set_preview_actions()
        self._run(lambda: preview_job(hit.path, hit.best_window_start_s), lambda p: self._preview_ready(request, p),
                  "preview", session=None)

    def _preview_ready(self, request: int, preview: Preview) -> None:
        hit = self.preview_hit
        if request != self._preview_request or hit is None:
            return
        self.preview = preview
        excerpt = (f" · showing {format_duration(preview.offset_s)}–{format_duration(preview.end_s)}"
                   if preview.offset_s > 0 or preview.end_s < preview.duration_s - 1e-3 else "")
        self.preview_title.setText(f"{hit.name} · {format_duration(preview.duration_s)} · "
                                   f"{preview.sample_rate} Hz{excerpt}")
        self.preview_title.setToolTip(display_name(hit.path))
        self.waveform.set_preview(preview)
        self.spectrogram.set_preview(preview)
        self._draw_matches(hit)
        self._set_preview_actions()
        self.preview_shown.emit(preview)

    def _draw_matches(self, hit: Hit) -> None:
        """Per-window similarity along the waveform (long files) and the best window; Play starts there."""
        scores = np.asarray(hit.window_scores, dtype=np.float32)
        step = self.embedder.window_seconds if self.embedder is not None else 10.0
        long_file = len(scores) > 1
        self.window_plot.setVisible(long_file)
        if long_file:
            edges = np.minimum(np.arange(len(scores) + 1) * step, max(hit.duration, step * (len(scores) - 1)))
            self.window_curve.setData(edges, scores)
            lo, hi = float(scores.min()), float(scores.max())
            self.window_plot.setYRange(lo - 0.05, hi + 0.05, padding=0)
            start = hit.best_window_start_s
            self.waveform.best.setRegion((start, min(start + step, max(hit.duration, start))))
        self.waveform.best.setVisible(long_file)
        self.start_s = hit.best_window_start_s if long_file else 0.0
        self._show_playhead(self.start_s)

    def _set_preview_actions(self) -> None:
        has_hit = self.preview_hit is not None
        for w in (self.similar_button, self.reveal_button, self.copy_button):
            w.setEnabled(has_hit)
        self.similar_button.setEnabled(has_hit and self.session is not None)
        can_play = self.preview is not None and self.audio.output_ok
        self.play_button.setEnabled(can_play)
        self.play_button.setToolTip(
            "Play / stop (space bar); playback starts at the best-matching part of long files"
            if self.audio.output_ok else f"Playback unavailable: {self.audio.message}")

    # ------------------------------------------------------------------------------------------ playback

    def set_audio_status(self, status: DeviceStatus) -> None:
        """Playback needs an output device; without one the Play button says why it is disabled."""
        self.audio = status
        self._set_preview_actions()
        self.record_query.set_audio_status(status)

    @Slot()
    def toggle_play(self) -> None:
        if self.player.playing:
            self.stop_playback()
        else:
            self.play_from(self.start_s)

    @Slot()
    def play_from_match(self) -> None:
        if self.preview_hit is not None:
            self.play_from(self.start_s)

    def play_from(self, seconds: float) -> None:
        p = self.preview
        if p is None:
            return
        if not self.audio.output_ok:
            self.error(f"Playback unavailable: {self.audio.message}")
            return
        start = min(max(seconds, p.offset_s), p.end_s) - p.offset_s
        try:
            self.player.play(p.audio, p.sample_rate, start_seconds=start)
        except Exception as e:  # the device vanished: a message, not a crash
            self.error(f"Cannot play: {e}")
            return
        self.play_button.setText("Stop")
        self._play_timer.start()

    @Slot()
    def stop_playback(self) -> None:
        self.player.stop()
        self._play_timer.stop()
        self.play_button.setText("Play")
        self._show_playhead(self.start_s)

    @Slot(float)
    def seek_to(self, seconds: float) -> None:
        """Click on the waveform: play from there (or move the playing position)."""
        p = self.preview
        if p is None:
            return
        seconds = min(max(seconds, p.offset_s), p.end_s)
        self.start_s = seconds
        if self.player.playing:
            self.player.seek(seconds - p.offset_s)
        self._show_playhead(seconds)

    @Slot()
    def _tick_playhead(self) -> None:
        p = self.preview
        if p is None or not self.player.playing:
            self._play_timer.stop()
            self.play_button.setText("Play")
            if self.player.error:
                self.error(self.player.error)
            self._show_playhead(self.start_s)
            return
        self._show_playhead(p.offset_s + self.player.position)

    def _show_playhead(self, seconds: float) -> None:
        self.waveform.playhead.setValue(seconds)
        self.waveform.playhead.setVisible(self.preview is not None)

    # -------------------------------------------------------------------------------------- file actions

    @Slot()
    def reveal_selected(self) -> None:
        hit = self.preview_hit or self.selected_hit()
        if hit is not None:
            self.open_url(QUrl.fromLocalFile(str(hit.path.parent)))

    @Slot()
    def copy_selected_path(self) -> None:
        hit = self.preview_hit or self.selected_hit()
        if hit is not None:
            QGuiApplication.clipboard().setText(str(hit.path))
            self.status(f"Copied {display_name(hit.path)}")

    @Slot(QPoint)
    def _context_menu(self, pos: QPoint) -> None:
        row = self.table.rowAt(pos.y())
        if not 0 <= row < len(self.hits):
            return
        self.table.selectRow(row)
        hit = self.hits[row]
        menu = QMenu(self)
        menu.addAction("Play", self.play_from_match).setEnabled(self.audio.output_ok and self.preview is not None)
        menu.addAction("Find similar", lambda: self.find_similar(hit))
        menu.addAction("Reveal in folder", self.reveal_selected)
        menu.addAction("Copy path", self.copy_selected_path)
        menu.popup(self.table.viewport().mapToGlobal(pos))

    # --------------------------------------------------------------------------------------- running jobs

    def _run(self, factory: Callable[[], Job[Any]], on_result: Callable[[Any], None], name: str,
             session: SearchSession | None, progress: Callable[[dict], None] | None = None) -> Any:  # noqa: ANN401
        from app.workers import JobRunner

        runner = JobRunner(factory, name=f"search-{name}", parent=self)
        runner.session = session  # so that retiring a session cancels (and waits for) its jobs
        if progress is not None:
            runner.progress.connect(progress)

        def deliver(result: Any) -> None:  # noqa: ANN401
            if session is None or session is self.session:  # answers for a retired session are dropped
                on_result(result)

        runner.result.connect(deliver)
        runner.error.connect(self.error)
        runner.finished.connect(lambda: self._runner_done(runner))
        self.runners.append(runner)
        runner.start()
        return runner

    def _runner_done(self, runner: Any) -> None:  # noqa: ANN401
        if runner in self.runners:
            self.runners.remove(runner)
        if runner is self.index_runner:
            self.index_runner = None
            self._set_indexing_controls(running=False)


    # ------------------------------------------------------------------------------------------ shutdown

    def shutdown(self, timeout_ms: int = 5000) -> None:
        """Stop playback and every job (indexing saves its index on cancel), then close the library."""
        self._debounce.stop()
        self._play_timer.stop()
        self.player.stop()
        for runner in list(self.runners):
            runner.cancel()
        for runner in list(self.runners):
            runner.wait(timeout_ms)
        from PySide6.QtCore import QCoreApplication

        QCoreApplication.processEvents()  # deliver `finished` so sessions retired earlier get closed
        session, self.session = self.session, None
        if session is not None:
            session.close()
