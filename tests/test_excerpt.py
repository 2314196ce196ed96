"""A selected part written as a file of its own (app/services/search/excerpt.py): the file's own samples, bit
for bit in its own format where that is lossless, 24-bit WAV for lossy sources, checked before it takes its
name, never replacing a file."""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile as sf

from app.services.search import excerpt
from app.services.search.excerpt import ExcerptError, Fades, drag_folder, export_formats, export_part, write_excerpt
from core import audio as core_audio
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
    real = excerpt.frame_writer

    @contextlib.contextmanager
    def short(*args: object) -> Iterator[Callable[[np.ndarray], None]]:
        with real(*args) as write:
            yield lambda block: write(block[:-1])  # a frame short

    monkeypatch.setattr(excerpt, "frame_writer", short)
    with pytest.raises(ExcerptError, match="does not read back"):
        write_excerpt(src, 0.0, 1.0, out)
    assert list(out.iterdir()) == []
    with pytest.raises(OSError, match=r"no-such-folder/a \(0\.00-1\.00 s\)\.wav"):  # the file asked for, named
        write_excerpt(src, 0.0, 1.0, tmp_path / "no-such-folder")


def test_the_drag_folder_forgets_parts_older_than_a_day(tmp_path: Path) -> None:
    folder = drag_folder(tmp_path)
    old, new = folder / "old.wav", folder / "new.wav"
    old.write_bytes(b"x")
    new.write_bytes(b"x")
    day_ago = time.time() - excerpt.DRAG_KEEP_S - 60
    os.utime(old, (day_ago, day_ago))
    assert drag_folder(tmp_path) == folder and sorted(p.name for p in folder.iterdir()) == ["new.wav"]


def test_a_long_name_in_several_byte_characters_still_fits(tmp_path: Path, stereo: np.ndarray) -> None:
    """A name's limit is 255 bytes, not characters: 83 Japanese characters (249 bytes) plus the part's times
    used to be too long a name, and the export failed."""
    src = tmp_path / ("音" * 83 + ".wav")
    sf.write(src, stereo, SR)
    out = write_excerpt(src, 1.0, 2.0, tmp_path)
    again = write_excerpt(src, 1.0, 2.0, tmp_path)
    assert out.name.endswith("音 (1.00-2.00 s).wav") and again.name.endswith("音 (1.00-2.00 s) 2.wav")
    assert len(os.fsencode(again.name)) <= 255 - 14  # room left for atomic_path's ".NAME.1234abcd.tmp"


