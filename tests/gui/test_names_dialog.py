"""Issue 39, item 4, in the window: Suggest names… on recorder-named files, edit one, accept the batch, undo it;
tags, favourites and vectors stay with the files throughout."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_search_browse import LONG, SHOTS, make_long_library
from test_search_tab import open_and_index, shown_tab, tiny_registry

from app.ui.search_tab import SearchTab
from core.audio import decode, write_audio

RECORDINGS = ["Recordings/REC_0001.wav", "Recordings/REC_0002.wav"]


@pytest.fixture
def tab(qtbot, tmp_path: Path) -> Iterator[SearchTab]:
    root = make_long_library(tmp_path / "lib")
    (root / "Recordings").mkdir()
    for rel, source in zip(RECORDINGS, [f"{LONG}/tram_bell_two_rings_short.wav", "door_creak_slow.wav"],
                           strict=True):
        d = decode(root / source, None, mono=False)
        write_audio(root / rel, d.audio * 0.5, d.sample_rate)  # the same sound, quieter, under a recorder's name
    registry = tiny_registry(tmp_path / "models")
    widget = shown_tab(qtbot, registry, 1024)
    open_and_index(qtbot, widget, registry, root)
    qtbot.waitUntil(lambda: bool(widget.state.hits) and all(h.embedded for h in widget.state.hits), timeout=20_000)
    yield widget
    widget.shutdown()


def kept(tab: SearchTab, rel: str) -> tuple[list[str], bool, bool]:
    lib = tab.session.library
    fid = lib.files.id_of(rel)
    assert fid is not None, rel
    return (lib.user_tags.of_files([fid]).get(fid, []), fid in lib.user_tags.favourites([fid]),
            bool(lib.vectors.of_files(tab.session.embedder.model_id, [fid])))


def test_accept_a_batch_of_suggested_names_and_undo_it(qtbot, tab: SearchTab) -> None:
    lib = tab.session.library
    first = lib.files.id_of(RECORDINGS[0])
    lib.user_tags.add([first], ["found it"])
    lib.user_tags.set_favourite([first], True)
    hits = [h for h in tab.state.hits if h.rel_path in RECORDINGS]
    tab.tools.suggest_names(hits)
    qtbot.waitUntil(lambda: tab.tools.names_dialog is not None, timeout=20_000)
    dialog = tab.tools.names_dialog
    assert dialog.table.rowCount() == 2
    suggested = {dialog.suggestions[r].rel_path: dialog.name_at(r) for r in range(2)}
    bell = suggested[RECORDINGS[0]]
    # the tab's tiny model hears little (tests/test_renames.py checks what the words are): a UCS-style name
    assert bell.endswith(".wav") and not bell.startswith("REC") and "_" in bell, suggested
    row = [s.rel_path for s in dialog.suggestions].index(RECORDINGS[1])
    dialog.set_name(row, "a/b.wav")  # a bad edit holds the batch back, saying why
    assert not dialog.accept_all.isEnabled() and "cannot be used" in dialog.summary.text()
    dialog.set_name(row, "DOORWood_Creak Slow.wav")
    SHOTS.mkdir(parents=True, exist_ok=True)
    dialog.grab().save(str(SHOTS / "suggest_names.png"))
    with qtbot.waitSignal(tab.indexing_finished, timeout=30_000):
        dialog.accept_all.click()
    assert "2 files renamed" in dialog.summary.text() and dialog.undo_button.isEnabled()
    assert not (lib.root / RECORDINGS[0]).exists()
    assert kept(tab, f"Recordings/{bell}") == (["found it"], True, True)
    assert kept(tab, "Recordings/DOORWood_Creak Slow.wav")[2]
    with qtbot.waitSignal(tab.indexing_finished, timeout=30_000):
        dialog.undo_button.click()
    assert "2 files renamed back" in dialog.summary.text() and not dialog.undo_button.isEnabled()
    assert kept(tab, RECORDINGS[0]) == (["found it"], True, True) and kept(tab, RECORDINGS[1])[2]


def test_write_the_names_into_the_descriptions_instead(qtbot, tab: SearchTab) -> None:
    hits = [h for h in tab.state.hits if h.rel_path == RECORDINGS[1]]
    tab.tools.suggest_names(hits)
    qtbot.waitUntil(lambda: tab.tools.names_dialog is not None, timeout=20_000)
    dialog = tab.tools.names_dialog
    dialog.as_description.setChecked(True)
    assert dialog.accept_all.text() == "Write all"
    with qtbot.waitSignal(tab.indexing_finished, timeout=30_000):
        dialog.accept_all.click()
    assert "1 file described" in dialog.summary.text()
    assert (tab.session.library.root / RECORDINGS[1]).exists()  # not renamed
    from app.services.library.embedded_tags import read_tags

    text = read_tags(tab.session.library.root / RECORDINGS[1])
    assert dialog._description(0).lower() in str(text).lower()
