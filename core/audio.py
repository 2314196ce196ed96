"""The one audio path of Earshot (no Qt): decode, mono, resample, sanitize, trim, stream in blocks.

Every reader and writer of audio goes through here (indexer, services, `earshot probe`, trainers, corpus
builders, benchmarks), so a file is read the same way by training and by the app; it is the only module that
imports soundfile (tests/test_audio.py checks). Decoding is libsndfile; every problem is a typed `AudioError`
(a ValueError) that names the file. Resampling is libsoxr "HQ" (`resample`), streamed for long files; a speech
checkpoint's recorded resampler is part of its preprocessing (`resampler_from_training`). `trim_silence` is
the one energy trim (`TrimConfig`). `SUPPORTED_EXTENSIONS` is the one list of audio file extensions. The
decisions and why: docs/runtime.md.
"""

from __future__ import annotations

import contextlib
import errno
import io
import math
import os
import shutil
import stat
import struct
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
import soxr

from core.config import setting
from core.display import display_name
from core.files import atomic_path

PathLike = str | os.PathLike

# what libsndfile 1.2 reads (Opus and Vorbis live in Ogg; MP3 since 1.1)
SUPPORTED_EXTENSIONS: set[str] = {
    ".wav", ".wave", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".aif", ".aiff", ".aifc",
    ".au", ".snd", ".caf", ".w64", ".rf64", ".voc", ".sd2", ".nist", ".sph", ".htk", ".paf",
}

# libsndfile estimates the length of some compressed streams (MP3 without a Xing header), so a small
# shortfall there is not truncation
_ESTIMATED_LENGTH_FORMATS = {"MP3"}
RESAMPLE_QUALITY = "HQ"  # libsoxr's high quality: 20-bit precision, ~91% passband
SOXR = "soxr"  # the resampler of everything new
LEGACY_RESAMPLER = "torchaudio-sinc"  # what speech checkpoints without a recorded resampler were trained on
RESAMPLERS = (SOXR, LEGACY_RESAMPLER)
LEGACY_MAX_REDUCED_RATE = 1000  # torchaudio's kernel grows with the reduced ratio; above this, soxr


# ----------------------------------------------------------------------------------------------- errors


class AudioError(ValueError):
    """Base of every audio problem this module reports (a bad value: callers skip and report it)."""


class UnreadableAudioError(AudioError):
    """Missing, a directory or other non-regular file, permission denied, not audio, unsupported or corrupt."""


class EmptyAudioError(AudioError):
    """A 0-byte file or a header with zero frames."""


class TruncatedAudioError(AudioError):
    """The header promises more audio than the file holds."""


class TooLongAudioError(AudioError):
    """Longer than the caller's limit (decided from the header, before reading)."""


def _sf_path(path: PathLike) -> str | bytes:
    # soundfile encodes str names with the file-system encoding, which fails on surrogate-escaped
    # (non-UTF-8) names; bytes go through untouched
    return os.fspath(path) if sys.platform == "win32" else os.fsencode(path)


# libsndfile reasons that mislead once the file is known to be there and regular (`_check_file`): the MP3 reader
# answers a file with no audio frame in it as if it were missing; an impossible rate, channel count or length
# in a header comes out as an internal error
_SF_REASONS = {
    "File does not exist or is not a regular file (possibly a pipe?)": "no audio found: a damaged or cut header",
    "Internal error : SF_INFO struct incomplete": "damaged header: impossible sample rate, channels or length",
}


def _sf_reason(e: Exception) -> str:
    msg = str(e)
    # "Error opening b'/x/y.wav': Format not recognised." -> "Format not recognised"
    reason = msg.split(": ", 1)[-1].strip().rstrip(".") if ": " in msg else msg
    return _SF_REASONS.get(reason, reason)


# --------------------------------------------------------------------------------------- sample helpers


def sanitize(x: np.ndarray) -> int:
    """Replace NaN/inf by 0 in place; return how many there were."""
    bad = ~np.isfinite(x)
    count = int(bad.sum())
    if count:
        x[bad] = 0.0
    return count


def to_mono(audio: np.ndarray) -> np.ndarray:
    """(N,) or (N, C) -> (N,) float32 (the mean of the channels)."""
    x = np.asarray(audio, dtype=np.float32)
    if x.ndim == 2:
        x = x.mean(axis=1, dtype=np.float32)
    if x.ndim != 1:
        raise ValueError(f"expected mono (N,) or multi-channel (N, C) audio, got shape {x.shape}")
    return x


