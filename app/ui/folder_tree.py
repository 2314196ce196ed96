"""The library's folders as a tree beside the results: "All sounds" at the top, each folder below its parent,
collapsible. A click asks the tab to list that folder's sounds (`folder_clicked`; '' = all sounds)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import QTreeWidget, QTreeWidgetItem, QWidget

from app.ui.search_state import SearchState
from core.display import display_name

FOLDER_ROLE = Qt.ItemDataRole.UserRole
ALL_SOUNDS = "All sounds"


class FolderTree(QTreeWidget):
    """Drawn from the state's folders (every folder holding sounds, with its parents, sorted)."""

    folder_clicked = Signal(str)  # relative folder, '' for the whole library

    def __init__(self, state: SearchState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.setHeaderHidden(True)
        self.setUniformRowHeights(True)
        self.setIndentation(12)  # deep folders keep room for their names
        self.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.setToolTip("Click a folder to list its sounds (and search only there)")
        self.items: dict[str, QTreeWidgetItem] = {}
        self.itemClicked.connect(self._clicked)
        self.itemActivated.connect(self._clicked)  # Enter on a folder reached with the arrow keys
        state.events.catalog.connect(self.show_folders)
        self.show_folders()

    def show_folders(self) -> None:
        """Rebuild the tree, keeping the chosen folder and the expanded ones when they are still there."""
        chosen = self.chosen()
        expanded = {f for f, item in self.items.items() if item.isExpanded()}
        self.clear()
        root = QTreeWidgetItem([ALL_SOUNDS])
        root.setData(0, FOLDER_ROLE, "")
        root.setToolTip(0, "Every sound of the library")
        self.addTopLevelItem(root)
        self.items = {"": root}
        for folder in self.state.folders:
            parent = self.items.get(folder.rpartition("/")[0], root)
            item = QTreeWidgetItem(parent, [display_name(folder.rpartition("/")[2])])
            item.setData(0, FOLDER_ROLE, folder)
            item.setToolTip(0, display_name(folder))
            self.items[folder] = item
        root.setExpanded(True)
        for folder in expanded:
            if folder in self.items:
                self.items[folder].setExpanded(True)
        self.select_folder(chosen)

    def chosen(self) -> str:
        item = self.currentItem()
        return str(item.data(0, FOLDER_ROLE) or "") if item is not None else ""

    def select_folder(self, folder: str | None) -> None:
        """Show `folder` as chosen (its parents expanded) without asking for a list."""
        item = self.items.get(folder or "", self.items.get(""))
        if item is None:
            return
        self.blockSignals(True)
        parent = item.parent()
        while parent is not None:
            parent.setExpanded(True)
            parent = parent.parent()
        self.setCurrentItem(item)
        self.blockSignals(False)

    @Slot(QTreeWidgetItem, int)
    def _clicked(self, item: QTreeWidgetItem, _column: int) -> None:
        self.folder_clicked.emit(str(item.data(0, FOLDER_ROLE) or ""))
