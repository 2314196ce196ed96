"""The Units tab's two rows of controls, drawn from `UnitsState.controls()`: the top bar (model, Record, the input
level, Open audio file, the devices, xruns) and the playback bar (voice, Follow loudness, Play, Export)."""

from __future__ import annotations

from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLabel, QPushButton, QWidget

from app.services.devices import DeviceStatus
from app.ui.unit_plots import LevelMeter
from app.ui.units_state import AUTO_VOICE, UnitsControls
from app.ui.widgets import DeviceLine


def _row(parent: QWidget) -> QHBoxLayout:
    row = QHBoxLayout(parent)
    row.setContentsMargins(0, 0, 0, 0)
    return row


class UnitsBar(QWidget):
    """Model, Record, the level meter, Open audio file, the device line and the xrun count."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model_label = QLabel("Model:")
        self.model_combo = QComboBox()
        self.model_combo.setToolTip("Units model to use")
        self.record_button = QPushButton("● Record")
        self.record_button.setToolTip("Record from the microphone (Space)")
        self.load_button = QPushButton("Open audio &file…")  # audio_files.OPEN_AUDIO_FILE; Alt+L: Follow loudness
        self.load_button.setToolTip("Encode an audio file (any format, rate and channel count); no device needed")
        self.level_meter = LevelMeter()
        self.level_meter.setToolTip("Input level while recording: RMS (solid), peak (light), held peak (line); "
                                    "red from −1 dBFS up: the input clips, turn the gain down")
        self.device_label = DeviceLine()
        self.xrun_label = QLabel("xruns: 0")
        self.xrun_label.setToolTip("Input overflows: audio the app could not take in time (dropped)")
        row = _row(self)
        for w in (self.model_label, self.model_combo, self.record_button, self.level_meter, self.load_button,
                  self.device_label, self.xrun_label):
            row.addWidget(w)

    def set_models(self, names: list[str], current: str) -> None:
        """The models to choose from (the combo shows only when there is a choice), `current` chosen; no signal."""
        self.model_combo.blockSignals(True)
        self.model_combo.clear()
        self.model_combo.addItems(names)
        if current:
            self.model_combo.setCurrentText(current)
        self.model_combo.blockSignals(False)
        several = len(names) > 1
        self.model_combo.setVisible(several)
        self.model_label.setText("Model:" if several else f"Model: {names[0]}" if names else "")

    def draw(self, controls: UnitsControls, status: DeviceStatus) -> None:
        self.record_button.setText("■ Stop" if controls.recording else "● Record")
        self.record_button.setEnabled(controls.record)
        # one visible line says what is off and why; the disabled buttons' tooltips repeat it
        self.device_label.show_status(status)
        self.xrun_label.setVisible(status.input_ok)  # overflows of an input there is none of: noise
        self.record_button.setToolTip(status.recording_unavailable() if not status.input_ok
                                      else "Record from the microphone (Space)")
        self.level_meter.setEnabled(controls.recording)  # idle or without a microphone: an empty trough
        self.load_button.setEnabled(controls.open_file)
        self.model_combo.setEnabled(controls.choose_model)


class PlaybackBar(QWidget):
    """The resynthesis' voice and loudness, Play original / resynthesis, Export units / WAV."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.speaker_label = QLabel("&Voice:")
        self.speaker_combo = QComboBox()
        self.speaker_combo.setToolTip("Voice of the resynthesis. Auto: the training voice that fits the first second "
                                      "of the speech best, chosen anew for each recording or file. A voice chosen "
                                      "here is kept for every recording until Auto is chosen again.")
        self.speaker_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.speaker_label.setBuddy(self.speaker_combo)
        self.loudness_check = QCheckBox("Follow &loudness")
        self.loudness_check.setChecked(True)
        self.loudness_check.setToolTip("Resynthesise from the units and the speech's loudness per unit (6-dB steps, "
                                       "a few dozen bit/s beside the units), so it rises and falls with the speech. "
                                       "Off: from the units alone, to hear what they carry by themselves.")
        self.play_original_button = QPushButton("Play &original")
        self.play_resynth_button = QPushButton("Play &resynthesis")
        self.export_units_button = QPushButton("Export &units…")
        self.export_units_button.setToolTip("Save the units as one line of START:ID tokens, seconds:unit id, or as a "
                                            "Praat TextGrid with a units tier (Ctrl+E)")
        self.export_wav_button = QPushButton("Export &WAV…")
        self.export_wav_button.setToolTip("Save the resynthesis as a 16-bit WAV file (Ctrl+Shift+E)")
        row = _row(self)
        for w in (self.speaker_label, self.speaker_combo, self.loudness_check, self.play_original_button,
                  self.play_resynth_button):
            row.addWidget(w)
        row.addStretch(1)
        row.addWidget(self.export_units_button)
        row.addWidget(self.export_wav_button)

    def set_voices(self, voices: list[str]) -> None:
        """Auto, then the model's voices (item k + 1 is voice k); no signal."""
        self.speaker_combo.blockSignals(True)
        self.speaker_combo.clear()
        self.speaker_combo.addItems([AUTO_VOICE, *voices])
        self.speaker_combo.blockSignals(False)

    def show_auto_voice(self, text: str) -> None:
        """Item 0 says which voice Auto stands for."""
        if self.speaker_combo.count() and self.speaker_combo.itemText(0) != text:
            self.speaker_combo.setItemText(0, text)

    def draw(self, controls: UnitsControls, status: DeviceStatus) -> None:
        self.speaker_combo.setEnabled(controls.voice)
        self.loudness_check.setEnabled(controls.voice)
        self.play_original_button.setEnabled(controls.play_original)
        self.play_resynth_button.setEnabled(controls.play_resynthesis)
        if not status.output_ok:
            for b in (self.play_original_button, self.play_resynth_button):
                b.setToolTip(status.playback_unavailable())
        else:
            self.play_original_button.setToolTip("Play what was recorded or loaded")
            self.play_resynth_button.setToolTip("Play the speech rebuilt from the units (P)")
        self.export_units_button.setEnabled(controls.export_units)
        self.export_wav_button.setEnabled(controls.export_wav)
