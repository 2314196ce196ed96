"""The Search tab's lists: the ranked results (a table saying why each matched, with its tags and favourite
star; rows drag out as files) and the files that could not be indexed, with their reasons."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

import pyqtgraph as pg
from PySide6.QtCore import QMimeData, Qt, QUrl, Signal, Slot
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.services.audio import display_name
from app.services.library.records import Hit
from app.ui.search_state import SearchState
from app.ui.search_text import (
    STAR_OFF,
    STAR_ON,
    channel_scores,
    field_spans,
    format_duration,
    highlight,
    no_results_message,
    results_header,
    tag_spans,
    why_html,
)
from app.ui.widgets import RichTextDelegate

PATH_ROLE = Qt.ItemDataRole.UserRole

PLAIN_ROLE = Qt.ItemDataRole.UserRole + 1  # a cell's text without markup (rich-text cells show HTML)


class ResultsTable(QTableWidget):
    """Ranked results, each with why it matched; dragging rows out hands the files (as URLs) to the file manager,
    a DAW, ...; a click on a row's star toggles it as a favourite."""

    HEADERS = ("★", "Name", "Folder", "Tags", "Duration", "Names", "Sound")
    STAR, NAME, FOLDER, TAGS, DURATION, NAMES, SOUND = range(7)
    RICH = (NAME, FOLDER, TAGS)
    star_clicked = Signal(int)  # row

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, len(self.HEADERS), parent)
        self.setHorizontalHeaderLabels(list(self.HEADERS))
        self.horizontalHeaderItem(self.STAR).setToolTip("Favourites: click a row's star to mark or unmark it")
        self.horizontalHeaderItem(self.NAMES).setToolTip("How well the name, folder and tags match the query")
        self.horizontalHeaderItem(self.SOUND).setToolTip("How well the audio itself matches the query")
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)  # tag several at once
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setDragEnabled(True)
        self.setDragDropMode(QAbstractItemView.DragDropMode.DragOnly)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.verticalHeader().setVisible(False)
        self.setAlternatingRowColors(True)
        self.setWordWrap(False)
        self._delegate = RichTextDelegate(self)
        for col in self.RICH:
            self.setItemDelegateForColumn(col, self._delegate)
        header = self.horizontalHeader()
        header.setSectionResizeMode(self.NAME, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(self.TAGS, QHeaderView.ResizeMode.Interactive)
        header.resizeSection(self.TAGS, 90)
        for col in (self.STAR, self.FOLDER, self.DURATION, self.NAMES, self.SOUND):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        self.cellClicked.connect(self._cell_clicked)
        self.channels: tuple[str, ...] = ("names", "sound")

    def set_hits(self, hits: list[Hit], channels: Sequence[str] = ("names", "sound")) -> None:
        """Show ranked hits; `channels`: which scores the search computed (the other column shows '–')."""
        self.channels = tuple(channels)
        self.setRowCount(0)
        self.setRowCount(len(hits))
        for row, hit in enumerate(hits):
            self.set_row(row, hit)

    def set_row(self, row: int, hit: Hit) -> None:
        """Fill (or refresh, after tagging) one row from its hit."""
        name = hit.name.rpartition("/")[2]
        folder = display_name(hit.folder)
        tags = ", ".join(hit.user_tags)
        names, sound = channel_scores(hit)
        names = names if "names" in self.channels else None
        sound = sound if "sound" in self.channels else None
        cells = {
            self.STAR: (STAR_ON if hit.favourite else STAR_OFF, None),
            self.NAME: (name, highlight(name, field_spans(hit, "name", name))),
            self.FOLDER: (folder or "·", highlight(folder, field_spans(hit, "folder", folder)) if folder else "·"),
            self.TAGS: (tags, highlight(tags, tag_spans(hit))),
            self.DURATION: (format_duration(hit.duration), None),
            self.NAMES: ("–" if names is None else f"{names:.3f}", None),
            self.SOUND: ("–" if sound is None else f"{sound:.3f}", None),
        }
        why = re.sub("<[^>]+>", "", why_html(hit, self.channels))
        tip = display_name(hit.path) + (f"\n{html.unescape(why)}" if why else "")
        for col, (plain, rich) in cells.items():
            item = QTableWidgetItem(rich if rich is not None else plain)
            item.setData(PATH_ROLE, str(hit.path))
            item.setData(PLAIN_ROLE, plain)
            item.setToolTip(tip if col != self.STAR else "Click to mark or unmark as a favourite")
            if col >= self.DURATION:
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            elif col == self.STAR:
                item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                item.setForeground(pg.mkColor("#e0a800"))
            self.setItem(row, col, item)

    def plain(self, row: int, col: int) -> str:
        item = self.item(row, col)
        return str(item.data(PLAIN_ROLE)) if item is not None else ""

    @Slot(int, int)
    def _cell_clicked(self, row: int, col: int) -> None:
        if col == self.STAR:
            self.star_clicked.emit(row)

    def selected_rows(self) -> list[int]:
        return sorted(i.row() for i in self.selectionModel().selectedRows())

    def mimeTypes(self) -> list[str]:  # noqa: N802 (Qt API)
        return ["text/uri-list", "text/plain"]

    def mimeData(self, items: list[QTableWidgetItem]) -> QMimeData:  # noqa: N802 (Qt API)
        paths = list(dict.fromkeys(str(it.data(PATH_ROLE)) for it in items if it.data(PATH_ROLE)))
        mime = QMimeData()
        mime.setUrls([QUrl.fromLocalFile(p) for p in paths])
        mime.setText("\n".join(paths))
        return mime


class ResultsLists(QTabWidget):
    """"Results" (a header, then the table or a message saying why it is empty) and "Failed files (N)", drawn
    from the state: the results when the tab asks (it picks the row to select), rows and failed files when the
    state says they changed."""

    def __init__(self, state: SearchState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        box = QWidget()
        col = QVBoxLayout(box)
        col.setContentsMargins(0, 4, 0, 0)
        self.results_header = QLabel("")
        self.results_header.setWordWrap(True)
        col.addWidget(self.results_header)
        self.results_stack = QStackedWidget()
        self.table = ResultsTable()
        self.no_results = QLabel("")
        self.no_results.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.no_results.setWordWrap(True)
        self.results_stack.addWidget(self.table)
        self.results_stack.addWidget(self.no_results)
        col.addWidget(self.results_stack, 1)
        self.addTab(box, "Results")
        self.failed_list = QListWidget()
        self.failed_list.setWordWrap(True)
        self.addTab(self.failed_list, "Failed files (0)")
        state.events.hits.connect(self.show_rows)
        state.events.catalog.connect(self.show_failed)

    def show_results(self, indexing: bool) -> None:
        """The state's results, the previewed file (or the best) selected without a selection signal."""
        state, results = self.state, self.state.results
        self.table.blockSignals(True)
        self.table.set_hits(state.hits, state.channels())
        self.results_header.setText(results_header(results, state.shown_ranking))
        if results is None or not results.hits:
            self.no_results.setText(no_results_message(results, indexing, state.filters.favourites_only))
            self.results_stack.setCurrentWidget(self.no_results)
        else:
            self.results_stack.setCurrentWidget(self.table)
            self.table.selectRow(state.row_to_select())
        self.table.blockSignals(False)

    def show_rows(self, rows: list[int]) -> None:
        for row in rows:
            self.table.set_row(row, self.state.hits[row])

    def show_failed(self) -> None:
        failed = self.state.failed
        self.failed_list.clear()
        for f in failed:
            item = QListWidgetItem(f.error or f"{display_name(f.path)}: failed")
            item.setToolTip(display_name(f.path))
            self.failed_list.addItem(item)
        if not failed:
            self.failed_list.addItem("No failed files: every sound in the library could be read.")
        self.setTabText(1, f"Failed files ({len(failed)})")
