"""The `earshot` command line works headless."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from app.cli.main import main


def test_help_lists_subcommands() -> None:
    proc = subprocess.run([sys.executable, "-m", "app", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    for sub in ("gui", "info", "models", "probe"):
        assert sub in proc.stdout


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "earshot"
    assert script.exists(), "run `pip install -e .` (make test does)"
    proc = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("earshot ")


def test_info_json(capsys) -> None:
    assert main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert "cpu" in info["devices"] and info["device"] in info["devices"]
    assert isinstance(info["audio_input"], bool) and info["audio"]


def test_probe_reports_good_and_bad_files(tmp_path: Path, capsys) -> None:
    good = tmp_path / "tone.wav"
    sf.write(good, 0.1 * np.sin(np.arange(8000) / 8000 * 2 * np.pi * 440), 8000)
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not audio at all" * 10)
    assert main(["probe", str(good), str(bad), "--sample-rate", "16000", "--json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["ok"] and rows[0]["sample_rate"] == 16000 and abs(rows[0]["duration"] - 1.0) < 1e-3
    assert not rows[1]["ok"] and "bad.wav" in rows[1]["error"]
    assert main(["probe", str(bad)]) == 1
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"error  {bad}: ") and line.count("bad.wav") == 1  # the name once, then the reason


def test_models_lists_nothing_gracefully(capsys, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr("app.services.registry.default_models_dir", lambda: tmp_path / "a")
    monkeypatch.setattr("app.services.registry.user_models_dir", lambda: tmp_path / "b")
    assert main(["models", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"models": [], "problems": []}


class FakeTask:
    """A training module with the TASKS interface, for the CLI plumbing."""

    @staticmethod
    def add_train_arguments(p) -> None:
        p.add_argument("--steps", type=int, default=3)
        p.add_argument("--fail", action="store_true")

    @staticmethod
    def train(args):
        for i in range(args.steps):
            yield {"step": i + 1, "total": args.steps, "loss": 1.0 / (i + 1)}
        if args.fail:
            raise ValueError("data folder has no words.csv")
        return {"checkpoint": "x.safetensors", "metrics": {"ap": 0.5}}


def test_train_events_stream_progress_then_result(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("app.cli.train_command._task_module", lambda kind: FakeTask)
    events = tmp_path / "events.jsonl"
    assert main(["train", "words", "--steps", "4", "--events", str(events)]) == 0
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    assert [e["event"] for e in lines] == ["progress"] * 4 + ["result"]
    assert lines[2]["step"] == 3 and lines[-1]["result"]["metrics"] == {"ap": 0.5}
    import csv

    with open(tmp_path / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["step"], r["name"], float(r["value"])) for r in rows] == [
        ("1", "loss", 1.0), ("2", "loss", 0.5), ("3", "loss", 1 / 3), ("4", "loss", 0.25)]


def test_train_error_is_an_event_and_a_message(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr("app.cli.train_command._task_module", lambda kind: FakeTask)
    events = tmp_path / "events.jsonl"
    assert main(["train", "words", "--fail", "--events", str(events)]) == 2
    last = json.loads(events.read_text().splitlines()[-1])
    assert last["event"] == "error" and "no words.csv" in last["message"]
    assert "earshot: error: data folder has no words.csv" in capsys.readouterr().err


def test_an_ignored_sigint_is_taken_back_so_cancel_works(tmp_path: Path) -> None:
    """Started from a shell's background job, a trainer inherits SIGINT ignored; Cancel (SIGINT) must still work."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = (
        "import signal, sys, time\n"
        "from app.cli.main import listen_for_interrupt\n"
        "listen_for_interrupt()\n"
        "print('ready', flush=True)\n"
        "try:\n"
        "    time.sleep(30)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
        "    sys.exit(130)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
                            cwd=Path(__file__).resolve().parents[1], env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 130 and "interrupted" in out


def test_search_help_documents_output_and_many_queries(capsys) -> None:
    import pytest

    with pytest.raises(SystemExit):
        main(["search", "--help"])
    out = capsys.readouterr().out
    assert "--queries FILE" in out and "path_bytes" in out and "base64" in out and "one result per line" in out


def test_printable_keeps_one_result_on_one_line() -> None:
    import os

    from core.display import printable

    assert printable("/lib/a door.wav") == "/lib/a door.wav"
    assert printable("/lib/new\nline\t.wav") == "/lib/new\\nline\\t.wav"
    assert printable(os.fsdecode(b"/lib/odd\xff.wav")) == "/lib/odd\\xff.wav"
    assert printable("/lib/back\\slash\x1b[31m.wav") == "/lib/back\\\\slash\\x1b[31m.wav"
    assert printable("/lib/caf\u00e9 \u4e2d.wav") == "/lib/caf\u00e9 \u4e2d.wav"


# ------------------------------------------------------------------- issue 11: tags, modes, filters on the CLI


def tagged_library(root: Path) -> Path:
    from app.services.jobs import drain
    from app.services.library.indexer import index_library
    from tests.test_library import ToneEmbedder, tone, write

    for rel, f in {"doors/door_creak.wav": 220, "animals/dog_bark.wav": 440, "odd name;1.wav": 880}.items():
        write(root / rel, tone(f, 0.6))
    drain(index_library(root, ToneEmbedder()))
    return root


