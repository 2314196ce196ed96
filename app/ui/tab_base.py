"""What every tab shares: a stack that shows an empty state until the tab's model is available."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import QComboBox, QLabel, QStackedWidget, QVBoxLayout, QWidget

from app.services.audio import DeviceStatus
from app.services.registry import ModelEntry, ModelRegistry
from app.ui.widgets import EmptyState


class ModelTab(QWidget):
    """A tab driven by one kind of model. Subclasses fill `self.page` (the working view)."""

    kind: str = ""
    title: str = ""
    purpose: str = ""
    status_changed = Signal(str)
    models_loaded = Signal()  # emit after loading a model so the status bar can say so
    status_label: QLabel  # set by subclasses that use status()/error()
    runners: list[Any]  # the tab's JobRunners, for busy()

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
        several = len(preferred) > 1
        combo.setVisible(several)
        label.setVisible(several)
        return combo.currentText()

    # subclasses that use these have a `status_label` (QLabel) and a `runners` list (JobRunner)
    def busy(self) -> bool:
        return any(r.is_running() for r in self.runners)

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
