"""Audio services: decoding (formats, rates, broken files), block streaming, ring buffer, record, play."""

from __future__ import annotations

import ast
import json
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import sounddevice as sd
import soundfile as sf

from app.services import devices
from app.services.devices import NoAudioDeviceError, Player, Recorder, RingBuffer, device_status
from core import audio as audio_path
from core.audio import (
    AudioError,
    EmptyAudioError,
    TooLongAudioError,
    TruncatedAudioError,
    UnreadableAudioError,
    audio_info,
    decode,
    iter_blocks,
    save_wav,
)

# ------------------------------------------------------------------------------------------------ helpers


def tone(freq: float, seconds: float, sr: int, channels: int = 1, amp: float = 0.5) -> np.ndarray:
    t = np.arange(round(seconds * sr)) / sr
    x = (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)
    return np.stack([x] * channels, axis=1) if channels > 1 else x


def peak_hz(x: np.ndarray, sr: int) -> float:
    spec = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.fft.rfftfreq(len(x), 1 / sr)[spec.argmax()])


def write(path: Path, x: np.ndarray, sr: int, **kw: object) -> Path:
    sf.write(path, x, sr, **kw)
    return path


# ---------------------------------------------------------------------------------------------- decoding


@pytest.mark.parametrize("subtype, tol", [("PCM_16", 1 / 32768), ("FLOAT", 0.0)])
def test_wav_round_trip(tmp_path, subtype, tol):
    rng = np.random.default_rng(0)
    x = (rng.uniform(-0.9, 0.9, 8000)).astype(np.float32)
    path = write(tmp_path / "a.wav", x, 16000, subtype=subtype)
    d = decode(path)
    assert d.audio.dtype == np.float32 and d.audio.shape == (8000,)
    assert d.sample_rate == d.source_rate == 16000 and d.channels == 1
    assert d.duration == pytest.approx(0.5)
    np.testing.assert_allclose(d.audio, x, atol=tol)


def test_stereo_44k_to_16k_mono_keeps_pitch(tmp_path):
    x = tone(440, 2.0, 44100, channels=2)
    x[:, 1] *= 0.5  # the mix must be the mean of the channels
    path = write(tmp_path / "stereo.wav", x, 44100, subtype="FLOAT")
    d = decode(path, sample_rate=16000)
    assert d.audio.ndim == 1 and d.channels == 2 and d.source_rate == 44100 and d.sample_rate == 16000
    assert len(d.audio) == 32000 and d.duration == pytest.approx(2.0)
    assert abs(peak_hz(d.audio, 16000) - 440) < 1.0
    mid = d.audio[8000:24000]  # away from the resampler's edges
    assert np.abs(mid).max() == pytest.approx(0.75 * 0.5, rel=0.02)

    both = decode(path, sample_rate=16000, mono=False)
    assert both.audio.shape == (32000, 2)
    np.testing.assert_allclose(both.audio.mean(axis=1), d.audio, atol=1e-6)


@pytest.mark.parametrize("ext, kw, tol_s", [
    ("flac", {}, 0.0),
    ("ogg", {"subtype": "VORBIS"}, 0.0),
    ("mp3", {"format": "MP3"}, 0.06),
    ("aiff", {}, 0.0),
])
def test_compressed_and_other_formats(tmp_path, ext, kw, tol_s):
    x = tone(440, 1.5, 22050)
    path = write(tmp_path / f"t.{ext}", x, 22050, **kw)
    assert audio_info(path).sample_rate == 22050
    d = decode(path, sample_rate=16000)
    assert abs(d.duration - 1.5) <= tol_s + 1e-9
    assert abs(peak_hz(d.audio, 16000) - 440) < 2.0
    assert np.abs(d.audio).max() == pytest.approx(0.5, abs=0.08)


@pytest.mark.parametrize("sr", [8000, 11025, 22050, 96000])
def test_odd_sample_rates(tmp_path, sr):
    x = tone(1000, 1.0, sr) if sr != 11025 else tone(1000, 1.3, sr)
    path = write(tmp_path / f"r{sr}.wav", x, sr)
    d = decode(path, sample_rate=16000)
    assert len(d.audio) == round(len(x) * 16000 / sr)  # libsoxr's length
    assert abs(peak_hz(d.audio, 16000) - 1000) < 1.5


def test_legacy_resampler_is_torchaudio_with_default_arguments(tmp_path):
    """The shipped speech models were trained on torchaudio's resampler: "torchaudio-sinc" must be exactly it."""
    import torch
    import torchaudio.functional

    rng = np.random.default_rng(0)
    x = (0.3 * rng.standard_normal(4000)).astype(np.float32)  # broadband: the stop bands differ
    expected = torchaudio.functional.resample(torch.from_numpy(x), 8000, 16000).numpy()
    legacy = audio_path.resample(x, 8000, 16000, audio_path.LEGACY_RESAMPLER)
    assert legacy.dtype == np.float32 and np.array_equal(legacy, expected)
    assert not np.allclose(audio_path.resample(x, 8000, 16000), expected, atol=1e-3)  # soxr is another filter
    # (N, C) resamples each channel along time, as mono does
    both = audio_path.resample(np.stack([x, -x], axis=1), 8000, 16000, audio_path.LEGACY_RESAMPLER)
    assert both.shape == (8000, 2)  # a batched convolution: equal up to float rounding
    np.testing.assert_allclose(both, np.stack([expected, -expected], axis=1), atol=1e-6)
    # the same through decode and decode_bytes
    path = write(tmp_path / "n8k.wav", x, 8000, subtype="FLOAT")
    assert np.array_equal(decode(path, 16000, resampler=audio_path.LEGACY_RESAMPLER).audio, expected)
    got = audio_path.decode_bytes(path.read_bytes(), 16000, resampler=audio_path.LEGACY_RESAMPLER).audio
    assert np.array_equal(got, expected)
    with pytest.raises(ValueError, match="unknown resampler 'sinc'"):
        audio_path.resample(x, 8000, 16000, "sinc")


