"""Issue 42 item 7: export and probe stream in blocks, so memory stays near one block whatever the length and
channel count of the file or part (`core.audio.frame_blocks`, `frame_writer`, `measure`).

Memory is measured with tracemalloc (NumPy reports its buffers to it): what a call allocates at its peak, apart
from what was allocated before. Long files are sparse WAVs (a header, then zeros the disk does not store).
"""

from __future__ import annotations

import json
import struct
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from app.cli.main import main
from app.services.search import excerpt
from app.services.search.excerpt import write_excerpt
from core import audio
from core.audio import BLOCK_FRAMES, decode, measure

SR = 48000
MB = 1 << 20


def sparse_wav(path: Path, seconds: float, channels: int, sr: int = SR) -> Path:
    """A 16-bit PCM WAV of `seconds` of silence whose data the disk does not store (a hole)."""
    frames = round(seconds * sr)
    data = frames * channels * 2
    fmt = struct.pack("<HHIIHH", 1, channels, sr, sr * channels * 2, channels * 2, 16)
    with open(path, "wb") as fh:
        fh.write(b"RIFF" + struct.pack("<I", 36 + data) + b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt
                 + b"data" + struct.pack("<I", data))
        fh.truncate(44 + data)
    return path


def peak_bytes(call: Callable[[], Any]) -> tuple[Any, int]:
    """(what `call` returns, the most bytes it had allocated at once, tracemalloc's count)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = call()
        return out, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_probe_of_a_long_take_decodes_it_block_by_block(tmp_path: Path, capsys) -> None:
    """`earshot probe` of a 2-hour WAV decoded it whole (4.0 GB; a 6-hour take was refused as too long). Here 40
    minutes of stereo (920 MB as float32 samples) and a 4-hour file (over decode's 3-hour limit)."""
    long = sparse_wav(tmp_path / "take.wav", 40 * 60, 2)
    code, peak = peak_bytes(lambda: main(["probe", str(long), "--json"]))
    said = json.loads(capsys.readouterr().out)[0]
    assert code == 0 and (said["duration"], said["source_rate"], said["channels"]) == (2400.0, SR, 2)
    assert peak < 16 * MB, f"{peak / MB:.0f} MB"
    huge = sparse_wav(tmp_path / "night.wav", 4 * 3600, 1, sr=8000)
    assert main(["probe", str(huge), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["duration"] == 14400.0


def test_measure_says_what_decode_says(tmp_path: Path) -> None:
    path = tmp_path / "tone.wav"
    t = np.arange(round(2.5 * 44100)) / 44100
    sf.write(path, np.stack([np.sin(2 * np.pi * 440 * t), np.sin(2 * np.pi * 660 * t)], 1) * 0.3, 44100)
    for rate in (None, 16000, 48000):
        d, m = decode(path, sample_rate=rate), measure(path, sample_rate=rate)
        assert (round(m.duration, 3), m.sample_rate, m.source_rate, m.channels) == (
            round(d.duration, 3), d.sample_rate, d.source_rate, d.channels)
def test_exporting_a_long_six_channel_part_stays_near_one_block(tmp_path: Path) -> None:
    """A 10-minute part of a 6-channel file: the part was read whole, written whole and read back whole
    (6.0 GB peak for a 6-channel Ogg, from float64 copies). Here PCM, bit-exact: 10 minutes of 6 channels are
    345 MB of int16 samples."""
    src = sparse_wav(tmp_path / "surround.wav", 12 * 60, 6)
    out, peak = peak_bytes(lambda: write_excerpt(src, 60.0, 660.0, tmp_path, fsync=False))
    info = sf.info(out)
    assert (out.name, info.channels, info.frames, info.subtype) == ("surround (60.00-660.00 s).wav", 6, 600 * SR,
                                                                   "PCM_16")
    assert peak < 24 * MB, f"{peak / MB:.0f} MB"


@pytest.mark.skipif("OGG" not in sf.available_formats(), reason="libsndfile without Ogg")
def test_a_lossy_six_channel_part_is_converted_block_by_block(tmp_path: Path) -> None:
    """The lossy path (Vorbis to 24-bit WAV) made float64 copies of the whole part to check it: here 40 s of 6
    channels (92 MB in float64, each copy) stay under a few blocks."""
    rng = np.random.default_rng(0)
    src = tmp_path / "rain.ogg"
    with sf.SoundFile(src, "w", SR, 6, "VORBIS", format="OGG") as f:
        for _ in range(40):
            f.write((rng.standard_normal((SR, 6)) * 0.1).astype(np.float32))
    out, peak = peak_bytes(lambda: write_excerpt(src, 0.0, 40.0, tmp_path, fsync=False))
    info = sf.info(out)
    assert (info.channels, info.frames, info.subtype) == (6, 40 * SR, "PCM_24")
    assert peak < 3 * BLOCK_FRAMES * 6 * 8 + 8 * MB, f"{peak / MB:.0f} MB"
    decoded = sf.read(src, dtype="float32")[0]
    assert np.abs(sf.read(out, dtype="float32")[0] - decoded.clip(-1, 1)).max() < 1e-6


def test_a_part_is_read_and_checked_in_blocks(tmp_path: Path, monkeypatch) -> None:
    """The source is read in blocks of BLOCK_FRAMES, once to write and once to check, never whole."""
    src = sparse_wav(tmp_path / "a.wav", 10.0, 2)
    sizes: list[int] = []
    blocks = audio.frame_blocks

    def counted(*args: Any, **kwargs: Any):  # noqa: ANN202 - a generator
        for block in blocks(*args, **kwargs):
            sizes.append(len(block))
            yield block

    monkeypatch.setattr(excerpt, "frame_blocks", counted)
    write_excerpt(src, 1.0, 9.0, tmp_path, fsync=False)
    assert max(sizes) == BLOCK_FRAMES and sum(sizes) == 3 * 8 * SR  # source twice, the written part once
