"""Issue 42 item 5, `earshot tags write` as a run: what it may write and what a killed run leaves.

The sweep: a library file that is a link to a file outside the library had that file rewritten, unasked;
`--dry-run` listed 45 files as "would write" of which 6 were refused for real (it skipped the verification); a
kill -9 during a write left its hidden copy (317 MB in one case) until that same file was written again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.cli.main import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def library(tmp_path: Path) -> Path:
    """The CLI tests' library, the door tagged 'keeper', the dog 'haunted'."""
    from app.services.library.library import Library
    from tests.test_cli import tagged_library

    root = tagged_library(tmp_path / "lib")
    with Library.open(root) as lib:
        lib.user_tags.add([lib.files.id_of("doors/door_creak.wav")], ["keeper"])
        lib.user_tags.add([lib.files.id_of("animals/dog_bark.wav")], ["haunted"])
    return root


def _ikey(path: Path) -> list[str]:
    from app.services.library.embedded_tags import read_tags

    return read_tags(path).fields.get("keywords", [])


def test_a_link_to_a_file_outside_the_library_is_written_only_when_asked(tmp_path: Path, capsys) -> None:
    from app.services.jobs import drain
    from app.services.library.indexer import index_library
    from app.services.library.library import Library
    from tests.test_cli import tagged_library
    from tests.test_library import ToneEmbedder, tone, write

    outside = write(tmp_path / "elsewhere" / "real take.wav", tone(330, 0.6))
    root = tmp_path / "lib"
    (root / "links").mkdir(parents=True)
    (root / "links" / "take.wav").symlink_to(outside)
    tagged_library(root)
    drain(index_library(root, ToneEmbedder()))
    with Library.open(root) as lib:
        lib.user_tags.add([lib.files.id_of("links/take.wav"), lib.files.id_of("doors/door_creak.wav")], ["keeper"])
    before = outside.read_bytes()
    assert main(["tags", "write", "--library", str(root)]) == 1
    out = capsys.readouterr().out
    assert "refused      links/take.wav  a link to" in out and "outside the library" in out
    assert "--follow-links" in out and "written      doors/door_creak.wav" in out  # the library's own: written
    assert outside.read_bytes() == before
    assert main(["tags", "write", "links/take.wav", "--library", str(root), "--follow-links", "--json"]) == 0
    [report] = json.loads(capsys.readouterr().out)
    assert report["status"] == "written" and report["real_path"] == str(outside)  # the report names the real file
    assert (root / "links" / "take.wav").is_symlink() and "keeper" in _ikey(outside)[0]


def test_a_followed_link_is_named_with_its_real_file_in_the_plain_report(tmp_path: Path, capsys) -> None:
    from app.services.jobs import drain
    from app.services.library.indexer import index_library
    from app.services.library.library import Library
    from tests.test_library import ToneEmbedder, tone, write

    outside = write(tmp_path / "elsewhere" / "b.wav", tone(330, 0.6))
    root = tmp_path / "lib"
    root.mkdir()
    (root / "b.wav").symlink_to(outside)
    drain(index_library(root, ToneEmbedder()))
    with Library.open(root) as lib:
        lib.user_tags.add([lib.files.id_of("b.wav")], ["keeper"])
    assert main(["tags", "write", "--library", str(root), "--follow-links", "--dry-run"]) == 0
    assert f"would write  b.wav -> {outside}  IKEY='keeper'" in capsys.readouterr().out


def test_a_dry_run_checks_each_copy_as_the_write_does(library: Path, capsys, monkeypatch) -> None:
    from app.services.library import tag_writer
    from app.services.library.tag_writer import TagWriteError

    door = library / "doors/door_creak.wav"
    real_same = tag_writer._same_audio

    def differs_for_the_door(original: str, copy: str) -> None:  # a check only the copy can fail
        if os.path.basename(original) == door.name:
            raise TagWriteError("the copy's audio differs from the original's at frame 7")
        real_same(original, copy)

    monkeypatch.setattr(tag_writer, "_same_audio", differs_for_the_door)
    st = door.stat()
    assert main(["tags", "write", "--library", str(library), "--dry-run"]) == 1
    out = capsys.readouterr().out
    assert "refused      doors/door_creak.wav  the copy's audio differs" in out
    assert "would write  animals/dog_bark.wav  IKEY='haunted'" in out
    assert (door.stat().st_size, door.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    assert _ikey(library / "animals/dog_bark.wav") == []  # nothing written
    assert not [p for p in library.rglob(".*") if "earshot-tmp" in p.name]  # and no copy left


@pytest.mark.slow
def test_the_copy_of_a_killed_write_is_removed_by_the_next_run(library: Path, tmp_path: Path, capsys) -> None:
    """kill -9 while the copy is checked; the next run, for another file, removes it; a copy that a live run
    writes is left alone."""
    from core.files import in_flight

    code = ("import sys, time; import app.services.library.tag_writer as t; "
            "t._verify = lambda *a, **k: time.sleep(300); from app.cli.main import main; "
            f"main(['tags', 'write', '--library', {str(library)!r}, 'doors/door_creak.wav'])")
    child = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    copies: list[Path] = []
    try:
        for _ in range(1200):  # until the copy is made (the child's start takes seconds)
            copies = [p for p in (library / "doors").iterdir() if "earshot-tmp" in p.name]
            if copies or child.poll() is not None:
                break
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert len(copies) == 1 and copies[0].exists()
    live = library / "animals" / ".dog_bark.wav.abcdefgh.earshot-tmp.wav"  # another run's, in flight
    live.write_bytes(b"RIFF")
    for p in (copies[0], live):  # seconds later (a copy younger than core.files.LEFTOVER_AGE_S is not judged)
        os.utime(p, (time.time() - 60, time.time() - 60))
    with in_flight(live):
        assert main(["tags", "write", "--library", str(library), "animals/dog_bark.wav"]) == 0
    assert not copies[0].exists() and live.exists()
    err = capsys.readouterr().err
    assert "removed 1 hidden copy left by an interrupted tag write: doors/.door_creak.wav." in err