def test_legacy_resampler_falls_back_to_soxr_for_costly_ratios():
    # 11,127 -> 16,000 reduces to 11,127:16,000; torchaudio's kernel would take seconds, soxr is used
    x = tone(1000, 0.5, 11127)
    got = audio_path.resample(x, 11127, 16000, audio_path.LEGACY_RESAMPLER)
    assert np.array_equal(got, audio_path.resample(x, 11127, 16000))  # soxr's answer: the costly kernel not built


def test_resampler_recorded_in_a_checkpoint():
    read = audio_path.resampler_from_training
    assert read({}) == read(None) == read({"preprocessing": {"trim": {}}}) == "torchaudio-sinc"  # written before
    assert read({"preprocessing": {"resampler": "soxr"}}) == "soxr"
    with pytest.raises(ValueError, match="unknown resampler 'fancy'"):
        read({"preprocessing": {"resampler": "fancy"}})


def test_audio_info_from_header(tmp_path):
    path = write(tmp_path / "i.flac", tone(300, 2.5, 32000, channels=2), 32000)
    info = audio_info(path)
    assert (info.sample_rate, info.channels, info.frames, info.format) == (32000, 2, 80000, "FLAC")
    assert info.duration == pytest.approx(2.5)


def test_segment_start_and_duration(tmp_path):
    x = np.arange(16000, dtype=np.float32) / 16000
    path = write(tmp_path / "ramp.wav", x, 16000, subtype="FLOAT")
    d = decode(path, start=0.25, duration=0.5)
    np.testing.assert_array_equal(d.audio, x[4000:12000])
    assert len(decode(path, start=0.9, duration=5.0).audio) == 1600  # clamped to the end


# ---------------------------------------------------------------------------------------------- bad files


def test_corrupt_file(tmp_path):
    path = tmp_path / "noise.wav"
    path.write_bytes(np.random.default_rng(1).bytes(4000))
    with pytest.raises(UnreadableAudioError, match="noise.wav"):
        decode(path)


def test_zero_byte_file(tmp_path):
    path = tmp_path / "empty.wav"
    path.write_bytes(b"")
    with pytest.raises(EmptyAudioError, match="empty.wav.*0 bytes"):
        decode(path)


def test_header_only_wav(tmp_path):
    full = write(tmp_path / "full.wav", tone(440, 0.5, 16000), 16000, subtype="PCM_16")
    path = tmp_path / "header.wav"
    path.write_bytes(full.read_bytes()[:44])
    with pytest.raises(EmptyAudioError, match="header.wav"):
        decode(path)


def test_truncated_wav(tmp_path):
    full = write(tmp_path / "full.wav", tone(440, 1.0, 16000), 16000, subtype="PCM_16")
    data = full.read_bytes()
    path = tmp_path / "cut.wav"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TruncatedAudioError, match="cut.wav.*32000"):
        decode(path)
    with pytest.raises(TruncatedAudioError):
        list(iter_blocks(path, 16000, 0.1))


def test_truncated_mp3(tmp_path):
    full = write(tmp_path / "full.mp3", tone(440, 2.0, 16000), 16000, format="MP3")
    data = full.read_bytes()
    path = tmp_path / "cut.mp3"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TruncatedAudioError, match="cut.mp3"):
        decode(path)


def test_a_damaged_header_is_said_in_plain_words(tmp_path):
    """Hostile-input sweep: libsndfile's reasons went out as they were. The first 40 bytes of an MP3 (a file
    that is there and regular: checked before) said "File does not exist or is not a regular file (possibly a
    pipe?)"; a WAV header with a sample rate of 2**32 - 1 said "Internal error : SF_INFO struct incomplete"."""
    full = write(tmp_path / "full.mp3", tone(440, 2.0, 16000), 16000, format="MP3")
    cut = tmp_path / "cut.mp3"
    cut.write_bytes(full.read_bytes()[:40])
    wav = write(tmp_path / "full.wav", tone(440, 0.5, 16000), 16000, subtype="PCM_16").read_bytes()
    rate = wav.index(b"fmt ") + 12
    huge = tmp_path / "huge_rate.wav"
    huge.write_bytes(wav[:rate] + (2**32 - 1).to_bytes(4, "little") + wav[rate + 4:])
    for path in (cut, huge):
        for read in (decode, audio_info):
            with pytest.raises(UnreadableAudioError) as e:
                read(path)
            said = str(e.value)
            assert f"{path.name}: not a readable audio file (" in said and "header" in said, said
            assert "does not exist" not in said and "pipe" not in said and "SF_INFO" not in said, said


def test_too_long_is_decided_from_the_header(tmp_path, monkeypatch):
    path = write(tmp_path / "long.wav", tone(440, 3.0, 8000), 8000)

    def no_reading(*a, **k):
        raise AssertionError("the samples must not be read")

    monkeypatch.setattr(sf, "read", no_reading)
    monkeypatch.setattr(sf.SoundFile, "read", no_reading)
    with pytest.raises(TooLongAudioError, match="long.wav.*3.0 s"):
        decode(path, max_seconds=1.0)
    monkeypatch.undo()
    assert decode(path, max_seconds=1.0, duration=0.5).duration == pytest.approx(0.5)  # the part is short
    assert decode(path, max_seconds=None).duration == pytest.approx(3.0)


def test_nan_and_inf_are_zeroed_and_counted(tmp_path):
    x = tone(440, 0.5, 16000)
    x[[10, 20, 30]] = np.nan
    x[40] = np.inf
    x[50] = -np.inf
    path = write(tmp_path / "nan.wav", x, 16000, subtype="FLOAT")
    d = decode(path)
    assert d.nonfinite == 5
    assert np.isfinite(d.audio).all()
    assert (d.audio[[10, 20, 30, 40, 50]] == 0).all()
    np.testing.assert_array_equal(d.audio[:10], x[:10])
    assert np.isfinite(decode(path, sample_rate=8000).audio).all()


