"""Audio I/O with no Qt: decode files, stream long files in blocks, record, play.

Design (Friture): the PortAudio callback only copies into a ring buffer and counts status flags; the
consumer (a GUI timer, a worker) drains it. Xruns are counted, not ignored. "No audio device" is a normal
state reported by `device_status()`, never a crash. Every decoding problem is a typed `AudioError` whose
message names the file and says what is wrong.

sounddevice is imported lazily (PortAudio may be missing) and torch only when resampling is needed, so
importing this module is cheap.
"""

from __future__ import annotations

import contextlib
import math
import os
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

PathLike = str | os.PathLike

# what libsndfile 1.2 reads (Opus and Vorbis live in Ogg; MP3 since 1.1)
SUPPORTED_EXTENSIONS: set[str] = {
    ".wav", ".wave", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".aif", ".aiff", ".aifc",
    ".au", ".snd", ".caf", ".w64", ".rf64", ".voc", ".sd2", ".nist", ".sph", ".htk", ".paf",
}

# libsndfile estimates the length of some compressed streams (MP3 without a Xing header), so a small
# shortfall there is not truncation
_ESTIMATED_LENGTH_FORMATS = {"MP3"}


# ----------------------------------------------------------------------------------------------- errors


class AudioError(Exception):
    """Base of every audio problem this module reports."""


class UnreadableAudioError(AudioError):
    """Missing, a directory, permission denied, not audio, unsupported format or corrupt data."""


class EmptyAudioError(AudioError):
    """A 0-byte file or a header with zero frames."""


class TruncatedAudioError(AudioError):
    """The header promises more audio than the file holds."""


class TooLongAudioError(AudioError):
    """Longer than the caller's limit (decided from the header, before reading)."""


class NoAudioDeviceError(AudioError):
    """No usable input/output device (or no PortAudio); the message says which and why."""


def display_name(path: PathLike) -> str:
    """A printable file name even when the name is not valid UTF-8 (undecodable bytes become U+FFFD)."""
    return os.fsencode(path).decode("utf-8", "replace")


def _sf_path(path: PathLike) -> str | bytes:
    # soundfile encodes str names with the file-system encoding, which fails on surrogate-escaped
    # (non-UTF-8) names; bytes go through untouched
    return os.fspath(path) if sys.platform == "win32" else os.fsencode(path)


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


