"""What the Search tab draws and plays for one file: its audio (a long file as an excerpt) and spectrogram."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.services.jobs import Job
from core.audio import decode
from core.display import display_name

PREVIEW_MAX_SECONDS = 600.0  # longer files are previewed (and played) as a 10-min excerpt
PREVIEW_FRAMES = 2000  # spectrogram columns at most, whatever the file length


@dataclass
class Preview:
    """What the Search tab draws and plays for one file."""

    path: Path
    audio: np.ndarray  # (N,) float32 mono
    sample_rate: int
    offset_s: float  # where `audio` starts in the file (long files are previewed as an excerpt)
    duration_s: float  # of the whole file
    spectrogram: np.ndarray  # (T, F) dB
    hop_seconds: float
    max_hz: float  # top of the spectrogram's frequency axis

    @property
    def end_s(self) -> float:
        return self.offset_s + len(self.audio) / self.sample_rate


def spectrogram_db(audio: np.ndarray, sample_rate: int, n_fft: int = 512, max_frames: int = PREVIEW_FRAMES
                   ) -> tuple[np.ndarray, float]:
    """Log-power STFT (T, n_fft // 2 + 1) in dB, hop chosen so that T <= max_frames; returns (frames, hop_s)."""
    x = np.asarray(audio, dtype=np.float32)
    if len(x) < n_fft:
        x = np.pad(x, (0, n_fft - len(x)))
    hop = max(n_fft // 4, -(-(len(x) - n_fft) // max(max_frames - 1, 1)))
    starts = np.arange(0, len(x) - n_fft + 1, hop)
    frames = np.stack([x[s : s + n_fft] for s in starts]) * np.hanning(n_fft).astype(np.float32)  # (T, n_fft)
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2  # (T, F)
    db = 10 * np.log10(power + 1e-10)
    return np.maximum(db, db.max() - 80.0).astype(np.float32), hop / sample_rate


def load_preview(path: str | os.PathLike[str], around_s: float = 0.0, max_seconds: float = PREVIEW_MAX_SECONDS
                 ) -> Preview:
    """Decode a file (mono, its own rate) and its spectrogram; a long one as an excerpt around `around_s`."""
    from core.audio import audio_info

    info = audio_info(path)
    offset = 0.0
    if info.duration > max_seconds:
        offset = min(max(0.0, around_s - 0.1 * max_seconds), info.duration - max_seconds)
    d = decode(path, start=offset, duration=min(info.duration, max_seconds), max_seconds=None)
    spec, hop = spectrogram_db(d.audio, d.sample_rate)
    return Preview(Path(path), d.audio, d.sample_rate, offset, info.duration, spec, hop, d.sample_rate / 2)


def preview_job(path: str | os.PathLike[str], around_s: float = 0.0) -> Job[Preview]:
    yield {"message": f"opening {display_name(Path(path).name)}"}
    return load_preview(path, around_s)

