"""Augmentation that real microphones and rooms bring, for training speech models on clean recordings.

Each effect is a small named function on a float32 mono wave (N,) at `sr` (`speed_perturb`, `pitch_shift`,
`reverberate`, `add_noise`, `telephone`, `change_gain`; `normalize_features` for feature matrices); `augment`
applies them in the order sound travels (speaker -> room -> noise -> channel -> gain), each with its own
probability, drawing every choice from one `np.random.Generator`, so a seed gives the same output every time.
`AugmentConfig` (training/augment_settings.py, torch-free) holds the switches. What each effect does:
docs/corpora.md.
"""

from __future__ import annotations

import csv
import math
from functools import lru_cache
from pathlib import Path

import numpy as np
import soxr
import torch
import torchaudio

from core import audio as audio_path
from training.augment_settings import AugmentConfig
from training.reserved import is_held_out, names_held_out_package

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg")
MAX_NOISE_SECONDS = 10.0  # noise clips are looped, so a bank of ~1400 sfx clips needs no more than this each


# ---------------------------------------------------------------------------------------------- effects


def _resample(wave: np.ndarray, sr_in: float, sr_out: float) -> np.ndarray:
    return soxr.resample(np.ascontiguousarray(wave, dtype=np.float32), sr_in, sr_out, quality="HQ").astype(
        np.float32)


def speed_perturb(wave: np.ndarray, factor: float) -> np.ndarray:
    """Play `factor` times faster: (N,) -> (≈ N / factor,), pitch and tempo together (resample and keep the rate)."""
    if factor <= 0:
        raise ValueError(f"speed factor must be positive, got {factor}")
    return wave.astype(np.float32) if factor == 1 else _resample(wave, factor, 1.0)


def time_stretch(wave: np.ndarray, rate: float, n_fft: int = 512, hop: int = 128) -> np.ndarray:
    """Phase-vocoder tempo change at constant pitch: (N,) -> (≈ N / rate,)."""
    x = torch.from_numpy(np.ascontiguousarray(wave, dtype=np.float32))
    window = torch.hann_window(n_fft)
    spec = torch.stft(x, n_fft, hop, window=window, return_complex=True)  # (F, T)
    advance = torch.linspace(0, math.pi * hop, spec.shape[0])[:, None]
    stretched = torchaudio.functional.phase_vocoder(spec, rate, advance)
    out = torch.istft(stretched, n_fft, hop, window=window, length=round(len(wave) / rate))
    return out.numpy().astype(np.float32)


def pitch_shift(wave: np.ndarray, semitones: float) -> np.ndarray:
    """Shift pitch by `semitones` at the same length: stretch the tempo by 1/ratio, then resample by ratio."""
    if semitones == 0:
        return wave.astype(np.float32)
    ratio = 2.0 ** (semitones / 12.0)
    stretched = time_stretch(wave, 1.0 / ratio)  # (≈ N·ratio,), same pitch
    out = _resample(stretched, ratio, 1.0)  # (≈ N,), pitch x ratio
    return _fit(out, len(wave))


def _fit(x: np.ndarray, n: int) -> np.ndarray:
    return x[:n] if len(x) >= n else np.pad(x, (0, n - len(x)))


def room_impulse_response(sr: int, rt60: float, rng: np.random.Generator, direct_ratio_db: float = 0.0
                          ) -> np.ndarray:
    """Synthetic room response (L,): a unit direct path, then Gaussian noise whose energy decays 60 dB in
    `rt60` s (amplitude exp(−3 ln10 · t / rt60)), lasting until −60 dB; the tail's energy is
    `direct_ratio_db` below the direct path's."""
    if rt60 <= 0:
        raise ValueError(f"rt60 must be positive, got {rt60}")
    n = max(2, int(round(rt60 * sr)))
    t = np.arange(n) / sr
    tail = rng.standard_normal(n) * np.exp(-3.0 * math.log(10.0) * t / rt60)
    tail[0] = 0.0
    tail *= 10 ** (-direct_ratio_db / 20) / math.sqrt(float(np.sum(tail ** 2)) + 1e-12)
    tail[0] = 1.0
    return tail.astype(np.float32)