def test_non_utf8_file_name(tmp_path):
    name = os.fsdecode(b"caf\xe9 \xff\xfe r\xc3\xa9sum\xc3\xa9.wav")  # latin-1 bytes, invalid UTF-8
    path = tmp_path / name
    save_wav(path, tone(440, 0.25, 16000), 16000)
    assert path.exists()
    d = decode(path)
    assert d.duration == pytest.approx(0.25) and audio_info(path).frames == 4000
    with pytest.raises(UnreadableAudioError) as err:
        decode(tmp_path / ("missing " + name))
    str(err.value).encode("utf-8")  # the message must be printable


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(UnreadableAudioError, match="nothing.wav: file not found"):
        decode(tmp_path / "nothing.wav")
    (tmp_path / "folder.wav").mkdir()
    with pytest.raises(UnreadableAudioError, match="folder.wav: is a directory"):
        decode(tmp_path / "folder.wav")
    with pytest.raises(UnreadableAudioError):
        audio_info(tmp_path)


def test_permission_denied(tmp_path, monkeypatch):
    path = write(tmp_path / "locked.wav", tone(440, 0.1, 16000), 16000)
    if os.geteuid() == 0:  # root reads anything; simulate the denial
        def denied(*a, **k):
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(audio_path, "open", denied, raising=False)
    else:
        path.chmod(0)
    with pytest.raises(UnreadableAudioError, match="locked.wav: permission denied"):
        decode(path)


def test_all_errors_are_audio_errors():
    for cls in (UnreadableAudioError, EmptyAudioError, TruncatedAudioError, TooLongAudioError,
                NoAudioDeviceError):
        assert issubclass(cls, AudioError)
    assert {".wav", ".flac", ".ogg", ".mp3", ".aiff"} <= audio_path.SUPPORTED_EXTENSIONS


# ------------------------------------------------------------------------------------------- iter_blocks


def test_streamed_resampling_equals_whole_file(tmp_path):
    x = np.random.default_rng(2).normal(0, 0.1, (44100 * 2 + 77, 2)).astype(np.float32)
    path = write(tmp_path / "n.wav", x, 44100, subtype="FLOAT")
    whole = decode(path, sample_rate=16000).audio
    info = audio_path.audio_info(path)
    pieces = list(audio_path.stream_resampled(path, info, 16000, chunk_seconds=0.05))
    assert len(pieces) > 30  # really streamed in many pieces
    np.testing.assert_allclose(np.concatenate(pieces), whole, atol=1e-6)


def test_iter_blocks_sizes_overlap_and_padding(tmp_path, monkeypatch):
    x = np.random.default_rng(3).normal(0, 0.1, 22050 * 3 + 100).astype(np.float32)
    path = write(tmp_path / "n.wav", x, 22050, subtype="FLOAT")
    whole = decode(path, sample_rate=16000).audio  # 48073 samples

    reads: list[int] = []
    real_read = sf.SoundFile.read

    def spy(self, frames=-1, *a, **k):
        reads.append(frames)
        return real_read(self, frames, *a, **k)

    monkeypatch.setattr(sf.SoundFile, "read", spy)
    blocks = list(iter_blocks(path, 16000, block_seconds=1.0))
    assert all(0 < f <= 5 * 22050 + 441 for f in reads)  # never the whole file at once
    assert [len(b) for b in blocks] == [16000] * 4
    cat = np.concatenate(blocks)
    np.testing.assert_allclose(cat[: len(whole)], whole, atol=1e-6)
    assert not cat[len(whole):].any()  # zero padding

    short = list(iter_blocks(path, 16000, 1.0, pad_last=False))
    assert len(short[-1]) == len(whole) - 48000

    over = list(iter_blocks(path, 16000, block_seconds=1.0, overlap_seconds=0.5))
    assert len(over) == 6  # starts 0, .5, ..., 2.5 s; the last has 73 new samples
    for i, b in enumerate(over[:-1]):
        np.testing.assert_allclose(b, whole[i * 8000: i * 8000 + 16000], atol=1e-6)
    with pytest.raises(ValueError):
        next(iter_blocks(path, 16000, 1.0, overlap_seconds=1.0))


def test_iter_blocks_short_file_gives_one_padded_block(tmp_path):
    path = write(tmp_path / "s.wav", tone(440, 0.3, 16000), 16000)
    blocks = list(iter_blocks(path, 16000, 1.0, overlap_seconds=0.5))
    assert len(blocks) == 1 and len(blocks[0]) == 16000
    assert not blocks[0][4800:].any() and blocks[0][:4800].any()


# -------------------------------------------------------------------------------------------------- save


def test_save_wav_pcm_float_and_atomic(tmp_path):
    path = tmp_path / "out.wav"
    x = np.array([0.0, 0.5, -0.5, 2.0, -3.0, np.nan], dtype=np.float32)
    save_wav(path, x, 8000)
    data, sr = sf.read(path, dtype="float32")
    assert sr == 8000 and sf.info(path).subtype == "PCM_16"
    np.testing.assert_allclose(data, [0, 0.5, -0.5, 1.0, -1.0, 0], atol=1 / 32768)

    save_wav(path, x[:5], 8000, subtype="FLOAT")  # overwrite in place
    data, _ = sf.read(path, dtype="float32")
    np.testing.assert_array_equal(data, x[:5])

    with pytest.raises(Exception):  # noqa: B017 - whatever libsndfile says; the old file must survive
        save_wav(path, x, 8000, subtype="NOT_A_SUBTYPE")
    np.testing.assert_array_equal(sf.read(path, dtype="float32")[0], x[:5])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.wav"]  # no temp files left


