"""The Units tab's state without Qt: what it is doing, the loaded model, the utterance's units and frames so
far, its resynthesis and the voice asked for.

`UnitsState` holds the phase (idle | loading | recording | finishing | encoding | resynthesising), the session
(model + utterance), the live view's recent frames and units, the resynthesis and the status line; its methods
are the tab's transitions and tell the listeners of `events`. The tab owns the audio I/O and the workers and
draws what the events say. No Qt, no torch: tests/test_units_state.py drives it directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from app.services.search.recording import silence_problem
from app.ui.state_events import Event

if TYPE_CHECKING:
    from app.services.devices import DeviceStatus
    from app.services.units.units_session import Resynthesis, UnitsSession, VoiceFit

LIVE_SECONDS = 8.0  # the scrolling view shows this much recent audio
AUTO_VOICE = "Auto"  # the voice combo's first item: the voice fitted to the speech (then "Auto: <voice>")
LIVE_PHASES = ("recording", "finishing")  # the microphone's utterance is still coming in


class UnitsEvents:
    """What changed in a `UnitsState`; listeners run after the change."""

    def __init__(self) -> None:
        self.phase = Event()  # the phase, the devices or what there is to play or export: redraw the controls
        self.message = Event()  # (text: str, news: bool) the status line; news also goes to the window's
        self.model = Event()  # a model was loaded: its voices
        self.cleared = Event()  # a new utterance: the views are empty again
        self.live = Event()  # new live frames or units
        self.review = Event()  # the whole utterance is in: its spectrogram, units and codebook usage
        self.resynthesis = Event()  # a resynthesis arrived
        self.voice_fit = Event()  # (fit: VoiceFit | None) the voice Auto stands for


@dataclass(frozen=True)
class LiveWindow:
    """The live view's last LIVE_SECONDS: frames (T, F) from `start` s, units from `units_start` s."""

    frames: np.ndarray
    start: float
    x_range: tuple[float, float]
    units: list[int]
    units_start: float


@dataclass(frozen=True)
class UnitsControls:
    """Which controls can be used now."""

    recording: bool  # the record button reads Stop
    record: bool
    open_file: bool
    choose_model: bool
    voice: bool  # the voice and loudness choices
    play_original: bool
    play_resynthesis: bool
    export_units: bool
    export_wav: bool


