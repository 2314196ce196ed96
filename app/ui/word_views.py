"""The Words tab's Compare page: a cosine-similarity heat map of the collection and its 2-D PCA map, spoken
words as blue circles and written words as orange squares; an empty collection shows hints, not bare axes."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt, Signal, Slot
from PySide6.QtGui import QColor, QFont, QFontMetrics
from PySide6.QtWidgets import QSplitter, QWidget

from app.services.words.word_space import WordSet
from app.ui.widgets import PlotHint, TitledPlot, show_axes

SPOKEN_COLOUR = "#4c9be8"
WRITTEN_COLOUR = "#e8964c"
MATRIX_TEXT_LIMIT = 10  # write the values in the cells up to this many items
MATRIX_HINT = "Add spoken or written words to compare them"
MAP_HINT = "Add two or more words to see them on a 2-D map"
LABEL_SIDES = ((0, 1), (1, 1), (0, 0), (1, 0))  # a map label's anchor, tried in turn: above right, above left,
# below right, below left of its point; then the same a line further out, up to LABEL_STEPS lines (a cluster)
LABEL_STEPS = 4
LABEL_GAP = 7.0  # pixels between a label and its point (the markers are 11 px across)


def short(label: str, n: int = 10) -> str:
    return label if len(label) <= n else label[: n - 1] + "…"


def map_ranges(xy: np.ndarray) -> tuple[tuple[float, float], tuple[float, float]]:
    """The map's x and y ranges around the points (N, 2). A direction without spread (one word, two words, copies)
    takes the other's span, or 1 when neither has any, centred on the points: autoRange would stretch its
    zero span into floating-point dust (an axis from -4e-16 to 0)."""
    lo, hi = xy.min(axis=0).astype(np.float64), xy.max(axis=0).astype(np.float64)
    spans = hi - lo
    widest = float(spans.max())
    flat = spans <= 1e-6 * max(widest, 1e-12)
    spans = np.where(flat, widest if widest > 1e-12 else 1.0, spans)
    centre = (lo + hi) / 2
    x, y = ((float(c - s / 2), float(c + s / 2)) for c, s in zip(centre, spans, strict=True))
    return x, y


class CompareViews(QSplitter):
    """Similarity matrix and 2-D map side by side, drawn from a `WordSet`; a click on a point of the map emits
    `item_clicked(index)` (the item's place in the set)."""

    item_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(Qt.Orientation.Horizontal, parent)
        self.matrix_plot = TitledPlot(title_points=11.0)  # pyqtgraph's title size, as the map's
        self.matrix_plot.set_titles("Cosine similarity", "Similarity")
        self.matrix_plot.setMenuEnabled(False)
        self.matrix_plot.setMouseEnabled(x=False, y=False)
        self.matrix_plot.hideButtons()
        self.matrix_plot.setAspectLocked(True)
        self.matrix_plot.invertY(True)
        self.matrix_image = pg.ImageItem()
        self.matrix_image.setColorMap(pg.colormap.get("viridis"))
        self.matrix_plot.addItem(self.matrix_image)
        self.matrix_bar = pg.ColorBarItem(values=(-1, 1), colorMap=pg.colormap.get("viridis"), interactive=False,
                                          width=12)
        self.matrix_bar.setImageItem(self.matrix_image, insert_in=self.matrix_plot.getPlotItem())
        self._matrix_text: list[pg.TextItem] = []
        self.matrix_plot.getViewBox().sigResized.connect(self._fit_matrix_text)
        self.matrix_hint = PlotHint(self.matrix_plot, MATRIX_HINT)
        self.addWidget(self.matrix_plot)

        self.map_plot = pg.PlotWidget(title="2-D map (PCA)")
        self.map_plot.setMenuEnabled(False)
        self.map_plot.hideButtons()
        self.map_plot.showGrid(x=True, y=True, alpha=0.2)
        self.map_plot.addLegend(offset=(5, 5))  # the named scatters below enter it
        self.map_spoken = pg.ScatterPlotItem(symbol="o", size=11, brush=pg.mkBrush(SPOKEN_COLOUR), name="spoken")
        self.map_written = pg.ScatterPlotItem(symbol="s", size=11, brush=pg.mkBrush(WRITTEN_COLOUR),
                                              name="written")
        for scatter in (self.map_spoken, self.map_written):
            self.map_plot.addItem(scatter)
            scatter.sigClicked.connect(self._map_clicked)
        self._map_text: list[pg.TextItem] = []
        self.map_plot.getViewBox().sigResized.connect(self._place_map_labels)
        self.map_plot.getViewBox().sigRangeChanged.connect(self._place_map_labels)
        self.map_hint = PlotHint(self.map_plot, MAP_HINT)
        self.addWidget(self.map_plot)
        self.setSizes([420, 420])
        self.draw(WordSet())  # the empty state: hints instead of pyqtgraph's default ranges

    def draw(self, words: WordSet) -> None:
        self._draw_matrix(words)
        self._draw_map(words)

    def _draw_matrix(self, words: WordSet) -> None:
        for t in self._matrix_text:
            self.matrix_plot.removeItem(t)
        self._matrix_text = []
        n = len(words)
        self.matrix_hint.setVisible(n == 0)
        show_axes(self.matrix_plot, n > 0)
        sim = words.similarity() if n else np.zeros((1, 1), np.float32)
        if n:
            self.matrix_image.setImage(sim, autoLevels=False, levels=(-1.0, 1.0))
            self.matrix_image.setRect(0, 0, n, n)
        else:
            self.matrix_image.clear()  # a lone 0.0 cell would read as data
        # rows carry numbered labels, columns only the numbers: long labels would collide along the bottom
        rows = [(i + 0.5, f"{short(it.label)} {i + 1}") for i, it in enumerate(words.items)]
        self.matrix_plot.getAxis("left").setTicks([rows])
        self.matrix_plot.getAxis("bottom").setTicks([[(i + 0.5, str(i + 1)) for i in range(n)]])
        if 0 < n <= MATRIX_TEXT_LIMIT:
            font = QFont()
            font.setPointSizeF(max(6.0, 11.0 - 0.5 * n))
            for i in range(n):
                for j in range(n):
                    text = pg.TextItem(f"{sim[i, j]:.2f}", color="w" if sim[i, j] < 0.5 else "k", anchor=(0.5, 0.5))
                    text.setFont(font)
                    text.setPos(j + 0.5, i + 0.5)
                    self.matrix_plot.addItem(text)
                    self._matrix_text.append(text)
        self.matrix_plot.setRange(xRange=(0, max(n, 1)), yRange=(0, max(n, 1)), padding=0)
        self._fit_matrix_text()

    @Slot()
    def _fit_matrix_text(self) -> None:
        """The values written in the cells only where a cell holds one: in a small window they ran into each other
        ("1.00.0.0.0"), and the colours say it all."""
        self._hold_matrix_width()
        if not self._matrix_text:
            return
        n = round(len(self._matrix_text) ** 0.5)
        box = self.matrix_plot.getViewBox()
        cell = min(box.width(), box.height()) / n  # the aspect is locked: square cells
        fits = QFontMetrics(self._matrix_text[0].textItem.font()).horizontalAdvance("0.00") + 2 <= cell
        for text in self._matrix_text:
            text.setVisible(fits)

    def _hold_matrix_width(self) -> None:
        """The matrix is never narrower than its row labels, colour bar and shortest title: in a 720-px window the
        splitter squeezed it until its colour bar was cut off. (Their widths are known once drawn.)"""
        plot = self.matrix_plot
        title = plot.title_metrics().horizontalAdvance(plot.titles[-1]) + 12
        plot.setMinimumWidth(math.ceil(plot.getAxis("left").width() + self.matrix_bar.width() + title))

    def _draw_map(self, words: WordSet) -> None:
        for t in self._map_text:
            self.map_plot.removeItem(t)
        self._map_text = []
        items = words.items
        self._set_map_empty(not items)
        xy = words.project_2d() if items else np.zeros((0, 2), np.float32)
        spoken = [i for i, it in enumerate(items) if it.kind == "spoken"]
        written = [i for i, it in enumerate(items) if it.kind != "spoken"]
        self.map_spoken.setData(pos=xy[spoken], data=spoken)
        self.map_written.setData(pos=xy[written], data=written)
        for i, it in enumerate(items):
            colour = SPOKEN_COLOUR if it.kind == "spoken" else WRITTEN_COLOUR
            text = pg.TextItem(short(it.label, 14), color=QColor(colour).darker(150), anchor=(0, 1))
            text.setPos(float(xy[i, 0]), float(xy[i, 1]))
            self.map_plot.addItem(text)
            self._map_text.append(text)
        if items:
            x_range, y_range = map_ranges(xy)
            self.map_plot.setRange(xRange=x_range, yRange=y_range, padding=0.2)
        else:
            self.map_plot.setRange(xRange=(-1, 1), yRange=(-1, 1), padding=0)  # a centred frame for the hint
        self._place_map_labels()

    @Slot()
    def _place_map_labels(self) -> None:
        """Each point's label on the side of its point (or a line or more further out, in a cluster) where it covers
        no label placed before it and stays inside the plot. Always above-right, words said alike (close points)
        wrote over each other ("one theo" over "one"), and a point near the right edge ran its label out of view."""
        box = self.map_plot.getViewBox()
        inside = box.mapRectToScene(box.boundingRect())
        placed: list[QRectF] = []
        for text in self._map_text:
            at = box.mapViewToScene(text.pos())
            size = text.textItem.boundingRect().size()
            gap = LABEL_GAP / max(size.width(), 1.0)  # clear of the point's own marker
            anchors = [(ax + gap if ax else ax - gap, ay + k if ay else ay - k)
                       for k in range(LABEL_STEPS) for ax, ay in LABEL_SIDES]
            rects = [(anchor, QRectF(at.x() - anchor[0] * size.width(), at.y() - anchor[1] * size.height(),
                                     size.width(), size.height())) for anchor in anchors]
            free = [(a, r) for a, r in rects if inside.contains(r) and not any(r.intersects(p) for p in placed)]
            anchor, rect = (free or [(a, r) for a, r in rects if inside.contains(r)] or rects)[0]
            text.setAnchor(anchor)
            placed.append(rect)

    def _set_map_empty(self, empty: bool) -> None:
        """Empty: the hint, and no axes or legend (there is nothing for them to describe)."""
        self.map_hint.setVisible(empty)
        show_axes(self.map_plot, not empty)
        legend = self.map_plot.getPlotItem().legend
        if legend is not None:
            legend.setVisible(not empty)

    @Slot(object, object)
    def _map_clicked(self, scatter: pg.ScatterPlotItem, points: list[Any]) -> None:
        if len(points):
            self.item_clicked.emit(int(points[0].data()))
