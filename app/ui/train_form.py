"""The Train tab's settings: a preset box and a time budget up front, every other setting in a collapsed
"Advanced" section, grouped, with human labels (units said) and the setting's help as its tooltip.

The fields are still generated from the trainer's config dataclasses (`training_runs.settings_schema`); this
module only says how each one reads to a person (`LABELS`: label and group by setting name) and keeps the preset
box true: choosing a preset fills the form, editing a field shows "Custom" (or the preset it now equals).
"""

from __future__ import annotations

import math
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal, Slot
from PySide6.QtGui import QValidator, QWheelEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QSizePolicy,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.services.training import presets as tp
from app.services.training import runs as tr

INT_LIMIT = 2_000_000_000
FIELD_MIN_WIDTH = 90  # px
BUDGET = "max_minutes"  # the one setting of the basic view (beside data, preset and device)
GROUPS = ("Model", "Training", "Data", "Augmentation", "Machine and saving", "Other")
_M, _T, _D, _A, _S = GROUPS[:5]
LABELS: dict[str, tuple[str, str]] = {  # setting -> (label, group); units in brackets
    "preset": ("Model architecture", _M), "frontend": ("Acoustic features", _M),
    "speech_weights": ("Speech-embedding weights (path)", _M), "init_from": ("Start from checkpoint", _M),
    "freeze_audio": ("Freeze the sound tower", _M),
    "encoder_reads": ("Units encoder reads", _M), "rebuild_energy": ("Units also rebuild the energy", _M),
    "energy_weight": ("Weight of the rebuilt energy", _M),
    "batch_size": ("Batch size", _T), "lr": ("Learning rate", _T), "optimizer": ("Optimizer", _T),
    "weight_decay": ("Weight decay", _T), "warmup_steps": ("Warm-up (steps)", _T),
    "warmup_epochs": ("Warm-up (epochs)", _T), "schedule": ("Learning-rate schedule", _T),
    "lr_decay": ("Learning-rate divisor on a plateau", _T), "patience": ("Patience (epochs)", _T),
    "min_lr": ("Stop below learning rate", _T), "max_epochs": ("Epochs, at most", _T), "epochs": ("Epochs", _T),
    "vq_steps": ("VQ-VAE steps (stage 1)", _T), "inv_steps": ("Inverter steps (stage 2)", _T),
    "finetune_epochs": ("Fine-tuning epochs", _T), "finetune_lr": ("Fine-tuning learning rate", _T),
    "grad_clip": ("Gradient clipping (norm; 0 off)", _T), "grad_accum": ("Gradient accumulation (batches)", _T),
    "tokens_per_word": ("Tokens of a word per batch", _D), "max_frames": ("Frames per word, at most", _D),
    "crop_frames": ("Crop length (10-ms frames)", _D), "crop_seconds": ("Crop length (s)", _D),
    "dev_fraction": ("Dev share of train (0-1)", _D), "split": ("Split to train on", _D),
    "exclude_speakers": ("Speakers left out", _D), "same_text_positives": ("Same caption counts as a match", _D),
    "paraphrases": ("Paraphrases file", _D), "swap_p": ("Paraphrase swap (probability)", _D),
    "eval_batch": ("Evaluation batch (clips)", _D),
    "augment_copies": ("Augmented copies per token", _A), "speed_prob": ("Speed change (probability)", _A),
    "speed_low": ("Speed, slowest (×)", _A), "speed_high": ("Speed, fastest (×)", _A),
    "pitch_prob": ("Pitch shift (probability)", _A), "pitch_semitones": ("Pitch shift, largest (semitones)", _A),
    "reverb_prob": ("Reverb (probability)", _A), "rt60_low": ("Reverb time, low (s)", _A),
    "rt60_high": ("Reverb time, high (s)", _A), "noise_prob": ("Noise (probability)", _A),
    "noise_dir": ("Noise folder", _A), "snr_low": ("Noise SNR, low (dB)", _A), "snr_high": ("Noise SNR, high (dB)", _A),
    "telephone_prob": ("Telephone band (probability)", _A), "gain_prob": ("Level change (probability)", _A),
    "gain_db_low": ("Level drop, largest (dB)", _A), "gain_db_high": ("Level rise, largest (dB)", _A),
    "normalize_features": ("Normalise features per utterance", _A),
    "seed": ("Random seed", _S), "threads": ("CPU threads (0: all but one)", _S), "amp": ("Mixed precision (CUDA)", _S),
    "cache": ("Cache features on disk", _S), "cache_dir": ("Feature cache folder", _S),
    "checkpoint_every": ("Save every (steps)", _S), BUDGET: ("Time budget (min)", _S),
}  # fmt: skip


