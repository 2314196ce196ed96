"""Bring a resynthesis to the level of the speech it was rebuilt from, without clipping (issue 41).

The inverter speaks at its training voices' level and the loudness stream (core/loudness.py) is relative, so nothing
carried the input's absolute level. `match_level` gives the resynthesis one gain that makes its mean power over the
input's speech equal to the input's: ITU-R BS.1770 gating blocks (400 ms, 75 % overlap, absolute gate -70 dBFS,
relative gate -10 dB) of the input, the same blocks for both signals (they are time-aligned), unweighted. Then a
smooth limiter (`limit_peaks`) keeps the true peak (4x oversampled, BS.1770-4 Annex 2) under -1 dBTP: Griffin-Lim's
phase gives up to ~4 dB more crest factor than the input, so one gain alone would clip a hot input's copy. The
limiter's gain is the per-sample gain each peak needs, a running minimum over +-`limiter_seconds`, then a moving
average of the same width (never above what any sample needs). Why and the numbers: docs/units.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
import torchaudio


@dataclass(frozen=True)
class LevelMatchConfig:
    block_seconds: float = 0.4  # BS.1770 gating block
    hop_seconds: float = 0.1  # 75 % overlap
    absolute_gate_db: float = -70.0  # blocks quieter than this are silence whatever else the input holds
    relative_gate_db: float = -10.0  # ... and blocks this far below the absolutely gated mean are pauses
    ceiling_db: float = -1.0  # true-peak ceiling, dBTP (EBU R128's for distribution)
    limiter_seconds: float = 0.005  # the limiter's gain moves over this much time either side of a peak
    oversample: int = 4  # for the true peak


@dataclass(frozen=True)
class LevelMatch:
    audio: np.ndarray  # (N,) float32
    gain_db: float  # the gain that matched the input's speech level (0 when nothing was matched)
    limited_db: float  # how much the peak guard lowered the speech level after that (>= 0)
    reference_db: float  # the input's speech level, dBFS RMS (-inf: no speech)
    matched: bool  # False: no speech in the input, or a silent resynthesis: left as it was


def _db(power: float) -> float:
    return 10 * math.log10(power) if power > 0 else -math.inf


def block_powers(x: np.ndarray, sample_rate: int, config: LevelMatchConfig = LevelMatchConfig()) -> np.ndarray:
    """Mean square of each gating block (B,); a signal shorter than one block is one block."""
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    size = max(1, round(config.block_seconds * sample_rate))
    hop = max(1, round(config.hop_seconds * sample_rate))
    if len(x) == 0:
        return np.zeros(0)
    size = min(size, len(x))
    csum = np.concatenate([[0.0], np.cumsum(x * x)])
    starts = np.arange(0, len(x) - size + 1, hop)
    return (csum[starts + size] - csum[starts]) / size


def speech_blocks(powers: np.ndarray, config: LevelMatchConfig = LevelMatchConfig()) -> np.ndarray:
    """Which blocks (B,) are speech: above the absolute gate, and within the relative gate of their mean."""
    loud = powers > 10 ** (config.absolute_gate_db / 10)
    if not loud.any():
        return loud
    threshold = powers[loud].mean() * 10 ** (config.relative_gate_db / 10)
    return loud & (powers > threshold)


def speech_level_db(x: np.ndarray, sample_rate: int, over: np.ndarray | None = None,
                    config: LevelMatchConfig = LevelMatchConfig()) -> float:
    """RMS level (dBFS) of `x` over the speech of `over` (default: `x` itself); -inf when `over` has none."""
    reference = x if over is None else over
    n = min(len(x), len(reference))
    gate = speech_blocks(block_powers(reference[:n], sample_rate, config), config)
    powers = block_powers(x[:n], sample_rate, config)
    return _db(float(powers[gate].mean())) if gate.any() else -math.inf


def _oversampled(x: torch.Tensor, factor: int) -> torch.Tensor:
    return torchaudio.functional.resample(x, 1, factor) if factor > 1 and len(x) > 1 else x


def true_peak(x: np.ndarray, oversample: int = LevelMatchConfig.oversample) -> float:
    """The largest magnitude of `x` and of its `oversample`-times oversampled copy (between the samples)."""
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    if not len(t):
        return 0.0
    return max(float(t.abs().max()), float(_oversampled(t, oversample).abs().max()))


def limit_peaks(x: np.ndarray, sample_rate: int, config: LevelMatchConfig = LevelMatchConfig()) -> np.ndarray:
    """`x` with its gain lowered smoothly around every (true) peak above the ceiling; elsewhere untouched."""
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    ceiling = 10 ** (config.ceiling_db / 20)
    if not len(t) or true_peak(x, config.oversample) <= ceiling:
        return np.asarray(x, dtype=np.float32)
    k = config.oversample
    over = _oversampled(t, k).abs()[: len(t) * k]
    over = F.pad(over, (0, len(t) * k - len(over)))
    peak = torch.maximum(t.abs(), over.view(len(t), k).max(dim=1).values)  # (N,) each sample's neighbourhood
    need = (ceiling / peak.clamp(min=1e-12)).clamp(max=1.0)[None, None]  # (1, 1, N) the gain each sample needs
    w = max(1, round(config.limiter_seconds * sample_rate))
    held = -F.max_pool1d(-need, 2 * w + 1, stride=1, padding=w)  # running minimum over +-w
    gain = F.avg_pool1d(held, 2 * w + 1, stride=1, padding=w, count_include_pad=False)[0, 0]  # <= need everywhere
    y = (t * gain).numpy()
    overshoot = true_peak(y, config.oversample) / ceiling
    return (y / overshoot if overshoot > 1 else y).astype(np.float32)


def match_level(out: np.ndarray, reference: np.ndarray, sample_rate: int,
                config: LevelMatchConfig = LevelMatchConfig()) -> LevelMatch:
    """`out` (time-aligned with `reference`) at `reference`'s speech level, its true peak under the ceiling.
    Left as it is when `reference` has no speech (a muted microphone) or `out` is silent over it."""
    out = np.asarray(out, dtype=np.float32).reshape(-1)
    target = speech_level_db(reference, sample_rate, config=config)
    own = speech_level_db(out, sample_rate, over=reference, config=config)
    if not (math.isfinite(target) and math.isfinite(own)):
        return LevelMatch(limit_peaks(out, sample_rate, config), 0.0, 0.0, target, False)
    gain_db = target - own
    louder = out * np.float32(10 ** (gain_db / 20))
    limited = limit_peaks(louder, sample_rate, config)
    after = speech_level_db(limited, sample_rate, over=reference, config=config)
    return LevelMatch(limited, gain_db, max(0.0, target - after), target, True)
