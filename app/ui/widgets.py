"""Shared widgets: empty-state panels, pyqtgraph plots and their legend row, a rich-text cell delegate and a slider
with a marked default, used by several tabs."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QPointF, QRectF, QSize, Qt, Signal, Slot
from PySide6.QtGui import (
    QAbstractTextDocumentLayout,
    QColor,
    QFont,
    QFontMetrics,
    QPainter,
    QPaintEvent,
    QPalette,
    QPen,
    QPolygonF,
    QResizeEvent,
    QTextDocument,
)
from PySide6.QtWidgets import (
    QApplication,
    QLabel,
    QPushButton,
    QSizePolicy,
    QSlider,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionSlider,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

if TYPE_CHECKING:
    from app.services.devices import DeviceStatus

pg.setConfigOptions(antialias=True, imageAxisOrder="row-major")


class DeviceLine(QLabel):
    """One line that says which of recording and playback is off, and why ('': both work). It stays while the
    status line below says other things: the Units and Words tabs show it beside their Record button."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("", parent)
        self.setStyleSheet("color: #a05a00")
        self.setWordWrap(True)  # device messages can be long; never widen the window for them
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)

    def show_status(self, status: DeviceStatus) -> None:
        self.setText(status.unavailable())


class EmptyState(QWidget):
    """A centred title, explanation and optional action: what a tab shows when it cannot work yet."""

    action_clicked = Signal()

    def __init__(self, title: str, message: str, action: str | None = None, parent: QWidget | None = None):
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.addStretch(1)
        self.title = QLabel(title)
        self.title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        font = self.title.font()
        font.setPointSizeF(font.pointSizeF() * 1.5)
        font.setBold(True)
        self.title.setFont(font)
        self.message = QLabel(message)
        self.message.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.title)
        layout.addWidget(self.message)
        self.button: QPushButton | None = None
        if action:
            self.button = QPushButton(action)
            self.button.clicked.connect(self.action_clicked)
            layout.addWidget(self.button, alignment=Qt.AlignmentFlag.AlignCenter)
        layout.addStretch(2)

    def set_message(self, message: str) -> None:
        self.message.setText(message)


def show_axes(plot: pg.PlotWidget, on: bool) -> None:
    """Left and bottom axes' lines, tick values and grid on or off: an empty plot shows a hint, not bare ranges.

    The axes keep their place (an invisible pen) so nothing jumps, or gets clipped, when data arrives.
    """
    plot.getAxis("bottom").setStyle(autoReduceTextSpace=False)  # keep the tick row's height while it is empty
    for side in ("left", "bottom"):
        axis = plot.getAxis(side)
        axis.setTicks(None if on else [[]])  # None: automatic ticks again (the matrix sets its own afterwards)
        if on:
            axis.setPen()  # the default foreground
        else:
            axis.setPen(None)


class PlotHint(QLabel):
    """A centred, word-wrapped hint over a plot's data area: what an empty plot says instead of bare axes.

    A QLabel on the plot's viewport (not a scene item), so it keeps its size and place whatever the ranges.
    """

    def __init__(self, plot: pg.PlotWidget, text: str) -> None:
        super().__init__(text, plot.viewport())
        self.plot = plot
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setWordWrap(True)
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)  # clicks still reach the plot
        colour = pg.mkColor(pg.getConfigOption("foreground")).name()
        self.setStyleSheet(f"color: {colour}; background: transparent;")
        font = self.font()
        font.setPointSizeF(font.pointSizeF() * 1.15)
        self.setFont(font)
        plot.getViewBox().sigResized.connect(self._place)
        self._place()

    @Slot()
    def _place(self) -> None:
        """Cover the view box (the data area inside the axes), less a margin so the text never touches them."""
        box = self.plot.mapFromScene(self.plot.getViewBox().sceneBoundingRect()).boundingRect()
        self.setGeometry(box.adjusted(12, 12, -12, -12))


