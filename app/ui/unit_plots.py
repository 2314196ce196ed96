"""The Units tab's plots: a log-magnitude spectrogram pane, a strip of coloured unit cells under it (ids written
when zoomed in), the codebook-usage histogram, each unit id in its own fixed colour, and the input level meter."""

from __future__ import annotations

import colorsys
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, QSize, Qt, Slot
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPalette
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.services.units.levels import CLIP_DB, FLOOR_DB, InputLevel
from app.ui.widgets import TitledPlot

REVIEW_EMPTY_SECONDS = 1.0  # the original/resynthesis views' neutral time frame before there is audio
LIVE_LEVELS = (-3.0, 1.5)  # fixed colour range (log10 magnitude) so the scrolling view does not flicker
LABEL_MIN_PIXELS = 18  # a unit this wide on screen (or wider) gets its id written on it
MAX_LABELS = 300


def unit_colour(unit: int) -> tuple[int, int, int]:
    """A fixed colour per unit id: golden-ratio hue steps keep neighbouring ids far apart on the wheel."""
    hue = (unit * 0.6180339887) % 1.0
    sat, val = (0.55, 0.95) if unit % 2 else (0.8, 0.8)
    r, g, b = colorsys.hsv_to_rgb(hue, sat, val)
    return round(255 * r), round(255 * g), round(255 * b)


def unit_colours(units: list[int] | np.ndarray) -> np.ndarray:
    """(U,) ids -> (1, U, 3) uint8 image row."""
    return np.array([[unit_colour(int(u)) for u in units]], dtype=np.uint8).reshape(1, -1, 3)


def robust_levels(spec: np.ndarray) -> tuple[float, float]:
    if spec.size == 0:
        return LIVE_LEVELS
    lo, hi = np.percentile(spec, [2.0, 99.8])
    return float(lo), float(max(hi, lo + 1e-3))


def _plot_defaults(plot: pg.PlotWidget) -> None:
    plot.setMenuEnabled(False)
    plot.setMouseEnabled(x=False, y=False)
    plot.hideButtons()
    plot.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # Tab goes to controls, not plots
    plot.getAxis("left").setWidth(52)  # equal axis widths keep x-linked plots aligned pixel for pixel


