"""Synthetic spoken-word corpus from espeak-ng: files, words.csv, held-out words and voices, resuming."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from app.services.jobs import drain
from models.phonemes import default_lexicon
from training.espeak_corpus import candidate_words, generate_corpus, plan_corpus, select_words

WORDS = ["water", "garden", "yellow", "window", "castle", "rabbit", "pencil"]
VOICES = ["en-us+m1", "en-gb+f2", "en-gb-scotland+m3"]
HELDOUT_VOICES = ["en-029+f4", "en-gb-x-gbcwmd+m7"]


def test_word_selection_is_filtered_and_deterministic() -> None:
    words = candidate_words()
    assert len(words) > 5000 and "water" in words
    lex = default_lexicon()
    for w in words[:: len(words) // 50]:
        assert w.isalpha() and w.islower() and 3 <= len(w) <= 10
        assert len(lex.lookup(w)) == 1
    a, b = select_words(30, seed=1), select_words(30, seed=1)
    assert a == b and len(set(a)) == 30 and a != select_words(30, seed=2)


def test_plan_holds_out_words_and_voices() -> None:
    plan = plan_corpus(WORDS, VOICES, HELDOUT_VOICES, 2, 1, 2, (150,), (50,), seed=0)
    held = [u for u in plan if u.split == "test_heldout"]
    rest = [u for u in plan if u.split != "test_heldout"]
    assert len(held) == 2 * 2 and len(rest) == 5 * 2
    assert {u.word for u in held}.isdisjoint(u.word for u in rest)
    assert {u.speaker for u in held} == set(HELDOUT_VOICES) and {u.speaker for u in rest} <= set(VOICES)
    assert sum(u.split == "dev" for u in rest) == 2
    with pytest.raises(ValueError, match="both training and held-out"):
        plan_corpus(WORDS, VOICES, VOICES[:1], 2, 1, 2, (150,), (50,), seed=0)
    with pytest.raises(ValueError, match="none for training"):
        plan_corpus(WORDS, VOICES, HELDOUT_VOICES, 5, 2, 2, (150,), (50,), seed=0)


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
def test_generate_corpus_writes_readable_16k_wavs_and_words_csv(tmp_path: Path) -> None:
    out = tmp_path / "corpus"
    result = drain(generate_corpus(out, WORDS, VOICES, speeds=(140, 170), pitches=(40, 60), seed=0, workers=2,
                                   heldout_voices=HELDOUT_VOICES, n_heldout_words=2, n_dev_words=1,
                                   voices_per_word=2))  # fmt: skip
    assert result["files"] == 5 * 2 + 2 * 2 and result["made"] == 14 and result["failed"] == 0
    assert result["splits"] == {"train": 8, "dev": 2, "test_heldout": 4} and result["synthetic"] is True
    with open(out / "words.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 14
    assert {"path", "word", "speaker", "split", "synthetic"} <= set(rows[0])
    assert all(r["synthetic"] == "1" for r in rows)
    held = {r["word"] for r in rows if r["split"] == "test_heldout"}
    assert len(held) == 2 and not held & {r["word"] for r in rows if r["split"] != "test_heldout"}
    assert {r["speaker"] for r in rows if r["split"] == "test_heldout"} == set(HELDOUT_VOICES)
    for r in rows:
        wave, sr = sf.read(out / r["path"], dtype="float32")
        assert sr == 16000 and wave.ndim == 1
        assert 0.15 < len(wave) / sr < 3.0 and np.abs(wave).max() > 0.05
    # the same word by two voices sounds different
    train = [r for r in rows if r["split"] == "train"]
    a, b = (sf.read(out / r["path"])[0] for r in train[:2])
    assert train[0]["word"] == train[1]["word"] and (len(a) != len(b) or not np.allclose(a, b))
    # resumable: a second run keeps every file, a deleted one is made again
    (out / rows[0]["path"]).unlink()
    again = drain(generate_corpus(out, WORDS, VOICES, speeds=(140, 170), pitches=(40, 60), seed=0,
                                  heldout_voices=HELDOUT_VOICES, n_heldout_words=2, n_dev_words=1,
                                  voices_per_word=2))  # fmt: skip
    assert again["kept"] == 13 and again["made"] == 1
