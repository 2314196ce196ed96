"""Search tab: describe a sound, hear the best matches from your library.

Top: the query (search as you type, debounced; `-word` excludes, `"exact phrase"`, `word*`), the names <-> sound
balance (a slider from names only to sound only, the tuned default marked), filters (duration, folder, format,
sample rate, channels, favourites only) and the indexing bar (files, audio seconds, time left, Pause/Cancel).
Left: results, each with why it matched (the query's words highlighted in its name, folder and tags; its names
and sound scores), its tags and a favourite star (click to toggle); select several to tag them at once (Tags…,
autocompleted from the library's tags); drag rows out as files; right-click for actions. A second list holds
the files that could not be indexed, with reasons. Right: the selected sound's waveform (click to seek),
per-window similarity for long files, spectrogram, and Play (space bar) / Find similar / Reveal / Copy path.

Every model, index and decode call runs in a `JobRunner` through `app.services.search`; this module only
draws. Opening a library with a retrieval model available indexes it incrementally, automatically.
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QMimeData, QPoint, QSettings, Qt, QTimer, QUrl, Signal, Slot
from PySide6.QtGui import QDesktopServices, QGuiApplication, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QCompleter,
    QDialog,
    QDialogButtonBox,
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
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.services.audio import DeviceStatus, Player, device_status, display_name
from app.services.jobs import Job
from app.services.library.records import FailedFile, Hit, SearchFilters
from app.services.registry import ModelEntry, ModelRegistry
from app.services.search.embedder import RetrievalEmbedder, load_embedder_job
from app.services.search.fusion import NAMES_WEIGHT
from app.services.search.jobs import (
    IndexOutcome,
    Results,
    catalog_job,
    index_session_job,
    open_session_job,
    search_job,
    similar_job,
    summarize,
)
from app.services.search.preview import Preview, preview_job
from app.services.search.session import SearchSession
from app.ui.record_query import RecordQuery
from app.ui.tab_base import ModelTab
from app.ui.widgets import MarkedSlider, RichTextDelegate, SpectrogramView, WaveformPlot, envelope

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


# ------------------------------------------------------------------------------ names <-> sound, why it matched

BALANCE_STEPS = 100  # slider position = the sound channel's share in percent: 0 = names only, 100 = sound only
HIGHLIGHT_STYLE = "background-color:#ffe38a; color:#1a1a1a;"
STAR_ON, STAR_OFF = "★", "☆"
FORMATS = (("Any format", ()), ("WAV", ("wav", "wave")), ("FLAC", ("flac",)), ("Ogg", ("ogg", "oga")),
           ("Opus", ("opus",)), ("MP3", ("mp3",)), ("AIFF", ("aif", "aiff", "aifc")))
SAMPLE_RATES = (("Any rate", (None, None)), ("≥ 44.1 kHz", (44100, None)), ("≥ 48 kHz", (48000, None)),
                ("≥ 96 kHz", (96000, None)), ("≤ 22.05 kHz", (None, 22050)), ("≤ 16 kHz", (None, 16000)))
CHANNELS = (("Any channels", None), ("Mono", 1), ("Stereo", 2))




def balance(position: int, default_position: int | None = None) -> tuple[str, float | None]:
    """Slider position -> (mode, names_weight) for the search service; None = the service's tuned default."""
    if position <= 0:
        return "names", None
    if position >= BALANCE_STEPS:
        return "sound", None
    if position == default_position:
        return "both", None
    return "both", round(1.0 - position / BALANCE_STEPS, 2)


def balance_position(names_weight: float) -> int:
    return round((1.0 - names_weight) * BALANCE_STEPS)


def balance_text(position: int) -> str:
    if position <= 0:
        return "names only"
    if position >= BALANCE_STEPS:
        return "sound only"
    return f"names {BALANCE_STEPS - position} % · sound {position} %"


def _word_start(text: str, i: int) -> bool:
    """A word starts at i: after a non-alphanumeric, at a camelCase hump, or where letters and digits meet."""
    if i == 0 or not text[i - 1].isalnum():
        return True
    before, here = text[i - 1], text[i]
    return (before.islower() and here.isupper()) or (before.isdigit() != here.isdigit())