def test_write_audio_picks_the_format_from_the_extension(tmp_path):
    x = tone(440, 0.5, 16000)
    for name, fmt, subtype in (("a.wav", "WAV", "PCM_16"), ("a.flac", "FLAC", "PCM_16"), ("a.ogg", "OGG", "VORBIS"),
                               ("a.oga", "OGG", "VORBIS")):
        audio_path.write_audio(tmp_path / name, x, 16000)
        info = sf.info(tmp_path / name)
        assert (info.format, info.subtype, info.samplerate) == (fmt, subtype, 16000), name
        assert peak_hz(decode(tmp_path / name).audio, 16000) == pytest.approx(440, abs=3)
    audio_path.write_audio(tmp_path / "f.wav", np.stack([x, -x], axis=1), 16000, subtype="FLOAT")
    np.testing.assert_array_equal(sf.read(tmp_path / "f.wav", dtype="float32")[0][:, 1], -x)
    with pytest.raises(ValueError, match=r"cannot write \.mp4; use one of \.wav"):
        audio_path.write_audio(tmp_path / "a.mp4", x, 16000)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.flac", "a.oga", "a.ogg", "a.wav", "f.wav"]


def test_decode_raw_reads_headerless_gsm(tmp_path):
    path = tmp_path / "prompt.gsm"  # Asterisk's prompts: GSM 6.10 at 8 kHz, no header
    sf.write(path, tone(300, 1.0, 8000), 8000, format="RAW", subtype="GSM610")
    d = audio_path.decode_raw(path, 8000, "GSM610")
    assert d.sample_rate == 8000 and d.audio.ndim == 1 and abs(d.duration - 1.0) < 0.03
    assert peak_hz(d.audio, 8000) == pytest.approx(300, abs=10)
    with pytest.raises(UnreadableAudioError, match="not readable as raw NOT_A_SUBTYPE"):
        audio_path.decode_raw(path, 8000, "NOT_A_SUBTYPE")
    (tmp_path / "empty.gsm").write_bytes(b"")
    with pytest.raises(EmptyAudioError):
        audio_path.decode_raw(tmp_path / "empty.gsm", 8000, "GSM610")


# ---------------------------------------------------------------------------------------- one audio path

AUDIO_IMPORTERS_SCANNED = ("app", "core", "models", "training", "bench", "tools")


def soundfile_importers(root: Path) -> set[str]:
    """Files under `root`'s code folders that import soundfile, at any depth of the module (ast, not grep)."""
    found = set()
    for folder in AUDIO_IMPORTERS_SCANNED:
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    names = [node.module or ""]
                else:
                    continue
                if any(n.split(".")[0] == "soundfile" for n in names):
                    found.add(path.relative_to(root).as_posix())
    return found


def test_only_core_audio_imports_soundfile(tmp_path):
    root = Path(__file__).resolve().parents[1]
    assert soundfile_importers(root) == {"core/audio.py"}
    # the scan sees imports inside functions and `from soundfile import ...` as well
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "sneaky.py").write_text("def f():\n    from soundfile import read\n    return read\n")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "plain.py").write_text("import numpy, soundfile as sf\n")
    assert soundfile_importers(tmp_path) == {"bench/sneaky.py", "app/plain.py"}


@pytest.mark.parametrize("fmt, subtype, dtype, quantum", [("WAV", "PCM_16", "int16", 1),
                                                        ("FLAC", "PCM_24", "int32", 256),
                                                        ("WAV", "FLOAT", "float32", 1)])
def test_faded_blocks_written_through_frame_writer_read_back_faded_at_the_ends_only(tmp_path, fmt, subtype, dtype,
                                                                                   quantum):
    """A part written block by block (blocks smaller than the fades) with a linear fade in and an equal-power fade
    out: soundfile reads back the format, rate and channels, silence at both ends, the gains in the fades, and the
    samples between them unchanged."""
    sr, total, n_in, n_out = 44100, 20000, 3000, 5000
    path = tmp_path / f"faded.{fmt.lower()}"
    sf.write(tmp_path / "src.wav", tone(440, total / sr, sr, channels=2, amp=0.8), sr, subtype=subtype)
    src = sf.read(tmp_path / "src.wav", dtype=dtype)[0]  # (N, 2) in the type the part is read in
    with audio_path.frame_writer(path, sr, 2, fmt, subtype) as write:
        for first in range(0, total, 1024):
            block = src[first:first + 1024]
            rise = audio_path.apply_fades(block, first, total, n_in, 0, "linear", quantum=quantum)
            write(audio_path.apply_fades(rise, first, total, 0, n_out, "equal-power", quantum=quantum))
    info = sf.info(path)
    assert (info.format, info.subtype, info.samplerate, info.channels, info.frames) == (fmt, subtype, sr, 2, total)
    got = sf.read(path, dtype=dtype)[0]
    assert np.array_equal(got[n_in:-n_out], src[n_in:-n_out])  # the middle bit for bit
    assert np.all(got[0] == 0) and np.all(got[-1] == 0)
    k = np.arange(total)
    gains = np.clip(k / n_in, 0, 1) * np.sin(np.clip((total - 1 - k) / n_out, 0, 1) * np.pi / 2)
    step = 2.0 ** -15 if subtype == "PCM_16" else 2.0 ** -23
    scale = 1.0 if dtype == "float32" else float(np.iinfo(dtype).max) + 1
    assert np.abs(got / scale - src / scale * gains[:, None]).max() <= step


def test_fade_gains_leave_the_middle_alone_and_refuse_an_unknown_shape():
    assert audio_path.fade_gains(100, 50, 1000, 100, 100) is None  # a block between the fades: untouched
    g = audio_path.fade_gains(0, 1000, 1000, 100, 100)
    assert g[0] == 0 and g[50] == 0.5 and np.all(g[100:900] == 1) and g[-1] == 0
    assert audio_path.fade_gains(0, 10, 10, 400, 0)[-1] == pytest.approx(0.9)  # longer than the part: cut to it
    with pytest.raises(ValueError, match="fade shape"):
        audio_path.fade_gains(0, 10, 10, 5, 5, "cubic")


# ------------------------------------------------------------------------------------------- ring buffer


