"""The Search tab's Find duplicates: groups of files that hold the same sound (library/duplicates.py), each
file checkable; the checked ones go to the system trash after a confirmation (never a plain delete). Nothing is
checked until the user asks ("Check all but one": the one kept is the best copy, see `keeper`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import QFile, Qt, QUrl, Signal, Slot
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.services.library.duplicates import DupFile, DuplicateGroup
from app.ui.durations import format_duration
from core.display import display_name

FILE_ROLE = Qt.ItemDataRole.UserRole


def keeper(files: Sequence[DupFile]) -> DupFile:
    """The copy kept by "Check all but one": the highest sample rate, then the longest, the largest file, the
    shortest path (the original more often than a copy in a sub-folder)."""
    return max(files, key=lambda f: (f.sample_rate, f.duration, f.size, -len(f.rel_path), f.rel_path))


def group_title(g: DuplicateGroup) -> str:
    how = "the same bytes" if g.identical else f"the same sound (audio match {g.match:.2f})"
    return f"{len(g.files)} files · {how}"


class DuplicatesDialog(QDialog):
    """Groups as a tree: a group, then its files (name, folder, duration, rate), each with a check box."""

    trashed = Signal(list)  # relative paths moved to the trash (the library indexes again)

    def __init__(self, groups: Sequence[DuplicateGroup], locate: Callable[[str], Path], title: str,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.locate = locate  # a group's path -> the file (a session's, or a set of locations' file_path)
        self._by_path = {f.rel_path: f for g in groups for f in g.files}
        self.open_url: Callable[[QUrl], Any] = QDesktopServices.openUrl  # seams for tests
        self.move_to_trash: Callable[[str], bool] = QFile.moveToTrash
        self.confirm: Callable[[str], bool] = self._ask
        self.setWindowTitle(title)
        self.resize(900, 520)
        col = QVBoxLayout(self)
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        col.addWidget(self.summary)
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["Name", "Folder", "Duration", "Rate"])
        self.tree.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # a pack's name and the folder's end both show
        self.tree.setColumnWidth(0, 300)
        self.tree.setColumnWidth(1, 330)
        col.addWidget(self.tree, 1)
        row = QHBoxLayout()
        self.extras_button = QPushButton("Check all but one")
        self.extras_button.setToolTip("In each group, check every file but the best copy (highest sample rate, "
                                      "then longest, largest)")
        self.extras_button.clicked.connect(self.check_extras)
        self.reveal_button = QPushButton("Reveal in folder")
        self.reveal_button.clicked.connect(self.reveal)
        self.trash_button = QPushButton("Move checked to trash…")
        self.trash_button.clicked.connect(self.trash_checked)
        close = QPushButton("Close")
        close.clicked.connect(self.accept)
        for b in (self.extras_button, self.reveal_button, self.trash_button):
            row.addWidget(b)
        row.addStretch(1)
        row.addWidget(close)
        col.addLayout(row)
        self.tree.itemChanged.connect(lambda *_: self._say())
        self._fill(groups)

    def _fill(self, groups: Sequence[DuplicateGroup]) -> None:
        self.tree.blockSignals(True)
        self.tree.clear()
        for g in groups:
            top = QTreeWidgetItem([group_title(g)])
            top.setFirstColumnSpanned(True)
            self.tree.addTopLevelItem(top)
            for f in g.files:
                folder, _, name = f.rel_path.rpartition("/")
                item = QTreeWidgetItem(top, [display_name(name), display_name(folder) or "·",
                                             format_duration(f.duration), f"{f.sample_rate / 1000:g} kHz"])
                item.setData(0, FILE_ROLE, f.rel_path)
                item.setToolTip(0, display_name(f.rel_path))
                item.setToolTip(1, display_name(folder))
                item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
                item.setCheckState(0, Qt.CheckState.Unchecked)
            top.setExpanded(True)
        self.tree.blockSignals(False)
        self._say()

    def files(self) -> list[QTreeWidgetItem]:
        return [self.tree.topLevelItem(i).child(j) for i in range(self.tree.topLevelItemCount())
                for j in range(self.tree.topLevelItem(i).childCount())]

    def checked(self) -> list[str]:
        return [str(it.data(0, FILE_ROLE)) for it in self.files() if it.checkState(0) == Qt.CheckState.Checked]

    def _say(self) -> None:
        groups, n = self.tree.topLevelItemCount(), len(self.files())
        marked = len(self.checked())
        self.summary.setText("No duplicates found." if not groups else
                             f"{groups} group{'' if groups == 1 else 's'} of duplicates, {n} files"
                             + (f" · {marked} checked to go to the trash" if marked else
                                " · check the copies you do not need, or “Check all but one”"))
        self.trash_button.setEnabled(marked > 0)
        self.extras_button.setEnabled(groups > 0)

    @Slot()
    def check_extras(self) -> None:
        for i in range(self.tree.topLevelItemCount()):
            top = self.tree.topLevelItem(i)
            items = [top.child(j) for j in range(top.childCount())]
            keep = keeper([self._file(it) for it in items]).rel_path
            for it in items:
                it.setCheckState(0, Qt.CheckState.Unchecked if it.data(0, FILE_ROLE) == keep
                                 else Qt.CheckState.Checked)

    def _file(self, item: QTreeWidgetItem) -> DupFile:
        return self._by_path[str(item.data(0, FILE_ROLE))]

    @Slot()
    def reveal(self) -> None:
        item = self.tree.currentItem()
        rel = item.data(0, FILE_ROLE) if item is not None else None
        if rel:
            self.open_url(QUrl.fromLocalFile(str(self.locate(rel).parent)))

    @Slot()
    def trash_checked(self) -> None:
        chosen = self.checked()
        if not chosen or not self.confirm(f"Move {len(chosen)} file{'' if len(chosen) == 1 else 's'} to the "
                                          "trash? They can be restored from there."):
            return
        moved, failed = [], []
        for rel in chosen:
            (moved if self.move_to_trash(str(self.locate(rel))) else failed).append(rel)
        for it in self.files():
            if it.data(0, FILE_ROLE) in moved:
                it.parent().removeChild(it)
        for i in reversed(range(self.tree.topLevelItemCount())):
            if self.tree.topLevelItem(i).childCount() < 2:  # no duplicate left in it
                self.tree.takeTopLevelItem(i)
        self._say()
        if failed:
            self.summary.setText(f"{len(failed)} file{'' if len(failed) == 1 else 's'} could not be moved to the "
                                 f"trash (none deleted): {', '.join(display_name(f) for f in failed[:3])}"
                                 + ("…" if len(failed) > 3 else ""))
        if moved:
            self.trashed.emit(moved)

    def _ask(self, text: str) -> bool:
        return QMessageBox.question(self, "Move to trash", text) == QMessageBox.StandardButton.Yes
