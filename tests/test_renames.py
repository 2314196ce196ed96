"""Issue 39, item 4: suggested names for recordings, and renaming users' files in a batch: atomic per file,
never over an existing file, journalled for undo, the catalog following with tags, favourites and vectors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from app.services.jobs import drain
from app.services.library import renames
from app.services.library.indexer import index_library
from app.services.library.library import Library
from app.services.library.renames import Rename, RenameError
from app.services.search.name_suggestions import best_catid, file_stem, suggest_names
from tests.test_library import ToneEmbedder, tone, write

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def library(tmp_path: Path) -> Path:
    root = tmp_path / "lib"
    for rel, f in {"foley/door_creak_slow.wav": 700.0, "foley/wooden_door_creak.wav": 760.0,
                   "fx/explosion_big.wav": 150.0, "Recordings/REC_0001.wav": 730.0,
                   "Recordings/REC_0002.wav": 160.0, "Recordings/REC_0003.wav": 3000.0}.items():
        write(root / rel, tone(f, 0.6))
    drain(index_library(root, ToneEmbedder()))
    return root


def test_a_recording_is_named_after_the_named_sounds_it_sounds_like(library: Path) -> None:
    with Library.open(library) as lib:
        ids = [lib.files.id_of(f"Recordings/REC_000{i}.wav") for i in (1, 2)]
        door, boom = suggest_names(lib, ToneEmbedder().model_id, ids)
    assert door.cat_id.startswith("DOOR") and "door" in door.words and "creak" in door.words, door
    assert door.name.startswith(door.cat_id + "_") and door.name.endswith(".wav")
    assert door.drawn_from[0].startswith("foley/") and "Recordings/REC_0002.wav" not in door.drawn_from
    assert boom.cat_id.startswith("EXPL") and boom.words[0] == "explosion", boom
    assert best_catid({}, [("DOORS", 0.6)]) == "DOORMisc"  # known only from the sound's category
    assert file_stem("", []) == "Untitled"


def test_suggested_names_never_repeat_in_a_folder(library: Path) -> None:
    write(library / "Recordings" / "REC_0004.wav", tone(730.0, 0.6))  # another door
    drain(index_library(library, ToneEmbedder()))
    with Library.open(library) as lib:
        ids = [lib.files.id_of(f"Recordings/REC_000{i}.wav") for i in (1, 4)]
        a, b = suggest_names(lib, ToneEmbedder().model_id, ids)
    assert a.name != b.name and b.name == a.name.replace(".wav", " 2.wav")


def test_a_batch_renames_undoes_and_the_catalog_keeps_tags_favourites_and_vectors(library: Path) -> None:
    emb = ToneEmbedder()
    with Library.open(library) as lib:
        fid = lib.files.id_of("Recordings/REC_0001.wav")
        lib.user_tags.add([fid], ["keeper"])
        lib.user_tags.set_favourite([fid], True)
        batch = [Rename("Recordings/REC_0001.wav", "DOORWood_Door Creak.wav"),
                 Rename("Recordings/REC_0002.wav", "EXPLMisc_Explosion.wav")]
        report = drain(renames.apply(lib, batch))
        assert [r.new for r in report.done] == ["Recordings/DOORWood_Door Creak.wav",
                                                "Recordings/EXPLMisc_Explosion.wav"]
    assert not (library / "Recordings" / "REC_0001.wav").exists()
    done = drain(index_library(library, emb))
    assert len(done.moved) == 2 and not done.embedded  # recognised by content: nothing read again
    with Library.open(library) as lib:
        moved = lib.files.id_of("Recordings/DOORWood_Door Creak.wav")
        assert lib.user_tags.of_files([moved])[moved] == ["keeper"] and moved in lib.user_tags.favourites([moved])
        assert lib.vectors.of_files(emb.model_id, [moved])
        assert len(renames.last_batch(lib)) == 2
        back = drain(renames.undo(lib))
        assert len(back.done) == 2 and renames.last_batch(lib) == []
    assert (library / "Recordings" / "REC_0001.wav").exists()
    drain(index_library(library, emb))
    with Library.open(library) as lib:
        fid = lib.files.id_of("Recordings/REC_0001.wav")
        assert lib.user_tags.of_files([fid])[fid] == ["keeper"]


def test_a_batch_that_cannot_be_done_renames_nothing(library: Path) -> None:
    with Library.open(library) as lib:
        for batch, said in (([Rename("Recordings/REC_0001.wav", "REC_0002.wav")], "exists already"),
                            ([Rename("Recordings/REC_0001.wav", "a/b.wav")], "holds '/'"),
                            ([Rename("Recordings/REC_0001.wav", " ")], "an empty name"),
                            ([Rename("Recordings/REC_0001.wav", "x" * 300 + ".wav")], "longer than 255 bytes"),
                            ([Rename("Recordings/REC_0001.wav", "Same.wav"), Rename("Recordings/REC_0003.wav",
                                                                                   "same.wav")], "exists already"),
                            ([Rename("Recordings/nope.wav", "x.wav")], "not found")):
            with pytest.raises(RenameError, match=said):
                drain(renames.apply(lib, batch))
    assert sorted(p.name for p in (library / "Recordings").iterdir()) == ["REC_0001.wav", "REC_0002.wav",
                                                                           "REC_0003.wav"]


KILLED = """
import os, sys, time
from app.services.jobs import drain
from app.services.library import renames
from app.services.library.library import Library
real = os.rename
def slow(a, b):
    real(a, b)
    print("renamed", flush=True)
    time.sleep(5)
os.rename = slow
with Library.open(sys.argv[1]) as lib:
    drain(renames.apply(lib, [renames.Rename(f"Recordings/REC_000{i}.wav", f"New {i}.wav") for i in (1, 2, 3)]))
"""


def test_a_kill_mid_batch_leaves_each_file_renamed_or_not_and_undo_knows_which(library: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(library)], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.readline().strip() == "renamed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    names = sorted(p.name for p in (library / "Recordings").iterdir())
    assert names == ["New 1.wav", "REC_0002.wav", "REC_0003.wav"]  # one renamed, the others not; none lost
    with Library.open(library) as lib:  # killed before the journal said so: the disk does
        assert [r.new for r in renames.last_batch(lib)] == ["Recordings/New 1.wav"]
        assert len(drain(renames.undo(lib)).done) == 1
    assert sorted(p.name for p in (library / "Recordings").iterdir()) == ["REC_0001.wav", "REC_0002.wav",
                                                                           "REC_0003.wav"]
