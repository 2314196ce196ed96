"""Issue 39, item 5, in the window: Find duplicates lists groups; "Check all but one" keeps the best copy; the
checked copies go to the system trash after a confirmation (restorable, never deleted) and the index forgets
them; a refused confirmation moves nothing."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from test_search_browse import LONG, SHOTS, make_long_library
from test_search_tab import open_and_index, shown_tab, tiny_registry

from app.ui.duplicates_dialog import DuplicatesDialog
from app.ui.search_tab import SearchTab
from core.audio import decode, write_audio

BELL = f"{LONG}/tram_bell_two_rings_short.wav"


@pytest.fixture
def tab(qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SearchTab]:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # the trash lives here
    (tmp_path / "data").mkdir()
    root = make_long_library(tmp_path / "lib")
    (root / "Recordings").mkdir()
    d = decode(root / BELL, None, mono=False)
    write_audio(root / "Recordings" / "REC_0001.flac", d.audio, d.sample_rate)  # the bell again, as FLAC
    shutil.copyfile(root / "door_creak_slow.wav", root / "Recordings" / "REC_0002.wav")  # the same bytes
    registry = tiny_registry(tmp_path / "models")
    widget = shown_tab(qtbot, registry, 1024)
    open_and_index(qtbot, widget, registry, root)
    yield widget
    widget.shutdown()


def opened(qtbot, tab: SearchTab, hit=None) -> DuplicatesDialog:  # noqa: ANN001
    tab.tools.duplicates_dialog = None
    tab.tools.find_duplicates(hit)
    qtbot.waitUntil(lambda: tab.tools.duplicates_dialog is not None, timeout=20_000)
    return tab.tools.duplicates_dialog


def test_find_duplicates_then_trash_all_but_one(qtbot, tab: SearchTab, tmp_path: Path) -> None:
    dialog = opened(qtbot, tab)
    groups = [[dialog.tree.topLevelItem(i).child(j).toolTip(0) for j in range(dialog.tree.topLevelItem(i).childCount())]
              for i in range(dialog.tree.topLevelItemCount())]
    assert sorted(map(sorted, groups)) == [["Recordings/REC_0001.flac", BELL],
                                           ["Recordings/REC_0002.wav", "door_creak_slow.wav"]]
    assert dialog.checked() == [] and not dialog.trash_button.isEnabled()  # nothing goes until asked
    dialog.check_extras()
    assert sorted(dialog.checked()) == ["Recordings/REC_0001.flac", "Recordings/REC_0002.wav"]
    SHOTS.mkdir(parents=True, exist_ok=True)
    dialog.grab().save(str(SHOTS / "duplicates_dialog.png"))
    dialog.confirm = lambda text: False
    dialog.trash_checked()
    root = tab.session.library.root
    assert (root / "Recordings" / "REC_0002.wav").exists()  # refused: nothing moved
    dialog.confirm = lambda text: "Move 2 files to the trash" in text
    with qtbot.waitSignal(tab.indexing_finished, timeout=30_000):
        dialog.trash_checked()
    assert not (root / "Recordings" / "REC_0001.flac").exists() and (root / BELL).exists()
    trash = tmp_path / "data" / "Trash" / "files"
    assert sorted(p.name for p in trash.iterdir()) == ["REC_0001.flac", "REC_0002.wav"]  # restorable
    assert dialog.tree.topLevelItemCount() == 0 and "No duplicates" in dialog.summary.text()
    assert tab.session.library.files.id_of("Recordings/REC_0002.wav") is None  # the index forgot it


def test_one_sounds_duplicates_from_its_menu(qtbot, tab: SearchTab) -> None:
    qtbot.waitUntil(lambda: bool(tab.state.hits) and all(h.embedded for h in tab.state.hits), timeout=20_000)
    hits = {h.rel_path: h for h in tab.state.hits}
    menu = tab.context_menu(tab.state.hits.index(hits["door_creak_slow.wav"]))
    action = next(a for a in menu.actions() if a.text().startswith("Find duplicates"))
    tab.tools.duplicates_dialog = None
    assert action.isEnabled()
    action.trigger()
    qtbot.waitUntil(lambda: tab.tools.duplicates_dialog is not None, timeout=20_000)
    dialog = tab.tools.duplicates_dialog
    assert dialog.tree.topLevelItemCount() == 1
    top = dialog.tree.topLevelItem(0)
    assert "the same bytes" in top.text(0) and top.child(0).checkState(0) == Qt.CheckState.Unchecked
