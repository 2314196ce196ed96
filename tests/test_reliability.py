"""Issue 27 (a hostile sweep): bad input anywhere gives a clear message and breaks nothing else."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from app.cli.main import main
from tests.test_cli import tagged_library


def nested_checkpoint(path: Path, depth: int = 20_000) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", depth) + b"[" * depth)
    return path


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A small library indexed with a tiny retrieval checkpoint: (library folder, checkpoint path)."""
    from tests.test_search_service import make_library, write_tiny_checkpoint

    tmp = tmp_path_factory.mktemp("indexed")
    root = make_library(tmp / "lib")
    ckpt = str(write_tiny_checkpoint(tmp / "models"))
    assert main(["index", str(root), "--model", ckpt, "--json"]) == 0
    return root, ckpt


# ------------------------------------------------------------------------ items 3 and 4: hostile checkpoints


@pytest.mark.parametrize("command", [["search", "door"], ["similar", "doors/door_creak.wav"], ["index"]])
def test_a_nested_header_checkpoint_is_refused_with_a_message(tmp_path: Path, capsys, command: list[str]) -> None:
    """Item 3: `earshot search door --library LIB --model x.safetensors` ended in a RecursionError traceback."""
    root = tagged_library(tmp_path / "lib")
    bad = str(nested_checkpoint(tmp_path / "x.safetensors"))
    if command == ["index"]:
        argv = ["index", str(root), "--model", bad]
    else:
        target = [str(root / command[1])] if command[0] == "similar" else [command[1]]
        argv = [command[0], *target, "--library", str(root), "--model", bad]
    assert main(argv) == 2
    assert "x.safetensors: the checkpoint header is nested 20000 levels deep" in capsys.readouterr().err