class CurveLegend(QLabel):
    """A plot's title and its curves' names, each after a stroke of its pen, in a row above the plot: a legend
    drawn inside hid the curves it named wherever it stood. The row wraps between names when they do not fit."""

    def __init__(self, title: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = title
        self.setWordWrap(True)
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setTextFormat(Qt.TextFormat.RichText)
        background = pg.mkColor(pg.getConfigOption("background")).name()
        colour = pg.mkColor(pg.getConfigOption("foreground")).name()
        self.setStyleSheet(f"background: {background}; color: {colour}; padding: 3px 6px 0px 6px;")
        self.show_curves(None)

    def show_curves(self, plot: pg.PlotWidget | None) -> None:
        """Name the named curves of `plot` (None: only the title)."""
        items = plot.listDataItems() if plot is not None else []
        entries = [curve_entry(item.name(), pg.mkPen(item.opts["pen"])) for item in items if item.name()]
        title = f"<span style='font-size:11pt'>{html.escape(self.title)}</span>"
        self.setText(" &nbsp; ".join([title, *entries]))  # only these spaces break a line


def curve_entry(name: str, pen: QPen) -> str:
    """'━━ name' in the pen's colour, '╍╍' for a dashed pen; no space inside it where the row could wrap."""
    stroke = "━━" if pen.style() == Qt.PenStyle.SolidLine else "╍╍"
    text = html.escape(name).replace(" ", "&nbsp;")
    return f"<span style='color:{pen.color().name()}'>{stroke}</span>&nbsp;{text}"


class TitledPlot(pg.PlotWidget):
    """A plot titled by the longest of its wordings that fits its width, chosen again as it resizes (first: the
    title's width is the plot's minimum, which would hold it wider than its place): a centred title wider than its
    plot lost both ends ("codebook usage: 4" of "codebook usage: 48 of 128 units") and cut off its right end."""

    def __init__(self, parent: QWidget | None = None, title_points: float = 9.0) -> None:
        super().__init__(parent)
        self.titles: tuple[str, ...] = ()
        self.title_points = title_points

    def set_titles(self, *titles: str) -> None:
        """Wordings of the title, longest first; the last one is shown however narrow the plot."""
        self.titles = titles
        self._fit_title()
        self.getPlotItem().setGeometry(QRectF(0, 0, self.width(), self.height()))  # a shorter title: the whole view

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt API)
        self._fit_title()
        super().resizeEvent(event)

    def title_metrics(self) -> QFontMetrics:
        font = QFont(self.font())
        font.setPointSizeF(self.title_points)
        return QFontMetrics(font)

    def _fit_title(self) -> None:
        titles = getattr(self, "titles", ())  # resized while pyqtgraph builds it: no titles yet
        if not titles:
            return
        item = self.getPlotItem()
        around = item.width() - item.getViewBox().width()  # the axes (a colour bar) beside the data
        metrics, room = self.title_metrics(), self.width() - around - 12
        title = next((t for t in titles if metrics.horizontalAdvance(t) <= room), titles[-1])
        if item.titleLabel.text != title:
            self.setTitle(title, size=f"{self.title_points:g}pt")


class DecadeAxis(pg.AxisItem):
    """An axis that, in log mode, ticks the decades (10, 100: labelled) and their 2..9 (not labelled). Over less
    than three decades pyqtgraph made every 2..9 a labelled tick, and the labels ran into each other
    ("4·10¹3·10¹2·10¹")."""

    def logTickValues(self, minVal: float, maxVal: float, size: float,  # noqa: N802, N803 (pyqtgraph API)
                      stdTicks: list) -> list:  # noqa: N803
        low, high = int(np.floor(minVal)), int(np.ceil(maxVal))
        decades = [float(v) for v in range(low, high + 1) if minVal <= v <= maxVal]
        between = [v + float(np.log10(k)) for v in range(low, high) for k in range(2, 10)]
        between = [v for v in between if minVal < v < maxVal]
        if not decades:  # less than a decade in view: its ticks are all there is to label
            return [(None, between)]
        return [(1.0, decades), (None, between)]


class WaveformPlot(pg.PlotWidget):
    """Min/max envelope of a waveform, decimated to the widget width so long files draw fast."""

    def __init__(self, parent: QWidget | None = None, **plot_item: Any) -> None:  # PlotItem arguments (viewBox)
        super().__init__(parent, **plot_item)
        self.setMenuEnabled(False)
        self.setMouseEnabled(x=False, y=False)
        self.hideButtons()
        self.getPlotItem().hideAxis("left")
        self.setLabel("bottom", "time", units="s")
        self._curve = self.plot(pen=pg.mkPen("#4c9be8"))

    def set_audio(self, audio: np.ndarray, sample_rate: int) -> None:
        x, y = envelope(audio, sample_rate, points=2000)
        self._curve.setData(x, y)
        self.setXRange(0, len(audio) / max(sample_rate, 1), padding=0)
        self.setYRange(-1, 1, padding=0.05)