def test_ring_buffer_keeps_order_across_wrap_around():
    rb = RingBuffer(10)
    rb.write(np.arange(7))
    np.testing.assert_array_equal(rb.read(5), [0, 1, 2, 3, 4])
    rb.write(np.arange(7, 13))  # wraps
    assert len(rb) == 8
    np.testing.assert_array_equal(rb.read(), np.arange(5, 13))
    assert len(rb) == 0 and rb.read().shape == (0,) and rb.overflow == 0


def test_ring_buffer_overflow_drops_oldest():
    rb = RingBuffer(10)
    rb.write(np.arange(8))
    rb.write(np.arange(8, 13))
    assert rb.overflow == 3
    np.testing.assert_array_equal(rb.read(), np.arange(3, 13))
    rb.write(np.arange(4))
    rb.write(np.arange(100, 125))  # bigger than the buffer
    assert rb.overflow == 3 + 4 + 15
    np.testing.assert_array_equal(rb.read(), np.arange(115, 125))
    rb.write(np.ones(3))
    rb.clear()
    assert len(rb) == 0


def test_ring_buffer_channels():
    rb = RingBuffer(6, channels=2)
    block = np.arange(10, dtype=np.float32).reshape(5, 2)
    rb.write(block)
    rb.write(block[:3] + 100)
    out = rb.read()
    assert out.shape == (6, 2)
    np.testing.assert_array_equal(out, np.concatenate([block[2:], block[:3] + 100]))


def test_ring_buffer_concurrent_writer_and_reader():
    rb = RingBuffer(1000)
    total, block = 200_000, 64

    def writer() -> None:
        for start in range(0, total, block):
            rb.write(np.arange(start, min(start + block, total), dtype=np.float32))

    t = threading.Thread(target=writer)
    t.start()
    got = []
    while t.is_alive():
        got.append(rb.read(300))
    t.join()
    got.append(rb.read())
    seq = np.concatenate(got).astype(np.int64)
    assert len(seq) + rb.overflow == total
    assert seq[-1] == total - 1
    steps = np.diff(seq)
    assert (steps >= 1).all()  # order kept; gaps only where the writer overran the reader
    assert (steps - 1).sum() == rb.overflow - seq[0]


# --------------------------------------------------------------------------------------------- devices


def test_device_status_without_portaudio(monkeypatch):
    def missing():
        raise OSError("PortAudio library not found")

    monkeypatch.setattr(devices, "_import_sounddevice", missing)
    s = device_status()
    assert not s.input_ok and not s.output_ok
    assert "PortAudio not installed" in s.message and "libportaudio2" in s.message

    def no_module():
        raise ImportError("No module named 'sounddevice'")

    monkeypatch.setattr(devices, "_import_sounddevice", no_module)
    assert "no audio backend" in device_status().message


def fake_sounddevice(devices: list[dict], default_in: int | None, default_out: int | None) -> object:
    def query_devices(kind: str | None = None) -> object:
        if kind is None:
            return devices
        idx = default_in if kind == "input" else default_out
        if idx is None:
            raise sd.PortAudioError("Error querying device -1")
        return devices[idx]

    return SimpleNamespace(query_devices=query_devices)


def test_device_status_with_and_without_devices(monkeypatch):
    mic = {"name": "USB mic", "max_input_channels": 1, "max_output_channels": 0}
    spk = {"name": "Speakers", "max_input_channels": 0, "max_output_channels": 2}
    monkeypatch.setattr(devices, "_import_sounddevice", lambda: fake_sounddevice([mic, spk], 0, 1))
    s = device_status()
    assert s.input_ok and s.output_ok and s.inputs == ["USB mic"] and s.outputs == ["Speakers"]

    monkeypatch.setattr(devices, "_import_sounddevice", lambda: fake_sounddevice([spk], None, 0))
    s = device_status()
    assert not s.input_ok and s.output_ok and "no audio input device" in s.message
    assert s.unavailable() == s.recording_unavailable() == f"Recording unavailable: {s.message}"

    monkeypatch.setattr(devices, "_import_sounddevice", lambda: fake_sounddevice([mic], None, None))
    s = device_status()
    assert not s.input_ok and not s.output_ok and "no default audio input" in s.message
    assert s.output_message() == "no audio output device found"  # playback's reason, without the microphone's
    assert s.playback_unavailable() == "Playback unavailable: no audio output device found"
    assert s.unavailable() == f"Recording and playback unavailable: {s.message}"  # the tabs' device line

    def broken(kind=None):
        raise RuntimeError("PortAudio not initialized")

    monkeypatch.setattr(devices, "_import_sounddevice", lambda: SimpleNamespace(query_devices=broken))
    s = device_status()
    assert not s.input_ok and "audio backend error" in s.message
    assert s.output_message() == s.message  # nothing works: the whole reason is playback's too


def test_audio_devices_asks_portaudio_once_until_refresh(monkeypatch):
    mic = {"name": "USB mic", "max_input_channels": 1, "max_output_channels": 0}
    spk = {"name": "Speakers", "max_input_channels": 0, "max_output_channels": 2}
    plugged = [mic, spk]
    asked = []

    def query():
        asked.append(len(plugged))
        return fake_sounddevice(list(plugged), 0 if mic in plugged else None, plugged.index(spk))

    monkeypatch.setattr(devices, "_import_sounddevice", query)
    watched = devices.AudioDevices()
    assert asked == []  # nothing is asked before the first look
    first = watched.status
    calls = len(asked)
    assert first.input_ok and calls >= 1
    plugged.remove(mic)  # the microphone is unplugged: the cached status does not notice ...
    assert watched.status is first and len(asked) == calls
    fresh = watched.refresh()  # ... until refresh asks again
    assert not fresh.input_ok and len(asked) > calls and watched.status is fresh


def test_device_status_on_this_machine_never_raises():
    s = device_status()
    assert isinstance(s.message, str) and s.message
    assert s.input_ok == bool(s.inputs) or not s.input_ok


# ---------------------------------------------------------------------------------------------- recorder


