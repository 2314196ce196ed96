"""Which voice of a units model's speaker table fits a recording: the one whose resynthesis from the recording's
own units is closest to it in log-spectral distance.

An unseen speaker has no speaker embedding, so the inverter must speak with a table voice. The evaluation
(`training/speech_eval.py`) scores unseen voices with the voice `fitting_voice` picks, and the Units tab picks
the resynthesis voice the same way from the first second of speech: one rule, here, for both. With the voice comes
an envelope correction fitted on the same speech (`envelope_correction`): one smooth curve that moves the table
voice's long-term spectrum towards the speaker's (issue 41: it lowered the spectral distance on the dev sets).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

LSD_MAX_HZ = 4000.0  # spectral distance band: FSDD is recorded at 8 kHz, so nothing above 4 kHz is compared
DYNAMIC_RANGE_DB = 60.0  # magnitudes are floored this far below the recording's peak

Item = tuple[torch.Tensor, torch.Tensor]  # (unit ids (U,), the recording's linear magnitudes (T, F))


def lsd_bins(inverter_config: Any) -> int:  # noqa: ANN401 - models.inverter.InverterConfig
    """How many FFT bins of the inverter's spectrogram lie in 0..LSD_MAX_HZ."""
    c = inverter_config
    return int(LSD_MAX_HZ / (c.sample_rate / c.n_fft)) + 1


def magnitude_floor(target: torch.Tensor, max_bin: int, dynamic_range_db: float = DYNAMIC_RANGE_DB) -> float:
    """`dynamic_range_db` below the recording's peak magnitude in bins 0..max_bin (never 0)."""
    return float(target[:, :max_bin].max()) * 10 ** (-dynamic_range_db / 20) + 1e-12


def log_spectral_distance(pred: torch.Tensor, target: torch.Tensor, max_bin: int,
                          dynamic_range_db: float = DYNAMIC_RANGE_DB) -> float:
    """RMS dB difference between magnitudes (T, F) over bins 0..max_bin, averaged over frames. Both are
    floored at `dynamic_range_db` below the recording's peak, so silence and the empty band above 4 kHz of
    8-kHz recordings do not dominate."""
    floor = magnitude_floor(target, max_bin, dynamic_range_db)
    p = 20 * torch.log10(pred[:, :max_bin].float().clamp(min=floor))
    t = 20 * torch.log10(target[:, :max_bin].float().clamp(min=floor))
    return float((p - t).square().mean(dim=1).sqrt().mean())


@torch.no_grad()
def voice_distances(model: Any, items: Sequence[Item]) -> list[float]:  # noqa: ANN401 - models.units.UnitsModel
    """Mean log-spectral distance of `items` resynthesised in each table voice, one number per voice (NaN when
    no item has a unit). All voices of an item go through the inverter as one batch: one call, not one each."""
    n_voices = model.config.inverter.n_speakers
    max_bin = lsd_bins(model.config.inverter)
    voices = torch.arange(n_voices, device=next(model.parameters()).device)
    per_item: list[list[float]] = []
    for codes, mag in items:
        codes = codes[codes >= 0]
        if not len(codes):
            continue
        vectors = model.vqvae.code_vectors(codes.to(voices.device)).unsqueeze(0)  # (1, U, C)
        vectors = vectors.expand(n_voices, -1, -1)  # (V, U, C): the same units in every voice
        preds, _ = model.inverter(vectors, voices, num_frames=len(mag))  # (V, T, F)
        per_item.append([log_spectral_distance(p.to(mag.device), mag, max_bin) for p in preds])
    if not per_item:
        return [float("nan")] * n_voices
    return torch.tensor(per_item, dtype=torch.float64).mean(dim=0).tolist()


def fitting_voice(model: Any, items: Sequence[Item]) -> int:  # noqa: ANN401 - models.units.UnitsModel
    """Index of the table voice whose resynthesis of `items` is closest to them (0 when nothing can be scored)."""
    distances = voice_distances(model, items)
    scored = [(d, k) for k, d in enumerate(distances) if d == d]  # NaN != NaN: no item had a unit
    return min(scored)[1] if scored else 0


@dataclass(frozen=True)
class EnvelopeConfig:
    """The spectral envelope correction that goes with a fitted voice (`envelope_correction`); chosen on the dev
    set (FSDD test without theo): lifters 12, 20 and 30 tried, 30 lowest (docs/units.md)."""

    lifter: int = 30  # cepstral coefficients kept: a smooth curve (1.9 ms quefrency: formant-wide, not harmonics)
    max_db: float = 20.0  # the correction never moves a bin by more than this
    speech_db: float = 40.0  # frames within this of the loudest frame (0-4 kHz) are the speech it is fitted on


def _mean_log_magnitude(mag: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
    """(F,) mean over `frames` of ln magnitude, floored DYNAMIC_RANGE_DB under the spectrogram's own peak."""
    floor = float(mag.max()) * 10 ** (-DYNAMIC_RANGE_DB / 20) + 1e-12
    return torch.log(mag[frames].double().clamp(min=floor)).mean(dim=0)


def envelope_correction(pred: torch.Tensor, target: torch.Tensor, max_bin: int,
                        config: EnvelopeConfig = EnvelopeConfig()) -> torch.Tensor:
    """Per-bin gain (F,) that moves the average spectrum of a table voice's resynthesis `pred` (T, F) onto the
    recording's `target` (T, F), both linear magnitudes of the same frames: the difference of their mean
    ln-magnitude spectra over the recording's speech frames, less its mean over bins 0..max_bin (the level),
    smoothed by keeping `lifter` cepstral coefficients, clamped to +-max_db. A table voice says the words with its
    own formants and tilt (and a band the recording may lack: an 8-kHz line has nothing above 4 kHz); one curve per
    utterance brings them towards the speaker's without copying any frame. Ones when there is nothing to fit on.
    (The mean of the logs, not of the powers: a power mean follows the loudest vowels and raised the distance on
    the dev set.)"""
    n = min(len(pred), len(target))
    ones = torch.ones(pred.shape[-1], dtype=pred.dtype, device=pred.device)
    if n == 0:
        return ones
    pred, target = pred[:n].cpu(), target[:n].cpu()
    energy = target[:, :max_bin].double().square().sum(dim=1)  # (n,)
    if float(energy.max()) <= 0 or float(pred.max()) <= 0:
        return ones
    speech = energy > energy.max() * 10 ** (-config.speech_db / 10)
    diff = _mean_log_magnitude(target, speech) - _mean_log_magnitude(pred, speech)  # (F,) ln amplitude
    diff = diff - diff[:max_bin].mean()  # the shape only: the level is core/level_match.py's (and no clamp eats it)
    cep = torch.fft.irfft(diff)  # the curve's real cepstrum, (2F - 2,)
    quefrency = torch.arange(len(cep))
    cep[torch.minimum(quefrency, len(cep) - quefrency) > config.lifter] = 0
    smooth = torch.fft.rfft(cep).real[: len(diff)]
    limit = config.max_db / (20 / math.log(10))
    return torch.exp(smooth.clamp(-limit, limit)).to(ones.dtype).to(ones.device)