def test_tags_add_remove_export_import(tmp_path: Path, capsys) -> None:
    import csv

    from app.services.library.library import Library

    root = tagged_library(tmp_path / "lib")
    lib_args = ["--library", str(root)]
    assert main(["tags", "add", str(root / "doors/door_creak.wav"), "animals/dog_bark.wav", "-t", "keeper",
                 "--tag", "spooky house", *lib_args]) == 0
    assert "2 of 2 files changed" in capsys.readouterr().out
    assert main(["tags", "remove", "animals/dog_bark.wav", "-t", "spooky house", *lib_args]) == 0
    assert main(["tags", "favourite", "odd name;1.wav", *lib_args]) == 0
    capsys.readouterr()
    out = tmp_path / "tags.csv"
    assert main(["tags", "export", *lib_args, "-o", str(out)]) == 0
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert rows == [{"path": "animals/dog_bark.wav", "tags": "keeper", "favourite": ""},
                    {"path": "doors/door_creak.wav", "tags": "keeper;spooky house", "favourite": ""},
                    {"path": "odd name;1.wav", "tags": "", "favourite": "1"}]

    # import into a fresh catalog of the same files: everything comes back; unknown paths and bad values are
    # reported with their lines, and the rest is applied
    other = tagged_library(tmp_path / "other")
    with out.open("a", encoding="utf-8") as fh:
        fh.write("gone/missing.wav,lost tag,\n")
        fh.write("animals/dog_bark.wav,extra,maybe\n")
        fh.write('animals/dog_bark.wav,"bad\x01tag",\n')
    assert main(["tags", "import", str(out), "--library", str(other), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["rows"] == 6 and report["files_changed"] == 3 and report["tags_added"] == 3
    assert report["unknown"] == [{"line": 5, "path": "gone/missing.wav"}]
    assert [e["line"] for e in report["errors"]] == [6, 7] and "yes/no" in report["errors"][0]["error"]
    with Library.open(other) as lib:
        assert lib.user_tags.of(lib.files.id_of("doors/door_creak.wav")) == ["keeper", "spooky house"]
        assert lib.user_tags.of(lib.files.id_of("animals/dog_bark.wav")) == ["keeper"]  # the bad rows changed nothing
        assert lib.user_tags.favourites() == {lib.files.id_of("odd name;1.wav")}
    assert main(["tags", "import", str(out), "--library", str(other)]) == 1  # again: nothing new, same report
    captured = capsys.readouterr()
    assert "6 rows: 0 files changed, 0 tags added" in captured.out
    assert f"{out}:5: gone/missing.wav: not in the library; row not applied" in captured.err


def test_tags_export_that_fails_leaves_the_existing_file_as_it_was(tmp_path: Path, capsys, monkeypatch) -> None:
    """Hostile-input sweep: `tags export -o FILE` opened FILE for writing at once; a full disk then left it cut
    short, its old content gone, and the message ("[Errno 28] No space left on device") did not say which file."""
    import errno

    from app.services.search.tag_editor import TagEditor

    root = tagged_library(tmp_path / "lib")
    assert main(["tags", "add", "animals/dog_bark.wav", "-t", "keeper", "--library", str(root)]) == 0
    out = tmp_path / "tags.csv"
    out.write_text("precious,earlier,export\n", encoding="utf-8")
    real = TagEditor.export_csv

    def disk_full(self, fh) -> int:
        real(self, fh)
        fh.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(TagEditor, "export_csv", disk_full)
    capsys.readouterr()
    assert main(["tags", "export", "--library", str(root), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(out) in err and "No space left on device" in err and "Traceback" not in err
    assert out.read_text(encoding="utf-8") == "precious,earlier,export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lib", "tags.csv"]  # no temporary file left behind
    monkeypatch.setattr(TagEditor, "export_csv", real)
    out.chmod(0o640)
    assert main(["tags", "export", "--library", str(root), "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8").splitlines() == ["path,tags,favourite", "animals/dog_bark.wav,keeper,"]
    assert out.stat().st_mode & 0o777 == 0o640  # replaced, not made private


def test_tags_refuses_bad_input_with_a_message(tmp_path: Path, capsys) -> None:
    root = tagged_library(tmp_path / "lib")
    assert main(["tags", "add", "nope.wav", "-t", "x", "--library", str(root)]) == 2
    assert "not in the library (index it first?): nope.wav" in capsys.readouterr().err
    assert main(["tags", "add", "animals/dog_bark.wav", "-t", "a;b", "--library", str(root)]) == 2
    assert "contains ';'" in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    bad.write_text("file,labels\nx,y\n", encoding="utf-8")
    assert main(["tags", "import", str(bad), "--library", str(root)]) == 2
    assert "not a tags file (no path or tags column" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["search", "dog", "--library", str(root), "--names-weight", "2"])
    assert "must be from 0 to 1" in capsys.readouterr().err


@pytest.mark.slow
def test_search_modes_filters_and_why_in_json(tmp_path: Path, capsys) -> None:
    from tests.test_search_service import make_library, write_tiny_checkpoint

    root = make_library(tmp_path / "lib")
    ckpt = str(write_tiny_checkpoint(tmp_path / "models"))
    assert main(["index", str(root), "--model", ckpt, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["texts"] == 7 and summary["text_vectors"] == 7 and summary["tag_problems"] == []
    args = ["--library", str(root), "--model", ckpt, "--json"]
    assert main(["search", "chirp -engine", "--mode", "names", *args]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert hits and all("engine" not in h["path"] for h in hits)
    top = hits[0]
    assert "chirp" in top["name"] and top["match"]["matched_terms"] == ["chirp"]
    a, b = top["match"]["spans"]["name"][0]
    assert top["match"]["fields"]["name"][a:b].lower() == "chirp"
    assert main(["search", "a bird", "--mode", "sound", "--format", "flac", *args]) == 0
    assert json.loads(capsys.readouterr().out) == []  # the library is all wav
    assert main(["search", "a bird", "--names-weight", "0.3", "--channels", "1", "--min-sample-rate", "8000",
                 *args]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 7
    assert main(["similar", str(root / "birds/chirp_b.wav"), "--names-weight", "0.5", *args]) == 0
    assert json.loads(capsys.readouterr().out)[0]["match"]["name_score"] > 0


def test_filters_that_can_match_nothing_are_usage_errors(tmp_path: Path, capsys) -> None:
    """Hostile-input sweep: a --folder that is not in the library (mistyped, or outside it), a minimum above the
    maximum, or an empty --format each answered "no results" with exit code 0, as if the library had nothing."""
    root = tagged_library(tmp_path / "lib")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    lib = ["--library", str(root), "--mode", "names"]
    for extra, said in ((["--folder", "door"], "--folder door: no such folder in the library; did you mean doors?"),
                        (["--folder", str(outside)], "is not inside the library"),
                        (["--folder", "../elsewhere"], "is not inside the library"),
                        (["--min-duration", "5", "--max-duration", "1"], "--min-duration 5 is above --max-duration 1"),
                        (["--min-sample-rate", "48000", "--max-sample-rate", "8000"],
                         "--min-sample-rate 48000 is above --max-sample-rate 8000"),
                        (["--format", ""], "--format: give an extension")):
        assert main(["search", "dog", *lib, *extra]) == 2, extra
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err, (extra, err)
    for extra in (["--folder", "doors"], ["--folder", str(root / "doors")], ["--folder", "doors/"], ["--folder", "."],
                  ["--min-duration", "0.6", "--max-duration", "0.6"], ["--format", ".WAV"]):
        assert main(["search", "door", *lib, *extra, "--json"]) == 0, extra
        assert json.loads(capsys.readouterr().out), extra


@pytest.mark.slow
def test_a_reader_that_stops_early_is_not_an_error(tmp_path: Path) -> None:
    """Hostile-input sweep: `earshot search ... | head -1` (or any command's output into a reader that closes
    early) ended with "earshot: error: [Errno 32] Broken pipe" and exit code 2, a usage error; only --queries
    stopped quietly."""
    import os
    import subprocess
    import sys

    root = tagged_library(tmp_path / "lib")
    for command in (["models"], ["tags", "export", "--library", str(root)],
                    ["search", "dog", "--library", str(root), "--mode", "names", "--json"]):
        read, write = os.pipe()
        os.close(read)  # the reader is gone before the first line
        try:
            run = subprocess.run([sys.executable, "-m", "app.cli", *command], stdout=write, stderr=subprocess.PIPE,
                                 text=True, cwd=Path(__file__).resolve().parents[1], timeout=120)
        finally:
            os.close(write)
        assert run.returncode == 0 and "Broken pipe" not in run.stderr and "Traceback" not in run.stderr, \
            (command, run.returncode, run.stderr)


def test_tags_add_and_remove_split_each_tag_on_commas_as_the_tag_dialog_does(tmp_path: Path, capsys) -> None:
    """Issue 40: `-t "rifle, automatic"` was one tag "rifle, automatic", where the GUI's tag dialog makes two."""
    from app.services.library.library import Library

    root = tagged_library(tmp_path / "lib")
    lib_args = ["animals/dog_bark.wav", "--library", str(root)]
    assert main(["tags", "add", *lib_args, "-t", "rifle, automatic", "-t", " ,shot,, rifle"]) == 0
    with Library.open(root) as lib:
        assert lib.user_tags.of(lib.files.id_of("animals/dog_bark.wav")) == ["automatic", "rifle", "shot"]
    assert main(["tags", "remove", *lib_args, "-t", "automatic,shot"]) == 0
    with Library.open(root) as lib:
        assert lib.user_tags.of(lib.files.id_of("animals/dog_bark.wav")) == ["rifle"]
    capsys.readouterr()
    assert main(["tags", "add", *lib_args, "-t", " , "]) == 2  # nothing but commas: refused, as "" was
    assert "empty tag" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["tags", "add", "--help"])
    assert "commas separate tags" in capsys.readouterr().out
