"""Train tab: pick a model, a data folder and settings; train in the background and watch the curves.

Left, scrolled: the basic view (model kind, data folder with its validation report, checked in a worker before
Start is enabled; preset, time budget, device, run name), then the Advanced section, collapsed, with every other
setting (`train_form.SettingsForm`, generated from the trainer's config dataclasses; presets from
`app.services.train_presets`). Under it, never scrolled away: Start / Stop / Resume / Use this model. Right:
progress with ETA, live loss and metric curves, past runs (tick several to overlay their curves) and the log.

Training runs in a separate process (`app.services.training_runs`); a QTimer polls its events at 5 Hz, so
the GUI never blocks and a crashing trainer cannot take the window down.
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal, Slot
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.services import train_presets as tp
from app.services import training_runs as tr
from app.services.registry import ModelRegistry
from app.ui.durations import format_duration
from app.ui.tab_base import JobTab
from app.ui.train_form import BUDGET, LABELS, SettingsForm
from app.ui.widgets import CurveLegend, DecadeAxis, PlotHint, show_axes

KINDS = tr.KINDS  # kind -> label, from the one table of model kinds (core/kinds.py)
POLL_MS = 200
COLOURS = ["#4c9be8", "#e8964c", "#5cb85c", "#c0392b", "#8e44ad", "#16a085", "#d4ac0d"]
STATUS_COLOURS = {"running": "#4c9be8", "finished": "#2e8b57", "failed": "#c0392b", "cancelled": "#888888",
                  "interrupted": "#d68910"}
NO_RUN_HINT = "Start a run, or pick one under Runs, to see its {} here"  # the plots before a run is on show
NOTHING_YET_HINT = "No {} reported yet"  # a run on show whose trainer has not reached its first steps
DATA_HINTS = {"words": "folder with words.csv (path,word,speaker)",
              "units": "folder of speech recordings (optional utterances.csv)",
              "retrieval": "folder with captions.csv, or an AudioCaps .csv / WavCaps .json"}


def titled(legend: CurveLegend, plot: pg.PlotWidget) -> QWidget:
    """The legend row on top of its plot, touching it: one black panel."""
    panel = QWidget()
    column = QVBoxLayout(panel)
    column.setContentsMargins(0, 0, 0, 0)
    column.setSpacing(0)
    column.addWidget(legend)
    column.addWidget(plot, 1)
    return panel


def format_eta(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return ""
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d} left" if h else f"{m}:{s:02d} left"


class TrainTab(JobTab):
    """The Train tab. `model_registered(name)` fires after "Use this model": rescan the registry then."""

    model_registered = Signal(str)
    validated = Signal(object)  # DataReport, after each validation
    schema_ready = Signal(str)  # kind, once its settings form is built
    run_changed = Signal(str)  # status of the run on show, when it changes
    job_prefix = "train"

    def __init__(self, parent: QWidget | None = None, runs_dir: Path | None = None, models_dir: Path | None = None,
                 trainer_module: str | None = None, trainer_path: Path | None = None) -> None:
        super().__init__(parent)
        self.runs_dir = runs_dir
        self.models_dir = models_dir
        self.trainer_module, self.trainer_path = trainer_module, trainer_path  # tests: a fake trainer
        self.registry: ModelRegistry | None = None
        self.report: Any = None  # DataReport of the current (kind, folder)
        self._report_key: tuple[str, str] | None = None
        self.run: tr.Run | None = None  # the run on show (current or picked from the list)
        self._last_status = ""
        self._log_text = ""
        self._progress_text = ""  # the last job progress line shown in the status label
        self._compare: dict[str, tr.Run] = {}
        self._build()
        self.timer = QTimer(self)
        self.timer.setInterval(POLL_MS)
        self.timer.timeout.connect(self.poll)
        self.refresh_runs()
        self.kind_changed()

    # ------------------------------------------------------------------------------------------- building

    def _build(self) -> None:
        left = QWidget()
        form = QVBoxLayout(left)
        basic = QFormLayout()
        basic.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.kind_combo = QComboBox()
        for kind, label in KINDS.items():
            self.kind_combo.addItem(label, kind)
        self.kind_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.kind_combo.setMinimumContentsLength(16)
        self.kind_combo.currentIndexChanged.connect(self.kind_changed)
        basic.addRow("Model", self.kind_combo)
        row = QHBoxLayout()
        self.data_edit = QLineEdit()
        self.data_edit.editingFinished.connect(self.validate)
        browse = QPushButton("Browse…")
        browse.clicked.connect(self.choose_folder)
        row.addWidget(self.data_edit, 1)
        row.addWidget(browse)
        basic.addRow("Data", row)
        self.report_label = QLabel("Choose a data folder; it is checked before training starts.")
        self.report_label.setWordWrap(True)
        self.report_label.setTextFormat(Qt.TextFormat.RichText)
        self.report_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        basic.addRow(self.report_label)

        self.form = SettingsForm(self)
        self.form.edited.connect(self._update_buttons)
        basic.addRow("Preset", self.form.preset_combo)
        basic.addRow("", self.form.preset_note)
        budget_label = QLabel(LABELS[BUDGET][0])
        budget_label.setToolTip("Training stops after this long and keeps its best model so far")
        basic.addRow(budget_label, self.form.budget_row)
        self.device_combo = QComboBox()
        for d in tr.DEVICES:
            self.device_combo.addItem(d, d)
        self.device_combo.setToolTip("auto: a GPU when there is one, else the CPU")
        self.set_devices(["cpu"])
        basic.addRow("Device", self.device_combo)
        self.name_edit = QLineEdit()
        self.name_edit.setToolTip("the run folder's name; also the default name of the trained model")
        basic.addRow("Run name", self.name_edit)
        form.addLayout(basic)
        form.addWidget(self.form.advanced)
        form.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(left)
        self.form_scroll = scroll

        # the actions stay in view under the scrolled form, whatever is expanded above them
        actions = QWidget()
        alay = QVBoxLayout(actions)
        alay.setContentsMargins(4, 4, 4, 0)
        buttons = QHBoxLayout()
        self.start_button = QPushButton("Start")
        self.start_button.setDefault(True)
        self.start_button.clicked.connect(self.start)
        self.cancel_button = QPushButton("Stop")
        self.cancel_button.setToolTip("stop the run; it keeps its best model so far, and Resume goes on from there")
        self.cancel_button.clicked.connect(self.cancel)
        self.resume_button = QPushButton("Resume")
        self.resume_button.clicked.connect(self.resume)
        for b in (self.start_button, self.cancel_button, self.resume_button):
            buttons.addWidget(b)
        alay.addLayout(buttons)
        use = QHBoxLayout()
        self.model_name_edit = QLineEdit()
        self.model_name_edit.setPlaceholderText("model name")
        self.use_button = QPushButton("Use this model")
        self.use_button.setToolTip("copy the finished run's checkpoint into your models; its tab can use it at once")
        self.use_button.clicked.connect(self.use_model)
        use.addWidget(self.model_name_edit, 1)
        use.addWidget(self.use_button)
        alay.addLayout(use)
        self.status_label = QLabel("")
        self.status_label.setWordWrap(True)
        alay.addWidget(self.status_label)
        left_pane = QWidget()
        llay = QVBoxLayout(left_pane)
        llay.setContentsMargins(0, 0, 0, 0)
        llay.addWidget(scroll, 1)
        line = QFrame()
        line.setFrameShape(QFrame.Shape.HLine)
        line.setFrameShadow(QFrame.Shadow.Sunken)
        llay.addWidget(line)
        llay.addWidget(actions)
        left_pane.setMinimumWidth(360)

        right = QWidget()
        rlay = QVBoxLayout(right)
        prow = QHBoxLayout()
        self.progress_bar = QProgressBar()
        self.progress_bar.setRange(0, 1)
        self.progress_bar.setValue(0)
        self.progress_bar.setTextVisible(False)  # no run on show: no bar ("0%" of nothing, or an empty bar that
        self.progress_bar.setFormat("")  # reads as a text box); the plots' hints say how to get a run
        self.progress_bar.setVisible(False)
        self.eta_label = QLabel("")
        prow.addWidget(self.progress_bar, 1)
        prow.addWidget(self.eta_label)
        rlay.addLayout(prow)
        self.loss_plot = pg.PlotWidget(axisItems={"left": DecadeAxis("left")})  # a log axis when losses spread
        self.metric_plot = pg.PlotWidget()
        self.loss_legend, self.metric_legend = CurveLegend("Training loss"), CurveLegend("Metrics")
        plots = QSplitter(Qt.Orientation.Vertical)
        for plot, legend in ((self.loss_plot, self.loss_legend), (self.metric_plot, self.metric_legend)):
            plot.setLabel("bottom", "step")
            plot.showGrid(x=True, y=True, alpha=0.2)
            plot.setMenuEnabled(False)
            plots.addWidget(titled(legend, plot))
        self.loss_hint = PlotHint(self.loss_plot, NO_RUN_HINT.format("training loss"))
        self.metric_hint = PlotHint(self.metric_plot, NO_RUN_HINT.format("metrics"))
        lower = QSplitter(Qt.Orientation.Horizontal)
        runs_box = QGroupBox("Runs (tick to compare)")
        rb = QVBoxLayout(runs_box)
        self.runs_list = QListWidget()
        # a label (name · kind · status · best metric) wraps in the pane: scrolled sideways it was cut at 1024 px
        self.runs_list.setWordWrap(True)
        self.runs_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.runs_list.setResizeMode(QListWidget.ResizeMode.Adjust)  # wrapped again as the pane is resized
        self.runs_list.setSpacing(2)  # wrapped labels: where one run ends and the next begins
        self.runs_list.currentItemChanged.connect(self._run_picked)
        self.runs_list.itemChanged.connect(self._compare_toggled)
        rb.addWidget(self.runs_list)
        log_box = QGroupBox("Log")
        lb = QVBoxLayout(log_box)
        self.log_view = QPlainTextEdit()
        self.log_view.setReadOnly(True)
        self.log_view.setMaximumBlockCount(2000)
        self.log_view.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)  # a long line is read, not cut
        lb.addWidget(self.log_view)
        lower.addWidget(runs_box)
        lower.addWidget(log_box)
        lower.setStretchFactor(0, 3)  # the runs' labels are long; the log wraps its lines anyway
        lower.setStretchFactor(1, 2)
        plots.addWidget(lower)
        plots.setSizes([260, 200, 200])
        rlay.addWidget(plots, 1)

        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(left_pane)
        split.addWidget(right)
        split.setStretchFactor(0, 1)
        split.setStretchFactor(1, 3)  # a wide window gives the form room too (labels and the kind's name in full)
        split.setSizes([400, 700])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(split)
        self._update_buttons()
        self.redraw()  # the empty plots' hints

    # --------------------------------------------------------------------------------------- window API

    def set_registry(self, registry: ModelRegistry) -> None:
        self.registry = registry

    def set_devices(self, devices: list[str]) -> None:
        """Enable the devices this machine has (auto and cpu always)."""
        model = self.device_combo.model()
        for i in range(self.device_combo.count()):
            d = self.device_combo.itemData(i)
            ok = d in ("auto", "cpu") or d in devices
            model.item(i).setEnabled(ok)  # type: ignore[attr-defined]
            self.device_combo.setItemData(i, "" if ok else "not available on this machine",
                                          Qt.ItemDataRole.ToolTipRole)
        if not model.item(self.device_combo.currentIndex()).isEnabled():  # type: ignore[attr-defined]
            self.device_combo.setCurrentIndex(0)

    def kind(self) -> str:
        return str(self.kind_combo.currentData())

    # --------------------------------------------------------------------------------------- jobs

    @Slot(dict)
    def job_progress(self, progress: dict) -> None:
        if progress.get("message"):
            self._progress_text = str(progress["message"])
            self.message(self._progress_text)

    def _progress_done(self) -> None:
        """A finished job's last progress line ("checking audio 90/90") is not news any more: clear it."""
        if self._progress_text and self.status_label.text() == self._progress_text:
            self.message("")
        self._progress_text = ""

    @Slot()
    def kind_changed(self) -> None:
        kind = self.kind()
        self.kind_combo.setToolTip(self.kind_combo.currentText())  # in full where the box is too narrow
        self.form.clear(f"Loading the {kind} trainer…")
        self.data_edit.setPlaceholderText(DATA_HINTS.get(kind, "data folder"))
        self.name_edit.setText(tr.suggest_name(kind, self.runs_dir))
        self.run_job(lambda: tp.form_job(kind, self.trainer_module_for()), f"schema-{kind}",
                     lambda res, kind=kind: self._schema_loaded(kind, res))
        if self.data_edit.text().strip():
            self.validate()
        self._update_buttons()

    def trainer_module_for(self) -> str | None:
        if self.trainer_module and self.trainer_path:
            import sys

            if str(self.trainer_path) not in sys.path:
                sys.path.insert(0, str(self.trainer_path))
        return self.trainer_module

    def _schema_loaded(self, kind: str, result: tuple[list[tr.SettingSpec], list[str], list[tp.Preset]]) -> None:
        if kind != self.kind():
            return
        specs, devices, presets = result
        self.set_devices(devices)
        self.form.build(specs, presets)
        self._progress_done()
        self._update_buttons()
        self.schema_ready.emit(kind)

    @Slot()
    def choose_folder(self) -> None:
        start = self.data_edit.text() or str(Path.home())
        folder = QFileDialog.getExistingDirectory(self, "Training data folder", start)
        if folder:
            self.set_data_folder(folder)

    def set_data_folder(self, folder: str | Path) -> None:
        self.data_edit.setText(str(folder))
        self.validate()

    @Slot()
    def validate(self) -> None:
        folder = self.data_edit.text().strip()
        if not folder:
            return
        key = (self.kind(), folder)
        if key == self._report_key and self.report is not None:
            return
        self.report, self._report_key = None, key
        self.report_label.setText(f"Checking {html.escape(folder)}…")
        self._update_buttons()
        self.run_job(lambda: tr.validate_job(key[0], key[1]), "validate",
                     lambda report, key=key: self._validated(key, report))

    def _validated(self, key: tuple[str, str], report: Any) -> None:  # noqa: ANN401 - a DataReport
        if key != (self.kind(), self.data_edit.text().strip()):
            return  # a stale answer for another folder or kind
        self.report = report
        self.report_label.setText(report_html(report))
        self._progress_done()
        self._update_buttons()
        self.validated.emit(report)

    # --------------------------------------------------------------------------------------- the form

    @property
    def specs(self) -> list[tr.SettingSpec]:
        return self.form.specs

    @property
    def inputs(self) -> dict[str, QWidget]:
        return self.form.inputs

    def settings(self) -> dict[str, Any]:
        """The form's values (those left to the trainer are not passed)."""
        return self.form.settings()

    def set_setting(self, name: str, value: Any) -> None:  # noqa: ANN401 - any setting value
        """Fill one field of the form, as a person would (the preset box then says Custom)."""
        self.form.set_value(name, value)

    def choose_preset(self, name: str) -> None:
        """Choose a preset by name, as a person would in the preset box."""
        self.form.preset_combo.setCurrentText(name)
        self.form.preset_combo.activated.emit(self.form.preset_combo.currentIndex())

    # --------------------------------------------------------------------------------------- runs

    @Slot()
    def start(self) -> None:
        if not self._can_start():
            return
        try:
            run = tr.start_run(self.kind(), self.name_edit.text(), self.data_edit.text().strip(), self.settings(),
                               device=str(self.device_combo.currentData()), base=self.runs_dir,
                               module=self.trainer_module_for(), module_path=self.trainer_path)
        except (tr.RunError, OSError) as e:
            self.error(str(e))
            return
        self.message(f"Started {run.name}")
        self._show_run(run)
        self.refresh_runs()
        self.name_edit.setText(tr.suggest_name(self.kind(), self.runs_dir))

    @Slot()
    def cancel(self) -> None:
        if self.run is not None and self.run.status == "running":
            self.run.cancel()
            self.message(f"Stopping {self.run.name}: the trainer keeps its last good checkpoint…")
            self._update_buttons()

    @Slot()
    def resume(self) -> None:
        if self.run is None:
            return
        try:
            self.run.resume()
        except (tr.RunError, OSError) as e:
            self.error(str(e))
            return
        self.message(f"Resumed {self.run.name}")
        self._show_run(self.run)

    @Slot()
    def use_model(self) -> None:
        if self.run is None:
            return
        name = self.model_name_edit.text().strip() or self.run.name
        try:
            path = tr.register_model(self.run, name, self.models_dir)
        except (tr.RunError, OSError) as e:
            self.error(str(e))
            return
        if self.registry is not None:
            try:
                self.registry.scan()
            except OSError as e:
                self.error(f"model saved, but the model list could not be read: {e}")
        self.message(f"Model {name} saved to {path}; it is available in its tab now")
        self.model_registered.emit(name)
        self._update_buttons()

    def _show_run(self, run: tr.Run) -> None:
        self.run = run
        self._last_status = ""
        self._log_text = ""
        self.log_view.clear()  # a run without a log yet must not show the last run's
        self.model_name_edit.setText(run.name)
        self.redraw()
        self.poll()
        if not self.timer.isActive():
            self.timer.start()

    @Slot()
    def poll(self) -> None:
        run = self.run
        if run is None:
            self.timer.stop()
            return
        new = run.poll()
        if new:
            self.redraw()
        step, total, eta = run.progress()
        self.progress_bar.setRange(0, max(total, 1))
        self.progress_bar.setValue(min(step, max(total, 1)))
        self.progress_bar.setTextVisible(True)
        self.progress_bar.setFormat(f"{run.name}: {step}/{total} ({run.status})" if total else run.status)
        self.progress_bar.setVisible(True)
        self.eta_label.setText(format_eta(eta) if run.status == "running" else "")
        tail = run.log_tail(6000)
        if tail != self._log_text:
            self._log_text = tail
            self.log_view.setPlainText(tail)
            self.log_view.verticalScrollBar().setValue(self.log_view.verticalScrollBar().maximum())
        if run.status != self._last_status:
            self._last_status = run.status
            self._status_reached(run)
        if run.status != "running" and not run.is_active():
            self.timer.stop()
            self._update_buttons()  # Resume waits for the process to be gone, which can come after its last word

    def _status_reached(self, run: tr.Run) -> None:
        if run.status == "finished":
            self.message(f"{finished_summary(run)} — Use this model to keep it")
        elif run.status == "failed":
            self.error(f"{run.name} failed: {run.error or 'see the log'}")
        elif run.status == "interrupted":
            self.error(f"{run.name} was interrupted (the process is gone); Resume continues from its last save")
        elif run.status == "cancelled":
            self.message(f"{run.name} cancelled; Resume continues from its last save")
        self._update_buttons()
        self.refresh_runs()
        self.run_changed.emit(run.status)

    def refresh_runs(self) -> None:
        """The past-runs list, keeping the ticks and the current row."""
        checked = set(self._compare)
        current = self.run.name if self.run else None
        self.runs_list.blockSignals(True)
        self.runs_list.clear()
        try:
            runs = tr.list_runs(self.runs_dir)
        except OSError as e:
            runs = []
            self.error(f"cannot list runs: {e}")
        for run in runs:
            if current == run.name and self.run is not None:
                run = self.run  # keep the live object (its process handle and offsets)
            item = QListWidgetItem(run_label(run))
            item.setData(Qt.ItemDataRole.UserRole, run.name)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Checked if run.name in checked else Qt.CheckState.Unchecked)
            item.setForeground(QColor(STATUS_COLOURS.get(run.status, "#000000")))
            item.setToolTip(f"{item.text()}\ndata: {run.info.get('data')}\ncreated: {run.info.get('created')}")
            self.runs_list.addItem(item)
            if run.name == current:
                self.runs_list.setCurrentItem(item)
            if run.name in checked:
                self._compare[run.name] = run
        self._runs = {r.name: (self.run if self.run is not None and r.name == current else r) for r in runs}
        self.runs_list.blockSignals(False)

    def _run_picked(self, item: QListWidgetItem | None, _previous: QListWidgetItem | None = None) -> None:
        if item is None:
            return
        name = item.data(Qt.ItemDataRole.UserRole)
        if self.run is not None and self.run.name == name:
            return
        run = self._runs.get(name)
        if run is not None:
            self._show_run(run)
            self._update_buttons()

    def _compare_toggled(self, item: QListWidgetItem) -> None:
        name = item.data(Qt.ItemDataRole.UserRole)
        if item.checkState() == Qt.CheckState.Checked and name in self._runs:
            self._compare[name] = self._runs[name]
        else:
            self._compare.pop(name, None)
        self.redraw()

    def redraw(self) -> None:
        """Loss and metric curves of the run on show (thick) and of the ticked runs (thin, dashed)."""
        self.loss_plot.clear()
        self.metric_plot.clear()
        shown = [(self.run, True)] if self.run is not None else []
        shown += [(r, False) for n, r in self._compare.items() if self.run is None or n != self.run.name]
        colour = 0
        losses: list[float] = []
        for run, main in shown:
            curves = run.curves()
            for key, (xs, ys) in curves.items():
                is_loss = key.startswith("loss")
                plot = self.loss_plot if is_loss else self.metric_plot
                pen = pg.mkPen(COLOURS[colour % len(COLOURS)], width=2 if main else 1,
                               style=Qt.PenStyle.SolidLine if main else Qt.PenStyle.DashLine)
                label = key if main else f"{run.name}: {key}"
                plot.plot(xs, ys, pen=pen, name=label)
                losses += ys if is_loss else []
                colour += 1
        self.loss_legend.show_curves(self.loss_plot)
        self.metric_legend.show_curves(self.metric_plot)
        # an empty plot says why (no run yet, or none of its steps yet) instead of bare 0..1 axes
        for plot, hint, what, drawn in ((self.loss_plot, self.loss_hint, "training loss", bool(losses)),
                                        (self.metric_plot, self.metric_hint, "metrics",
                                         bool(self.metric_plot.listDataItems()))):
            hint.setText((NO_RUN_HINT if not shown else NOTHING_YET_HINT).format(what))
            hint.setVisible(not drawn)
            show_axes(plot, drawn)
        # losses of different stages or runs can differ by orders of magnitude: a log axis keeps all readable
        spread = bool(losses) and min(losses) > 0 and max(losses) / min(losses) > 30
        self.loss_plot.setLogMode(y=spread)
        self.loss_plot.getAxis("left").setStyle(maxTextLevel=0 if spread else 2)  # log: label the decades only

    # --------------------------------------------------------------------------------------- state

    def _can_start(self) -> bool:
        active = self.run is not None and self.run.status == "running"
        key_ok = self._report_key == (self.kind(), self.data_edit.text().strip())
        return bool(self.specs) and self.report is not None and self.report.ok and key_ok and not active

    def _update_buttons(self) -> None:
        run = self.run
        self.start_button.setEnabled(self._can_start())
        self.start_button.setToolTip("" if self._can_start() else
                                     "choose a data folder that passes the check (and wait for the settings)")
        self.cancel_button.setEnabled(run is not None and run.status == "running"
                                      and not run.info.get("cancel_requested"))
        self.resume_button.setEnabled(run is not None and run.can_resume())
        self.use_button.setEnabled(run is not None and run.status == "finished")

    @Slot(str)
    def message(self, text: str) -> None:
        self.status_label.setStyleSheet("")
        self.status_label.setText(text)
        self.status_changed.emit(text)

    @Slot(str)
    def error(self, text: str) -> None:
        self.status_label.setStyleSheet("color: #c0392b;")
        self.status_label.setText(text)
        self.status_changed.emit(text)

    def shutdown(self, timeout_ms: int = 5000, stop_runs: bool = False) -> None:
        """Stop polling and this tab's jobs. Training processes keep going unless `stop_runs` (they are
        separate processes; the next session finds them in the runs list)."""
        self.timer.stop()
        if stop_runs and self.run is not None and self.run.status == "running":
            self.run.cancel()
            self.run.wait(timeout_ms / 1000)
        self.stop_jobs(timeout_ms)