def resample(x: np.ndarray, orig: int, new: int, method: str = SOXR) -> np.ndarray:
    """Band-limited resampling along the first axis of (N,) or (N, C) -> float32.

    method "soxr" (libsoxr HQ) is the default for everything. "torchaudio-sinc" is the legacy resampler
    of speech checkpoints trained before soxr: `torchaudio.functional.resample` with default arguments,
    exactly as those trainers called it, so such a model sees the features it was trained on. It is used
    only where the reduced ratio is cheap (orig/g and new/g <= 1000, g = gcd(orig, new), e.g. 8 -> 16 kHz
    or 44.1 -> 16 kHz); otherwise soxr is used, because torchaudio's kernel for ratios such as
    11,127 -> 16,000 Hz takes tens of seconds per clip.
    """
    if method not in RESAMPLERS:
        raise ValueError(f"unknown resampler {method!r}; expected one of {', '.join(RESAMPLERS)}")
    if orig <= 0 or new <= 0:
        raise ValueError(f"sample rates must be positive, got {orig} -> {new}")
    x = np.ascontiguousarray(x, dtype=np.float32)
    if orig == new or len(x) == 0:
        return x
    if method == LEGACY_RESAMPLER and _legacy_is_cheap(orig, new):
        return _torchaudio_resample(x, orig, new)
    return np.ascontiguousarray(soxr.resample(x, orig, new, quality=RESAMPLE_QUALITY), dtype=np.float32)


def varispeed(x: np.ndarray, ratio: float) -> np.ndarray:
    """(N,) or (N, C) as a tape played `ratio` times as fast at the same rate (speed and pitch together: 2 is an
    octave up in half the time): about N / ratio frames, band-limited (libsoxr HQ) -> float32; `x` itself at 1."""
    if not (math.isfinite(ratio) and ratio > 0):
        raise ValueError(f"a speed ratio must be a positive number, got {ratio}")
    x = np.ascontiguousarray(x, dtype=np.float32)
    if ratio == 1.0 or len(x) == 0:
        return x
    return np.ascontiguousarray(soxr.resample(x, float(ratio), 1.0, quality=RESAMPLE_QUALITY), dtype=np.float32)