@pytest.mark.parametrize("fmt, subtype", [("RF64", "PCM_24"), ("AU", "PCM_16"), ("AU", "FLOAT")])
def test_pcm_in_another_container_becomes_a_wav_of_the_same_samples(tmp_path: Path, stereo: np.ndarray, fmt: str,
                                                                   subtype: str) -> None:
    """RF64 and AU parts used to fail their own check (integer samples compared as if they were floats)."""
    src = tmp_path / f"take.{fmt.lower()}"
    sf.write(src, stereo, SR, subtype=subtype, format=fmt)
    out = write_excerpt(src, 0.5, 1.0, tmp_path)
    info = sf.info(out)
    assert (out.suffix, info.format, info.subtype, info.frames) == (".wav", "WAV", subtype, SR // 2)
    dtype = "float64" if subtype == "FLOAT" else "int32"
    assert np.array_equal(sf.read(out, dtype=dtype)[0], sf.read(src, dtype=dtype)[0][SR // 2:SR])


def test_nan_samples_of_a_float_file_are_copied_not_refused(tmp_path: Path, stereo: np.ndarray) -> None:
    """The part is the file's own samples, NaN included: it used to fail its check (NaN != NaN) with an error
    naming a temporary file."""
    data = stereo.astype(np.float32)
    data[SR + 7] = np.nan
    src = tmp_path / "glitch.wav"
    sf.write(src, data, SR, subtype="FLOAT")
    out = write_excerpt(src, 1.0, 1.5, tmp_path)
    assert np.array_equal(sf.read(out, dtype="float32")[0], data[SR:SR + SR // 2], equal_nan=True)


def test_positions_that_are_not_numbers_are_a_clear_error(tmp_path: Path, stereo: np.ndarray) -> None:
    src = tmp_path / "a.wav"
    sf.write(src, stereo, SR)
    for a, b in ((1.0, float("inf")), (float("-inf"), 1.0), (1.0, float("nan"))):
        with pytest.raises(ExcerptError, match="a.wav"):
            write_excerpt(src, a, b, tmp_path)


def test_a_full_disk_is_said_and_names_the_file_asked_for(tmp_path: Path, stereo: np.ndarray, monkeypatch) -> None:
    """libsndfile answers a full disk with "System error." (a RuntimeError, which the drag handle did not catch)."""
    src = tmp_path / "a.wav"
    sf.write(src, stereo, SR)
    out = tmp_path / "out"
    out.mkdir()

    def full(*_a: object, **_kw: object) -> None:
        raise sf.LibsndfileError(2, "System error.")  # what libsndfile's write raises on ENOSPC

    monkeypatch.setattr(core_audio.sf.SoundFile, "write", full)
    monkeypatch.setattr(excerpt.shutil, "disk_usage", lambda _p: SimpleNamespace(free=4096))
    with pytest.raises(OSError, match=r"not enough free space.*a \(0.00-1.00 s\)\.wav") as e:
        write_excerpt(src, 0.0, 1.0, out)
    assert e.value.errno == errno.ENOSPC and list(out.iterdir()) == []



def test_a_file_made_under_the_parts_name_while_it_is_written_is_never_replaced(tmp_path: Path, stereo: np.ndarray,
                                                                                 monkeypatch) -> None:
    """Two exports of one part at once (or any file made meanwhile): the name is claimed only when the part is
    written and checked, and a name taken by then is left alone."""
    src = tmp_path / "a.wav"
    sf.write(src, stereo, SR, subtype="PCM_16")
    out = tmp_path / "out"
    out.mkdir()
    real = excerpt._check_written

    def meanwhile(*args, **kwargs) -> None:  # another export finishes first under the same name
        (out / "a (1.00-2.00 s).wav").write_bytes(b"the other export")
        real(*args, **kwargs)

    monkeypatch.setattr(excerpt, "_check_written", meanwhile)
    path = write_excerpt(src, 1.0, 2.0, out)
    assert path.name == "a (1.00-2.00 s) 2.wav" and sf.info(path).frames == SR
    assert (out / "a (1.00-2.00 s).wav").read_bytes() == b"the other export"
    assert sorted(p.name for p in out.iterdir()) == ["a (1.00-2.00 s) 2.wav", "a (1.00-2.00 s).wav"]  # no staging


def test_without_hard_links_a_part_still_takes_a_free_name(tmp_path: Path, stereo: np.ndarray, monkeypatch) -> None:
    src = tmp_path / "a.wav"
    sf.write(src, stereo, SR, subtype="PCM_16")

    def no_links(*_args: object) -> None:
        raise PermissionError("hard links are not supported here")

    monkeypatch.setattr(excerpt.os, "link", no_links)
    first, second = write_excerpt(src, 1.0, 2.0, tmp_path), write_excerpt(src, 1.0, 2.0, tmp_path)
    assert (first.name, second.name) == ("a (1.00-2.00 s).wav", "a (1.00-2.00 s) 2.wav")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


# ------------------------------------------------------------------------------------------------- export


def test_export_offers_wav_and_flac_and_the_sources_own_format_where_lossless(tmp_path: Path, stereo: np.ndarray
                                                                              ) -> None:
    def offered(name: str, data: np.ndarray, **kw: str) -> tuple[list[str], str]:
        sf.write(tmp_path / name, data, SR, **kw)
        forms, default = export_formats(core_audio.audio_info(tmp_path / name))
        return [f.label for f in forms], forms[default].label

    standard = ["WAV 16-bit", "WAV 24-bit", "FLAC 16-bit", "FLAC 24-bit"]
    assert offered("a.aiff", stereo, subtype="PCM_24") == (standard + ["AIFF 24-bit (as the source)"],
                                                           "AIFF 24-bit (as the source)")
    assert offered("b.flac", stereo, subtype="PCM_24") == (
        ["WAV 16-bit", "WAV 24-bit", "FLAC 16-bit", "FLAC 24-bit (as the source)"], "FLAC 24-bit (as the source)")
    assert offered("c.wav", stereo, subtype="FLOAT")[1] == "WAV 32-bit float (as the source)"
    assert offered("d.ogg", stereo, format="OGG", subtype="VORBIS") == (standard, "WAV 24-bit")  # lossy: no "own"
    assert offered("e.wav", np.zeros((SR, 10)), subtype="PCM_16")[0] == ["WAV 16-bit (as the source)", "WAV 24-bit"]


@pytest.mark.parametrize("label", ["WAV 16-bit", "WAV 24-bit", "FLAC 16-bit", "FLAC 24-bit",
                                   "AIFF 24-bit (as the source)"])
def test_an_exported_part_has_the_chosen_format_and_the_sources_rate_and_channels(tmp_path: Path, stereo: np.ndarray,
                                                                                 label: str) -> None:
    src = tmp_path / "take.aiff"
    sf.write(src, stereo, SR, subtype="PCM_24")
    forms, _ = export_formats(core_audio.audio_info(src))
    form = next(f for f in forms if f.label == label)
    out = export_part(src, 0.5, 1.25, tmp_path / f"part{form.suffix}", form)
    info = sf.info(out)
    assert (info.format, info.subtype, info.samplerate, info.channels, info.frames) == (
        form.format, form.subtype, SR, 2, 36000)
    source = sf.read(src, dtype="int32")[0][24000:60000]
    got = sf.read(out, dtype="int32")[0]
    if form.subtype == "PCM_24":
        assert np.array_equal(got, source)  # bit for bit
    else:  # the top 16 bits of each sample
        assert np.abs(got.astype(np.int64) - source).max() < 2 ** 16


def test_an_export_replaces_a_file_only_when_asked(tmp_path: Path, stereo: np.ndarray) -> None:
    src = tmp_path / "a.wav"
    sf.write(src, stereo, SR, subtype="PCM_16")
    target = tmp_path / "out" / "a part.wav"
    target.parent.mkdir()
    target.write_bytes(b"keep me")
    wav16 = export_formats(core_audio.audio_info(src))[0][0]
    with pytest.raises(FileExistsError, match="a part.wav"):
        export_part(src, 1.0, 2.0, target, wav16)
    assert target.read_bytes() == b"keep me"
    assert export_part(src, 1.0, 2.0, target, wav16, replace=True) == target and sf.info(target).frames == SR
    assert [p.name for p in target.parent.iterdir()] == ["a part.wav"]  # nothing staged left


def test_a_file_made_under_the_export_name_meanwhile_is_not_replaced(tmp_path: Path, stereo: np.ndarray,
                                                                     monkeypatch) -> None:
    src = tmp_path / "a.wav"
    sf.write(src, stereo, SR, subtype="PCM_16")
    target = tmp_path / "out" / "part.wav"
    target.parent.mkdir()
    real = excerpt._check_export

    def meanwhile(*args, **kwargs) -> None:
        target.write_bytes(b"the other export")
        real(*args, **kwargs)

    monkeypatch.setattr(excerpt, "_check_export", meanwhile)
    with pytest.raises(FileExistsError):
        export_part(src, 1.0, 2.0, target, excerpt.STANDARD_FORMATS[0])
    assert target.read_bytes() == b"the other export" and [p.name for p in target.parent.iterdir()] == ["part.wav"]


def test_floats_beyond_full_scale_and_nan_become_pcm_in_range(tmp_path: Path) -> None:
    src = tmp_path / "hot.wav"
    data = np.full((SR, 1), 0.5, dtype=np.float32)
    data[10:20], data[20:30], data[30:40] = 1.7, -3.0, np.nan
    sf.write(src, data, SR, subtype="FLOAT")
    out = export_part(src, 0.0, 1.0, tmp_path / "part.wav", excerpt.STANDARD_FORMATS[1])  # 24-bit
    got = sf.read(out, dtype="float64")[0]
    assert got[15] == pytest.approx(1.0, abs=1e-6) and got[25] == -1.0 and got[35] == 0.0  # cut, not wrapped
    assert got[100] == pytest.approx(0.5, abs=2 ** -23)


def test_export_fades_shape_the_ends_only(tmp_path: Path, stereo: np.ndarray) -> None:
    src = tmp_path / "a.flac"
    sf.write(src, stereo, SR, subtype="PCM_24")
    form = export_formats(core_audio.audio_info(src))[0][3]  # FLAC 24-bit, the source's own
    out = export_part(src, 0.0, 2.0, tmp_path / "p.flac", form, Fades(0.01, 0.02, "equal-power"))
    source, got = sf.read(src, dtype="int32")[0][:2 * SR], sf.read(out, dtype="int32")[0]
    n_in, n_out = SR // 100, SR // 50
    assert np.array_equal(got[n_in:-n_out], source[n_in:-n_out])
    assert np.all(got[0] == 0) and np.all(got[-1] == 0)
    half = n_in // 2  # equal power: sin(π/4) of the level halfway into the fade
    assert got[half] / 256 == pytest.approx(np.rint(source[half] / 256 * np.sin(np.pi / 4)), abs=1)
