"""Preferences and About dialogs."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QSpinBox,
    QTabWidget,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app import __version__
from app.services.devices import DeviceStatus
from app.services.library.embedding import LONG_FILE_WINDOWS
from app.services.registry import ModelEntry, default_models_dir, user_models_dir

DEVICE_LABELS = {"auto": "Automatic (best available)", "cpu": "CPU", "cuda": "CUDA GPU", "mps": "Apple GPU (MPS)"}
SYSTEM_DEFAULT = "System default"
NO_AUDIO_DEVICE = "No audio device found"


class PreferencesDialog(QDialog):
    """Compute device and CPU threads, audio output and input. Unavailable compute devices are listed but disabled,
    with the reason; audio devices are those PortAudio lists now, "System default" first."""

    def __init__(self, device: str, threads: int, available: list[str], max_threads: int,
                 parent: QWidget | None = None, audio: DeviceStatus | None = None,
                 audio_input: str = "", audio_output: str = "", every_window: bool = False) -> None:
        super().__init__(parent)
        self.setWindowTitle("Preferences")
        form = QFormLayout()
        self.device = QComboBox()
        for key, label in DEVICE_LABELS.items():
            ok = key == "auto" or key in available
            self.device.addItem(label if ok else f"{label} — not available", key)
            if not ok:
                self.device.model().item(self.device.count() - 1).setEnabled(False)
        index = self.device.findData(device)
        self.device.setCurrentIndex(index if index >= 0 else 0)
        self.device.setToolTip("Where models run. Mixed precision is used on CUDA.")
        form.addRow("Compute device", self.device)
        self.threads = QSpinBox()
        self.threads.setRange(1, max(1, max_threads))
        self.threads.setValue(min(max(1, threads), max(1, max_threads)))
        self.threads.setToolTip("CPU threads for models; leave one core free for the interface and audio.")
        form.addRow("CPU threads", self.threads)
        audio = audio or DeviceStatus(False, False, "audio devices not checked yet")
        self._chosen = (audio_input, audio_output)
        self.audio_output = self._audio_combo(audio.outputs, audio_output, "Where Earshot plays sounds")
        form.addRow("Audio output", self.audio_output)
        self.audio_input = self._audio_combo(audio.inputs, audio_input,
                                             "The microphone that Record (Search, Units, Words) listens to")
        form.addRow("Audio input", self.audio_input)
        self.every_window = QCheckBox("Embed every 10-s window of long files")
        self.every_window.setChecked(every_window)
        self.every_window.setToolTip(
            f"Off (the default): a long file (music, an ambience) is heard in {LONG_FILE_WINDOWS} windows spread "
            "evenly over it, a fraction of the time; a short event between them is found less well. On: every "
            "window, for files indexed from now on.")
        form.addRow("Long files", self.every_window)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(buttons)

    def values(self) -> tuple[str, int]:
        return str(self.device.currentData()), int(self.threads.value())

    def index_values(self) -> bool:
        """Embed every window of long files."""
        return self.every_window.isChecked()

    def audio_values(self) -> tuple[str, str]:
        """(input, output) device labels, '' for the system default; a choice is kept while no device is found."""
        picked = [str(c.currentData() or "") if c.isEnabled() else kept
                  for c, kept in zip((self.audio_input, self.audio_output), self._chosen, strict=True)]
        return picked[0], picked[1]

    @staticmethod
    def _audio_combo(labels: list[str], chosen: str, tip: str) -> QComboBox:
        combo = QComboBox()
        combo.setMinimumContentsLength(34)  # "Focusrite Scarlett 2i2 (not connected)" whole
        combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        if not labels:  # nothing to choose: say so, disabled
            combo.addItem(NO_AUDIO_DEVICE, "")
            combo.setEnabled(False)
            combo.setToolTip(f"{tip}. {NO_AUDIO_DEVICE}: plug one in, or start the sound server, then reopen.")
            return combo
        combo.addItem(SYSTEM_DEFAULT, "")
        for label in labels:
            combo.addItem(label, label)
        if chosen and chosen not in labels:  # kept: it is used again once it is plugged back in
            combo.addItem(f"{chosen} (not connected)", chosen)
        combo.setCurrentIndex(max(combo.findData(chosen), 0))
        combo.setToolTip(f"{tip}. Takes effect with the next sound played or recorded.")
        return combo


class AboutDialog(QDialog):
    """Version, folders, and one page per model card."""

    def __init__(self, models: list[ModelEntry], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("About Earshot")
        self.resize(640, 480)
        tabs = QTabWidget()
        about = QLabel(
            f"<h2>Earshot {__version__}</h2>"
            "<p>Explore audio with research models: search a sound library by what names, folders and tags say and "
            "by what the sounds are (aiSFX sound encoder + MiniLM text encoder), "
            "speech-unit discovery with resynthesis (Transformer VQ-VAE), and multi-view acoustic "
            "word embeddings.</p>"
            f"<p>Shipped models: <code>{default_models_dir()}</code><br>"
            f"Your models: <code>{user_models_dir()}</code></p>"
        )
        about.setWordWrap(True)
        about.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        about.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)  # the folders, to copy
        tabs.addTab(about, "About")
        for entry in models:
            tabs.addTab(self._card(entry), entry.name)
        if not models:
            tabs.addTab(QLabel("No models installed yet."), "Model cards")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(tabs)
        layout.addWidget(buttons)

    @staticmethod
    def _card(entry: ModelEntry) -> QTextBrowser:
        view = QTextBrowser()
        card: Path | None = entry.card
        if card is not None:
            view.setMarkdown(card.read_text(encoding="utf-8", errors="replace"))
        else:
            metrics = entry.training.get("metrics", {})
            view.setMarkdown(f"# {entry.name}\n\nkind: {entry.kind}\n\nmetrics: {metrics or 'none recorded'}")
        return view