def _legacy_is_cheap(orig: int, new: int) -> bool:
    g = math.gcd(orig, new)
    return max(orig // g, new // g) <= LEGACY_MAX_REDUCED_RATE


def _torchaudio_resample(x: np.ndarray, orig: int, new: int) -> np.ndarray:
    """(N,) or (N, C) float32 through torchaudio's sinc resampler (default arguments), along time."""
    import torch  # lazy: the rest of this module has no torch dependency
    import torchaudio.functional

    t = torch.from_numpy(x.T.copy() if x.ndim == 2 else x)  # (N,) or (C, N): torchaudio works on the last axis
    with torch.no_grad():
        y = torchaudio.functional.resample(t, orig, new).numpy()
    return np.ascontiguousarray(y.T if x.ndim == 2 else y, dtype=np.float32)


def resampler_from_training(training: Any) -> str:  # noqa: ANN401 - checkpoint JSON
    """The resampler a speech checkpoint was trained with (`training["preprocessing"]["resampler"]`).

    Missing means a checkpoint written before the field existed, trained on torchaudio's resampler.
    """
    pre = training.get("preprocessing") if isinstance(training, dict) else None
    method = pre.get("resampler") if isinstance(pre, dict) else None
    if method is None:
        return LEGACY_RESAMPLER
    if method not in RESAMPLERS:
        raise ValueError(f"the checkpoint asks for an unknown resampler {method!r}; "
                         f"this version knows {', '.join(RESAMPLERS)}")
    return str(method)


# ---------------------------------------------------------------------------------------------- decoding


@dataclass
class AudioInfo:
    duration: float  # seconds
    sample_rate: int
    channels: int
    frames: int
    format: str  # libsndfile major format, e.g. "WAV", "FLAC", "MP3"
    subtype: str = ""  # e.g. "PCM_16", "FLOAT", "VORBIS"


@dataclass
class Decoded:
    audio: np.ndarray  # float32, (N,) mono or (N, C)
    sample_rate: int  # rate of `audio`
    source_rate: int  # rate of the file
    channels: int  # channels in the file
    duration: float  # seconds of `audio`
    nonfinite: int = 0  # NaN/inf samples replaced by 0


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def _check_file(path: PathLike) -> int:
    """Fail early with a precise reason for what libsndfile would call 'format not recognised'.

    Only `stat` is used before the file is known to be regular: opening a FIFO would block.
    """
    name = display_name(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UnreadableAudioError(f"{name}: file not found") from None
    except OSError as e:
        raise UnreadableAudioError(f"{name}: cannot access file ({e.strerror or e})") from None
    if stat.S_ISDIR(st.st_mode):
        raise UnreadableAudioError(f"{name}: is a directory, not an audio file")
    if not stat.S_ISREG(st.st_mode):
        raise UnreadableAudioError(f"{name}: is {_file_kind(st.st_mode)}, not a regular audio file; not read")
    try:
        with open(path, "rb") as fh:
            fh.read(1)
    except PermissionError:
        raise UnreadableAudioError(f"{name}: permission denied") from None
    except OSError as e:
        raise UnreadableAudioError(f"{name}: cannot read file ({e.strerror or e})") from None
    if st.st_size == 0:
        raise EmptyAudioError(f"{name}: file is empty (0 bytes)")
    return st.st_size


def _wav_data_shortfall(path: PathLike, file_size: int) -> tuple[int, int] | None:
    """(declared, present) bytes of a RIFF/WAVE data chunk when the file holds less than declared.

    libsndfile silently shortens a truncated WAV to the bytes present, so compare the header ourselves.
    """
    with open(path, "rb") as fh:
        head = fh.read(12)
        if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
            return None
        pos = 12
        while pos + 8 <= file_size:
            fh.seek(pos)
            chunk = fh.read(8)
            if len(chunk) < 8:
                return None
            cid, size = chunk[:4], struct.unpack("<I", chunk[4:])[0]
            if cid == b"data":
                present = file_size - (pos + 8)
                # 0 and 0xFFFFFFFF are what streaming writers leave when they cannot seek back
                if size in (0, 0xFFFFFFFF) or present >= size:
                    return None
                return size, present
            pos += 8 + size + (size & 1)  # chunks are padded to even sizes
    return None


def audio_info(path: PathLike) -> AudioInfo:
    """Duration, rate, channels, frames and format from the header only."""
    _check_file(path)
    return _info(path)


def _info(path: PathLike) -> AudioInfo:
    try:
        i = sf.info(_sf_path(path))
    except (sf.LibsndfileError, RuntimeError) as e:
        reason = _sf_reason(e)
        raise UnreadableAudioError(f"{display_name(path)}: not a readable audio file ({reason})") from None
    frames = int(i.frames)
    return AudioInfo(
        duration=frames / i.samplerate if i.samplerate else 0.0,
        sample_rate=int(i.samplerate),
        channels=int(i.channels),
        frames=frames,
        format=str(i.format),
        subtype=str(i.subtype),
    )


def _checked_info(path: PathLike) -> AudioInfo:
    """Header checks shared by decode and iter_blocks: readable, not empty, not truncated (WAV)."""
    size = _check_file(path)
    info = _info(path)
    name = display_name(path)
    if info.frames <= 0 or info.sample_rate <= 0:
        raise EmptyAudioError(f"{name}: no audio frames ({info.format} header only)")
    short = _wav_data_shortfall(path, size) if info.format in ("WAV", "WAVEX") else None
    if short is not None:
        declared, present = short
        raise TruncatedAudioError(
            f"{name}: truncated WAV: header declares {declared} data bytes, file holds {present} "
            f"({present / declared:.0%})"
        )
    return info


def length_is_estimate(info: AudioInfo) -> bool:
    """The header's frame count is libsndfile's estimate (an MP3 without a Xing/Info header: from its size), not
    a count: `stream_blocks` decodes such a file to its real end."""
    return info.format in _ESTIMATED_LENGTH_FORMATS


def _check_read_length(name: str, info: AudioInfo, expected: int, got: int) -> None:
    tolerance = 0
    if info.format in _ESTIMATED_LENGTH_FORMATS:
        tolerance = max(int(0.01 * expected), int(0.05 * info.sample_rate))
    if got < expected - tolerance:
        raise TruncatedAudioError(
            f"{name}: truncated or corrupt: header promises {expected} frames, only {got} could be read"
        )


def _finish(data: np.ndarray, sr: int, channels: int, sample_rate: int | None, mono: bool,
            keep_nonfinite: bool = False, resampler: str = SOXR) -> Decoded:
    """(N, C) float32 as read -> sanitized, optionally mono and resampled `Decoded`."""
    nonfinite = int((~np.isfinite(data)).sum()) if keep_nonfinite else sanitize(data)
    audio = to_mono(data) if mono else data
    out_rate = sample_rate or sr
    audio = resample(audio, sr, out_rate, resampler)
    return Decoded(audio=audio, sample_rate=out_rate, source_rate=sr, channels=channels,
                   duration=len(audio) / out_rate, nonfinite=nonfinite)


def decode(
    path: PathLike,
    sample_rate: int | None = None,
    mono: bool = True,
    max_seconds: float | None = 3 * 3600,
    start: float = 0.0,
    duration: float | None = None,
    keep_nonfinite: bool = False,
    resampler: str = SOXR,
) -> Decoded:
    """Read a file (or the [start, start + duration) part of it) as float32, optionally mono + resampled.

    NaN/inf samples become 0 and are counted, unless `keep_nonfinite` (a caller that reports them itself;
    only without resampling, which would smear them). `resampler`: see `resample` (a speech model's own).
    Raises UnreadableAudioError, EmptyAudioError, TruncatedAudioError or TooLongAudioError.
    """
    name = display_name(path)
    info = _checked_info(path)
    sr = info.sample_rate
    first = min(max(0, round(start * sr)), info.frames)
    want = info.frames - first if duration is None else min(max(0, round(duration * sr)), info.frames - first)
    if max_seconds is not None and want / sr > max_seconds:
        raise TooLongAudioError(
            f"{name}: {want / sr:.1f} s of audio is longer than the {max_seconds:g} s limit"
        )
    data = _read_span(path, info, first, want, "float32")  # (N, C)
    return _finish(data, sr, info.channels, sample_rate, mono, keep_nonfinite, resampler)


def _read_span(path: PathLike, info: AudioInfo, first: int, count: int, dtype: str) -> np.ndarray:
    """Frames [first, first + count) of a checked file (`_checked_info`), (N, C) as `dtype`; raises like
    `decode` when they cannot all be read."""
    name = display_name(path)
    try:
        with sf.SoundFile(_sf_path(path)) as f:
            if first:
                f.seek(first)
            data = f.read(frames=count, dtype=dtype, always_2d=True)  # (N, C)
    except (sf.LibsndfileError, RuntimeError) as e:
        raise UnreadableAudioError(f"{name}: corrupt or unreadable audio data ({_sf_reason(e)})") from None
    _check_read_length(name, info, count, len(data))
    return data


# the sample type that holds a subtype's values exactly (libsndfile scales PCM to the full int range)
EXACT_DTYPE = {"PCM_S8": "int16", "PCM_U8": "int16", "PCM_16": "int16", "PCM_24": "int32", "PCM_32": "int32",
               "DOUBLE": "float64"}
# frames per block where a file is streamed (exports, probe, the tag writer's checks): 64k frames of 8 channels
# in float64 are 4 MB, whatever the length of the file or part
BLOCK_FRAMES = 1 << 16


def frame_span(path: PathLike, start_s: float, end_s: float) -> tuple[AudioInfo, int, int]:
    """(header, first frame, frame count) of the part from `start_s` to `end_s` (seconds, cut to the file) of a
    checked file; raises like `decode`."""
    info = _checked_info(path)
    first = min(round(max(0.0, start_s) * info.sample_rate), info.frames)
    count = min(max(0, round(end_s * info.sample_rate) - first), info.frames - first)
    return info, first, count


def frame_blocks(path: PathLike, first: int = 0, count: int | None = None, dtype: str = "float32",
                 block_frames: int = BLOCK_FRAMES) -> Iterator[np.ndarray]:
    """Frames [first, first + count) (count None: to the end the header says) as stored, in consecutive (n, C)
    blocks of `dtype`, read one block at a time: memory stays near one block whatever the file's length. Raises
    like `decode`; a file that ends early is a TruncatedAudioError once its last block is read."""
    info = _checked_info(path)
    name = display_name(path)
    count = info.frames - first if count is None else count
    got = 0
    try:
        with sf.SoundFile(_sf_path(path)) as f:
            if first:
                f.seek(first)
            while got < count:
                block = f.read(frames=min(block_frames, count - got), dtype=dtype, always_2d=True)  # (n, C)
                if len(block) == 0:
                    break
                got += len(block)
                yield block
    except (sf.LibsndfileError, RuntimeError) as e:
        raise UnreadableAudioError(f"{name}: corrupt or unreadable audio data ({_sf_reason(e)})") from None
    _check_read_length(name, info, count, got)


def stream_blocks(path: PathLike, dtype: str = "float32", block_frames: int = BLOCK_FRAMES) -> Iterator[np.ndarray]:
    """Every frame of the file's stream to its real end, in (n, C) blocks of `dtype` (full ones but the last). Where
    the header's length is an estimate (an MP3 without a Xing/Info header: libsndfile's estimate from the size of
    the file, which a longer tag changes), libsndfile stops at the estimate on a seekable file, so the file is fed
    to it through a pipe; it reads a pipe to the end."""
    info = _checked_info(path)
    if info.format not in _ESTIMATED_LENGTH_FORMATS:
        yield from frame_blocks(path, dtype=dtype, block_frames=block_frames)
        return
    name = display_name(path)
    with _piped(path) as fd:
        try:
            f = sf.SoundFile(fd, closefd=False)
        except (sf.LibsndfileError, RuntimeError):
            f = None  # no stream start found in a pipe (bytes before the first frame): read as the header says
        if f is None or f.seekable():  # seekable: the length came from a Xing/Info header, exact
            if f is not None:
                f.close()
            yield from frame_blocks(path, dtype=dtype, block_frames=block_frames)
            return
        try:
            with f:
                yield from _pipe_blocks(f, dtype, block_frames)
        except (sf.LibsndfileError, RuntimeError) as e:
            raise UnreadableAudioError(f"{name}: corrupt or unreadable audio data ({_sf_reason(e)})") from None


def _pipe_blocks(f: sf.SoundFile, dtype: str, block_frames: int) -> Iterator[np.ndarray]:
    """Full (block_frames, C) blocks of a stream read from a pipe, then the rest."""
    while True:
        block = np.empty((block_frames, f.channels), dtype)
        n = 0
        while n < block_frames and (got := len(f.read(out=block[n:]))):  # a pipe may read short
            n += got
        if n:
            yield block[:n]
        if n < block_frames:
            return


@contextlib.contextmanager
def _piped(path: PathLike) -> Iterator[int]:
    """The read end of a pipe that a thread fills with the file's bytes; closed (the thread ended) on exit."""
    r, w = os.pipe()

    def feed() -> None:
        with contextlib.suppress(OSError), os.fdopen(w, "wb") as dst:  # OSError: the reader stopped early (EPIPE)
            with open(path, "rb") as src:
                shutil.copyfileobj(src, dst, 1 << 16)

    thread = threading.Thread(target=feed, name="audio-pipe", daemon=True)
    thread.start()
    try:
        yield r
    finally:
        os.close(r)  # a writer blocked on a full pipe gets EPIPE and ends
        thread.join()


def can_write(fmt: str, subtype: str) -> bool:
    """libsndfile writes this format (e.g. "WAV") with this subtype (e.g. "PCM_24")."""
    return bool(sf.check_format(fmt, subtype))


@contextlib.contextmanager
def frame_writer(path: PathLike, sample_rate: int, channels: int, fmt: str, subtype: str
                 ) -> Iterator[Callable[[np.ndarray], None]]:
    """A function that appends (n, C) blocks to a new file at `path`, as they are (integers as PCM of their width,
    floats scaled to [-1, 1]): a part is written block by block, never held whole. OSError (EIO, libsndfile's
    reason) when libsndfile fails: it says only "System error." for a full disk."""
    def failed(e: sf.LibsndfileError) -> OSError:
        return OSError(errno.EIO, e.error_string, os.fsdecode(path))

    try:
        f = sf.SoundFile(_sf_path(path), "w", sample_rate, channels, subtype, format=fmt)
    except sf.LibsndfileError as e:
        raise failed(e) from None

    def write(block: np.ndarray) -> None:
        try:
            f.write(block)
        except sf.LibsndfileError as e:
            raise failed(e) from None

    try:
        yield write
    finally:
        try:
            f.close()
        except sf.LibsndfileError as e:
            raise failed(e) from None


FADE_SHAPES = ("linear", "equal-power")  # a gain rising as t, or as sin(t·π/2) (constant power across a crossfade)


def fade_gains(first: int, n: int, total: int, fade_in: int, fade_out: int, shape: str = "linear"
               ) -> np.ndarray | None:
    """(n,) float64 gains of frames [first, first + n) of a part `total` frames long that fades in over its first
    `fade_in` frames (the very first at 0) and out over its last `fade_out` (the very last at 0); None where
    none of these frames is in a fade (a long part's middle blocks are left as they are)."""
    if shape not in FADE_SHAPES:
        raise ValueError(f"unknown fade shape {shape!r}; expected one of {', '.join(FADE_SHAPES)}")
    fade_in, fade_out = min(max(fade_in, 0), total), min(max(fade_out, 0), total)
    if first >= fade_in and first + n <= total - fade_out:
        return None
    k = np.arange(first, first + n, dtype=np.float64)
    rise = np.ones(n) if fade_in == 0 else np.clip(k / fade_in, 0.0, 1.0)
    fall = np.ones(n) if fade_out == 0 else np.clip((total - 1 - k) / fade_out, 0.0, 1.0)
    if shape == "equal-power":
        rise, fall = np.sin(rise * np.pi / 2), np.sin(fall * np.pi / 2)
    return rise * fall


def apply_fades(block: np.ndarray, first: int, total: int, fade_in: int, fade_out: int, shape: str = "linear",
                quantum: int = 1) -> np.ndarray:
    """An (n, C) block of a part (frames [first, first + n) of `total`) with `fade_gains` applied, in its own
    sample type: integers rounded back to multiples of `quantum` (256 for 24-bit samples read as int32, whose low
    byte is 0), so the frames outside the fades stay bit for bit; the block itself where none is faded."""
    gains = fade_gains(first, len(block), total, fade_in, fade_out, shape)
    if gains is None:
        return block
    faded = block * gains[:, None] if block.ndim == 2 else block * gains
    if block.dtype.kind in "iu":
        return (np.rint(faded / quantum) * quantum).astype(block.dtype)
    return faded.astype(block.dtype)


def decode_bytes(data: bytes, sample_rate: int | None = None, mono: bool = True, name: str = "audio data",
                 resampler: str = SOXR) -> Decoded:
    """`decode` for the bytes of an audio file held in memory (a cache, a subprocess's output)."""
    if not data:
        raise EmptyAudioError(f"{name}: empty (0 bytes)")
    try:
        with sf.SoundFile(io.BytesIO(data)) as f:
            sr, channels = int(f.samplerate), int(f.channels)
            audio = f.read(dtype="float32", always_2d=True)  # (N, C)
    except (sf.LibsndfileError, RuntimeError) as e:
        raise UnreadableAudioError(f"{name}: not a readable audio file ({_sf_reason(e)})") from None
    if len(audio) == 0 or sr <= 0:
        raise EmptyAudioError(f"{name}: no audio frames")
    return _finish(audio, sr, channels, sample_rate, mono, resampler=resampler)


def decode_raw(path: PathLike, sample_rate: int, subtype: str, channels: int = 1) -> Decoded:
    """`decode` (mono, at the file's rate) for a headerless file whose format the caller knows, e.g.
    Asterisk's .gsm prompts: `decode_raw(path, 8000, "GSM610")`."""
    name = display_name(path)
    _check_file(path)
    try:
        data, _ = sf.read(_sf_path(path), format="RAW", subtype=subtype, samplerate=sample_rate,
                          channels=channels, dtype="float32", always_2d=True)  # (N, C)
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as e:
        raise UnreadableAudioError(f"{name}: not readable as raw {subtype} ({_sf_reason(e)})") from None
    if len(data) == 0:
        raise EmptyAudioError(f"{name}: no audio frames")
    return _finish(data, sample_rate, channels, None, mono=True)


# --------------------------------------------------------------------------------------------- streaming


def _read_mono_chunks(path: PathLike, info: AudioInfo, chunk_frames: int) -> Iterator[np.ndarray]:
    """Consecutive mono float32 chunks of the source; checks the total against the header at the end."""
    name = display_name(path)
    got = 0
    try:
        with sf.SoundFile(_sf_path(path)) as f:
            while True:
                data = f.read(frames=chunk_frames, dtype="float32", always_2d=True)  # (n, C)
                if len(data) == 0:
                    break
                got += len(data)
                sanitize(data)
                yield to_mono(data)
    except (sf.LibsndfileError, RuntimeError) as e:
        raise UnreadableAudioError(f"{name}: corrupt or unreadable audio data ({_sf_reason(e)})") from None
    _check_read_length(name, info, info.frames, got)


def stream_resampled(path: PathLike, info: AudioInfo, sample_rate: int, chunk_seconds: float = 5.0
                     ) -> Iterator[np.ndarray]:
    """The whole file as consecutive mono pieces at `sample_rate`; together equal to `decode`'s output.

    libsoxr's stream keeps its filter state between chunks, so block boundaries leave no trace.
    """
    src = info.sample_rate
    chunks = _read_mono_chunks(path, info, max(1, round(chunk_seconds * src)))
    if src == sample_rate:
        yield from chunks
        return
    stream = soxr.ResampleStream(src, sample_rate, 1, dtype="float32", quality=RESAMPLE_QUALITY)
    for piece in chunks:
        out = stream.resample_chunk(piece)
        if len(out):
            yield out
    yield stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True)  # the filter's tail


@dataclass
class Measured:
    """What `decode` says of a file, without its samples (`measure`)."""

    duration: float  # seconds, at `sample_rate`
    sample_rate: int
    source_rate: int
    channels: int


def measure(path: PathLike, sample_rate: int | None = None) -> Measured:
    """Decode the whole file (mono, resampled to `sample_rate` when given) as `decode` does, but block by block,
    keeping only its length: a 6-hour take costs one block of memory, not 12 GB (`earshot probe`). Raises like
    `decode`, with no length limit."""
    info = _checked_info(path)
    rate = sample_rate or info.sample_rate
    n = sum(len(piece) for piece in stream_resampled(path, info, rate))
    return Measured(n / rate, rate, info.sample_rate, info.channels)


def iter_blocks(
    path: PathLike,
    sample_rate: int,
    block_seconds: float,
    overlap_seconds: float = 0.0,
    pad_last: bool = True,
) -> Iterator[np.ndarray]:
    """Fixed-size mono float32 blocks (block_seconds at sample_rate) of a file too long to load whole.

    Consecutive blocks start block_seconds - overlap_seconds apart. The last block is zero-padded to full
    size (pad_last) or left short; a tail that only repeats overlap already yielded is not yielded again.
    Concatenating non-overlapping blocks gives what `decode(path, sample_rate)` returns, plus padding.
    """
    size = round(block_seconds * sample_rate)
    hop = size - round(overlap_seconds * sample_rate)
    if size <= 0 or hop <= 0:
        raise ValueError(f"need block_seconds > overlap_seconds >= 0, got {block_seconds}, {overlap_seconds}")
    info = _checked_info(path)
    buf = np.zeros(0, dtype=np.float32)
    seen = 0  # samples at the front of buf that were already yielded
    for piece in stream_resampled(path, info, sample_rate):
        buf = np.concatenate([buf, piece])
        while len(buf) >= size:
            yield buf[:size].copy()
            buf, seen = buf[hop:], size - hop
    if len(buf) > seen:
        yield np.pad(buf, (0, size - len(buf))) if pad_last else buf.copy()


# what `write_audio` writes for each file extension: (libsndfile format, default subtype)
WRITE_FORMATS: dict[str, tuple[str, str]] = {
    ".wav": ("WAV", "PCM_16"), ".flac": ("FLAC", "PCM_16"), ".ogg": ("OGG", "VORBIS"), ".oga": ("OGG", "VORBIS"),
}


def write_audio(path: PathLike, audio: np.ndarray, sample_rate: int, subtype: str | None = None) -> Path:
    """Write (N,) or (N, C) audio atomically (temp file in the same folder + os.replace), in the format its
    extension names (`WRITE_FORMATS`: .wav, .flac, .ogg/.oga) with that format's default subtype unless given.

    PCM subtypes clip to [-1, 1]; "FLOAT" and the compressed ones keep the values. NaN/inf are written as 0.
    """
    path = Path(path)
    known = WRITE_FORMATS.get(path.suffix.lower())
    if known is None:
        raise ValueError(f"{display_name(path)}: cannot write {path.suffix or 'files without an extension'}; "
                         f"use one of {', '.join(WRITE_FORMATS)}")
    return _write(path, audio, sample_rate, known[0], subtype or known[1])


def save_wav(path: PathLike, audio: np.ndarray, sample_rate: int, subtype: str = "PCM_16") -> Path:
    """`write_audio` as WAV whatever the extension; subtype "PCM_16" clips to [-1, 1], "FLOAT" keeps values."""
    return _write(Path(path), audio, sample_rate, "WAV", subtype)


def _write(path: Path, audio: np.ndarray, sample_rate: int, format: str, subtype: str) -> Path:
    x = np.array(audio, dtype=np.float32)  # a copy we may modify
    sanitize(x)
    if subtype.startswith("PCM"):
        np.clip(x, -1.0, 1.0, out=x)
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:  # a handle: soundfile wants names as UTF-8
        sf.write(fh, x, sample_rate, subtype=subtype, format=format)
    return path


# ------------------------------------------------------------------------------------------------- trim

TRIM_WINDOW_S = 0.025  # energy window (400 samples at 16 kHz)
TRIM_HOP_S = 0.010  # hop between windows (160 samples at 16 kHz)


@dataclass
class TrimConfig:
    """Energy-based trimming of leading and trailing silence (25 ms windows, 10 ms hop).

    The words trainer stores these in its checkpoint (`training["preprocessing"]["trim"]`); the Words tab reads
    them back, so a word is cut the same way in training and in the app.
    """

    threshold_db: float = setting(35.0, low=0.0, high=120.0,
                                  help="windows quieter than the loudest one by more than this (dB) are silence")
    silence_dbfs: float = setting(-60.0, low=-200.0, high=0.0,
                                  help="a recording whose loudest window is below this (dBFS) is silent")
    margin_frames: int = setting(3, low=0, high=100, help="windows kept on each side of the speech")
    min_frames: int = setting(10, low=1, high=1000, help="never trim below this many windows")

    @classmethod
    def from_dict(cls, values: Any) -> TrimConfig:  # noqa: ANN401 - JSON from a checkpoint
        """Settings stored in a checkpoint; missing, unknown or malformed entries fall back to the defaults."""
        if not isinstance(values, dict):
            return cls()
        known = {f.name: f.type for f in fields(cls)}
        kept: dict[str, Any] = {}
        for key, value in values.items():
            if key in known and isinstance(value, int | float) and not isinstance(value, bool):
                kept[key] = int(value) if known[key] == "int" else float(value)
        return cls(**kept)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _frame_sizes(sample_rate: int) -> tuple[int, int]:
    return max(1, round(TRIM_WINDOW_S * sample_rate)), max(1, round(TRIM_HOP_S * sample_rate))


def frame_energy_db(wave: np.ndarray, sample_rate: int = 16000) -> np.ndarray:
    """RMS level in dBFS of each 25 ms window (10 ms hop), window t starting at sample t * hop."""
    win, hop = _frame_sizes(sample_rate)
    if len(wave) < win:
        wave = np.pad(wave, (0, win - len(wave)))
    frames = np.lib.stride_tricks.sliding_window_view(wave, win)[::hop]  # (T, win)
    rms = np.sqrt(np.mean(frames.astype(np.float64) ** 2, axis=1))
    return 20 * np.log10(np.maximum(rms, 1e-10))


def trim_span(wave: np.ndarray, trim: TrimConfig | None = None, sample_rate: int = 16000
              ) -> tuple[int, int] | None:
    """[start, end) samples of the speech in `wave` (end may pass its length); None if it is all silence."""
    trim = trim or TrimConfig()
    if len(wave) == 0:
        return None
    win, hop = _frame_sizes(sample_rate)
    db = frame_energy_db(wave, sample_rate)  # (T,)
    if db.max() < trim.silence_dbfs:
        return None
    loud = np.flatnonzero(db >= db.max() - trim.threshold_db)
    first, last = max(0, loud[0] - trim.margin_frames), min(len(db) - 1, loud[-1] + trim.margin_frames)
    short = trim.min_frames - (last - first + 1)
    if short > 0:  # widen around the speech to keep at least min_frames
        first = max(0, first - short // 2 - 1)
        last = min(len(db) - 1, first + trim.min_frames - 1)
    return first * hop, last * hop + win


def trim_silence(wave: np.ndarray, trim: TrimConfig | None = None, sample_rate: int = 16000
                 ) -> np.ndarray | None:
    """Cut leading/trailing windows quieter than the loudest by `threshold_db`; None if it is all silence.

    The result is at least one window long (zero-padded): MFCC's reflect padding needs a full window.
    """
    span = trim_span(wave, trim, sample_rate)
    if span is None:
        return None
    win, _ = _frame_sizes(sample_rate)
    out = wave[span[0]: span[1]]
    return np.pad(out, (0, max(0, win - len(out))))
