"""The Search tab's Suggest names…: UCS-style names for the selected sounds (name_suggestions.py), each editable
and checkable; accepting renames the checked files (atomically, one by one, undoable as a batch) or, when asked,
writes the names into the files' descriptions instead. Nothing happens without a click; the dialog only says
what to do (signals), the tab runs it."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.services.library.renames import Rename, name_problem
from app.services.search.name_suggestions import Suggestion
from core.display import display_name

CURRENT, SUGGESTED, FROM = range(3)


class NamesDialog(QDialog):
    rename = Signal(object)  # [Rename]
    describe = Signal(object)  # {file id: description} (a dict Signal would make its keys strings)
    undo = Signal()

    def __init__(self, suggestions: Sequence[Suggestion], can_undo: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.suggestions = list(suggestions)
        self.setWindowTitle("Suggest names")
        self.resize(980, 480)
        col = QVBoxLayout(self)
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        col.addWidget(self.summary)
        self.table = QTableWidget(len(self.suggestions), 3)
        self.table.setHorizontalHeaderLabels(["Current name", "Suggested name (double-click to edit)",
                                              "From the named sounds it sounds like"])
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setColumnWidth(CURRENT, 240)
        self.table.setColumnWidth(SUGGESTED, 330)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.DoubleClicked
                                   | QAbstractItemView.EditTrigger.EditKeyPressed)
        self.table.verticalHeader().setVisible(False)
        col.addWidget(self.table, 1)
        self.as_description = QCheckBox("Write the names into the files' descriptions instead of renaming them")
        col.addWidget(self.as_description)
        row = QHBoxLayout()
        self.accept_checked = QPushButton("Rename checked")
        self.accept_checked.clicked.connect(lambda: self._accept(self.checked_rows()))
        self.accept_all = QPushButton("Rename all")
        self.accept_all.clicked.connect(lambda: self._accept(list(range(self.table.rowCount()))))
        self.undo_button = QPushButton("Undo last renames")
        self.undo_button.setEnabled(can_undo)
        self.undo_button.clicked.connect(self.undo)
        close = QPushButton("Close")
        close.clicked.connect(self.accept)
        for b in (self.accept_checked, self.accept_all, self.undo_button):
            row.addWidget(b)
        row.addStretch(1)
        row.addWidget(close)
        col.addLayout(row)
        self.as_description.toggled.connect(self._relabel)
        self._fill()
        self.table.itemChanged.connect(lambda *_: self._check())

    def _fill(self) -> None:
        self.table.blockSignals(True)
        for r, s in enumerate(self.suggestions):
            current = QTableWidgetItem(display_name(s.rel_path.rpartition("/")[2]))
            current.setFlags((current.flags() | Qt.ItemFlag.ItemIsUserCheckable) & ~Qt.ItemFlag.ItemIsEditable)
            current.setCheckState(Qt.CheckState.Checked)
            current.setToolTip(display_name(s.rel_path))
            self.table.setItem(r, CURRENT, current)
            self.table.setItem(r, SUGGESTED, QTableWidgetItem(s.name))
            drawn = QTableWidgetItem(", ".join(display_name(p.rpartition("/")[2]) for p in s.drawn_from) or "—")
            drawn.setFlags(drawn.flags() & ~Qt.ItemFlag.ItemIsEditable)
            drawn.setToolTip("\n".join(display_name(p) for p in s.drawn_from))
            self.table.setItem(r, FROM, drawn)
        self.table.blockSignals(False)
        self._check()

    def checked_rows(self) -> list[int]:
        return [r for r in range(self.table.rowCount())
                if self.table.item(r, CURRENT).checkState() == Qt.CheckState.Checked]

    def name_at(self, row: int) -> str:
        return self.table.item(row, SUGGESTED).text().strip()

    def set_name(self, row: int, name: str) -> None:
        self.table.item(row, SUGGESTED).setText(name)

    def _check(self) -> str | None:
        """What is wrong with the checked names (the buttons wait until it is fixed), shown in the summary."""
        problem = None
        for r in self.checked_rows():
            if not self.as_description.isChecked() and (why := name_problem(self.name_at(r))):
                problem = f"{self.table.item(r, CURRENT).text()}: the name cannot be used: {why}"
                break
        n = len(self.checked_rows())
        self.summary.setText(problem or f"{len(self.suggestions)} suggestions, {n} checked. Each name is "
                             "CatID_FXName (UCS) from the named sounds it sounds like; edit any before accepting.")
        self.accept_checked.setEnabled(problem is None and n > 0)
        self.accept_all.setEnabled(problem is None and bool(self.suggestions))
        return problem

    @Slot(bool)
    def _relabel(self, description: bool) -> None:
        self.accept_checked.setText("Write checked" if description else "Rename checked")
        self.accept_all.setText("Write all" if description else "Rename all")
        self._check()

    def _accept(self, rows: list[int]) -> None:
        if not rows or self._check() is not None:
            return
        if self.as_description.isChecked():
            self.describe.emit({self.suggestions[r].file_id: self._description(r) for r in rows})
        else:
            self.rename.emit([Rename(self.suggestions[r].rel_path, self.name_at(r)) for r in rows])
        self.accept_checked.setEnabled(False)
        self.accept_all.setEnabled(False)
        self.summary.setText("Working…")

    def _description(self, row: int) -> str:
        """The name as a description: 'DOORWood_Door Creak.wav' -> 'Door Creak' (the CatID is the category)."""
        stem = self.name_at(row).rsplit(".", 1)[0]
        return stem.partition("_")[2] or stem

    def done_with(self, text: str, can_undo: bool) -> None:
        """The tab's word when the job ended: the rows done are unchecked (their files have new names now)."""
        self.table.blockSignals(True)
        for r in range(self.table.rowCount()):
            self.table.item(r, CURRENT).setCheckState(Qt.CheckState.Unchecked)
        self.table.blockSignals(False)
        self._relabel(self.as_description.isChecked())
        self.accept_all.setEnabled(False)
        self.undo_button.setEnabled(can_undo)
        self.summary.setText(text)
