"""A user tag is one tag whatever its case: "Door" then "door" is one tag spelled "Door" (the spelling first used),
on every path that adds tags (the service, `earshot tags`, the CSV import, the tag dialog), and a catalog an
older Earshot left holding both is merged when opened (atomically), or on reading when it cannot be written."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from app.cli.main import main
from app.services.library import tag_case
from app.services.library.library import Library
from app.services.library.tag_mirror import MIRROR_NAME
from app.services.search.tag_editor import TagEditor
from tests.test_cli import tagged_library

DOOR, DOG, ODD = "doors/door_creak.wav", "animals/dog_bark.wav", "odd name;1.wav"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tagged_library(tmp_path / "lib")


def ids(lib: Library) -> tuple[int, int, int]:
    return tuple(lib.files.id_of(p) for p in (DOOR, DOG, ODD))  # type: ignore[return-value]


def test_a_tag_in_another_case_takes_the_librarys_spelling(root: Path) -> None:
    with Library.open(root) as lib:
        a, b, c = ids(lib)
        tags = lib.user_tags
        assert tags.add([a], ["Door"]) == [a]
        assert tags.add([b], ["door"]) == [b] and tags.of(b) == ["Door"]
        assert tags.add([a], ["DOOR", " door "]) == []  # already there, in any case: nothing changes
        assert tags.add([c], ["Wood", "wood", "WOOD"]) == [c] and tags.of(c) == ["Wood"]  # one tag, first given
        assert tags.all() == ["Door", "Wood"]
        assert [f for f, _ in lib.text.keyword_search('"door"', 5)] in ([a, b], [b, a])
        assert tags.remove([a], ["dOOr"]) == [a] and tags.of(a) == []  # removed whatever case it is given in
        assert tags.of(b) == ["Door"]


def test_a_files_tags_are_listed_as_the_library_lists_them(root: Path) -> None:
    """Case-blind order, as the library-wide list sorts (uppercase sorted first before: 'Wood', 'apple')."""
    with Library.open(root) as lib:
        a, _, _ = ids(lib)
        lib.user_tags.add([a], ["Wood", "apple", "Metal"])
        assert lib.user_tags.of(a) == ["apple", "Metal", "Wood"] == lib.user_tags.all()
        assert [m.tags for m in lib.user_tags._marked("id") if m.id == a] == [["apple", "Metal", "Wood"]]


def test_unicode_case_and_composition(root: Path) -> None:
    with Library.open(root) as lib:
        a, b, c = ids(lib)
        lib.user_tags.add([a], ["Éclat", "Straße"])
        lib.user_tags.add([b], ["E\u0301CLAT", "STRASSE"])  # decomposed É, and ß upper-cased
        assert lib.user_tags.of(b) == ["Straße", "Éclat"]


def test_a_spelling_removed_everywhere_is_free_again(root: Path) -> None:
    with Library.open(root) as lib:
        a, b, _ = ids(lib)
        lib.user_tags.add([a], ["Door"])
        lib.user_tags.remove([a], ["Door"])
        assert lib.user_tags.add([b], ["door"]) == [b] and lib.user_tags.of(b) == ["door"]


def test_a_spelling_added_by_another_process_is_seen(root: Path) -> None:
    with Library.open(root) as lib, Library.open(root) as other:
        a, b, _ = ids(lib)
        lib.user_tags.add([a], ["wood"])  # lib has read the library's spellings
        other.user_tags.add([a], ["Door"])
        assert lib.user_tags.add([b], ["door"]) == [b] and lib.user_tags.of(b) == ["Door"]


def test_the_cli_says_which_spelling_it_used(root: Path, capsys) -> None:
    lib_args = ["--library", str(root)]
    assert main(["tags", "add", DOOR, "-t", "Door", *lib_args]) == 0
    capsys.readouterr()
    assert main(["tags", "add", DOG, "-t", "door", *lib_args]) == 0
    out, err = capsys.readouterr()
    assert "1 of 1 files changed" in out
    assert "earshot: tag 'door' is the library's 'Door' (tags ignore case); added as 'Door'" in err
    assert main(["tags", "export", *lib_args]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == ["animals/dog_bark.wav,Door,", "doors/door_creak.wav,Door,"]


def test_the_csv_import_merges_case(root: Path, tmp_path: Path) -> None:
    csv = tmp_path / "tags.csv"
    csv.write_text(f"path,tags,favourite\n{DOOR},Door;door;DOOR,\n{DOG},dOOr;Wood,\n")
    with Library.open(root) as lib:
        report = TagEditor(lib, text_encoder=None).import_csv(csv)
        assert report.errors == [] and report.tags_added == 3
        assert lib.user_tags.of_files(list(ids(lib))) == {ids(lib)[0]: ["Door"], ids(lib)[1]: ["Door", "Wood"]}


def older_catalog(root: Path) -> tuple[int, int, int]:
    """What an older Earshot could leave: "door" first (t=1), "Door" on the same file later, "DOOR" elsewhere."""
    with Library.open(root) as lib:
        a, b, c = ids(lib)
        lib.user_tags.add([c], ["keeper"])  # a mirror and a keyword row to be rewritten
    db = sqlite3.connect(root / ".earshot" / "catalog.sqlite")
    with db:
        db.executemany("INSERT INTO user_tags(file_id, tag, added_at) VALUES (?, ?, ?)",
                       [(a, "Door", 5.0), (a, "door", 1.0), (b, "DOOR", 9.0), (c, "Keeper", 0.5)])
    db.close()
    return a, b, c


def test_an_older_catalog_holding_both_is_merged_on_opening(root: Path) -> None:
    a, b, c = older_catalog(root)
    with Library.open(root) as lib:
        assert lib.user_tags.of_files([a, b, c]) == {a: ["door"], b: ["door"], c: ["Keeper"]}  # the first used
        assert lib.user_tags.all() == ["door", "Keeper"]
        assert any("“DOOR”, “Door” → “door” (2 files)" in e and "“keeper” → “Keeper” (1 file)" in e
                   for e in lib.events), lib.events
        rows = set(lib.db.execute("SELECT file_id, tag, added_at FROM user_tags").fetchall())
        assert rows == {(a, "door", 1.0), (b, "door", 9.0), (c, "Keeper", 0.5)}  # the earliest time kept
        keywords = dict(lib.db.execute("SELECT rowid, user_tags FROM text_fts WHERE rowid IN (?, ?, ?)", (a, b, c)))
        assert keywords == {a: "door", b: "door", c: "Keeper"}
    mirror = json.loads((root / ".earshot" / MIRROR_NAME).read_text())
    assert sorted(t for f in mirror["files"] for t in f["tags"]) == ["Keeper", "door", "door"]
    with Library.open(root) as lib:
        assert lib.events == []  # merged once


def test_a_merge_that_fails_changes_nothing_and_is_said(root: Path, monkeypatch) -> None:
    a, b, c = older_catalog(root)

    def half_then_fail(db: sqlite3.Connection, variants: dict[str, list[str]]) -> None:
        db.execute("DELETE FROM user_tags WHERE tag = 'DOOR'")
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr("app.services.library.user_tags.merge_variants", half_then_fail)
    with Library.open(root) as lib:
        assert any("left as they are for now" in e for e in lib.events), lib.events
        assert lib.db.execute("SELECT count(*) FROM user_tags").fetchone()[0] == 5  # rolled back whole


def test_a_read_only_older_catalog_is_merged_as_it_is_read(root: Path, monkeypatch) -> None:
    a, b, c = older_catalog(root)
    can_write = __import__("app.services.library.catalog", fromlist=["can_write"]).can_write
    monkeypatch.setattr("app.services.library.catalog.can_write",
                        lambda folder: can_write(folder) and folder.name != ".earshot")
    with Library.open(root) as lib:
        assert lib.read_only
        assert lib.user_tags.of_files([a, b, c]) == {a: ["door"], b: ["door"], c: ["Keeper"]}
        assert lib.user_tags.all() == ["door", "Keeper"]
        assert sorted(t for _, tags, _ in lib.user_tags.table() for t in tags) == ["Keeper", "door", "door"]
        assert lib.db.execute("SELECT count(*) FROM user_tags").fetchone()[0] == 5  # nothing written


def test_an_import_reads_the_librarys_spellings_once_not_per_row(root: Path, tmp_path: Path, monkeypatch) -> None:
    calls = []
    real = tag_case.library_spellings
    monkeypatch.setattr(tag_case, "library_spellings", lambda db: calls.append(1) or real(db))
    csv = tmp_path / "tags.csv"
    csv.write_text("path,tags,favourite\n" + "".join(f"{DOOR},tag {i};Door\n{DOG},TAG {i};door\n" for i in range(40)))
    with Library.open(root) as lib:
        report = TagEditor(lib, text_encoder=None).import_csv(csv)
        assert report.errors == [] and lib.user_tags.of(ids(lib)[1])[:2] == ["Door", "tag 0"]
    assert len(calls) == 1
