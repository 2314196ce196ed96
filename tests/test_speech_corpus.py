from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from training import speech_corpus as sc

DEP5 = """Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/

Files: debian/*
License: GPL-2+

Files: *
License: CC-BY-SA-3.0
"""
FREE_TEXT = """This package is free software; you can redistribute it and/or modify it under the terms of the
GNU General Public License as published by the Free Software Foundation; version 2 dated June, 1991."""


def burst(seconds: float, sr: int, seed: int = 0) -> np.ndarray:
    """Noise under a smooth envelope: stands in for a spoken prompt."""
    n = int(seconds * sr)
    return (0.3 * np.hanning(n) * np.random.default_rng(seed).standard_normal(n)).astype(np.float32)


@pytest.fixture
def fake_packages(tmp_path: Path) -> tuple[dict[str, list[str]], Path]:
    """Two installed 'packages' (files + copyright) under tmp_path; returns (package -> files, doc root)."""
    root, docs = tmp_path / "pkgs", tmp_path / "doc"
    files: dict[str, list[str]] = {}
    for pkg, text in (("prompts-a", DEP5), ("prompts-b", FREE_TEXT)):
        under = root / "sounds" / pkg
        under.mkdir(parents=True)
        (docs / pkg).mkdir(parents=True)
        (docs / pkg / "copyright").write_text(text)
        sf.write(under / "hello.wav", burst(1.0, 8000, 1), 8000, subtype="PCM_16")
        sf.write(under / "goodbye.wav", burst(0.8, 16000, 2), 16000, subtype="PCM_16")
        sf.write(under / "beep.wav", burst(0.5, 8000, 3), 8000, subtype="PCM_16")  # not speech, by name
        sf.write(under / "tick.wav", burst(0.1, 8000, 4), 8000, subtype="PCM_16")  # too short: dropped
        sf.write(under / "digits-1.gsm", burst(0.6, 8000, 5), 8000, format="RAW", subtype="GSM610")
        (under / "silence").mkdir()
        sf.write(under / "silence" / "1.wav", np.zeros(8000, np.float32), 8000)  # not speech, by folder
        sf.write(under / "quiet.wav", 1e-4 * burst(1.0, 8000, 6), 8000, subtype="PCM_16")  # dropped by level
        (under / "README.txt").write_text("not audio")
        elsewhere = root / "other" / f"{pkg}.wav"  # owned, but outside the sounds folder
        elsewhere.parent.mkdir(parents=True, exist_ok=True)
        sf.write(elsewhere, burst(1.0, 8000), 8000)
        files[pkg] = [str(p) for p in sorted(under.rglob("*"))] + [str(elsewhere)]
    return files, docs


def sources(root: Path) -> list[sc.RealSource]:
    return [sc.RealSource("prompts-a", "spk_a", "es-MX", under=str(root) + "/"),
            sc.RealSource("prompts-b", "spk_b", "fr-FR", under=str(root) + "/")]


def run(job):
    while True:
        try:
            next(job)
        except StopIteration as stop:
            return stop.value


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("package", ["tuxpaint-stamps-default", "ktuberling", "ktuberling-data", "klettres-data",
                                     "asterisk-core-sounds-en", "asterisk-core-sounds-en-wav",
                                     "asterisk-core-sounds-en-gsm"])
def test_reserved_packages_are_refused_everywhere(package, fake_packages, tmp_path):
    files, docs = fake_packages
    with pytest.raises(ValueError, match="reserved for evaluation"):
        sc.check_package(package)
    with pytest.raises(ValueError, match="reserved"):
        sc.dpkg_files(package)
    with pytest.raises(ValueError, match="reserved"):
        sc.package_license(package, docs)
    called = []
    bad = [sc.RealSource(package, "x", "en", under="/")]
    with pytest.raises(ValueError, match="reserved"):  # before any of its files is listed or read
        run(sc.build_corpus(tmp_path / "out", sources=bad, voices=[], words=[], sentences=[], heldout_packages=(),
                            heldout_speakers=(), list_files=lambda p: called.append(p) or [], doc_root=docs))
    assert called == []
    with pytest.raises(ValueError, match="reserved"):
        run(sc.build_corpus(tmp_path / "out", sources=bad, voices=[], words=[], sentences=[],
                            heldout_packages=[package], doc_root=docs))
    with pytest.raises(ValueError, match="reserved"):
        sc.tts_items([sc.TTSVoice("flite", "x", "x", package)], ["hello"], [], 0, 0.0, 0, docs)
    assert sc.check_package("asterisk-core-sounds-es-wav") == "asterisk-core-sounds-es-wav"


