"""Audio devices with no Qt: record, play, device status, the devices chosen in Preferences.

Design (Friture): the PortAudio callback only copies into a ring buffer and counts status flags; the
consumer (a GUI timer, a worker) drains it. Xruns are counted, not ignored. "No audio device" is a normal
state reported by `device_status()`, never a crash. Decoding, resampling and block streaming are the one
audio path in `core.audio` (typed `AudioError`s whose message names the file and says what is wrong),
imported from there, never through this module.

sounddevice is imported lazily (PortAudio may be missing), so importing this module is cheap.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.audio import AudioError

log = logging.getLogger(__name__)


class NoAudioDeviceError(AudioError):
    """No usable input/output device (or no PortAudio); the message says which and why."""


# ------------------------------------------------------------------------------------ PortAudio's errors

# PortAudio's error codes (portaudio.h) that say the device itself is the problem
_PA_GONE = {-9996, -9993, -9985, -10000}  # invalid device, bad I/O combination, unavailable, not initialised
_PA_RATE, _PA_CHANNELS, _PA_HOST, _PA_TIMEOUT, _PA_INTERNAL = -9997, -9998, -9999, -9987, -9986
_CODE = re.compile(r"\[PaErrorCode (-?\d+)\]")


def _error_code(exc: BaseException) -> int | None:
    """PortAudio's error code: sounddevice.PortAudioError's second argument, or "[PaErrorCode N]" in its text."""
    args = getattr(exc, "args", ())
    if len(args) > 1 and isinstance(args[1], int):
        return args[1]
    found = _CODE.search(str(exc))
    return int(found.group(1)) if found else None


def audio_error_message(exc: BaseException, direction: str) -> str:
    """What an audio failure means for the user, never PortAudio's own text (logged instead).

    The one place that reads sounddevice's errors (PortAudioError, and the ValueError of a device name that
    matches nothing); Recorder and Player (so Search's Record, Units and Words) all say it this way."""
    log.info("audio %s error: %r", direction, exc)
    code, text = _error_code(exc), str(exc).lower()
    device = f"The {direction} device"
    choose = "choose another in Edit → Preferences"
    if (code in _PA_GONE or "querying device -1" in text or "no " + direction + " device matching" in text
            or "device unavailable" in text or "illegal combination" in text or "invalid device" in text):
        return f"{device} is no longer available — {choose}, or check that it is plugged in."
    if "busy" in text or "in use" in text:
        return f"{device} is in use by another program — close it, or {choose}."
    if code == _PA_RATE or "sample rate" in text:
        return f"{device} cannot play or record at this sample rate — {choose}."
    if code == _PA_CHANNELS or "channel count" in text:
        return f"{device} does not have enough channels for this sound — {choose}."
    if code in (_PA_HOST, _PA_TIMEOUT, _PA_INTERNAL) or "host error" in text or "timed out" in text:
        return f"The sound system stopped answering (was it restarted?) — try again, or {choose}."
    return f"{device} failed — try again, or {choose}."


# listeners told (on the thread that noticed it, never the audio callback's) that a device failed
_problem_listeners: list[Callable[[str], None]] = []


def add_problem_listener(listener: Callable[[str], None]) -> None:
    """Call `listener(message)` whenever a stream fails to open or dies: the status bar then looks again."""
    _problem_listeners.append(listener)


def remove_problem_listener(listener: Callable[[str], None]) -> None:
    if listener in _problem_listeners:
        _problem_listeners.remove(listener)


def _report_problem(message: str) -> None:
    for listener in list(_problem_listeners):
        try:
            listener(message)
        except Exception:  # a listener gone (a closed window) must not break playback
            log.debug("audio problem listener failed", exc_info=True)


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
    inputs: list[str] = field(default_factory=list)  # device labels (`device_labels`), the system default first
    outputs: list[str] = field(default_factory=list)
    notice: str = ""  # a chosen device that is gone: the default is used instead
    output_problem: str = ""  # what is wrong with playback alone ("": see `message`, e.g. no audio backend)

    def output_message(self) -> str:
        """Why playback is unavailable, without what the message says of the microphone."""
        return self.output_problem or self.message

    def playback_unavailable(self) -> str:
        """What a disabled Play says, the tabs' one wording."""
        return f"Playback unavailable: {self.output_message()}"

    def recording_unavailable(self) -> str:
        return f"Recording unavailable: {self.message}"

    def unavailable(self) -> str:
        """Which of recording and playback is off, and why, in one line ('': both work)."""
        off = [what for what, ok in (("recording", self.input_ok), ("playback", self.output_ok)) if not ok]
        return f"{' and '.join(off).capitalize()} unavailable: {self.message}" if off else ""


@dataclass
class DeviceChoice:
    """The devices the user chose in Preferences, by label ('' = the system default). Labels, not indices:
    PortAudio renumbers its devices whenever they are listed again."""

    input: str = ""
    output: str = ""


CHOSEN = DeviceChoice()  # read by every Recorder/Player that opens without an explicit device


def choose_devices(input_label: str = "", output_label: str = "") -> None:
    """Where the next Recorder/Player opens (streams already open stay where they are)."""
    CHOSEN.input, CHOSEN.output = input_label, output_label


def _import_sounddevice() -> Any:  # noqa: ANN401 - the module
    import sounddevice

    return sounddevice


def device_labels(devices: list[Any], sd: Any, direction: str) -> list[tuple[int, str]]:  # noqa: ANN401
    """(PortAudio index, label) of the devices that can `direction` ('input'/'output'): the name, with its host
    API where a name is listed twice (Windows lists each device once per API)."""
    key = "max_input_channels" if direction == "input" else "max_output_channels"
    found = [(i, d) for i, d in enumerate(devices) if d.get(key, 0) > 0]
    names = [str(d["name"]) for _, d in found]
    labels = []
    for (i, d), name in zip(found, names, strict=True):
        if names.count(name) > 1 and hasattr(sd, "query_hostapis") and d.get("hostapi") is not None:
            name = f"{name} ({sd.query_hostapis(d['hostapi'])['name']})"
        labels.append((int(d.get("index", i)), name))
    return labels


# PortAudio lists devices once, when initialised; listing them again means closing it, which must not happen
# under a running stream (its callback would run on freed memory). Streams are tracked weakly: a stream left
# open by an object that is gone, or one that finished, must not stop every later re-listing (PortAudio closes
# what is still open when it terminates). The lock keeps a re-listing and the opening or closing of streams apart.
_PA_LOCK = threading.RLock()
_STREAMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # stream -> the PortAudio session it was opened in
_SESSION = [0]  # PortAudio sessions so far: a re-listing ends one (and closes the streams opened in it)


def _running_streams() -> int:
    return sum(1 for s in list(_STREAMS) if getattr(s, "active", False))


def _relist(sd: Any) -> None:  # noqa: ANN401
    """Make PortAudio list the devices again (a sound server gone or back), unless a stream is running."""
    with _PA_LOCK:
        if _running_streams() or not hasattr(sd, "_terminate"):
            return
        try:
            sd._terminate()
            _SESSION[0] += 1
            sd._initialize()
        except Exception as e:  # the next query says what is wrong
            log.info("re-listing audio devices failed: %r", e)


def device_status(rescan: bool = False) -> DeviceStatus:
    """What audio input/output is available. Never raises: problems become a disabled status + message.

    rescan: ask PortAudio to look again (slow-ish: call it off the GUI thread), e.g. after a stream failed."""
    try:
        sd = _import_sounddevice()
    except OSError as e:
        return DeviceStatus(False, False, f"PortAudio not installed: apt-get install libportaudio2 ({e})")
    except Exception as e:  # ImportError and anything odd at import time
        return DeviceStatus(False, False, f"no audio backend: sounddevice unavailable ({e})")
    if rescan:
        _relist(sd)
    try:
        with _PA_LOCK:  # not while another thread re-lists
            devices = list(sd.query_devices())
            inputs = [label for _, label in device_labels(devices, sd, "input")]
            outputs = [label for _, label in device_labels(devices, sd, "output")]
            default_in, default_out = _default_devices(sd)
    except Exception as e:
        return DeviceStatus(False, False, f"audio backend error: {audio_error_message(e, 'audio')}")
    input_ok = bool(inputs) and default_in is not None
    output_ok = bool(outputs) and default_out is not None
    problems = []
    if not inputs:
        problems.append("no audio input device (microphone) found")
    elif default_in is None:
        problems.append("no default audio input device")
    output_problem = "" if output_ok else \
        "no audio output device found" if not outputs else "no default audio output device"
    if output_problem:
        problems.append(output_problem)
    if problems:
        message = "; ".join(problems)
    else:
        message = f"input: {CHOSEN.input or default_in}; output: {CHOSEN.output or default_out}"
    notice = "; ".join(_gone(label, direction) for label, direction, listed in
                       ((CHOSEN.input, "input", inputs), (CHOSEN.output, "output", outputs))
                       if label and label not in listed)
    return DeviceStatus(input_ok, output_ok, message, inputs, outputs, notice, output_problem)


def _gone(label: str, direction: str) -> str:
    return f"The {direction} device “{label}” is no longer available; the system default is used instead."


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


def _close_stream(stream: Any, direction: str, abort: bool = False) -> str:  # noqa: ANN401
    """Stop and close a stream; a device that vanished may make both raise: report, don't propagate.
    Returns what went wrong in the user's words ('' if nothing).

    abort: drop what is still buffered instead of waiting for it. An input whose source stopped delivering
    (a suspended PulseAudio source) never returns from PortAudio's stop, which waits for one more buffer."""
    failure: Exception | None = None
    with _PA_LOCK:
        try:
            session = _STREAMS.pop(stream, _SESSION[0])
        except TypeError:  # a test double that cannot be referenced weakly
            session = _SESSION[0]
        if session != _SESSION[0]:
            return ""  # closed when PortAudio re-listed the devices
        for method in ("abort" if abort and hasattr(stream, "abort") else "stop", "close"):
            try:
                getattr(stream, method)()
            except Exception as e:
                failure = failure or e
    return audio_error_message(failure, direction) if failure is not None else ""


def _resolve_device(direction: str, device: int | str | None) -> tuple[int | str | None, str]:
    """The device to open: an explicit one as given, else the one chosen in Preferences (its index now), else
    the system default. A chosen device that is gone gives the default and a notice that says so."""
    label = CHOSEN.input if direction == "input" else CHOSEN.output
    if device is not None or not label:
        return device, ""
    try:
        sd = _import_sounddevice()
        with _PA_LOCK:
            labels = device_labels(list(sd.query_devices()), sd, direction)
        for index, name in labels:
            if name == label:
                return index, ""
    except Exception as e:  # no backend: opening the default says what is wrong
        log.info("listing audio devices failed: %r", e)
    return None, _gone(label, direction)


def _open_started(factory: Callable[..., Any], direction: str, **kwargs: Any) -> Any:  # noqa: ANN401
    """Open a float32 stream (sounddevice's InputStream/OutputStream or a test double) and start it; either
    step failing is a NoAudioDeviceError in the user's words, and a stream that will not start is closed."""
    with _PA_LOCK:
        try:
            stream = factory(dtype="float32", **kwargs)
        except Exception as e:
            message = audio_error_message(e, direction)
            _report_problem(message)
            raise NoAudioDeviceError(message) from None
        with contextlib.suppress(TypeError):  # a test double that cannot be referenced weakly
            _STREAMS[stream] = _SESSION[0]
        try:
            stream.start()
        except Exception as e:
            _close_stream(stream, direction)
            message = audio_error_message(e, direction)
            _report_problem(message)
            raise NoAudioDeviceError(message) from None
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
        self._failed: Exception | None = None  # set by the callback thread, acted on (and worded) by the consumer
        self.notice = ""  # the chosen device is gone: recording from the default
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
            self._failed = e

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
        self._error, self._failed = "", None
        self._last_callback = time.monotonic()
        self._heard = False
        device, self.notice = _resolve_device("input", self.device)
        self._stream = _open_started(factory, "input", samplerate=self.sample_rate, channels=self.channels,
                                     blocksize=self.block_size, callback=self._callback, device=device)

    def stop(self) -> None:
        """Stop and close the stream; what was recorded stays in the buffer for `drain()`."""
        stream, self._stream = self._stream, None
        if stream is None:
            return
        problem = _close_stream(stream, "input", abort=True)  # input: nothing buffered is worth a hang
        if problem and not self._error:
            self._error = problem

    def check(self) -> bool:
        """End the recording if the callback failed, the stream died or stopped delivering; True if alive."""
        stream = self._stream
        if stream is None:
            return False
        reason = audio_error_message(self._failed, "input") if self._failed is not None else ""
        if not reason and not getattr(stream, "active", True):
            reason = "audio input stopped unexpectedly (device disconnected?)"
        limit = self.stall_seconds if self._heard else self.first_audio_seconds
        if not reason and time.monotonic() - self._last_callback > limit:
            reason = (f"no audio from the input device for {limit:g} s (device disconnected?)" if self._heard else
                      f"the input device delivered no audio in {limit:g} s (disconnected, or in use?)")
        if reason:
            self.stop()
            self._error = reason
            _report_problem(reason)
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
    """Plays one array through an OutputStream whose callback copies the next block (zeros after the end), at
    `volume` (0..1), from the start again while `loop` is on. A new sound at the same rate and channel count
    replaces the one playing in the open stream: auditioning result after result opens no stream per sound."""

    def __init__(self, stream_factory: Callable[..., Any] | None = None, block_size: int = 1024,
                 device: int | str | None = None) -> None:
        self._factory = stream_factory
        self.block_size = block_size
        self.device = device
        self.notice = ""  # the chosen output device is gone: playing on the default
        self._stream: Any = None
        self._format: tuple[int, int, int | str | None] = (0, 0, None)  # the open stream's rate, channels, device
        self._audio = np.zeros((0, 1), dtype=np.float32)  # (N, C)
        self._rate = 1
        self._pos = 0  # next frame to play
        self._done = True
        self._gain = 1.0
        self._loop = False
        self._underflows = 0
        self._error = ""
        self._lock = threading.Lock()
        self._stop_exc: type[BaseException] | None = None
        self._stopping = False  # the callback has decided to end the stream
        self._tail = 0  # frames of silence to play after the end before stopping: the output's latency
        self._silence_written = 0

    # -- called on the audio thread: copy the next block (scaled), nothing else
    def _callback(self, outdata: np.ndarray, frames: int, time_info: object, status: object) -> None:
        if _flag(status, "output_underflow"):
            self._underflows += 1
        with self._lock:
            n = 0
            while n < frames:
                take = max(0, min(frames - n, len(self._audio) - self._pos))
                np.multiply(self._audio[self._pos:self._pos + take], self._gain, out=outdata[n:n + take])
                self._pos += take
                n += take
                if take == 0 or self._pos < len(self._audio) or not self._loop:
                    break
                self._pos = 0  # loop: from the start again, in the same block
            outdata[n:] = 0
            done = self._done = self._pos >= len(self._audio)
            if done:
                self._silence_written += frames - n
            stop = done and self._stop_exc is not None and self._silence_written >= self._tail
            self._stopping = self._stopping or stop
        if stop:
            # sounddevice.CallbackStop. Not at once: PortAudio's ALSA backend drops what is still in the
            # device buffer when the stream completes, so the sound's last ~80 ms would never be heard
            raise self._stop_exc  # type: ignore[misc]

    def play(self, audio: np.ndarray, sample_rate: int, start_seconds: float = 0.0) -> None:
        x = np.asarray(audio, dtype=np.float32)
        x = np.ascontiguousarray(x.reshape(-1, 1) if x.ndim == 1 else x)  # (N, C)
        device, notice = _resolve_device("output", self.device)
        wanted = (sample_rate, x.shape[1], device)
        stream = self._stream
        with self._lock:
            reuse = (stream is not None and getattr(stream, "active", True) and not self._stopping
                     and self._format == wanted)
            if reuse:  # the stream runs on: only the sound changes
                self._set_audio(x, sample_rate, start_seconds)
        if reuse:
            self._error, self.notice = "", notice
            return
        self.stop()
        factory = self._factory
        self._stop_exc = None
        if factory is None:
            status = device_status()
            if not status.output_ok:
                raise NoAudioDeviceError(_about(status.message, "output"))
            sd = _import_sounddevice()
            factory, self._stop_exc = sd.OutputStream, sd.CallbackStop
        with self._lock:
            self._set_audio(x, sample_rate, start_seconds)
            self._stopping = False
        self._error, self.notice = "", notice
        self._stream = _open_started(factory, "output", samplerate=sample_rate, channels=x.shape[1],
                                     blocksize=self.block_size, callback=self._callback, device=device)
        self._format = wanted

    def _set_audio(self, x: np.ndarray, sample_rate: int, start_seconds: float) -> None:
        """(under the lock) The sound to play from `start_seconds`."""
        self._audio, self._rate = x, sample_rate
        self._pos = min(len(x), max(0, round(start_seconds * sample_rate)))
        self._done = self._pos >= len(x)
        self._silence_written = 0
        self._tail = round(TAIL_SECONDS * sample_rate)

    def stop(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            problem = _close_stream(stream, "output")
            if problem:
                self._error = problem

    def seek(self, seconds: float) -> None:
        with self._lock:
            self._pos = min(len(self._audio), max(0, round(seconds * self._rate)))
            self._done = self._pos >= len(self._audio)
            self._silence_written = 0

    @property
    def volume(self) -> float:
        return self._gain

    @volume.setter
    def volume(self, value: float) -> None:
        """0..1, applied from the next block on: a slider moves the sound that plays."""
        self._gain = float(min(max(value, 0.0), 1.0))

    @property
    def loop(self) -> bool:
        return self._loop

    @loop.setter
    def loop(self, on: bool) -> None:
        self._loop = bool(on)  # read by the callback at the end of the sound

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
                self._error = "The output device stopped playing (unplugged, or the sound server stopped?)."
                _report_problem(self._error)
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
