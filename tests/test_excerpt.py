"""A selected part written as a file of its own (app/services/search/excerpt.py): the file's own samples, bit
for bit in its own format where that is lossless, 24-bit WAV for lossy sources, checked before it takes its
name, never replacing a file."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from app.services.search import excerpt
from app.services.search.excerpt import ExcerptError, drag_folder, write_excerpt
from core.audio import AudioError

SR = 48000


@pytest.fixture(scope="module")
def stereo() -> np.ndarray:
    return (np.random.default_rng(0).standard_normal((3 * SR, 2)) * 0.3).clip(-1, 1)  # (N, 2)


@pytest.mark.parametrize("fmt, subtype, suffix", [("WAV", "PCM_24", ".wav"), ("WAV", "PCM_16", ".wav"),
                                                  ("FLAC", "PCM_16", ".flac"), ("AIFF", "FLOAT", ".aiff"),
                                                  ("WAV", "PCM_U8", ".wav"), ("WAV", "DOUBLE", ".wav")])
def test_a_lossless_source_gives_a_bit_exact_part_in_its_own_format(tmp_path: Path, stereo: np.ndarray, fmt: str,
                                                                    subtype: str, suffix: str) -> None:
    src = tmp_path / f"Door_Creak{suffix}"
    sf.write(src, stereo, SR, subtype=subtype, format=fmt)
    out = write_excerpt(src, 0.5, 1.25, tmp_path)
    assert out.name == f"Door_Creak (0.50-1.25 s){suffix}"
    info = sf.info(out)
    assert (info.format, info.subtype, info.samplerate, info.channels, info.frames) == (fmt, subtype, SR, 2, 36000)
    dtype = "float64" if subtype in ("FLOAT", "DOUBLE") else "int32"
    assert np.array_equal(sf.read(out, dtype=dtype)[0], sf.read(src, dtype=dtype)[0][24000:60000])


def test_a_lossy_source_becomes_24_bit_wav_and_names_never_collide(tmp_path: Path, stereo: np.ndarray) -> None:
    src = tmp_path / "rain.ogg"
    sf.write(src, stereo, SR, format="OGG", subtype="VORBIS")
    first = write_excerpt(src, 1.0, 2.0, tmp_path)
    second = write_excerpt(src, 1.0, 2.0, tmp_path)
    assert (first.name, second.name) == ("rain (1.00-2.00 s).wav", "rain (1.00-2.00 s) 2.wav")
    info = sf.info(second)
    assert (info.format, info.subtype, info.channels, info.frames) == ("WAV", "PCM_24", 2, SR)
    decoded = sf.read(src, dtype="float32")[0][SR:2 * SR]
    assert np.abs(sf.read(second, dtype="float32")[0] - decoded.clip(-1, 1)).max() < 1e-6


def test_ends_past_the_file_are_its_ends_and_an_empty_part_is_an_error(tmp_path: Path, stereo: np.ndarray) -> None:
    src = tmp_path / "a.wav"
    sf.write(src, stereo, SR)
    assert sf.info(write_excerpt(src, 2.5, 9.0, tmp_path)).frames == SR // 2  # 2.5 s to the end (3 s)
    for a, b in ((1.0, 1.0), (2.0, 1.0), (5.0, 6.0), (float("nan"), 1.0)):
        with pytest.raises(ExcerptError):
            write_excerpt(src, a, b, tmp_path)
    with pytest.raises(AudioError, match="not a readable audio file"):
        (tmp_path / "bad.wav").write_bytes(b"RIFF junk")
        write_excerpt(tmp_path / "bad.wav", 0.0, 1.0, tmp_path)


def test_a_part_that_does_not_read_back_is_not_left_behind(tmp_path: Path, stereo: np.ndarray, monkeypatch) -> None:
    src = tmp_path / "a.wav"
    sf.write(src, stereo, SR, subtype="PCM_16")
    out = tmp_path / "out"
    out.mkdir()
    real = sf.write
    monkeypatch.setattr(excerpt.sf, "write", lambda f, data, *a, **kw: real(f, data[:-1], *a, **kw))  # a frame short
    with pytest.raises(ExcerptError, match="does not read back"):
        write_excerpt(src, 0.0, 1.0, out)
    assert list(out.iterdir()) == []
    with pytest.raises(OSError, match="no-such-folder"):  # the folder named, nothing written
        write_excerpt(src, 0.0, 1.0, tmp_path / "no-such-folder")


def test_the_drag_folder_forgets_parts_older_than_a_day(tmp_path: Path) -> None:
    folder = drag_folder(tmp_path)
    old, new = folder / "old.wav", folder / "new.wav"
    old.write_bytes(b"x")
    new.write_bytes(b"x")
    day_ago = time.time() - excerpt.DRAG_KEEP_S - 60
    os.utime(old, (day_ago, day_ago))
    assert drag_folder(tmp_path) == folder and sorted(p.name for p in folder.iterdir()) == ["new.wav"]
