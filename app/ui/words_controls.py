"""The Words tab's bar: the model chooser, Add audio files, Record, the devices, a typed word and Add; drawn from
a `WordsState` (a model loaded, a microphone there)."""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QLabel, QLineEdit, QPushButton, QWidget

from app.ui.audio_files import ADD_AUDIO_FILES
from app.ui.widgets import DeviceLine
from app.ui.words_state import WordsState


class WordsBar(QWidget):
    def __init__(self, state: WordsState, model_label: QLabel, model_combo: QWidget,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.add_files_button = QPushButton(ADD_AUDIO_FILES)
        self.add_files_button.setToolTip("Add spoken words from audio files: one word a file, named by the file")
        self.record_button = QPushButton("● Record")
        self.record_button.setCheckable(True)
        self.word_edit = QLineEdit()
        self.word_edit.setPlaceholderText("Type a word or phonemes")
        self.word_edit.setToolTip("A word from the CMU Pronouncing Dictionary, or ARPAbet phonemes (S EH V AH N)")
        self.add_word_button = QPushButton("Add")
        self.device_label = DeviceLine()
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        for w in (model_label, model_combo, self.add_files_button, self.record_button, self.device_label):
            row.addWidget(w)
        row.addSpacing(12)
        row.addWidget(self.word_edit, 1)
        row.addWidget(self.add_word_button)
        state.events.ready.connect(self.draw)
        state.events.devices.connect(self.draw)

    def draw(self) -> None:
        state, status = self.state, self.state.audio
        for w in (self.add_files_button, self.word_edit, self.add_word_button):
            w.setEnabled(state.ready)
        self.record_button.setEnabled(state.can_record())
        if status is None:
            return
        self.record_button.setToolTip(
            "Record one word from the microphone (stops after ~2 s of speech or on a second click)"
            if status.input_ok else status.recording_unavailable())
        self.device_label.show_status(status)  # stays: the status line below is soon taken by other messages

    def show_recording(self, on: bool) -> None:
        self.record_button.setChecked(on)
        self.record_button.setText("■ Stop" if on else "● Record")