def term_spans(text: str, terms: Iterable[str]) -> list[tuple[int, int]]:
    """(start, end) of every occurrence of a term at a word start, case-insensitive; a term also marks longer
    words it begins ('creak' in 'DoorCreaking'), as the keyword channel's prefixes and stems match them."""
    low, spans = text.lower(), []
    for term in {t.lower().strip() for t in terms if t and t.strip()}:
        for m in re.finditer(re.escape(term), low):
            if _word_start(text, m.start()):
                spans.append((m.start(), m.end()))
    return spans


def highlight(text: str, spans: Iterable[tuple[int, int]]) -> str:
    """`text` as rich text with the spans marked; everything else escaped (names may hold '<' or '&')."""
    merged: list[list[int]] = []
    for a, b in sorted((max(0, int(a)), min(len(text), int(b))) for a, b in spans):
        if a >= b:
            continue
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    out, pos = [], 0
    for a, b in merged:
        out.append(html.escape(text[pos:a]))
        out.append(f'<span style="{HIGHLIGHT_STYLE}">{html.escape(text[a:b])}</span>')
        pos = b
    out.append(html.escape(text[pos:]))
    return "".join(out)


def matched_terms(hit: Hit) -> list[str]:
    return list(hit.match.matched_terms) if hit.match is not None else []


def field_spans(hit: Hit, field: str, shown: str) -> list[tuple[int, int]]:
    """Where the query matched `shown`, the text the list shows for the hit's `field` (name, folder, tags,
    user_tags): the service's spans, shifted when `shown` holds the field's text at another place (a file name
    in a path), else the matched terms found in `shown` (e.g. a field the service gave no spans for)."""
    m = hit.match
    source, given = (m.fields.get(field), m.spans.get(field)) if m is not None else (None, None)
    if source and given:
        offset = 0 if source == shown else shown.rfind(source)
        if offset >= 0:
            return [(a + offset, b + offset) for a, b in given]
        tail = len(source) - len(shown)  # `shown` is the end of the source (a file name of a path)
        if tail > 0 and source.endswith(shown):
            return [(a - tail, b - tail) for a, b in given if a >= tail]
    return term_spans(shown, matched_terms(hit))


def channel_scores(hit: Hit) -> tuple[float | None, float | None]:
    """(names score, sound score) of a hit; None where that channel did not score it ("find similar")."""
    if hit.match is None:
        return None, hit.score
    return hit.match.name_score, hit.match.sound_score


def hit_tags(hit: Hit) -> list[str]:
    return list(hit.user_tags)


def hit_favourite(hit: Hit) -> bool:
    return bool(hit.favourite)


def why_html(hit: Hit, channels: Sequence[str] = ("names", "sound")) -> str:
    """One line saying why a result matched: the matched words and where, and the score of each channel that
    scored it (`channels`)."""
    names, sound = channel_scores(hit)
    names = names if "names" in channels else None
    sound = sound if "sound" in channels else None
    terms = matched_terms(hit)
    fields = hit.match.fields if hit.match is not None else {}
    where = [label for field, label in (("name", "name"), ("folder", "folder"), ("tags", "embedded tags"),
                                        ("user_tags", "tags"))
             if fields.get(field) and field_spans(hit, field, fields[field])]
    parts = []
    if terms:
        words = ", ".join(f'<span style="{HIGHLIGHT_STYLE}">{html.escape(t)}</span>' for t in terms)
        parts.append(f"matched {words}" + (f" in its {' and '.join(where)}" if where else ""))
    elif names:  # no word in common, but the sentence encoder finds the name close in meaning
        parts.append("no word matched; its name means something close")
    elif sound is not None:
        parts.append("matched by its sound")
    if names is not None:
        parts.append(f"names {names:.2f}")
    if sound is not None:
        parts.append(f"sound {sound:.2f}")
    return "Why: " + " · ".join(parts) if parts else ""


# ------------------------------------------------------------------------------------- tags and favourites


def tags_job(session: SearchSession, file_ids: Sequence[int], add: Sequence[str], remove: Sequence[str]
             ) -> Job[tuple[dict[int, list[str]], list[str]]]:
    """Add and remove user tags on several files; returns each file's tags now and the library's tag list."""
    yield {"message": f"tagging {len(file_ids)} sounds"}
    if add:
        session.add_tags(list(file_ids), list(add))
    if remove:
        session.remove_tags(list(file_ids), list(remove))
    return {i: list(session.tags_of(i)) for i in file_ids}, list(session.all_tags())


