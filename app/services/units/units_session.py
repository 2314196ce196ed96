"""Units service (no Qt): live unit discovery on microphone audio, file encoding, resynthesis, exports.

`UnitsSession` wraps a loaded `models.units.UnitsModel` and its checkpoint's front end: `feed` turns 16 kHz
audio blocks into front-end frames, unit ids (one per 40 ms, through `models.vqvae_stream.StreamingEncoder`) and
display spectrogram frames, exactly as whole-file processing gives them, with a bounded look-ahead
(`lookahead_ms`); `finish` ends the utterance; `fit_voice` picks the table voice that fits the speaker
(`core.voices.fitting_voice`); `resynthesize_job` runs the inverter and Griffin-Lim, following the input's
loudness stream (core/loudness.py), and brings the result to the input's speech level without clipping
(core/level_match.py); `export_units_text` and `export_textgrid` (app/services/units/textgrid.py)
write the units. `LiveStream` feeds a session off the GUI thread. Why streaming is exact, the look-ahead, the
voice and the export format: docs/units.md.
"""

from __future__ import annotations

import os
import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from app.services.jobs import Job
from app.services.units.textgrid import Word, write_units_textgrid
from core import level_match, loudness
from core.audio import SOXR, decode, sanitize, save_wav, trim_span
from core.files import atomic_path
from core.frontend_builder import FRAMES_PER_UNIT
from core.voices import envelope_correction, fitting_voice, lsd_bins
from models.vqvae_stream import StreamingEncoder

LOG_FLOOR = 1e-4  # display spectrograms are log10(magnitude + floor)
FILE_BLOCK_SECONDS = 1.0  # files are fed through the same streaming path in blocks of this length
MAX_FILE_SECONDS = 600.0
VOICE_FIT_SECONDS = 1.0  # the resynthesis voice is fitted on this much speech: enough for a few syllables


def checked_mono(audio: np.ndarray) -> tuple[np.ndarray, int, int]:
    """Mono float32 copy with NaN/inf replaced by 0 (core.audio.sanitize); returns (audio, nonfinite count,
    full-scale count)."""
    x = np.array(audio, dtype=np.float32)
    if x.ndim == 2:  # (n, C): mix down
        x = x.mean(axis=1) if x.shape[1] > 1 else x[:, 0].copy()
    x = x.reshape(-1)  # (n,)
    nonfinite = sanitize(x)
    clipped = int((np.abs(x) >= 0.999).sum())
    return x, nonfinite, clipped


def log_spectrogram(mag: np.ndarray) -> np.ndarray:
    return np.log10(np.asarray(mag, dtype=np.float32) + LOG_FLOOR)


@dataclass
class Resynthesis:
    audio: np.ndarray  # (N,) float32 at sample_rate
    sample_rate: int
    spectrogram: np.ndarray  # (T, F) log10 magnitude of the resynthesised audio
    speaker: str
    loudness: bool = True  # it followed the loudness stream (False: the units alone)
    gain_db: float = 0.0  # the gain that brought it to the input's speech level (core/level_match.py)
    limited_db: float = 0.0  # what the peak guard took off the speech level after that
    level_matched: bool = False  # False: the inverter's own level (asked so, or no speech to match)
    envelope: bool = False  # the fitted voice's envelope correction was applied (the Auto voice only)


@dataclass(frozen=True)
class VoiceFit:
    """The table voice that fits the speaker, and the stretch of speech it was fitted on."""

    voice: int  # index into the speaker table
    name: str
    start: float  # seconds
    end: float
    # (F,) per-bin gain moving the voice's long-term spectrum onto the speaker's (core.voices.envelope_correction)
    envelope: torch.Tensor | None = field(default=None, compare=False, repr=False)


