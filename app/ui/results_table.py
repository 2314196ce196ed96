"""The Search tab's lists: the ranked results (a table saying why each matched, with its tags and favourite
star; rows drag out as files) and the files that could not be indexed, with their reasons.

Long names stay readable: a Name cell too narrow for its name shows what tells it apart from the names around it
(`DOORWood…Open Fast…01.wav`, `app.ui.elide`), a Folder cell its deepest folders, the tooltip the whole path; every
column can be resized and moved, and the header's layout is remembered (QSettings). The Tags column shows while a
listed sound has tags. A header click sorts (the state decides how); "Show more" asks for the next page."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

import pyqtgraph as pg
from PySide6.QtCore import QMimeData, QModelIndex, QPersistentModelIndex, QSettings, Qt, QUrl, Signal, Slot
from PySide6.QtGui import QPainter, QPaintEvent, QPalette, QResizeEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QSizePolicy,
    QStackedWidget,
    QStyleOptionViewItem,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.services.library.categories import CATEGORY_SHOWN, shown
from app.services.library.records import Hit
from app.services.search.fusion import LOOSE_NAMES
from app.ui.durations import format_duration
from app.ui.elide import elide_folder, elide_name, pieces_html, shared_words
from app.ui.search_state import SCORE_SORTS, SearchRequest, SearchState
from app.ui.search_text import (
    STAR_OFF,
    STAR_ON,
    channel_scores,
    field_spans,
    highlight,
    no_results_message,
    results_header,
    selected_markup,
    sound_format,
    tag_spans,
    why_html,
)
from app.ui.widgets import RichTextDelegate
from core.display import display_name

PATH_ROLE = Qt.ItemDataRole.UserRole

PLAIN_ROLE = Qt.ItemDataRole.UserRole + 1  # a cell's text without markup (rich-text cells show HTML)
SPANS_ROLE = Qt.ItemDataRole.UserRole + 2  # where the query matched the plain text: [(start, end), ...]
SHARED_ROLE = Qt.ItemDataRole.UserRole + 3  # a name's words that its look-alikes in the list share (elided first)
HEADER_KEY = "search/results_header_v5"  # QSettings: column widths and order (v2: Name first; v3: Format;
# v4: Category; v5: Location)
SORT_KEYS = {"Name": "name", "Folder": "folder", "Duration": "duration",  # header -> the state's sort key
             "Names": "names", "Sound": "sound"}
BROWSE_SORTS = (("Name", "name"), ("Folder", "folder"), ("Duration", "duration"), ("Date modified", "modified"))
SEARCH_SORTS = (("Relevance", ""), ("Name", "name"), ("Folder", "folder"), ("Duration", "duration"),  # no date
                ("Names score", "names"), ("Sound score", "sound"))  # a score: only where the list has it


class ElidingDelegate(RichTextDelegate):
    """Rich text elided when the cell is too narrow (`app.ui.elide`), the matched words still highlighted in what
    shows: a file name loses first the words its look-alikes in the list share (SHARED_ROLE), keeping what tells
    it apart; a folder (`names=False`) keeps its deepest part (`…/soundfx/enemies`)."""

    def __init__(self, parent: QWidget | None = None, names: bool = True) -> None:
        super().__init__(parent)
        self.names = names

    def initStyleOption(self, option: QStyleOptionViewItem,  # noqa: N802 (Qt API)
                        index: QModelIndex | QPersistentModelIndex) -> None:
        super().initStyleOption(option, index)
        plain = str(index.data(PLAIN_ROLE) or "")
        width = option.rect.width() - 12  # the cell's and the text document's margins
        measure = option.fontMetrics.horizontalAdvance
        if plain and width > 0 and measure(plain) > width:
            pieces = elide_name(plain, index.data(SHARED_ROLE) or [], measure, width) if self.names \
                else elide_folder(plain, measure, width)
            option.text = pieces_html(plain, pieces, index.data(SPANS_ROLE) or [])


class ElidedLabel(QLabel):
    """One line of plain text, elided in the middle when it is too long (a file name in "sounds like <name>"),
    the whole text in its tooltip; `text()` is the whole text."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)

    def setText(self, text: str) -> None:  # noqa: N802 (Qt API)
        super().setText(text)
        self.setToolTip(text)

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt API)
        rect = self.contentsRect()
        painter = QPainter(self)
        painter.drawText(rect, int(self.alignment()),
                         self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideMiddle, rect.width()))