class FakeStream:
    """Stands in for sounddevice.InputStream / OutputStream; the test drives the callback itself."""

    def __init__(self, samplerate, channels, blocksize, dtype, callback, device):
        self.samplerate, self.channels, self.blocksize = samplerate, channels, blocksize
        self.dtype, self.callback, self.device = dtype, callback, device
        self.active = False
        self.closed = False
        self.vanish_error: Exception | None = None  # stop/close raise this once the device is gone
        FakeStream.last = self

    def start(self) -> None:
        self.active = True

    def stop(self) -> None:
        if self.vanish_error:
            raise self.vanish_error
        self.active = False

    def close(self) -> None:
        if self.vanish_error:
            raise self.vanish_error
        self.closed = True

    def vanish(self) -> None:
        self.active = False
        self.vanish_error = sd.PortAudioError("Device unavailable", -9985)


def flags(**kw: bool) -> sd.CallbackFlags:
    f = sd.CallbackFlags()
    for k, v in kw.items():
        setattr(f, k, v)
    return f


def feed(stream: FakeStream, blocks: list[np.ndarray], overflow_at: frozenset[int] = frozenset()
         ) -> threading.Thread:
    """Simulate the microphone: call the stream's callback from another thread."""

    def run() -> None:
        for i, b in enumerate(blocks):
            indata = b.reshape(len(b), -1).copy()  # (frames, channels), like PortAudio
            stream.callback(indata, len(b), None, flags(input_overflow=i in overflow_at))
            time.sleep(0.0005)

    t = threading.Thread(target=run)
    t.start()
    return t


def test_recorder_drains_what_was_fed_and_counts_overflows():
    rec = Recorder(sample_rate=16000, block_size=160, capacity_seconds=1.0, stream_factory=FakeStream)
    rec.start()
    stream = FakeStream.last
    assert stream.active and (stream.samplerate, stream.blocksize, stream.dtype) == (16000, 160, "float32")
    fed = np.random.default_rng(4).uniform(-1, 1, 160 * 60).astype(np.float32)
    t = feed(stream, np.split(fed, 60), overflow_at=frozenset({5, 17, 40}))
    got = []
    while t.is_alive():
        got.append(rec.drain())
        time.sleep(0.002)
    t.join()
    got.append(rec.drain())
    np.testing.assert_array_equal(np.concatenate(got), fed)
    assert rec.overflows == 3 and rec.recording and rec.error == ""
    rec.stop()
    assert not rec.recording and stream.closed and not stream.active and rec.error == ""


def test_recorder_ring_buffer_drops_count_as_overflows():
    rec = Recorder(sample_rate=1000, block_size=100, capacity_seconds=0.5, stream_factory=FakeStream)
    rec.start()
    t = feed(FakeStream.last, [np.full(100, i, np.float32) for i in range(8)])  # 800 frames into 500
    t.join()
    out = rec.drain()
    assert len(out) == 500 and rec.overflows == 300
    np.testing.assert_array_equal(out[:100], np.full(100, 3))
    rec.stop()


def test_recorder_device_vanishes_mid_recording():
    rec = Recorder(block_size=160, stream_factory=FakeStream)
    rec.start()
    stream = FakeStream.last
    fed = np.random.default_rng(5).uniform(-1, 1, 1600).astype(np.float32)
    t = feed(stream, np.split(fed, 10))
    t.join()
    stream.vanish()  # PortAudio stops the stream; stop/close now raise PortAudioError
    assert not rec.recording  # noticed, stream shut down, no exception
    assert "stopped unexpectedly" in rec.error
    np.testing.assert_array_equal(rec.drain(), fed)  # what arrived before is kept
    rec.stop()  # idempotent


def test_recorder_callback_failure_and_stop_error_are_reported_not_raised():
    rec = Recorder(block_size=160, stream_factory=FakeStream)
    rec.start()
    stream = FakeStream.last

    def bad_call() -> None:
        stream.callback(None, 160, None, flags())  # the device went away mid-callback

    t = threading.Thread(target=bad_call)
    t.start()
    t.join()
    assert rec.drain().shape == (0,)
    assert not rec.recording and rec.error.startswith("The input device failed")

    rec.start()  # a new recording clears the error
    assert rec.error == "" and rec.recording
    FakeStream.last.vanish()
    FakeStream.last.active = True
    rec.stop()  # PortAudioError from stop/close: reported
    assert "input device is no longer available" in rec.error and not rec.recording


def test_recorder_notices_a_stalled_device():
    rec = Recorder(block_size=160, stream_factory=FakeStream, stall_seconds=0.1, first_audio_seconds=0.1)
    rec.start()
    assert rec.recording
    time.sleep(0.15)
    assert not rec.recording and "delivered no audio in 0.1 s" in rec.error

    rec = Recorder(block_size=160, stream_factory=FakeStream, stall_seconds=0.1)  # a slow first audio is fine
    rec.start()
    time.sleep(0.15)
    assert rec.recording
    FakeStream.last.callback(np.zeros((160, 1), np.float32), 160, None, flags())
    time.sleep(0.15)  # but once audio came, a pause of stall_seconds means the device is gone
    assert not rec.recording and "no audio from the input device for 0.1 s" in rec.error


def test_recorder_without_device_raises_typed_error(monkeypatch):
    none = devices.DeviceStatus(False, False, "no microphone here")
    monkeypatch.setattr(devices, "device_status", lambda: none)
    rec = Recorder()
    with pytest.raises(NoAudioDeviceError, match="no microphone here"):
        rec.start()
    assert not rec.recording

    def refuses(**kw):
        raise sd.PortAudioError("Invalid sample rate", -9997)

    with pytest.raises(NoAudioDeviceError, match="cannot play or record at this sample rate"):
        Recorder(stream_factory=refuses).start()


# ------------------------------------------------------------------------------------------------ player


def pull(stream: FakeStream, blocks: int, channels: int = 1) -> np.ndarray:
    """Simulate PortAudio asking for `blocks` output blocks, from another thread."""
    out = np.full((blocks, stream.blocksize, channels), 9.0, dtype=np.float32)

    def run() -> None:
        for i in range(blocks):
            stream.callback(out[i], stream.blocksize, None, flags())

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out.reshape(-1, channels)


