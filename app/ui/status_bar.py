"""The window's status bar: a message too long for the room left of the permanent labels (device, models, audio)
ends in "…" with the whole text in the tooltip, and is cut again to the new room when the window is resized.

QStatusBar itself clips a long message at the first label without a sign that text is missing ("Library:
/home/me/Sounds/Weapons/Medieval_Siege_Engines/Catapults_Tr"). Every `showMessage` made from Python goes
through here: the window's own messages, the tabs' (`MainWindow.flash`) and unexpected errors.
"""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, Slot
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QStatusBar, QWidget

MIN_ROOM = 80  # pixels: a message is never cut shorter than this, however many labels there are
TEXT_GAP = 8  # pixels QStatusBar keeps free around its message: 6 before it, 2 before the first permanent label
GAPS = 48  # pixels: the margins, the spacing between the labels and the size grip, before the bar is laid out


class StatusBar(QStatusBar):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.full_message = ""  # the message shown, whole, on one line
        self._shown = ""  # what was handed to QStatusBar: `full_message` cut to the room
        self._until: float | None = None  # time.monotonic() when the message goes (None: it stays)
        self._permanent: list[QWidget] = []
        self.messageChanged.connect(self._changed)

    def addPermanentWidget(self, widget: QWidget, stretch: int = 0) -> None:  # noqa: N802 (Qt API)
        super().addPermanentWidget(widget, stretch)
        self._permanent.append(widget)

    def showMessage(self, message: str, timeout: int = 0) -> None:  # noqa: N802 (Qt API)
        self.full_message = message.replace("\n", " ")
        self._until = time.monotonic() + timeout / 1000 if timeout > 0 else None
        self._show()

    def room(self) -> int:
        """The pixels left of the permanent labels: where the first one is, once the bar is laid out; before,
        what their size hints leave."""
        shown = [w for w in self._permanent if w.isVisible() and w.width() > 0]
        if shown:
            return max(min(w.x() for w in shown) - TEXT_GAP, MIN_ROOM)
        labels = sum(w.sizeHint().width() for w in self._permanent if not w.isHidden())
        return max(self.width() - labels - GAPS, MIN_ROOM)

    def _show(self) -> None:
        left = 0 if self._until is None else max(1, round((self._until - time.monotonic()) * 1000))
        text = self.fontMetrics().elidedText(self.full_message, Qt.TextElideMode.ElideRight, self.room())
        self._shown = text
        super().showMessage(text, left)
        self.setToolTip(self.full_message if text != self.full_message else "")

    @Slot(str)
    def _changed(self, text: str) -> None:
        """Cleared (or its time up), or a message Qt showed itself (an action's status tip): what the tooltip
        says follows."""
        if text != self._shown:
            self.full_message = self._shown = text
            self._until = None
            self.setToolTip("")

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt API)
        super().resizeEvent(event)
        if self.currentMessage() and self.full_message:
            self._show()  # more room: more of the message; less: cut again