def favourite_job(session: SearchSession, file_ids: Sequence[int], on: bool) -> Job[tuple[list[int], bool]]:
    yield {"message": ("marking" if on else "unmarking") + f" {len(file_ids)} favourites"}
    session.set_favourite(list(file_ids), on)
    return list(file_ids), on


def all_tags_job(session: SearchSession) -> Job[list[str]]:
    yield {"message": "reading the library's tags"}
    return list(session.all_tags())


def split_tags(text: str) -> list[str]:
    """'rain, Window ,, night' -> ['rain', 'Window', 'night']: comma-separated, trimmed, no empties or repeats."""
    return list(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))


class TagDialog(QDialog):
    """Edit the user tags of one or several sounds at once.

    Each tag on any of them is listed: checked = on all, half-checked = on some (left as it is unless clicked),
    unchecked = removed from all. New tags (comma-separated, autocompleted from the library's tags) go on all.
    """

    def __init__(self, tags_per_file: Sequence[Sequence[str]], known: Sequence[str],
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        n = len(tags_per_file)
        self.setWindowTitle("Tags of 1 sound" if n == 1 else f"Tags of {n} sounds")
        self.on_all = set.intersection(*(set(t) for t in tags_per_file)) if n else set()
        self.on_some = set().union(*(set(t) for t in tags_per_file)) - self.on_all
        col = QVBoxLayout(self)
        hint = QLabel("Checked: on every selected sound · half-checked: on some of them · unchecked: removed."
                      if n > 1 else "Uncheck a tag to remove it.")
        hint.setWordWrap(True)
        col.addWidget(hint)
        self.list = QListWidget()
        for tag in sorted(self.on_all | self.on_some, key=str.lower):
            self._add_item(tag, Qt.CheckState.Checked if tag in self.on_all else Qt.CheckState.PartiallyChecked)
        col.addWidget(self.list, 1)
        row = QHBoxLayout()
        self.new_edit = QLineEdit()
        self.new_edit.setPlaceholderText("Add tags, separated by commas")
        completer = QCompleter(sorted(known, key=str.lower), self)
        completer.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        completer.setFilterMode(Qt.MatchFlag.MatchContains)
        self.new_edit.setCompleter(completer)
        self.new_edit.returnPressed.connect(self.add_typed)
        add = QPushButton("Add")
        add.setAutoDefault(False)
        add.clicked.connect(self.add_typed)
        row.addWidget(self.new_edit, 1)
        row.addWidget(add)
        col.addLayout(row)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self._accept)
        buttons.rejected.connect(self.reject)
        for b in buttons.buttons():
            b.setAutoDefault(False)  # Enter in the tag field adds the tag; it does not close the dialog
        col.addWidget(buttons)
        self.resize(360, 320)

    def _add_item(self, tag: str, state: Qt.CheckState) -> None:
        item = QListWidgetItem(tag)
        flags = item.flags() | Qt.ItemFlag.ItemIsUserCheckable
        if state == Qt.CheckState.PartiallyChecked:
            flags |= Qt.ItemFlag.ItemIsUserTristate
        item.setFlags(flags)
        item.setCheckState(state)
        self.list.addItem(item)

    def _items(self) -> dict[str, QListWidgetItem]:
        return {self.list.item(i).text(): self.list.item(i) for i in range(self.list.count())}

    @Slot()
    def add_typed(self) -> None:
        items = self._items()
        lower = {t.lower(): t for t in items}
        for tag in split_tags(self.new_edit.text()):
            existing = items.get(lower.get(tag.lower(), ""))
            if existing is not None:
                existing.setCheckState(Qt.CheckState.Checked)
            else:
                self._add_item(tag, Qt.CheckState.Checked)
        self.new_edit.clear()

    @Slot()
    def _accept(self) -> None:
        self.add_typed()  # typed but not yet added: the user meant it
        self.accept()

    def changes(self) -> tuple[list[str], list[str]]:
        """(tags to add to all, tags to remove from all)."""
        add, remove = [], []
        for tag, item in self._items().items():
            state = item.checkState()
            if state == Qt.CheckState.Checked and tag not in self.on_all:
                add.append(tag)
            elif state == Qt.CheckState.Unchecked and (tag in self.on_all or tag in self.on_some):
                remove.append(tag)
        return add, remove


