"""The development search libraries (bench/data/search_libraries) and their builder, without network or apt:
the data files are well-formed, the mixed copy's renaming is deterministic and covers half the files, and a
library is materialised and verified from a .deb built here (when dpkg-deb is available)."""

from __future__ import annotations

import ast
import hashlib
import io
import re
import shutil
import struct
import subprocess
import wave
from pathlib import Path

import pytest

from bench import search_libraries as sl

NAMES = sl.library_names()


def test_at_least_three_libraries() -> None:
    assert len(NAMES) >= 3, NAMES


@pytest.mark.parametrize("name", NAMES)
def test_library_and_queries_are_well_formed(name: str) -> None:
    lib, queries = sl.load_library(name), sl.load_queries(name)
    assert sl.library_problems(lib, queries) == []
    assert lib.name == name and lib.package and lib.version and lib.licence
    assert len(queries) >= 30 and len(lib.files) >= 40


@pytest.mark.parametrize("name", NAMES)
def test_relevance_rules_come_first(name: str) -> None:
    text = (sl.DATA_DIR / name / "RELEVANCE.md").read_text()
    assert 0 <= text.index("## Rules") < text.index("## Evidence")


def test_problems_are_found() -> None:
    """library_problems catches a relevant file missing from the list, too few queries and a reserved package."""
    lib = sl.load_library(NAMES[0])
    queries = sl.load_queries(NAMES[0])
    bad = [sl.Query("x-1", "nothing", "plain", ("no/such/file.ogg",), "none")] + queries[:3]
    problems = sl.library_problems(lib, bad)
    assert any("no/such/file.ogg" in p for p in problems) and any("fewer than 30" in p for p in problems)
    reserved = sl.Library("r", "ktuberling-data", "1", "GPL", "usr/share", lib.files)
    assert any("reserved" in p for p in sl.library_problems(reserved, queries))


@pytest.mark.parametrize("name", NAMES)
def test_mixed_plan_is_deterministic_half_and_recorder_style(name: str) -> None:
    lib = sl.load_library(name)
    plan = sl.mixed_plan(lib, seed=0)
    assert plan == sl.mixed_plan(lib, seed=0)
    assert len(plan) == len(lib.files) // 2 and set(plan) <= set(lib.paths)
    assert all(re.fullmatch(r"Recordings/REC_[0-9A-F]{8}\.[a-z0-9]+", new) for new in plan.values())
    assert all(Path(old).suffix.lower() == Path(new).suffix for old, new in plan.items())
    kept = set(lib.paths) - set(plan)
    assert len(set(plan.values())) == len(plan) and not kept & set(plan.values())
    assert sl.mixed_plan(lib, seed=1) != plan


def test_mixed_relevance_follows_renamed_files() -> None:
    lib, queries = sl.load_library(NAMES[0]), sl.load_queries(NAMES[0])
    plan = sl.mixed_plan(lib)
    for before, after in zip(queries, sl.mixed_relevance(queries, plan), strict=True):
        assert after.relevant == tuple(plan.get(p, p) for p in before.relevant)
    assert any(r.startswith("Recordings/") for q in sl.mixed_relevance(queries, plan) for r in q.relevant)


