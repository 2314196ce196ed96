"""The Train tab's left side: the settings (`TrainSettingsPane`: kind, data folder and its report, preset, time
budget with the run's estimated time, device, run name, then the collapsed Advanced form, scrolled) and, under
it, never scrolled away, the actions (`TrainActions`: Start / Stop / Resume, Use this model, the status line)."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.services.training import runs as tr
from app.ui.train_form import BUDGET, LABELS, SettingsForm
from app.ui.train_state import TrainButtons

DATA_HINTS = {"words": "folder with words.csv (path,word,speaker)",
              "units": "folder of speech recordings (optional utterances.csv)",
              "retrieval": "folder with captions.csv, or an AudioCaps .csv / WavCaps .json"}


class TrainSettingsPane(QScrollArea):
    """The basic view, then Advanced; `form` is the generated settings form."""

    def __init__(self, form: SettingsForm, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.form = form
        left = QWidget()
        column = QVBoxLayout(left)
        column.addLayout(self._basic())
        column.addWidget(form.advanced)
        column.addStretch(1)
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setWidget(left)

    def _basic(self) -> QFormLayout:
        basic = QFormLayout()
        basic.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.kind_combo = QComboBox()
        for kind, label in tr.KINDS.items():
            self.kind_combo.addItem(label, kind)
        self.kind_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.kind_combo.setMinimumContentsLength(16)
        basic.addRow("Model", self.kind_combo)
        basic.addRow("Data", self._data_row())
        self.report_label = QLabel("Choose a data folder; it is checked before training starts.")
        self.report_label.setWordWrap(True)
        self.report_label.setTextFormat(Qt.TextFormat.RichText)
        self.report_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        basic.addRow(self.report_label)
        basic.addRow("Preset", self.form.preset_combo)
        basic.addRow("", self.form.preset_note)
        budget_label = QLabel(LABELS[BUDGET][0])
        budget_label.setToolTip("Training stops after this long and keeps its best model so far")
        basic.addRow(budget_label, self.form.budget_row)
        self.device_combo = QComboBox()
        for d in tr.DEVICES:
            self.device_combo.addItem(d, d)
        self.device_combo.setToolTip("auto: a GPU when there is one, else the CPU")
        basic.addRow("Device", self.device_combo)
        self.estimate_label = QLabel("")  # how long the run would take, once the data passes its check
        self.estimate_label.setWordWrap(True)
        self.estimate_label.setTextFormat(Qt.TextFormat.RichText)
        self.estimate_label.setStyleSheet("color: #5f6368;")
        self.estimate_label.setToolTip("Measured by running the trainer on your data for a few steps, in the "
                                       "background; the time budget stops a run that would take longer")
        self.estimate_label.setVisible(False)
        basic.addRow(self.estimate_label)
        self.name_edit = QLineEdit()
        self.name_edit.setToolTip("the run folder's name; also the default name of the trained model")
        basic.addRow("Run name", self.name_edit)
        return basic

    def _data_row(self) -> QHBoxLayout:
        row = QHBoxLayout()
        self.data_edit = QLineEdit()
        self.browse_button = QPushButton("Browse…")
        row.addWidget(self.data_edit, 1)
        row.addWidget(self.browse_button)
        return row

    def show_kind(self, kind: str) -> None:
        self.kind_combo.setToolTip(self.kind_combo.currentText())  # in full where the box is too narrow
        self.data_edit.setPlaceholderText(DATA_HINTS.get(kind, "data folder"))

    def show_estimate(self, text: str) -> None:
        """The estimate's line, its time in bold ("About 6 min on this CPU" before what it rests on)."""
        head, sep, rest = text.partition(" (") if text.startswith("About") else ("", "", text)
        if ": it stops" in head:
            head, sep, rest = text.partition(": ")
        bold = f"<b>{html.escape(head)}</b>{html.escape(sep)}" if head else ""
        self.estimate_label.setText(bold + html.escape(rest))
        self.estimate_label.setVisible(bool(text))

    def set_devices(self, devices: list[str]) -> None:
        """Enable the devices this machine has (auto and cpu always)."""
        combo = self.device_combo
        model = combo.model()
        for i in range(combo.count()):
            d = combo.itemData(i)
            ok = d in ("auto", "cpu") or d in devices
            model.item(i).setEnabled(ok)  # type: ignore[attr-defined]
            combo.setItemData(i, "" if ok else "not available on this machine", Qt.ItemDataRole.ToolTipRole)
        if not model.item(combo.currentIndex()).isEnabled():  # type: ignore[attr-defined]
            combo.setCurrentIndex(0)


class TrainActions(QWidget):
    """Start / Stop / Resume, the model name with Use this model, and the status line."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        column = QVBoxLayout(self)
        column.setContentsMargins(4, 4, 4, 0)
        buttons = QHBoxLayout()
        self.start_button = QPushButton("Start")
        self.start_button.setDefault(True)
        self.cancel_button = QPushButton("Stop")
        self.cancel_button.setToolTip("stop the run; it keeps its best model so far, and Resume goes on from there")
        self.resume_button = QPushButton("Resume")
        for b in (self.start_button, self.cancel_button, self.resume_button):
            buttons.addWidget(b)
        column.addLayout(buttons)
        use = QHBoxLayout()
        self.model_name_edit = QLineEdit()
        self.model_name_edit.setPlaceholderText("model name")
        self.use_button = QPushButton("Use this model")
        self.use_button.setToolTip("copy the run's checkpoint into your models (a stopped run's best so far); its "
                                   "tab can use it at once")
        use.addWidget(self.model_name_edit, 1)
        use.addWidget(self.use_button)
        column.addLayout(use)
        self.status_label = QLabel("")
        self.status_label.setWordWrap(True)
        column.addWidget(self.status_label)

    def draw(self, buttons: TrainButtons) -> None:
        self.start_button.setEnabled(buttons.start)
        self.start_button.setToolTip("" if buttons.start else
                                     "choose a data folder that passes the check (and wait for the settings)")
        self.cancel_button.setEnabled(buttons.stop)
        self.resume_button.setEnabled(buttons.resume)
        self.use_button.setEnabled(buttons.use)

    def show_message(self, text: str, error: bool) -> None:
        self.status_label.setStyleSheet("color: #c0392b;" if error else "")
        self.status_label.setText(text)