def test_licenses_are_read_from_the_copyright_files(fake_packages):
    _, docs = fake_packages
    assert sc.package_license("prompts-a", docs) == "CC-BY-SA-3.0"  # the `Files: *` paragraph, not debian/*
    assert sc.package_license("prompts-b", docs) == "GPL-2"
    assert sc.package_license("not-installed", docs).startswith("unknown")


def test_real_prompts_become_labelled_16k_utterances_with_a_heldout_speaker(fake_packages, tmp_path):
    files, docs = fake_packages
    root = Path(files["prompts-a"][0]).parents[1]
    out = tmp_path / "corpus"
    summary = run(sc.build_corpus(out, sources=sources(root), heldout_packages=["prompts-b"], voices=[], words=[],
                                  sentences=[], list_files=files.__getitem__, doc_root=docs, dev_fraction=0.0))
    rows = read_csv(out / "utterances.csv")
    assert list(rows[0]) == list(sc.UTTERANCE_COLUMNS)
    # hello, goodbye and the GSM digit from each package; beep and silence/ (not speech), tick (too short),
    # quiet (below -50 dB), the README and the file outside the sounds folder are left out
    assert sorted(r["text"] for r in rows) == sorted(["prompts-a/hello", "prompts-a/goodbye", "prompts-a/digits-1",
                                                      "prompts-b/hello", "prompts-b/goodbye", "prompts-b/digits-1"])
    for r in rows:
        info = sf.info(out / r["path"])
        assert info.samplerate == 16000 and info.channels == 1 and info.subtype == "PCM_16"
        assert r["real"] == "1"
    by_pkg = {r["source"]: r for r in rows}
    assert by_pkg["prompts-a"]["split"] == "train" and by_pkg["prompts-a"]["speaker"] == "spk_a"
    assert by_pkg["prompts-a"]["license"] == "CC-BY-SA-3.0" and by_pkg["prompts-a"]["language"] == "es-MX"
    assert {r["split"] for r in rows if r["source"] == "prompts-b"} == {"heldout"}
    hello = sf.read(out / by_pkg["prompts-a"]["path"].replace("digits-1", "hello"))[0]
    assert len(hello) == 16000  # 1 s at 8 kHz, resampled
    assert summary["utterances"] == 6 and summary["real"]["utterances"] == 6 and summary["dropped"] == 4
    assert summary["heldout_speakers"] == ["spk_b"]
    assert read_csv(out / "words.csv") == []  # no TTS words asked for
    assert json.loads((out / "summary.json").read_text())["utterances"] == 6
    # resumable: a second run makes nothing new and writes the same tables
    again = run(sc.build_corpus(out, sources=sources(root), heldout_packages=["prompts-b"], voices=[], words=[],
                                sentences=[], list_files=files.__getitem__, doc_root=docs, dev_fraction=0.0))
    assert again["made"] == 0 and again["planned"] == 10
    assert read_csv(out / "utterances.csv") == rows


def test_heldout_package_must_be_a_source(fake_packages, tmp_path):
    files, docs = fake_packages
    with pytest.raises(ValueError, match="not one of the real sources"):
        run(sc.build_corpus(tmp_path, sources=sources(tmp_path), heldout_packages=["prompts-c"], voices=[],
                            words=[], sentences=[], list_files=files.__getitem__, doc_root=docs))