class UnitsState:
    def __init__(self) -> None:
        self.events = UnitsEvents()
        self.phase = "idle"
        self.session: UnitsSession | None = None
        self.loaded_name = ""
        self.audio_status: DeviceStatus | None = None
        self.resynthesis: Resynthesis | None = None
        self.voice_override: int | None = None  # a voice the user chose; None: Auto (the one that fits)
        self.follow_loudness = True
        self.pending_resynthesis = False  # asked for while busy: starts when the jobs are done
        self.stop_reason = ""  # why the last recording ended by itself ('' when the user stopped it)
        self.message = ""
        self._spec: list[np.ndarray] = []  # live frames, the last LIVE_SECONDS kept
        self.frames = 0  # frames received this utterance
        self.units: list[int] = []

    # ------------------------------------------------------------------------------------------ messages

    def say(self, text: str, news: bool = True) -> None:
        """The status line; `news` also goes to the window's status bar while another tab is in front."""
        self.message = text
        self.events.message.emit(text, news)

    def _set_phase(self, phase: str) -> None:
        self.phase = phase
        self.events.phase.emit()

    @property
    def idle(self) -> bool:
        return self.phase == "idle"

    # ------------------------------------------------------------------------------------------ models

    def begin_loading(self, name: str) -> bool:
        """Whether model `name` may load now (then the phase is loading)."""
        if not self.idle:
            self.say("Busy: stop the current work before switching models.")
            return False
        self.say(f"Loading units model {name}…")
        self._set_phase("loading")
        return True

    def model_loaded(self, name: str, session: UnitsSession) -> None:
        self.session, self.loaded_name = session, name
        self.voice_override = None  # another model has another speaker table: back to Auto
        self.resynthesis = None
        self.events.model.emit()
        self.clear()  # nothing encoded with this model yet; the histogram spans its codebook
        how = "Press Space to record or open an audio file." if self.input_ok() else \
            "Open an audio file (recording is unavailable)."
        self.say(f"{name}: {session.codebook_size} units, one every {session.unit_seconds * 1000:.0f} ms; "
                 f"look-ahead {session.lookahead_ms:.0f} ms. {how}", news=False)

    def no_model(self) -> None:
        self.session, self.loaded_name = None, ""
        self.events.phase.emit()

    # ------------------------------------------------------------------------------------------ devices

    def set_audio_status(self, status: DeviceStatus) -> None:
        self.audio_status = status
        self.events.phase.emit()

    def input_ok(self) -> bool:
        return self.audio_status is not None and self.audio_status.input_ok

    def output_ok(self) -> bool:
        return self.audio_status is not None and self.audio_status.output_ok

    # ------------------------------------------------------------------------------------------ utterances

    def can_start(self) -> bool:
        """Whether a recording or a file can start now."""
        return self.session is not None and self.idle

    def clear(self) -> None:
        """A new utterance (or model): nothing shown, the voice not fitted yet."""
        self._spec, self.frames, self.units = [], 0, []
        self.events.cleared.emit()
        self.events.voice_fit.emit(None)

    def recording_started(self) -> None:
        self.stop_reason = ""
        self.resynthesis = None
        self.clear()
        self._set_phase("recording")
        self.say(f"Recording… units appear about {self.session.lookahead_ms:.0f} ms behind the audio. "
                 "Space stops.")

    def recording_stopped(self, stop_reason: str, message: str = "") -> None:
        """The microphone is closed; the worker finishes the utterance."""
        self.stop_reason = stop_reason
        self._set_phase("finishing")
        self.say(message or "Finishing the last units…")

    def add_live(self, units: list[int], frames: np.ndarray) -> bool:
        """Units and spectrogram frames from the live worker; False when nothing came."""
        if not units and not len(frames):
            return False
        self.units.extend(units)
        if len(frames):
            self._spec.append(frames)
            self.frames += len(frames)
        self.events.live.emit()
        self.events.voice_fit.emit(self.session.voice_fit if self.session else None)  # fitted after 1 s
        return True

    def live_window(self) -> LiveWindow:
        """The last LIVE_SECONDS of frames and units, positioned in seconds (the view scrolls after it fills)."""
        s = self.session
        keep = round(LIVE_SECONDS / s.hop_seconds)
        spec = np.concatenate(self._spec) if self._spec else np.zeros((0, 1), np.float32)
        spec = spec[-keep:]
        self._spec = [spec] if len(spec) else []  # kept joined: a long recording concatenates little
        end = self.frames * s.hop_seconds
        x_range = (max(0.0, end - LIVE_SECONDS), max(end, LIVE_SECONDS))
        keep_units = int(np.ceil(LIVE_SECONDS / s.unit_seconds)) + 1
        first_unit = max(0, len(self.units) - keep_units)
        return LiveWindow(spec, (self.frames - len(spec)) * s.hop_seconds, x_range, self.units[first_unit:],
                          first_unit * s.unit_seconds)

    def live_done(self, units: list[int]) -> None:
        """The recording's last units are in: show it and resynthesise it once the worker has ended."""
        s = self.session
        if s is None:
            return
        empty = silence_problem(s.audio, s.sample_rate, self.stop_reason)
        if empty:  # nothing to look at or resynthesise: say why instead of showing an empty utterance
            self.say(f"{empty[0].upper()}{empty[1:]}")
            if s.n_samples:
                self._review()
            return
        self.say(f"{len(units)} units in {s.duration:.2f} s ({len(set(units))} different)."
                 + (f" The recording ended by itself ({self.stop_reason}); what came before is kept."
                    if self.stop_reason else "")
                 + (f" {s.nonfinite} invalid samples were replaced by silence." if s.nonfinite else "")
                 + (" The input clipped." if s.clipped > 0.001 * max(s.n_samples, 1) else ""))
        self._review()
        self.pending_resynthesis = True  # starts once the live worker has finished

    def live_failed(self, message: str) -> None:
        self.say(f"Live encoding failed: {message}")

    def encoding_started(self, name: str) -> None:
        self.resynthesis = None
        self.clear()
        self._set_phase("encoding")
        self.say(f"Encoding {name}…")

    def file_encoded(self, units: list[int]) -> None:
        s = self.session
        if s is None:
            return
        self._spec, self.frames, self.units = [s.spectrogram], s.n_frames, list(units)
        self.events.live.emit()
        name = s.source.name if s.source else "file"
        # the recording's check, for a file too: one unit repeated over silence is not a result
        empty = silence_problem(s.audio, s.sample_rate, source=name)
        if empty:
            self.say(f"{empty}: nothing to resynthesise.")
            if s.n_samples:
                self._review()
            return
        self.say(f"{name}: {len(units)} units in {s.duration:.2f} s ({len(set(units))} different)."
                 + (f" {s.nonfinite} invalid samples were replaced by silence." if s.nonfinite else ""))
        self._review()
        self.pending_resynthesis = True

    def _review(self) -> None:
        self.events.review.emit()
        self.events.voice_fit.emit(self.session.voice_fit)

    # ------------------------------------------------------------------------------------------ resynthesis

    def begin_resynthesis(self) -> tuple[int | None, bool] | None:
        """(voice, follow loudness) for a resynthesis to run now; None when there is nothing to resynthesise
        or the tab is busy (then it runs once the jobs are done)."""
        s = self.session
        if s is None or not s.finished:
            return None
        if not self.idle:
            self.pending_resynthesis = True
            return None
        self._set_phase("resynthesising")
        return self.voice_override, self.follow_loudness  # None: the session's fitted voice

    def choose_voice(self, index: int) -> bool:
        """Voice combo item `index` (0: Auto, k + 1: voice k); True when the utterance is to be resynthesised."""
        if index < 0:
            return False
        self.voice_override = index - 1 if index > 0 else None  # sticks across recordings until Auto again
        return self.session is not None and self.session.finished

    def set_follow_loudness(self, on: bool) -> bool:
        """True when the utterance is to be resynthesised."""
        self.follow_loudness = bool(on)
        return self.session is not None and self.session.finished

    def resynthesised(self, result: Resynthesis) -> None:
        self.resynthesis = result
        self.events.resynthesis.emit()
        self.events.voice_fit.emit(self.session.voice_fit if self.session else None)
        why = " (the voice that fits the speech best)" if self.voice_override is None else ""
        if len(result.audio):
            # only offer P where it can play; without an output device the WAV is the way to hear it
            hear = "P plays it." if self.output_ok() else "Export WAV… saves it to play elsewhere."
            self.say(f"Resynthesised {len(result.audio) / result.sample_rate:.2f} s as {result.speaker}{why}. "
                     + hear)
        else:
            self.say("Too short for a single unit: nothing to resynthesise.")

    def jobs_done(self) -> bool:
        """Every job has ended: idle again. True when a resynthesis asked for meanwhile is to start now."""
        self.phase = "idle"
        start = self.pending_resynthesis and self.session is not None and self.session.finished
        if start:
            self.pending_resynthesis = False
        self.events.phase.emit()
        return start

    # ------------------------------------------------------------------------------------------ controls

    def controls(self) -> UnitsControls:
        ready, idle, recording = self.session is not None, self.idle, self.phase == "recording"
        s, result = self.session, self.resynthesis
        has_resynth = result is not None and len(result.audio) > 0 and idle
        return UnitsControls(
            recording=recording,
            record=recording or (idle and ready and self.input_ok()),
            open_file=idle and ready,
            choose_model=idle,
            voice=ready and not recording,
            play_original=ready and s.n_samples > 0 and idle and self.output_ok(),
            play_resynthesis=has_resynth and self.output_ok(),
            export_units=ready and bool(s.units) and idle,
            export_wav=has_resynth,
        )

    def auto_voice_text(self, fit: VoiceFit | None) -> str:
        """The voice combo's first item: which voice Auto stands for, once fitted to this utterance."""
        return f"{AUTO_VOICE}: {fit.name}" if fit is not None else AUTO_VOICE

    def default_stem(self) -> str:
        """The exported files' name: the file's, or "recording"."""
        s = self.session
        return s.source.stem if s is not None and s.source is not None else "recording"