def _check_file(path: PathLike) -> int:
    """Fail early with a precise reason for what libsndfile would call 'format not recognised'."""
    name = display_name(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UnreadableAudioError(f"{name}: file not found") from None
    except OSError as e:
        raise UnreadableAudioError(f"{name}: cannot access file ({e.strerror or e})") from None
    if os.path.isdir(path):
        raise UnreadableAudioError(f"{name}: is a directory, not an audio file")
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


def _sf_reason(e: Exception) -> str:
    msg = str(e)
    # "Error opening b'/x/y.wav': Format not recognised." -> "Format not recognised"
    return msg.split(": ", 1)[-1].strip().rstrip(".") if ": " in msg else msg


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


def _check_read_length(name: str, info: AudioInfo, expected: int, got: int) -> None:
    tolerance = 0
    if info.format in _ESTIMATED_LENGTH_FORMATS:
        tolerance = max(int(0.01 * expected), int(0.05 * info.sample_rate))
    if got < expected - tolerance:
        raise TruncatedAudioError(
            f"{name}: truncated or corrupt: header promises {expected} frames, only {got} could be read"
        )


def _sanitize(x: np.ndarray) -> int:
    """Replace NaN/inf by 0 in place; return how many there were."""
    bad = ~np.isfinite(x)
    count = int(bad.sum())
    if count:
        x[bad] = 0.0
    return count


def _resample(x: np.ndarray, orig: int, new: int) -> np.ndarray:
    """Band-limited sinc resampling (torchaudio) along the first axis of (N,) or (N, C)."""
    if orig == new:
        return x
    import torch
    import torchaudio.functional as AF

    t = torch.from_numpy(np.ascontiguousarray(x.T if x.ndim == 2 else x))  # (C, N) or (N,)
    y = AF.resample(t, orig, new)
    y = y.numpy()
    return np.ascontiguousarray(y.T if x.ndim == 2 else y, dtype=np.float32)


def decode(
    path: PathLike,
    sample_rate: int | None = None,
    mono: bool = True,
    max_seconds: float | None = 3 * 3600,
    start: float = 0.0,
    duration: float | None = None,
) -> Decoded:
    """Read a file (or the [start, start + duration) part of it) as float32, optionally mono + resampled.

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
    try:
        with sf.SoundFile(_sf_path(path)) as f:
            if first:
                f.seek(first)
            data = f.read(frames=want, dtype="float32", always_2d=True)  # (N, C)
    except (sf.LibsndfileError, RuntimeError) as e:
        raise UnreadableAudioError(f"{name}: corrupt or unreadable audio data ({_sf_reason(e)})") from None
    _check_read_length(name, info, want, len(data))
    nonfinite = _sanitize(data)
    audio = data.mean(axis=1, dtype=np.float32) if mono else data
    if sample_rate is not None and sample_rate != sr:
        audio = _resample(audio, sr, sample_rate)
    out_rate = sample_rate or sr
    if mono and audio.ndim != 1:
        audio = audio.reshape(-1)
    return Decoded(
        audio=np.ascontiguousarray(audio, dtype=np.float32),
        sample_rate=out_rate,
        source_rate=sr,
        channels=info.channels,
        duration=len(audio) / out_rate,
        nonfinite=nonfinite,
    )


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
                _sanitize(data)
                yield data.mean(axis=1, dtype=np.float32)
    except (sf.LibsndfileError, RuntimeError) as e:
        raise UnreadableAudioError(f"{name}: corrupt or unreadable audio data ({_sf_reason(e)})") from None
    _check_read_length(name, info, info.frames, got)


def _stream_resampled(path: PathLike, info: AudioInfo, sample_rate: int, chunk_seconds: float = 5.0
                      ) -> Iterator[np.ndarray]:
    """Yield the whole file as consecutive mono pieces at `sample_rate`, equal to resampling it at once.

    Each piece is resampled with `pad` source frames of context on both sides. Piece starts and the pad are
    multiples of u = src / gcd(src, dst) frames, which map to exactly v = dst / gcd output samples, so the
    output grid of every piece lines up with the grid of the whole-file resampling.
    """
    src = info.sample_rate
    if src == sample_rate:
        yield from _read_mono_chunks(path, info, max(1, round(chunk_seconds * src)))
        return
    g = math.gcd(src, sample_rate)
    u, v = src // g, sample_rate // g
    pad = u * math.ceil(256 / u)  # > torchaudio's sinc half-width (6 zero crossings) at any ratio
    chunk = u * max(1, math.ceil(chunk_seconds * src / u))
    reader = _read_mono_chunks(path, info, chunk)
    buf = np.zeros(0, dtype=np.float32)  # source frames [buf_start, buf_start + len(buf))
    buf_start, pos, eof = 0, 0, False  # pos: first source frame not yet output (multiple of u)
    while True:
        while not eof and buf_start + len(buf) < pos + chunk + pad:
            piece = next(reader, None)
            if piece is None:
                eof = True
            else:
                buf = np.concatenate([buf, piece])
        end = buf_start + len(buf)
        if end <= pos:
            return
        final = eof and end - pos <= chunk
        left = min(pad, pos)  # a multiple of u
        lo = pos - left - buf_start
        hi = len(buf) if final else min(len(buf), pos + chunk + pad - buf_start)
        y = _resample(buf[lo:hi], src, sample_rate)
        skip = left // u * v
        yield y[skip:] if final else y[skip: skip + chunk // u * v]
        if final:
            return
        pos += chunk
        keep_from = max(0, pos - pad - buf_start)
        buf, buf_start = buf[keep_from:], buf_start + keep_from


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
    for piece in _stream_resampled(path, info, sample_rate):
        buf = np.concatenate([buf, piece])
        while len(buf) >= size:
            yield buf[:size].copy()
            buf, seen = buf[hop:], size - hop
    if len(buf) > seen:
        yield np.pad(buf, (0, size - len(buf))) if pad_last else buf.copy()


def save_wav(path: PathLike, audio: np.ndarray, sample_rate: int, subtype: str = "PCM_16") -> Path:
    """Write (N,) or (N, C) audio as WAV atomically (temp file in the same folder + os.replace).

    subtype "PCM_16" clips to [-1, 1]; "FLOAT" keeps the values. NaN/inf are written as 0.
    """
    path = Path(path)
    x = np.array(audio, dtype=np.float32)  # a copy we may modify
    _sanitize(x)
    if subtype.startswith("PCM"):
        np.clip(x, -1.0, 1.0, out=x)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            sf.write(fh, x, sample_rate, subtype=subtype, format="WAV")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


# ------------------------------------------------------------------------------------------- ring buffer


class RingBuffer:
    """Single-producer/single-consumer float32 ring buffer of `capacity` frames.

    `write` is called from the audio callback: it only copies; when full, the oldest frames are dropped and
    counted in `overflow`. A tiny lock keeps (start, length) consistent between the two threads.
    """

    def __init__(self, capacity: int, channels: int = 1) -> None:
        if capacity <= 0 or channels <= 0:
            raise ValueError(f"capacity and channels must be positive, got {capacity}, {channels}")
        self.capacity = capacity
        self.channels = channels
        self._data = np.zeros((capacity, channels), dtype=np.float32)  # (capacity, C)
        self._start = 0  # index of the oldest frame
        self._len = 0
        self._overflow = 0  # frames dropped because the reader was too slow
        self._lock = threading.Lock()

    def write(self, block: np.ndarray) -> None:
        x = np.asarray(block, dtype=np.float32).reshape(-1, self.channels)  # (n, C)
        n = len(x)
        with self._lock:
            if n >= self.capacity:  # only the newest `capacity` frames survive
                self._overflow += self._len + n - self.capacity
                self._data[:] = x[n - self.capacity:]
                self._start, self._len = 0, self.capacity
                return
            drop = max(0, self._len + n - self.capacity)
            if drop:
                self._overflow += drop
                self._start = (self._start + drop) % self.capacity
                self._len -= drop
            end = (self._start + self._len) % self.capacity
            first = min(n, self.capacity - end)
            self._data[end:end + first] = x[:first]
            self._data[:n - first] = x[first:]
            self._len += n

    def read(self, max_frames: int | None = None) -> np.ndarray:
        """Remove and return up to max_frames (all by default) oldest frames: (n,) mono or (n, C)."""
        with self._lock:
            n = self._len if max_frames is None else max(0, min(max_frames, self._len))
            idx = (self._start + np.arange(n)) % self.capacity
            out = self._data[idx]  # fancy indexing copies
            self._start = (self._start + n) % self.capacity
            self._len -= n
        return out[:, 0] if self.channels == 1 else out

    def clear(self) -> None:
        with self._lock:
            self._start = self._len = 0

    @property
    def overflow(self) -> int:
        """Frames dropped so far because the buffer was full."""
        return self._overflow

    def __len__(self) -> int:
        return self._len


# ----------------------------------------------------------------------------------------------- devices


@dataclass
class DeviceStatus:
    input_ok: bool
    output_ok: bool
    message: str
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)


def _import_sounddevice() -> Any:  # noqa: ANN401 - the module
    import sounddevice

    return sounddevice


def device_status() -> DeviceStatus:
    """What audio input/output is available. Never raises: problems become a disabled status + message."""
    try:
        sd = _import_sounddevice()
    except OSError as e:
        return DeviceStatus(False, False, f"PortAudio not installed: apt-get install libportaudio2 ({e})")
    except Exception as e:  # ImportError and anything odd at import time
        return DeviceStatus(False, False, f"no audio backend: sounddevice unavailable ({e})")
    try:
        devices = list(sd.query_devices())
        inputs = [str(d["name"]) for d in devices if d.get("max_input_channels", 0) > 0]
        outputs = [str(d["name"]) for d in devices if d.get("max_output_channels", 0) > 0]
        default_in, default_out = _default_devices(sd)
    except Exception as e:
        return DeviceStatus(False, False, f"audio backend error: {e}")
    input_ok = bool(inputs) and default_in is not None
    output_ok = bool(outputs) and default_out is not None
    problems = []
    if not inputs:
        problems.append("no audio input device (microphone) found")
    elif default_in is None:
        problems.append("no default audio input device")
    if not outputs:
        problems.append("no audio output device found")
    elif default_out is None:
        problems.append("no default audio output device")
    if problems:
        message = "; ".join(problems)
    else:
        message = f"input: {default_in}; output: {default_out}"
    return DeviceStatus(input_ok, output_ok, message, inputs, outputs)


def _default_devices(sd: Any) -> tuple[str | None, str | None]:  # noqa: ANN401
    names: list[str | None] = []
    for kind in ("input", "output"):
        try:
            names.append(str(sd.query_devices(kind=kind)["name"]))
        except Exception:  # PortAudioError / ValueError when there is no default device
            names.append(None)
    return names[0], names[1]


class AudioDevices:
    """Caches `device_status()`; call `refresh()` after the user plugs in a device."""

    def __init__(self) -> None:
        self._status: DeviceStatus | None = None

    @property
    def status(self) -> DeviceStatus:
        if self._status is None:
            self._status = device_status()
        return self._status

    def refresh(self) -> DeviceStatus:
        self._status = None
        return self.status


def _flag(status: object, name: str) -> bool:
    return bool(getattr(status, name, False))


def _close_stream(stream: Any) -> str:  # noqa: ANN401
    """Stop and close a stream; a device that vanished may make both raise: report, don't propagate."""
    problems = []
    for method in ("stop", "close"):
        try:
            getattr(stream, method)()
        except Exception as e:
            problems.append(f"{method}: {e}")
    return "; ".join(problems)


# ------------------------------------------------------------------------------------------------ record


class Recorder:
    """Microphone -> RingBuffer. The consumer calls `drain()` on a timer (~30 Hz).

    Failures (device vanished, PortAudio error, stream stopped delivering audio) end the recording and set
    `error`; they never raise into the caller, except `start()` without a usable device.
    """

    def __init__(
        self,
        sample_rate: int = 16000,
        channels: int = 1,
        block_size: int = 512,
        capacity_seconds: float = 30.0,
        device: int | str | None = None,
        stream_factory: Callable[..., Any] | None = None,
        stall_seconds: float = 2.0,
    ) -> None:
        self.sample_rate = sample_rate
        self.channels = channels
        self.block_size = block_size
        self.device = device
        self.stall_seconds = stall_seconds  # no callback for this long while recording = device gone
        self.buffer = RingBuffer(max(block_size, round(capacity_seconds * sample_rate)), channels)
        self._factory = stream_factory
        self._stream: Any = None
        self._xruns = 0  # input_overflow statuses reported by PortAudio
        self._error = ""
        self._failed = ""  # set by the callback thread, acted on by the consumer
        self._last_callback = 0.0

    # -- called on the audio thread: copy and count, nothing else
    def _callback(self, indata: np.ndarray, frames: int, time_info: object, status: object) -> None:
        if self._failed:
            return
        try:
            if _flag(status, "input_overflow"):
                self._xruns += 1
            self.buffer.write(indata[:frames])
            self._last_callback = time.monotonic()
        except Exception as e:  # never raise into PortAudio's thread
            self._failed = f"audio input failed: {e}"

    def start(self) -> None:
        if self._stream is not None:
            return
        factory = self._factory
        if factory is None:
            status = device_status()
            if not status.input_ok:
                raise NoAudioDeviceError(status.message)
            factory = _import_sounddevice().InputStream
        self.buffer.clear()
        self._error = self._failed = ""
        try:
            stream = factory(
                samplerate=self.sample_rate,
                channels=self.channels,
                blocksize=self.block_size,
                dtype="float32",
                callback=self._callback,
                device=self.device,
            )
        except Exception as e:
            raise NoAudioDeviceError(f"cannot open audio input: {e}") from None
        self._last_callback = time.monotonic()
        self._stream = stream
        try:
            stream.start()
        except Exception as e:
            self._stream = None
            _close_stream(stream)
            raise NoAudioDeviceError(f"cannot start audio input: {e}") from None

    def stop(self) -> None:
        """Stop and close the stream; what was recorded stays in the buffer for `drain()`."""
        stream, self._stream = self._stream, None
        if stream is None:
            return
        problem = _close_stream(stream)
        if problem and not self._error:
            self._error = f"audio input closed with an error ({problem})"

    def check(self) -> bool:
        """End the recording if the callback failed, the stream died or stopped delivering; True if alive."""
        stream = self._stream
        if stream is None:
            return False
        reason = self._failed
        if not reason and not getattr(stream, "active", True):
            reason = "audio input stopped unexpectedly (device disconnected?)"
        if not reason and time.monotonic() - self._last_callback > self.stall_seconds:
            reason = f"no audio from the input device for {self.stall_seconds:g} s (device disconnected?)"
        if reason:
            self.stop()
            self._error = reason
            return False
        return True

    def drain(self) -> np.ndarray:
        """Everything recorded since the last drain: (n,) mono or (n, C) float32."""
        self.check()
        return self.buffer.read()

    @property
    def recording(self) -> bool:
        return self.check()

    @property
    def overflows(self) -> int:
        """PortAudio input overflows (xruns) plus frames the ring buffer had to drop."""
        return self._xruns + self.buffer.overflow

    @property
    def error(self) -> str:
        """Last problem, '' if none."""
        return self._error


# -------------------------------------------------------------------------------------------------- play


class Player:
    """Plays one array through an OutputStream whose callback copies the next block (zeros after the end)."""

    def __init__(self, stream_factory: Callable[..., Any] | None = None, block_size: int = 1024,
                 device: int | str | None = None) -> None:
        self._factory = stream_factory
        self.block_size = block_size
        self.device = device
        self._stream: Any = None
        self._audio = np.zeros((0, 1), dtype=np.float32)  # (N, C)
        self._rate = 1
        self._pos = 0  # next frame to play
        self._done = True
        self._underflows = 0
        self._error = ""
        self._lock = threading.Lock()
        self._stop_exc: type[BaseException] | None = None

    # -- called on the audio thread: copy the next block, nothing else
    def _callback(self, outdata: np.ndarray, frames: int, time_info: object, status: object) -> None:
        if _flag(status, "output_underflow"):
            self._underflows += 1
        with self._lock:
            n = max(0, min(frames, len(self._audio) - self._pos))
            outdata[:n] = self._audio[self._pos:self._pos + n]
            outdata[n:] = 0
            self._pos += n
            done = self._done = self._pos >= len(self._audio)
        if done and self._stop_exc is not None:
            raise self._stop_exc  # sounddevice.CallbackStop: PortAudio plays out the buffer and stops

    def play(self, audio: np.ndarray, sample_rate: int, start_seconds: float = 0.0) -> None:
        self.stop()
        x = np.asarray(audio, dtype=np.float32)
        x = x.reshape(-1, 1) if x.ndim == 1 else x  # (N, C)
        factory = self._factory
        self._stop_exc = None
        if factory is None:
            status = device_status()
            if not status.output_ok:
                raise NoAudioDeviceError(status.message)
            sd = _import_sounddevice()
            factory, self._stop_exc = sd.OutputStream, sd.CallbackStop
        with self._lock:
            self._audio, self._rate = np.ascontiguousarray(x), sample_rate
            self._pos = min(len(x), max(0, round(start_seconds * sample_rate)))
            self._done = self._pos >= len(x)
        self._error = ""
        try:
            stream = factory(
                samplerate=sample_rate,
                channels=x.shape[1],
                blocksize=self.block_size,
                dtype="float32",
                callback=self._callback,
                device=self.device,
            )
        except Exception as e:
            raise NoAudioDeviceError(f"cannot open audio output: {e}") from None
        self._stream = stream
        try:
            stream.start()
        except Exception as e:
            self._stream = None
            _close_stream(stream)
            raise NoAudioDeviceError(f"cannot start audio output: {e}") from None

    def stop(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            problem = _close_stream(stream)
            if problem:
                self._error = f"audio output closed with an error ({problem})"

    def seek(self, seconds: float) -> None:
        with self._lock:
            self._pos = min(len(self._audio), max(0, round(seconds * self._rate)))
            self._done = self._pos >= len(self._audio)

    @property
    def playing(self) -> bool:
        """True while frames remain and the stream runs; closes a finished or dead stream."""
        stream = self._stream
        if stream is None:
            return False
        if self._done or not getattr(stream, "active", True):
            vanished = not self._done
            self.stop()
            if vanished:
                self._error = "audio output stopped unexpectedly (device disconnected?)"
            return False
        return True

    @property
    def position(self) -> float:
        return self._pos / self._rate

    @property
    def duration(self) -> float:
        return len(self._audio) / self._rate

    @property
    def underflows(self) -> int:
        return self._underflows

    @property
    def error(self) -> str:
        return self._error