def test_tts_words_are_split_by_word_and_said_by_every_voice(tmp_path):
    voices = [sc.TTSVoice("flite", "slt", "slt", "flite"), sc.TTSVoice("festival", "kal_diphone", "kal", "fx")]
    words = ["apple", "river", "stone", "green", "table"]
    items = sc.tts_items(voices, words, ["The cat sat on the mat."], n_dev_words=2, dev_fraction=0.0, seed=0,
                         doc_root=tmp_path)
    word_items = [it for it in items if it.word]
    assert len(word_items) == 10 and len([it for it in items if not it.word]) == 2
    dev = {it.word for it in word_items if it.split == "dev"}
    assert len(dev) == 2 and not dev & {it.word for it in word_items if it.split == "train"}
    assert {(it.word, it.speaker) for it in word_items} == {(w, s) for w in words for s in ("slt", "kal")}
    assert all(it.real == 0 and it.language == "en" for it in items)
    assert items == sc.tts_items(voices, words, ["The cat sat on the mat."], 2, 0.0, 0, tmp_path)  # deterministic


@pytest.mark.skipif(shutil.which("flite") is None, reason="flite is not installed")
def test_flite_words_land_in_words_csv(tmp_path):
    out = tmp_path / "corpus"
    summary = run(sc.build_corpus(out, sources=[], heldout_packages=(), heldout_speakers=(), words=["water", "music"],
                                  sentences=["The sun is warm today."], n_dev_words=1,
                                  voices=[sc.TTSVoice("flite", "slt", "slt", "flite")]))
    words = read_csv(out / "words.csv")
    assert list(words[0]) == list(sc.WORD_COLUMNS)
    assert sorted(r["word"] for r in words) == ["music", "water"]
    assert {r["split"] for r in words} == {"train", "dev"} and {r["synthetic"] for r in words} == {"1"}
    for r in words:
        wave, sr = sf.read(out / r["path"])
        assert sr == 16000 and 0.2 < len(wave) / sr < 2.0 and np.abs(wave).max() > 0.05
    assert summary["synthetic"]["utterances"] == 3 and summary["real"]["utterances"] == 0
    utt = read_csv(out / "utterances.csv")
    assert {r["source"] for r in utt} == {"flite:slt (flite)"} and all(r["license"] for r in utt)


def test_license_sentences_are_prose(tmp_path):
    (tmp_path / "GPL-3").write_text("Preamble. The licenses for most software are designed to take away your "
                                    "freedom. See http://x.org/ for 3.4.5 details!\n\nShort one.")
    assert sc.license_sentences(tmp_path, ["GPL-3"]) == [
        "The licenses for most software are designed to take away your freedom."]


def test_voice_folders_become_speakers_and_one_word_lines_become_words(tmp_path, fake_packages):
    _, docs = fake_packages
    root = tmp_path / "voices"
    files = []
    for voice in ("Pirate", "Surfer", "Robot"):
        for stem in ("Hello", "Comeonthen", "Ow1", "Amazing"):
            path = root / voice / f"{stem}.ogg"
            path.parent.mkdir(parents=True, exist_ok=True)
            sf.write(path, burst(0.6, 22050), 22050, format="OGG", subtype="VORBIS")
            files.append(str(path))
    src = sc.RealSource("game-voices", "game-{voice}", "en", str(root) + "/",
                        pattern=r"(?P<voice>Pirate|Surfer)/[^/]+$", skip=r"^ow", words=True, license="GFDL-1.3")
    items = sc.real_items([src], (), 0.0, 0, lambda p: files, docs, heldout_speakers=["game-Pirate"],
                          vocabulary={"hello", "amazing"}.__contains__)
    assert sorted((it.speaker, it.text, it.word, it.split) for it in items) == [
        ("game-Pirate", "Pirate/Amazing", "amazing", "heldout"), ("game-Pirate", "Pirate/Comeonthen", "", "heldout"),
        ("game-Pirate", "Pirate/Hello", "hello", "heldout"), ("game-Surfer", "Surfer/Amazing", "amazing", "train"),
        ("game-Surfer", "Surfer/Comeonthen", "", "train"), ("game-Surfer", "Surfer/Hello", "hello", "train")]
    assert {it.license for it in items} == {"GFDL-1.3"}  # the source's own license, not the package's `Files: *`
    out = tmp_path / "corpus"
    run(sc.build_corpus(out, sources=[src], heldout_packages=(), heldout_speakers=["game-Pirate"], voices=[],
                        words=[], sentences=[], list_files=lambda p: files, doc_root=docs))
    words = read_csv(out / "words.csv")  # the default vocabulary is CMUdict
    assert sorted((r["word"], r["speaker"], r["split"], r["synthetic"]) for r in words) == [
        ("amazing", "game-Pirate", "heldout", "0"), ("amazing", "game-Surfer", "train", "0"),
        ("hello", "game-Pirate", "heldout", "0"), ("hello", "game-Surfer", "train", "0")]