def test_builder_imports_no_earshot_code() -> None:
    """The builder must not import or run Earshot's search (or any model code)."""
    tree = ast.parse(Path(sl.__file__).read_text())
    roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    roots |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not roots & {"app", "core", "models", "training", "bench", "torch", "numpy"}, roots


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")
def test_materialise_and_mixed_from_a_local_deb(tmp_path: Path) -> None:
    """A .deb built here stands in for the archive: files land at their original paths, the list is verified,
    the mixed copy holds every file once, and a library.json that lists a file the package lacks is refused."""
    sounds = {"Animals/dog bark.ogg": b"woof" * 10, "Animals/cat.wav": b"meow", "door.flac": b"creak",
              "Vehicles/car/horn.ogg": b"honk"}
    pkg = tmp_path / "pkg"
    for rel, data in sounds.items():
        (pkg / "usr/share/fake/sounds" / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / "usr/share/fake/sounds" / rel).write_bytes(data)
    (pkg / "usr/share/fake/sounds/readme.txt").write_text("not a sound")
    (pkg / "DEBIAN").mkdir()
    (pkg / "DEBIAN/control").write_text("Package: fake-sounds\nVersion: 1:1.0-1\nArchitecture: all\n"
                                        "Maintainer: nobody <n@example.org>\nDescription: test sounds\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(pkg),
                    str(cache / "fake-sounds_1%3a1.0-1_all.deb")], check=True, capture_output=True)
    files = tuple(sl.LibraryFile(rel, hashlib.sha256(data).hexdigest(), len(data)) for rel, data in sounds.items())
    lib = sl.Library("fake", "fake-sounds", "1:1.0-1", "none", "usr/share/fake/sounds", files)

    folder = sl.materialise(lib, tmp_path / "out", cache)
    assert sorted(sl.audio_files(folder)) == sorted(sounds)
    assert (folder / "Animals/dog bark.ogg").read_bytes() == sounds["Animals/dog bark.ogg"]

    mixed, plan = sl.make_mixed(lib, folder, tmp_path / "out", seed=3)
    assert len(plan) == 2 and len(sl.audio_files(mixed)) == 4
    assert all((mixed / new).read_bytes() == sounds[old] for old, new in plan.items())
    assert (mixed / "mapping.json").is_file()

    listed_but_absent = sl.Library("fake", lib.package, lib.version, "none", lib.root,
                                   files + (sl.LibraryFile("gone.ogg", "0" * 64, 1),))
    with pytest.raises(ValueError, match="gone.ogg"):
        sl.materialise(listed_but_absent, tmp_path / "out2", cache)


# ---------------------------------------------------------------------------------------------- recorder sub-folder


def _fake_deb(tmp_path: Path, files: dict[str, bytes], root: str = "usr/share/fake/sounds") -> Path:
    """A .deb built here with `files` under `root`, in a cache folder of its own; returns that folder."""
    pkg = tmp_path / "pkg"
    for rel, data in files.items():
        (pkg / root / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / root / rel).write_bytes(data)
    (pkg / "DEBIAN").mkdir()
    (pkg / "DEBIAN/control").write_text("Package: fake-sounds\nVersion: 1.0-1\nArchitecture: all\n"
                                        "Maintainer: nobody <n@example.org>\nDescription: test sounds\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(pkg), str(cache / "fake-sounds_1.0-1_all.deb")],
                   check=True, capture_output=True)
    return cache


def test_recorder_renaming_is_seeded_and_numbered() -> None:
    paths = [f"Sounds/s{i}.wav" for i in range(10)]
    plan = sl.recorder_renaming(paths, 4, "ZOOM H5 2024-05-18 field day", "ZOOM%04d", 1, "x:0")
    assert plan == sl.recorder_renaming(reversed(paths), 4, "ZOOM H5 2024-05-18 field day", "ZOOM%04d", 1, "x:0")
    assert sorted(plan.values()) == [f"ZOOM H5 2024-05-18 field day/ZOOM000{i}.wav" for i in range(1, 5)]
    assert set(plan) <= set(paths) and plan != sl.recorder_renaming(paths, 4, "Z", "ZOOM%04d", 1, "x:1")


