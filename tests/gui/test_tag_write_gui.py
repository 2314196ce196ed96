"""The Search tab's "Write tags into the files…" (issue 24, item 7): asked first, run as a job, a per-file
report; the tags are then in the files."""

from __future__ import annotations

from PySide6.QtWidgets import QMessageBox

from app.services.library.embedded_tags import read_tags
from app.services.library.tag_writer import WRITTEN, keyword_set
from app.ui.search_tab import SearchTab
from app.ui.tag_dialog import TagDialog
from tests.gui.test_search_tab import named, press_ok, registry, search, tab  # noqa: F401 - fixtures


def test_write_tags_into_the_files_asks_then_reports(qtbot, named: SearchTab) -> None:  # noqa: F811
    t = named
    t.balance.names_button.click()
    search(qtbot, t, "door")
    doors = [r for r, h in enumerate(t.state.hits) if h.folder == "Doors"]
    t.table.clearSelection()
    flags = t.table.selectionModel().SelectionFlag
    for r in doors:
        t.table.selectionModel().select(t.table.model().index(r, 0), flags.Select | flags.Rows)
    dialog = TagDialog([[], []], t.state.known_tags, t)
    qtbot.addWidget(dialog)
    dialog.new_edit.setText("wooden, spooky house")
    press_ok(dialog)
    with qtbot.waitSignal(t.tags_changed, timeout=20_000):
        t.marks.edit_tags(dialog)
    assert "Write tags into the files…" in [a.text() for a in t.context_menu(doors[0]).actions()]

    paths = [t.session.library.root / h.rel_path for h in t.state.selected_hits()]
    before = [p.read_bytes() for p in paths]
    asked: list[str] = []
    t.marks.write_into_files(confirm=lambda q: asked.append(q) is not None)  # the user says No
    assert len(asked) == 1 and "2 sounds" in asked[0] and [p.read_bytes() for p in paths] == before

    with qtbot.waitSignal(t.marks.tags_written, timeout=20_000) as blocker:
        t.marks.write_into_files(confirm=lambda q: True)
    assert [r.status for r in blocker.args[0]] == [WRITTEN, WRITTEN]
    for p in paths:
        assert {"wooden", "spooky house"} <= keyword_set(read_tags(p).fields["keywords"])
    box = t.findChild(QMessageBox, "tag-write-report")
    assert box is not None and "Tags written into 2 files" in box.text() and "written: Doors/" in box.detailedText()
    box.close()
