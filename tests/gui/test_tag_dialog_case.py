"""The tag dialog treats a tag as one tag whatever its case, and offers the library's spelling."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.ui.tag_dialog import TagDialog


def shown(dialog: TagDialog) -> dict[str, Qt.CheckState]:
    return {dialog.list.item(i).text(): dialog.list.item(i).checkState() for i in range(dialog.list.count())}


def test_typed_tags_in_another_case_are_the_librarys(qtbot) -> None:
    dialog = TagDialog([[]], known=["Door", "Wood"])
    qtbot.addWidget(dialog)
    dialog.new_edit.setText("door, DOOR, rain, Rain")
    dialog.add_typed()
    assert shown(dialog) == {"Door": Qt.CheckState.Checked, "rain": Qt.CheckState.Checked}
    assert dialog.changes() == (["Door", "rain"], [])


def test_a_tag_on_the_file_in_another_case_is_checked_not_added_again(qtbot) -> None:
    dialog = TagDialog([["Door"], []], known=["Door"])
    qtbot.addWidget(dialog)
    assert shown(dialog) == {"Door": Qt.CheckState.PartiallyChecked}
    dialog.new_edit.setText("DOOR")
    dialog.add_typed()
    assert shown(dialog) == {"Door": Qt.CheckState.Checked}
    assert dialog.changes() == (["Door"], [])
