"""A QSplitter whose panes keep the widths the user gave them, also in the next session (QSettings), like the
results table's columns: a real library's long folder names need more room than a default can guess."""

from __future__ import annotations

from PySide6.QtCore import QSettings, Qt, Slot
from PySide6.QtWidgets import QSplitter, QWidget


class RememberedSplitter(QSplitter):
    """Panes added with `add(widget, width, stretch)`; `restore()` once they are all there applies the user's
    saved layout (or the given widths). Every drag of a handle is saved under `key`."""

    def __init__(self, key: str, orientation: Qt.Orientation = Qt.Orientation.Horizontal,
                 parent: QWidget | None = None) -> None:
        super().__init__(orientation, parent)
        self.key = key
        self._widths: list[int] = []
        self.splitterMoved.connect(self.save)

    def add(self, widget: QWidget, width: int, stretch: int) -> None:
        """A pane `width` pixels wide at first; `stretch`: its share of the room a larger window adds (0: none,
        the pane keeps the width the user gave it)."""
        self.addWidget(widget)
        index = self.count() - 1
        self.setStretchFactor(index, stretch)
        self.setCollapsible(index, False)  # a pane dragged to nothing would look lost, not hidden
        self._widths.append(width)

    def restore(self) -> bool:
        """The saved layout if there is a usable one (True), else the initial widths."""
        self.setSizes(self._widths)
        saved = QSettings().value(self.key)
        return saved is not None and self.restoreState(saved)

    def turn(self, orientation: Qt.Orientation, key: str, sizes: list[int]) -> None:
        """Side by side or one above the other, each way with its own remembered sizes (`key`; at first
        `sizes`)."""
        if orientation == self.orientation() and key == self.key:
            return
        self.setOrientation(orientation)
        self.key, self._widths = key, list(sizes)
        self.restore()

    @Slot()
    def save(self) -> None:
        QSettings().setValue(self.key, self.saveState())
