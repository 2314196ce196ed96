"""The Words tab's spoken-term search page, drawn from a `WordsState`: a recording to search, the query (an item
or a typed word), the recording's waveform with the best hits marked, the scores over time, and the hits (a click
plays from there)."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.services.words.word_space import SAMPLE_RATE
from app.ui.audio_files import OPEN_AUDIO_FILE
from app.ui.widgets import WaveformPlot
from app.ui.word_views import WRITTEN_COLOUR
from app.ui.words_state import WordsState


def score_plot(wave: pg.PlotWidget) -> pg.PlotWidget:
    """Cosine over time, x-linked to the recording's waveform."""
    plot = pg.PlotWidget()
    plot.setMenuEnabled(False)
    plot.setMouseEnabled(x=False, y=False)
    plot.hideButtons()
    plot.setLabel("left", "cosine")
    plot.getAxis("left").enableAutoSIPrefix(False)  # cosines, never "cosine (x0.001)" up to 300
    plot.setLabel("bottom", "time", units="s")
    plot.setXLink(wave)
    return plot


class TermSearchPane(QWidget):
    play_from = Signal(float)  # a hit was clicked: play the recording from there (seconds)

    def __init__(self, state: WordsState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        col = QVBoxLayout(self)
        col.addLayout(self._recording_row())
        col.addLayout(self._query_row())
        self.search_wave = WaveformPlot()
        self.score_plot = score_plot(self.search_wave)
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
        state.events.ready.connect(self.draw_ready)
        state.events.devices.connect(self.draw_devices)
        state.events.items.connect(self.draw_queries)
        state.events.recording.connect(self.draw_recording)
        state.events.result.connect(self.draw_result)

    def _recording_row(self) -> QHBoxLayout:
        self.open_recording_button = QPushButton(OPEN_AUDIO_FILE)
        self.open_recording_button.setToolTip("A recording to search for a spoken word (any format, rate and "
                                              "channel count)")
        self.recording_label = QLabel("no audio file open")
        self.recording_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        row = QHBoxLayout()
        row.addWidget(self.open_recording_button)
        row.addWidget(self.recording_label, 1)
        return row

    def _query_row(self) -> QHBoxLayout:
        self.query_combo = QComboBox()
        self.query_combo.setEditable(True)
        self.query_combo.setMinimumContentsLength(8)
        self.query_combo.lineEdit().setPlaceholderText("query: pick an item or type a word")
        self.search_button = QPushButton("Search")
        row = QHBoxLayout()
        row.addWidget(QLabel("Query:"))
        row.addWidget(self.query_combo, 1)
        row.addWidget(self.search_button)
        return row

    def draw_ready(self) -> None:
        for w in (self.search_button, self.open_recording_button):
            w.setEnabled(self.state.ready)

    def draw_devices(self) -> None:
        status = self.state.audio
        self.hits_list.setToolTip("Click a match to play from there" if status.output_ok
                                  else status.playback_unavailable())

    def draw_queries(self) -> None:
        """The query picker lists the collection's labels; what is typed in it stays."""
        typed = self.query_combo.currentText()
        self.query_combo.blockSignals(True)
        self.query_combo.clear()
        self.query_combo.addItems([it.label for it in self.state.words.items])
        self.query_combo.setEditText(typed)
        self.query_combo.blockSignals(False)

    def draw_recording(self) -> None:
        self.recording_label.setText(self.state.search_label)
        self.search_wave.set_audio(self.state.search_audio, SAMPLE_RATE)
        self.score_curve.setData([], [])
        self.hits_list.clear()
        self._clear_hit_regions()

    def draw_result(self) -> None:
        result = self.state.search_result
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

    def _clear_hit_regions(self) -> None:
        for region in self._hit_regions:
            self.search_wave.removeItem(region)
        self._hit_regions = []

    def _hit_clicked(self, entry: QListWidgetItem) -> None:
        if self.state.search_audio is not None:
            self.play_from.emit(float(entry.data(Qt.ItemDataRole.UserRole)))
