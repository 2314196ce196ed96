"""The development search libraries (bench/data/search_libraries) and their builder, without network or apt:
the data files are well-formed, the mixed copy's renaming is deterministic and covers half the files, and a
library is materialised and verified from a .deb built here (when dpkg-deb is available)."""

from __future__ import annotations

import ast
import hashlib
import re
import shutil
import subprocess
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