# ------------------------------------------------------------------------------------------------ helpers


def report_html(report: Any) -> str:  # noqa: ANN401 - a DataReport
    """The validation report: counts, problems in red, warnings in amber."""
    c = report.counts
    facts = []
    for key, label in (("rows", "rows"), ("clips", "clips"), ("audio_files", "audio files"),
                       ("speakers", "speakers"), ("words", "words"), ("captions", "captions")):
        if c.get(key):
            facts.append(f"{c[key]} {label}")
    if c.get("total_duration_s"):
        seconds, approx = c["total_duration_s"], "~" if c.get("duration_estimated") else ""
        amount = f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s"
        facts.append(f"{approx}{amount} of audio")
    if c.get("splits"):
        facts.append("splits " + ", ".join(f"{k} {v}" for k, v in c["splits"].items()))
    head = "<b style='color:#2e8b57'>Ready to train</b>" if report.ok else "<b style='color:#c0392b'>Not usable</b>"
    parts = [f"{head} — {html.escape(report.layout or report.folder)}"]
    if facts:
        parts.append(html.escape(" · ".join(facts)))
    parts += [f"<span style='color:#c0392b'>✗ {html.escape(p)}</span>" for p in report.problems]
    parts += [f"<span style='color:#b9770e'>! {html.escape(w)}</span>" for w in report.warnings]
    return "<br>".join(parts)


