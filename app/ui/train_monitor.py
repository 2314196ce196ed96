"""The Train tab's right side, drawn from a `TrainState`: the run on show's progress and time left, its loss and
metric curves (thick) beside those of the runs ticked to compare (thin, dashed), the past runs and the log.

Metrics go on two plots, side by side: scores and rates (AP, mAP, recall: 0..1) on one, counts and ranks
(n_captions, mean rank, perplexity) on the other, shown only when there are some; on one axis a count of 210
flattened an mAP of 0.078 to a line along the bottom."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QProgressBar,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.services.training import runs as tr
from app.ui.train_state import TrainState, is_score
from app.ui.train_text import run_label
from app.ui.widgets import CurveLegend, DecadeAxis, PlotHint, show_axes

COLOURS = ["#4c9be8", "#e8964c", "#5cb85c", "#c0392b", "#8e44ad", "#16a085", "#d4ac0d"]
STATUS_COLOURS = {"running": "#4c9be8", "finished": "#2e8b57", "failed": "#c0392b", "cancelled": "#888888",
                  "interrupted": "#d68910"}
NO_RUN_HINT = "Start a run, or pick one under Runs, to see its {} here"  # the plots before a run is on show
NOTHING_YET_HINT = "No {} reported yet"  # a run on show whose trainer has not reached its first steps
PREPARING_HINT = "Preparing: {} — the {} start with the first training step"  # a running trainer's data pass


def titled(legend: CurveLegend, plot: pg.PlotWidget) -> QWidget:
    """The legend row on top of its plot, touching it: one black panel."""
    panel = QWidget()
    column = QVBoxLayout(panel)
    column.setContentsMargins(0, 0, 0, 0)
    column.setSpacing(0)
    column.addWidget(legend)
    column.addWidget(plot, 1)
    return panel


def run_entry(run: tr.Run, ticked: bool) -> QListWidgetItem:
    """A run's line in the list: tickable, coloured by its status, its data and creation in the tooltip."""
    item = QListWidgetItem(run_label(run))
    item.setData(Qt.ItemDataRole.UserRole, run.name)
    item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
    item.setCheckState(Qt.CheckState.Checked if ticked else Qt.CheckState.Unchecked)
    item.setForeground(QColor(STATUS_COLOURS.get(run.status, "#000000")))
    item.setToolTip(f"{item.text()}\ndata: {run.info.get('data')}\ncreated: {run.info.get('created')}")
    return item