def test_player_plays_from_start_position_and_finishes():
    player = Player(stream_factory=FakeStream, block_size=100)
    x = np.arange(1000, dtype=np.float32) / 1000
    player.play(x, 1000, start_seconds=0.25)
    stream = FakeStream.last
    assert stream.channels == 1 and stream.samplerate == 1000 and player.playing
    assert player.duration == 1.0 and player.position == 0.25
    out = pull(stream, 5)[:, 0]
    np.testing.assert_array_equal(out, x[250:750])
    assert player.position == 0.75 and player.playing

    out = pull(stream, 5)[:, 0]  # 250 frames left, then zeros
    np.testing.assert_array_equal(out[:250], x[750:])
    assert not out[250:].any()
    assert player.position == 1.0
    assert not player.playing and stream.closed  # finished: stream closed


def test_player_seek_and_stereo():
    player = Player(stream_factory=FakeStream, block_size=64)
    x = np.stack([np.arange(2000), -np.arange(2000)], axis=1).astype(np.float32)
    player.play(x, 2000)
    stream = FakeStream.last
    assert stream.channels == 2
    np.testing.assert_array_equal(pull(stream, 1, 2), x[:64])
    player.seek(0.5)
    assert player.position == 0.5
    np.testing.assert_array_equal(pull(stream, 2, 2), x[1000:1128])
    player.seek(-3)
    np.testing.assert_array_equal(pull(stream, 1, 2), x[:64])
    player.seek(99)
    assert not pull(stream, 1, 2).any() and not player.playing
    player.stop()


def test_player_stop_device_loss_and_no_device(monkeypatch):
    player = Player(stream_factory=FakeStream)
    player.play(np.zeros(48000, np.float32), 48000)
    stream = FakeStream.last
    player.stop()
    assert stream.closed and not player.playing

    player.play(np.zeros(48000, np.float32), 48000)
    FakeStream.last.vanish()
    assert not player.playing and "output device stopped playing" in player.error

    monkeypatch.setattr(devices, "device_status", lambda: devices.DeviceStatus(False, False, "no speakers"))
    with pytest.raises(NoAudioDeviceError, match="no speakers"):
        Player().play(np.zeros(10, np.float32), 8000)


def test_default_streams_come_from_sounddevice(monkeypatch):
    """Without a stream_factory the services use sounddevice's streams; playback ends with CallbackStop."""
    ok = devices.DeviceStatus(True, True, "fine")
    fake_sd = SimpleNamespace(InputStream=FakeStream, OutputStream=FakeStream, CallbackStop=sd.CallbackStop)
    monkeypatch.setattr(devices, "device_status", lambda: ok)
    monkeypatch.setattr(devices, "_import_sounddevice", lambda: fake_sd)
    rec = Recorder(sample_rate=8000, block_size=80, device="USB mic")
    rec.start()
    assert FakeStream.last.device == "USB mic" and rec.recording
    rec.stop()

    player = Player(block_size=4)
    player.play(np.ones(6, np.float32), 8000)
    out = np.zeros((4, 1), np.float32)
    FakeStream.last.callback(out, 4, None, flags())
    FakeStream.last.callback(out, 4, None, flags())
    np.testing.assert_array_equal(out[:, 0], [1, 1, 0, 0])
    assert player.playing  # until the device buffer has played out: silence for TAIL_SECONDS, then stop
    silent_calls = 0
    with pytest.raises(sd.CallbackStop):  # tells PortAudio to play out and stop
        for _ in range(10_000):
            FakeStream.last.callback(out, 4, None, flags())
            silent_calls += 1
    assert 2 + 4 * (silent_calls + 1) == pytest.approx(devices.TAIL_SECONDS * 8000, abs=4)
    FakeStream.last.active = False  # PortAudio stopped the stream
    assert not player.playing


# ------------------------------------------------------------------------- resampler accuracy (libsoxr)

ODD_RATIOS = [(11127, 16000), (22254, 32000), (8000, 44100), (48000, 11025), (44100, 16000), (11025, 22254)]


def sines(freqs: np.ndarray, phases: np.ndarray, n: int, sr: int) -> np.ndarray:
    """Sum of unit sines sampled at `sr`: the exact band-limited signal, at any rate."""
    t = np.arange(n)[:, None] / sr  # (n, 1)
    return np.sin(2 * np.pi * freqs[None, :] * t + phases[None, :]).sum(axis=1) / len(freqs)  # (n,)


@pytest.mark.parametrize("orig, new", ODD_RATIOS)
def test_resampler_matches_the_band_limited_signal_at_odd_ratios(orig, new):
    """Reference: the same sines evaluated analytically at the new rate (an ideal resampler's output).

    Tolerance: in the passband (up to 80% of the lower Nyquist), max abs error < 1e-3 of full scale and
    SNR > 60 dB, away from the first/last 50 ms (the filter's start-up and tail). torchaudio's default
    resampler fails it (max error 0.058 for 48,000 -> 11,025 Hz).
    """
    rng = np.random.default_rng(orig + new)
    top = 0.4 * min(orig, new)  # 80% of the lower Nyquist
    n = round(1.5 * orig)
    cases = {"sine": (np.array([0.37 * top + 11.0]), np.array([0.3])),
             "top sine": (np.array([top]), np.array([1.1])),
             "noise": (rng.uniform(20.0, top, 64), rng.uniform(0, 2 * np.pi, 64))}  # band-limited noise
    for what, (freqs, phases) in cases.items():
        x = sines(freqs, phases, n, orig).astype(np.float32)
        y = audio_path.resample(x, orig, new)
        assert y.dtype == np.float32 and len(y) == round(n * new / orig)
        ref = sines(freqs, phases, len(y), new)
        edge = round(0.05 * new)
        err = y[edge:-edge] - ref[edge:-edge]
        snr = 10 * np.log10(np.mean(ref[edge:-edge] ** 2) / np.mean(err**2))
        assert np.abs(err).max() < 1e-3, (what, np.abs(err).max())
        assert snr > 60, (what, snr)