RESULT_BOOKKEEPING = {"wall_time_s", "best_value", "best_epoch", "steps", "epochs"}  # of a result, not metrics
STOPPED_WHY = {"time_limit": "its time budget", "early_stopping": "no more progress"}


def finished_summary(run: tr.Run, limit: int = 4) -> str:
    """How long a finished run took (and why it stopped, if not at its end), then its metrics by their own
    names, the best one first: the result's scalars flatten `metrics` to "metrics.<name>" and keep the run's
    bookkeeping (wall_time_s, steps) beside them, which is no metric to show."""
    result = run.result if run.result is not None else run.info.get("result") or {}
    scalars = run.metrics()
    seconds = scalars.get("wall_time_s")
    named = {k.removeprefix("metrics."): v for k, v in scalars.items() if k.startswith("metrics.")}
    if not named:  # a trainer without the common result schema: its own scalars are its metrics
        named = {k: v for k, v in scalars.items() if k not in RESULT_BOOKKEEPING}
    best = result.get("best_metric")
    order = sorted(named, key=lambda k: k != best)  # stable: the best first, the rest as the trainer gave them
    metrics = ", ".join(f"{k} {named[k]:.3g}" for k in order[:limit])
    took = f" in {format_duration(seconds, rough=True)}" if isinstance(seconds, int | float) else ""
    why = STOPPED_WHY.get(str(result.get("stopped")))
    return f"{run.name} finished{took}" + (f" ({why})" if why else "") + (f": {metrics}" if metrics else "")


def run_label(run: tr.Run) -> str:
    """Name, kind, status and the best metric of a finished run, read from the trainers' one result schema
    (training.trainer.TrainResult: `best_metric`, `best_value`) whatever the kind."""
    result = run.result if run.result is not None else run.info.get("result") or {}
    name, value = result.get("best_metric"), result.get("best_value")
    if value is None and name:
        value = run.metrics().get(name)
    shown = f" · {name} {value:.3g}" if name and isinstance(value, int | float) else ""
    return f"{run.name} · {run.kind} · {run.status}{shown}"