def test_a_source_with_texts_labels_its_phrases_and_keeps_its_own_split(tmp_path, fake_packages):
    _, docs = fake_packages
    root = tmp_path / "tiles"
    files = []
    for voice in ("male1", "female1"):
        for stem in ("b3", "pung", "unnamed"):
            path = root / voice / f"{stem}.ogg"
            path.parent.mkdir(parents=True, exist_ok=True)
            level = 1e-3 if voice == "male1" else 1.0  # one voice recorded 60 dB low, kept by its source's floor
            sf.write(path, level * burst(0.6, 22050), 22050, format="OGG", subtype="VORBIS")
            files.append(str(path))
    src = sc.RealSource("tile-game", "tiles-{voice}", "en", str(root) + "/", pattern=r"(?P<voice>\w+)/[^/]+$",
                        texts=(("b3", "bamboo three"), ("pung", "pung")), split="heldout-tiles", license="GPL-2+",
                        min_rms_db=-100.0)
    out = tmp_path / "corpus"
    summary = run(sc.build_corpus(out, sources=[src], heldout_packages=(), heldout_speakers=(), voices=[], words=[],
                                  sentences=[], list_files=lambda p: files, doc_root=docs))
    words = read_csv(out / "words.csv")
    assert sorted((r["word"], r["speaker"], r["split"], r["phonemes"]) for r in words) == [
        ("bamboo three", "tiles-female1", "heldout-tiles", "B AE M B UW TH R IY"),
        ("bamboo three", "tiles-male1", "heldout-tiles", "B AE M B UW TH R IY"),
        ("pung", "tiles-female1", "heldout-tiles", "P AH NG"), ("pung", "tiles-male1", "heldout-tiles", "P AH NG")]
    # every file is evaluation-only, the unnamed one too (units read utterances.csv), whatever the held-out args
    assert {r["split"] for r in read_csv(out / "utterances.csv")} == {"heldout-tiles"}
    assert summary["heldout_speakers"] == ["tiles-female1", "tiles-male1"]


def test_kajongg_texts_are_all_in_the_dictionary():
    from models.phonemes import text_to_phonemes

    texts = dict(sc.KAJONGG_TEXTS)
    assert len(texts) == 42
    assert all(text_to_phonemes(t) for t in texts.values())
    kajongg = next(s for s in sc.REAL_SOURCES if s.package == "kajongg")
    assert kajongg.split == "heldout-kajongg"  # evaluation only, never a training split


def test_letter_and_number_sets_are_labelled_by_file_name_and_never_trained_on():
    from models.phonemes import text_to_phonemes
    from training.reserved import is_held_out

    letters, numbers = dict(sc.LETTER_TEXTS), dict(sc.NUMBER_TEXTS)
    assert len(letters) == 26 and letters["a"] == "a." and letters["w"] == "w."
    assert text_to_phonemes(letters["a"]) == ["EY"]  # the letter's name, not the word "a" (AH)
    assert text_to_phonemes(letters["z"]) == ["Z", "IY"]
    assert numbers["7"] == numbers["seven"] == "seven" and numbers["thirty"] == "thirty"
    assert all(text_to_phonemes(t) for t in (*letters.values(), *numbers.values()))
    by_split: dict[str, set[str]] = {}
    for src in sc.REAL_SOURCES:
        by_split.setdefault(src.split, set()).add(src.package)
        if src.split in ("heldout-letters", "heldout-numbers"):
            assert is_held_out(src.package)  # units training and the noise bank never read these packages
            labelled = {stem for stem, _ in src.texts}
            # the pattern keeps only files the table names, so every file of the set is a labelled word
            assert all(re.fullmatch(src.pattern, f"{stem}.{ext}") is None or stem in labelled
                       for stem in ("A", "a", "h", "x", "1", "9", "seven", "all", "loveall", "click", "King")
                       for ext in ("wav", "ogg"))
    assert by_split["heldout-letters"] == {"gentle", "qabcs-data", "scid-data"}
    assert by_split["heldout-numbers"] == {"csmash-data", "scid-data"}
    assert by_split["heldout-saytime"] == {"saytime"} and by_split["heldout-mandarin"] == {"gcin-voice"}
    assert {"heldout-kajongg", "heldout-letters", "heldout-numbers", "heldout-saytime",
            "heldout-mandarin"} <= set(sc.HELDOUT_SETS)
    assert is_held_out("saytime") and is_held_out("gcin-voice")


