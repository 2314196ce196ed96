"""Issue 40: in a selected row the matched word's yellow box ended where the next glyph begins and read as
covering it ("explosion6": the 6 half yellow); a selected row now marks the word in yellow text, underlined."""

from __future__ import annotations

from PySide6.QtGui import QColor
from PySide6.QtWidgets import QTableWidgetItem

from app.ui.results_table import PLAIN_ROLE, ResultsTable
from app.ui.search_text import highlight

YELLOW = QColor("#ffe38a").rgb()


def yellow_pixels(table: ResultsTable, row: int) -> int:
    rect = table.visualRect(table.model().index(row, ResultsTable.NAME))
    image = table.viewport().grab(rect).toImage()
    return sum(image.pixel(x, y) == YELLOW for x in range(image.width()) for y in range(image.height()))


def test_a_selected_rows_match_is_marked_without_a_box(qtbot) -> None:
    table = ResultsTable()
    qtbot.addWidget(table)
    table.setRowCount(2)
    for row in range(2):
        item = QTableWidgetItem(highlight("explosion6.wav", [(0, 9)]))
        item.setData(PLAIN_ROLE, "explosion6.wav")
        table.setItem(row, ResultsTable.NAME, item)
    table.resize(500, 200)
    table.show()
    table.selectRow(0)
    qtbot.wait(20)
    box = table.fontMetrics().horizontalAdvance("explosion") * table.fontMetrics().height()
    assert yellow_pixels(table, 1) > box // 2  # not selected: the yellow box
    assert yellow_pixels(table, 0) < box // 4  # selected: the letters only
