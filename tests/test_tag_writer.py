"""Writing tags into the audio files (issue 24, item 7): every sample kept, atomic under a crash or a kill,
found by search after re-indexing, bad cases refused with a reason."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from app.cli.main import main
from app.services.jobs import drain
from app.services.library import riff_writer
from app.services.library import tag_writer as W
from app.services.library.embedded_tags import read_tags
from app.services.library.indexer import index_library
from app.services.library.library import Library
from app.services.library.scan import scan_folder
from core.audio import decode
from tests.test_library import SR, ToneEmbedder, tone
from tests.test_library_text import chunk, info, wav_with

ROOT = Path(__file__).resolve().parents[1]

# name -> (extension, soundfile keyword arguments, sample rate)
FORMATS = {
    "wav16": (".wav", {"subtype": "PCM_16"}, SR),
    "wavfloat": (".wav", {"subtype": "FLOAT"}, SR),
    "flac": (".flac", {"format": "FLAC"}, SR),
    "ogg": (".ogg", {"format": "OGG", "subtype": "VORBIS"}, SR),
    "opus": (".opus", {"format": "OGG", "subtype": "OPUS"}, 48000),
    "mp3": (".mp3", {"format": "MP3", "subtype": "MPEG_LAYER_III"}, SR),
}


def make(path: Path, kind: str, seconds: float = 1.0, freq: float = 440) -> Path:
    ext, kw, sr = FORMATS[kind]
    if kw.get("format") in ("MP3", "OGG") and kw["format"] not in sf.available_formats():
        pytest.skip(f"libsndfile {sf.__libsndfile_version__} cannot write {kw['format']}")
    if kw.get("subtype") == "OPUS" and "OPUS" not in sf.available_subtypes("OGG"):
        pytest.skip("libsndfile cannot write Opus")
    t = np.arange(round(seconds * sr)) / sr
    stereo = np.stack([0.5 * np.sin(2 * np.pi * freq * t), 0.3 * np.sin(2 * np.pi * freq * 1.5 * t)], 1)
    path = path.with_suffix(ext)
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, stereo.astype(np.float32), sr, **kw)
    return path


def samples(path: Path) -> np.ndarray:
    return decode(path, mono=False, max_seconds=None, keep_nonfinite=True).audio


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------------------- (a) every sample the same


@pytest.mark.parametrize("kind", list(FORMATS))
def test_tags_are_written_and_every_sample_is_kept(tmp_path: Path, kind: str):
    path = make(tmp_path / "zap", kind)
    before = samples(path)
    r = W.write_tags(path, ["laser zap", "sci-fi, retro"], "a zap from a ray gun")
    assert r.status == W.WRITTEN, r.reason
    after = samples(path)
    assert after.shape == before.shape and np.array_equal(after, before)
    t = read_tags(path)
    assert {"laser zap", "sci-fi, retro"} <= W.keyword_set(t.fields["keywords"]) and not t.problems
    assert "a zap from a ray gun" in t.fields.get("description", []) + t.fields.get("comment", [])
    assert W.write_tags(path, ["Laser Zap"], "a zap from a ray gun").status == W.UNCHANGED  # nothing to add
    again = W.write_tags(path, ["hum"])
    assert again.status == W.WRITTEN and np.array_equal(samples(path), before)
    assert {"laser zap", "sci-fi, retro", "hum"} <= W.keyword_set(read_tags(path).fields["keywords"])  # added
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no copy left beside it


def test_wav_chunks_other_than_info_are_copied_byte_for_byte(tmp_path: Path):
    import mutagen.wave

    ixml = chunk(b"iXML", b"<BWFXML><NOTE>take two</NOTE></BWFXML>")
    odd = chunk(b"junk", b"odd")  # an odd-sized chunk keeps its pad byte
    path = wav_with(tmp_path / "gate.wav", chunk(b"bext", b"old".ljust(602, b"\0")), odd,
                    info(INAM=b"Rusty gate", IKEY=b"metal"), ixml)
    old_raw = path.read_bytes()
    with open(path, "rb") as fh:
        old = {c.cid: c for c in riff_writer.read_chunks(fh)}
    r = W.write_tags(path, ["hinge", "metal"], "Gate creaks open")
    assert r.fields == {"IKEY": "metal; hinge", "ICMT": "Gate creaks open", "bext description": "Gate creaks open"}
    new_raw = path.read_bytes()
    with open(path, "rb") as fh:
        new = riff_writer.read_chunks(fh)
        entries = dict(riff_writer.info_entries(fh, riff_writer.info_chunk(new, fh)))
    assert [c.cid for c in new] == list(old)  # same chunks, same order: INFO replaced in place
    assert entries == {b"INAM": b"Rusty gate\0", b"IKEY": b"metal; hinge\0", b"ICMT": b"Gate creaks open\0"}
    for c in new:
        if c.cid in (b"data", b"fmt ", b"iXML", b"junk"):
            o = old[c.cid]
            assert new_raw[c.offset:c.body + c.size + (c.size & 1)] == old_raw[o.offset:o.body + o.size + (o.size & 1)]
    assert new_raw[next(c for c in new if c.cid == b"bext").body + 256:][:346] == b"\0" * 346  # rest of bext kept
    assert read_tags(path).fields["description"] == ["Gate creaks open"]
    assert mutagen.wave.WAVE(path).info.length == pytest.approx(0.6) and sf.info(path).frames == round(0.6 * SR)


def test_a_copy_whose_samples_differ_is_never_moved_over_the_original(tmp_path: Path, monkeypatch):
    path = make(tmp_path / "zap", "wav16")
    before = digest(path)
    write_copy = W._write_copy

    def damaged(target: str, fd: int, kind: str, plan: dict, tmp: str) -> None:
        write_copy(target, fd, kind, plan, tmp)
        with open(tmp, "r+b") as fh:  # one sample near the end changed
            fh.seek(os.path.getsize(tmp) - 200)
            fh.write(b"\x01\x7f")

    monkeypatch.setattr(W, "_write_copy", damaged)
    r = W.write_tags(path, ["laser"])
    assert r.status == W.REFUSED and "data chunk differs" in r.reason
    monkeypatch.setattr(riff_writer, "chunk_digest", lambda p, cid=b"data": "same")  # the decode check alone
    r = W.write_tags(path, ["laser"])
    assert r.status == W.REFUSED and "audio differs from the original's at frame" in r.reason
    assert digest(path) == before and [p.name for p in tmp_path.iterdir()] == [path.name]


# ------------------------------------------------------------------------------------ (b) crash and kill


@pytest.mark.parametrize("where", ["_verify", "replace"])
def test_a_crash_before_the_replace_leaves_the_original(tmp_path: Path, monkeypatch, where: str):
    path = make(tmp_path / "zap", "flac")
    before = digest(path)

    def crash(*args: object) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(W, "_verify", crash) if where == "_verify" else monkeypatch.setattr(W.os, "replace", crash)
    r = W.write_tags(path, ["laser"])
    assert r.status == W.REFUSED and "Input/output error" in r.reason
    assert digest(path) == before and [p.name for p in tmp_path.iterdir()] == [path.name]


_KILL_SCRIPT = """
import sys, time
from app.services.library import riff_writer, tag_writer as W
phase = sys.argv[2]
if phase == "copy":  # slow the copy down and say when it is half done
    copy, done = riff_writer._copy, []
    def slow(src, dst, start, n):
        copy(src, dst, start, n // 2); dst.flush(); print("READY", flush=True); time.sleep(60)
    riff_writer._copy = lambda src, dst, start, n: slow(src, dst, start, n) if n > 1 << 20 else copy(src, dst, start, n)
else:  # the copy is complete: die while it is verified
    W._verify = lambda *a: (print("READY", flush=True), time.sleep(60))
print(W.write_tags(sys.argv[1], ["laser"]), flush=True)
"""


@pytest.mark.parametrize("phase", ["copy", "verify"])
def test_kill_9_while_writing_a_large_file_leaves_the_original(tmp_path: Path, phase: str):
    root = tmp_path / "lib"
    path = make(root / "long_drone", "wavfloat", seconds=40.0)  # 2.5 MB of float samples
    before, audio = digest(path), samples(path)
    proc = subprocess.Popen([sys.executable, "-c", _KILL_SCRIPT, str(path), phase], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "READY", proc.stderr.read()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
    copies = [p.name for p in root.iterdir() if p.name != path.name]
    assert len(copies) == 1 and copies[0].startswith(".long_drone.wav.") and ".earshot-tmp" in copies[0]
    assert digest(path) == before and np.array_equal(samples(path), audio)
    assert [f.rel for f in scan_folder(root).files] == ["long_drone.wav"]  # the copy is not indexed
    assert W.write_tags(path, ["laser"]).status == W.WRITTEN  # the next write removes the stale copy
    assert [p.name for p in root.iterdir()] == [path.name] and np.array_equal(samples(path), audio)


# --------------------------------------------------------------------------- (c) found after re-indexing


def test_written_tags_are_found_by_search_after_reindexing(tmp_path: Path, capsys):
    root = tmp_path / "lib"
    files = {kind: make(root / "sfx" / f"take_{i}", kind, freq=220 * (i + 1)) for i, kind in
             enumerate(["wav16", "flac", "ogg", "mp3"])}
    emb = ToneEmbedder()
    drain(index_library(root, emb))
    with Library.open(root) as lib:
        ids = {kind: lib.files.id_of(p) for kind, p in files.items()}
        lib.user_tags.add(list(ids.values()), ["laser zap"])
        lib.user_tags.add([ids["flac"]], ["glockenspiel"])
    assert main(["tags", "write", "--library", str(root), "--dry-run", "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert {r["status"] for r in planned} == {W.WOULD_WRITE} and len(planned) == 4
    assert all(read_tags(p).fields == {} for p in files.values())  # a dry run writes nothing
    assert main(["tags", "write", "--library", str(root)]) == 0
    out = capsys.readouterr().out
    assert "4 written" in out and "glockenspiel" in out
    with Library.open(root) as lib:
        lib.user_tags.remove(list(ids.values()), ["laser zap", "glockenspiel"])
        assert lib.text.keyword_search('"glockenspiel"', 5) == []  # only the catalog's tags said it
    report = drain(index_library(root, emb))
    assert report.embedded == [] and report.touched == 4  # the same audio: names and tags read, sound kept
    assert main(["tags", "write", "--library", str(root), "--description", "x"]) == 2  # not on every file
    assert main(["tags", "write", "--library", str(root), "sfx/take_3.mp3", "--description", "bells far away"]) == 0
    drain(index_library(root, emb))
    with Library.open(root) as lib:
        assert {f for f, _ in lib.text.keyword_search('"laser zap"', 5)} == set(ids.values())  # embedded tags
        assert [f for f, _ in lib.text.keyword_search('"bells far away"', 5)] == [ids["mp3"]]
        assert [f for f, _ in lib.text.keyword_search('"glockenspiel"', 5)] == [ids["flac"]]
        assert drain(W.write_library_tags(lib)) == []  # no catalog tags left: nothing to write


# --------------------------------------------------------------------------------------------- (d) refused


def test_read_only_changed_and_unreadable_files_are_refused_with_a_reason(tmp_path: Path, capsys):
    root = tmp_path / "lib"
    paths = {name: make(root / name, "wav16", freq=200 + 100 * i) for i, name in
             enumerate(["readonly", "changed", "linked", "fine"])}
    drain(index_library(root, ToneEmbedder()))
    with Library.open(root) as lib:
        lib.user_tags.add([lib.files.id_of(p) for p in paths.values()], ["laser"])
    paths["readonly"].chmod(0o444)
    sf.write(paths["changed"], tone(990), SR)  # edited after indexing
    os.link(paths["linked"], tmp_path / "elsewhere.wav")
    before = {name: digest(p) for name, p in paths.items()}
    assert main(["tags", "write", "--library", str(root), "--json"]) == 1
    report = {r["path"]: r for r in json.loads(capsys.readouterr().out)}
    assert report["fine.wav"]["status"] == W.WRITTEN
    assert report["readonly.wav"]["reason"] == "the file is read-only"
    assert "changed since it was indexed" in report["changed.wav"]["reason"]
    assert "2 hard links" in report["linked.wav"]["reason"]
    for name in ("readonly", "changed", "linked"):
        assert report[f"{name}.wav"]["status"] == W.REFUSED and digest(paths[name]) == before[name]
    assert main(["tags", "write", "nope.wav", "--library", str(root)]) == 2


@pytest.mark.parametrize("case, reason", [
    ("truncated", "runs past the end of the file"), ("rf64", "RF64"), ("aiff", "no tag writer for .aiff"),
    ("latin1_ogg", "do not all decode"),
])
def test_files_the_writer_does_not_understand_are_refused(tmp_path: Path, case: str, reason: str):
    if case == "truncated":
        path = make(tmp_path / "a", "wav16")
        path.write_bytes(path.read_bytes()[:-100])
    elif case == "rf64":
        path = tmp_path / "a.wav"
        sf.write(path, tone(440), SR, format="RF64")
    elif case == "aiff":
        path = tmp_path / "a.aiff"
        sf.write(path, tone(440), SR, format="AIFF")
    else:
        path = make(tmp_path / "a", "ogg")
        import mutagen.oggvorbis

        f = mutagen.oggvorbis.OggVorbis(path)
        f["title"] = "cafe"
        f.save()
        path.write_bytes(path.read_bytes().replace(b"title=cafe", "title=caf\xe9".encode("latin-1")))
    before = digest(path)
    r = W.write_tags(path, ["laser"])
    assert r.status == W.REFUSED and reason in r.reason, r.reason
    assert digest(path) == before


def test_a_file_changed_while_its_copy_is_written_is_not_replaced(tmp_path: Path, monkeypatch):
    path = make(tmp_path / "zap", "wav16")
    verify, saved = W._verify, []

    def edit_meanwhile(*args: object) -> None:
        verify(*args)
        sf.write(path, tone(990), SR)  # another program saves the file now
        saved.append(digest(path))

    monkeypatch.setattr(W, "_verify", edit_meanwhile)
    r = W.write_tags(path, ["laser"])
    assert r.status == W.REFUSED and "changed while its tags were written" in r.reason
    assert read_tags(path).fields == {} and [digest(path)] == saved
    assert len(list(tmp_path.iterdir())) == 1  # the other program's save stands, no copy is left


def test_duplicate_info_keywords_are_merged_into_one(tmp_path: Path):
    list_info = chunk(b"LIST", b"INFO" + chunk(b"IKEY", b"metal\0") + chunk(b"INAM", b"gate\0")
                      + chunk(b"IKEY", b"rust\0"))
    path = wav_with(tmp_path / "gate.wav", list_info)
    assert W.write_tags(path, ["hinge", "Rust"]).fields == {"IKEY": "metal; rust; hinge"}
    with open(path, "rb") as fh:
        entries = riff_writer.info_entries(fh, riff_writer.info_chunk(riff_writer.read_chunks(fh), fh))
    assert entries == [(b"IKEY", b"metal; rust; hinge\0"), (b"INAM", b"gate\0")]


def test_a_full_disk_is_a_refusal_that_keeps_the_file(tmp_path: Path, monkeypatch):
    path = make(tmp_path / "zap", "mp3")
    before = digest(path)

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(W.tempfile, "mkstemp", full)
    r = W.write_tags(path, ["laser"])
    assert r.status == W.REFUSED and r.reason == ("could not write the copy beside the file (No space left on "
                                                  "device); file kept")
    assert digest(path) == before
