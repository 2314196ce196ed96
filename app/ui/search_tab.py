"""Search tab: describe a sound, hear the best matches from your library.

Top: Back/Forward over the lists shown (Alt+Left/Alt+Right), the query (search as you type, debounced; `-word`
excludes, `"exact phrase"`, `word*`; "similar to: <name>" after Find similar), Record (search by a recorded
sound), the names <-> sound balance, the filters and the indexing row (`search_controls.py`). Left: the library's
folders (`folder_tree.py`: a click lists a folder's sounds). Middle: the results, each with why it matched, its
tags and favourite star, "Show more", and the files that could not be indexed (`results_table.py`); an empty
query lists the library's sounds, sorted by the column clicked (`app.services.search.browse`). Right: the
selected sound's preview and playback (`search_preview.py`). Tags and favourites: `result_marks.py`.

What the tab shows lives in a Qt-free `SearchState` (`search_state.py`): the widgets draw it and send the user's
actions to it. This module ties it to the search service: every model, index and decode call runs in a job
(`run_job`) through `app.services.search`. Opening a library with a retrieval model available indexes it
incrementally, automatically.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QCoreApplication, QEvent, QObject, QPoint, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QKeySequence, QResizeEvent, QShortcut
from PySide6.QtWidgets import QHBoxLayout, QLineEdit, QMenu, QMessageBox, QToolButton, QVBoxLayout, QWidget

from app.services.devices import DeviceStatus, device_status
from app.services.jobs import Job
from app.services.library.locations import Location
from app.services.library.records import Hit
from app.services.registry import ModelEntry, ModelRegistry
from app.services.search.embedder import RetrievalEmbedder, load_embedder_job
from app.services.search.fusion import NAMES_WEIGHT
from app.services.search.library_set import LibrarySet, each_session, open_set_job
from app.services.search.preview import Preview, preview_job
from app.services.search.search_jobs import (
    IndexOutcome,
    all_tags_job,
    catalog_job,
    index_session_job,
    open_session_job,
    request_job,
)
from app.services.search.session import SearchSession
from app.ui.durations import format_duration
from app.ui.folder_tree import FolderTree
from app.ui.library_tools import LibraryTools
from app.ui.record_query import RecordQuery
from app.ui.remembered_splitter import RememberedSplitter
from app.ui.result_marks import ResultMarks
from app.ui.results_table import ResultsLists
from app.ui.search_controls import BalanceControl, FiltersBar, IndexingRow
from app.ui.search_preview import DEFAULT_WINDOW_S, PreviewPane
from app.ui.search_state import SearchRequest, SearchState
from app.ui.tab_base import ModelTab
from app.workers import JobRunner
from core.display import display_name

DEBOUNCE_MS = 250  # search-as-you-type waits this long after the last key
SIMILAR_PREFIX = "similar to: "  # the query field while it shows a find-similar list
SPLITTER_KEY = "search/splitter_v2"  # QSettings: the widths of the folder tree and of the rest
BODY_KEYS = {Qt.Orientation.Horizontal: "search/body_side_by_side",  # the results' and the preview's sizes, each way
             Qt.Orientation.Vertical: "search/body_stacked"}
SIDE_BY_SIDE_FROM = 1200  # px: a narrower tab puts the preview under the results, which then get every column
CONTROLS_BESIDE_FROM = 900  # px: a narrower tab keeps the preview's controls above its plots, under the results
SIDE_BY_SIDE_SIZES = [560, 340]  # the results' and the preview's widths at first, side by side
STACKED_SIZES = [320, 220]  # the results' and the preview's heights at first, one above the other
FOLDER_TREE_WIDTH = 180  # at first, in a 1100-px window: at 1024 px the results still fit without scrolling


def listed(p: dict[str, Any]) -> bool:
    """Whether indexing progress `p` says every new file has its row in the catalog (the names pass's first step,
    long before the names are embedded or the pass ends)."""
    return p.get("part") == "listing" and p.get("part_done") == p.get("part_total")


class SearchTab(ModelTab):
    kind = "retrieval"
    title = "Search"
    purpose = "Type a description such as “a door creaks open” and hear the best matches from your sound library."
    job_prefix = "search"

    session_ready = Signal()  # a library is open with a model (indexing starts next)
    indexing_finished = Signal(object)  # IndexOutcome, or None when cancelled or failed
    results_shown = Signal(object)  # Results
    preview_shown = Signal(object)  # Preview
    tags_changed = Signal(object)  # {file_id: tags} after an edit was saved
    favourites_changed = Signal(list, bool)  # file ids, marked (True) or unmarked (ResultMarks says)

    def __init__(self, parent: QWidget | None = None) -> None:
        self.state = SearchState()  # before the base class asks for the empty-state message
        super().__init__(parent)
        self.registry: ModelRegistry | None = None
        self.embedder: RetrievalEmbedder | None = None
        self.session: SearchSession | LibrarySet | None = None
        self.locations: list[Location] = []  # the library locations open (several: searched together)
        self._pending_session: Any = None  # the library opened with the next model while it is indexed
        self._pending_runner: JobRunner | None = None  # that index job
        self._draining_index: JobRunner | None = None  # the index run of a session being closed
        self._loaded_device = ""
        self._job_sessions: dict[JobRunner, SearchSession] = {}  # retiring a session cancels (and awaits) these
        self._search_runner: JobRunner | None = None
        self._more_wanted = False  # "Show more" was clicked while a search ran: asked for when it ends
        self.every_window = False  # Preferences: embed every window of a long file (default: spread windows)
        self.tools = LibraryTools(self)  # Find duplicates, Suggest names
        self.index_rate: float | None = None  # x real time of the last indexing run that embedded a minute or more
        self.confirm_switch: Callable[[str], bool] = self._ask_switch  # a seam for tests
        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(DEBOUNCE_MS)
        self._debounce.timeout.connect(self.run_search)
        self._build()
        self.state.events.search.connect(self._search_wanted)
        self.state.events.results.connect(self._results_changed)
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
        self.query_edit.setToolTip("Words in names, folders and tags, and what the sound is like. "
                                   "-word excludes, \"exact phrase\" is required, word* matches any ending.")
        self.query_edit.setClearButtonEnabled(True)
        self.query_edit.setMinimumWidth(120)  # the other controls give way first in a narrow window
        self.query_edit.installEventFilter(self)  # "similar to: <name>" is selected on focus: typing replaces it
        self.query_edit.textChanged.connect(self._query_typed)
        self.query_edit.returnPressed.connect(lambda: self._query_typed(self.query_edit.text(), now=True))
        self.record_query = RecordQuery(self)  # search by a recorded sound
        self.results_shown.connect(self.record_query.results_came)
        self.balance = BalanceControl(self.state)
        for w in (self.model_label, self.model_combo):
            bar.addWidget(w)
        self.back_button = self._history_button(Qt.ArrowType.LeftArrow, "Back to the previous list (Alt+Left)", -1)
        self.forward_button = self._history_button(Qt.ArrowType.RightArrow, "Forward (Alt+Right)", 1)
        bar.addWidget(self.back_button)
        bar.addWidget(self.forward_button)
        bar.addWidget(self.query_edit, 1)
        bar.addWidget(self.record_query)
        bar.addSpacing(8)
        bar.addWidget(self.balance)
        page.addLayout(bar)
        self.filters_bar = FiltersBar(self.state)
        page.addWidget(self.filters_bar)
        self.indexing = IndexingRow(self.state)
        self.indexing.start_clicked.connect(self.start_indexing)
        self.indexing.finished.connect(self._indexing_ended)
        page.addWidget(self.indexing)

        self.lists = ResultsLists(self.state)
        self.lists.more_clicked.connect(self.show_more)
        self.table = self.lists.table
        self.table.itemSelectionChanged.connect(lambda: self._selection_changed(by_user=True))
        self.table.itemDoubleClicked.connect(lambda _: self.preview_pane.play_from_match())
        self.table.customContextMenuRequested.connect(self._context_menu)
        self.marks = ResultMarks(self.state, self.run_on_session, self)
        self.marks.tags_changed.connect(self.tags_changed)
        self.marks.favourites_changed.connect(self.favourites_changed)
        self.marks.message.connect(self.status)
        self.table.star_clicked.connect(self.marks.toggle_star)
        self.preview_pane = pane = PreviewPane(self.state)
        pane.error.connect(self.error)
        pane.message.connect(self.status)
        pane.similar_button.clicked.connect(lambda: self.find_similar())
        pane.tags_button.clicked.connect(lambda: self.marks.edit_tags())
        pane.favourite_button.clicked.connect(self.marks.toggle_selected)
        self.folder_tree = self._build_folder_tree()
        page.addWidget(self._build_panes(pane), 1)
        page.addWidget(self.build_status_label())

        self.play_shortcut = QShortcut(QKeySequence(Qt.Key.Key_Space), self.page)
        self.play_shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self.play_shortcut.activated.connect(pane.toggle_play)
        for key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):  # in the list only: Enter in the query box searches
            enter = QShortcut(QKeySequence(key), self.table)
            enter.setContext(Qt.ShortcutContext.WidgetShortcut)
            enter.activated.connect(pane.toggle_play)
        # Escape stops the sound; with none playing, it drops the selected part (dialogs and open lists close on
        # their own Escape first)
        self.stop_shortcut = QShortcut(QKeySequence(Qt.Key.Key_Escape), self.page)
        self.stop_shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self.stop_shortcut.activated.connect(pane.escape)
        for key, direction in ((Qt.Key.Key_Left, -1), (Qt.Key.Key_Right, 1)):
            shortcut = QShortcut(QKeySequence(Qt.Modifier.ALT | key), self.page)
            shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            shortcut.activated.connect(lambda d=direction: self.go(d))

    def _build_panes(self, pane: PreviewPane) -> RememberedSplitter:
        """The folder tree, then the results and the preview (side by side, or one above the other: fit_layout);
        the user's sizes are remembered, and a larger window gives each pane a share (the results the most)."""
        self.splitter = split = RememberedSplitter(SPLITTER_KEY)
        split.add(self.folder_tree, FOLDER_TREE_WIDTH, 1)
        self.body = body = RememberedSplitter(BODY_KEYS[Qt.Orientation.Horizontal])
        body.add(self.lists, SIDE_BY_SIDE_SIZES[0], 3)
        body.add(pane, SIDE_BY_SIDE_SIZES[1], 2)
        split.add(body, 900, 5)
        split.restore()
        body.restore()
        return split

    def _history_button(self, arrow: Qt.ArrowType, tip: str, direction: int) -> QToolButton:
        button = QToolButton()
        button.setArrowType(arrow)
        button.setAutoRaise(True)
        button.setToolTip(tip)
        button.setEnabled(False)
        button.clicked.connect(lambda: self.go(direction))
        return button

    # ----------------------------------------------------------------------------------- empty states

    def empty_message(self) -> str:
        library = self.state.library
        if library is None:
            where = "No library folder open (File → Open Library Folder…, or drop a folder on the window)."
        else:
            where = f"Library: {display_name(library)}"
        return f"{super().empty_message()}\n\n{where}"

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt API)
        super().resizeEvent(event)
        QTimer.singleShot(0, self.fit_layout)  # once the panes have their new sizes: the split is shared by those

    def fit_layout(self) -> None:
        """The preview gives width first: beside the results in a wide tab, under them in a narrow one (at 1024 px
        side by side, the results lost their score, tags and category columns to a sideways scroll)."""
        side = self.width() >= SIDE_BY_SIDE_FROM
        way = Qt.Orientation.Horizontal if side else Qt.Orientation.Vertical
        self.preview_pane.set_beside(not side and self.width() >= CONTROLS_BESIDE_FROM)  # first: its minimum size
        self.body.turn(way, BODY_KEYS[way], SIDE_BY_SIDE_SIZES if side else STACKED_SIZES)

    def _update_view(self) -> None:
        """No model -> the model empty state; no library -> the library empty state; else the working view."""
        if not self.models:
            self.empty.set_message(self.empty_message())
            self.stack.setCurrentWidget(self.empty)
        elif self.state.library is None:
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
            self._set_embedder(None)
        elif (self.embedder is None or self.embedder.name != chosen
              or self._loaded_device != self.device_preference()):
            self._model_chosen(self.model_combo.currentIndex())

    @Slot(int)
    def _model_chosen(self, index: int) -> None:
        entry = self.model_entry_at(index)
        if entry is None:
            return
        if not self._switch_confirmed(entry):
            self._show_current_model()
            return
        registry = self.registry
        if self.session is not None and self.embedder is not None and entry.name != self.embedder.name \
                and self._loaded_device == self.device_preference():
            self._hand_over(entry)  # the model in use answers until the new one's index is ready
            return
        self._loaded_device = self.device_preference()
        self._retire_session()
        self._set_embedder(None)
        self.status(f"Loading {entry.name}…")
        self._run(None, lambda: load_embedder_job(registry, entry.name if registry else str(entry.path)),
                  f"load-{entry.name}", self._embedder_loaded, lambda p: self.status(str(p.get("message", ""))))

    def _hand_over(self, entry: ModelEntry) -> None:
        """Load `entry`, open the library with it and index what it has not heard, all while the model in use
        keeps answering; then the new one takes over (`_take_over`). Another pick, library or close meanwhile
        drops it (each step checks that the session it started from is still the one open)."""
        registry, current, name = self.registry, self.session, entry.name
        old = self.embedder.name if self.embedder is not None else ""
        self.status(f"Loading {name}; searches use {old} until its index is ready…")

        def loaded(embedder: RetrievalEmbedder) -> None:
            if current is not self.session:
                return
            places, library = list(self.locations), self.state.library
            opener = (lambda: open_set_job(places, embedder)) if len(places) > 1 else \
                (lambda: open_session_job(library, embedder))
            self._run(None, opener, "open-library", lambda pending: self._index_next(current, pending, embedder))

        self._run(current, lambda: load_embedder_job(registry, name if registry else str(entry.path)),
                  f"load-{name}", loaded, lambda p: self.status(str(p.get("message", ""))))

    def _index_next(self, current: Any, pending: Any, embedder: RetrievalEmbedder) -> None:  # noqa: ANN401
        """Index the library for the next model (`pending`, its session) while `current` answers."""
        if current is not self.session:
            pending.close()  # the user moved on meanwhile
            return
        if self.indexing.running():
            self.indexing.runner.cancel()  # the old model's index of new files: the new one reads them all
        windows = {"max_windows": 0} if self.every_window else {}
        self._pending_session = pending

        def done(outcome: IndexOutcome) -> None:
            if current is self.session and self._pending_session is pending:
                self._take_over(pending, embedder, outcome)
            else:
                pending.close()

        runner = self._run(None, lambda: index_session_job(pending, **windows), "index", done,
                           self.indexing.show_progress)
        runner.cancelled.connect(lambda: pending.close() if self._pending_session is pending else None)
        runner.error.connect(lambda _text: pending.close() if self._pending_session is pending else None)
        self._pending_runner = runner
        self.indexing.watch(runner)
        self.status(f"Indexing the library for {embedder.name}; searches use {current.embedder.name} meanwhile.")

    def _take_over(self, pending: Any, embedder: RetrievalEmbedder, outcome: IndexOutcome) -> None:  # noqa: ANN401
        """The next model's index is ready: it answers from now on."""
        self._pending_session = None
        self._retire_session()
        self._loaded_device = self.device_preference()
        self._set_embedder(embedder)
        self.models_loaded.emit()
        self.session = pending
        self.state.set_ready(True)
        self.session_ready.emit()
        self.indexing.show_outcome(outcome)
        self._refresh_catalog(pending)
        self.status(f"Model {embedder.name} ready: its index is complete.")
        self.run_search()

    def _switch_confirmed(self, entry: ModelEntry) -> bool:
        """Another model re-embeds the library's sounds it has not heard: the user says yes first, told how many
        and about how long at the rate measured here (the first switch of a session: once indexing starts)."""
        session, current = self.session, self.embedder
        if session is None or current is None or entry.name == current.name:
            return True
        todo, seconds = session.unheard_by(entry.name)
        if todo == 0:
            return True
        rate = self.index_rate
        took = (f"about {format_duration(seconds / rate, rough=True)} at the {rate:.0f}× real time measured here"
                if rate else "its time left is shown once it starts")
        return self.confirm_switch(
            f"Switch to {entry.name}? It has not heard {todo} of this library's sounds "
            f"({format_duration(seconds, rough=True)} of audio): indexing them takes {took}. Names stay "
            f"searchable meanwhile; searching by sound waits for it.")

    def _ask_switch(self, text: str) -> bool:
        return QMessageBox.question(self, "Switch model", text) == QMessageBox.StandardButton.Yes

    def _show_current_model(self) -> None:
        """The model combo back on the model in use (the switch was declined)."""
        combo, name = self.model_combo, self.embedder.name if self.embedder is not None else None
        found = next((i for i in range(combo.count()) if (e := self.model_entry_at(i)) is not None
                      and e.name == name), -1)
        if found >= 0:
            combo.blockSignals(True)
            combo.setCurrentIndex(found)
            combo.blockSignals(False)

    @Slot(object)
    def _embedder_loaded(self, embedder: RetrievalEmbedder) -> None:
        self._set_embedder(embedder)
        self.models_loaded.emit()
        self.status(f"Model {embedder.name} ready.")
        self._open_session()

    def _set_embedder(self, embedder: RetrievalEmbedder | None) -> None:
        self.embedder = embedder
        self.preview_pane.window_seconds = embedder.window_seconds if embedder is not None else DEFAULT_WINDOW_S

    # ------------------------------------------------------------------------------------------ library

    @Slot(Path)
    def set_library(self, path: Path) -> None:
        self.set_locations([Location(display_name(Path(path).name or path), Path(path))])

    def set_locations(self, locations: list[Location]) -> None:
        """The library locations searched together (one: a library as ever; several: a LibrarySet, each hit
        saying where it is, the tree's top level the locations)."""
        if not locations:
            return
        first = Path(locations[0].path)
        same = [(loc.name, loc.path) for loc in locations] == [(loc.name, loc.path) for loc in self.locations]
        if self.state.library is not None and first == self.state.library and same and self.session is not None:
            return
        self._retire_session()
        self.locations = list(locations) if len(locations) > 1 else [Location(locations[0].name, first)]
        self.table.forget_widths()
        self.state.set_library(first)
        self.indexing.show_library(first, [loc.name for loc in locations] if len(locations) > 1 else None)
        self._update_view()
        self._open_session()

    def _open_session(self) -> None:
        embedder, library, places = self.embedder, self.state.library, list(self.locations)
        if embedder is None or library is None:
            return
        self._retire_session()
        if len(places) > 1:
            self.indexing.say(f"Opening {', '.join(loc.name for loc in places)}…")
            self._run(None, lambda: open_set_job(places, embedder), "open-library", self._session_opened)
            return
        self.indexing.say(f"Opening {display_name(library)}…")
        self._run(None, lambda: open_session_job(library, embedder), "open-library", self._session_opened)

    @Slot(object)
    def _session_opened(self, session: SearchSession | LibrarySet) -> None:
        library = self.state.library
        names = session.names if isinstance(session, LibrarySet) else [loc.name for loc in self.locations[:1]]
        if (library is None or session.root != Path(os.path.abspath(library)) or session.embedder is not self.embedder
                or (len(self.locations) > 1) != isinstance(session, LibrarySet)
                or names != [loc.name for loc in self.locations][:len(names)]):
            session.close()  # the user moved on meanwhile
            return
        self._retire_session()
        self.session = session
        for one in each_session(session):
            if one.library.notice:  # a repaired catalog: what was kept, restored and lost
                self.status(one.library.notice)
        self.state.set_ready(True)
        self.session_ready.emit()
        self._refresh_catalog(session)
        self._run(session, lambda: all_tags_job(session), "tags", self.state.set_known_tags)
        self.start_indexing()
        self.run_search()  # the query's results, or (none typed) the library's sounds

    def _refresh_catalog(self, session: SearchSession) -> None:
        """The failed files and the folders, read from the catalog on a worker thread."""
        self._run(session, lambda: catalog_job(session), "catalog",
                  lambda data: self.state.set_catalog(data[0], data[1], data[3]))  # (failed, folders, indexed,
        # categories)

    def _retire_session(self) -> None:
        """Stop what uses the current session, then close it (once its jobs have ended)."""
        old, self.session = self.session, None
        if self.indexing.running():
            self._draining_index = self.indexing.runner  # cancelled below; the next run waits for it to end
        if self._pending_session is not None and self._pending_runner is not None:
            self._pending_runner.cancel()  # the next model's index: for a library no longer open
        self.state.set_ready(False)
        if old is None:
            return
        self.preview_pane.player.stop()
        busy = [r for r, s in self._job_sessions.items() if s is old and r.is_running()]
        for r in busy:
            r.cancel()
        if not busy:
            old.close()
            return
        left = set(busy)

        def one_done(r: JobRunner) -> None:
            left.discard(r)
            if not left:
                old.close()

        for r in busy:
            r.finished.connect(lambda r=r: one_done(r))

    # ----------------------------------------------------------------------------------------- indexing

    @Slot()
    def start_indexing(self) -> None:
        session, draining = self.session, self._draining_index
        if session is not None and draining is not None and draining.is_running():
            # a closed library's run still holds its index lock: this one starts when it has ended
            draining.finished.connect(self.start_indexing, Qt.ConnectionType.SingleShotConnection)
            return
        if session is None or self.indexing.running():
            return
        windows = {"max_windows": 0} if self.every_window else {}
        self.indexing.watch(self._run(session, lambda: index_session_job(session, **windows), "index",
                                      self.indexing.show_outcome, self._index_progress))

    @Slot(dict)
    def _index_progress(self, p: dict[str, Any]) -> None:
        self.indexing.show_progress(p)
        if (listed(p) or p.get("names_ready")) and self.session is not None:  # the folder tree shows the new files
            self._refresh_catalog(self.session)
        if p.get("names_ready") and self.state.mode == "text":
            self.run_search()  # names are searchable now, before any sound is embedded: what was typed finds them

    def _indexing_ended(self, outcome: IndexOutcome | None, changed: bool) -> None:
        if outcome is not None and outcome.report.audio_seconds > 60 and outcome.report.elapsed_s > 0:
            self.index_rate = outcome.report.audio_seconds / outcome.report.elapsed_s  # x real time, measured here
        if changed and self.state.mode == "text":
            self.run_search()  # new sounds may match, or be listed
        self.indexing_finished.emit(outcome)

    # ----------------------------------------------------------------------------------------- searching

    def _search_wanted(self, now: bool) -> None:
        """The state asks for a search: now (Enter, find similar), or once typing pauses."""
        if now:
            self._debounce.stop()
            self.run_search()
        else:
            self._debounce.start()

    @Slot()
    def run_search(self) -> None:
        """Run the search the state asks for; one search at a time, the latest wins."""
        session = self.session
        if session is None:
            return
        self._more_wanted = False  # a new list: "Show more" was about the last one
        if self._search_runner is not None and self._search_runner.is_running():
            self.state.defer()
            return
        request = self.state.start_search()
        if request is not None:
            self._run_request(session, request)

    def _run_request(self, session: SearchSession, request: SearchRequest) -> None:
        runner = self._run(session, lambda: request_job(session, request), "search",
                           lambda results: self.state.accept(request, results))
        runner.finished.connect(self._search_ended)
        self._search_runner = runner

    def _search_ended(self) -> None:
        if self.state.pending:
            self.run_search()
        elif self._more_wanted:
            self.show_more()

    @Slot()
    def show_more(self) -> None:
        """The next page of the list (browsing), or more results of the search (after the one running)."""
        session = self.session
        self._more_wanted = False
        if session is None:
            return
        if self._search_runner is not None and self._search_runner.is_running():
            self._more_wanted = True
            return
        request = self.state.show_more()
        if request is not None:
            self._run_request(session, request)

    def _results_changed(self) -> None:
        self.lists.show_results(indexing=self.indexing.running())
        self._show_query()
        self._selection_changed()
        if self.state.results is not None:
            self.results_shown.emit(self.state.results)

    def _show_query(self) -> None:
        """The query field says what the list shows: the text searched, or "similar to: <name>" (selected, so
        typing replaces it); Back and Forward are enabled where they lead somewhere."""
        results, edit = self.state.results, self.query_edit
        text = self.state.query
        if results is not None and self.state.shown_kind == "similar":
            text = SIMILAR_PREFIX + results.query
        if edit.text() != text:
            edit.blockSignals(True)
            edit.setText(text)
            edit.blockSignals(False)
            if self.state.shown_kind == "similar":
                edit.setSelection(len(text), -len(text))  # all of it, the start in view: "similar to: …"
        self.back_button.setEnabled(self.state.can_go(-1))
        self.forward_button.setEnabled(self.state.can_go(1))

    def _query_typed(self, text: str, now: bool = False) -> None:
        """The user typed (Enter: `now`); Enter on "similar to: <name>" as shown keeps the similar list."""
        if self.state.shown_kind == "similar" and self.state.mode == "similar" and text.startswith(SIMILAR_PREFIX):
            results = self.state.results
            if results is not None and text == SIMILAR_PREFIX + results.query:
                return
        self.state.set_query(text, now)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt API)
        if (watched is self.query_edit and event.type() == QEvent.Type.KeyPress
                and event.key() == Qt.Key.Key_Down and self.table.rowCount()):
            self.table.setFocus()  # type, then Down: into the results, where the arrows move and Space plays
            self.table.selectRow(max(self.table.currentRow(), 0))
            return True
        if (watched is self.query_edit and event.type() == QEvent.Type.FocusIn
                and self.query_edit.text().startswith(SIMILAR_PREFIX) and self.state.mode == "similar"):
            text = self.query_edit.text()  # selected after the click that gave the focus, the start in view
            QTimer.singleShot(0, lambda: self.query_edit.setSelection(len(text), -len(text)))
        return super().eventFilter(watched, event)

    def go(self, direction: int) -> None:
        """Back (-1) or Forward (+1) in the lists shown: searches, similar lists, browsed folders."""
        if self.session is None or self.state.go(direction) is None:
            return
        self._show_folder(self.state.filters.folder or "")

    def _build_folder_tree(self) -> FolderTree:
        """The folders and categories at the left, following the folder filter."""
        tree = FolderTree(self.state)
        tree.folder_clicked.connect(self.browse_folder)
        tree.category_clicked.connect(self.browse_category)
        self.filters_bar.folder_combo.currentIndexChanged.connect(
            lambda _: tree.select_folder(self.filters_bar.folder_combo.currentData()))
        return tree

    @Slot(str)
    def browse_folder(self, folder: str) -> None:
        """A folder of the tree was clicked: list its sounds ('' = all sounds); typing then searches there."""
        self.filters_bar.category = None
        self._show_folder(folder)
        self._browse()

    @Slot(str)
    def browse_category(self, category: str) -> None:
        """A category of the tree was clicked: list the whole library's sounds heard as it; typing then searches
        among them."""
        self.filters_bar.category = category
        self._show_folder("")
        self.folder_tree.select_category(category)
        self._browse()

    def _browse(self) -> None:
        self.state.set_filters(self.filters_bar.filters(), search=False)
        self.query_edit.blockSignals(True)
        self.query_edit.clear()
        self.query_edit.blockSignals(False)
        self.state.set_query("", now=True)

    def _show_folder(self, folder: str) -> None:
        """The folder filter and the tree show `folder`, without asking for a search."""
        combo = self.filters_bar.folder_combo
        combo.blockSignals(True)
        combo.setCurrentIndex(max(combo.findData(folder), 0))
        combo.blockSignals(False)
        self.folder_tree.select_folder(folder)

    def find_similar(self, hit: Hit | None = None, with_names: bool = False) -> None:
        """Sounds like this one (the sound channel); `with_names` also weighs how alike names and tags are."""
        hit = hit or self.state.selected_hit()
        if hit is None or self.session is None:
            return
        self.state.find_similar(hit.path, NAMES_WEIGHT if with_names else None)

    # ------------------------------------------------------------------------------------------ preview

    @Slot()
    def _selection_changed(self, by_user: bool = False) -> None:
        """The user's selection (a click, the arrow keys) is heard at once with Autoplay on; the selection that
        new results bring (typing, Back, a folder) is only shown: search as you type must not blare."""
        self.state.select(self.table.selected_rows(), self.table.currentRow(), by_user)
        self.preview_pane.audition_next = by_user and self.preview_pane.transport.autoplay  # before the state asks
        request, hit = self.state.preview_selected(), self.state.preview_hit
        if request is not None and hit is not None:
            self._run(None, lambda: preview_job(hit.path, hit.best_window_start_s), "preview",
                      lambda p: self._preview_ready(request, p), on_error=lambda e: self._preview_failed(request, e))

    def _preview_ready(self, request: int, preview: Preview) -> None:
        if self.state.set_preview(request, preview):
            self.preview_shown.emit(preview)

    def _preview_failed(self, request: int, message: str) -> None:
        """A result whose file is gone (or unreadable) said "loading…" for good over the previous sound."""
        if self.state.preview_failed(request, message):
            self.error(message)

    def set_audio_status(self, status: DeviceStatus) -> None:
        """Playback needs an output device, Record an input device."""
        self.preview_pane.set_audio_status(status)
        self.record_query.set_audio_status(status)

    # -------------------------------------------------------------------------------------- context menu

    @Slot(QPoint)
    def _context_menu(self, pos: QPoint) -> None:
        menu = self.context_menu(self.table.rowAt(pos.y()))
        if menu is not None:
            menu.popup(self.table.viewport().mapToGlobal(pos))

    def context_menu(self, row: int) -> QMenu | None:
        """The actions on a right-clicked row (and the rest of the selection, when it is part of it)."""
        hits = self.state.hits
        if not 0 <= row < len(hits):
            return None
        if row not in self.table.selected_rows():
            self.table.selectRow(row)
        hit, chosen = hits[row], self.state.selected_hits()
        several = f" ({len(chosen)} sounds)" if len(chosen) > 1 else ""
        menu = QMenu(self)
        pane = self.preview_pane
        menu.addAction("Play", pane.play_from_match).setEnabled(pane.can_play())
        for label, names in (("Find similar", False), ("Find similar by sound and name", True)):
            action = menu.addAction(label, lambda names=names: self.find_similar(hit, with_names=names))
            action.setEnabled(hit.embedded)  # not heard yet: it has nothing to sound like
        menu.addAction("Find duplicates of this sound…", lambda: self.tools.find_duplicates(hit)).setEnabled(
            hit.embedded)
        menu.addAction("Reveal in folder", pane.reveal_selected)
        menu.addAction("Copy path", pane.copy_selected_path)
        menu.addSeparator()
        menu.addAction(f"Suggest names…{several}", lambda: self.tools.suggest_names(chosen))
        menu.addAction(f"Edit tags…{several}", lambda: self.marks.edit_tags())
        menu.addAction("Write tags into the files…", lambda: self.marks.write_into_files())
        on = all(h.favourite for h in chosen)
        menu.addAction(("Remove from favourites" if on else "Add to favourites") + several,
                       lambda: self.marks.set_favourite(chosen, not on))
        return menu

    # --------------------------------------------------------------------------------------- running jobs

    def _run(self, session: SearchSession | None, factory: Callable[[], Job[Any]], name: str,
             on_result: Callable[[Any], None], on_progress: Callable[[dict], None] | None = None,
             on_error: Callable[[str], None] | None = None) -> JobRunner:
        """`run_job` for work on `session` (None: none): retiring the session cancels the job, drops its answer."""

        def deliver(result: Any) -> None:  # noqa: ANN401
            if session is None or session is self.session:  # answers for a retired session are dropped
                on_result(result)

        runner = self.run_job(factory, name, deliver, on_error=on_error, on_progress=on_progress)
        if session is not None:
            self._job_sessions[runner] = session
        return runner

    def run_on_session(self, job: Callable[[SearchSession], Job[Any]], name: str,
                       on_result: Callable[[Any], None]) -> JobRunner | None:
        """Run `job(session)` on the open library, if one is open."""
        session = self.session
        return self._run(session, lambda: job(session), name, on_result) if session is not None else None

    def job_ended(self, runner: JobRunner) -> None:
        self._job_sessions.pop(runner, None)

    # ------------------------------------------------------------------------------------------ shutdown

    def shutdown(self, timeout_ms: int = 5000) -> None:
        """Stop playback and every job (indexing saves its index on cancel), then close the library."""
        self._debounce.stop()
        self.preview_pane.stop()
        self.stop_jobs(timeout_ms)
        QCoreApplication.processEvents()  # deliver `finished` so sessions retired earlier get closed
        session, self.session = self.session, None
        if session is not None:
            session.close()
