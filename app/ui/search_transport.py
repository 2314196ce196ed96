"""The Search tab's transport: Play/Stop, Loop, Autoplay (play a result as it is selected), the volume, and on a
second row Reverse and the varispeed (speed and pitch together, in semitones).

Sound designers audition by walking a list with the arrow keys, hearing each sound as it is selected, as in the
sample browsers they know; Loop holds a short sound while they listen, the volume tames a loud library; a door
slam an octave down or a swell backwards is often the sound they were looking for. The choices are remembered
(QSettings). This widget only shows and remembers them; the `PreviewPane` applies them to its `Player`
(app/services/search/audition.py makes the samples).
"""

from __future__ import annotations

from PySide6.QtCore import QSettings, Qt, Signal, Slot
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QSlider,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.services.search.audition import SEMITONES, Audition

AUTOPLAY_KEY = "search/play_on_select"
LOOP_KEY = "search/loop"
VOLUME_KEY = "search/volume"  # percent
VARISPEED_KEY = "search/varispeed"  # semitones, -SEMITONES..SEMITONES
REVERSE_KEY = "search/reverse"
AUTOPLAY_TIP = "Play each result as it is selected (click, or walk the list with the arrow keys)"


class TransportBar(QWidget):
    volume_changed = Signal(float)  # 0..1
    loop_changed = Signal(bool)
    audition_changed = Signal()  # the varispeed or Reverse changed: `audition` says how to play now

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
        self._build_volume(settings)
        self._build_audition(settings)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        for w in (self.play_button, self.loop_button, self.autoplay_button):
            row.addWidget(w)
        row.addSpacing(6)
        row.addWidget(QLabel("Vol"))
        row.addWidget(self.volume_slider, 1)
        row.addWidget(self.volume_label)
        second = QHBoxLayout()
        second.setContentsMargins(0, 0, 0, 0)
        second.addWidget(self.reverse_button)
        second.addSpacing(6)
        second.addWidget(self.speed_caption)
        second.addWidget(self.speed_slider, 1)
        second.addWidget(self.speed_label)
        second.addWidget(self.speed_reset)
        col = QVBoxLayout(self)
        col.setContentsMargins(0, 0, 0, 0)
        col.setSpacing(2)
        col.addLayout(row)
        col.addLayout(second)

    def _build_volume(self, settings: QSettings) -> None:
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

    def _build_audition(self, settings: QSettings) -> None:
        """Reverse, and the varispeed: a slider of semitones (speed and pitch together, as a tape), its value and a
        button back to the sound as recorded."""
        self.reverse_button = self._toggle("Reverse", "Play the sound (or the selected part) backwards",
                                           settings.value(REVERSE_KEY, False, type=bool))
        self.reverse_button.toggled.connect(self._reverse_toggled)
        self.speed_caption = QLabel("Speed")
        self.speed_slider = QSlider(Qt.Orientation.Horizontal)
        self.speed_slider.setRange(-SEMITONES, SEMITONES)
        self.speed_slider.setPageStep(12)
        self.speed_slider.setTickPosition(QSlider.TickPosition.TicksBelow)
        self.speed_slider.setTickInterval(12)
        self.speed_slider.setMinimumWidth(60)
        self.speed_slider.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.speed_slider.setAccessibleName("Varispeed")
        try:
            semitones = int(settings.value(VARISPEED_KEY, 0))
        except (TypeError, ValueError):
            semitones = 0
        self.speed_slider.setValue(max(-SEMITONES, min(SEMITONES, semitones)))
        self.speed_label = QLabel()
        self.speed_label.setMinimumWidth(self.speed_label.fontMetrics().horizontalAdvance("−12 st") + 4)
        self.speed_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.speed_reset = QToolButton()
        self.speed_reset.setText("0")
        self.speed_reset.setToolTip("Back to the sound's own speed and pitch")
        self.speed_reset.clicked.connect(lambda: self.speed_slider.setValue(0))
        self.speed_slider.valueChanged.connect(self._speed_moved)
        self._show_speed(self.speed_slider.value())

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

    @property
    def audition(self) -> Audition:
        """How to play: the varispeed's semitones and Reverse."""
        return Audition(self.speed_slider.value(), self.reverse_button.isChecked())

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

    @Slot(bool)
    def _reverse_toggled(self, on: bool) -> None:
        QSettings().setValue(REVERSE_KEY, on)
        self.audition_changed.emit()

    @Slot(int)
    def _speed_moved(self, semitones: int) -> None:
        QSettings().setValue(VARISPEED_KEY, semitones)
        self._show_speed(semitones)
        self.audition_changed.emit()

    def _show_speed(self, semitones: int) -> None:
        sign = "+" if semitones > 0 else "−" if semitones < 0 else ""
        self.speed_label.setText(f"{sign}{abs(semitones)} st")
        ratio = Audition(semitones).ratio
        self.speed_slider.setToolTip(
            f"Varispeed: {sign}{abs(semitones)} semitones, ×{ratio:.3g} speed (speed and pitch together, as a "
            f"tape played faster or slower; ±12 is an octave: twice or half as fast). Only playback changes")
        self.speed_reset.setEnabled(semitones != 0)