def test_a_bad_user_model_is_listed_by_models_and_info_and_search_still_works(tmp_path: Path, capsys,
                                                                              monkeypatch) -> None:
    """Item 4: one such file in the user models folder broke `earshot models`, `earshot info` and every search."""
    user = tmp_path / "user-models"
    nested_checkpoint(user / "x.safetensors")
    monkeypatch.setattr("app.services.registry.user_models_dir", lambda: user)
    assert main(["models", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert "retrieval-default" in {m["name"] for m in listed["models"]}
    assert [Path(p["path"]).name for p in listed["problems"]] == ["x.safetensors"]
    assert main(["models"]) == 0
    assert "problem: " in capsys.readouterr().err
    assert main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert "retrieval-default" in info["models"]
    assert [Path(p["path"]).name for p in info["model_problems"]] == ["x.safetensors"]
    root = tagged_library(tmp_path / "lib")
    assert main(["search", "dog bark", "--library", str(root), "--json"]) == 0  # the default model, listed
    # indexed with another model: no traceback; no sound vectors, but the names (no model of their own) answer
    out = capsys.readouterr()
    assert [h["name"] for h in json.loads(out.out)] == ["animals/dog_bark.wav"] and "no sounds indexed" in out.err


# ------------------------------------------------------------------ item 8: numbers checked at parse time

BIG = "99999999999999999999"  # > 2**63 - 1: SQLite's integers overflow


def parse_error(argv: list[str], capsys) -> str:
    """The argparse usage error `argv` gets (exit code 2) before anything runs."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("flag, value, reason", [
    ("--min-sample-rate", BIG, "above the maximum"), ("--max-sample-rate", BIG, "above the maximum"),
    ("--channels", BIG, "above the maximum"), ("--channels", "0", "below the minimum 1"),
    ("--min-sample-rate", "-8000", "below the minimum 1"), ("-k", BIG, "above the maximum"),
    ("--min-duration", "nan", "not a finite number"), ("--max-duration", "-1", "below the minimum 0"),
    ("--max-duration", "1e400", "not a finite number"), ("--channels", "2.5", "expected an integer"),
])
@pytest.mark.parametrize("command", ["search", "similar"])
def test_numeric_filters_are_range_checked_when_parsed(tmp_path: Path, capsys, command: str, flag: str, value: str,
                                                       reason: str) -> None:
    what = "door" if command == "search" else str(tmp_path / "x.wav")
    err = parse_error([command, what, "--library", str(tmp_path), flag, value], capsys)
    assert f"argument {flag}" in err and reason in err and "Traceback" not in err


def test_filter_too_big_for_sqlite_on_an_indexed_library_is_a_usage_error(indexed: tuple[Path, str], capsys
                                                                          ) -> None:
    """Item 8: `search door --min-sample-rate 99999999999999999999` was an OverflowError traceback."""
    root, ckpt = indexed
    args = ["--library", str(root), "--model", ckpt, "--json"]
    assert "above the maximum" in parse_error(["search", "door", "--min-sample-rate", BIG, *args], capsys)
    assert "above the maximum" in parse_error(["similar", str(root / "birds/chirp_b.wav"), "--channels", BIG,
                                               *args], capsys)
    assert main(["search", "door", "--min-sample-rate", "8000", "--channels", "1", *args]) == 0


def test_probe_sample_rate_is_range_checked(tmp_path: Path, capsys) -> None:
    """`probe --sample-rate 99999999999999999999` was a MemoryError from the resampler."""
    for value, reason in ((BIG, "above the maximum"), ("-5", "below the minimum"), ("0", "below the minimum")):
        assert reason in parse_error(["probe", str(tmp_path / "x.wav"), "--sample-rate", value], capsys)


@pytest.mark.parametrize("argv, flag", [
    (["train", "words", "--batch-size", BIG], "--batch-size"),  # a generated flag (core.config)
    (["train", "words", "--seed", BIG], "--seed"),
    (["eval", "words", "x.safetensors", "--seed", BIG], "--seed"),  # a trainer's own hand-written flags
    (["eval", "units", "x.safetensors", "--threads", BIG], "--threads"),
    (["eval", "words", "x.safetensors", "--max-items", "inf"], "--max-items"),
])
def test_training_and_evaluation_numbers_fit_64_bits(capsys, argv: list[str], flag: str) -> None:
    err = parse_error(argv, capsys)
    assert f"argument {flag}" in err and ("above the maximum" in err or "expected an integer" in err)


# ---------------------------------------------------------------------- item 9: control characters in queries


def test_a_nul_byte_in_a_query_is_a_space(indexed: tuple[Path, str], capsys, monkeypatch) -> None:
    """Item 9: `printf 'door\\x00\\n' | earshot search --library LIB` was sqlite3 "unterminated string"."""
    import io

    root, ckpt = indexed
    args = ["--library", str(root), "--model", ckpt, "--mode", "names"]
    capsys.readouterr()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"chirp\x00\nengine\x1b[0m\n")))
    assert main(["search", *args]) == 0
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [a["line"] for a in answers] == [1, 2]
    assert all(a["results"] for a in answers) and "chirp" in answers[0]["results"][0]["path"]
    assert main(["search", "chirp\x00", *args, "--json"]) == 0
    assert "chirp" in json.loads(capsys.readouterr().out)[0]["path"]


# ------------------------------------------------------------- item 14: invalid UTF-8 in tags is listed

BAD = b"\xff\xfe Caf\xe9 door"  # invalid UTF-8; as Latin-1: "ÿþ Café door"


def _patched(path: Path, placeholder: bytes) -> Path:
    """Replace `placeholder` (written through mutagen) by BAD, byte for byte in place."""
    data = path.read_bytes()
    assert data.count(placeholder) == 1 and len(placeholder) == len(BAD)
    path.write_bytes(data.replace(placeholder, BAD))
    return path


def _fix_ogg_crcs(path: Path) -> None:
    """Rewrite every Ogg page so its checksum fits the patched bytes (mutagen computes it)."""
    import io

    from mutagen.ogg import OggPage

    src, out = io.BytesIO(path.read_bytes()), bytearray()
    while src.tell() < len(src.getbuffer()):
        out += OggPage(src).write()
    path.write_bytes(bytes(out))


def bad_utf8_tagged(folder: Path) -> dict[str, str]:
    """A FLAC and an Ogg Vorbis file with an invalid UTF-8 Vorbis TITLE, a WAV with an invalid UTF-8 ID3 title;
    name -> what the problem must name."""
    import mutagen.flac
    import mutagen.oggvorbis
    import mutagen.wave
    import soundfile as sf
    from mutagen.id3 import TIT2

    from tests.test_library import SR, tone, write

    placeholder = b"Q" * len(BAD)
    flac = folder / "bad_vorbis.flac"
    folder.mkdir(parents=True, exist_ok=True)
    sf.write(flac, tone(880, 0.6), SR, format="FLAC")
    f = mutagen.flac.FLAC(flac)
    f["title"], f["description"] = placeholder.decode(), "fine words"
    f.save()
    _patched(flac, placeholder)
    ogg = folder / "bad_vorbis.ogg"
    sf.write(ogg, tone(660, 0.6), SR, format="OGG", subtype="VORBIS")
    f = mutagen.oggvorbis.OggVorbis(ogg)
    f["title"] = placeholder.decode()
    f.save()
    _fix_ogg_crcs(_patched(ogg, placeholder))
    wav = write(folder / "bad_id3.wav", tone(440, 0.6))
    f = mutagen.wave.WAVE(wav)
    f.add_tags()
    f.tags.add(TIT2(encoding=3, text=[placeholder.decode()]))
    f.save()
    _patched(wav, placeholder)
    return {"bad_vorbis.flac": "Vorbis comment TITLE", "bad_vorbis.ogg": "Vorbis comment TITLE",
            "bad_id3.wav": "ID3 TIT2"}


def test_invalid_utf8_in_vorbis_comments_and_id3_titles_is_a_tag_problem(tmp_path: Path) -> None:
    """Item 14: Vorbis text was stored with U+FFFD and the ID3 title dropped, neither reported."""
    from app.services.library.embedded_tags import read_tags

    expected = bad_utf8_tagged(tmp_path)
    for name, where in expected.items():
        t = read_tags(tmp_path / name)
        assert t.problem == f"{where}: not valid UTF-8 (read as Latin-1)", (name, t.problems)
        assert "ÿþ Café door" in t.fields["title"] and "\ufffd" not in t.text, (name, t.fields)
    assert read_tags(tmp_path / "bad_vorbis.flac").fields["description"] == ["fine words"]


def test_invalid_utf8_tags_are_listed_after_indexing(tmp_path: Path) -> None:
    from app.services.jobs import drain
    from app.services.library.indexer import index_library
    from app.services.library.library import Library
    from tests.test_library import ToneEmbedder

    root = tmp_path / "lib"
    expected = bad_utf8_tagged(root)
    report = drain(index_library(root, ToneEmbedder()))
    assert report.failed == [] and len(report.embedded) == 3
    assert {p.path: p.error for p in report.tag_problems} == {
        name: f"{where}: not valid UTF-8 (read as Latin-1)" for name, where in expected.items()}
    with Library.open(root) as lib:
        assert {p.path for p in lib.text.problems()} == set(expected)
        assert {f for f, _ in lib.text.keyword_search('"café"', 5)} == {lib.files.id_of(n) for n in expected}


# ------------------------------------------------------------------ item 15: one schema upgrade at a time

V2_FIXTURE = Path(__file__).parent / "data" / "v2_library"


def _open_at_once(root: Path, n: int) -> list[BaseException | int]:
    """Open `root`'s catalog from `n` threads released together; each gives its schema version or its error."""
    import threading

    from app.services.library import catalog

    start = threading.Barrier(n)
    results: list[BaseException | int] = [0] * n

    def one(i: int) -> None:
        start.wait()
        try:
            db = catalog.connect(root / ".earshot" / "catalog.sqlite")
            results[i] = db.execute("PRAGMA user_version").fetchone()[0]
            db.close()
        except BaseException as e:  # noqa: BLE001 - the test reports every failure
            results[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


@pytest.mark.parametrize("start", ["v2", "v2 rollback journal", "new"])
def test_two_processes_upgrading_an_old_catalog_at_once_both_succeed(tmp_path: Path, start: str) -> None:
    """Item 15: two processes opening a v2 catalog at once: 'duplicate column name: format' in 2 of 9 trials
    (and two creating a new catalog at once: 'table files already exists')."""
    import shutil
    import sqlite3

    from app.services.library import catalog
    from app.services.library.catalog import SCHEMA_VERSION

    for trial in range(5):
        root = tmp_path / f"lib{trial}"
        if start == "new":
            (root / ".earshot").mkdir(parents=True)
        else:
            shutil.copytree(V2_FIXTURE, root)
        if start == "v2 rollback journal":
            db = sqlite3.connect(root / ".earshot" / "catalog.sqlite")
            db.execute("PRAGMA journal_mode = DELETE")
            db.close()
        assert _open_at_once(root, 4) == [SCHEMA_VERSION] * 4
        db = sqlite3.connect(root / ".earshot" / "catalog.sqlite")
        assert [r[1] for r in db.execute("PRAGMA table_info(files)")].count("format") == 1
        assert db.execute("SELECT count(*) FROM text_fts_config WHERE k = 'rank'").fetchone()[0] == 1
        db.close()
    db = catalog.connect(root / ".earshot" / "catalog.sqlite")  # and an upgraded catalog opens as it is
    db.close()


def test_processes_opening_a_v2_library_at_once(tmp_path: Path) -> None:
    """The same with real processes through Library.open, as `earshot search` and the GUI would."""
    import shutil
    import subprocess
    import sys
    import time

    root = tmp_path / "lib"
    shutil.copytree(V2_FIXTURE, root)
    go = time.time() + 3
    code = ("import sys, time; from app.services.library.library import Library; "
            "time.sleep(max(0, float(sys.argv[2]) - "
            "time.time())); lib = Library.open(sys.argv[1]); print(lib.db.execute('PRAGMA user_version')"
            ".fetchone()[0]); lib.close()")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(root), str(go)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=Path(__file__).parents[1]) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [o[1][-500:] for o in outs]
    from app.services.library.catalog import SCHEMA_VERSION

    assert [o[0].strip() for o in outs] == [str(SCHEMA_VERSION)] * 3


# ------------------------------------------- items 1 and 2 (catalog side): a repair says exactly what it lost


@pytest.fixture(scope="module")
def tagged60(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 indexed files, every one tagged "haunted house" and "keeper", the first 10 favourites (the sweep's LIB)."""
    import sqlite3

    from app.services.jobs import drain
    from app.services.library.indexer import index_library
    from app.services.library.library import Library
    from tests.test_library import ToneEmbedder, many_tones

    root = tmp_path_factory.mktemp("tagged60") / "lib"
    many_tones(root, n=60, seconds=1.0)
    drain(index_library(root, ToneEmbedder()))
    with Library.open(root) as lib:
        ids = [r[0] for r in lib.db.execute("SELECT id FROM files ORDER BY id")]
        lib.user_tags.add(ids, ["haunted house", "keeper"])
        lib.user_tags.set_favourite(ids[:10], True)
    db = sqlite3.connect(root / ".earshot" / "catalog.sqlite")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return root


def damage(src: Path, dst: Path, table: str) -> Path:
    """A copy of library `src` with the last leaf page of `table` overwritten by garbage (the sweep's `dd`)."""
    import shutil
    import sqlite3

    shutil.copytree(src, dst)
    cat = dst / ".earshot" / "catalog.sqlite"
    db = sqlite3.connect(cat)
    page = db.execute("SELECT max(pageno) FROM dbstat WHERE name = ? AND pagetype = 'leaf'", (table,)).fetchone()[0]
    db.close()
    with open(cat, "r+b") as fh:
        fh.seek((page - 1) * 4096)
        fh.write((b"garbage\n" * 512)[:4096])
    return cat


def counts(root: Path) -> dict[str, int]:
    from app.services.library.library import Library

    with Library.open(root) as lib:
        return {t: lib.db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                for t in ("files", "vectors", "user_tags", "favourites")}


def test_a_damaged_tags_page_loses_no_tags_and_says_so(tagged60: Path, tmp_path: Path) -> None:
    """Item 2: with the user_tags page damaged, `index` said "0 file rows and 0 vectors lost" while all 120 tags
    were gone. The tags index is a second copy of every tag: they come back, and the report counts them."""
    from app.services.library import salvage

    cat = damage(tagged60, tmp_path / "lib", "user_tags")
    damaged_bytes = cat.read_bytes()
    report = salvage.salvage(cat)
    assert (report.files.before, report.files.kept, report.vectors.before, report.vectors.kept) == (60, 60, 60, 60)
    assert (report.user_tags.before, report.user_tags.kept) == (120, 120)
    assert (report.favourites.before, report.favourites.kept) == (10, 10)
    assert report.lost == {} and report.reread == [] and report.uncounted == []
    assert report.damaged_copy.read_bytes() == damaged_bytes  # the damaged file is kept as it was
    assert "kept 60 of 60 files, 60 of 60 vectors, 120 of 120 user tags, 10 of 10 favourites" in str(report)
    assert "nothing lost" in str(report)
    assert counts(tmp_path / "lib") == {"files": 60, "vectors": 60, "user_tags": 120, "favourites": 10}


def test_a_damaged_favourites_page_is_reported_as_lost(tagged60: Path, tmp_path: Path) -> None:
    """Item 2: all 10 favourites gone and "0 lost" reported. The favourites table has no second copy, so how many
    were on the damaged page cannot be counted: the report says which table lost an unknown number of rows."""
    from app.services.library import salvage

    cat = damage(tagged60, tmp_path / "lib", "favourites")
    report = salvage.salvage(cat)
    assert (report.files.kept, report.user_tags.kept, report.favourites.kept) == (60, 120, 0)
    assert report.uncounted == ["favourites"]
    assert "favourites: the damaged pages held an unknown number of rows, lost" in str(report)
    assert "nothing lost" not in str(report)


def test_a_damaged_files_page_keeps_the_files_tags_and_favourites_to_read_again(tagged60: Path,
                                                                                tmp_path: Path) -> None:
    """Items 1 and 2: a lost `files` leaf said "0 file rows lost" while 27 rows and their 54 tags were gone. The
    path index still names those files: their rows come back as failed ("read again") and keep their tags."""
    from app.services.jobs import drain
    from app.services.library import salvage
    from app.services.library.indexer import index_library
    from app.services.library.library import Library
    from tests.test_library import ToneEmbedder

    root = tmp_path / "lib"
    cat = damage(tagged60, root, "files")
    report = salvage.salvage(cat)
    n = len(report.reread)
    assert 0 < n < 60 and report.files.before == 60 and report.files.kept == 60 - n
    assert report.vectors.before == 60 and report.vectors.kept == 60 - n and report.lost == {"vectors": n}
    assert (report.user_tags.kept, report.favourites.before) == (120, 10) and report.uncounted == []
    assert all(p.startswith("t") and p.endswith(".wav") for p in report.reread)
    assert f"{n} files whose rows were damaged are listed as failed until `earshot index` reads them again" \
        in str(report)
    assert f"lost: {n} vectors" in str(report)
    with Library.open(root) as lib:
        assert {f.path for f in lib.files.failed()} == set(report.reread)
        assert lib.db.execute("SELECT count(*) FROM files WHERE format IS NULL").fetchone()[0] == 0
    again = drain(index_library(root, ToneEmbedder()))
    assert sorted(again.embedded) == sorted(report.reread) and again.failed == []
    assert counts(root) == {"files": 60, "vectors": 60, "user_tags": 120, "favourites": 10}


def test_repairs_in_the_same_second_keep_every_damaged_copy(tagged60: Path, tmp_path: Path) -> None:
    from app.services.library import salvage

    cat = damage(tagged60, tmp_path / "lib", "user_tags")
    first = salvage.salvage(cat).damaged_copy
    (tmp_path / "lib" / ".earshot" / "catalog.sqlite").write_bytes(b"not a database" * 400)
    second = salvage.salvage(cat).damaged_copy
    assert first != second and first.exists() and second.read_bytes() == b"not a database" * 400


def test_search_and_tags_say_what_a_repair_on_opening_kept_and_lost(tagged60: Path, tmp_path: Path, capsys) -> None:
    """Item 1: `search` on a damaged catalog repaired it and said nothing (rc 0, empty stderr)."""
    root = tmp_path / "lib"
    damage(tagged60, root, "favourites")
    (root / ".earshot" / "user-tags.json").unlink()  # no mirror to restore them from: the loss is said
    assert main(["tags", "export", "--library", str(root), "-o", str(tmp_path / "t.csv")]) == 0
    err = capsys.readouterr().err
    assert "library: damaged catalog moved to catalog.sqlite.damaged-" in err
    assert "favourites: the damaged pages held an unknown number of rows, lost" in err
    damage(tagged60, tmp_path / "lib2", "favourites")
    assert main(["search", "tone", "--library", str(tmp_path / "lib2"), "--mode", "names"]) == 0
    err = capsys.readouterr().err
    assert "library: damaged catalog moved to" in err and "restored from user-tags.json: 10 favourites" in err


# --------------------------------------------------------- item 13: one FAISS add per sentence vector


def test_tags_in_a_fresh_process_add_each_sentence_vector_once(tmp_path: Path, capsys) -> None:
    """Item 13: every `tags add/remove/import` in a fresh process added the new sentence vector to the text index
    twice (loading the index brought in the committed vector, then it was added again); the next open found
    duplicate ids and rebuilt the whole index."""
    from app.services.library.library import Library
    from app.services.library.text_channel import TEXT_PREFIX

    root = tagged_library(tmp_path / "lib")
    lib_args = ["--library", str(root)]
    assert main(["tags", "add", "animals/dog_bark.wav", "-t", "keeper", *lib_args]) == 0
    assert main(["tags", "remove", "animals/dog_bark.wav", "-t", "keeper", *lib_args]) == 0
    csv_file = tmp_path / "t.csv"
    csv_file.write_text("path,tags,favourite\ndoors/door_creak.wav,spooky,\n", encoding="utf-8")
    assert main(["tags", "import", str(csv_file), *lib_args]) == 0
    capsys.readouterr()
    with Library.open(root) as lib:
        model = lib.db.execute("SELECT model_id FROM models WHERE model_id LIKE ?", (TEXT_PREFIX + "%",)).fetchone()[0]
        vi = lib.vectors.index(model)
        stored = lib.db.execute("SELECT count(*) FROM vectors WHERE model_id = ?", (model,)).fetchone()[0]
        assert len(vi) == stored == 2 and len(set(vi.ids().tolist())) == 2
        assert not [e for e in lib.events if "index" in e], lib.events


# ------------------------------------------------- items 6 and 7: `similar` says why, as `probe` does


@pytest.fixture(scope="module")
def with_failure(indexed: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Two tones and a truncated WAV, indexed with the tiny checkpoint: (library folder, checkpoint path)."""
    from tests.test_library import tone, write

    root = tmp_path_factory.mktemp("with_failure") / "lib"
    write(root / "a.wav", tone(300, 1.0))
    write(root / "b.wav", tone(600, 1.0))
    write(root / "cut.wav", tone(500, 2.0))
    data = (root / "cut.wav").read_bytes()
    (root / "cut.wav").write_bytes(data[: len(data) // 2])
    assert main(["index", str(root), "--model", indexed[1], "--json"]) == 0
    return root, indexed[1]


def probe_reason(path: Path, capsys) -> str:
    capsys.readouterr()
    assert main(["probe", str(path)]) == 1
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"error  {path}: ")
    return out.removeprefix(f"error  {path}: ")


@pytest.mark.parametrize("kind", ["fifo", "folder", "missing"])
def test_similar_on_a_path_that_is_no_audio_file_gives_probes_reason(with_failure: tuple[Path, str], tmp_path: Path,
                                                                     capsys, kind: str) -> None:
    """Item 6: `similar` on a FIFO, a folder or a missing file said "not in the library"."""
    import os

    root, ckpt = with_failure
    path = tmp_path / kind
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    reason = probe_reason(path, capsys)
    assert main(["similar", str(path), "--library", str(root), "--model", ckpt]) == 2
    err = capsys.readouterr().err
    assert reason in err and "not in the library" not in err, err


def test_similar_on_a_file_that_failed_to_index_gives_its_recorded_reason(with_failure: tuple[Path, str],
                                                                          capsys) -> None:
    """Item 7: `similar` on a library file that failed to index said "file 4 has no vector for model '…' (index the
    library first)": an internal id and the wrong advice."""
    root, ckpt = with_failure
    capsys.readouterr()
    assert main(["similar", str(root / "cut.wav"), "--library", str(root), "--model", ckpt]) == 2
    err = capsys.readouterr().err
    assert "cut.wav" in err and "truncated" in err and "could not be indexed" in err, err
    assert "index the library first" not in err and "file " not in err.split("cut.wav")[0], err
