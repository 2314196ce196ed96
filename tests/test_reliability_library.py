"""Issue 27, the library side: a repair on opening is kept and reported everywhere (items 1 and 2), user tags and
favourites mirrored beside the catalog, vanished mounts (item 5), read-only catalogs (item 16)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli.main import main
from tests.test_reliability import counts, damage, tagged60  # noqa: F401 - tagged60 is a fixture

MIRROR = "user-tags.json"


def fts_rows(root: Path) -> int:
    from app.services.library.library import Library

    with Library.open(root) as lib:
        return lib.db.execute("SELECT count(*) FROM text_fts").fetchone()[0]


# ------------------------------------------------- items 1 and 2: what a repair kept and lost, everywhere


def test_the_library_keeps_the_repair_report_and_derives_the_text_channel_again(tagged60: Path,  # noqa: F811
                                                                               tmp_path: Path) -> None:
    """After a salvage the keyword index was empty: name search found nothing until a full re-index."""
    from app.services.library.library import Library

    root = tmp_path / "lib"
    damage(tagged60, root, "user_tags")
    with Library.open(root) as lib:
        report = lib.repair
        assert report is not None and report.user_tags.kept == 120 and report.lost == {}
        assert report.damaged_copy.exists() and "damaged catalog moved to" in lib.notice
        assert lib.db.execute("SELECT count(*) FROM texts").fetchone()[0] == 60
        found = lib.text.keyword_files('"haunted"')
        assert len(found) == 60
    with Library.open(root) as lib:
        assert lib.repair is None and lib.notice == ""


def test_a_damaged_texts_page_is_derived_again_from_the_files(tagged60: Path, tmp_path: Path) -> None:  # noqa: F811
    root = tmp_path / "lib"
    damage(tagged60, root, "texts")
    assert fts_rows(root) == 60
    assert counts(root) == {"files": 60, "vectors": 60, "user_tags": 120, "favourites": 10}


def test_tags_and_favourites_are_mirrored_beside_the_catalog(tagged60: Path, tmp_path: Path) -> None:  # noqa: F811
    from app.services.library.library import Library

    mirror = json.loads((tagged60 / ".earshot" / MIRROR).read_text(encoding="utf-8"))
    files = {f["path"]: f for f in mirror["files"]}
    assert len(files) == 60 and sum(f["favourite"] for f in files.values()) == 10
    assert all(f["tags"] == ["haunted house", "keeper"] for f in files.values())
    root = tmp_path / "lib"
    damage(tagged60, root, "favourites")  # a copy: its mirror too
    with Library.open(root) as lib:
        some = lib.files.id_of(next(iter(files)))
        lib.user_tags.remove([some], ["keeper"])
        lib.user_tags.set_favourite([some], False)
    after = {f["path"]: f for f in json.loads((root / ".earshot" / MIRROR).read_text(encoding="utf-8"))["files"]}
    assert after[next(iter(files))]["tags"] == ["haunted house"]
    assert not list((root / ".earshot").glob(f".{MIRROR}.*"))  # written atomically: no temp file left


def test_an_import_is_mirrored_once_and_an_untagged_library_has_no_mirror(tmp_path: Path, monkeypatch) -> None:
    from app.services.library import tag_mirror, user_tags
    from tests.test_cli import tagged_library

    root = tagged_library(tmp_path / "lib")
    assert main(["tags", "export", "--library", str(root), "-o", str(tmp_path / "none.csv")]) == 0
    assert not (root / ".earshot" / MIRROR).exists()
    writes = []
    monkeypatch.setattr(user_tags, "write_mirror", lambda *a: writes.append(1) or tag_mirror.write_mirror(*a))
    source = tmp_path / "in.csv"
    source.write_text("path,tags,favourite\nanimals/dog_bark.wav,keeper,1\ndoors/door_creak.wav,spooky,\n",
                      encoding="utf-8")
    assert main(["tags", "import", str(source), "--library", str(root)]) == 0
    files = json.loads((root / ".earshot" / MIRROR).read_text(encoding="utf-8"))["files"]
    assert {(f["path"], tuple(f["tags"]), f["favourite"]) for f in files} == {
        ("animals/dog_bark.wav", ("keeper",), True), ("doors/door_creak.wav", ("spooky",), False)}
    assert len(writes) == 1


def test_favourites_lost_with_a_damaged_page_come_back_from_the_mirror(tagged60: Path,  # noqa: F811
                                                                       tmp_path: Path) -> None:
    """Item 2: a damaged favourites page lost all 10 favourites, and how many could not even be counted."""
    from app.services.library.library import Library

    root = tmp_path / "lib"
    damage(tagged60, root, "favourites")
    with Library.open(root) as lib:
        report = lib.repair
        assert report is not None and report.uncounted == [] and report.lost == {}
        assert (report.favourites.before, report.favourites.kept, report.favourites.restored) == (10, 0, 10)
        assert f"restored from {MIRROR}: 10 favourites" in str(report) and "nothing lost" in str(report)
    assert counts(root) == {"files": 60, "vectors": 60, "user_tags": 120, "favourites": 10}


def test_a_catalog_lost_whole_gets_its_tags_back_from_the_mirror(tagged60: Path, tmp_path: Path) -> None:  # noqa: F811
    """Not one row of the catalog reads: the mirror still names every tagged file, which is read again."""
    import shutil

    from app.services.jobs import drain
    from app.services.library.indexer import index_library
    from app.services.library.library import Library
    from tests.test_library import ToneEmbedder

    root = tmp_path / "lib"
    shutil.copytree(tagged60, root)
    (root / ".earshot" / "catalog.sqlite").write_bytes(b"not a database" * 400)
    with Library.open(root) as lib:
        report = lib.repair
        assert report is not None and len(report.reread) == 60
        assert (report.user_tags.restored, report.favourites.restored) == (120, 10)
    drain(index_library(root, ToneEmbedder()))
    assert counts(root) == {"files": 60, "vectors": 60, "user_tags": 120, "favourites": 10}


@pytest.mark.parametrize("command", ["search", "similar", "index", "tags"])
def test_every_command_that_opens_a_library_says_what_a_repair_lost_also_as_json(
        tagged60: Path, tmp_path: Path, capsys, monkeypatch, command: str) -> None:  # noqa: F811
    """Item 1: search, similar and tags repaired silently (rc 0, empty stderr); --json said nothing either."""
    from tests.test_library import ToneEmbedder

    class Tone(ToneEmbedder):
        name = "tone"

    monkeypatch.setattr("app.services.search.embedder.load_embedder", lambda *a, **k: Tone())
    monkeypatch.setattr("app.services.search.embedder.load_query_embedder", lambda *a, **k: Tone())
    root = tmp_path / "lib"
    damage(tagged60, root, "files")
    lib = ["--library", str(root)]
    argv = {"search": ["search", "tone", *lib, "--mode", "names", "--json"],
            "similar": ["similar", str(root / "t00.wav"), *lib, "--json"],
            "index": ["index", str(root), "--json"],
            "tags": ["tags", "import", str(tmp_path / "t.csv"), *lib, "--json"]}[command]
    (tmp_path / "t.csv").write_text("path,tags,favourite\n", encoding="utf-8")
    assert main(argv) in (0, 2)
    out, err = capsys.readouterr()
    assert "library: damaged catalog moved to catalog.sqlite.damaged-" in err
    assert "files whose rows were damaged are listed as failed" in err
    repair = json.loads(out)["repair"] if command in ("index", "tags") else \
        json.loads(next(line for line in err.splitlines() if line.startswith("{")))["repair"]
    assert repair["files"]["before"] == 60 and repair["reread"] and repair["damaged_copy"].startswith(str(root))


# --------------------------------------------------- item 5: a vanished mount or link target is unavailable


def _index(root: Path):  # noqa: ANN202 - an IndexReport
    from app.services.jobs import drain
    from app.services.library.indexer import index_library
    from tests.test_library import ToneEmbedder

    return drain(index_library(root, ToneEmbedder()))


def _fill(folder: Path) -> None:
    from tests.test_library import tone, write

    for f in (300, 1200, 4800):
        write(folder / f"s_{f}.wav", tone(f, 1.0))


@pytest.mark.parametrize("how", ["dangling link", "tmpfs mount"])
def test_a_vanished_mount_or_link_target_is_unavailable_not_deleted(tmp_path: Path, how: str) -> None:
    """Item 5: `umount LIB2/sub; earshot index LIB2` removed its 20 files (rows, tags, favourites) and re-embedded
    them all when the mount came back; so did a folder symlink whose target was gone."""
    import os
    import shutil
    import subprocess

    from app.services.library.library import Library
    from tests.test_library import tone, write

    if how == "tmpfs mount" and os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; the dangling link covers the same code unprivileged")
    root = tmp_path / "lib"
    write(root / "local.wav", tone(600, 1.0))
    store, sub = tmp_path / "store", root / "sub"
    _fill(store)

    def attach(files: bool = True) -> None:
        if how == "dangling link":
            (tmp_path / "away").rename(store) if not store.exists() else None
            if not sub.is_symlink():
                sub.symlink_to(store, target_is_directory=True)
        else:
            sub.mkdir(exist_ok=True)
            subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(sub)], check=True)
            if files:
                for f in store.iterdir():
                    shutil.copy2(f, sub / f.name)

    def detach() -> None:
        if how == "dangling link":
            store.rename(tmp_path / "away")
        else:
            subprocess.run(["umount", str(sub)], check=True)

    attach()
    try:
        assert len(_index(root).embedded) == 4
        with Library.open(root) as lib:
            fid = lib.files.id_of("sub/s_300.wav")
            lib.user_tags.add([fid], ["keeper"])
            lib.user_tags.set_favourite([fid], True)
        detach()
        report = _index(root)
        assert report.removed == 0 and report.unavailable == 3, report
        assert any("sub" in e and "kept" in e for e in report.scan_errors), report.scan_errors
        with Library.open(root) as lib:
            assert lib.stats().files == 4 and lib.stats().unavailable == 3
            assert lib.user_tags.of(fid) == ["keeper"] and lib.user_tags.favourites() == {fid}
        if how == "tmpfs mount":  # an empty share mounted there: still not deleted
            attach(files=False)
            assert _index(root).unavailable == 3
            detach()
        attach()
        report = _index(root)
        assert report.embedded == [] and report.unavailable == 0 and report.removed == 0
        with Library.open(root) as lib:
            assert lib.stats().unavailable == 0 and lib.user_tags.of(fid) == ["keeper"]
    finally:
        if how == "tmpfs mount" and os.path.ismount(sub):
            subprocess.run(["umount", str(sub)], check=False)


def test_an_emptied_plain_folder_still_counts_as_deleted(tmp_path: Path) -> None:
    """Only mount points and links are kept: a folder the user emptied loses its rows as before."""
    root = tmp_path / "lib"
    _fill(root / "sub")
    assert len(_index(root).embedded) == 3
    for f in (root / "sub").iterdir():
        f.unlink()
    report = _index(root)
    assert report.removed == 3 and report.unavailable == 0


# ------------------------------------------------------------- item 16: a read-only catalog is searched read-only


@pytest.fixture(params=["simulated", "read-only mount", "chmod"])
def read_only_library(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch) -> Path:
    """A tagged, indexed library whose catalog cannot be written: simulated (the write test says no, for a root
    run), on a tmpfs remounted read-only (root: EROFS stops root too), or chmod a-w (unprivileged runs only)."""
    import os
    import shutil
    import subprocess

    from app.services.library.library import Library
    from tests.test_cli import tagged_library

    root = tagged_library(tmp_path / "build" / "lib")
    with Library.open(root) as lib:
        lib.user_tags.add([lib.files.id_of("animals/dog_bark.wav")], ["keeper"])
    monkeypatch.setattr("app.services.library.catalog.user_data_dir", lambda *a, **k: str(tmp_path / "private"))
    if request.param == "simulated":
        real = __import__("app.services.library.catalog", fromlist=["can_write"]).can_write
        monkeypatch.setattr("app.services.library.catalog.can_write",
                            lambda folder: real(folder) and folder.name != ".earshot")
        return root
    if request.param == "chmod":
        if os.geteuid() == 0:
            pytest.skip("root ignores permission bits: the simulated and read-only-mount cases cover it")
        for p in (root / ".earshot", *(root / ".earshot").iterdir()):
            p.chmod(p.stat().st_mode & ~0o222)
        request.addfinalizer(lambda: [p.chmod(p.stat().st_mode | 0o200) for p in (root / ".earshot",
                                                                                 *(root / ".earshot").iterdir())])
        return root
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "ro"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(mount)], check=True)
    request.addfinalizer(lambda: subprocess.run(["umount", str(mount)], check=False))
    shutil.copytree(root, mount / "lib", symlinks=True)
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
    return mount / "lib"


def test_a_read_only_catalog_is_searched_read_only(read_only_library: Path, tmp_path: Path) -> None:
    """Item 16: a shared library indexed by someone else was ignored: search said "has no sounds indexed"."""
    from app.services.library.library import Library
    from app.services.library.records import LibraryError
    from tests.test_library import ToneEmbedder, sound_search

    with Library.open(read_only_library) as lib:
        assert lib.read_only and lib.catalog_dir == read_only_library / ".earshot"
        assert "read-only" in lib.notice and "write access" in lib.notice
        assert lib.stats().files == 3 and lib.user_tags.all() == ["keeper"]
        assert sound_search(lib, ToneEmbedder(), "440 Hz", k=1)[0].rel_path == "animals/dog_bark.wav"
        fid = lib.files.id_of("doors/door_creak.wav")
        with pytest.raises(LibraryError, match="write access"):
            lib.user_tags.add([fid], ["spooky"])
    assert not (tmp_path / "private").exists()  # no private catalog made beside it


def test_index_and_tags_on_a_read_only_catalog_say_so_and_fail(read_only_library: Path, tmp_path: Path, capsys,
                                                               monkeypatch) -> None:
    """Item 16: `index` re-embedded everything into a private catalog."""
    from tests.test_library import ToneEmbedder

    class Tone(ToneEmbedder):
        name = "tone"

    monkeypatch.setattr("app.services.search.embedder.load_embedder", lambda *a, **k: Tone())
    monkeypatch.setattr("app.services.search.embedder.load_query_embedder", lambda *a, **k: Tone())
    lib = ["--library", str(read_only_library)]
    assert main(["search", "dog", *lib, "--mode", "names", "--json"]) == 0
    out, err = capsys.readouterr()
    assert [h["path"] for h in json.loads(out)][:1] == [str(read_only_library / "animals/dog_bark.wav")]
    assert "read-only" in err and "no sounds indexed" not in err
    assert main(["index", str(read_only_library)]) == 2
    err = capsys.readouterr().err
    assert "read-only" in err and "write access" in err
    assert main(["tags", "add", "doors/door_creak.wav", "-t", "spooky", *lib]) == 2
    assert "write access" in capsys.readouterr().err
    assert main(["tags", "export", *lib]) == 0 and "keeper" in capsys.readouterr().out
    assert not (tmp_path / "private").exists()