def envelope(audio: np.ndarray, sample_rate: int, points: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """Interleaved min/max per bucket: the standard way to draw millions of samples on a few pixels."""
    n = len(audio)
    if n <= 2 * points:
        return np.arange(n) / sample_rate, audio.astype(np.float32)
    size = n // points
    trimmed = audio[: size * points].reshape(points, size)
    y = np.empty(2 * points, dtype=np.float32)
    y[0::2] = trimmed.min(axis=1)
    y[1::2] = trimmed.max(axis=1)
    x = np.repeat(np.arange(points) * size, 2) / sample_rate
    return x, y


class SpectrogramView(pg.PlotWidget):
    """A (time, frequency) image, e.g. log-mel or linear magnitude frames, with time in seconds."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMenuEnabled(False)
        self.setMouseEnabled(x=False, y=False)
        self.hideButtons()
        self.setLabel("bottom", "time", units="s")
        self._image = pg.ImageItem()
        self._image.setColorMap(pg.colormap.get("viridis"))
        self.addItem(self._image)

    def set_frames(self, frames: np.ndarray, hop_seconds: float) -> None:
        """frames: (T, F); drawn with frequency upwards."""
        self._image.setImage(np.asarray(frames, dtype=np.float32).T, autoLevels=True)
        self._image.setRect(0, 0, frames.shape[0] * hop_seconds, frames.shape[1])
        self.setXRange(0, frames.shape[0] * hop_seconds, padding=0)


class RichTextDelegate(QStyledItemDelegate):
    """Draws a cell's text as Qt rich text (a small HTML subset: <b>, <span style=...>), e.g. matched words
    highlighted in a file name. Selection colours follow the style; the text is elided by the cell's width.
    `selected_markup`: the cell's markup as a selected row draws it (None: as it is)."""

    selected_markup: Callable[[str], str] | None = None

    def _document(self, option: QStyleOptionViewItem, html: str) -> QTextDocument:
        doc = QTextDocument()
        doc.setDefaultFont(option.font)
        doc.setDocumentMargin(2)
        doc.setHtml(html)
        doc.setTextWidth(-1)  # one line: a cell is as wide as its column, the rest is clipped
        return doc

    def paint(self, painter: QPainter, option: QStyleOptionViewItem,
              index: QModelIndex | QPersistentModelIndex) -> None:
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        html, opt.text = opt.text, ""
        style = opt.widget.style() if opt.widget else QApplication.style()
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, opt.widget)  # background, focus
        selected = bool(opt.state & QStyle.StateFlag.State_Selected)
        if selected and self.selected_markup is not None:
            html = self.selected_markup(html)
        doc = self._document(opt, html)
        ctx = QAbstractTextDocumentLayout.PaintContext()
        role = QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text
        ctx.palette.setColor(QPalette.ColorRole.Text, opt.palette.color(role))
        text_rect = style.subElementRect(QStyle.SubElement.SE_ItemViewItemText, opt, opt.widget)
        ellipsis = "…"
        elide_w = opt.fontMetrics.horizontalAdvance(ellipsis) + 4
        too_wide = doc.idealWidth() > text_rect.width()
        painter.save()
        clip = text_rect.adjusted(0, 0, -elide_w, 0) if too_wide else text_rect
        painter.setClipRect(clip)
        top = text_rect.top() + max(0.0, (text_rect.height() - doc.size().height()) / 2)
        painter.translate(text_rect.left(), top)
        doc.documentLayout().draw(painter, ctx)
        painter.restore()
        if too_wide:  # cut text says so, as plain cells do
            painter.save()
            painter.setPen(opt.palette.color(role))
            painter.drawText(text_rect.adjusted(text_rect.width() - elide_w, 0, 0, 0),
                             int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter), ellipsis)
            painter.restore()

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:  # noqa: N802
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        doc = self._document(opt, opt.text)
        return QSize(int(doc.idealWidth()) + 4, int(doc.size().height()))


class MarkedSlider(QSlider):
    """A horizontal slider with a small triangle under the groove at a marked value (e.g. the tuned default);
    double-clicking the slider returns it there."""

    def __init__(self, marked: int, parent: QWidget | None = None, width: int = 0) -> None:
        super().__init__(Qt.Orientation.Horizontal, parent)
        self.marked = marked
        self.preferred_width = width  # what it asks for where there is room (0: the style's); it shrinks below

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt API)
        hint = super().sizeHint()
        return QSize(max(hint.width(), self.preferred_width), hint.height())

    def mouseDoubleClickEvent(self, event: object) -> None:  # noqa: N802 (Qt API)
        self.setValue(self.marked)

    def marked_x(self) -> float:
        """x (pixels) of the marked value's position on the groove."""
        opt = QStyleOptionSlider()
        self.initStyleOption(opt)
        style = self.style()
        groove = style.subControlRect(QStyle.ComplexControl.CC_Slider, opt, QStyle.SubControl.SC_SliderGroove, self)
        handle = style.subControlRect(QStyle.ComplexControl.CC_Slider, opt, QStyle.SubControl.SC_SliderHandle, self)
        span = groove.width() - handle.width()
        offset = QStyle.sliderPositionFromValue(self.minimum(), self.maximum(), self.marked, span, opt.upsideDown)
        return groove.left() + handle.width() / 2 + offset

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt API)
        super().paintEvent(event)
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        x, bottom = self.marked_x(), self.height() - 1
        colour = QColor(self.palette().color(QPalette.ColorRole.Highlight))
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(colour)
        painter.drawPolygon(QPolygonF([QPointF(x - 4, bottom), QPointF(x + 4, bottom), QPointF(x, bottom - 5)]))
        painter.end()