def sort_choices(browsing: bool, channels: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """The sort box's (label, key) items: the library's sounds listed, or a search's results (with the scores
    this list has)."""
    if browsing:
        return BROWSE_SORTS
    return tuple((label, key) for label, key in SEARCH_SORTS if key not in SCORE_SORTS or key in channels)


def category_cell(hit: Hit) -> str:
    """The Category column: 'Doors 81%' for a sound heard as DOORS with confidence 0.81; '' below CATEGORY_SHOWN."""
    top = shown(hit.categories[:1])
    return f"{top[0][0].title()} {top[0][1]:.0%}" if top else ""


def shown_name(hit: Hit) -> str:
    """The file name the Name column shows (the folder has its own column)."""
    return hit.name.rpartition("/")[2]


def sound_only_match(hit: Hit, channels: Sequence[str]) -> bool:
    """A fused result that no query word and nothing in its name's meaning supports: only the sound channel
    put it there (drawn greyed: on real libraries the sound channel alone is a weak guess)."""
    m = hit.match
    return "names" in channels and "sound" in channels and m is not None and not m.matched_terms \
        and m.name_score <= LOOSE_NAMES and m.found_by not in ("like", "category")  # vouched for: it sounds like a
    # named match, or its sound's category answers the query


def in_location(hit: Hit) -> str:
    """The hit's folder inside its library location (the Location column says which): the pack first."""
    prefix = hit.location + "/" if hit.location else ""
    if hit.location and hit.folder == hit.location:
        return ""
    return hit.folder[len(prefix):] if prefix and hit.folder.startswith(prefix) else hit.folder


class ResultsTable(QTableWidget):
    """Ranked results, each with why it matched; dragging rows out hands the files (as URLs) to the file manager,
    a DAW, ...; a click on a row's star toggles it as a favourite."""

    HEADERS = ("Name", "★", "Duration", "Folder", "Names", "Sound", "Tags", "Format", "Category",  # Tags last on
               "Location")  # screen: hiding the scores
    NAME, STAR, DURATION, FOLDER, NAMES, SOUND, TAGS, FORMAT, CATEGORY, LOCATION = range(10)
    RICH = (NAME, FOLDER, TAGS)  # (browsing) leaves the same column stretched; Format is shown after Duration,
    WIDTHS = {NAME: 250, STAR: 26, DURATION: 62, FORMAT: 96, FOLDER: 160, TAGS: 90, NAMES: 52, SOUND: 52,
              CATEGORY: 104, LOCATION: 110}  # Category after Folder, Location before it
    star_clicked = Signal(int)  # row
    sort_clicked = Signal(str)  # the state's sort key of the clicked column

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, len(self.HEADERS), parent)
        self.setHorizontalHeaderLabels(list(self.HEADERS))
        self.horizontalHeaderItem(self.STAR).setToolTip("Favourites: click a row's star to mark or unmark it")
        self.horizontalHeaderItem(self.FORMAT).setToolTip("The file's sample rate and channels (right-click the "
                                                          "header to show or hide this column)")
        again = "\nClick to sort by it (best first), again the other way, a third time back to relevance order"
        self.horizontalHeaderItem(self.NAMES).setToolTip("How well the name, folder and tags match the query" + again)
        self.horizontalHeaderItem(self.SOUND).setToolTip("How well the audio itself matches the query" + again)
        self.horizontalHeaderItem(self.CATEGORY).setToolTip(
            "What the sound is, heard by the model's category heads (UCS category and confidence; shown from "
            f"{CATEGORY_SHOWN:.0%}). Shown while a listed sound has one")
        for col in (self.NAME, self.DURATION, self.FOLDER):
            self.horizontalHeaderItem(col).setToolTip("Click to sort by it, again the other way; a search's results "
                                                      "come back in relevance order on a third click")
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
        self._name_elide = ElidingDelegate(self)
        self._folder_elide = ElidingDelegate(self, names=False)
        for delegate in (self._delegate, self._name_elide, self._folder_elide):
            delegate.selected_markup = selected_markup
        self.setItemDelegateForColumn(self.TAGS, self._delegate)
        self.setItemDelegateForColumn(self.NAME, self._name_elide)
        self.setItemDelegateForColumn(self.FOLDER, self._folder_elide)
        self.setHorizontalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self._build_header()
        self.cellClicked.connect(self._cell_clicked)
        self.channels: tuple[str, ...] = ("names", "sound")
        self.shared: list[list[tuple[int, int]]] = []  # per row: the words its look-alikes share (elide.shared_words)
        self._hits: list[Hit] = []  # the hits the rows show, in order

    def _build_header(self) -> None:
        """Every column resizable and movable, the last one taking what is left; the user's layout restored."""
        header = self.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        header.setSectionsMovable(True)
        header.setMinimumSectionSize(24)
        header.setHighlightSections(False)
        for col, width in self.WIDTHS.items():
            header.resizeSection(col, width)
        header.moveSection(header.visualIndex(self.FORMAT), header.visualIndex(self.DURATION) + 1)
        header.moveSection(header.visualIndex(self.CATEGORY), header.visualIndex(self.FOLDER) + 1)
        header.moveSection(header.visualIndex(self.LOCATION), header.visualIndex(self.FOLDER))
        header.setSectionHidden(self.CATEGORY, True)  # until a listed sound has a category to show
        header.setSectionHidden(self.LOCATION, True)  # until several library locations are searched together
        header.setSectionHidden(self.FORMAT, True)  # the header's menu shows it: the names need the room first
        header.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        header.customContextMenuRequested.connect(lambda pos: self.header_menu().exec(header.mapToGlobal(pos)))
        saved = QSettings().value(HEADER_KEY)
        self.user_sized = saved is not None and header.restoreState(saved)  # else the names get the room
        self._fitting = False
        self.widest = {self.NAME: 0, self.FOLDER: 0}  # the longest name and folder shown since `forget_widths`
        header.setSortIndicatorShown(False)
        header.sectionResized.connect(self._resized)
        header.sectionMoved.connect(self.save_header)
        header.sectionClicked.connect(self._header_clicked)

    def header_menu(self) -> QMenu:
        """The header's right-click menu: the columns a user may show or hide."""
        menu = QMenu(self)
        action = menu.addAction("Format (sample rate, channels)")
        action.setCheckable(True)
        action.setChecked(not self.isColumnHidden(self.FORMAT))
        action.toggled.connect(self.show_format_column)
        return menu

    @Slot(bool)
    def show_format_column(self, on: bool) -> None:
        self.show_columns((self.FORMAT,), on)
        self.save_header()  # the user's choice, kept with the widths and order

    @Slot()
    def save_header(self) -> None:
        QSettings().setValue(HEADER_KEY, self.horizontalHeader().saveState())

    @Slot(int, int, int)
    def _resized(self, col: int, old: int, new: int) -> None:
        if self._fitting or not old or not new or col == self._last_shown():
            return  # the table's own sizing, a column hidden or shown, the last column following the window
        self.user_sized = True  # the user's width: kept from now on, also next time
        self.save_header()

    def forget_widths(self) -> None:
        """Another library: its names size the columns afresh."""
        self.widest = dict.fromkeys(self.widest, 0)

    def fit_names(self) -> None:
        """Until the user sizes the columns: the Name column as wide as the longest name shown and the Folder
        column as wide as the longest folder, within the room the other columns leave (the last one keeps at least
        60 px, or is the Folder column); when both do not fit, the name gets most of it. Widths only grow between
        searches of a library (the columns do not jump under the pointer with each query), and follow the window's
        size."""
        header, last = self.horizontalHeader(), self._last_shown()
        if self.user_sized or last == self.NAME:
            return
        others = sum(header.sectionSize(c) for c in range(self.columnCount())
                     if c not in (self.NAME, self.FOLDER, last) and not self.isColumnHidden(c))
        room = self.viewport().width() - others - (0 if last == self.FOLDER else 60)
        for c in self.widest:
            self.widest[c] = max(self.widest[c], self._longest(c) + 16)
        name, folder = self.widest[self.NAME], self.widest[self.FOLDER]
        if name + folder > room:
            folder = min(folder, max(90, room // 3))
            # too narrow for every column (the table scrolls sideways): the name takes most of what is in view
            name = max(140, min(name, room - folder)) if room - folder >= 140 else \
                max(140, min(name, self.viewport().width() * 2 // 3))
        self._fitting = True
        header.resizeSection(self.NAME, name)
        if last != self.FOLDER:  # else it stretches into what is left
            header.resizeSection(self.FOLDER, folder)
        self._fitting = False

    def _longest(self, col: int) -> int:
        metrics = self.fontMetrics()
        return max((metrics.horizontalAdvance(self.plain(r, col)) for r in range(self.rowCount())), default=40)

    def _last_shown(self) -> int:
        """The column shown at the right end (the one that stretches)."""
        header = self.horizontalHeader()
        shown = [header.logicalIndex(v) for v in range(header.count())]
        return next((c for c in reversed(shown) if not header.isSectionHidden(c)), self.NAME)

    def show_columns(self, cols: Sequence[int], on: bool) -> None:
        """Show or hide columns (not a user's resize: `_fitting`), then size the names to the room left."""
        self._fitting = True
        for col in cols:
            self.setColumnHidden(col, not on)
        self._fitting = False
        self.fit_names()

    def show_score_columns(self, on: bool) -> None:
        self.show_columns((self.NAMES, self.SOUND), on)

    def show_tags_column(self) -> None:
        """The Tags, Category and Location columns only while a listed sound has some: an empty one took the room
        the names need."""
        for col in (self.TAGS, self.CATEGORY, self.LOCATION):
            some = any(self.plain(r, col) for r in range(self.rowCount()))
            if some == self.isColumnHidden(col):
                self.show_columns((col,), some)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt API)
        super().resizeEvent(event)
        self.fit_names()

    @Slot(int)
    def _header_clicked(self, col: int) -> None:
        key = SORT_KEYS.get(self.HEADERS[col])
        if key is not None:
            self.sort_clicked.emit(key)

    def show_sort(self, key: str, descending: bool) -> None:
        """The header's arrow on the column the list is sorted by (none: relevance)."""
        header = self.horizontalHeader()
        cols = [c for c, h in enumerate(self.HEADERS) if SORT_KEYS.get(h) == key]
        header.setSortIndicatorShown(bool(cols))
        if cols:
            header.setSortIndicator(cols[0], Qt.SortOrder.DescendingOrder if descending
                                    else Qt.SortOrder.AscendingOrder)

    def set_hits(self, hits: list[Hit], channels: Sequence[str] = ("names", "sound")) -> None:
        """Show ranked hits; `channels`: which scores the search computed (the other column shows '–'). The same
        hits with more after them ("Show more" of a list) only add rows: filling every row again took 0.2-0.4 s
        of the window's time at 1,000-2,000 rows."""
        appended = tuple(channels) == self.channels and 0 < len(self._hits) < len(hits) and \
            all(a is b for a, b in zip(self._hits, hits, strict=False))
        self.channels = tuple(channels)
        self.shared = shared_words([shown_name(hit) for hit in hits])
        first = len(self._hits) if appended else 0
        if not appended:
            self.setRowCount(0)
        self.setRowCount(len(hits))
        for row in range(first):  # the look-alikes among the names may have grown
            self.item(row, self.NAME).setData(SHARED_ROLE, self.shared[row])
        for row in range(first, len(hits)):
            self.set_row(row, hits[row])
        self._hits = list(hits)
        self.show_tags_column()
        self.fit_names()

    def set_row(self, row: int, hit: Hit) -> None:
        """Fill (or refresh, after tagging) one row from its hit."""
        name = shown_name(hit)
        folder = display_name(in_location(hit))
        tags = ", ".join(hit.user_tags)
        names, sound = channel_scores(hit)
        names = names if "names" in self.channels else None
        sound = sound if "sound" in self.channels else None
        name_spans, folder_spans = field_spans(hit, "name", name), field_spans(hit, "folder", folder)
        cells = {
            self.STAR: (STAR_ON if hit.favourite else STAR_OFF, None),
            self.NAME: (name, highlight(name, name_spans)),
            self.FOLDER: (folder or "·", highlight(folder, folder_spans) if folder else "·"),
            self.TAGS: (tags, highlight(tags, tag_spans(hit))),
            self.DURATION: (format_duration(hit.duration), None),
            self.FORMAT: (sound_format(hit.sample_rate, hit.channels), None),
            self.NAMES: ("–" if names is None else f"{names:.3f}", None),
            self.SOUND: ("–" if sound is None else f"{sound:.3f}", None),
            self.CATEGORY: (category_cell(hit), None),
            self.LOCATION: (display_name(hit.location), None),
        }
        why = re.sub("<[^>]+>", "", why_html(hit, self.channels))
        weak = sound_only_match(hit, self.channels)
        tip = display_name(hit.rel_path or hit.path) + (f"\n{html.unescape(why)}" if why else "") + \
            ("\nFound by its sound alone: its name and tags say nothing of the query" if weak else "")
        for col, (plain, rich) in cells.items():
            item = QTableWidgetItem(rich if rich is not None else plain)
            item.setData(PATH_ROLE, str(hit.path))
            item.setData(PLAIN_ROLE, plain)
            if col in (self.NAME, self.FOLDER):
                item.setData(SPANS_ROLE, name_spans if col == self.NAME else folder_spans)
            if col == self.NAME and row < len(self.shared):
                item.setData(SHARED_ROLE, self.shared[row])
            item.setToolTip(tip if col != self.STAR else "Click to mark or unmark as a favourite")
            if col in (self.DURATION, self.NAMES, self.SOUND):
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            elif col == self.STAR:
                item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                item.setForeground(pg.mkColor("#e0a800"))
            if weak and col != self.STAR:  # where the real matches end: the rest is the weak sound channel's guess
                item.setForeground(self.palette().color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text))
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
    """"Results" (a header, then the table or a message saying why it is empty, and "Show more") and "Failed
    files (N)", drawn from the state: the results when the tab asks (it picks the row to select), rows and failed
    files when the state says they changed."""

    more_clicked = Signal()

    def __init__(self, state: SearchState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self._listed: SearchRequest | None = None  # the request of the list shown (a new one scrolls to the top)
        box = QWidget()
        col = QVBoxLayout(box)
        col.setContentsMargins(0, 4, 0, 0)
        top = QHBoxLayout()
        self.results_header = ElidedLabel("")
        top.addWidget(self.results_header, 1)
        self.sort_combo = QComboBox()  # the date modified has no column to click; a search may be sorted too
        self.sort_combo.activated.connect(self._sort_chosen)
        self._fill_sorts(BROWSE_SORTS)
        top.addWidget(self.sort_combo)
        col.addLayout(top)
        self.results_stack = QStackedWidget()
        self.table = ResultsTable()
        self.table.sort_clicked.connect(state.sort_by)
        self.no_results = QLabel("")
        self.no_results.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.no_results.setWordWrap(True)
        self.results_stack.addWidget(self.table)
        self.results_stack.addWidget(self.no_results)
        col.addWidget(self.results_stack, 1)
        self.more_button = QPushButton("Show more")
        self.more_button.setToolTip("List the next sounds")
        self.more_button.clicked.connect(self.more_clicked)
        col.addWidget(self.more_button)
        self.addTab(box, "Results")
        self.failed_list = QListWidget()
        self.failed_list.setWordWrap(True)
        self.addTab(self.failed_list, "Failed files (0)")
        state.events.hits.connect(self.show_rows)
        state.events.catalog.connect(self.show_failed)

    def show_results(self, indexing: bool) -> None:
        """The state's results, the previewed file (or the best) selected without a selection signal."""
        state, results = self.state, self.state.results
        table = self.table
        shown = [table.item(r, ResultsTable.NAME).data(PATH_ROLE) for r in range(table.rowCount())]
        more = bool(shown) and [str(h.path) for h in state.hits[:len(shown)]] == shown  # "Show more": stay
        request, listed = state.shown_request, self._listed
        same_list = request is not None and listed is not None and request.shows_the_same(listed)
        self._listed = request
        scrolled = table.verticalScrollBar().value()
        self.table.blockSignals(True)
        self.table.set_hits(state.hits, state.channels())
        self.results_header.setText(results_header(results, state.shown_ranking, state.filters.folder,
                                                   state.filters.favourites_only, state.filters.category))
        browsing = results is not None and results.mode == "browse"
        self._fill_sorts(sort_choices(browsing, state.channels()))
        self.sort_combo.setVisible(results is not None)
        self.table.show_score_columns(not browsing)  # a listed sound has no scores
        sort = state.sort or ("name" if browsing else "")
        self.sort_combo.setCurrentIndex(max(self.sort_combo.findData(sort), 0))
        self.table.show_sort(sort, state.descending)
        self.more_button.setVisible(state.can_show_more())
        if results is None or not results.hits:
            self.no_results.setText(no_results_message(results, indexing, state.filters.favourites_only,
                                                       state.filters))
            self.results_stack.setCurrentWidget(self.no_results)
        else:
            self.results_stack.setCurrentWidget(self.table)
            self.table.selectRow(state.row_to_select())  # the user's pick stays selected, maybe out of view
            if more or same_list:  # more rows, or the same search again (new sounds indexed): stay where the eye is
                table.verticalScrollBar().setValue(scrolled)
            else:  # a new search opens at its best results
                table.scrollToTop()
        self.table.blockSignals(False)

    def _fill_sorts(self, sorts: tuple[tuple[str, str], ...]) -> None:
        """The sort box's orders: the library's sounds by name, folder, length or date; a search's results in
        relevance order (their default) or by what a column shows."""
        if [self.sort_combo.itemData(i) for i in range(self.sort_combo.count())] == [key for _, key in sorts]:
            return
        self.sort_combo.clear()
        for label, key in sorts:
            self.sort_combo.addItem(f"by {label.lower()}", key)
        self.sort_combo.setToolTip("How the library's sounds are listed (or click a column's header)"
                                   if sorts == BROWSE_SORTS else "How the results are listed: by relevance (the "
                                   "search's own order) or by a column (or click a column's header)")

    @Slot(int)
    def _sort_chosen(self, index: int) -> None:
        self.state.choose_sort(self.sort_combo.itemData(index))  # the order shown again: unchanged

    def show_rows(self, rows: list[int]) -> None:
        for row in rows:
            self.table.set_row(row, self.state.hits[row])
        self.table.show_tags_column()  # the first tag given, or the last taken away

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
