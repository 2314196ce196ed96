"""The Search tab's rows of controls: the names <-> sound balance, the filters (duration, folder, format, sample
rate, channels, favourites) and the indexing row (library, progress, Pause / Cancel / Update index).

The balance and the filters send what the user sets to the `SearchState`; the filters draw the library's folders
from it. The indexing row shows the index job the tab starts (`watch`), pauses and cancels it, and hands the
library's failed files and folders to the state when it ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSettings, QSize, Signal, Slot
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QBoxLayout,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QWidget,
)

from app.services.library.records import SearchFilters
from app.services.search.search_jobs import IndexOutcome
from app.ui.search_state import BALANCE_STEPS, SearchState, balance_text
from app.ui.search_text import STAR_ON, format_progress, index_summary
from app.ui.widgets import MarkedSlider
from app.workers import JobRunner
from core.display import display_name

FORMATS = (("Any format", ()), ("WAV", ("wav", "wave")), ("FLAC", ("flac",)), ("Ogg", ("ogg", "oga")),
           ("Opus", ("opus",)), ("MP3", ("mp3",)), ("AIFF", ("aif", "aiff", "aifc")))
SAMPLE_RATES = (("Any rate", (None, None)), ("≥ 44.1 kHz", (44100, None)), ("≥ 48 kHz", (48000, None)),
                ("≥ 96 kHz", (96000, None)), ("≤ 22.05 kHz", (None, 22050)), ("≤ 16 kHz", (None, 16000)))
CHANNELS = (("Any channels", None), ("Mono", 1), ("Stereo", 2))
BALANCE_KEY = "search/balance"  # QSettings: the slider's position is kept between sessions


def row_layout(widget: QWidget) -> QHBoxLayout:
    row = QHBoxLayout(widget)
    row.setContentsMargins(0, 0, 0, 0)
    return row


class BalanceControl(QWidget):
    """Names <-> sound: buttons for either channel alone, a slider for the mix between, the tuned default marked
    (double-click the slider to return to it); the position is kept between sessions."""

    def __init__(self, state: SearchState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.names_button = QToolButton()
        self.names_button.setText("Names")
        self.names_button.setToolTip("Search by names, folders and tags only")
        self.names_button.setAutoRaise(True)
        self.sound_button = QToolButton()
        self.sound_button.setText("Sound")
        self.sound_button.setToolTip("Search by what the audio sounds like only")
        self.sound_button.setAutoRaise(True)
        self.slider = MarkedSlider(state.default_balance, width=130)
        self.slider.setRange(0, BALANCE_STEPS)
        self.slider.setPageStep(10)
        self.slider.setMinimumWidth(60)  # a narrow window needs the room for the query
        saved = QSettings().value(BALANCE_KEY, state.default_balance)
        try:
            self.slider.setValue(min(max(int(saved), 0), BALANCE_STEPS))
        except (TypeError, ValueError):  # a damaged settings file: the default, not a crash
            self.slider.setValue(state.default_balance)
        state.set_balance(self.slider.value(), search=False)
        self.names_button.clicked.connect(lambda: self.slider.setValue(0))
        self.sound_button.clicked.connect(lambda: self.slider.setValue(BALANCE_STEPS))
        self.slider.valueChanged.connect(self._changed)
        row = row_layout(self)
        for w in (self.names_button, self.slider, self.sound_button):
            row.addWidget(w)
        self._show()

    def _show(self) -> None:
        position, default = self.slider.value(), self.slider.marked
        self.slider.setToolTip(
            f"Rank by {balance_text(position)}" + (" (the tuned default)" if position == default else "")
            + f".\nThe mark is the default ({balance_text(default)}); double-click to return to it.")
        for button, active in ((self.names_button, position == 0), (self.sound_button, position == BALANCE_STEPS)):
            font = button.font()
            font.setBold(active)
            button.setFont(font)

    @Slot(int)
    def _changed(self, position: int) -> None:
        QSettings().setValue(BALANCE_KEY, position)
        self._show()
        self.state.set_balance(position)


class FiltersBar(QWidget):
    """Duration, folder, format, sample rate, channels and favourites-only: every change goes to the state.

    One row where it fits; in a narrower window (720 px) the format, rate, channels and favourites go to a second
    row: squeezed into one, the combo boxes read "Any forr" and "★ Favour"."""

    def __init__(self, state: SearchState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.category: str | None = None  # the UCS category chosen in the tree's "By category" (no widget here)
        self.head, self.tail = QWidget(), QWidget()
        row = row_layout(self.head)
        row.addWidget(QLabel("Duration"))
        self.min_spin = self._duration_spin("any", "Shortest duration to show (0 = any)")
        self.max_spin = self._duration_spin("any", "Longest duration to show (0 = any)")
        row.addWidget(self.min_spin)
        row.addWidget(QLabel("to"))
        row.addWidget(self.max_spin)
        row.addSpacing(12)
        row.addWidget(QLabel("Folder"))
        self.folder_combo = QComboBox()
        self.folder_combo.setMinimumContentsLength(14)
        self.folder_combo.addItem("All folders", "")
        self.folder_combo.currentIndexChanged.connect(self._changed)
        row.addWidget(self.folder_combo)
        row.addStretch(1)
        row = row_layout(self.tail)
        self.format_combo = self._choice_combo(FORMATS, "Only files of this format")
        self.rate_combo = self._choice_combo(SAMPLE_RATES, "Only files recorded at this sample rate")
        self.channels_combo = self._choice_combo(CHANNELS, "Only mono or only stereo files")
        for combo in (self.format_combo, self.rate_combo, self.channels_combo):
            row.addWidget(combo)
        row.addSpacing(12)
        self.favourites_check = QCheckBox(f"{STAR_ON} Favourites only")
        self.favourites_check.setToolTip("Only the sounds you marked as favourites")
        self.favourites_check.toggled.connect(self._changed)
        row.addWidget(self.favourites_check)
        row.addStretch(1)
        self.rows = QBoxLayout(QBoxLayout.Direction.LeftToRight, self)
        self.rows.setContentsMargins(0, 0, 0, 0)
        self.rows.addWidget(self.head)
        self.rows.addWidget(self.tail)
        self.rows.addStretch(1)
        state.events.catalog.connect(self.show_folders)

    def one_row_width(self) -> int:
        return self.head.sizeHint().width() + 12 + self.tail.sizeHint().width()

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt API)
        """As narrow as its wider row (the rows wrap), so that a small window is not held wider by one row."""
        rows = (self.head.minimumSizeHint().width(), self.tail.minimumSizeHint().width())
        return QSize(max(rows), super().minimumSizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt API)
        super().resizeEvent(event)
        wide = self.width() >= self.one_row_width()  # the rows' contents, not their places: no flip-flopping
        self.rows.setDirection(QBoxLayout.Direction.LeftToRight if wide else QBoxLayout.Direction.TopToBottom)
        self.rows.setSpacing(12 if wide else 2)

    def _choice_combo(self, choices: Sequence[tuple[str, Any]], tip: str) -> QComboBox:
        combo = QComboBox()
        for label, value in choices:
            combo.addItem(label, value)
        combo.setToolTip(tip)
        combo.currentIndexChanged.connect(self._changed)
        return combo

    def _duration_spin(self, special: str, tip: str) -> QDoubleSpinBox:
        spin = QDoubleSpinBox()
        spin.setRange(0.0, 36000.0)
        spin.setDecimals(1)
        spin.setSingleStep(0.5)
        spin.setSuffix(" s")
        spin.setSpecialValueText(special)
        spin.setToolTip(tip)
        spin.valueChanged.connect(self._changed)
        return spin

    def filters(self) -> SearchFilters:
        lo, hi = self.min_spin.value(), self.max_spin.value()
        min_rate, max_rate = self.rate_combo.currentData() or (None, None)
        return SearchFilters(min_duration=lo if lo > 0 else None, max_duration=hi if hi > 0 else None,
                             folder=self.folder_combo.currentData() or None,
                             favourites_only=self.favourites_check.isChecked(),
                             formats=tuple(self.format_combo.currentData() or ()) or None,
                             min_sample_rate=min_rate, max_sample_rate=max_rate,
                             channels=self.channels_combo.currentData(), category=self.category)

    @Slot()
    def _changed(self) -> None:
        self.state.set_filters(self.filters())

    def show_folders(self) -> None:
        """The library's folders, keeping the chosen one while it is there (else all folders, not searched
        again: the next search uses it)."""
        current = self.folder_combo.currentData()
        self.folder_combo.blockSignals(True)
        self.folder_combo.clear()
        self.folder_combo.addItem("All folders", "")
        for folder in self.state.folders:
            self.folder_combo.addItem(display_name(folder), folder)
        self.folder_combo.setCurrentIndex(max(self.folder_combo.findData(current), 0))
        self.folder_combo.blockSignals(False)
        self.state.set_filters(self.filters(), search=False)


class IndexingRow(QWidget):
    """The library's name, what indexing is doing (or did), and its Pause / Cancel / Update index buttons."""

    start_clicked = Signal()  # Update index
    finished = Signal(object, bool)  # IndexOutcome (None when cancelled or failed), whether the library changed

    def __init__(self, state: SearchState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.runner: JobRunner | None = None  # the index job on show
        self._progress = ""  # what indexing said last (Pause puts "Paused · " before it)
        row = row_layout(self)
        self.library_label = QLabel("")
        self.library_label.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Preferred)
        row.addWidget(self.library_label)
        row.addSpacing(12)
        self.index_label = QLabel("")
        self.index_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.index_bar = QProgressBar()
        self.index_bar.setMaximumWidth(220)
        self.index_bar.setFormat("%p %")  # at 0 % (names first) an empty bar read as an empty text box
        self.pause_button = QPushButton("Pause")
        self.pause_button.setCheckable(True)
        self.pause_button.clicked.connect(self.toggle_pause)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel)
        self.reindex_button = QPushButton("Update index")
        self.reindex_button.setToolTip("Index new and changed files of the library (only those are read)")
        self.reindex_button.clicked.connect(self.start_clicked)
        row.addWidget(self.index_label, 1)
        for w in (self.index_bar, self.pause_button, self.cancel_button, self.reindex_button):
            row.addWidget(w)
        state.events.library.connect(lambda: self.reindex_button.setEnabled(state.ready))
        self._show_running(False)

    def show_library(self, path: Path, locations: list[str] | None = None) -> None:
        """The library's name (its folder's, or the locations searched together) beside the index progress."""
        if locations:
            self.library_label.setText(f"Libraries: {' + '.join(locations)}")
            self.library_label.setToolTip("Searched together: " + ", ".join(locations))
            return
        self.library_label.setText(f"Library: {display_name(path.name or path)}")
        self.library_label.setToolTip(display_name(path))

    def say(self, text: str) -> None:
        self._progress = text
        self._show_progress_text()

    def _show_progress_text(self) -> None:
        """The last words of indexing, said to be paused while they are: first, where a narrow row keeps it."""
        paused = self.runner is not None and self.runner.is_running() and self.runner.is_paused()
        self.index_label.setText(("Paused · " if paused else "") + self._progress)
        self.index_label.setToolTip(self.index_label.text())  # the row cuts a long summary short

    def running(self) -> bool:
        return self.runner is not None and self.runner.is_running()

    def watch(self, runner: JobRunner) -> None:
        """Show the index job `runner` until it ends; the tab hands its progress to `show_progress` and its
        outcome to `show_outcome` (only while its session is open)."""
        self.runner = runner
        self.say("Indexing: scanning the folder…")
        self.index_bar.setRange(0, 0)  # busy until the scan says how many files
        # a run of a library since closed says nothing over the run that replaced it
        runner.cancelled.connect(lambda: runner is self.runner and self._stopped(
            "Indexing cancelled; what was indexed so far is kept."))
        runner.error.connect(lambda message: runner is self.runner and self._stopped(f"Indexing failed: {message}"))
        runner.finished.connect(lambda: self._ended(runner))
        self._show_running(True)

    @Slot(dict)
    def show_progress(self, p: dict[str, Any]) -> None:
        total = int(p.get("files_total") or p.get("total") or 0)
        if total:
            self.index_bar.setRange(0, total)
            self.index_bar.setValue(int(p.get("files_done", p.get("step", 0))))
        self.say(format_progress(p))

    @Slot(object)
    def show_outcome(self, outcome: IndexOutcome) -> None:
        text, changed = index_summary(outcome)
        self.say(text)
        self.state.set_catalog(outcome.failed, outcome.folders, outcome.categories)
        self.finished.emit(outcome, bool(changed))

    def _stopped(self, message: str) -> None:
        self.say(message)
        self.finished.emit(None, False)

    def _ended(self, runner: JobRunner) -> None:
        if runner is self.runner:
            self.runner = None
            self._show_running(False)

    @Slot()
    def toggle_pause(self) -> None:
        runner = self.runner
        if runner is None or not runner.is_running():
            return
        if runner.is_paused():
            runner.resume()
            self.pause_button.setText("Pause")
            self.pause_button.setChecked(False)
        else:  # progress sent before the pause still arrives: `say` keeps saying it is paused
            runner.pause()
            self.pause_button.setText("Resume")
            self.pause_button.setChecked(True)
        self._show_progress_text()

    @Slot()
    def cancel(self) -> None:
        if self.runner is not None and self.runner.is_running():
            self.runner.cancel()

    def _show_running(self, running: bool) -> None:
        """Progress, Pause and Cancel while indexing runs; Update index (once a library is open) otherwise."""
        self.index_bar.setVisible(running)
        self.pause_button.setVisible(running)
        self.cancel_button.setVisible(running)
        self.pause_button.setChecked(False)
        self.pause_button.setText("Pause")
        self.reindex_button.setVisible(not running)
        self.reindex_button.setEnabled(self.state.ready)
