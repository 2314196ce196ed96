"""Audio devices with no Qt: record, play, device status; re-exports the decoder of `core.audio`.

Design (Friture): the PortAudio callback only copies into a ring buffer and counts status flags; the
consumer (a GUI timer, a worker) drains it. Xruns are counted, not ignored. "No audio device" is a normal
state reported by `device_status()`, never a crash. Decoding, resampling and block streaming are the one
audio path in `core.audio` (typed `AudioError`s whose message names the file and says what is wrong);
the names callers import from here are re-exported.

sounddevice is imported lazily (PortAudio may be missing), so importing this module is cheap.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# decoding, resampling and streaming live in the one Qt-free audio path; re-exported for the app's callers
from core.audio import (  # noqa: F401
    SUPPORTED_EXTENSIONS,
    AudioError,
    AudioInfo,
    Decoded,
    EmptyAudioError,
    PathLike,
    TooLongAudioError,
    TruncatedAudioError,
    UnreadableAudioError,
    audio_info,
    decode,
    display_name,
    iter_blocks,
    save_wav,
)


class NoAudioDeviceError(AudioError):
    """No usable input/output device (or no PortAudio); the message says which and why."""


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


def _about(message: str, direction: str) -> str:
    """The parts of a device-status message about `direction` (input/output): a recorder that cannot
    start need not hear that there is no loudspeaker either."""
    parts = [p for p in message.split("; ") if direction in p]
    return "; ".join(parts) or message


def _flag(status: object, name: str) -> bool:
    return bool(getattr(status, name, False))


def _close_stream(stream: Any, abort: bool = False) -> str:  # noqa: ANN401
    """Stop and close a stream; a device that vanished may make both raise: report, don't propagate.

    abort: drop what is still buffered instead of waiting for it. An input whose source stopped delivering
    (a suspended PulseAudio source) never returns from PortAudio's stop, which waits for one more buffer."""
    problems = []
    for method in ("abort" if abort and hasattr(stream, "abort") else "stop", "close"):
        try:
            getattr(stream, method)()
        except Exception as e:
            problems.append(f"{method}: {e}")
    return "; ".join(problems)


def _open_started(factory: Callable[..., Any], direction: str, **kwargs: Any) -> Any:  # noqa: ANN401
    """Open a float32 stream (sounddevice's InputStream/OutputStream or a test double) and start it; either
    step failing is a NoAudioDeviceError that names it, and a stream that will not start is closed again."""
    try:
        stream = factory(dtype="float32", **kwargs)
    except Exception as e:
        raise NoAudioDeviceError(f"cannot open audio {direction}: {e}") from None
    try:
        stream.start()
    except Exception as e:
        _close_stream(stream)
        raise NoAudioDeviceError(f"cannot start audio {direction}: {e}") from None
    return stream


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
        first_audio_seconds: float = 5.0,
    ) -> None:
        self.sample_rate = sample_rate
        self.channels = channels
        self.block_size = block_size
        self.device = device
        self.stall_seconds = stall_seconds  # no callback for this long while recording = device gone
        # the first audio may take longer: a process's first PulseAudio stream (ALSA plugin) takes ~2 s
        self.first_audio_seconds = max(first_audio_seconds, stall_seconds)
        self.buffer = RingBuffer(max(block_size, round(capacity_seconds * sample_rate)), channels)
        self._factory = stream_factory
        self._stream: Any = None
        self._xruns = 0  # input_overflow statuses reported by PortAudio
        self._error = ""
        self._failed = ""  # set by the callback thread, acted on by the consumer
        self._last_callback = 0.0
        self._heard = False  # a callback has come since start()

    # -- called on the audio thread: copy and count, nothing else
    def _callback(self, indata: np.ndarray, frames: int, time_info: object, status: object) -> None:
        if self._failed:
            return
        try:
            if _flag(status, "input_overflow"):
                self._xruns += 1
            self.buffer.write(indata[:frames])
            self._last_callback = time.monotonic()
            self._heard = True
        except Exception as e:  # never raise into PortAudio's thread
            self._failed = f"audio input failed: {e}"

    def start(self) -> None:
        if self._stream is not None:
            return
        factory = self._factory
        if factory is None:
            status = device_status()
            if not status.input_ok:
                raise NoAudioDeviceError(_about(status.message, "input"))
            factory = _import_sounddevice().InputStream
        self.buffer.clear()
        self._error = self._failed = ""
        self._last_callback = time.monotonic()
        self._heard = False
        self._stream = _open_started(factory, "input", samplerate=self.sample_rate, channels=self.channels,
                                     blocksize=self.block_size, callback=self._callback, device=self.device)

    def stop(self) -> None:
        """Stop and close the stream; what was recorded stays in the buffer for `drain()`."""
        stream, self._stream = self._stream, None
        if stream is None:
            return
        problem = _close_stream(stream, abort=True)  # input: nothing buffered is worth a hang
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
        limit = self.stall_seconds if self._heard else self.first_audio_seconds
        if not reason and time.monotonic() - self._last_callback > limit:
            reason = (f"no audio from the input device for {limit:g} s (device disconnected?)" if self._heard else
                      f"the input device delivered no audio in {limit:g} s (disconnected, or in use?)")
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


TAIL_SECONDS = 0.3  # silence played after a sound so that the device buffer empties before the stream stops


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
        self._tail = 0  # frames of silence to play after the end before stopping: the output's latency
        self._silence_written = 0

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
            if done:
                self._silence_written += frames - n
        if done and self._stop_exc is not None and self._silence_written >= self._tail:
            # sounddevice.CallbackStop. Not at once: PortAudio's ALSA backend drops what is still in the
            # device buffer when the stream completes, so the sound's last ~80 ms would never be heard
            raise self._stop_exc

    def play(self, audio: np.ndarray, sample_rate: int, start_seconds: float = 0.0) -> None:
        self.stop()
        x = np.asarray(audio, dtype=np.float32)
        x = x.reshape(-1, 1) if x.ndim == 1 else x  # (N, C)
        factory = self._factory
        self._stop_exc = None
        if factory is None:
            status = device_status()
            if not status.output_ok:
                raise NoAudioDeviceError(_about(status.message, "output"))
            sd = _import_sounddevice()
            factory, self._stop_exc = sd.OutputStream, sd.CallbackStop
        with self._lock:
            self._audio, self._rate = np.ascontiguousarray(x), sample_rate
            self._pos = min(len(x), max(0, round(start_seconds * sample_rate)))
            self._done = self._pos >= len(x)
            self._silence_written = 0
            self._tail = round(TAIL_SECONDS * sample_rate)
        self._error = ""
        self._stream = _open_started(factory, "output", samplerate=sample_rate, channels=x.shape[1],
                                     blocksize=self.block_size, callback=self._callback, device=self.device)

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
            self._silence_written = 0

    @property
    def playing(self) -> bool:
        """True while frames remain and the stream runs; closes a finished or dead stream."""
        stream = self._stream
        if stream is None:
            return False
        active = getattr(stream, "active", True)
        if self._done and active and self._stop_exc is not None:
            return True  # the last blocks are still in PortAudio's buffer: closing now would cut them off
        if self._done or not active:
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