def reverberate(wave: np.ndarray, ir: np.ndarray) -> np.ndarray:
    """Convolve with `ir` (FFT), keep the input's length and RMS (a room does not make a voice louder)."""
    n = len(wave) + len(ir) - 1
    size = 1 << (n - 1).bit_length()
    out = np.fft.irfft(np.fft.rfft(wave, size) * np.fft.rfft(ir, size), size)[: len(wave)]
    return (out * _rms(wave) / max(_rms(out), 1e-12)).astype(np.float32)


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if len(x) else 0.0


def add_noise(wave: np.ndarray, noise: np.ndarray, snr_db: float, offset: int = 0) -> np.ndarray:
    """wave + noise scaled so that 10·log10(P_wave / P_noise) = snr_db; the noise is looped (from `offset`)
    to the wave's length."""
    if len(noise) == 0 or _rms(noise) == 0:
        raise ValueError("the noise clip is empty or silent")
    reps = -(-(offset + len(wave)) // len(noise))
    n = np.tile(noise, reps)[offset: offset + len(wave)]
    p_wave, p_noise = _rms(wave) ** 2, _rms(n) ** 2
    if p_wave == 0 or p_noise == 0:
        return wave.astype(np.float32)
    scale = math.sqrt(p_wave / (p_noise * 10 ** (snr_db / 10)))
    return (wave + scale * n).astype(np.float32)


def mu_law(x: np.ndarray, mu: int = 255) -> np.ndarray:
    """G.711 mu-law round trip: compress, quantise to 8 bits, expand."""
    x = np.clip(x, -1.0, 1.0)
    y = np.sign(x) * np.log1p(mu * np.abs(x)) / math.log1p(mu)
    y = np.round((y + 1) / 2 * mu) / mu * 2 - 1
    return (np.sign(y) * ((1 + mu) ** np.abs(y) - 1) / mu).astype(np.float32)


def telephone(wave: np.ndarray, sr: int, low_hz: float = 300.0, high_hz: float = 3400.0) -> np.ndarray:
    """A phone line: down to 8 kHz, 300-3400 Hz band (raised-cosine edges), mu-law, back to `sr`."""
    narrow = _resample(wave, sr, 8000)
    spec = np.fft.rfft(narrow)
    f = np.fft.rfftfreq(len(narrow), 1 / 8000)
    gain = np.clip((f - low_hz + 100) / 200, 0, 1) * np.clip((high_hz + 200 - f) / 400, 0, 1)  # 0..1 ramps
    gain = 0.5 - 0.5 * np.cos(np.pi * gain)  # raised cosine: no ringing from brick-wall edges
    narrow = np.fft.irfft(spec * gain, len(narrow)).astype(np.float32)
    peak = float(np.max(np.abs(narrow))) if len(narrow) else 0.0
    narrow = mu_law(narrow / peak) * peak if peak > 0 else narrow  # quantise at full scale, keep the level
    return _fit(_resample(narrow, 8000, sr), len(wave))


def change_gain(wave: np.ndarray, db: float) -> np.ndarray:
    return (wave * 10 ** (db / 20)).astype(np.float32)


def normalize_features(feats: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Per-utterance mean/variance normalisation over time: (T, D) -> (T, D) with zero mean, unit variance
    per dimension (a constant dimension becomes zero)."""
    mean = feats.mean(dim=0, keepdim=True)
    std = feats.std(dim=0, unbiased=False, keepdim=True)
    return (feats - mean) / std.clamp(min=eps)


# ---------------------------------------------------------------------------------------------- noise


class NoiseBank:
    """Noise clips from a folder, read lazily and resampled to `sr`. A folder with `captions.csv` (the sfx
    corpus) gives its `train` rows only, so evaluation clips never leak into training, and none of the
    packages whose voices evaluate the speech models (kajongg's spoken tile names are in the sfx corpus); a
    plain folder gives its audio files except those in a folder named after one of those packages."""

    def __init__(self, folder: str | Path, sr: int = 16000) -> None:
        self.folder, self.sr = Path(folder), sr
        if not self.folder.is_dir():
            raise FileNotFoundError(f"noise folder {self.folder} does not exist")
        self.paths = self._list()
        if not self.paths:
            raise ValueError(f"no noise clips ({', '.join(AUDIO_SUFFIXES)}) in {self.folder}")
        self._cache: dict[int, np.ndarray] = {}

    def _list(self) -> list[Path]:
        table = self.folder / "captions.csv"
        if table.is_file():
            with open(table, newline="", encoding="utf-8") as f:
                rows = list(csv.DictReader(f))
            return [self.folder / r["path"] for r in rows
                    if r.get("split", "train") in ("", "train")
                    and not is_held_out(r.get("source_package", ""))]
        return sorted(p for p in self.folder.rglob("*") if p.suffix.lower() in AUDIO_SUFFIXES
                      and not names_held_out_package(p.relative_to(self.folder).parts[:-1]))

    def clip(self, i: int) -> np.ndarray:
        if i not in self._cache:  # (N,) mono at sr; long clips cut so the whole bank stays small in memory
            audio = audio_path.decode(self.paths[i], sample_rate=self.sr, duration=MAX_NOISE_SECONDS).audio
            self._cache[i] = np.ascontiguousarray(audio, dtype=np.float32)
        return self._cache[i]

    def draw(self, rng: np.random.Generator) -> tuple[np.ndarray, int]:
        """A random non-silent clip and a random start offset in it. An unreadable clip (truncated, damaged,
        being rewritten) counts as empty: noise is a means, one bad file must not stop a training run."""
        for _ in range(20):
            i = int(rng.integers(len(self.paths)))
            try:
                clip = self.clip(i)
            except (audio_path.AudioError, OSError, ValueError):
                clip = self._cache[i] = np.zeros(0, dtype=np.float32)
            if len(clip) and _rms(clip) > 0:
                return clip, int(rng.integers(len(clip)))
        raise ValueError(f"only silent, empty or unreadable noise clips drawn from {self.folder}")


@lru_cache(maxsize=4)
def noise_bank(folder: str, sr: int) -> NoiseBank:
    """One bank per folder and rate per process: clips are read once, then reused across utterances."""
    return NoiseBank(folder, sr)


# ---------------------------------------------------------------------------------------------- pipeline


def augment_source(wave: np.ndarray, config: AugmentConfig, rng: np.random.Generator) -> np.ndarray:
    """The talker's side (speed, pitch): a different voice saying the same thing, (N,) -> (M,). A denoising
    model reconstructs this wave's features, so it is kept apart from the channel effects."""
    c = config
    x = np.asarray(wave, dtype=np.float32)
    if rng.random() < c.speed_prob:
        x = speed_perturb(x, float(rng.uniform(c.speed_low, c.speed_high)))
    if rng.random() < c.pitch_prob:
        x = pitch_shift(x, float(rng.uniform(-c.pitch_semitones, c.pitch_semitones)))
    return x


def augment_channel(wave: np.ndarray, sr: int, config: AugmentConfig, rng: np.random.Generator,
                    noise: NoiseBank | None = None) -> np.ndarray:
    """What lies between the talker and the recording (room, noise, phone line, level), (N,) -> (N,): time
    stays aligned sample for sample (the room's direct path is at lag 0, the phone filter is zero-phase)."""
    c = config
    x = np.asarray(wave, dtype=np.float32)
    if rng.random() < c.reverb_prob:
        x = reverberate(x, room_impulse_response(sr, float(rng.uniform(c.rt60_low, c.rt60_high)), rng))
    if rng.random() < c.noise_prob:
        noise = noise or noise_bank(c.noise_dir, sr)
        clip, offset = noise.draw(rng)
        x = add_noise(x, clip, float(rng.uniform(c.snr_low, c.snr_high)), offset)
    if rng.random() < c.telephone_prob:
        x = telephone(x, sr)
    if rng.random() < c.gain_prob:
        x = change_gain(x, float(rng.uniform(c.gain_db_low, c.gain_db_high)))
    return x


def augment(wave: np.ndarray, sr: int, config: AugmentConfig, rng: np.random.Generator,
            noise: NoiseBank | None = None) -> np.ndarray:
    """Apply the configured effects to one utterance (N,) -> (M,) (M ≠ N only under speed perturbation)."""
    return augment_channel(augment_source(wave, config, rng), sr, config, rng, noise)