class SpectrogramPane(TitledPlot):
    """A (time, frequency) log-magnitude image placed at [start, start + T·hop) seconds, 0..max_hz upwards.

    Without frames it shows `empty_range` seconds: the frame it will draw in, not pyqtgraph's default.
    """

    def __init__(self, titles: tuple[str, ...] = (), max_hz: float = 8000.0, zoomable: bool = False,
                 empty_range: tuple[float, float] = (0.0, REVIEW_EMPTY_SECONDS),
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        _plot_defaults(self)
        self.setMouseEnabled(x=zoomable, y=False)  # zoom in (wheel) on time to read unit ids
        self.max_hz = max_hz
        self.empty_range = empty_range
        self.set_titles(*titles)
        self.setLabel("left", "Hz")
        self.setLabel("bottom", "time", units="s")
        for side in ("left", "bottom"):
            self.getAxis(side).enableAutoSIPrefix(False)  # fixed units: never "ms" or "kHz" as ranges change
        self.image = pg.ImageItem()
        self.image.setColorMap(pg.colormap.get("viridis"))
        self.addItem(self.image)
        self.setYRange(0, max_hz, padding=0)
        self.n_frames = 0
        self.clear_frames()

    def sparse_frequency_ticks(self) -> None:
        """0, half and full scale only: a short view (the live one at 1024x700) wrote its five labels over each
        other."""
        self.getAxis("left").setTicks([[(hz, f"{hz:g}") for hz in (0.0, self.max_hz / 2, self.max_hz)], []])

    def set_frames(self, frames: np.ndarray, hop_seconds: float, start: float = 0.0,
                   levels: tuple[float, float] | None = None, x_range: tuple[float, float] | None = None) -> None:
        frames = np.asarray(frames, dtype=np.float32)  # (T, F)
        self.n_frames = len(frames)
        if len(frames) == 0:
            self.image.clear()
        else:
            self.image.setImage(frames.T, levels=levels or robust_levels(frames))  # rows = frequency
            self.image.setRect(QRectF(start, 0.0, len(frames) * hop_seconds, self.max_hz))
        lo, hi = x_range or (start, start + max(len(frames), 1) * hop_seconds)
        self.setXRange(lo, hi, padding=0)

    def clear_frames(self) -> None:
        self.set_frames(np.zeros((0, 1), np.float32), 0.01, x_range=self.empty_range)


class UnitStrip(pg.PlotWidget):
    """Units as a row of coloured cells under a spectrogram (x-linked to it); ids written when zoomed in."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        _plot_defaults(self)
        self.hideAxis("bottom")
        self.setLabel("left", "units")
        self.getAxis("left").setTicks([[]])
        self.setYRange(0, 1, padding=0)
        self.setFixedHeight(34)  # a row of cells; at 1024x700 the live view and two review views need the height
        self.image = pg.ImageItem()
        self.addItem(self.image)
        self.units: list[int] = []
        self.start = 0.0
        self.unit_seconds = 0.04
        self._labels: list[pg.TextItem] = []
        self.labels_shown = 0
        self.getViewBox().sigXRangeChanged.connect(self._update_labels)

    def set_units(self, units: list[int], unit_seconds: float, start: float = 0.0) -> None:
        self.units, self.unit_seconds, self.start = list(units), unit_seconds, start
        if units:
            self.image.setImage(unit_colours(units), levels=(0, 255))
            self.image.setRect(QRectF(start, 0.0, len(units) * unit_seconds, 1.0))
        else:
            self.image.clear()
        self._update_labels()

    def resizeEvent(self, event: Any) -> None:  # noqa: N802, ANN401 (Qt API)
        super().resizeEvent(event)
        if hasattr(self, "units"):  # pyqtgraph resizes once while still constructing
            self._update_labels()

    @Slot()
    def _update_labels(self) -> None:
        (lo, hi), _ = self.getViewBox().viewRange()
        width = max(1, self.getViewBox().width())
        pixels_per_unit = width * self.unit_seconds / max(hi - lo, 1e-9)
        first = max(0, int((lo - self.start) / self.unit_seconds))
        last = min(len(self.units), int(np.ceil((hi - self.start) / self.unit_seconds)))
        visible = range(first, last) if pixels_per_unit >= LABEL_MIN_PIXELS else range(0)
        visible = visible[:MAX_LABELS]
        while len(self._labels) < len(visible):
            label = pg.TextItem(color="k", anchor=(0.5, 0.5))
            self.addItem(label)
            self._labels.append(label)
        for label, u in zip(self._labels, visible, strict=False):
            label.setText(str(self.units[u]))
            label.setPos(self.start + (u + 0.5) * self.unit_seconds, 0.5)
            label.setVisible(True)
        for label in self._labels[len(visible):]:
            label.setVisible(False)
        self.labels_shown = len(visible)


class UsageHistogram(TitledPlot):
    """How often each codebook entry was used in the utterance, bars in the units' own colours."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        _plot_defaults(self)
        self.set_titles("codebook usage")
        self.setLabel("bottom", "unit id")
        self.setLabel("left", "count")
        for side in ("left", "bottom"):
            self.getAxis(side).enableAutoSIPrefix(False)  # ids and counts are plain numbers
        self.bars: pg.BarGraphItem | None = None
        self.counts = np.zeros(0, dtype=np.int64)

    def set_counts(self, counts: np.ndarray) -> None:
        if self.bars is not None:
            self.removeItem(self.bars)
        self.counts = np.asarray(counts)
        x = np.arange(len(counts))
        brushes = [pg.mkBrush(*unit_colour(int(u))) for u in x]
        self.bars = pg.BarGraphItem(x=x, height=self.counts, width=0.8, brushes=brushes, pen=None)
        self.addItem(self.bars)
        self.setXRange(-0.5, max(len(counts), 1) - 0.5, padding=0.01)
        self.setYRange(0, max(1, int(self.counts.max(initial=0))), padding=0.05)


METER_GREEN = QColor(60, 170, 75)  # RMS: the body of the level
METER_LIGHT = QColor(150, 215, 150)  # peak above the RMS
METER_RED = QColor(220, 40, 40)  # clipping: a peak at CLIP_DB or above
METER_TROUGH = QColor(45, 45, 45)  # recording: dark, like the plots the level feeds
METER_TEXT_WIDTH = 60  # pixels right of the bar for the peak's dBFS
METER_IDLE_TEXT = "— dBFS"  # no input: no number (a black box read as a broken widget)
METER_IDLE_TICKS = (-40.0, -20.0)  # dBFS marks on the idle scale: an empty meter, not an empty box


class LevelMeter(QWidget):
    """A horizontal input level meter drawing an `InputLevel`: RMS as a solid bar, the peak as a lighter bar
    beyond it, the held peak as a line, all red from CLIP_DB up; FLOOR_DB..0 dBFS left to right, on a dark
    trough. Inactive or disabled it is idle: an empty light scale in a frame, as an empty progress bar looks,
    and "— dBFS"."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.level = InputLevel()
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt API)
        return QSize(120 + METER_TEXT_WIDTH, 20)

    def show_level(self, level: InputLevel) -> None:
        self.level = level
        self.update()

    def _x(self, db: float, width: int) -> int:
        return round(width * (min(max(db, FLOOR_DB), 0.0) - FLOOR_DB) / -FLOOR_DB)

    def live(self) -> bool:
        """Whether a level is shown (recording); else the meter is idle."""
        return self.isEnabled() and self.level.active

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt API)
        painter = QPainter(self)
        w, h = self.width() - METER_TEXT_WIDTH, self.height()  # the bar; the peak's number is written after it
        if self.live():
            self._paint_level(painter, w, h)
        else:
            self._paint_idle(painter, w, h)
        clip = self._x(CLIP_DB, w)  # where clipping starts: a tick, so a hot level can be read at a glance
        painter.fillRect(clip, 0, 1, 3, METER_RED)
        painter.end()

    def _paint_level(self, painter: QPainter, w: int, h: int) -> None:
        level = self.level
        painter.fillRect(0, 0, w, h, METER_TROUGH)
        rms, peak = self._x(level.rms_db, w), self._x(level.peak_db, w)
        painter.fillRect(0, 2, rms, h - 4, METER_RED if level.clipping else METER_GREEN)
        painter.fillRect(rms, 2, max(0, peak - rms), h - 4, METER_RED if level.clipping else METER_LIGHT)
        hold = self._x(level.hold_db, w)
        painter.fillRect(max(0, hold - 2), 0, 2, h, METER_RED if level.held_clipping else QColor("white"))
        painter.setPen(METER_RED if level.held_clipping else self.palette().windowText().color())
        self._write(painter, w, h, f"{level.peak_db:.0f} dBFS")

    def _paint_idle(self, painter: QPainter, w: int, h: int) -> None:
        palette = self.palette()
        painter.fillRect(0, 0, w, h, palette.color(QPalette.ColorRole.Base))
        painter.setPen(palette.color(QPalette.ColorRole.Mid))
        painter.drawRect(0, 0, w - 1, h - 1)
        for db in METER_IDLE_TICKS:
            painter.drawLine(self._x(db, w), h - 4, self._x(db, w), h - 2)
        painter.setPen(palette.color(QPalette.ColorRole.PlaceholderText))
        self._write(painter, w, h, METER_IDLE_TEXT)

    def _write(self, painter: QPainter, w: int, h: int, text: str) -> None:
        """`text` right of the bar (the peak's dBFS)."""
        painter.drawText(w, 0, METER_TEXT_WIDTH, h, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, text)
