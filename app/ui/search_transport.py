"""The Search tab's transport: Play/Stop, Loop, Autoplay (play a result as it is selected), the volume, Reverse
and the varispeed (speed and pitch together, in semitones): one row in a wide preview, two in a narrow one.

Sound designers audition by walking a list with the arrow keys, hearing each sound as it is selected, as in the
sample browsers they know; Loop holds a short sound while they listen, the volume tames a loud library; a door
slam an octave down or a swell backwards is often the sound they were looking for. The choices are remembered
(QSettings). This widget only shows and remembers them; the `PreviewPane` applies them to its `Player`
(app/services/search/audition.py makes the samples).
"""

from __future__ import annotations

from PySide6.QtCore import QSettings, QSize, Qt, Signal, Slot
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QLayout,
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
ONE_ROW_SLACK = 120  # px more than the controls' least: both sliders get room enough to be aimed
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
        self.row = row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        for w in (self.play_button, self.loop_button, self.autoplay_button):
            row.addWidget(w)
        row.addSpacing(6)
        row.addWidget(QLabel("Vol"))
        row.addWidget(self.volume_slider, 1)
        row.addWidget(self.volume_label)
        self.audition_row = QWidget()  # Reverse and the varispeed: beside the rest where the pane is wide enough
        second = QHBoxLayout(self.audition_row)
        second.setContentsMargins(0, 0, 0, 0)
        second.addWidget(self.reverse_button)
        second.addSpacing(6)
        second.addWidget(self.speed_caption)
        second.addWidget(self.speed_slider, 1)
        second.addWidget(self.speed_label)
        second.addWidget(self.speed_reset)
        self.col = col = QVBoxLayout(self)
        col.setContentsMargins(0, 0, 0, 0)
        col.setSpacing(2)
        col.setSizeConstraint(QLayout.SizeConstraint.SetNoConstraint)  # one row or two: `minimumSizeHint` says
        col.addLayout(row)
        col.addWidget(self.audition_row)

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

    def one_row_width(self) -> int:
        """How wide the bar must be to hold everything in one row, with room for both sliders to be used."""
        self.row.invalidate()
        first = self.row.minimumSize().width() - self.audition_row.minimumSizeHint().width() * self.one_row()
        return first + self.audition_row.minimumSizeHint().width() + 12 + ONE_ROW_SLACK

    def one_row(self) -> bool:
        return self.row.indexOf(self.audition_row) >= 0

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt API)
        """As narrow as two rows allow: a wider pane puts them in one (`resizeEvent`), a narrower one back."""
        self.row.invalidate()
        first = self.row.minimumSize().width() - self.audition_row.minimumSizeHint().width() * self.one_row()
        rows = [self.row.minimumSize().height(), self.audition_row.minimumSizeHint().height()]
        height = max(rows) if self.one_row() else sum(rows) + self.col.spacing()
        return QSize(max(first, self.audition_row.minimumSizeHint().width()), height)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt API)
        super().resizeEvent(event)
        self.fit_rows()

    def fit_rows(self) -> None:
        """Reverse and the varispeed beside the rest where the bar is wide enough, else on a row of their own (a
        narrow side-by-side preview is short of width, a stacked one of height)."""
        wide = self.width() >= self.one_row_width()
        if wide == self.one_row():
            return
        if wide:
            self.col.removeWidget(self.audition_row)
            self.row.addSpacing(6)
            self.row.addWidget(self.audition_row, 2)  # its slider about as wide as the volume's
        else:
            self.row.removeWidget(self.audition_row)
            self.row.takeAt(self.row.count() - 1)  # the spacing before it
            self.col.addWidget(self.audition_row)
        self.updateGeometry()

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
