"""The library's folders as a tree beside the results: "All sounds" at the top, each folder below its parent,
collapsible; then "By category": the UCS categories the sounds were heard as (core/aisfx_heads.py), with how
many. A click asks the tab to list that folder's sounds (`folder_clicked`; '' = all sounds) or that category's
(`category_clicked`)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import QTreeWidget, QTreeWidgetItem, QWidget

from app.ui.search_state import SearchState
from core.display import display_name

FOLDER_ROLE = Qt.ItemDataRole.UserRole
CATEGORY_ROLE = Qt.ItemDataRole.UserRole + 1
ALL_SOUNDS = "All sounds"
BY_CATEGORY = "By category"


class FolderTree(QTreeWidget):
    """Drawn from the state's folders (every folder holding sounds, with its parents, sorted)."""

    folder_clicked = Signal(str)  # relative folder, '' for the whole library
    category_clicked = Signal(str)  # a UCS category ('DOORS')

    def __init__(self, state: SearchState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.setHeaderHidden(True)
        self.setUniformRowHeights(True)
        self.setIndentation(12)  # deep folders keep room for their names
        self.setTextElideMode(Qt.TextElideMode.ElideRight)  # a pack's name says most at its start
        self.setToolTip("Click a folder to list its sounds (and search only there)")
        self.items: dict[str, QTreeWidgetItem] = {}
        self.category_items: dict[str, QTreeWidgetItem] = {}
        self.itemClicked.connect(self._clicked)
        self.itemActivated.connect(self._clicked)  # Enter on a folder reached with the arrow keys
        state.events.catalog.connect(self.show_folders)
        self.show_folders()

    def show_folders(self) -> None:
        """Rebuild the tree, keeping the chosen folder and the expanded ones when they are still there."""
        chosen, chosen_category = self.chosen(), self.chosen_category()
        expanded = {f for f, item in self.items.items() if item.isExpanded()}
        by_category_open = BY_CATEGORY in self.category_items and self.category_items[BY_CATEGORY].isExpanded()
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
        self._add_categories(by_category_open)
        if chosen_category in self.category_items:
            self.select_category(chosen_category)
        else:
            self.select_folder(chosen)

    def _add_categories(self, expanded: bool) -> None:
        """The "By category" branch, when some sound was heard as a category."""
        self.category_items = {}
        if not self.state.categories:
            return
        top = QTreeWidgetItem([BY_CATEGORY])
        top.setToolTip(0, "What the sounds are, heard by the model (UCS categories): click one to list its sounds")
        top.setFlags(top.flags() & ~Qt.ItemFlag.ItemIsSelectable)
        self.addTopLevelItem(top)
        self.category_items[BY_CATEGORY] = top
        for category, count in self.state.categories:
            item = QTreeWidgetItem(top, [f"{category.title()} ({count})"])
            item.setData(0, CATEGORY_ROLE, category)
            item.setToolTip(0, f"{count} sound{'' if count == 1 else 's'} heard as {category}")
            self.category_items[category] = item
        top.setExpanded(expanded)

    def chosen_category(self) -> str:
        item = self.currentItem()
        return str(item.data(0, CATEGORY_ROLE) or "") if item is not None else ""

    def select_category(self, category: str) -> None:
        """Show `category` as chosen (its branch expanded) without asking for a list."""
        item = self.category_items.get(category)
        if item is None:
            return
        self.blockSignals(True)
        item.parent().setExpanded(True)
        self.setCurrentItem(item)
        self.blockSignals(False)

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
        if item is self.category_items.get(BY_CATEGORY):
            item.setExpanded(not item.isExpanded())
        elif category := item.data(0, CATEGORY_ROLE):
            self.category_clicked.emit(str(category))
        else:
            self.folder_clicked.emit(str(item.data(0, FOLDER_ROLE) or ""))
