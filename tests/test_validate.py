"""Data-folder validation before training: good and bad folders for words, units and retrieval."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from training.validate import validate_data, validate_job


def tone(path: Path, seconds: float = 0.5, sr: int = 16000) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(seconds * sr)) / sr
    sf.write(path, (0.2 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), sr)
    return path


def words_folder(root: Path, rows: list[tuple[str, str, str, str]], header: str = "path,word,speaker,split") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    lines = [header] + [",".join(r) for r in rows]
    (root / "words.csv").write_text("\n".join(lines) + "\n")
    return root


def test_good_words_folder(tmp_path: Path) -> None:
    rows = []
    for i, (word, spk) in enumerate([("seven", "a"), ("seven", "b"), ("cat", "a"), ("dog", "b")]):
        tone(tmp_path / f"w{i}.wav", 0.5)
        rows.append((f"w{i}.wav", word, spk, "train" if i < 3 else "dev"))
    r = validate_data("words", words_folder(tmp_path, rows))
    assert r.ok and not r.problems
    c = r.counts
    assert c["rows"] == 4 and c["words"] == 3 and c["speakers"] == 2 and c["audio_files"] == 4
    assert c["total_duration_s"] == pytest.approx(2.0, abs=0.01) and not c["duration_estimated"]
    assert c["splits"] == {"dev": 1, "train": 3}
    assert "4 rows" in r.summary() and "2 speakers" in r.summary()
    r.counts.update(rows=1, speakers=1)
    assert "1 row," in r.summary() and "1 speaker," in r.summary()  # not "1 speakers"


def test_words_problems_are_named(tmp_path: Path) -> None:
    tone(tmp_path / "a.wav")
    tone(tmp_path / "b.wav")
    (tmp_path / "broken.wav").write_bytes(b"RIFF not really a wave file" * 4)
    (tmp_path / "empty.wav").write_bytes(b"")
    rows = [("a.wav", "seven", "x", "train"), ("b.wav", "zyxqvw", "x", "train"), ("broken.wav", "cat", "y", "train"),
            ("empty.wav", "dog", "y", "train"), ("gone.wav", "cat", "y", "train"), ("a.wav", "", "x", "train")]
    r = validate_data("words", words_folder(tmp_path, rows))
    text = "\n".join(r.problems)
    assert "zyxqvw" in text and "CMU" in text  # not in the dictionary
    assert "broken.wav" in text and "unreadable" in text
    assert "empty.wav" in text and "empty" in text
    assert "gone.wav" in text and "do not exist" in text
    assert "without a word" in text
    assert r.counts["oov_words"] == 1 and r.counts["unreadable"] == 2 and r.counts["missing_files"] == 1
    assert r.ok  # still trainable: the trainer skips these, and the report names them


def test_words_missing_columns_and_extra_columns(tmp_path: Path) -> None:
    tone(tmp_path / "a.wav")
    r = validate_data("words", words_folder(tmp_path, [("a.wav", "x")], header="path,label"))
    assert not r.ok and "missing column(s) word" in r.problems[0]
    r = validate_data("words", words_folder(tmp_path / "extra", [("../a.wav", "seven", "s", "zzz")],
                                            header="path,word,speaker,mood"))
    assert any("extra column(s) ignored: mood" in w for w in r.warnings)
    assert not r.ok and any("two different dictionary words" in p for p in r.problems)


def test_fsdd_metadata_is_recognised(fsdd: Path) -> None:
    r = validate_data("words", fsdd, max_checked=60)
    assert r.ok and "FSDD" in r.layout
    assert r.counts["rows"] == 3000 and r.counts["words"] == 10 and r.counts["speakers"] == 6
    assert r.counts["audio_files_checked"] == 60 and r.counts["duration_estimated"]
    assert 600 < r.counts["total_duration_s"] < 3000  # ~22 minutes, extrapolated from 60 headers
    assert not any("extra column" in w for w in r.warnings)


def test_empty_and_missing_folders(tmp_path: Path) -> None:
    for kind in ("words", "units", "retrieval"):
        r = validate_data(kind, tmp_path)
        assert not r.ok and "empty" in r.problems[0]
        r = validate_data(kind, tmp_path / "nope")
        assert not r.ok and "no such folder" in r.problems[0]
    (tmp_path / "readme.txt").write_text("hi")
    r = validate_data("words", tmp_path)
    assert not r.ok and "no words.csv" in r.problems[0]
    r = validate_data("units", tmp_path)
    assert not r.ok and "no audio files" in r.problems[0]
    r = validate_data("retrieval", tmp_path)
    assert not r.ok and "captions.csv" in r.problems[0]
    with pytest.raises(ValueError, match="unknown model kind"):
        validate_data("music", tmp_path)


def test_units_folder_of_audio_and_with_utterances(tmp_path: Path) -> None:
    for spk in ("ann", "bob"):
        for i in range(3):
            tone(tmp_path / "plain" / spk / f"{i}.flac", 1.0)
    r = validate_data("units", tmp_path / "plain")
    assert r.ok and r.counts["audio_files"] == 6 and r.counts["total_duration_s"] == pytest.approx(6.0, abs=0.01)
    assert any("utterances.csv" in w for w in r.warnings) and any("needs minutes" in w for w in r.warnings)
    u = tmp_path / "utt"
    tone(u / "x.wav", 1.0)
    (u / "bad.wav").write_bytes(b"\x00" * 100)
    (u / "utterances.csv").write_text("path,speaker\nx.wav,ann\nbad.wav,bob\nmissing.wav,bob\n")
    r = validate_data("units", u)
    assert r.ok and r.counts["speakers"] == 2 and r.layout == "utterances.csv"
    text = "\n".join(r.problems)
    assert "bad.wav" in text and "missing.wav" in text


def test_retrieval_caption_folder(tmp_path: Path) -> None:
    tone(tmp_path / "audio" / "a.wav", 2.0, 32000)
    tone(tmp_path / "audio" / "b.wav", 1.0, 32000)
    (tmp_path / "captions.csv").write_text(
        "path,caption,caption_2,split\naudio/a.wav,a dog barks,a hound,train\naudio/b.wav,rain falls,,val\n"
        "audio/c.wav,a car passes,,train\naudio/b.wav,,,train\n")
    r = validate_data("retrieval", tmp_path)
    assert r.ok and r.layout == "captions.csv"
    assert r.counts["clips"] == 3 and r.counts["captions"] == 4 and r.counts["splits"] == {"train": 2, "val": 1}
    text = "\n".join(r.problems)
    assert "audio/c.wav" in text and "without any caption" in text
    (tmp_path / "captions.csv").write_text("file,text\na.wav,x\n")
    r = validate_data("retrieval", tmp_path)
    assert not r.ok and "missing column(s) path, caption" in r.problems[0]


def test_retrieval_clotho_and_wavcaps_layouts(tmp_path: Path) -> None:
    clotho = tmp_path / "clotho"
    tone(clotho / "development" / "x.wav", 1.0, 32000)
    (clotho / "clotho_captions_development.csv").write_text(
        "file_name,caption_1,caption_2\nx.wav,birds sing,birds chirp\ny.wav,wind,gusts\n")
    r = validate_data("retrieval", clotho)
    assert r.layout == "Clotho" and r.counts["clips"] == 2 and r.counts["captions"] == 4
    assert any("y.wav" in p for p in r.problems)
    assert not r.ok and any("split 'train'" in p for p in r.problems)  # Clotho's splits are named otherwise
    wav = tmp_path / "wavcaps"
    tone(wav / "s1.flac", 1.0, 32000)
    (wav / "data.json").write_text(json.dumps({"data": [{"id": "s1", "caption": "a bell rings"}]}))
    r = validate_data("retrieval", wav)
    assert r.ok and r.layout == "WavCaps" and r.counts["clips"] == 1


def test_sfx_corpus_and_progress(sfx: Path) -> None:
    job = validate_job("retrieval", sfx, max_checked=120)
    steps = []
    while True:
        try:
            steps.append(next(job))
        except StopIteration as stop:
            report = stop.value
            break
    assert steps and steps[-1]["step"] == steps[-1]["total"] == 120
    assert report.ok and report.counts["clips"] == 1403 and report.counts["splits"]["val"] > 0


def test_a_plain_folder_of_units_audio_counts_no_speakers_the_trainer_does_not_see(tmp_path: Path) -> None:
    """The demo library's 15 category folders were reported as "15 speakers" beside the warning "speakers unknown",
    while the trainer reads every file of a plain folder as one speaker, "unknown" (its run said speakers: 1). No
    count is made up from the folder names; the warning says what the trainer will do."""
    for folder in ("Animals", "Water", "Vehicles"):
        tone(tmp_path / "plain" / folder / "a.wav", 1.0)
    r = validate_data("units", tmp_path / "plain")
    assert r.ok and not r.counts.get("speakers")
    assert "no utterances.csv: every file is one unknown speaker (add path,speaker rows for voice swaps)" in r.warnings
