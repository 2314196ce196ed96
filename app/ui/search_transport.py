"""The Search tab's transport: Play/Stop, Loop, Autoplay (play a result as it is selected) and the volume.

Sound designers audition by walking a list with the arrow keys, hearing each sound as it is selected, as in the
sample browsers they know; Loop holds a short sound while they listen, the volume tames a loud library. The three
choices are remembered (QSettings). This widget only shows and remembers them; the `PreviewPane` applies them to
its `Player`.
"""

from __future__ import annotations

from PySide6.QtCore import QSettings, Qt, Signal, Slot
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QSizePolicy, QSlider, QToolButton, QWidget

AUTOPLAY_KEY = "search/play_on_select"
LOOP_KEY = "search/loop"
VOLUME_KEY = "search/volume"  # percent
AUTOPLAY_TIP = "Play each result as it is selected (click, or walk the list with the arrow keys)"


class TransportBar(QWidget):
    volume_changed = Signal(float)  # 0..1
    loop_changed = Signal(bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        settings = QSettings()
        self.play_button = QPushButton("Play")
        self.play_button.setMinimumWidth(self.play_button.sizeHint().width())  # "Stop" takes its place unmoved
        self.loop_button = self._toggle("Loop", "Play the sound again and again until stopped",
                                        settings.value(LOOP_KEY, False, type=bool))
        self.loop_button.toggled.connect(self._loop_toggled)
        self.autoplay_button = self._toggle(
            "Autoplay", AUTOPLAY_TIP,
            settings.value(AUTOPLAY_KEY, True, type=bool))
        self.autoplay_button.toggled.connect(lambda on: QSettings().setValue(AUTOPLAY_KEY, on))
        self.volume_slider = QSlider(Qt.Orientation.Horizontal)
        self.volume_slider.setRange(0, 100)
        self.volume_slider.setSingleStep(5)
        self.volume_slider.setPageStep(10)
        self.volume_slider.setValue(max(0, min(100, int(settings.value(VOLUME_KEY, 100)))))
        self.volume_slider.setMinimumWidth(60)
        self.volume_slider.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.volume_slider.setToolTip("Playback volume")
        self.volume_slider.setAccessibleName("Volume")
        self.volume_label = QLabel()
        self.volume_label.setMinimumWidth(self.volume_label.fontMetrics().horizontalAdvance("100 %") + 2)
        self.volume_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.volume_slider.valueChanged.connect(self._volume_moved)
        self._show_volume(self.volume_slider.value())
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        for w in (self.play_button, self.loop_button, self.autoplay_button):
            row.addWidget(w)
        row.addSpacing(6)
        row.addWidget(QLabel("Vol"))
        row.addWidget(self.volume_slider, 1)
        row.addWidget(self.volume_label)

    @staticmethod
    def _toggle(text: str, tip: str, on: bool) -> QToolButton:
        button = QToolButton()
        button.setText(text)
        button.setCheckable(True)
        button.setChecked(on)
        button.setToolTip(tip)
        button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        return button

    @property
    def autoplay(self) -> bool:
        return self.autoplay_button.isChecked()

    @property
    def loop(self) -> bool:
        return self.loop_button.isChecked()

    @property
    def volume(self) -> float:
        return self.volume_slider.value() / 100

    @Slot(bool)
    def _loop_toggled(self, on: bool) -> None:
        QSettings().setValue(LOOP_KEY, on)
        self.loop_changed.emit(on)

    @Slot(int)
    def _volume_moved(self, percent: int) -> None:
        QSettings().setValue(VOLUME_KEY, percent)
        self._show_volume(percent)
        self.volume_changed.emit(percent / 100)

    def _show_volume(self, percent: int) -> None:
        self.volume_label.setText(f"{percent} %")
        self.volume_slider.setToolTip(f"Playback volume: {percent} %")
