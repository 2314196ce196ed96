"""What every tab shares: its background jobs (`JobTab.run_job`), and for the model tabs a stack that shows an
empty state until the tab's model is available (`ModelTab`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import QComboBox, QLabel, QStackedWidget, QVBoxLayout, QWidget

from app.services.devices import DeviceStatus
from app.services.jobs import Job
from app.services.registry import ModelEntry, ModelRegistry
from app.ui.widgets import EmptyState
from app.workers import JobRunner


class JobTab(QWidget):
    """A tab that runs long work in the background: `run_job` starts a job in a `JobRunner`, keeps it in
    `runners` until its thread has ended and hands its progress, result and error to the tab; `stop_jobs`
    cancels them all and waits (closing). Subclasses say what a job's progress and errors do by default
    (`job_progress`, `job_failed`) and react to a job's end in `job_ended`."""

    status_changed = Signal(str)
    job_prefix = ""  # runner (and thread) names are "<prefix>-<name>"

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.runners: list[JobRunner] = []

    def run_job(self, factory: Callable[[], Job[Any]], name: str, on_result: Callable[[Any], None],
                on_error: Callable[[str], None] | None = None,
                on_progress: Callable[[dict], None] | None = None) -> JobRunner:
        """Start `factory()`'s job now; `on_error` and `on_progress` default to `job_failed` and `job_progress`."""
        runner = JobRunner(factory, name=f"{self.job_prefix}-{name}" if self.job_prefix else name, parent=self)
        runner.progress.connect(on_progress or self.job_progress)
        runner.result.connect(on_result)
        runner.error.connect(on_error or self.job_failed)
        runner.finished.connect(lambda: self._job_ended(runner))
        self.runners.append(runner)
        runner.start()
        return runner

    def job_progress(self, progress: dict) -> None:
        """What a job's progress does unless `run_job` was told otherwise: nothing."""

    def job_failed(self, message: str) -> None:
        """What a job's error does unless `run_job` was told otherwise: the tab says it."""
        self.error(message)

    def error(self, message: str) -> None:
        raise NotImplementedError

    def job_ended(self, runner: JobRunner) -> None:
        """Called once a job's thread has ended (after its result or error) and it has left `runners`."""

    def _job_ended(self, runner: JobRunner) -> None:
        if runner in self.runners:
            self.runners.remove(runner)
        self.job_ended(runner)

    def busy(self) -> bool:
        return any(r.is_running() for r in self.runners)

    def stop_jobs(self, timeout_ms: int) -> None:
        """Ask every job to stop at its next yield, then wait for their threads (each up to `timeout_ms`)."""
        for runner in list(self.runners):
            runner.cancel()
        for runner in list(self.runners):
            runner.wait(timeout_ms)


class ModelTab(JobTab):
    """A tab driven by one kind of model. Subclasses fill `self.page` (the working view)."""

    kind: str = ""
    title: str = ""
    purpose: str = ""
    models_loaded = Signal()  # emit after loading a model so the status bar can say so
    status_label: QLabel  # set by subclasses that use status()/error()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.models: list[ModelEntry] = []
        self.registry: ModelRegistry | None = None
        self.stack = QStackedWidget(self)
        self.empty = EmptyState(self.title, self.empty_message())
        self.page = QWidget()
        self.stack.addWidget(self.empty)
        self.stack.addWidget(self.page)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.stack)

    def empty_message(self) -> str:
        return (
            f"{self.purpose}\n\nNo {self.kind} model loaded: none is installed yet. "
            "Train one in the Train tab, or copy a checkpoint into the models folder "
            "(Help → About lists where)."
        )

    def set_registry(self, registry: ModelRegistry) -> None:
        """The window's model registry; tabs load their models through it (in workers)."""
        self.registry = registry

    def build_model_chooser(self) -> None:
        """`self.model_label` and `self.model_combo` (filled by `fill_model_combo`); choosing a model calls the
        subclass's `_model_chosen(index)`, which reads the entry with `model_entry_at`."""
        self.model_label = QLabel("Model:")
        self.model_combo = QComboBox()
        self.model_combo.setMinimumContentsLength(10)
        self.model_combo.currentIndexChanged.connect(self._model_chosen)

    def _model_chosen(self, index: int) -> None:
        raise NotImplementedError  # tabs that call build_model_chooser load the chosen model here

    def model_entry_at(self, index: int) -> ModelEntry | None:
        entry = self.model_combo.itemData(index) if index >= 0 else None
        return entry if isinstance(entry, ModelEntry) else None

    def build_status_label(self) -> QLabel:
        """`self.status_label`: the wrapping, selectable line that `status()` and `error()` write to."""
        self.status_label = QLabel("")
        self.status_label.setWordWrap(True)
        self.status_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        return self.status_label

    def fill_model_combo(self, combo: QComboBox, label: QWidget) -> str:
        """List this tab's models in `combo` (the user's own first), keeping the current choice if it is still
        there; combo and label show only when there is a choice. Returns the chosen name ('' if none)."""
        current = combo.currentText()
        combo.blockSignals(True)
        combo.clear()
        preferred = sorted(self.models, key=lambda e: (e.source != "user", e.name))
        for e in preferred:
            combo.addItem(e.name, e)
        names = [e.name for e in preferred]
        combo.setCurrentIndex(names.index(current) if current in names else 0)
        combo.blockSignals(False)
        # a narrow window cuts the name ("retrieval-defau"): the whole one is a hover away
        combo.setToolTip(combo.currentText())
        combo.currentTextChanged.connect(combo.setToolTip, Qt.ConnectionType.UniqueConnection)
        several = len(preferred) > 1
        combo.setVisible(several)
        label.setVisible(several)
        return combo.currentText()

    # subclasses that use these have a `status_label` (QLabel)
    @Slot(str)
    def status(self, message: str) -> None:
        self.status_label.setStyleSheet("")
        self.status_label.setText(message)
        self.status_changed.emit(message)

    @Slot(str)
    def error(self, message: str) -> None:
        self.status_label.setStyleSheet("color: #c0392b;")
        self.status_label.setText(message)
        self.status_changed.emit(message)

    def device_preference(self) -> str:
        return self.registry.device_preference if self.registry is not None else "cpu"

    def set_audio_status(self, status: DeviceStatus) -> None:
        """Which audio devices exist; tabs that record or play enable those controls from this."""
        self.audio_status = status

    def shutdown(self, timeout_ms: int = 5000) -> None:
        """Stop recording, playback and jobs before the window closes."""

    def has_working_view(self) -> bool:
        """True once a subclass provides a real view for this tab; until then the empty state stays."""
        return False

    @Slot(list)
    def set_models(self, entries: list[ModelEntry]) -> None:
        self.models = [e for e in entries if e.kind == self.kind]
        ready = bool(self.models) and self.has_working_view()
        self.stack.setCurrentWidget(self.page if ready else self.empty)
        if self.models and not self.has_working_view():
            names = ", ".join(e.name for e in self.models)
            self.empty.set_message(
                f"{self.purpose}\n\nFound {self.kind} model(s): {names}.\n"
                "This view is not available yet in this version of Earshot."
            )
        elif not self.models:
            self.empty.set_message(self.empty_message())
