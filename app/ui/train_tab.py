"""Train tab: pick a model, a data folder and settings; train in the background and watch the curves.

The tab draws a Qt-free `TrainState` (`train_state.py`: kind, data folder and its report, the run on show, the
runs compared) with its panels (`train_controls.py`, `train_monitor.py`; texts in `train_text.py`). Left,
scrolled: the basic view (model kind, data folder with its validation report, checked in a worker before Start
is enabled; preset, time budget, device, the run's estimated time, run name), then the Advanced section,
collapsed, with every other setting (`train_form.SettingsForm`, generated from the trainer's config dataclasses;
presets from `app.services.training.presets`). Under it, never scrolled away: Start / Stop / Resume / Use this
model. Right: progress with ETA, live loss and metric curves, past runs (tick several to overlay their curves)
and the log.

The estimate is measured in a worker (`app.services.training.estimate`: the trainer on the data for a few
steps) once the settings are still a moment. Training runs in a separate process (`app.services.training.runs`);
a QTimer polls its events at 5 Hz, so the GUI never blocks and a crashing trainer cannot take the window down.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import QFileDialog, QFrame, QSplitter, QVBoxLayout, QWidget

from app.services.registry import ModelRegistry
from app.services.training import estimate as te
from app.services.training import presets as tp
from app.services.training import runs as tr
from app.ui.tab_base import JobTab
from app.ui.train_controls import TrainActions, TrainSettingsPane
from app.ui.train_form import SettingsForm
from app.ui.train_monitor import TrainMonitor
from app.ui.train_state import TrainState
from app.ui.train_text import finished_summary, format_eta, report_html, run_label  # noqa: F401 - their old home
from app.workers import JobRunner

KINDS = tr.KINDS  # kind -> label, from the one table of model kinds (core/kinds.py)
POLL_MS = 200
PLAN_STILL_MS = 600  # the settings unchanged this long before the estimate is measured again


class TrainTab(JobTab):
    """The Train tab. `model_registered(name)` fires after "Use this model": rescan the registry then."""

    model_registered = Signal(str)
    validated = Signal(object)  # DataReport, after each validation
    schema_ready = Signal(str)  # kind, once its settings form is built
    run_changed = Signal(str)  # status of the run on show, when it changes
    estimated = Signal(str)  # the estimate's line, once measured (or why there is none)
    job_prefix = "train"

    def __init__(self, parent: QWidget | None = None, runs_dir: Path | None = None, models_dir: Path | None = None,
                 trainer_module: str | None = None, trainer_path: Path | None = None) -> None:
        super().__init__(parent)
        self.runs_dir = runs_dir
        self.models_dir = models_dir
        self.trainer_module, self.trainer_path = trainer_module, trainer_path  # tests: a fake trainer
        self.registry: ModelRegistry | None = None
        self.train_state = TrainState()
        self.train_state.module = trainer_module
        self.devices: list[str] = ["cpu"]  # what this machine has, once the schema job said
        self.measurements = te.MeasurementCache(runs_dir)
        self.measurer: JobRunner | None = None  # the estimate's measuring job, while it runs
        self._build()
        self.timer = QTimer(self)
        self.timer.setInterval(POLL_MS)
        self.timer.timeout.connect(self.poll)
        self.plan_timer = QTimer(self)
        self.plan_timer.setSingleShot(True)
        self.plan_timer.setInterval(PLAN_STILL_MS)
        self.plan_timer.timeout.connect(self.estimate)
        self._listen()
        self.refresh_runs()
        self.kind_changed()

    # ------------------------------------------------------------------------------------ what the state holds

    @property
    def run(self) -> tr.Run | None:
        """The run on show (current or picked from the list)."""
        return self.train_state.run

    @property
    def report(self) -> Any:  # noqa: ANN401 - a DataReport
        """The DataReport of the current (kind, folder); None while it is checked."""
        return self.train_state.report

    # ------------------------------------------------------------------------------------------- building

    def _build(self) -> None:
        self.form = SettingsForm(self)
        self.settings_pane = TrainSettingsPane(self.form)
        self.actions = TrainActions()
        self.monitor = TrainMonitor(self.train_state)
        left_pane = QWidget()
        llay = QVBoxLayout(left_pane)
        llay.setContentsMargins(0, 0, 0, 0)
        llay.addWidget(self.settings_pane, 1)
        line = QFrame()
        line.setFrameShape(QFrame.Shape.HLine)
        line.setFrameShadow(QFrame.Shadow.Sunken)
        llay.addWidget(line)
        llay.addWidget(self.actions)  # the actions stay in view under the scrolled form
        left_pane.setMinimumWidth(360)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(left_pane)
        split.addWidget(self.monitor)
        split.setStretchFactor(0, 1)
        split.setStretchFactor(1, 3)  # a wide window gives the form room too (labels and the kind's name in full)
        split.setSizes([400, 700])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(split)
        self._name_widgets()
        self._connect_widgets()
        self.set_devices(["cpu"])

    def _name_widgets(self) -> None:
        """The panels' widgets under the names the tab has always had (tests, screenshots)."""
        self.form_scroll = self.settings_pane
        named = {self.settings_pane: ("kind_combo", "data_edit", "report_label", "device_combo", "estimate_label",
                                      "name_edit"),
                 self.actions: ("start_button", "cancel_button", "resume_button", "model_name_edit", "use_button",
                                "status_label"),
                 self.monitor: ("progress_bar", "eta_label", "loss_plot", "metric_plot", "count_plot", "loss_legend",
                                "metric_legend", "count_legend", "loss_hint", "metric_hint", "runs_list",
                                "log_view")}
        for panel, names in named.items():
            for name in names:
                setattr(self, name, getattr(panel, name))

    def _connect_widgets(self) -> None:
        self.kind_combo.currentIndexChanged.connect(self.kind_changed)
        self.data_edit.textChanged.connect(self.train_state.set_folder)
        self.data_edit.editingFinished.connect(self.validate)
        self.settings_pane.browse_button.clicked.connect(self.choose_folder)
        self.form.edited.connect(self._update_buttons)
        self.form.edited.connect(self.plan_changed)
        self.device_combo.currentIndexChanged.connect(self.plan_changed)
        self.start_button.clicked.connect(self.start)
        self.cancel_button.clicked.connect(self.cancel)
        self.resume_button.clicked.connect(self.resume)
        self.use_button.clicked.connect(self.use_model)
        self.monitor.run_picked.connect(self.train_state.pick)
        self.monitor.run_ticked.connect(self.train_state.tick)

    def _listen(self) -> None:
        events = self.train_state.events
        events.buttons.connect(self._update_buttons)
        events.message.connect(self._show_message)
        events.report.connect(self._draw_report)
        events.run.connect(self._run_shown)
        events.status.connect(self._status_reached)
        events.buttons.connect(self.plan_changed)
        events.estimate.connect(self._draw_estimate)
        self._update_buttons()
        self.monitor.redraw()  # the empty plots' hints

    # --------------------------------------------------------------------------------------- window API

    def set_registry(self, registry: ModelRegistry) -> None:
        self.registry = registry

    def set_devices(self, devices: list[str]) -> None:
        """Enable the devices this machine has (auto and cpu always)."""
        self.devices = list(devices)
        self.settings_pane.set_devices(devices)

    def kind(self) -> str:
        return str(self.kind_combo.currentData())

    # --------------------------------------------------------------------------------------- jobs

    @Slot(dict)
    def job_progress(self, progress: dict) -> None:
        self.train_state.job_progress(progress)

    @Slot()
    def kind_changed(self) -> None:
        kind = self.kind()
        self.train_state.set_kind(kind)
        self.settings_pane.show_kind(kind)
        self.form.clear(f"Loading the {kind} trainer…")
        self.name_edit.setText(tr.suggest_name(kind, self.runs_dir))
        self.run_job(lambda: tp.form_job(kind, self.trainer_module_for()), f"schema-{kind}",
                     lambda res, kind=kind: self._schema_loaded(kind, res))
        if self.data_edit.text().strip():
            self.validate()

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
        if self.train_state.settings_loaded(kind, bool(specs)):
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
        key = self.train_state.check_folder(self.data_edit.text())
        if key is not None:
            self.run_job(lambda: tr.validate_job(key[0], key[1]), "validate",
                         lambda report, key=key: self._validated(key, report))

    def _validated(self, key: tuple[str, str], report: Any) -> None:  # noqa: ANN401 - a DataReport
        if self.train_state.validated(key, report):
            self.validated.emit(report)

    def _draw_report(self) -> None:
        state = self.train_state
        self.report_label.setText(report_html(state.report) if state.report is not None
                                  else f"Checking {html.escape(state.folder)}…")

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

    # --------------------------------------------------------------------------------------- the estimate

    @Slot()
    def plan_changed(self) -> None:
        """Settings, device, data or buttons changed: estimate again once they have been still a moment."""
        self.plan_timer.start()

    @Slot()
    def estimate(self) -> None:
        """The estimate of what Start would run: the same measurement, a kept one, or a new one measured."""
        self.plan_timer.stop()
        state = self.train_state
        key = state.set_plan(self.settings(), str(self.device_combo.currentData()), self.devices)
        if state.plan is None or key is not None:
            self._stop_measuring()
        if key is None:
            return
        kept = self.measurements.get(key)
        if kept is not None:
            state.measured(key, kept)
            return
        plan = state.plan
        self.measurer = self.run_job(
            lambda: te.measure_job(state.kind, state.folder, plan.settings, plan.device, self.runs_dir,
                                   self.trainer_module_for(), self.trainer_path),
            "estimate", lambda m, key=key: self._measured(key, m),
            on_error=lambda why, key=key: state.measure_failed(key, why),
            on_progress=lambda progress, key=key: state.measure_progress(key, progress))

    def _measured(self, key: str, measurement: te.Measurement) -> None:
        self.measurements.put(key, measurement, self.train_state.kind, str(self.device_combo.currentData()))
        self.train_state.measured(key, measurement)

    def _stop_measuring(self) -> None:
        """Cancel the measuring job (its scratch trainer is killed at its next poll); no wait."""
        if self.measurer is not None and self.measurer.is_running():
            self.measurer.cancel()
        self.measurer = None

    def job_ended(self, runner: JobRunner) -> None:
        if runner is self.measurer:
            self.measurer = None

    def _draw_estimate(self) -> None:
        line = self.train_state.estimate_line()
        self.settings_pane.show_estimate(line)
        plan = self.train_state.plan
        if plan is not None and plan.status != "measuring":
            self.estimated.emit(line)

    # --------------------------------------------------------------------------------------- runs

    @Slot()
    def start(self) -> None:
        if not self.train_state.can_start():
            return
        self._stop_measuring()  # it would take the CPU from the run (and its numbers from the ETA)
        try:
            run = tr.start_run(self.kind(), self.name_edit.text(), self.train_state.folder, self.settings(),
                               device=str(self.device_combo.currentData()), base=self.runs_dir,
                               module=self.trainer_module_for(), module_path=self.trainer_path)
        except (tr.RunError, OSError) as e:
            self.error(str(e))
            return
        self.message(f"Started {run.name}")
        self.train_state.show_run(run)
        self.refresh_runs()
        self.name_edit.setText(tr.suggest_name(self.kind(), self.runs_dir))

    @Slot()
    def cancel(self) -> None:
        if self.train_state.running():
            self.run.cancel()
            self.train_state.stopping()

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
        self.train_state.show_run(self.run)

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

    def _run_shown(self) -> None:
        self.model_name_edit.setText(self.run.name)
        if not self.timer.isActive():
            self.timer.start()

    @Slot()
    def poll(self) -> None:
        if not self.train_state.poll():
            self.timer.stop()

    def _status_reached(self, status: str) -> None:
        self.refresh_runs()
        self.run_changed.emit(status)

    def refresh_runs(self) -> None:
        """The past-runs list, keeping the ticks and the current row."""
        try:
            runs = tr.list_runs(self.runs_dir)
        except OSError as e:
            runs = []
            self.error(f"cannot list runs: {e}")
        self.train_state.set_runs(runs)
        self.monitor.draw_runs(runs)

    def redraw(self) -> None:
        """Loss and metric curves of the run on show (thick) and of the ticked runs (thin, dashed)."""
        self.monitor.redraw()

    # --------------------------------------------------------------------------------------- state

    def _update_buttons(self) -> None:
        self.actions.draw(self.train_state.buttons())

    def _show_message(self, text: str, error: bool) -> None:
        self.actions.show_message(text, error)
        self.status_changed.emit(text)

    @Slot(str)
    def message(self, text: str) -> None:
        self.train_state.say(text)

    @Slot(str)
    def error(self, text: str) -> None:
        self.train_state.error(text)

    def shutdown(self, timeout_ms: int = 5000, stop_runs: bool = False) -> None:
        """Stop polling and this tab's jobs. Training processes keep going unless `stop_runs` (they are
        separate processes; the next session finds them in the runs list)."""
        self.timer.stop()
        self.plan_timer.stop()
        if stop_runs and self.train_state.running():
            self.run.cancel()
            self.run.wait(timeout_ms / 1000)
        self.stop_jobs(timeout_ms)
