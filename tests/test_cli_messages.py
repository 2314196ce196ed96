"""The command line's paper cuts (issue 24): mistyped subcommands, which model is the default."""

from __future__ import annotations

import json

import pytest

from app.cli.main import main


@pytest.mark.parametrize(("typed", "hint"), [("serach", "did you mean 'search'?"), ("indx", "did you mean 'index'?"),
                                             ("frobnicate", "choose from gui, info, models")])
def test_a_mistyped_subcommand_gets_the_closest_one(typed: str, hint: str, capsys) -> None:
    assert main([typed, "x"]) == 2
    err = capsys.readouterr().err
    assert f"unknown command '{typed}'" in err and hint in err and "Traceback" not in err


def test_models_says_which_is_the_default_of_each_kind(capsys) -> None:
    assert main(["models", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["models"]
    defaults = {r["kind"]: r["name"] for r in rows if r["default"]}
    assert defaults == {"retrieval": "retrieval-default", "units": "units-default", "words": "words-default"}
    assert main(["models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sum("default retrieval" in line for line in lines) == 1
    passt = next(line for line in lines if line.startswith("retrieval-passt-small"))
    assert "shipped" in passt and "default retrieval" not in passt


def test_search_on_a_folder_never_indexed_says_how_to_index_it_and_creates_nothing(tmp_path, capsys) -> None:
    import numpy as np
    import soundfile as sf

    folder = tmp_path / "new"
    folder.mkdir()
    sf.write(folder / "tone.wav", np.zeros(800, np.float32), 8000)
    for command in (["search", "door"], ["similar", str(folder / "tone.wav")]):
        assert main([*command, "--library", str(folder)]) == 2
        err = capsys.readouterr().err
        assert "has not been indexed yet" in err and f"earshot index {folder}" in err
    assert not (folder / ".earshot").exists()


def test_similar_and_sound_search_on_a_library_without_sounds_for_the_model_exit_2(tmp_path, capsys) -> None:
    """Issue 25 sweep: they said "no sounds indexed" and then "no results" with exit 0."""
    import shutil

    from app.cli.main import main
    from tests.test_library import make_library, write_retrieval_checkpoint

    root = make_library(tmp_path / "lib")
    model = write_retrieval_checkpoint(tmp_path / "a.safetensors")
    other = tmp_path / "b.safetensors"
    shutil.copy(model, other)  # another name: another model id, nothing indexed with it
    assert main(["index", str(root), "--model", model]) == 0
    capsys.readouterr()
    assert main(["similar", str(root / "tone_440.wav"), "--library", str(root), "--model", str(other)]) == 2
    assert "no sounds indexed" in capsys.readouterr().err
    assert main(["search", "a tone", "--library", str(root), "--model", str(other), "--mode", "sound"]) == 2
    assert main(["search", "tone", "--library", str(root), "--model", str(other), "--mode", "names"]) == 0


def test_tag_commands_on_a_folder_never_indexed_say_how_to_index_it_and_create_nothing(tmp_path, capsys) -> None:
    """Hostile-input sweep: search refused a folder never indexed, but `tags add/export/import/write` opened it,
    made a catalog (.earshot/) in it, and then said the file was not in the library or exported nothing."""
    import numpy as np
    import soundfile as sf

    folder = tmp_path / "new"
    folder.mkdir()
    sf.write(folder / "tone.wav", np.zeros(800, np.float32), 8000)
    (tmp_path / "tags.csv").write_text("path,tags,favourite\ntone.wav,x,\n", encoding="utf-8")
    lib = ["--library", str(folder)]
    for command in (["tags", "add", "tone.wav", "-t", "x"], ["tags", "favourite", "tone.wav"], ["tags", "export"],
                    ["tags", "import", str(tmp_path / "tags.csv")], ["tags", "write", "--dry-run"]):
        assert main([*command, *lib]) == 2, command
        err = capsys.readouterr().err
        assert "has not been indexed yet" in err and f"earshot index {folder}" in err, command
    assert not (folder / ".earshot").exists()


@pytest.mark.parametrize(("query", "said"), [("", "the description is empty"), ("   ", "the description is empty"),
                                             ("!!! ???", "has no words to search for"),
                                             ("\U0001f434\U0001f434", "has no words to search for"),
                                             ("-horse", "only excludes"), ('-"wooden door" -metal', "only excludes")])
def test_a_query_with_nothing_to_look_for_is_a_usage_error(query: str, said: str, tmp_path, capsys) -> None:
    """Hostile-input sweep: an empty query, one of only punctuation or emoji, or one of only exclusions printed
    "no results" with exit code 0, the answer of a library that has nothing for a real query."""
    from tests.test_cli import tagged_library

    root = tagged_library(tmp_path / "lib")
    assert main(["search", "--library", str(root), "--", query]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err
    assert main(["search", "--library", str(root), "--mode", "names", "--", "dog -cat"]) == 0  # a real one still runs


def test_a_library_folder_that_cannot_be_entered_is_named_as_such(tmp_path, capsys, monkeypatch) -> None:
    """Hostile-input sweep: with a library folder of mode 000 (not root: root reads anyway, so the test makes
    os.stat refuse what is inside it), index, search and tags said "[Errno 13] Permission denied:
    '<library>/.earshot/catalog.sqlite'", a file the user never named, instead of the folder they did."""
    import os

    from tests.test_cli import tagged_library
    from tests.test_library import write_retrieval_checkpoint

    root = tagged_library(tmp_path / "lib")
    model = write_retrieval_checkpoint(tmp_path / "tiny.safetensors")  # not the default: no ONNX export
    real_stat = os.stat

    def refusing(path, *args, **kwargs):
        if os.fsdecode(path).startswith(str(root) + os.sep):
            raise PermissionError(13, "Permission denied", os.fsdecode(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", refusing)
    for command in (["index", str(root), "--model", model], ["search", "dog", "--library", str(root)],
                    ["tags", "export", "--library", str(root)]):
        assert main(command) == 2, command
        err = capsys.readouterr().err
        assert f"{root}: permission denied" in err and "catalog.sqlite" not in err and "Traceback" not in err, err


def test_search_says_when_files_are_hidden_because_their_folder_could_not_be_listed(tmp_path, capsys) -> None:
    """Hostile-input sweep: a folder that could not be listed at the last index (permissions, an unmounted
    share) has its files hidden until the next index run. When it was back, search answered without them and
    said nothing, "no results" when they were the only match: the user could not know to index again."""
    from app.services.library.library import Library
    from tests.test_cli import tagged_library

    root = tagged_library(tmp_path / "lib")
    with Library.open(root) as lib:
        lib.files.set_unavailable([lib.files.id_of("animals/dog_bark.wav")])
    assert main(["search", "dog", "--library", str(root), "--mode", "names", "--json"]) == 0
    captured = capsys.readouterr()
    assert "dog_bark" not in captured.out
    assert "1 catalogued file is hidden" in captured.err and f"earshot index {root}" in captured.err
    with Library.open(root) as lib:
        lib.files.set_unavailable([])
    assert main(["search", "dog", "--library", str(root), "--mode", "names", "--json"]) == 0
    captured = capsys.readouterr()
    assert "dog_bark" in captured.out and "hidden" not in captured.err


@pytest.mark.parametrize("command", [
    ["index", ""], ["search", "dog", "--library", ""], ["similar", "", "--library", "L"],
    ["tags", "export", "--library", ""], ["tags", "add", "", "-t", "x", "--library", "L"],
    ["tags", "import", "", "--library", "L"], ["tags", "write", "--library", ""], ["probe", ""],
    ["gui", "--library", ""], ["tags", "export", "--library", "L", "-o", ""],
    ["search", "--queries", "", "--library", "L"]])
def test_an_empty_path_is_a_usage_error_not_the_working_folder(command: list[str], tmp_path, capsys,
                                                               monkeypatch) -> None:
    """Hostile-input sweep: `earshot index "$LIBRARY"` with the variable unset indexed the working folder (an
    empty path is '.'), making a catalog there; `search --library ""` searched it, `tags export --library ""`
    exported from it."""
    from tests.test_cli import tagged_library

    root = tagged_library(tmp_path / "lib")
    monkeypatch.chdir(root)  # what an empty path used to mean: an indexed library, so nothing else stops it
    command = [str(root) if a == "L" else a for a in command]
    with pytest.raises(SystemExit) as e:
        main(command)
    assert e.value.code == 2
    assert "empty path" in capsys.readouterr().err


def test_index_of_a_folder_without_audio_says_so(tmp_path, capsys) -> None:
    """A sweep: `earshot index` of a folder with no sound files printed "0 files: 0 embedded ..." and nothing
    more, which reads like success on the wrong folder."""
    from app.cli.main import main
    from tests.test_library import make_library, write_retrieval_checkpoint

    model = write_retrieval_checkpoint(tmp_path / "a.safetensors")
    empty = tmp_path / "notes"
    empty.mkdir()
    (empty / "readme.txt").write_text("no sounds here")
    assert main(["index", str(empty), "--model", model]) == 0
    assert "no audio files found (looked for" in capsys.readouterr().err
    root = make_library(tmp_path / "lib")
    assert main(["index", str(root), "--model", model]) == 0
    assert "no audio files found" not in capsys.readouterr().err


def test_index_of_a_library_another_process_indexes_is_refused_before_any_model_loads(tmp_path, capsys,
                                                                                       monkeypatch) -> None:
    """A second `earshot index` of a library being indexed loaded the model (~2 s) and only then was refused."""
    import app.services.search.embedder as embedder
    from app.cli.main import main
    from app.services.library.storage import INDEX_LOCK_NAME, process_lock
    from tests.test_library import make_library

    root = make_library(tmp_path / "lib")
    (root / ".earshot").mkdir()
    monkeypatch.setattr(embedder, "load_embedder", lambda *a, **kw: pytest.fail("a model was loaded"))
    with process_lock(root / ".earshot" / INDEX_LOCK_NAME, "the other job"):
        assert main(["index", str(root)]) == 2
    assert "lib is already being indexed (by another Earshot window or command)" in capsys.readouterr().err


def test_index_progress_shows_words_not_the_jobs_raw_fields(tmp_path, capsys) -> None:
    """Issue 40: the progress showed the job's raw fields (files_done=0, files_total=304, eta_s=None, phase=names,
    part=headers…) past 160 columns."""
    from app.cli.index_command import progress_text
    from tests.test_library import make_library, write_retrieval_checkpoint

    root = make_library(tmp_path / "lib")
    model = write_retrieval_checkpoint(tmp_path / "a.safetensors")
    assert main(["index", str(root), "--model", model]) == 0
    err = capsys.readouterr().err  # not a terminal: log lines, which said the same fields
    assert "[index]" in err and "scanning folder" in err
    for raw in ("files_done", "files_total", "eta_s", "phase", "part=", "audio_seconds", "names_ready"):
        assert raw not in err
    progress = {"step": 3, "total": 9, "files_done": 3, "files_total": 9, "audio_seconds": 35.2, "eta_s": 130.0,
                "phase": "audio", "message": "door_creak.wav"}
    assert progress_text(progress) == "35.2 s of audio · about 2 min left · door_creak.wav"
    assert progress_text(progress | {"audio_seconds": 0.0, "eta_s": None}) == "door_creak.wav"


def test_index_with_nothing_new_says_so_not_a_throughput(tmp_path, capsys) -> None:
    """Issue 40: a run with nothing to embed said "0.0 s of audio in 0.1 s (0.0x real time)"."""
    from tests.test_library import FREQS, make_library, write_retrieval_checkpoint

    root = make_library(tmp_path / "lib")
    model = write_retrieval_checkpoint(tmp_path / "a.safetensors")
    assert main(["index", str(root), "--model", model]) == 0
    assert "real time" in capsys.readouterr().out  # audio embedded: the throughput
    assert main(["index", str(root), "--model", model]) == 0
    out = capsys.readouterr().out
    assert f"nothing new: {len(FREQS)} files unchanged" in out and "real time" not in out
    assert main(["index", str(root), "--model", model, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["embedded"] == 0 and summary["unchanged"] == len(FREQS) and summary["x_realtime"] == 0.0


def test_info_prints_device_error_only_when_there_is_one(capsys) -> None:
    """Issue 40: `earshot info` printed an empty `device_error:` line when there was no error."""
    assert main(["info", "--device", "cpu"]) == 0
    assert "device_error" not in capsys.readouterr().out
    assert main(["info", "--device", "nonsense"]) == 0
    assert "device_error: unknown device 'nonsense'" in capsys.readouterr().out
