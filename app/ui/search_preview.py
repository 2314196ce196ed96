"""The Search tab's preview of the selected result: its title and why it matched, the transport (Play, Loop,
Autoplay, volume: `search_transport.py`), the actions on it (Find similar, Tags…, Favourite, Reveal in folder, Copy
path), its waveform (click to play from there; drag across it to select a part) with the play head and the
best-matching window, the similarity of each window of a long file, and its spectrogram (`preview_views.py`).

`PreviewPane` draws the `SearchState`'s previewed result and plays it (the space bar, from the best-matching part
of a long file, or the selected part alone; by itself when the user selects it and Autoplay is on; faster, slower
or backwards as the transport says, the samples from `preview_audition.py`), exports the
selected part (asked in `export_dialog.py`: name, folder, format, fades) or hands it to a drag
(app/services/search/excerpt.py), reveals the file in the file manager and copies its path; the other buttons are
the tab's to connect.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QMimeData, QSettings, Qt, QTimer, QUrl, Signal, Slot
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import (
    QBoxLayout,
    QCheckBox,
    QDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.services.devices import DeviceStatus, Player
from app.services.library.embedding import window_starts
from app.services.library.records import Hit
from app.services.search.audition import Audition
from app.services.search.excerpt import MIN_EXCERPT_S, drag_folder, export_formats, export_part, write_excerpt
from app.services.search.preview import Preview
from app.ui.durations import format_duration, part_text
from app.ui.export_dialog import ExportDialog, default_export_folder, part_file_stem
from app.ui.preview_audition import AuditionSamples
from app.ui.preview_views import DragHandle, PreviewSpectrogram, PreviewWaveform
from app.ui.search_state import SearchState
from app.ui.search_text import STAR_OFF, STAR_ON, sound_format, why_html
from app.ui.search_transport import AUTOPLAY_TIP, TransportBar
from app.workers import JobRunner, describe_error
from core.audio import AudioError, audio_info
from core.display import display_name
from core.files import cache_root

MATCH_COLOUR = "#e8964c"
EXPORT_FOLDER_KEY = "search/export_folder"  # QSettings: where the last selection was exported (offered next time)
MAX_DRAG_BYTES = 40_000_000  # a dragged part is written while the mouse waits (~0.1 s): larger ones go through
# Export, in a worker (a minute of 48 kHz stereo is 23 MB in 32-bit samples; of 192 kHz 6-channel, 276 MB)
SELECT_HINT = "Drag on it to select a part"  # the label under the waveform: short, the pane is narrow
SELECT_TIP = ("Drag across the waveform to select a part: Play plays it alone, Export selection… saves it, "
              "⠿ Drag carries it into another program; the wheel zooms")
PLAYHEAD_MS = 33  # ~30 Hz play head
DEFAULT_WINDOW_S = 10.0  # the window length drawn when no model says otherwise
CONTROLS_BESIDE_W = 440  # px: the controls' column beside the plots (its widest row of buttons fits)
QWIDGETSIZE_MAX = (1 << 24) - 1  # Qt's "no maximum"


class PreviewPane(QWidget):
    """The selected result, drawn from the state, and its playback."""

    error = Signal(str)  # playback problems, for the tab's status line
    message = Signal(str)  # what an action did, for the tab's status line

    def __init__(self, state: SearchState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.audio = DeviceStatus(False, False, "audio devices not checked yet")
        self.player = Player()
        self.open_url: Callable[[QUrl], Any] = QDesktopServices.openUrl  # a seam for tests
        self.ask_export: Callable[[ExportDialog], bool] = lambda dialog: (
            dialog.exec() == QDialog.DialogCode.Accepted)  # a seam for tests: they fill the dialog and press Save
        self.start_s = 0.0  # where Play starts (click-to-seek sets it)
        # what plays: how (varispeed, Reverse) and the file's times it spans (the selection's, or the preview's)
        self._playing: tuple[Audition, float, float] = (Audition(), 0.0, 0.0)
        self.audition = AuditionSamples(self)  # the samples to play as the transport says
        self.audition.ready.connect(self._audition_ready)
        self.audition.failed.connect(self._audition_failed)
        self._wanted_s: float | None = None  # Play waits for its samples (a long sound at another speed): from here
        self._exports: list[JobRunner] = []
        self.audition_next = False  # the user selected a result with Autoplay on: play its audio when it comes
        self.window_seconds = DEFAULT_WINDOW_S  # the model's window: the steps of the per-window similarity
        self._drawn: Preview | None = None  # the preview whose audio the plots show
        self._dragging = False  # a drag across the waveform is selecting: playback moves to the part when it ends
        self._play_timer = QTimer(self)
        self._play_timer.setInterval(PLAYHEAD_MS)
        self._play_timer.timeout.connect(self._tick_playhead)
        self._build()
        state.events.preview.connect(self.draw)
        state.events.hits.connect(lambda _rows: self.update_actions())
        state.events.library.connect(self.update_actions)
        self.update_actions()

    def _build(self) -> None:
        # the controls, then the plots: one above the other beside the results, side by side under them
        self.arrangement = QBoxLayout(QBoxLayout.Direction.TopToBottom, self)
        self.arrangement.setContentsMargins(0, 0, 0, 0)
        self.controls, self.views = QWidget(), QWidget()
        col, views = QVBoxLayout(self.controls), QVBoxLayout(self.views)
        col.setContentsMargins(0, 0, 0, 0)
        views.setContentsMargins(0, 0, 0, 0)
        self.arrangement.addWidget(self.controls, 0)
        self.arrangement.addWidget(self.views, 1)
        self._build_titles(col)
        self.transport = TransportBar()
        self.play_button = self.transport.play_button
        self.play_button.clicked.connect(self.toggle_play)
        self.transport.volume_changed.connect(self._volume_changed)
        self.transport.loop_changed.connect(self._loop_changed)
        self.transport.audition_changed.connect(self._audition_changed)
        col.addWidget(self.transport)
        self._build_buttons(col)
        part = self._build_waveform()
        self._build_window_plot()
        self.spectrogram = PreviewSpectrogram()
        self.spectrogram.setXLink(self.waveform)
        col.addStretch(1)  # side by side with the plots: the controls at the top
        views.addWidget(self.waveform, 2)
        views.addLayout(part)
        views.addWidget(self.window_plot, 1)
        views.addWidget(self.spectrogram, 3)
        for plot in (self.waveform, self.spectrogram):
            plot.setMinimumHeight(60)

    def set_beside(self, beside: bool) -> None:
        """The controls beside the plots (the pane under the results, wide and low) or above them (the pane
        beside the results, narrow and tall)."""
        self.arrangement.setDirection(QBoxLayout.Direction.LeftToRight if beside
                                      else QBoxLayout.Direction.TopToBottom)
        self.controls.setMaximumWidth(CONTROLS_BESIDE_W if beside else QWIDGETSIZE_MAX)

    def _build_titles(self, col: QVBoxLayout) -> None:
        """The file's name and why it matched."""
        self.preview_title = QLabel("Select a result to see and hear it.")
        self.preview_title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.preview_title.setWordWrap(True)  # a long file name wraps at its '_' and '-' (see `breakable`)
        col.addWidget(self.preview_title)
        self.why_label = QLabel("")
        self.why_label.setTextFormat(Qt.TextFormat.RichText)
        self.why_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.why_label.setWordWrap(True)  # one line cut the channels' scores off at the right edge
        col.addWidget(self.why_label)

    def _build_buttons(self, col: QVBoxLayout) -> None:
        """Find similar, tags, favourite; below them the length box, reveal and copy."""
        row = QHBoxLayout()
        self.similar_button = QPushButton("Find similar")
        self.similar_button.setToolTip("Sounds in the library that sound like this one")
        self.similar_length_box = QCheckBox("Similar length")
        self.similar_length_box.setChecked(not self.state.similar_any_length)
        self.similar_length_box.setToolTip(
            "Find similar: only sounds from a quarter to four times as long as this one, so that music and "
            "ambiences do not crowd out the one-shots like a one-shot (untick for any length)")
        self.similar_length_box.toggled.connect(lambda on: self.state.set_similar_any_length(not on))
        self.similar_folder_box = QCheckBox("Only this folder")
        self.similar_folder_box.setChecked(self.state.similar_in_folder)
        self.similar_folder_box.setToolTip(
            "Find similar: only in the folder browsed (the folder filter); unticked, the whole library, where a "
            "copy of the sound under another name may be")
        self.similar_folder_box.toggled.connect(self.state.set_similar_in_folder)
        self.reveal_button = QPushButton("Reveal in folder")
        self.reveal_button.setToolTip("Open the folder holding this file in the file manager")
        self.reveal_button.clicked.connect(self.reveal_selected)
        self.copy_button = QPushButton("Copy path")
        self.copy_button.clicked.connect(self.copy_selected_path)
        self.tags_button = QPushButton("Tags…")
        self.tags_button.setToolTip("Add or remove tags on the selected sounds (select several to tag them at once)")
        self.favourite_button = QPushButton(f"{STAR_OFF} Favourite")
        self.favourite_button.setCheckable(True)
        self.favourite_button.setToolTip("Mark or unmark the selected sounds as favourites")
        for w in (self.similar_button, self.tags_button, self.favourite_button):
            row.addWidget(w)
        row.addStretch(1)
        col.addLayout(row)
        files = QHBoxLayout()  # a second row: the pane stays narrow enough to leave the names their width
        for w in (self.similar_length_box, self.similar_folder_box, self.reveal_button, self.copy_button):
            files.addWidget(w)
        files.addStretch(1)
        col.addLayout(files)

    def _build_waveform(self) -> QHBoxLayout:
        """The waveform with its selected part, and the row that says and exports the part (returned)."""
        self.waveform = PreviewWaveform()
        self.waveform.clicked.connect(self.seek_to)
        self.waveform.setToolTip("Click to play from there; drag across it to select a part; the wheel zooms, "
                                 "a double-click inside the selected part zooms to it, elsewhere shows the whole sound")
        viewbox = self.waveform.getPlotItem().getViewBox()
        viewbox.dragged.connect(self.select_part)
        self.waveform.selection_changed.connect(self._selection_changed)
        part = QHBoxLayout()
        self.selection_label = QLabel(SELECT_HINT)
        self.selection_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.selection_label.setToolTip(SELECT_TIP)
        self.export_button = QPushButton("Export selection…")
        self.export_button.setToolTip("Save the selected part as a file of its own: its name, folder, format (WAV, "
                                      "FLAC, the source's own) and fades (the file's own samples and channels)")
        self.export_button.clicked.connect(self.export_selection)
        self.drag_handle = DragHandle(self.drag_mime)
        part.addWidget(self.selection_label, 1)
        part.addWidget(self.export_button)
        part.addWidget(self.drag_handle)
        return part

    def _build_window_plot(self) -> None:
        """A long file's per-window match to the query, under the waveform and linked to it."""
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

    # ------------------------------------------------------------------------------------------ drawing

    @Slot()
    def draw(self) -> None:
        """The state's previewed result: none, loading (the last sound stays drawn meanwhile), or its audio."""
        hit, preview = self.state.preview_hit, self.state.preview
        if hit is None or self.state.preview_error:  # nothing, or a sound that cannot be shown: no other's drawn
            self.player.stop()
            self._drop_wanted()
            self._drawn = None
            self.waveform.clear_preview()
            self.spectrogram.clear_preview()
            self.window_plot.setVisible(False)
            self.preview_title.setText("Select a result to see and hear it." if hit is None else
                                       f"{breakable(display_name(hit.path.name))} · cannot be previewed: "
                                       f"{self.state.preview_error.removeprefix(display_name(hit.path) + ': ')}")
            self.why_label.setText("" if hit is None else why_html(hit, self.state.channels()))
        else:
            self.why_label.setText(why_html(hit, self.state.channels()))
            if preview is None:
                if not self.audition_next:  # else the sound plays on until the next one replaces it
                    self.player.stop()
                self.preview_title.setText(f"{breakable(display_name(hit.path.name))} · loading…")
            else:
                new = preview is not self._drawn  # else the same file again (a new search): only its scores changed
                if new:
                    self._draw_audio(hit, preview)
                self._draw_matches(hit)
                if new and self.audition_next:
                    self.audition_next = False
                    if self.audio.output_ok:  # no device is a normal state: Play's tooltip says why, not each click
                        self.play_from(self.start_s)
        self.update_actions()

    def _draw_audio(self, hit: Hit, preview: Preview) -> None:
        self._drawn = preview
        self._drop_wanted()  # a long sound's samples being made: not to be played over this one
        excerpt = (f" · showing {format_duration(preview.offset_s)}–{format_duration(preview.end_s)}"
                   if preview.offset_s > 0 or preview.end_s < preview.duration_s - 1e-3 else "")
        name = breakable(display_name(hit.path.name))  # the folder: in the list and the tooltip
        length = format_duration(preview.duration_s)
        form = sound_format(hit.sample_rate or preview.sample_rate, hit.channels)
        self.preview_title.setText(f"{name} · {length} · {form}{excerpt}")
        self.preview_title.setToolTip(display_name(hit.path))
        self.waveform.set_preview(preview)
        self.spectrogram.set_preview(preview)

    def _draw_matches(self, hit: Hit) -> None:
        """Per-window similarity along the waveform (long files) and the best window; Play starts there."""
        scores = np.asarray(hit.window_scores, dtype=np.float32)
        step = self.window_seconds
        long_file = len(scores) > 1
        self.window_plot.setVisible(long_file)
        if long_file:
            starts = window_starts(hit.duration, step, len(scores))  # a long file's windows may be spread out
            edges = np.minimum(np.append(starts, starts[-1] + step), max(hit.duration, float(starts[-1])))
            self.window_curve.setData(edges, scores)
            lo, hi = float(scores.min()), float(scores.max())
            self.window_plot.setYRange(lo - 0.05, hi + 0.05, padding=0)
            start = hit.best_window_start_s
            self.waveform.best.setRegion((start, min(start + step, max(hit.duration, start))))
        self.waveform.best.setVisible(long_file)
        self.start_s = hit.best_window_start_s if long_file else 0.0
        self._show_playhead(self.start_s)

    def update_actions(self) -> None:
        state = self.state
        has_hit = state.preview_hit is not None
        for w in (self.similar_button, self.reveal_button, self.copy_button):
            w.setEnabled(has_hit)
        heard = has_hit and state.preview_hit.embedded
        self.similar_button.setEnabled(heard and state.ready)
        self.similar_button.setToolTip("Sounds in the library that sound like this one" if heard or not has_hit
                                       else "Find similar: this sound's audio is not indexed yet (indexing goes on "
                                       "in the background)")
        part = self.selected_part()
        self.export_button.setEnabled(part is not None)
        self.drag_handle.setEnabled(has_hit and state.preview is not None)
        self.drag_handle.setToolTip("Drag the selected part into another program (a DAW, a folder)" if part
                                    else "Drag this sound into another program (a DAW, a folder)")
        chosen = state.selected_hits()
        for w in (self.tags_button, self.favourite_button):
            w.setEnabled(bool(chosen) and state.ready)
        on = bool(chosen) and all(h.favourite for h in chosen)
        self.favourite_button.setChecked(on)
        self.favourite_button.setText(f"{STAR_ON if on else STAR_OFF} Favourite")
        n = len(chosen)
        self.tags_button.setText("Tags…" if n <= 1 else f"Tags of {n}…")
        self.play_button.setEnabled(self.can_play())
        self.play_button.setToolTip(
            "Play / stop (Space or Enter; Escape stops, then clears a selected part); long files play from their "
            "best-matching part"
            if self.audio.output_ok else self.audio.playback_unavailable())
        autoplay = self.transport.autoplay_button  # greyed without a device (its setting is kept for when one is back)
        autoplay.setEnabled(self.audio.output_ok)
        autoplay.setToolTip(AUTOPLAY_TIP if self.audio.output_ok
                            else f"Autoplay needs an audio output device: {self.audio.output_message()}")

    # ------------------------------------------------------------------------------------------ playback

    def set_audio_status(self, status: DeviceStatus) -> None:
        """Playback needs an output device; without one the Play button says why it is disabled."""
        self.audio = status
        self.update_actions()

    def can_play(self) -> bool:
        return self.state.preview is not None and self.audio.output_ok

    @Slot()
    def toggle_play(self) -> None:
        if self.player.playing or self._wanted_s is not None:
            self.stop_playback()
        else:
            self.play_from(self.start_s)

    @Slot()
    def play_from_match(self) -> None:
        if self.state.preview_hit is not None:
            self.play_from(self.start_s)

    def play_from(self, seconds: float, exact: bool = False) -> None:
        """Play from the file's time `seconds`: the selected part alone (from where the user clicked inside it) or
        the whole preview, as the transport says (varispeed, Reverse). Backwards, Play starts where the sound heard
        backwards starts (the part's or the sound's end; a long file's best window's end) unless `exact` (a click,
        a change while playing). A long sound at another speed plays once a worker has made its samples."""
        p = self.state.preview
        if p is None:
            return
        if not self.audio.output_ok:
            self.error.emit(self.audio.playback_unavailable())
            return
        audio, base, end = p.audio, p.offset_s, p.end_s
        part = self.selected_part()
        if part is not None:  # the part alone (Loop loops it), from where the user clicked inside it
            base, end = part
            audio = p.audio[round((base - p.offset_s) * p.sample_rate):round((end - p.offset_s) * p.sample_rate)]
            seconds = seconds if base <= seconds < end else base
            end = base + len(audio) / p.sample_rate
        how = self.transport.audition
        if how.reverse and not exact:
            seconds = self._reversed_start(seconds, base, end)
        samples = self.audition.get(p, audio, base, end, how)
        self._wanted_s = None if samples is not None else seconds
        if samples is None:  # being made (a long sound): `_audition_ready` plays it
            self.play_button.setText("Stop")
            self.message.emit(f"Making the sound to play ({how.describe()})…")
            return
        self._playing = (how, base, end)
        self.player.volume, self.player.loop = self.transport.volume, self.transport.loop
        try:
            self.player.play(samples, p.sample_rate, start_seconds=how.position(seconds, base, end))
        except Exception as e:  # the device vanished: a message (already in the user's words), not a crash
            self.error.emit(f"Cannot play: {e}")
            return
        if self.player.notice:
            self.message.emit(self.player.notice)
        self.play_button.setText("Stop")
        self._play_timer.start()

    def _reversed_start(self, seconds: float, base: float, end: float) -> float:
        """Where Play starts backwards from Play's start `seconds`: the end of what plays when that is its start
        (the part's, the sound's), the best window's end when it is that window's start, else `seconds`."""
        if seconds <= base + 1e-9:
            return end
        if self.waveform.best.isVisible():
            lo, hi = self.waveform.best.getRegion()
            if abs(seconds - lo) < 1e-9:
                return min(hi, end)
        return seconds

    def heard_now(self) -> float:
        """The file's time being heard (the play head)."""
        how, base, end = self._playing
        return how.file_time(self.player.position, base, end)

    @Slot()
    def _audition_changed(self) -> None:
        """Varispeed or Reverse moved: the sound playing goes on from the moment heard, as it now says."""
        if self.player.playing:
            self.play_from(self.heard_now(), exact=True)

    @Slot()
    def _audition_ready(self) -> None:
        if self._wanted_s is not None:
            self.play_from(self._wanted_s, exact=True)  # as the transport says now (it may have moved meanwhile)

    @Slot(str)
    def _audition_failed(self, text: str) -> None:
        self._drop_wanted()
        self.error.emit(f"Cannot play: {text}")

    def _drop_wanted(self) -> None:
        """No Play waits for its samples any more."""
        if self._wanted_s is not None:
            self._wanted_s = None
            if not self.player.playing:
                self.play_button.setText("Play")

    @Slot(float)
    def _volume_changed(self, volume: float) -> None:
        self.player.volume = volume  # live: the sound playing gets louder or softer

    @Slot(bool)
    def _loop_changed(self, on: bool) -> None:
        self.player.loop = on

    @Slot()
    def stop_playback(self) -> None:
        self._wanted_s = None
        self.player.stop()
        self._play_timer.stop()
        self.play_button.setText("Play")
        self._show_playhead(self.start_s)

    @Slot()
    def escape(self) -> None:
        """Escape: stop the sound; when none plays, drop the selected part (the whole sound again)."""
        if self.player.playing:
            self.stop_playback()
        else:
            self.waveform.clear_selection()

    @Slot(float)
    def seek_to(self, seconds: float) -> None:
        """Click on the waveform: play from there (or move the playing position)."""
        p = self.state.preview
        if p is None:
            return
        seconds = min(max(seconds, p.offset_s), p.end_s)
        part = self.selected_part()
        if part is not None and not part[0] <= seconds <= part[1]:
            self.waveform.clear_selection()  # a click outside the part: the whole sound again
            if self.player.playing:
                self.play_from(seconds, exact=True)  # the whole sound now plays, from here
        elif self.player.playing:
            how, base, end = self._playing
            self.player.seek(how.position(seconds, base, end))
        self.start_s = seconds
        self._show_playhead(seconds)

    @Slot()
    def _tick_playhead(self) -> None:
        p = self.state.preview
        if self._wanted_s is not None and not self.player.playing:
            return  # its samples are being made
        if p is None or not self.player.playing:
            self._play_timer.stop()
            self.play_button.setText("Play")
            if self.player.error:
                self.error.emit(self.player.error)
            self._show_playhead(self.start_s)
            return
        self._show_playhead(self.heard_now())

    def _show_playhead(self, seconds: float) -> None:
        self.waveform.playhead.setValue(seconds)
        self.waveform.playhead.setVisible(self.state.preview is not None)

    # -------------------------------------------------------------------------------------- file actions

    @Slot()
    def reveal_selected(self) -> None:
        hit = self.state.preview_hit or self.state.selected_hit()
        if hit is not None and not self.open_url(QUrl.fromLocalFile(str(hit.path.parent))):
            # no file manager (a bare desktop, a container): openUrl says only False, so the user would see nothing
            QGuiApplication.clipboard().setText(str(hit.path.parent))
            self.message.emit(f"No file manager to show {display_name(hit.path.parent)}; its path was copied "
                              "to the clipboard")

    @Slot()
    def copy_selected_path(self) -> None:
        hit = self.state.preview_hit or self.state.selected_hit()
        if hit is not None:
            QGuiApplication.clipboard().setText(str(hit.path))
            self.message.emit(f"Copied {display_name(hit.path)}")

    # ---------------------------------------------------------------------------------- the selected part

    def selected_part(self) -> tuple[float, float] | None:
        """The part selected on the waveform (file seconds, inside the preview), or None."""
        return self.waveform.selected() if self.state.preview is not None else None

    @Slot(float, float, bool)
    def select_part(self, a: float, b: float, finished: bool) -> None:
        """A drag across the waveform: the part between its ends (inside what the preview holds)."""
        p = self.state.preview
        if p is None:
            return
        a, b = (min(max(x, p.offset_s), p.end_s) for x in sorted((a, b)))
        self._dragging = not finished
        self.waveform.set_selection(a, b)
        if finished and b - a < MIN_EXCERPT_S:
            self.waveform.clear_selection()

    @Slot()
    def _selection_changed(self) -> None:
        part = self.selected_part()
        if part is None:
            self.selection_label.setText(SELECT_HINT)
            self.selection_label.setToolTip(SELECT_TIP)
        else:
            a, b = part
            self.selection_label.setText(part_text(a, b))
            self.selection_label.setToolTip(f"Selected: {format_duration(b - a)} from {format_duration(a)}. "
                                            "Play plays it alone; click outside it (or Escape) for the whole sound")
            self.start_s = a
            if self.player.playing and not self._dragging:  # restarting at every mouse move would stutter
                self.play_from(a)  # the part now playing is the one selected
            self._show_playhead(a)
        self.update_actions()

    @Slot()
    def export_selection(self) -> None:
        """Ask where and how to save the selected part (ExportDialog), then write it in a worker (a long part
        takes a moment); the folder chosen is offered next time."""
        hit, part = self.state.preview_hit, self.selected_part()
        if hit is None or part is None:
            return
        try:
            info = audio_info(hit.path)
        except AudioError as e:
            self.error.emit(f"Cannot export the selection: {describe_error(e)}")
            return
        (a, b), settings = part, QSettings()
        formats, default = export_formats(info)
        libraries = [self.state.library, location_root(hit)]  # the sound's own location among several
        folder = default_export_folder(libraries, str(settings.value(EXPORT_FOLDER_KEY, "") or ""))
        about = (f"The part {part_text(a, b)} of {display_name(hit.path.name)} "
                 f"({sound_format(info.sample_rate, info.channels)}): its own samples and channels, at its own rate.")
        dialog = ExportDialog(about, part_file_stem(hit.path, a, b), formats, default, folder, b - a, self)
        try:
            if not self.ask_export(dialog):
                return
            choice = dialog.choice()
        finally:
            dialog.deleteLater()
        settings.setValue(EXPORT_FOLDER_KEY, str(choice.target.parent))
        source = hit.path

        def job() -> Any:  # noqa: ANN401 - a Job
            yield {"message": f"exporting part of {display_name(source.name)}"}
            return export_part(source, a, b, choice.target, choice.form, choice.fades, replace=choice.replace)

        runner = JobRunner(job, "export-part", self)
        runner.result.connect(lambda path: self.message.emit(f"Exported {display_name(path.name)} to "
                                                             f"{display_name(path.parent)}"))
        runner.error.connect(lambda text: self.error.emit(f"Cannot export the selection: {text}"))
        runner.finished.connect(lambda: self._exports.remove(runner))
        self._exports.append(runner)
        runner.start()

    def drag_mime(self) -> QMimeData | None:
        """What a drag from the handle carries: the selected part, written to a temporary file first (up to
        MAX_DRAG_BYTES), or the whole file; None (and a message) when there is nothing to drag."""
        hit, part = self.state.preview_hit, self.selected_part()
        if hit is None or self.state.preview is None:
            return None
        path = hit.path
        if part is not None:
            a, b = part
            size = (b - a) * (hit.sample_rate or self.state.preview.sample_rate) * max(hit.channels, 1) * 4
            if size > MAX_DRAG_BYTES:
                self.error.emit(f"Drag takes parts up to {MAX_DRAG_BYTES / 1e6:.3g} MB; this one is "
                                f"{size / 1e6:.3g} MB: use Export selection… for it")
                return None
            try:
                path = write_excerpt(hit.path, a, b, drag_folder(cache_root()), fsync=False)
            except (OSError, ValueError) as e:
                self.error.emit(f"Cannot drag the selection: {describe_error(e)}")
                return None
        mime = QMimeData()
        mime.setUrls([QUrl.fromLocalFile(str(path))])
        return mime

    def stop(self) -> None:
        """No more sound or play head (closing)."""
        self._wanted_s = None
        self._play_timer.stop()
        self.player.stop()
        self.audition.wait()


def location_root(hit: Hit) -> Path | None:
    """The library folder a hit lies in (its path less its path in the library)."""
    depth = len(Path(hit.rel_path).parts) if hit.rel_path else 0
    return hit.path.parents[depth - 1] if 0 < depth <= len(hit.path.parents) else None


def breakable(name: str) -> str:
    """A file name that a word-wrapped label may break after '_' and '-' (zero-width spaces)."""
    return name.replace("_", "_\u200b").replace("-", "-\u200b")
