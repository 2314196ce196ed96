"""Edit the user tags of one or several sounds at once (the Search tab's Tags… dialog)."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt, Slot
from PySide6.QtWidgets import (
    QCompleter,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.services.library.tag_case import split_tags, tag_key


class TagDialog(QDialog):
    """Edit the user tags of one or several sounds at once.

    Each tag on any of them is listed: checked = on all, half-checked = on some (left as it is unless clicked),
    unchecked = removed from all. New tags (comma-separated, autocompleted from the library's tags) go on all;
    a tag is one tag whatever its case ("door" checks the listed "Door", and takes the library's spelling).
    """

    def __init__(self, tags_per_file: Sequence[Sequence[str]], known: Sequence[str],
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        n = len(tags_per_file)
        self.setWindowTitle("Tags of 1 sound" if n == 1 else f"Tags of {n} sounds")
        self.on_all = set.intersection(*(set(t) for t in tags_per_file)) if n else set()
        self.on_some = set().union(*(set(t) for t in tags_per_file)) - self.on_all
        self.known = {tag_key(t): t for t in known}
        col = QVBoxLayout(self)
        hint = QLabel("Checked: on every selected sound · half-checked: on some of them · unchecked: removed."
                      if n > 1 else "Uncheck a tag to remove it.")
        hint.setWordWrap(True)
        col.addWidget(hint)
        self.list = QListWidget()
        for tag in sorted(self.on_all | self.on_some, key=str.lower):
            self._add_item(tag, Qt.CheckState.Checked if tag in self.on_all else Qt.CheckState.PartiallyChecked)
        col.addWidget(self.list, 1)
        row = QHBoxLayout()
        self.new_edit = QLineEdit()
        self.new_edit.setPlaceholderText("Add tags, separated by commas")
        completer = QCompleter(sorted(known, key=str.lower), self)
        completer.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        completer.setFilterMode(Qt.MatchFlag.MatchContains)
        self.new_edit.setCompleter(completer)
        self.new_edit.returnPressed.connect(self.add_typed)
        add = QPushButton("Add")
        add.setAutoDefault(False)
        add.clicked.connect(self.add_typed)
        row.addWidget(self.new_edit, 1)
        row.addWidget(add)
        col.addLayout(row)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self._accept)
        buttons.rejected.connect(self.reject)
        for b in buttons.buttons():
            b.setAutoDefault(False)  # Enter in the tag field adds the tag; it does not close the dialog
        col.addWidget(buttons)
        self.resize(360, 320)

    def _add_item(self, tag: str, state: Qt.CheckState) -> QListWidgetItem:
        item = QListWidgetItem(tag)
        flags = item.flags() | Qt.ItemFlag.ItemIsUserCheckable
        if state == Qt.CheckState.PartiallyChecked:
            flags |= Qt.ItemFlag.ItemIsUserTristate
        item.setFlags(flags)
        item.setCheckState(state)
        self.list.addItem(item)
        return item

    def _items(self) -> dict[str, QListWidgetItem]:
        return {self.list.item(i).text(): self.list.item(i) for i in range(self.list.count())}

    @Slot()
    def add_typed(self) -> None:
        shown = {tag_key(t): item for t, item in self._items().items()}
        for tag in split_tags(self.new_edit.text()):
            item = shown.get(tag_key(tag))
            if item is None:  # new here: in the library's spelling when it has the tag ('door, Door' is one)
                item = shown[tag_key(tag)] = self._add_item(self.known.get(tag_key(tag), tag), Qt.CheckState.Checked)
            item.setCheckState(Qt.CheckState.Checked)
        self.new_edit.clear()

    @Slot()
    def _accept(self) -> None:
        self.add_typed()  # typed but not yet added: the user meant it
        self.accept()

    def changes(self) -> tuple[list[str], list[str]]:
        """(tags to add to all, tags to remove from all)."""
        add, remove = [], []
        for tag, item in self._items().items():
            state = item.checkState()
            if state == Qt.CheckState.Checked and tag not in self.on_all:
                add.append(tag)
            elif state == Qt.CheckState.Unchecked and (tag in self.on_all or tag in self.on_some):
                remove.append(tag)
        return add, remove