def label_for(spec: tr.SettingSpec) -> str:
    """A person's name for a setting: the table's, else its field name as words (never snake_case)."""
    if spec.name in LABELS:
        return LABELS[spec.name][0]
    return spec.name.replace("_", " ").capitalize()


def tooltip_for(spec: tr.SettingSpec) -> str:
    lines = [spec.help[:1].upper() + spec.help[1:] if spec.help else label_for(spec)]
    if spec.minimum is not None or spec.maximum is not None:
        low = "" if spec.minimum is None else f"{'>' if spec.minimum_exclusive else '≥'} {spec.minimum:g}"
        high = "" if spec.maximum is None else f"≤ {spec.maximum:g}"
        lines.append("Range: " + ", ".join(p for p in (low, high) if p))
    lines.append(f"Command line: {spec.flag}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ fields


class _WheelWhenFocused:
    """A form field takes the mouse wheel only once clicked into: otherwise the wheel scrolls the form (a value
    changed under a pointer passing by while scrolling is an edit nobody asked for)."""

    def wheelEvent(self: QWidget, event: QWheelEvent) -> None:  # noqa: N802 (Qt API); self: the field it is in
        if self.hasFocus():
            super().wheelEvent(event)
        else:
            event.ignore()  # goes on to the scroll area


class FormSpinBox(_WheelWhenFocused, QSpinBox):
    pass


class FormDoubleSpinBox(_WheelWhenFocused, QDoubleSpinBox):
    """Ten decimals kept, shown as a number reads ("0.0003", "1e-07"), so a recipe's 1e-5 is neither rounded to
    zero nor shown as 0.0000100000."""

    def __init__(self) -> None:
        super().__init__()
        self.setDecimals(10)

    def textFromValue(self, value: float) -> str:  # noqa: N802 - Qt API
        return f"{value:.6g}"

    def valueFromText(self, text: str) -> float:  # noqa: N802 - Qt API
        if self.specialValueText() and text.strip() == self.specialValueText():
            return self.minimum()
        try:
            return float(text.replace(",", "."))
        except ValueError:
            return self.value()

    def validate(self, text: str, pos: int) -> object:  # noqa: D102 - Qt API
        if self.specialValueText() and text == self.specialValueText():
            return QValidator.State.Acceptable, text, pos
        try:
            value = float(text.replace(",", "."))
        except ValueError:
            return QValidator.State.Intermediate, text, pos
        ok = self.minimum() <= value <= self.maximum()
        return (QValidator.State.Acceptable if ok else QValidator.State.Intermediate), text, pos


class FormComboBox(_WheelWhenFocused, QComboBox):
    pass


def _strong_focus(widget: QWidget) -> QWidget:
    widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # not WheelFocus: the wheel alone never focuses a field
    return widget


def _unset_text(spec: tr.SettingSpec) -> str:
    return "no limit" if spec.name == BUDGET else "default"


def make_input(spec: tr.SettingSpec) -> QWidget:
    """A form widget for one setting: spin boxes for numbers, a check box, a combo box or a line edit."""
    if spec.type == "bool":
        box = QCheckBox()
        box.setTristate(spec.optional)  # the third state leaves it to the trainer's preset
    elif spec.type == "choice":
        box = _strong_focus(FormComboBox())
        if spec.optional:
            box.addItem("default")  # index 0: the trainer (its preset) decides
        box.addItems(spec.choices)
    elif spec.type == "int":
        box = _strong_focus(FormSpinBox())
        lo = int(math.ceil(spec.minimum)) if spec.minimum is not None else -INT_LIMIT
        lo += 1 if spec.minimum_exclusive and spec.minimum == lo else 0
        hi = int(spec.maximum) if spec.maximum is not None else INT_LIMIT
        box.setRange(lo - 1 if spec.optional else lo, hi)  # one step below the minimum: "the trainer decides"
    elif spec.type == "float":
        box = _strong_focus(FormDoubleSpinBox())
        lo = 0.0 if spec.minimum is None else float(spec.minimum)
        lo += 1e-10 if spec.minimum_exclusive else 0.0  # the smallest value allowed
        hi = float(spec.maximum) if spec.maximum is not None else 1e9
        step = abs(spec.default) / 10 if isinstance(spec.default, float) and spec.default else (
            0.05 if hi <= 1 else 0.1)
        box.setSingleStep(step)
        box.setRange(lo - step if spec.optional else lo, hi)
    else:
        box = QLineEdit()
        box.setPlaceholderText("comma-separated" if spec.type == "list" else "default" if spec.optional else "")
    if isinstance(box, QSpinBox | QDoubleSpinBox) and spec.optional:
        box.setSpecialValueText(_unset_text(spec))
    if isinstance(box, QComboBox):
        box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        box.setMinimumContentsLength(6)
    if not isinstance(box, QCheckBox):
        box.setMinimumWidth(FIELD_MIN_WIDTH)  # not the width of "2000000000": the form must fit a narrow pane
    write_input(spec, box, spec.default)
    return box


def write_input(spec: tr.SettingSpec, widget: QWidget, value: Any) -> None:  # noqa: ANN401 - any setting value
    """Show `value` (None: left to the trainer) in a field made by `make_input`."""
    if isinstance(widget, QCheckBox):
        if value is None and widget.isTristate():
            widget.setCheckState(Qt.CheckState.PartiallyChecked)
        else:
            widget.setChecked(bool(value))
    elif isinstance(widget, QComboBox):
        widget.setCurrentIndex(0 if value is None else max(0, widget.findText(str(value))))
    elif isinstance(widget, QSpinBox):
        widget.setValue(widget.minimum() if value is None else int(value))
    elif isinstance(widget, QDoubleSpinBox):
        widget.setValue(widget.minimum() if value is None else float(value))
    elif isinstance(widget, QLineEdit):
        widget.setText(", ".join(value) if isinstance(value, list | tuple) else "" if value is None else str(value))


def read_input(spec: tr.SettingSpec, widget: QWidget) -> Any:  # noqa: ANN401 - any setting value
    if isinstance(widget, QCheckBox):
        if widget.checkState() == Qt.CheckState.PartiallyChecked:
            return None
        return widget.isChecked()
    if isinstance(widget, QComboBox):
        if spec.optional and widget.currentIndex() == 0:
            return None
        return widget.currentText()
    if isinstance(widget, QSpinBox | QDoubleSpinBox):
        if spec.optional and widget.value() == widget.minimum():
            return None
        return int(widget.value()) if isinstance(widget, QSpinBox) else float(widget.value())
    if isinstance(widget, QLineEdit):
        text = widget.text().strip()
        if spec.type == "list":
            return [t.strip() for t in text.split(",") if t.strip()]
        return text or None
    return None


def _changed_signal(widget: QWidget) -> Any:  # noqa: ANN401 - a bound Qt signal
    if isinstance(widget, QCheckBox):
        return widget.stateChanged
    if isinstance(widget, QComboBox):
        return widget.currentIndexChanged
    if isinstance(widget, QSpinBox | QDoubleSpinBox):
        return widget.valueChanged
    return widget.textChanged


# ------------------------------------------------------------------------------------------------ the form


class SettingsForm(QObject):
    """The preset box, the time budget and the Advanced section of one kind's settings. The tab places the
    widgets (`preset_combo`, `preset_note`, `budget_row`, `advanced`); this keeps them consistent."""

    edited = Signal()  # any field changed (by a person or a preset)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.specs: list[tr.SettingSpec] = []
        self.inputs: dict[str, QWidget] = {}
        self.presets: list[tp.Preset] = []
        self._applying = False
        self.preset_combo = FormComboBox()
        _strong_focus(self.preset_combo)
        self.preset_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.preset_combo.setMinimumContentsLength(12)
        self.preset_combo.setToolTip("A whole recipe: choosing one fills every setting; editing a field makes it "
                                     "Custom")
        self.preset_combo.activated.connect(self._preset_chosen)
        self.preset_note = QLabel("")
        self.preset_note.setWordWrap(True)
        self.preset_note.setStyleSheet("color: #5f6368;")  # secondary text, still readable
        self.budget_row = QWidget()  # holds the time budget's field once a schema is loaded
        QVBoxLayout(self.budget_row).setContentsMargins(0, 0, 0, 0)
        self.advanced = QWidget()
        lay = QVBoxLayout(self.advanced)
        lay.setContentsMargins(0, 0, 0, 0)
        self.advanced_toggle = QToolButton()
        self.advanced_toggle.setText("Advanced settings")
        self.advanced_toggle.setCheckable(True)
        self.advanced_toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.advanced_toggle.setAutoRaise(True)
        self.advanced_toggle.setStyleSheet("QToolButton { border: none; font-weight: bold; }")
        self.advanced_toggle.toggled.connect(self.set_advanced_shown)
        self.advanced_body = QWidget()
        self.advanced_form = QFormLayout(self.advanced_body)
        self.advanced_form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.advanced_form.setContentsMargins(12, 0, 0, 0)
        lay.addWidget(self.advanced_toggle)
        lay.addWidget(self.advanced_body)
        self.set_advanced_shown(False)

    @Slot(bool)
    def set_advanced_shown(self, shown: bool) -> None:
        self.advanced_toggle.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)
        if self.advanced_toggle.isChecked() != shown:
            self.advanced_toggle.setChecked(shown)
        self.advanced_body.setVisible(shown)

    def clear(self, title: str = "") -> None:
        while self.advanced_form.rowCount():
            self.advanced_form.removeRow(0)
        for child in self.budget_row.findChildren(QWidget, options=Qt.FindChildOption.FindDirectChildrenOnly):
            child.deleteLater()
        self.specs, self.inputs, self.presets = [], {}, []
        self.preset_combo.clear()
        self.preset_note.setText(title)

    def build(self, specs: list[tr.SettingSpec], presets: list[tp.Preset]) -> None:
        """The fields of `specs`, then the first preset chosen (the shipped recipe where there is one)."""
        self.clear()
        self.specs, self.presets = specs, presets
        by_group: dict[str, list[tr.SettingSpec]] = {g: [] for g in GROUPS}
        for spec in specs:
            widget = make_input(spec)
            widget.setToolTip(tooltip_for(spec))
            widget.setObjectName(spec.name)
            widget.setSizePolicy(QSizePolicy.Policy.Expanding, widget.sizePolicy().verticalPolicy())
            _changed_signal(widget).connect(self._field_changed)
            self.inputs[spec.name] = widget
            if spec.name == BUDGET:
                self.budget_row.layout().addWidget(widget)
            else:
                by_group[LABELS.get(spec.name, ("", "Other"))[1]].append(spec)
        for group, members in by_group.items():
            if not members:
                continue
            head = QLabel(f"<b>{group}</b>")
            head.setContentsMargins(0, 6, 0, 0)
            self.advanced_form.addRow(head)
            for spec in members:
                label = QLabel(label_for(spec))
                label.setToolTip(self.inputs[spec.name].toolTip())
                self.advanced_form.addRow(label, self.inputs[spec.name])
        for preset in presets:
            self.preset_combo.addItem(preset.name)
        self.preset_combo.addItem(tp.CUSTOM)
        if presets:
            self.apply_preset(presets[0].name)
        else:
            self._show_match()

    # ------------------------------------------------------------------------------------------- values

    def values(self) -> dict[str, Any]:
        """Every field's value (None where left to the trainer)."""
        return {s.name: read_input(s, self.inputs[s.name]) for s in self.specs}

    def settings(self) -> dict[str, Any]:
        """The values a run is given: those left to the trainer are not passed."""
        return {k: v for k, v in self.values().items() if v is not None}

    def set_value(self, name: str, value: Any) -> None:  # noqa: ANN401 - any setting value
        spec = next(s for s in self.specs if s.name == name)
        write_input(spec, self.inputs[name], value)

    def preset_name(self) -> str:
        return self.preset_combo.currentText()

    def apply_preset(self, name: str) -> None:
        """Fill the form with a preset's values (the machine's own fields, e.g. threads, stay as they are)."""
        preset = next((p for p in self.presets if p.name == name), None)
        if preset is None:
            return
        self._applying = True
        try:
            for key, value in tp.form_values(preset, self.specs).items():
                self.set_value(key, value)
        finally:
            self._applying = False
        self._show_match()

    @Slot(int)
    def _preset_chosen(self, index: int) -> None:
        name = self.preset_combo.itemText(index)
        if name == tp.CUSTOM:
            self._show_match()  # Custom while the form equals a preset would be a lie
        else:
            self.apply_preset(name)

    @Slot()
    def _field_changed(self) -> None:
        if not self._applying:
            self._show_match()

    def _show_match(self) -> None:
        found = tp.matching(self.presets, self.values(), self.specs)
        name = found.name if found is not None else tp.CUSTOM
        self.preset_combo.setCurrentIndex(max(0, self.preset_combo.findText(name)))
        self.preset_note.setText(found.note if found is not None else
                                 "Your own settings (Advanced); choose a preset to start again from a recipe.")
        self.edited.emit()
