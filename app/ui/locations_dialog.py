"""File → Library Locations…: the library folders Earshot knows by name, each with a box "searched" (those ticked
are searched together), and Add folder…, Rename…, Remove. The list is the service's (`Locations`); OK keeps it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.services.library.locations import Locations
from core.display import display_name

NAME_ROLE = Qt.ItemDataRole.UserRole


class LocationsDialog(QDialog):
    def __init__(self, locations: Locations, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.locations = locations
        self.ask_folder: Callable[[], str] = lambda: QFileDialog.getExistingDirectory(
            self, "Add a library folder", str(Path.home()))  # seams for tests
        self.ask_name: Callable[[str], str | None] = self._ask_name
        self.setWindowTitle("Library Locations")
        self.resize(760, 380)
        col = QVBoxLayout(self)
        intro = QLabel("Earshot searches the ticked locations together; each keeps its own index. Results and the "
                       "folder tree say which location a sound is in.")
        intro.setWordWrap(True)
        col.addWidget(intro)
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["Searched", "Name", "Folder"])
        self.tree.setRootIsDecorated(False)
        col.addWidget(self.tree, 1)
        self.message = QLabel("")
        self.message.setWordWrap(True)
        col.addWidget(self.message)
        row = QHBoxLayout()
        for text, slot in (("Add folder…", self.add_folder), ("Rename…", self.rename_current),
                           ("Remove", self.remove_current)):
            button = QPushButton(text)
            button.clicked.connect(slot)
            row.addWidget(button)
        row.addStretch(1)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        row.addWidget(self.buttons)
        col.addLayout(row)
        self.fill()

    def fill(self) -> None:
        self.tree.clear()
        active = set(self.locations.active)
        for loc in self.locations.locations:
            item = QTreeWidgetItem(["", loc.name, display_name(loc.path)])
            item.setData(0, NAME_ROLE, loc.name)
            item.setCheckState(0, Qt.CheckState.Checked if loc.name in active else Qt.CheckState.Unchecked)
            item.setToolTip(2, display_name(loc.path))
            self.tree.addTopLevelItem(item)
        for c in range(3):
            self.tree.resizeColumnToContents(c)

    def ticked(self) -> list[str]:
        items = [self.tree.topLevelItem(i) for i in range(self.tree.topLevelItemCount())]
        return [it.data(0, NAME_ROLE) for it in items if it.checkState(0) == Qt.CheckState.Checked]

    def _current_name(self) -> str | None:
        item = self.tree.currentItem()
        return item.data(0, NAME_ROLE) if item is not None else None

    def _keep_ticks(self) -> None:
        self.locations.active = [n for n in self.ticked() if self.locations.find(n) is not None]

    def add_folder(self) -> None:
        folder = self.ask_folder()
        if not folder:
            return
        self._keep_ticks()
        try:
            loc = self.locations.add(folder)
        except ValueError as e:
            self.message.setText(str(e))
            return
        if loc.name not in self.locations.active:
            self.locations.active.append(loc.name)  # a folder added is searched too, until unticked
        self.message.setText(f"Added {loc.name}.")
        self.fill()

    def rename_current(self) -> None:
        name = self._current_name()
        if name is None:
            self.message.setText("Choose a location to rename first.")
            return
        new = self.ask_name(name)
        if new is None:
            return
        self._keep_ticks()
        try:
            self.locations.rename(name, new)
        except ValueError as e:
            self.message.setText(str(e))
            return
        self.fill()

    def remove_current(self) -> None:
        name = self._current_name()
        if name is None:
            self.message.setText("Choose a location to remove first.")
            return
        self._keep_ticks()
        self.locations.remove(name)
        self.message.setText(f"Removed {name} from the list (its folder and its index are left as they are).")
        self.fill()

    def accept(self) -> None:
        ticked = self.ticked()
        if not ticked:
            self.message.setText("Tick at least one location to search.")
            return
        self.locations.choose(ticked)
        super().accept()

    def _ask_name(self, old: str) -> str | None:
        text, ok = QInputDialog.getText(self, "Rename location", "Name:", text=old)
        return text if ok else None