# ------------------------------------------------------------------------------------------- widgets


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
        tags = ", ".join(hit_tags(hit))
        names, sound = channel_scores(hit)
        names = names if "names" in self.channels else None
        sound = sound if "sound" in self.channels else None
        cells = {
            self.STAR: (STAR_ON if hit_favourite(hit) else STAR_OFF, None),
            self.NAME: (name, highlight(name, field_spans(hit, "name", name))),
            self.FOLDER: (folder or "·", highlight(folder, field_spans(hit, "folder", folder)) if folder else "·"),
            self.TAGS: (tags, highlight(tags, field_spans(hit, "user_tags", tags))),
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
    tags_changed = Signal(object)  # {file_id: tags} after an edit was saved
    favourites_changed = Signal(list, bool)  # file ids, marked (True) or unmarked

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
        self._shown_mode = "both"  # the search mode of the results shown (which scores they have)
        self.similar_to: Path | None = None
        self.similar_names_weight: float | None = None  # None: find similar by sound alone
        self.results: Results | None = None
        self.hits: list[Hit] = []
        self.preview: Preview | None = None
        self.preview_hit: Hit | None = None
        self.start_s = 0.0  # where Play starts (click-to-seek sets it)
        self.failed: list[FailedFile] = []
        self.known_tags: list[str] = []  # the library's user tags: the tag editor's completions
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
        self.query_edit.setToolTip("Words in names, folders and tags, and what the sound is like. "
                                   "-word excludes, \"exact phrase\", word* matches any ending.")
        self.query_edit.setClearButtonEnabled(True)
        self.query_edit.textChanged.connect(self._query_changed)
        self.query_edit.returnPressed.connect(self._search_now)
        bar.addWidget(self.model_label)
        bar.addWidget(self.model_combo)
        bar.addWidget(self.query_edit, 1)
        self.record_query = RecordQuery(self)  # search by a recorded sound
        bar.addWidget(self.record_query)
        bar.addSpacing(8)
        self._build_balance(bar)
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
        filters.addSpacing(12)
        self.format_combo = self._choice_combo(FORMATS, "Only files of this format")
        self.rate_combo = self._choice_combo(SAMPLE_RATES, "Only files recorded at this sample rate")
        self.channels_combo = self._choice_combo(CHANNELS, "Only mono or only stereo files")
        for combo in (self.format_combo, self.rate_combo, self.channels_combo):
            filters.addWidget(combo)
        filters.addSpacing(12)
        self.favourites_check = QCheckBox(f"{STAR_ON} Favourites only")
        self.favourites_check.setToolTip("Only the sounds you marked as favourites")
        self.favourites_check.toggled.connect(self._filters_changed)
        filters.addWidget(self.favourites_check)
        filters.addStretch(1)
        page.addLayout(filters)

        index_row = QHBoxLayout()
        self.library_label = QLabel("")
        self.library_label.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Preferred)
        index_row.addWidget(self.library_label)
        index_row.addSpacing(12)
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
        split.setSizes([560, 540])
        page.addWidget(split, 1)

        page.addWidget(self.build_status_label())

        self.play_shortcut = QShortcut(QKeySequence(Qt.Key.Key_Space), self.page)
        self.play_shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self.play_shortcut.activated.connect(self.toggle_play)
        self._set_indexing_controls(running=False)
        self._set_preview_actions()

    def _build_balance(self, bar: QHBoxLayout) -> None:
        """Names <-> sound: buttons for either channel alone, a slider for the mix between, the tuned default
        marked (double-click the slider to return to it); the position is kept between sessions."""
        default = balance_position(NAMES_WEIGHT)
        self.names_button = QToolButton()
        self.names_button.setText("Names")
        self.names_button.setToolTip("Search by names, folders and tags only")
        self.names_button.setAutoRaise(True)
        self.sound_button = QToolButton()
        self.sound_button.setText("Sound")
        self.sound_button.setToolTip("Search by what the audio sounds like only")
        self.sound_button.setAutoRaise(True)
        self.balance_slider = MarkedSlider(default)
        self.balance_slider.setRange(0, BALANCE_STEPS)
        self.balance_slider.setPageStep(10)
        self.balance_slider.setFixedWidth(130)
        saved = QSettings().value("search/balance", default)
        try:
            self.balance_slider.setValue(min(max(int(saved), 0), BALANCE_STEPS))
        except (TypeError, ValueError):  # a damaged settings file: the default, not a crash
            self.balance_slider.setValue(default)
        self.names_button.clicked.connect(lambda: self.balance_slider.setValue(0))
        self.sound_button.clicked.connect(lambda: self.balance_slider.setValue(BALANCE_STEPS))
        self.balance_slider.valueChanged.connect(self._balance_changed)
        for w in (self.names_button, self.balance_slider, self.sound_button):
            bar.addWidget(w)
        self._show_balance()

    def _show_balance(self) -> None:
        position, default = self.balance_slider.value(), self.balance_slider.marked
        self.balance_slider.setToolTip(
            f"Rank by {balance_text(position)}" + (" (the tuned default)" if position == default else "")
            + f".\nThe mark is the default ({balance_text(default)}); double-click to return to it.")
        for button, active in ((self.names_button, position == 0), (self.sound_button, position == BALANCE_STEPS)):
            font = button.font()
            font.setBold(active)
            button.setFont(font)

    @Slot(int)
    def _balance_changed(self, position: int) -> None:
        QSettings().setValue("search/balance", position)
        self._show_balance()
        if self.mode == "text":
            self._debounce.start()

    def search_options(self) -> tuple[str, float | None]:
        """(mode, names_weight) the slider asks for."""
        return balance(self.balance_slider.value(), self.balance_slider.marked)

    def _choice_combo(self, choices: Sequence[tuple[str, Any]], tip: str) -> QComboBox:
        combo = QComboBox()
        for label, value in choices:
            combo.addItem(label, value)
        combo.setToolTip(tip)
        combo.currentIndexChanged.connect(self._filters_changed)
        return combo

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
        self.table.star_clicked.connect(self._star_clicked)
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
        self.why_label = QLabel("")
        self.why_label.setTextFormat(Qt.TextFormat.RichText)
        self.why_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        col.addWidget(self.why_label)
        row = QHBoxLayout()
        self.play_button = QPushButton("Play")
        self.play_button.clicked.connect(self.toggle_play)
        self.similar_button = QPushButton("Find similar")
        self.similar_button.setToolTip("Sounds in the library that sound like this one")
        self.similar_button.clicked.connect(lambda: self.find_similar())
        self.reveal_button = QPushButton("Reveal in folder")
        self.reveal_button.setToolTip("Open the folder holding this file in the file manager")
        self.reveal_button.clicked.connect(self.reveal_selected)
        self.copy_button = QPushButton("Copy path")
        self.copy_button.clicked.connect(self.copy_selected_path)
        self.tags_button = QPushButton("Tags…")
        self.tags_button.setToolTip("Add or remove tags on the selected sounds (select several to tag them at once)")
        self.tags_button.clicked.connect(lambda: self.edit_tags())
        self.favourite_button = QPushButton(f"{STAR_OFF} Favourite")
        self.favourite_button.setCheckable(True)
        self.favourite_button.setToolTip("Mark or unmark the selected sounds as favourites")
        self.favourite_button.clicked.connect(self._favourite_clicked)
        for w in (self.play_button, self.similar_button, self.reveal_button, self.copy_button, self.tags_button,
                  self.favourite_button):
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
        self._run(lambda: all_tags_job(session), self._tags_read, "tags", session=session)
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
        min_rate, max_rate = self.rate_combo.currentData() or (None, None)
        return SearchFilters(min_duration=lo if lo > 0 else None, max_duration=hi if hi > 0 else None,
                             folder=self.folder_combo.currentData() or None,
                             favourites_only=self.favourites_check.isChecked(),
                             formats=tuple(self.format_combo.currentData() or ()) or None,
                             min_sample_rate=min_rate, max_sample_rate=max_rate,
                             channels=self.channels_combo.currentData())

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
            target, weight = self.similar_to, self.similar_names_weight
            mode = "both" if weight else "sound"

            def factory() -> Job[Results]:
                return similar_job(session, target, k, filters, names_weight=weight)
        else:
            text = self.query_edit.text().strip()
            if not text:
                self._show_results(None)
                return
            mode, names_weight = self.search_options()

            def factory() -> Job[Results]:
                return search_job(session, text, k, filters, mode=mode, names_weight=names_weight)

        runner = self._run(factory, lambda r: self._results_ready(request, mode, r), "search", session=session)
        runner.finished.connect(self._search_finished)
        self._search_runner = runner

    @Slot()
    def _search_finished(self) -> None:
        if self._search_pending:
            self.run_search()

    def _results_ready(self, request: int, mode: str, results: Results) -> None:
        if request == self._request and not self._search_pending:
            self._shown_mode = mode
            self._show_results(results)

    def _show_results(self, results: Results | None) -> None:
        self.results = results
        self.hits = results.hits if results else []
        selected = self.preview_hit.path if self.preview_hit else None
        self.table.blockSignals(True)
        self.table.set_hits(self.hits, self._channels(results))
        self.table.blockSignals(False)
        if results is None:
            self.results_header.setText("Type a description to search the library.")
            self.no_results.setText("Type what you want to hear, e.g. “rain on a window” or “a dog barks”.")
            self.results_stack.setCurrentWidget(self.no_results)
        elif not results.hits:
            if results.indexed == 0:
                msg = "No sounds are indexed yet" + (" — indexing is running." if self._indexing() else ".")
            elif results.filtered:
                msg = (f"No sounds match “{results.query}” with these filters. Loosen the duration, folder, "
                       "format, sample rate or channels filter" + (", or show all sounds, not only favourites."
                                                                    if self.favourites_check.isChecked() else "."))
            else:
                msg = f"No sounds match “{results.query}”."
            self.results_header.setText("No results")
            self.no_results.setText(msg)
            self.results_stack.setCurrentWidget(self.no_results)
        else:
            what = f"“{results.query}”" if results.mode == "text" else f"sounds like {results.query}"
            if results.mode == "similar" and self._shown_mode == "both":
                what += " by sound and name"
            self.results_header.setText(f"{len(results.hits)} results for {what}"
                                        + (" (filtered)" if results.filtered else ""))
            self.results_stack.setCurrentWidget(self.table)
            paths = [h.path for h in self.hits]
            self.table.selectRow(paths.index(selected) if selected in paths else 0)
        self._selection_changed()
        if results is not None:
            self.results_shown.emit(results)

    def _channels(self, results: Results | None) -> tuple[str, ...]:
        """The channels that scored these results: find similar and sound-only have no names score."""
        mode = self._shown_mode
        if results is None or (results.mode == "similar" and mode == "sound"):
            return ("sound",)
        return {"names": ("names",), "sound": ("sound",)}.get(mode, ("names", "sound"))

    def _indexing(self) -> bool:
        return self.index_runner is not None and self.index_runner.is_running()

    def selected_hit(self) -> Hit | None:
        """The result the preview shows: the current row when it is selected, else the first selected."""
        rows = self.table.selected_rows()
        row = self.table.currentRow() if self.table.currentRow() in rows else (rows[0] if rows else -1)
        return self.hits[row] if 0 <= row < len(self.hits) else None

    def selected_hits(self) -> list[Hit]:
        return [self.hits[r] for r in self.table.selected_rows() if r < len(self.hits)]

    @Slot()
    def find_similar(self, hit: Hit | None = None, with_names: bool = False) -> None:
        """Sounds like this one (the sound channel); `with_names` also weighs how alike names and tags are."""
        hit = hit or self.selected_hit()
        if hit is None or self.session is None:
            return
        self.mode, self.similar_to = "similar", hit.path
        self.similar_names_weight = NAMES_WEIGHT if with_names else None
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
            self.why_label.setText("")
            self._set_preview_actions()
            return
        self.why_label.setText(why_html(hit, self.table.channels))
        if self.preview_hit is not None and hit.path == self.preview_hit.path and self.preview is not None:
            self.preview_hit = hit  # same file, new scores (another query)
            self._draw_matches(hit)
            self._set_preview_actions()
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
        chosen = self.selected_hits()
        for w in (self.tags_button, self.favourite_button):
            w.setEnabled(bool(chosen) and self.session is not None)
        on = bool(chosen) and all(hit_favourite(h) for h in chosen)
        self.favourite_button.setChecked(on)
        self.favourite_button.setText(f"{STAR_ON if on else STAR_OFF} Favourite")
        n = len(chosen)
        self.tags_button.setText("Tags…" if n <= 1 else f"Tags of {n}…")
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
        menu = self.context_menu(self.table.rowAt(pos.y()))
        if menu is not None:
            menu.popup(self.table.viewport().mapToGlobal(pos))

    def context_menu(self, row: int) -> QMenu | None:
        """The actions on a right-clicked row (and the rest of the selection, when it is part of it)."""
        if not 0 <= row < len(self.hits):
            return None
        if row not in self.table.selected_rows():
            self.table.selectRow(row)
        hit, chosen = self.hits[row], self.selected_hits()
        several = f" ({len(chosen)} sounds)" if len(chosen) > 1 else ""
        menu = QMenu(self)
        menu.addAction("Play", self.play_from_match).setEnabled(self.audio.output_ok and self.preview is not None)
        menu.addAction("Find similar", lambda: self.find_similar(hit))
        menu.addAction("Find similar by sound and name", lambda: self.find_similar(hit, with_names=True))
        menu.addAction("Reveal in folder", self.reveal_selected)
        menu.addAction("Copy path", self.copy_selected_path)
        menu.addSeparator()
        menu.addAction(f"Edit tags…{several}", lambda: self.edit_tags())
        on = all(hit_favourite(h) for h in chosen)
        menu.addAction(("Remove from favourites" if on else "Add to favourites") + several,
                       lambda: self.set_favourite(chosen, not on))
        return menu

    # ---------------------------------------------------------------------------------- tags, favourites

    def edit_tags(self, dialog: TagDialog | None = None) -> None:
        """Open the tag editor for the selected results; on OK the changes run as a job, then the rows update.
        (Tests pass a prepared dialog to skip the modal loop.)"""
        chosen, session = self.selected_hits(), self.session
        if not chosen or session is None:
            return
        dialog = dialog or TagDialog([hit_tags(h) for h in chosen], self.known_tags, self)
        if dialog.result() != QDialog.DialogCode.Accepted and dialog.exec() != QDialog.DialogCode.Accepted:
            return
        add, remove = dialog.changes()
        if not add and not remove:
            return
        ids = [h.file_id for h in chosen]
        self._run(lambda: tags_job(session, ids, add, remove), self._tags_changed, "tags", session=session)

    def _tags_changed(self, data: tuple[dict[int, list[str]], list[str]]) -> None:
        per_file, known = data
        self.known_tags = known
        for row, hit in enumerate(self.hits):
            if hit.file_id in per_file:
                hit.user_tags = per_file[hit.file_id]
                self.table.set_row(row, hit)
        self._set_preview_actions()
        self.status(f"Tags saved on {len(per_file)} sound{'s' if len(per_file) != 1 else ''}.")
        self.tags_changed.emit(per_file)

    @Slot(int)
    def _star_clicked(self, row: int) -> None:
        if 0 <= row < len(self.hits):
            self.set_favourite([self.hits[row]], not hit_favourite(self.hits[row]))

    @Slot()
    def _favourite_clicked(self) -> None:
        chosen = self.selected_hits()
        self.set_favourite(chosen, not all(hit_favourite(h) for h in chosen))

    def set_favourite(self, hits: list[Hit], on: bool) -> None:
        session = self.session
        if not hits or session is None:
            return
        ids = [h.file_id for h in hits]
        self._run(lambda: favourite_job(session, ids, on), self._favourites_changed, "favourite", session=session)

    def _favourites_changed(self, data: tuple[list[int], bool]) -> None:
        ids, on = set(data[0]), data[1]
        for row, hit in enumerate(self.hits):
            if hit.file_id in ids:
                hit.favourite = on
                self.table.set_row(row, hit)
        self._set_preview_actions()
        self.favourites_changed.emit(sorted(ids), on)
        if not on and self.favourites_check.isChecked():
            self.run_search()  # those no longer pass the favourites filter

    def _tags_read(self, known: list[str]) -> None:
        self.known_tags = known

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