class UnitsSession:
    """One utterance at a time: feed audio (or encode a file), read units, resynthesise, export."""

    def __init__(self, model: Any, features: dict[str, Any] | None = None,  # noqa: ANN401 (UnitsModel)
                 resampler: str = SOXR, frontend: torch.nn.Module | None = None) -> None:
        """`features`: the checkpoint's front-end entry (default MFCC+Δ+ΔΔ); `frontend`: the front end itself,
        already built (then `features` is not read)."""
        from core.frontend_builder import units_frontend
        from models.frontends import LinearSpecConfig, LinearSpectrogram
        from models.units_frontend import SpeechUnitsFrontend

        self.model = model.eval()
        self.device = next(model.parameters()).device  # front ends run on the CPU, the model wherever it is
        self.frontend = frontend if frontend is not None else units_frontend(features or None)
        # the MFCC part is computed over exact sample windows below; the embedding part by its own stream
        self.combined = self.frontend if isinstance(self.frontend, SpeechUnitsFrontend) else None
        self.mfcc = self.combined.mfcc if self.combined is not None else self.frontend
        fc = self.mfcc.config
        if getattr(fc, "cmn", False):
            raise ValueError("per-utterance CMN features cannot be computed while streaming")
        if self.frontend.dim != model.config.vqvae.input_dim:
            raise ValueError(f"front end gives {self.frontend.dim}-d features, the model expects "
                             f"{model.config.vqvae.input_dim}")
        inv = model.config.inverter
        if (inv.sample_rate, inv.hop_length) != (fc.sample_rate, fc.hop_length):
            raise ValueError("the inverter's framing does not match the front end's")
        self.sample_rate = int(fc.sample_rate)
        self.resampler = resampler  # the checkpoint's (`resampler_from_training`), for files at other rates
        self.hop = int(fc.hop_length)
        self.half = int(fc.n_fft) // 2  # samples a centred frame reads on each side
        self.context = 2 * (fc.delta_win_length // 2) if getattr(fc, "deltas", False) else 0  # Δ then ΔΔ
        self.edge = -(-self.half // self.hop)  # frames at a window's start that see its padding
        self.spec = LinearSpectrogram(LinearSpecConfig(
            sample_rate=inv.sample_rate, n_fft=inv.n_fft, win_length=inv.win_length, hop_length=inv.hop_length,
        ))
        self.speakers: list[str] = list(model.config.speakers) or [
            f"speaker {i}" for i in range(model.config.vqvae.n_speakers)
        ]
        self.codebook_size = int(model.config.vqvae.codebook_size)
        self.unit_seconds = FRAMES_PER_UNIT * self.hop / self.sample_rate
        self.level_bins = lsd_bins(inv)  # the loudness stream's band: 0-4 kHz, what the evaluation measures
        self.hop_seconds = self.hop / self.sample_rate
        self.resynthesis: Resynthesis | None = None
        self.source: Path | None = None
        self.reset()

    # ------------------------------------------------------------------------------------ streaming

    @property
    def lookahead_ms(self) -> float:
        feature_delay = (self.context * self.hop + self.half) / self.sample_rate * 1000
        return feature_delay + self._stream.lookahead_ms

    def reset(self) -> None:
        """Start a new utterance."""
        self._stream = StreamingEncoder(self.model.vqvae)
        self._emb_stream = self.combined.embedding.stream() if self.combined is not None else None
        self._emb = torch.zeros(0, self.combined.embedding.dim if self.combined is not None else 0)  # (u, 96)
        self._emb_start = 0  # unit index of self._emb[0]
        self._blocks: list[np.ndarray] = []  # every sanitised sample fed, for playback and export
        self._window = np.zeros(0, dtype=np.float32)  # samples _window_start .. n_samples - 1
        self._window_start = 0
        self.n_samples = 0
        self.n_frames = 0  # frames emitted so far
        self.units: list[int] = []
        self._spec: list[np.ndarray] = []
        self._frame_db: list[torch.Tensor] = []  # the input's level per emitted frame (dB, 0-4 kHz): the loudness
        self.nonfinite = 0
        self.clipped = 0
        self.finished = False
        self.resynthesis = None
        self.source = None
        self.voice_fit: VoiceFit | None = None
        self.words: list[Word] = []  # (start s, end s, word) when known: the TextGrid gets a words tier

    def feed(self, audio_block: np.ndarray) -> tuple[list[int], np.ndarray]:
        """Audio (n,) or (n, C) at `sample_rate` -> (new unit ids, new spectrogram frames (t, F) log10)."""
        if self.finished:
            raise RuntimeError("this utterance is finished; call reset() to start another")
        x, nonfinite, clipped = checked_mono(audio_block)
        self.nonfinite += nonfinite
        self.clipped += clipped
        if len(x):
            self._blocks.append(x)
            self._window = np.concatenate([self._window, x])
            self.n_samples += len(x)
            self._push_embedding(x)
        # frame t is final when sample (t + context) * hop + half has arrived
        ready = max(0, (self.n_samples - self.half) // self.hop - self.context + 1)
        return self._emit(ready)

    def finish(self) -> tuple[list[int], np.ndarray]:
        """End of input: the remaining units and spectrogram frames."""
        if self.finished:
            return [], self._empty_spec()
        total = 1 + self.n_samples // self.hop if self.n_samples > self.half else 0  # whole-file frame count
        if self.combined is not None and total:  # the zeros whole-file processing pads the last unit's hop with
            self._push_embedding(np.zeros(self.combined.embedding_samples(total) - self.n_samples, np.float32))
        units, frames = self._emit(total, final=True)
        last = self._stream.flush().cpu().tolist()
        self.units.extend(last)
        self.finished = True
        self._window = np.zeros(0, dtype=np.float32)
        return units + last, frames

    def _emit(self, upto: int, final: bool = False) -> tuple[list[int], np.ndarray]:
        if upto <= self.n_frames:
            return [], self._empty_spec()
        first = self.n_frames
        start = self._window_start // self.hop  # window's first frame (global index)
        wave = torch.from_numpy(self._window)
        with torch.inference_mode():  # no autograd bookkeeping at all: this runs every ~50 ms while live
            feats = self.mfcc(wave)[first - start: upto - start]  # (t, 39)
            mag = self.spec(wave)[first - start: upto - start]  # (t, F)
        assert feats.shape[0] == upto - first, (feats.shape, upto, first)
        if self.combined is not None:  # each frame gets its unit's embedding frame (already complete)
            emb = self._emb[first // FRAMES_PER_UNIT - self._emb_start:]
            feats = self.combined.combine(feats, emb, first)  # (t, 135)
            keep = upto // FRAMES_PER_UNIT  # units before the last emitted frame's unit are done with
            self._emb, self._emb_start = self._emb[keep - self._emb_start:], keep
        units = self._stream.push(feats.float().to(self.device)).cpu().tolist()
        spec = log_spectrogram(mag.numpy())
        self.units.extend(units)
        self._spec.append(spec)
        self._frame_db.append(loudness.frame_levels_db(mag, self.level_bins))
        self.n_frames = upto
        if not final:  # the next window starts where its first new frame is clear of the edge padding
            keep = max(0, upto - self.context - self.edge) * self.hop
            self._window = self._window[keep - self._window_start:]
            self._window_start = keep
        return units, spec

    def _push_embedding(self, x: np.ndarray) -> None:
        if self._emb_stream is not None and len(x):
            with torch.inference_mode():
                self._emb = torch.cat([self._emb, self._emb_stream.push(x)])

    def _empty_spec(self) -> np.ndarray:
        return np.zeros((0, self.spec.dim), dtype=np.float32)

    @property
    def audio(self) -> np.ndarray:
        """Every sample fed so far (sanitised), (N,) float32 at `sample_rate`."""
        return np.concatenate(self._blocks) if self._blocks else np.zeros(0, dtype=np.float32)

    @property
    def spectrogram(self) -> np.ndarray:
        """(T, F) log10 magnitude of the audio fed so far, aligned with the units (FRAMES_PER_UNIT a unit)."""
        return np.concatenate(self._spec) if self._spec else self._empty_spec()

    @property
    def duration(self) -> float:
        return self.n_samples / self.sample_rate

    # ------------------------------------------------------------------------------------ files

    def encode_file(self, path: str | os.PathLike[str]) -> Job[list[int]]:
        """Job: decode any file (any rate, any channels) to 16 kHz mono and run it through `feed`."""
        yield {"message": f"reading {Path(path).name}"}
        decoded = decode(path, sample_rate=self.sample_rate, mono=True, max_seconds=MAX_FILE_SECONDS,
                         resampler=self.resampler)
        self.reset()
        self.nonfinite += decoded.nonfinite
        block = round(FILE_BLOCK_SECONDS * self.sample_rate)
        total = max(1, -(-len(decoded.audio) // block))
        for i in range(total):
            self.feed(decoded.audio[i * block:(i + 1) * block])
            yield {"step": i + 1, "total": total, "message": f"encoding {Path(path).name}"}
        self.finish()
        self.source = Path(path)
        yield {"step": total, "total": total, "message": "choosing the voice that fits the speech"}
        self.fit_voice()
        return list(self.units)

    # ------------------------------------------------------------------------------------ voice

    def fit_voice(self) -> VoiceFit | None:
        """Fit the resynthesis voice on the first VOICE_FIT_SECONDS of speech once they are encoded (on the
        speech there is once the utterance is finished); None until then, and for an utterance without speech.
        The first fit stays, with the envelope correction fitted on the same speech in that voice. It costs one
        inverter pass per table voice (~0.15 s for the shipped model on one thread): call it from a worker."""
        if self.voice_fit is None and (span := self._voice_fit_span()) is not None:
            first, last = span
            per_unit = FRAMES_PER_UNIT * self.hop
            wave = self.audio[first * per_unit: min(last * per_unit, self.n_samples)]
            wave = torch.from_numpy(np.pad(wave, (0, max(0, self.half + 1 - len(wave)))))  # a centred frame's
            codes = torch.tensor(self.units[first:last])
            with torch.inference_mode():
                mag = self.spec(wave)  # (T, F) linear, framed as the inverter's output
                voice = fitting_voice(self.model, [(codes, mag)])
                pred = self.model.units_to_magnitude(codes.to(self.device), voice, num_frames=len(mag)).cpu()
                envelope = envelope_correction(pred, mag, self.level_bins)  # the same speech, the chosen voice
            self.voice_fit = VoiceFit(voice, self.speakers[voice], first * self.unit_seconds,
                                      len(wave) / self.sample_rate + first * self.unit_seconds, envelope)
        return self.voice_fit

    def _voice_fit_span(self) -> tuple[int, int] | None:
        """[first, last) units of the first VOICE_FIT_SECONDS of speech, None while they are not all encoded."""
        want = round(VOICE_FIT_SECONDS / self.unit_seconds)
        if len(self.units) < want and not (self.finished and self.units):  # cheap: no speech search yet
            return None
        span = trim_span(self.audio, sample_rate=self.sample_rate)
        if span is None:  # silence so far
            return None
        first = span[0] // (FRAMES_PER_UNIT * self.hop)
        if len(self.units) >= first + want:
            return first, first + want
        return (first, len(self.units)) if self.finished and len(self.units) > first else None

    def resynthesis_voice(self, speaker: str | int | None = None) -> int:
        """The voice id `speaker` names; None: the fitted voice (fitted now if it was not; the first voice when
        there is no speech to fit)."""
        if speaker is not None:
            return self.model.speaker_id(speaker)
        fit = self.fit_voice()
        return fit.voice if fit is not None else 0

    # ------------------------------------------------------------------------------------ resynthesis

    def loudness_levels(self) -> torch.Tensor:
        """The loudness stream of the utterance so far: one level per unit (core/loudness.py)."""
        frame_db = torch.cat(self._frame_db) if self._frame_db else torch.zeros(0)
        return loudness.levels_of(frame_db)

    def resynthesize_job(self, speaker: str | int | None = None, n_iter: int = 32, follow_loudness: bool = True,
                         match_level: bool = True, correct_envelope: bool = True) -> Job[Resynthesis]:
        """Job: units -> inverter (linear magnitudes, `speaker`'s voice; None: the voice that fits the speech, with
        its envelope correction unless `correct_envelope` is off) -> each unit moved to the speech's level
        (`follow_loudness`: the loudness stream beside the units; off: the units alone) -> Griffin-Lim -> waveform
        at the input's speech level, its true peak under -1 dBFS (`match_level`; off: the inverter's own level,
        ~18 dB under a microphone's)."""
        sid = self.resynthesis_voice(speaker)
        name = self.speakers[sid]
        rate = int(self.model.config.inverter.sample_rate)
        if not self.units:
            result = Resynthesis(np.zeros(0, np.float32), rate, self._empty_spec(), name, follow_loudness)
            self.resynthesis = result
            return result
        yield {"step": 0, "total": 2, "message": f"units → spectrogram ({name})"}
        codes = torch.tensor(self.units, dtype=torch.long, device=self.device)
        n_frames = self.n_frames or FRAMES_PER_UNIT * len(self.units)
        mag = self.model.units_to_magnitude(codes, sid, num_frames=n_frames)  # (T, F)
        envelope = self.voice_fit.envelope if speaker is None and correct_envelope and self.voice_fit else None
        if envelope is not None:  # a voice the user picked keeps its own timbre
            mag = mag * envelope.to(mag.device)
        if follow_loudness:
            mag = loudness.apply_levels(mag, self.loudness_levels().to(mag.device), self.level_bins)
        yield {"step": 1, "total": 2, "message": f"Griffin-Lim ({n_iter} iterations)"}
        length = self.n_samples if self.n_frames else None
        with torch.no_grad():
            wave = self.model.inverter.griffin_lim(mag, n_iter=n_iter, length=length)  # (N,)
            wave = torch.nan_to_num(wave).float().cpu()
        audio = wave.numpy().astype(np.float32)
        level = level_match.match_level(audio, self.audio, rate) if match_level else None
        if level is not None:
            audio = level.audio
        with torch.no_grad():
            spec = self.spec(torch.from_numpy(audio)) if len(audio) > self.half else mag.cpu()
        result = Resynthesis(audio, rate, log_spectrogram(spec.numpy()), name, follow_loudness,
                             envelope=envelope is not None)
        if level is not None:
            result.gain_db, result.limited_db, result.level_matched = level.gain_db, level.limited_db, level.matched
        self.resynthesis = result
        yield {"step": 2, "total": 2, "message": "resynthesis ready"}
        return result

    def resynthesize(self, speaker: str | int | None = None, n_iter: int = 32, follow_loudness: bool = True,
                     match_level: bool = True, correct_envelope: bool = True) -> np.ndarray:
        """Waveform (N,) spoken by `speaker`, rebuilt from the units (and the loudness stream, unless
        `follow_loudness` is off), at the input's speech level unless `match_level` is off."""
        job = self.resynthesize_job(speaker, n_iter, follow_loudness, match_level, correct_envelope)
        while True:
            try:
                next(job)
            except StopIteration as stop:
                return stop.value.audio

    # ------------------------------------------------------------------------------------ summaries

    def codebook_histogram(self) -> np.ndarray:
        """(K,) how many times each unit id occurs in the current utterance."""
        return np.bincount(np.asarray(self.units, dtype=np.int64), minlength=self.codebook_size)

    def units_text(self) -> str:
        return " ".join(f"{u * self.unit_seconds:.3f}:{unit}" for u, unit in enumerate(self.units)) + "\n"

    def export_units_text(self, path: str | os.PathLike[str]) -> Path:
        path = Path(path)
        with atomic_path(path) as tmp:
            tmp.write_text(self.units_text(), encoding="utf-8")
        return path

    def export_textgrid(self, path: str | os.PathLike[str]) -> Path:
        """The units (and the words, when known) as a Praat TextGrid with the text export's boundaries."""
        tokens = parse_units_text(self.units_text())
        return write_units_textgrid(path, tokens, self.unit_seconds, self.duration, self.words)

    def export_wav(self, path: str | os.PathLike[str]) -> Path:
        """Write the latest resynthesis as 16-bit WAV."""
        if self.resynthesis is None:
            raise ValueError("nothing to export yet: resynthesise first")
        return save_wav(path, self.resynthesis.audio, self.resynthesis.sample_rate)


def parse_units_text(text: str) -> list[tuple[float, int]]:
    """Inverse of `UnitsSession.units_text`: [(start seconds, unit id), ...]."""
    out = []
    for token in text.split():
        start, unit = token.split(":")
        out.append((float(start), int(unit)))
    return out


def load_session(registry: Any, name: str) -> Job[UnitsSession]:  # noqa: ANN401 (ModelRegistry)
    """Job: load units model `name` from the registry (with its checkpoint's front end) into a session."""
    yield {"message": f"loading {name} with its front end"}
    inf = registry.inference(name)
    return UnitsSession(inf.model, resampler=inf.resampler, frontend=inf.frontend)


class LiveStream:
    """Live recording: the GUI thread `put`s drained microphone blocks and `take`s results; the job `run`
    (in a worker) feeds the session. `close` ends the input: the job finishes the utterance and returns."""

    def __init__(self, session: UnitsSession, poll_seconds: float = 0.05) -> None:
        self.session = session
        self.poll_seconds = poll_seconds
        self._inbox: queue.Queue[np.ndarray | None] = queue.Queue()
        self._lock = threading.Lock()
        self._units: list[int] = []
        self._frames: list[np.ndarray] = []
        self.done = False

    def put(self, block: np.ndarray) -> None:
        if len(block):
            self._inbox.put(np.array(block, dtype=np.float32))

    def close(self) -> None:
        self._inbox.put(None)

    def take(self) -> tuple[list[int], np.ndarray]:
        """Units and spectrogram frames produced since the last call."""
        with self._lock:
            units, frames = self._units, self._frames
            self._units, self._frames = [], []
        spec = np.concatenate(frames) if frames else self.session._empty_spec()
        return units, spec

    def run(self) -> Job[list[int]]:
        self.session.reset()
        while True:
            try:
                items = [self._inbox.get(timeout=self.poll_seconds)]
            except queue.Empty:
                yield {"step": len(self.session.units), "message": "listening"}
                continue
            while True:  # catch up on everything queued at once
                try:
                    items.append(self._inbox.get_nowait())
                except queue.Empty:
                    break
            closed = any(item is None for item in items)
            if closed:
                items = items[: next(i for i, item in enumerate(items) if item is None)]
            blocks = [item for item in items if item is not None]
            units, frames = self.session.feed(np.concatenate(blocks)) if blocks else ([], None)
            self._publish(units, frames)
            if closed:
                self._publish(*self.session.finish())
                self.session.fit_voice()
                self.done = True
                return list(self.session.units)
            self.session.fit_voice()  # after publishing: the units are never held back by it (once ~0.15 s)
            yield {"step": len(self.session.units), "message": "listening"}

    def _publish(self, units: list[int], frames: np.ndarray | None) -> None:
        with self._lock:
            self._units.extend(units)
            if frames is not None and len(frames):
                self._frames.append(frames)