def test_resampler_removes_what_the_new_rate_cannot_hold():
    x = tone(7000, 1.0, 22254)  # above the 4 kHz Nyquist of 8 kHz: must vanish, not alias to 1 kHz
    y = audio_path.resample(x, 22254, 8000)
    assert np.abs(y[400:-400]).max() < 1e-3


@pytest.mark.parametrize("orig, new, chunk", [(11127, 16000, 0.013), (22254, 32000, 0.11), (48000, 11025, 0.07),
                                              (8000, 44100, 0.031)])
def test_streamed_resampling_is_continuous_at_odd_ratios(tmp_path, orig, new, chunk):
    x = np.random.default_rng(5).normal(0, 0.1, orig * 2 + 333).astype(np.float32)
    path = write(tmp_path / f"n{orig}.wav", x, orig, subtype="FLOAT")
    whole = decode(path, sample_rate=new).audio
    pieces = list(audio_path.stream_resampled(path, audio_info(path), new, chunk_seconds=chunk))
    assert len(pieces) > 10
    np.testing.assert_allclose(np.concatenate(pieces), whole, atol=1e-6)  # no seam at any chunk boundary
    blocks = list(iter_blocks(path, new, block_seconds=0.25, overlap_seconds=0.1))
    hop = round(0.25 * new) - round(0.1 * new)
    for i, b in enumerate(blocks[:-1]):
        np.testing.assert_allclose(b, whole[i * hop: i * hop + len(b)], atol=1e-6)


def test_odd_rate_decode_goes_through_soxr(tmp_path):
    """The reason for libsoxr: 11,127 and 22,254 Hz took 4-9 s per file with torchaudio's exact-ratio kernel. The
    decode is soxr's resampling of the file (the time it takes: `python -m bench indexing`, before_after)."""
    for sr in (11127, 22254):
        p = write(tmp_path / f"r{sr}.wav", tone(440, 5.0, sr), sr)
        got = decode(p, sample_rate=32000)
        assert got.duration == pytest.approx(5.0, abs=1e-3)
        np.testing.assert_allclose(got.audio, audio_path.resample(decode(p).audio, sr, 32000), atol=1e-4)


# -------------------------------------------------------------------------------- non-regular files


def test_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / "x.wav"
    os.mkfifo(fifo)
    result: dict[str, BaseException | None] = {}

    def attempt() -> None:
        for fn in (decode, audio_info, lambda p: next(iter_blocks(p, 16000, 1.0))):
            try:
                fn(fifo)
                result[str(fn)] = None
            except BaseException as e:  # noqa: BLE001 - recorded and checked below
                result[str(fn)] = e

    t = threading.Thread(target=attempt, daemon=True)
    t.start()
    t.join(timeout=10)
    if t.is_alive():  # opened the FIFO and waits for a writer: unblock it, then fail
        with open(fifo, "wb"):
            pass
        t.join(timeout=10)
        pytest.fail("reading a FIFO blocked")
    assert len(result) == 3
    for e in result.values():
        assert isinstance(e, UnreadableAudioError) and "x.wav: is a FIFO (named pipe)" in str(e), e


def test_devices_are_refused():
    with pytest.raises(UnreadableAudioError, match="null: is a character device"):
        decode("/dev/null")


def test_probe_on_a_fifo_reports_and_does_not_hang(tmp_path):
    import subprocess
    import sys

    fifo = tmp_path / "x.wav"
    os.mkfifo(fifo)
    good = write(tmp_path / "ok.wav", tone(440, 0.5, 11127), 11127)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    try:
        proc = subprocess.run([sys.executable, "-m", "app.cli", "probe", "--json", str(fifo), str(good)],
                              capture_output=True, text=True, timeout=120, env=env)
    except subprocess.TimeoutExpired:
        with open(fifo, "wb"):  # let the hung child finish
            pass
        pytest.fail("earshot probe hung on a FIFO")
    assert proc.returncode == 1, proc.stderr
    rows = {Path(r["path"]).name: r for r in json.loads(proc.stdout)}
    assert rows["x.wav"]["ok"] is False and rows["x.wav"]["type"] == "UnreadableAudioError"
    assert "FIFO" in rows["x.wav"]["error"]
    assert rows["ok.wav"]["ok"] is True and rows["ok.wav"]["source_rate"] == 11127


# ------------------------------------------------------------------------------------------------ trim


def test_trim_finds_the_word_and_refuses_silence():
    sr = 16000
    x = 1e-4 * np.random.default_rng(0).standard_normal(sr).astype(np.float32)  # a -80 dBFS floor
    x[6000:9000] += tone(300, 3000 / sr, sr)
    start, end = audio_path.trim_span(x, audio_path.TrimConfig(margin_frames=0), sr)
    assert 6000 - 400 <= start <= 6000 and 9000 <= end <= 9000 + 400
    assert audio_path.trim_silence(np.zeros(sr, dtype=np.float32)) is None
    assert audio_path.trim_silence(np.zeros(0, dtype=np.float32)) is None
    loose = audio_path.trim_silence(x, audio_path.TrimConfig(threshold_db=90))
    assert len(loose) > 15800 and len(audio_path.trim_silence(x)) < 5000  # the threshold decides


def test_trim_config_from_checkpoint_metadata():
    T = audio_path.TrimConfig
    assert T.from_dict({"threshold_db": 20, "margin_frames": 5.0}) == T(threshold_db=20.0, margin_frames=5)
    assert T.from_dict(None) == T() and T.from_dict("junk") == T()
    assert T.from_dict({"threshold_db": "loud", "unknown": 1, "min_frames": True}) == T()
    assert T.from_dict(T(silence_dbfs=-50).to_dict()) == T(silence_dbfs=-50)
