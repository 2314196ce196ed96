"""Opening a large library without reading all of it (issue 25 item 5): the integrity check only after an
unclean close or a change by someone else, index files trusted by size and mtime, the vocabulary kept."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from app.services.jobs import drain
from app.services.library import catalog, clean_close, vectors
from app.services.library.indexer import index_library
from app.services.library.library import Library
from tests.test_library import ToneEmbedder, make_library
from tests.test_reliability import damage


@pytest.fixture
def checks(monkeypatch) -> list[str]:
    """Every full integrity check run (the catalog file it read)."""
    seen: list[str] = []
    real = catalog.quick_check

    def counting(db: sqlite3.Connection) -> list[str]:
        seen.append(db.execute("PRAGMA database_list").fetchone()[2])
        return real(db)

    monkeypatch.setattr(catalog, "quick_check", counting)
    return seen


@pytest.fixture
def library(tmp_path: Path) -> Path:
    root = make_library(tmp_path / "lib")
    drain(index_library(root, ToneEmbedder()))
    return root


def stamp_path(root: Path) -> Path:
    return root / ".earshot" / clean_close.STAMP_NAME


def test_a_clean_close_lets_the_next_open_skip_the_full_check(library: Path, checks: list[str]) -> None:
    assert stamp_path(library).exists()
    with Library.open(library):
        assert not stamp_path(library).exists()  # a crash from here on means a check next time
    assert checks == []
    assert stamp_path(library).exists()


def test_a_crash_while_open_means_a_full_check_next_time(library: Path, checks: list[str]) -> None:
    lib = Library.open(library)
    lib.db.close()  # the process dies: no close(), no stamp
    with Library.open(library):
        pass
    assert len(checks) == 1


def test_a_catalog_changed_by_someone_else_is_checked(library: Path, checks: list[str]) -> None:
    db = sqlite3.connect(library / ".earshot" / catalog.CATALOG_NAME)
    db.execute("PRAGMA user_version")  # a foreign tool's write: a new mtime
    db.execute("CREATE TABLE foreign_tool(x)")
    db.commit()
    db.close()
    with Library.open(library):
        pass
    assert len(checks) == 1


def test_damage_after_a_clean_close_is_found_and_repaired(library: Path, tmp_path: Path) -> None:
    cat = damage(library, tmp_path / "copy", "files")  # copytree keeps the stamp and mtime; the damage does not
    with Library.open(cat.parent.parent) as lib:
        assert lib.repair is not None


def test_an_old_check_runs_again_in_the_background_and_damage_found_there_is_repaired_next_time(
        library: Path, tmp_path: Path, monkeypatch) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(library, copy)
    cat = copy / ".earshot" / catalog.CATALOG_NAME
    doc = json.loads(stamp_path(copy).read_text())
    doc["checked_at"] = time.time() - clean_close.RECHECK_S - 60
    stamp_path(copy).write_text(json.dumps(doc))
    monkeypatch.setattr(catalog, "quick_check", lambda db: ["*** in database main *** Page 3: btreeInitPage error"])
    with Library.open(copy) as lib:  # opens at once; the check runs beside it
        assert lib.repair is None
        lib._check._thread.join(10)
        assert lib._check.problems and any("repairs it the next time" in e for e in lib.events)
    assert not stamp_path(copy).exists()  # damaged: the next open runs the full check
    assert cat.exists()


def test_a_passed_background_check_renews_the_stamp(library: Path) -> None:
    doc = json.loads(stamp_path(library).read_text())
    old = time.time() - clean_close.RECHECK_S - 60
    doc["checked_at"] = old
    stamp_path(library).write_text(json.dumps(doc))
    with Library.open(library) as lib:
        lib._check._thread.join(10)
        assert lib._check.problems == []
    assert json.loads(stamp_path(library).read_text())["checked_at"] > old + 60


def test_an_index_file_with_its_recorded_size_and_mtime_is_not_hashed(library: Path, monkeypatch) -> None:
    hashed: list[Path] = []
    real = vectors.hash_file
    monkeypatch.setattr(vectors, "hash_file", lambda p: hashed.append(p) or real(p))
    model_id = ToneEmbedder().model_id
    with Library.open(library) as lib:
        assert lib.vectors.count(model_id) == 4
    assert hashed == []
    index = next((library / ".earshot").glob("index-*.faiss"))
    st = index.stat()
    os.utime(index, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # the same bytes, copied: hashed once
    with Library.open(library) as lib:
        assert lib.vectors.count(model_id) == 4 and not any("rebuilding" in e for e in lib.events)
    with Library.open(library) as lib:
        assert lib.vectors.count(model_id) == 4
    assert hashed == [index]  # the new mtime was recorded


def test_an_index_file_changed_in_place_is_still_caught(library: Path) -> None:
    index = next((library / ".earshot").glob("index-*.faiss"))
    data = bytearray(index.read_bytes())
    data[-40:-8] = b"\x7f" * 32  # some vector bytes: the file still loads
    index.write_bytes(bytes(data))
    with Library.open(library) as lib:
        assert lib.vectors.count(ToneEmbedder().model_id) == 4
        assert any("rebuilding" in e or "damaged" in e for e in lib.events)


def test_the_vocabulary_is_counted_once_per_generation_of_the_words(library: Path, monkeypatch) -> None:
    from app.services.search import session as S
    from app.services.search.session import SearchSession

    counted: list[int] = []
    real = S.cached_counts

    def counting(path, generation, texts, write=True):  # noqa: ANN001, ANN202
        return real(path, generation, lambda: counted.append(generation) or texts(), write)

    monkeypatch.setattr(S, "cached_counts", counting)
    for _ in range(2):  # a second session (a new process) reads the counts back
        s = SearchSession(Library.open(library), ToneEmbedder())
        try:
            assert s._vocabulary(0).has("tone")
        finally:
            s.close()
    assert len(counted) == 1
    with Library.open(library) as lib:
        before = lib.text.words_generation()
        lib.user_tags.add([1], ["thunderous"])
        assert lib.text.words_generation() != before
    s = SearchSession(Library.open(library), ToneEmbedder())
    try:
        assert s._vocabulary(0).has("thunderous")
    finally:
        s.close()
    assert len(counted) == 2