def test_the_saytime_and_mandarin_rules_keep_what_they_say() -> None:
    """saytime: numbers only ("0", "oh" and the clock's words out); gcin: first-tone syllables, lone initials out."""
    say = next(s for s in sc.REAL_SOURCES if s.split == "heldout-saytime")
    kept = {stem for stem in ("0", "1", "9", "10", "20", "21", "30", "50", "60", "oh", "am", "the_time_is")
            if re.fullmatch(say.pattern, f"{stem}.au")}
    assert kept == {"1", "9", "10", "20", "30", "50"} and kept <= set(dict(sc.SAYTIME_TEXTS))
    assert dict(sc.SAYTIME_TEXTS)["13"] == "thirteen" and dict(sc.SAYTIME_TEXTS)["40"] == "forty"
    assert say.raw == ("ULAW", 8000)  # headerless SPARCstation audio
    mandarin = {name: bool(re.fullmatch(sc.MANDARIN_PATTERN, name)) for name in (
        "ㄅㄚ/3.ogg", "ㄅㄚ/5.ogg", "ㄅㄚ3/3.ogg", "ㄅㄚ1/5.ogg", "ㄅ/3.ogg", "ㄒ/5.ogg", "ㄓ/3.ogg", "ㄚ/5.ogg",
        "ㄅㄚ/4.ogg")}
    assert [k for k, v in mandarin.items() if v] == ["ㄅㄚ/3.ogg", "ㄅㄚ/5.ogg", "ㄓ/3.ogg", "ㄚ/5.ogg"]


def test_a_word_group_and_a_raw_format_reach_the_rows(tmp_path) -> None:
    """A source's `word_group` is each file's word (no ARPAbet), its `raw` format is how the file is read."""
    src = sc.RealSource("gcin-voice", "gcin-{voice}", "zh", "/x/ogg/", pattern=sc.MANDARIN_PATTERN,
                        word_group="syllable", split="heldout-mandarin", raw=("ULAW", 8000))
    items = sc.real_items([src], (), 0.05, 0, lambda p: ["/x/ogg/ㄇㄚ/5.ogg", "/x/ogg/ㄇㄚ2/5.ogg"], tmp_path)
    assert [(it.word, it.speaker, it.phonemes, it.raw) for it in items] == [("ㄇㄚ", "gcin-5", "", ("ULAW", 8000))]
    with pytest.raises(ValueError, match="not both"):
        sc.RealSource("p", "s", "zh", pattern=sc.MANDARIN_PATTERN, word_group="syllable", texts=(("3", "three"),))
    with pytest.raises(ValueError, match="not a group of its pattern"):
        sc.RealSource("p", "s", "zh", pattern=r"(?P<voice>\d)\.ogg$", word_group="syllable")
    raw = tmp_path / "7.au"
    raw.write_bytes(bytes([0x00, 0x80, 0x7F, 0xFF] * 400))  # mu-law: loud negative, loud positive, two silences
    wave, sr = sc.read_origin(str(raw), ("ULAW", 8000))
    assert sr == 8000 and len(wave) == 1600 and wave[0] < -0.9 and wave[1] > 0.9 and abs(wave[2]) < 1e-3


def test_an_evaluation_package_is_refused_a_training_split(tmp_path, fake_packages):
    files, docs = fake_packages
    src = sc.RealSource("gentle", "gentle-voxeo", "en", str(Path(files["prompts-a"][0]).parent) + "/")
    with pytest.raises(ValueError, match="held out to evaluate the speech models"):
        sc.real_items([src], (), 0.05, 0, lambda p: files["prompts-a"], docs)


