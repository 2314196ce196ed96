"""The Words tab's collection pane, drawn from a `WordsState`: the words (spoken ones with a small waveform),
Remove and Clear, and the selected word's nearest neighbours. Delete / Backspace removes, a double-click plays."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QColor, QIcon, QKeyEvent, QPainter, QPixmap
from PySide6.QtWidgets import QHBoxLayout, QLabel, QListWidget, QListWidgetItem, QPushButton, QVBoxLayout, QWidget

from app.services.words.word_space import SAMPLE_RATE, WordItem
from app.ui.widgets import envelope
from app.ui.word_views import SPOKEN_COLOUR, WRITTEN_COLOUR, short
from app.ui.words_state import WordsState


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


def list_entry(item: WordItem) -> QListWidgetItem:
    """A spoken word with its waveform and length; a written one quoted, with its phonemes."""
    if item.kind == "spoken":
        entry = QListWidgetItem(waveform_icon(item.audio) if item.audio is not None else QIcon(),
                                f"{item.label}  ·  {item.duration:.2f} s")
    else:
        entry = QListWidgetItem(f"“{item.label}”  /{' '.join(item.phonemes)}/")
        entry.setForeground(QColor(WRITTEN_COLOUR).darker(130))
    entry.setToolTip(item.source)
    return entry


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


class CollectionPane(QWidget):
    play_requested = Signal()  # a double-click on a word

    def __init__(self, state: WordsState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        col = QVBoxLayout(self)
        col.setContentsMargins(0, 0, 0, 0)
        heading = QLabel("Words")
        heading.setToolTip("Delete removes the selected word; double-click plays a spoken word")
        col.addWidget(heading)
        self.items_list = QListWidget()
        self.items_list.currentRowChanged.connect(state.select)
        self.items_list.itemDoubleClicked.connect(lambda _: self.play_requested.emit())
        self.items_list.installEventFilter(_DeleteKeyFilter(state.remove_selected, self))
        col.addWidget(self.items_list, 3)
        row = QHBoxLayout()
        self.remove_button = QPushButton("Remove")
        self.remove_button.clicked.connect(state.remove_selected)
        self.clear_button = QPushButton("Clear")
        self.clear_button.clicked.connect(state.clear)
        row.addWidget(self.remove_button)
        row.addWidget(self.clear_button)
        col.addLayout(row)
        self.nearest_label = QLabel("Nearest neighbours")
        col.addWidget(self.nearest_label)
        self.nearest_list = QListWidget()
        col.addWidget(self.nearest_list, 2)
        state.events.items.connect(self.draw_items)
        state.events.selection.connect(self.draw_nearest)
        state.events.devices.connect(self.draw_devices)

    def draw_items(self) -> None:
        self.items_list.blockSignals(True)
        self.items_list.clear()
        for item in self.state.words.items:
            self.items_list.addItem(list_entry(item))
        self.items_list.setCurrentRow(self.state.row)
        self.items_list.blockSignals(False)
        self.draw_nearest()

    def draw_nearest(self) -> None:
        self.nearest_list.clear()
        item = self.state.selected()
        self.nearest_label.setText("Nearest neighbours" if item is None else f"Nearest to “{short(item.label, 24)}”")
        self.nearest_list.addItems(self.state.nearest_lines())

    def draw_devices(self) -> None:
        status = self.state.audio
        self.items_list.setToolTip("Double-click a spoken word to play it" if status.output_ok
                                   else status.playback_unavailable())