class TrainMonitor(QWidget):
    run_picked = Signal(str)  # a run's name, picked in the list
    run_ticked = Signal(str, bool)  # a run's name, ticked (True) or not

    def __init__(self, state: TrainState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self._log = ""  # the log text shown
        column = QVBoxLayout(self)
        column.addLayout(self._progress_row())
        plots = QSplitter(Qt.Orientation.Vertical)
        self.loss_plot = pg.PlotWidget(axisItems={"left": DecadeAxis("left")})  # a log axis when losses spread
        self.metric_plot, self.count_plot = pg.PlotWidget(), pg.PlotWidget()  # scores and rates | counts, ranks
        self.loss_legend, self.metric_legend = CurveLegend("Training loss"), CurveLegend("Scores")
        self.count_legend = CurveLegend("Counts and ranks")
        panels = [titled(legend, plot) for plot, legend in ((self.loss_plot, self.loss_legend),
                                                            (self.metric_plot, self.metric_legend),
                                                            (self.count_plot, self.count_legend))]
        for plot in (self.loss_plot, self.metric_plot, self.count_plot):
            plot.setLabel("bottom", "step")
            plot.showGrid(x=True, y=True, alpha=0.2)
            plot.setMenuEnabled(False)
        self.count_panel = panels[2]
        metrics = QSplitter(Qt.Orientation.Horizontal)
        metrics.addWidget(panels[1])
        metrics.addWidget(self.count_panel)
        self.count_panel.setVisible(False)  # until a run on show reports a count or a rank
        plots.addWidget(panels[0])
        plots.addWidget(metrics)
        self.loss_hint = PlotHint(self.loss_plot, NO_RUN_HINT.format("training loss"))
        self.metric_hint = PlotHint(self.metric_plot, NO_RUN_HINT.format("metrics"))
        plots.addWidget(self._runs_and_log())
        plots.setSizes([260, 200, 200])
        column.addWidget(plots, 1)
        state.events.run.connect(self.clear_log)
        state.events.curves.connect(self.redraw)
        state.events.progress.connect(self.draw_progress)

    def _progress_row(self) -> QHBoxLayout:
        self.progress_bar = QProgressBar()
        self.progress_bar.setRange(0, 1)
        self.progress_bar.setValue(0)
        self.progress_bar.setTextVisible(False)  # no run on show: no bar ("0%" of nothing, or an empty bar that
        self.progress_bar.setFormat("")  # reads as a text box); the plots' hints say how to get a run
        self.progress_bar.setVisible(False)
        self.eta_label = QLabel("")
        row = QHBoxLayout()
        row.addWidget(self.progress_bar, 1)
        row.addWidget(self.eta_label)
        return row

    def _runs_and_log(self) -> QSplitter:
        lower = QSplitter(Qt.Orientation.Horizontal)
        runs_box = QGroupBox("Runs (tick to compare)")
        self.runs_list = QListWidget()
        # a label (name · kind · status · best metric) wraps in the pane: scrolled sideways it was cut at 1024 px
        self.runs_list.setWordWrap(True)
        self.runs_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.runs_list.setResizeMode(QListWidget.ResizeMode.Adjust)  # wrapped again as the pane is resized
        self.runs_list.setSpacing(2)  # wrapped labels: where one run ends and the next begins
        self.runs_list.currentItemChanged.connect(self._picked)
        self.runs_list.itemChanged.connect(self._ticked)
        QVBoxLayout(runs_box).addWidget(self.runs_list)
        log_box = QGroupBox("Log")
        self.log_view = QPlainTextEdit()
        self.log_view.setReadOnly(True)
        self.log_view.setMaximumBlockCount(2000)
        self.log_view.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)  # a long line is read, not cut
        QVBoxLayout(log_box).addWidget(self.log_view)
        lower.addWidget(runs_box)
        lower.addWidget(log_box)
        lower.setStretchFactor(0, 3)  # the runs' labels are long; the log wraps its lines anyway
        lower.setStretchFactor(1, 2)
        return lower

    # ------------------------------------------------------------------------------------------ the runs

    def draw_runs(self, runs: list[tr.Run]) -> None:
        """The runs list, keeping the ticks and the run on show as the current row; no signals."""
        current = self.state.run.name if self.state.run is not None else None
        self.runs_list.blockSignals(True)
        self.runs_list.clear()
        for run in runs:
            item = run_entry(self.state.runs.get(run.name, run), run.name in self.state.compare)
            self.runs_list.addItem(item)
            if run.name == current:
                self.runs_list.setCurrentItem(item)
        self.runs_list.blockSignals(False)

    def _picked(self, item: QListWidgetItem | None, _previous: QListWidgetItem | None = None) -> None:
        if item is not None:
            self.run_picked.emit(item.data(Qt.ItemDataRole.UserRole))

    def _ticked(self, item: QListWidgetItem) -> None:
        self.run_ticked.emit(item.data(Qt.ItemDataRole.UserRole), item.checkState() == Qt.CheckState.Checked)

    # ------------------------------------------------------------------------------------------ the run on show

    def clear_log(self) -> None:
        self._log = ""
        self.log_view.clear()  # a run without a log yet must not show the last run's

    def draw_progress(self) -> None:
        progress = self.state.progress()
        if progress is None:
            return
        top = max(progress.total, 1)
        self.progress_bar.setRange(0, top)
        self.progress_bar.setValue(min(progress.step, top))
        self.progress_bar.setTextVisible(True)
        self.progress_bar.setFormat(progress.text)
        self.progress_bar.setVisible(True)
        self.eta_label.setText(progress.eta)
        if progress.preparing:  # the plots are empty until the first step: they say what comes first
            self.loss_hint.setText(PREPARING_HINT.format(progress.preparing, "curves"))
            self.metric_hint.setText(PREPARING_HINT.format(progress.preparing, "metrics"))
        if self.state.log_text != self._log:
            self._log = self.state.log_text
            self.log_view.setPlainText(self._log)
            self.log_view.verticalScrollBar().setValue(self.log_view.verticalScrollBar().maximum())

    def redraw(self) -> None:
        """Loss and metric curves of the run on show (thick) and of the ticked runs (thin, dashed)."""
        for plot in (self.loss_plot, self.metric_plot, self.count_plot):
            plot.clear()
        shown = self.state.shown()
        losses = self._plot_curves(shown)
        for plot, legend in ((self.loss_plot, self.loss_legend), (self.metric_plot, self.metric_legend),
                             (self.count_plot, self.count_legend)):
            legend.show_curves(plot)
        self.count_panel.setVisible(bool(self.count_plot.listDataItems()))
        # an empty plot says why (no run yet, or none of its steps yet) instead of bare 0..1 axes
        for plot, hint, what, drawn in ((self.loss_plot, self.loss_hint, "training loss", bool(losses)),
                                        (self.metric_plot, self.metric_hint, "metrics",
                                         bool(self.metric_plot.listDataItems()))):
            hint.setText((NO_RUN_HINT if not shown else NOTHING_YET_HINT).format(what))
            hint.setVisible(not drawn)
            show_axes(plot, drawn)
        self.draw_progress()  # a run still preparing: its hints say what it does
        # losses of different stages or runs can differ by orders of magnitude: a log axis keeps all readable
        spread = bool(losses) and min(losses) > 0 and max(losses) / min(losses) > 30
        self.loss_plot.setLogMode(y=spread)
        self.loss_plot.getAxis("left").setStyle(maxTextLevel=0 if spread else 2)  # log: label the decades only

    def _plot_curves(self, shown: list[tuple[tr.Run, bool]]) -> list[float]:
        """Every curve of the runs shown, one colour each; returns the loss values drawn."""
        colour, losses = 0, []
        for run, main in shown:
            for key, (xs, ys) in run.curves().items():
                is_loss = key.startswith("loss")
                pen = pg.mkPen(COLOURS[colour % len(COLOURS)], width=2 if main else 1,
                               style=Qt.PenStyle.SolidLine if main else Qt.PenStyle.DashLine)
                plot = self.loss_plot if is_loss else self.metric_plot if is_score(key, ys) else self.count_plot
                plot.plot(xs, ys, pen=pen, name=key if main else f"{run.name}: {key}")
                losses += ys if is_loss else []
                colour += 1
        return losses