def test_one_heldout_set_alone_has_the_rows_of_the_whole_corpus(tmp_path, fake_packages):
    """`--only-split` (build_heldout_set) writes the same rows as the whole corpus's build, and no TTS."""
    _, docs = fake_packages
    root = tmp_path / "letters"
    root.mkdir()
    files = []
    for stem in ("A", "B", "hello", "c"):  # "c" and "hello" are not in the upper-case letter pattern
        sf.write(root / f"{stem}.wav", burst(0.5, 8000), 8000, subtype="PCM_16")
        files.append(str(root / f"{stem}.wav"))
    letters = sc.RealSource("letter-pkg", "letters-1", "en", str(root) + "/", pattern=r"[A-Z]\.wav$",
                            texts=tuple((c.upper(), t) for c, t in sc.LETTER_TEXTS), split="heldout-letters",
                            license="GPL")
    prompts = sc.RealSource("prompt-pkg", "spk", "en", str(root) + "/", pattern=r"hello\.wav$", license="GPL")
    whole, alone = tmp_path / "whole", tmp_path / "alone"
    run(sc.build_corpus(whole, sources=[prompts, letters], heldout_packages=(), heldout_speakers=(), voices=[],
                        words=[], sentences=[], list_files=lambda p: files, doc_root=docs))
    run(sc.build_heldout_set(alone, "heldout-letters", [prompts, letters], list_files=lambda p: files,
                             doc_root=docs))
    assert {r["speaker"] for r in read_csv(whole / "utterances.csv")} == {"spk", "letters-1"}
    assert read_csv(alone / "words.csv") == [r for r in read_csv(whole / "words.csv") if r["split"] != "train"]
    assert [(r["word"], r["phonemes"]) for r in read_csv(alone / "words.csv")] == [("a.", "EY"), ("b.", "B IY")]
    assert [r["speaker"] for r in read_csv(alone / "utterances.csv")] == ["letters-1", "letters-1"]
    with pytest.raises(ValueError, match="no evaluation set"):
        sc.build_heldout_set(alone, "train", [prompts, letters])


def test_the_corpus_heldout_split_alone_holds_the_heldout_voices(tmp_path, fake_packages):
    """`--only-split heldout`: the sources that hold a held-out voice, that voice's rows split heldout."""
    _, docs = fake_packages
    files = []
    for voice in ("Pirate", "Classic"):
        (tmp_path / voice).mkdir()
        sf.write(tmp_path / voice / "hello.wav", burst(0.5, 8000), 8000, subtype="PCM_16")
        files.append(str(tmp_path / voice / "hello.wav"))
    games = sc.RealSource("game-pkg", "game-{voice}", "en", str(tmp_path) + "/", pattern=r"(?P<voice>\w+)/[^/]+$",
                          words=True, license="GPL")
    other = sc.RealSource("other-pkg", "other", "en", str(tmp_path) + "/", pattern=r"Classic/hello\.wav$")
    run(sc.build_heldout_set(tmp_path / "out", "heldout", [games, other], list_files=lambda p: files,
                             doc_root=docs, heldout_packages=(), heldout_speakers=("game-Pirate",)))
    rows = {(r["speaker"], r["split"]) for r in read_csv(tmp_path / "out" / "words.csv")}
    assert ("game-Pirate", "heldout") in rows and all(split != "heldout" for spk, split in rows if spk != "game-Pirate")
    assert "other" not in {spk for spk, _ in rows}  # a source with no held-out voice is not built


def test_a_source_package_that_is_not_installed_is_named_not_silently_dropped(fake_packages, tmp_path):
    files, docs = fake_packages
    root = Path(files["prompts-a"][0]).parents[1]
    listing = {**files, "prompts-b": []}  # dpkg -L of a package that is not installed: nothing
    job = sc.build_corpus(tmp_path / "corpus", sources=sources(root), heldout_packages=(), heldout_speakers=(),
                          voices=[], words=[], sentences=[], list_files=listing.__getitem__, doc_root=docs)
    first = next(job)
    assert "no files from prompts-b (not installed?)" in first["message"]
    summary = run(job)
    assert summary["missing_packages"] == ["prompts-b"] and summary["utterances"] == 3