def test_renaming_problems_are_found() -> None:
    files = tuple(sl.LibraryFile(p, "0" * 64, 1) for p in ("a.wav", "b.wav", "c.ogg"))
    good = sl.Library("r", "fake", "1", "none", "usr/share", files, (("a.wav", "TASCAM DR-40/DR0000_0001.wav"),))
    queries = [sl.Query(f"r-{i}", f"q{i}", "plain", ("a.wav",), "basis") for i in range(30)]
    assert sl.library_problems(good, queries) == []
    # queries.csv names the ORIGINAL path: the recorder-style one is refused, with the original named
    renamed_path = [sl.Query("r-x", "qx", "plain", ("TASCAM DR-40/DR0000_0001.wav",), "basis")]
    assert any("original paths: 'a.wav'" in p for p in sl.library_problems(good, queries + renamed_path))
    for renamed, words in (((("zz.wav", "R/REC_0001.wav"),), "not in library.json"),
                           ((("a.wav", "REC_0001.wav"),), "inside a sub-folder"),
                           ((("c.ogg", "R/REC_0001.wav"),), "suffix"),
                           ((("a.wav", "R/X.wav"), ("b.wav", "R/X.wav")), "two files to one path")):
        bad = sl.Library("r", "fake", "1", "none", "usr/share", files, renamed)
        assert any(words in p for p in sl.library_problems(bad, queries)), (renamed, words)
    clash = sl.Library("r", "fake", "1", "none", "usr/share",
                       files + (sl.LibraryFile("R/b.wav", "0" * 64, 1),), (("a.wav", "R/b.wav"),))
    assert any("keep their names" in p for p in sl.library_problems(clash, queries))


@pytest.mark.parametrize("name", NAMES)
def test_renamed_is_what_its_rule_gives(name: str) -> None:
    assert sl.renamed_rule_problems(name) == []


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")
def test_renamed_files_are_built_in_their_recorder_subfolder(tmp_path: Path) -> None:
    """`renamed` moves files into the recorder-named sub-folder after checking them; relevance follows them, the
    mixed copy holds every file once, and a renamed file whose bytes changed is refused."""
    sounds = {"Sounds/door.wav": b"creak" * 3, "Sounds/engine.wav": b"vroom", "Sounds/rain.wav": b"pitter",
              "click.wav": b"tick"}
    cache = _fake_deb(tmp_path, sounds)
    files = tuple(sl.LibraryFile(p, hashlib.sha256(d).hexdigest(), len(d)) for p, d in sounds.items())
    renamed = (("Sounds/door.wav", "ZOOM H5 2024-05-18 field day/ZOOM0002.wav"),
               ("Sounds/engine.wav", "ZOOM H5 2024-05-18 field day/ZOOM0001.wav"))
    lib = sl.Library("fake", "fake-sounds", "1.0-1", "none", "usr/share/fake/sounds", files, renamed)

    folder = sl.materialise(lib, tmp_path / "out", cache)
    assert sorted(sl.audio_files(folder)) == ["Sounds/rain.wav", "ZOOM H5 2024-05-18 field day/ZOOM0001.wav",
                                               "ZOOM H5 2024-05-18 field day/ZOOM0002.wav", "click.wav"]
    assert (folder / "ZOOM H5 2024-05-18 field day/ZOOM0001.wav").read_bytes() == b"vroom"
    query = sl.Query("f-1", "car engine", "plain", ("Sounds/engine.wav", "click.wav"), "basis")
    [built] = sl.mixed_relevance([query], sl.built_paths(lib))
    assert built.relevant == ("ZOOM H5 2024-05-18 field day/ZOOM0001.wav", "click.wav")

    mixed, plan = sl.make_mixed(lib, folder, tmp_path / "out", seed=0)
    where = sl.built_paths(lib, plan)
    assert sorted(sl.audio_files(mixed)) == sorted(where.values()) and len(where) == 4
    assert all((mixed / where[p]).read_bytes() == sounds[p] for p in sounds)
    [in_mixed] = sl.mixed_relevance([query], where)
    assert all((mixed / p).is_file() for p in in_mixed.relevant)

    wrong = sl.Library("fake", lib.package, lib.version, "none", lib.root,
                       tuple(sl.LibraryFile(f.path, "0" * 64 if f.path == "Sounds/door.wav" else f.sha256, f.bytes)
                             for f in files), renamed)
    with pytest.raises(ValueError, match="door.wav"):
        sl.materialise(wrong, tmp_path / "out2", cache)


# ---------------------------------------------------------------------------------------------- soundfonts


