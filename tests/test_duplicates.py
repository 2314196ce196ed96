"""Issue 39, item 5: duplicates found by the same bytes, or by the same sound in another form (stored vectors,
then the audio), never between distinct sounds that only share a spectrum."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from app.services.jobs import drain
from app.services.library import audio_match
from app.services.library.duplicates import find_duplicates
from app.services.library.indexer import index_library
from app.services.library.library import Library
from core.audio import resample, write_audio
from tests.test_library import SR, ToneEmbedder


def burst(freq: float, seconds: float, shape: str, seed: int) -> np.ndarray:
    """A tone under an envelope with a seeded noise texture: sounds of one pitch that are not the same sound."""
    t = np.arange(round(seconds * SR)) / SR
    env = {"decay": np.exp(-4 * t), "rise": np.minimum(1.0, t / seconds) ** 2,
           "pulses": (np.sin(2 * np.pi * 3 * t) > 0).astype(float)}[shape]
    noise = np.random.default_rng(seed).standard_normal(len(t)) * 0.05
    return (0.5 * np.sin(2 * np.pi * freq * t) + noise) * env


@pytest.fixture
def library(tmp_path: Path) -> Path:
    root = tmp_path / "lib"
    for folder in ("pack", "copies"):
        (root / folder).mkdir(parents=True)
    x = burst(440, 1.5, "decay", 1)
    write_audio(root / "pack" / "hit.wav", x, SR)
    write_audio(root / "pack" / "swell.wav", burst(440, 1.5, "rise", 2), SR)  # same pitch, another sound
    write_audio(root / "pack" / "pulse.wav", burst(440, 1.5, "pulses", 3), SR)
    write_audio(root / "pack" / "low.wav", burst(220, 1.0, "decay", 4), SR)
    copies = root / "copies"
    write_audio(copies / "hit.flac", x, SR)
    write_audio(copies / "hit_16k.wav", resample(x, SR, 16_000), 16_000)
    write_audio(copies / "hit_24bit.wav", x, SR, "PCM_24")
    write_audio(copies / "hit_trimmed.wav", x[round(0.05 * SR):], SR)
    write_audio(copies / "hit_quieter.wav", x * 0.5, SR)
    shutil.copyfile(root / "pack" / "low.wav", copies / "low copy.wav")  # the same bytes
    return root


def groups_of(root: Path, file: str | None = None) -> list[tuple[bool, list[str]]]:
    emb = ToneEmbedder()
    drain(index_library(root, emb))
    with Library.open(root) as lib:
        fid = lib.files.id_of(file) if file else None
        return [(g.identical, [f.rel_path for f in g.files])
                for g in drain(find_duplicates(lib, emb.model_id, file_id=fid))]


def test_copies_in_other_forms_are_one_group_and_distinct_sounds_are_not(library: Path) -> None:
    groups = groups_of(library)
    assert groups == [(False, ["copies/hit.flac", "copies/hit_16k.wav", "copies/hit_24bit.wav",
                               "copies/hit_quieter.wav", "copies/hit_trimmed.wav", "pack/hit.wav"]),
                      (True, ["copies/low copy.wav", "pack/low.wav"])]


def test_one_files_duplicates(library: Path) -> None:
    assert groups_of(library, "pack/low.wav") == [(True, ["copies/low copy.wav", "pack/low.wav"])]
    assert groups_of(library, "pack/swell.wav") == []


def test_the_audio_check_tells_a_copy_from_a_sound_of_the_same_spectrum() -> None:
    x, other = burst(440, 1.5, "decay", 1), burst(440, 1.5, "rise", 2)

    def at16(a: np.ndarray) -> audio_match.Print:
        return audio_match.print_of(resample(a, SR, 16_000), len(a) / SR)

    assert audio_match.match(at16(x), at16(x[400:] * 0.3)) > 0.97  # trimmed by 50 ms, 10 dB down
    assert audio_match.match(at16(x), at16(other)) < 0.7
    blip = at16(x[:800])  # 0.1 s: compared on the fine prints
    assert audio_match.match(blip, at16(x[80:800] * 0.5)) > 0.97  # trimmed by 10 ms
    assert audio_match.match(blip, at16(other[:800])) < 0.7
    assert audio_match.match(blip, at16(x[760:800])) == -1.0  # 5 ms: too little to say anything


def test_clicks_too_short_for_a_print_are_compared_by_their_samples() -> None:
    """A 20-ms click (a drum machine's cowbell, a game's tick) has too few frames for either print: its copies at
    another rate or level are told from another click by their samples."""
    rng = np.random.default_rng(5)
    t = np.arange(round(0.02 * SR)) / SR
    click = np.sin(2 * np.pi * 800 * t) * np.exp(-150 * t) + 0.02 * rng.standard_normal(len(t))
    other = np.sin(2 * np.pi * 1_900 * t) * np.exp(-90 * t) + 0.02 * rng.standard_normal(len(t))

    def at16(a: np.ndarray, rate: int = SR) -> audio_match.Print:
        return audio_match.print_of(resample(a, rate, 16_000), len(a) / rate)

    copy_22k = resample(click, SR, 22_050)
    assert audio_match.match(at16(click), at16(copy_22k * 0.5, 22_050)) > 0.97
    assert audio_match.match(at16(click), at16(-click)) > 0.97  # polarity flipped: the same sound to the ear
    assert audio_match.match(at16(click), at16(other)) < 0.7
    assert audio_match.match(at16(click), at16(click[:40])) == -1.0  # a tenth of it: nothing to say


@pytest.mark.slow
def test_duplicates_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from app.cli.main import main
    from tests.test_search_service import make_library, write_tiny_checkpoint

    root = make_library(tmp_path / "lib")  # engines/chirp_copy.wav is birds/chirp_b.wav's bytes
    ckpt = str(write_tiny_checkpoint(tmp_path / "models"))
    assert main(["index", str(root), "--model", ckpt]) == 0
    capsys.readouterr()
    assert main(["duplicates", "--library", str(root), "--model", ckpt, "--json"]) == 0
    groups = json.loads(capsys.readouterr().out)
    assert {"identical": True, "match": 1.0} == {k: groups[0][k] for k in ("identical", "match")}
    assert [f["path"] for f in groups[0]["files"]] == ["birds/chirp_b.wav", "engines/chirp_copy.wav"]
    assert main(["duplicates", "nope.wav", "--library", str(root), "--model", ckpt]) == 2
    err = capsys.readouterr().err
    assert "nope.wav is not in the library" in err and "Traceback" not in err
