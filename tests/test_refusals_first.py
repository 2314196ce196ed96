"""Issue 42 item 5: refusals that need no model come before loading one, and one file is named one way.

`earshot index` of a read-only catalog loaded the model (10 s, 800 MB) before saying it could not index;
`tags write LIB/x.wav --library LIB` of a catalogued file deleted from disk said "not in the library (index it
first?)" where the same file, written with every tagged file, was "file not found"."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli.main import main
from tests.test_reliability_library import read_only_library  # noqa: F401 - a fixture


def test_index_of_a_read_only_catalog_is_refused_before_the_model_loads(read_only_library: Path,  # noqa: F811
                                                                        capsys, monkeypatch) -> None:
    def no_model(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("the model was loaded before the read-only catalog was refused")

    monkeypatch.setattr("app.services.search.embedder.load_embedder", no_model)
    assert main(["index", str(read_only_library)]) == 2
    err = capsys.readouterr().err
    assert "cannot index" in err and "read-only" in err and "write access" in err


@pytest.mark.parametrize("named", ["relative to the library", "absolute", "beside --library"])
def test_a_catalogued_file_deleted_from_disk_is_file_not_found_however_it_is_named(
        tmp_path: Path, capsys, monkeypatch, named: str) -> None:
    from app.services.library.library import Library
    from tests.test_cli import tagged_library

    root = tagged_library(tmp_path / "lib")
    with Library.open(root) as lib:
        lib.user_tags.add([lib.files.id_of("doors/door_creak.wav")], ["keeper"])
    (root / "doors/door_creak.wav").unlink()
    monkeypatch.chdir(tmp_path)
    given = {"relative to the library": "doors/door_creak.wav", "absolute": str(root / "doors/door_creak.wav"),
             "beside --library": "lib/doors/door_creak.wav"}[named]
    assert main(["tags", "write", given, "--library", "lib"]) == 1
    out, err = capsys.readouterr()
    assert "doors/door_creak.wav  file not found" in out and "not in the library" not in err
    assert main(["tags", "write", "--library", "lib"]) == 1  # every tagged file: the same words
    assert "doors/door_creak.wav  file not found" in capsys.readouterr().out
    assert main(["tags", "write", "lib/doors/nope.wav", "--library", "lib"]) == 2  # never catalogued: as before
    assert "not in the library (index it first?): lib/doors/nope.wav" in capsys.readouterr().err