def _sf2(samples: list[tuple[str, list[int], int]]) -> bytes:
    """A minimal SoundFont 2 file: INFO, sdta/smpl with the samples' points, pdta/shdr with their headers."""
    def chunk(cid: bytes, data: bytes) -> bytes:
        return cid + struct.pack("<I", len(data)) + data + (b"\0" if len(data) % 2 else b"")

    smpl, shdr, at = b"", b"", 0
    for name, points, rate in samples + [("EOS", [], 0)]:
        smpl += struct.pack(f"<{len(points)}h", *points) + b"\0" * 92  # SF2 puts 46 zero points after each
        shdr += struct.pack("<20sIIIIIBbHH", name.encode(), at, at + len(points), at, at + len(points), rate,
                            60, 0, 0, 1)
        at += len(points) + 46
    body = (b"sfbk" + chunk(b"LIST", b"INFO" + chunk(b"ifil", struct.pack("<HH", 2, 1)))
            + chunk(b"LIST", b"sdta" + chunk(b"smpl", smpl)) + chunk(b"LIST", b"pdta" + chunk(b"shdr", shdr)))
    return b"RIFF" + struct.pack("<I", len(body)) + body


def test_soundfont_samples_become_wav_files() -> None:
    data = _sf2([("Kick", [0, 1000, -1000, 5], 44100), ("Snare", [7, -7], 22050)])
    headers, smpl = sl.soundfont_samples(data)
    assert [(h.name, h.end - h.start, h.rate) for h in headers] == [("Kick", 4, 44100), ("Snare", 2, 22050)]
    with wave.open(io.BytesIO(sl.sample_wav(headers[1], smpl))) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()) == (1, 2, 22050, 2)
        assert struct.unpack("<2h", w.readframes(2)) == (7, -7)
    with pytest.raises(ValueError):
        sl.soundfont_samples(b"RIFF\0\0\0\0WAVE")


def test_soundfont_problems_are_found() -> None:
    files = (sl.LibraryFile("Kit/Kick.wav", "0" * 64, 1, 0), sl.LibraryFile("Kit/Snare.wav", "0" * 64, 1, 0))
    lib = sl.Library("s", "fake", "1", "none", "usr/share", files, (), "bank.sf2")
    assert any("same sample" in p for p in sl.library_problems(lib, []))
    plain = sl.Library("s", "fake", "1", "none", "usr/share", files)
    assert any("no soundfont" in p for p in sl.library_problems(plain, []))


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")
def test_soundfont_library_is_materialised_from_the_deb(tmp_path: Path) -> None:
    data = _sf2([("Kick", [0, 1000, -1000, 5], 44100), ("Snare", [7, -7], 22050), ("Hat", [3], 8000)])
    cache = _fake_deb(tmp_path, {"bank.sf2": data}, root="usr/share/fake/soundfonts")
    headers, smpl = sl.soundfont_samples(data)
    wavs = {"Rock Kit/Kick.wav": sl.sample_wav(headers[0], smpl), "Rock Kit/Hat.wav": sl.sample_wav(headers[2], smpl)}
    files = (sl.LibraryFile("Rock Kit/Kick.wav", hashlib.sha256(wavs["Rock Kit/Kick.wav"]).hexdigest(), 0, 0),
             sl.LibraryFile("Rock Kit/Hat.wav", hashlib.sha256(wavs["Rock Kit/Hat.wav"]).hexdigest(), 0, 2))
    lib = sl.Library("kit", "fake-sounds", "1.0-1", "none", "usr/share/fake/soundfonts", files, (), "bank.sf2")
    folder = sl.materialise(lib, tmp_path / "out", cache)
    assert sorted(sl.audio_files(folder)) == sorted(wavs)
    assert all((folder / p).read_bytes() == b for p, b in wavs.items())
    swapped = sl.Library("kit", lib.package, lib.version, "none", lib.root,
                         (files[0], sl.LibraryFile(files[1].path, files[1].sha256, 0, 1)), (), "bank.sf2")
    with pytest.raises(ValueError, match="Hat.wav"):
        sl.materialise(swapped, tmp_path / "out2", cache)
