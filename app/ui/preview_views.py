"""The plots of the Search tab's preview: the waveform (play head, best-matching window, click to seek, a part
selected by dragging across it), the spectrogram, and the handle that drags a sound or part into other programs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QMimeData, Qt, Signal
from PySide6.QtGui import QDrag, QMouseEvent
from PySide6.QtWidgets import QApplication, QLabel, QWidget

from app.services.search.excerpt import MIN_EXCERPT_S
from app.services.search.preview import Preview
from app.ui.widgets import SpectrogramView, WaveformPlot, envelope

SELECTION_BRUSH = (255, 255, 255, 48)  # a light veil: the waveform is blue on a dark ground
SELECTION_EDGE = (255, 255, 255, 170)
ENVELOPE_POINTS = 3000  # min/max pairs drawn for the samples in view (and as much again each side)
MIN_ZOOM_S = 0.02  # the narrowest view: a few hundred samples


class SelectingViewBox(pg.ViewBox):
    """A view box whose left-button drag selects a time range (the plot neither pans nor zooms)."""

    dragged = Signal(float, float, bool)  # from, to (seconds, either order), the drag has ended

    def mouseDragEvent(self, ev: Any, axis: int | None = None) -> None:  # noqa: N802, ANN401 - pyqtgraph API
        if ev.button() != Qt.MouseButton.LeftButton:
            ev.ignore()
            return
        ev.accept()
        start = self.mapSceneToView(ev.buttonDownScenePos()).x()
        self.dragged.emit(float(start), float(self.mapSceneToView(ev.scenePos()).x()), bool(ev.isFinish()))


class PartRegion(pg.LinearRegionItem):
    """The selected part: its edges stop at its bounds (the sound's ends), and dragged whole it stops there too,
    keeping its length (pyqtgraph's own drag clamps each edge alone, so the part would shrink to nothing)."""

    def mouseDragEvent(self, ev: Any) -> None:  # noqa: N802, ANN401 - pyqtgraph API
        if not self.movable or ev.button() != Qt.MouseButton.LeftButton:
            return
        ev.accept()
        if ev.isStart():
            self._from = sorted(line.value() for line in self.lines)
        a, b = self._from
        lo, hi = self.lines[0].maxRange
        shift = ev.pos().x() - ev.buttonDownPos().x()
        shift = min(shift, hi - b) if hi is not None else shift
        shift = max(shift, lo - a) if lo is not None else shift
        self.blockLineSignal = True  # one signal for both edges, below
        self.lines[0].setValue(a + shift)
        self.lines[1].setValue(b + shift)
        self.prepareGeometryChange()
        self.blockLineSignal = False
        (self.sigRegionChangeFinished if ev.isFinish() else self.sigRegionChanged).emit(self)


class PreviewWaveform(WaveformPlot):
    """Waveform of the selected sound with a play head, the best-matching window, click-to-seek, a selected
    part (drag across it; its edges can be moved) and zoom (the wheel, about the pointer; a double-click inside
    the part zooms to it, elsewhere shows the whole sound again): the envelope is drawn anew for what is in
    view, so a part of a long file zoomed into shows its own samples, not the whole file's buckets."""

    clicked = Signal(float)  # seconds into the file
    selection_changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, viewBox=SelectingViewBox())
        self.playhead = pg.InfiniteLine(0.0, angle=90, pen=pg.mkPen("#c0392b", width=2), movable=False)
        self.playhead.setVisible(False)
        self.addItem(self.playhead)
        self.best = pg.LinearRegionItem((0, 1), movable=False, brush=pg.mkBrush(232, 150, 76, 60))
        self.best.setVisible(False)
        self.addItem(self.best)
        self.selection = PartRegion((0, 0), movable=True, brush=pg.mkBrush(*SELECTION_BRUSH),
                                    pen=pg.mkPen(*SELECTION_EDGE, width=1),
                                    hoverPen=pg.mkPen(*SELECTION_EDGE, width=3))  # not red: that is the play head
        self.selection.setVisible(False)
        self.selection.setZValue(10)  # above the best window: its edges are the ones the mouse takes
        self.playhead.setZValue(20)  # above the part: it stands on the part's first edge when Play starts there
        self.selection.sigRegionChangeFinished.connect(lambda _item: self.selection_changed.emit())
        self.addItem(self.selection)
        self.scene().sigMouseClicked.connect(self._scene_clicked)
        self.setMouseEnabled(x=True, y=False)  # the wheel zooms time; the left drag selects (SelectingViewBox)
        self._preview: Preview | None = None
        self.getPlotItem().getViewBox().sigXRangeChanged.connect(self._draw_in_view)
        self.clear_preview()

    def selected(self) -> tuple[float, float] | None:
        """The selected part (file seconds), or None."""
        if not self.selection.isVisible():
            return None
        a, b = self.selection.getRegion()
        return (float(a), float(b)) if b - a >= MIN_EXCERPT_S else None

    def set_selection(self, a: float, b: float) -> None:
        self.selection.blockSignals(True)  # one selection_changed per change, below
        self.selection.setRegion((min(a, b), max(a, b)))
        self.selection.blockSignals(False)
        self.selection.setVisible(True)
        self.selection_changed.emit()

    def clear_selection(self) -> None:
        if self.selection.isVisible():
            self.selection.setVisible(False)
            self.selection_changed.emit()

    def set_preview(self, p: Preview) -> None:
        self.clear_selection()  # another sound: a part selected in the last one means nothing here
        self._preview = p
        self.setLimits(xMin=p.offset_s, xMax=p.end_s, minXRange=min(MIN_ZOOM_S, p.end_s - p.offset_s))
        self.selection.setBounds((p.offset_s, p.end_s))  # an edge dragged off the plot stops at the sound's end
        self.setXRange(p.offset_s, p.end_s, padding=0)
        self._draw_in_view()
        peak = max(float(np.abs(p.audio).max()) if len(p.audio) else 0.0, 1e-3)
        self.setYRange(-peak, peak, padding=0.05)

    def show_all(self) -> None:
        if self._preview is not None:
            self.setXRange(self._preview.offset_s, self._preview.end_s, padding=0)

    def zoom_to(self, a: float, b: float) -> None:
        """The view on [a, b] (file seconds) and a tenth of it on each side, inside the sound."""
        p, margin = self._preview, 0.1 * (b - a)
        if p is not None:
            self.setXRange(max(p.offset_s, a - margin), min(p.end_s, b + margin), padding=0)

    def _draw_in_view(self) -> None:
        """The envelope of the samples in view (and as much again on each side, so a small pan or zoom shows no
        gap before this runs again)."""
        p = self._preview
        if p is None:
            return
        x0, x1 = self.getPlotItem().getViewBox().viewRange()[0]
        span = x1 - x0
        first = max(0, int((x0 - span - p.offset_s) * p.sample_rate))
        last = min(len(p.audio), int((x1 + span - p.offset_s) * p.sample_rate) + 1)
        x, y = envelope(p.audio[first:last], p.sample_rate, points=ENVELOPE_POINTS)
        self._curve.setData(x + p.offset_s + first / p.sample_rate, y)

    def clear_preview(self) -> None:
        self._preview = None
        self.setLimits(xMin=None, xMax=None, minXRange=None)
        self.selection.setBounds((None, None))
        self._curve.setData([], [])
        self.playhead.setVisible(False)
        self.best.setVisible(False)
        self.clear_selection()
        self.setXRange(0, 1, padding=0)  # a neutral frame, not pyqtgraph's ±0.5 around nothing
        self.setYRange(-1, 1, padding=0.05)

    def _scene_clicked(self, event: Any) -> None:  # noqa: ANN401 - a pyqtgraph mouse event
        if event.button() != Qt.MouseButton.LeftButton:
            return
        vb = self.getPlotItem().getViewBox()
        if not vb.sceneBoundingRect().contains(event.scenePos()):
            return
        x = float(vb.mapSceneToView(event.scenePos()).x())
        if not event.double():
            self.clicked.emit(x)
            return
        part = self.selected()
        if part is not None and part[0] <= x <= part[1]:  # inside the part: zoom to it (the wheel may have lost it)
            self.zoom_to(*part)
        else:
            self.show_all()


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


class DragHandle(QLabel):
    """'⠿ Drag': pressed and moved, it starts a drag of what `mime()` gives (a file URL) into other programs."""

    def __init__(self, mime: Callable[[], QMimeData | None], parent: QWidget | None = None) -> None:
        super().__init__("⠿ Drag", parent)
        self._mime = mime
        self._pressed_at: Any = None
        self.setCursor(Qt.CursorShape.OpenHandCursor)
        self.setFrameShape(QLabel.Shape.StyledPanel)
        self.setContentsMargins(6, 2, 6, 2)

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802 (Qt API)
        if event.button() == Qt.MouseButton.LeftButton and self.isEnabled():
            self._pressed_at = event.position().toPoint()

    def mouseMoveEvent(self, event: QMouseEvent) -> None:  # noqa: N802 (Qt API)
        if self._pressed_at is None or (event.position().toPoint() - self._pressed_at).manhattanLength() \
                < QApplication.startDragDistance():
            return
        self._pressed_at = None
        mime = self._mime()
        if mime is not None:
            drag = QDrag(self)
            drag.setMimeData(mime)
            drag.exec(Qt.DropAction.CopyAction)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802 (Qt API)
        self._pressed_at = None
