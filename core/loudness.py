"""A loudness stream beside the units: one coarse level per unit, so that a resynthesis rises and falls with the
speech even where the units carry little loudness.

Discrete-unit resynthesis commonly sends prosody beside the units (Polyak et al. 2021, "Speech Resynthesis from
Discrete Disentangled Self-Supervised Representations": units + quantised F0 + a speaker). Units learnt over the
pretrained speech front end tell words apart far better than MFCC units but carry little loudness (docs/
speech-eval.md, issue 26), and rebuilding the energy in the VQ-VAE costs them that edge. Here each unit gets the
recording's level over 0-4 kHz (dB below the utterance's loudest unit) quantised to `step_db`; the resynthesis's
own level per unit is moved onto it by a gain that is interpolated between unit centres (no steps at unit
boundaries). The stream is causal: a unit's level is known when the unit is.

`stream_bits_per_second` is the stream's cost beside the units' bitrate: the empirical entropy of its level changes
(most units keep their neighbour's level).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from core.frontend_builder import FRAMES_PER_UNIT

STEP_DB = 6.0  # one level per 6 dB: coarse enough to cost little, fine enough for syllables (10 levels in 60 dB)
RANGE_DB = 60.0  # levels below the utterance's loudest unit by more than this are silence (the lowest level)
FLOOR_ENERGY = 1e-20  # frame_levels_db's floor: a frame of digital zeros is at 10·log10 of it (-200 dB)
SILENT_DB = 10 * math.log10(FLOOR_ENERGY) + 1.0  # a unit this close to the floor is digital silence, whatever
# else the utterance holds (a muted microphone, input that was all NaN): the deepest level, not the loudest


@dataclass(frozen=True)
class LoudnessConfig:
    step_db: float = STEP_DB
    range_db: float = RANGE_DB
    frames_per_unit: int = FRAMES_PER_UNIT


def frame_levels_db(mag: torch.Tensor, max_bin: int) -> torch.Tensor:
    """Energy over bins 0..max_bin of linear magnitudes (T, F), in dB (T,) (tiny energies clamped)."""
    return 10 * torch.log10(mag[:, :max_bin].float().square().sum(dim=1).clamp(min=FLOOR_ENERGY))


def unit_means(values: torch.Tensor, frames_per_unit: int) -> torch.Tensor:
    """Per-frame values (T,) averaged over each unit's frames (U,), U = ceil(T / frames_per_unit)."""
    units = -(-len(values) // frames_per_unit)
    pad = units * frames_per_unit - len(values)
    padded = torch.cat([values, values[-1:].expand(pad)]) if pad else values
    return padded.view(units, frames_per_unit).mean(dim=1)


def unit_levels(mag: torch.Tensor, max_bin: int, config: LoudnessConfig = LoudnessConfig()) -> torch.Tensor:
    """The stream: the recording's level per unit (U,) as an integer number of steps below its loudest unit,
    0..range_db / step_db (the deepest level is silence: also every unit of digital zeros, so an utterance that is
    all silence is all the deepest level)."""
    return levels_of(frame_levels_db(mag, max_bin), config)


def levels_of(frame_db: torch.Tensor, config: LoudnessConfig = LoudnessConfig()) -> torch.Tensor:
    """Per-frame levels in dB (T,) -> the stream (U,) (see unit_levels)."""
    if not len(frame_db):
        return torch.zeros(0, dtype=torch.long)
    db = unit_means(frame_db, config.frames_per_unit)  # (U,)
    below = (db.max() - db).clamp(max=config.range_db)
    below[db < SILENT_DB] = config.range_db  # silence is silence even where no unit is louder
    return torch.round(below / config.step_db).long()


def apply_levels(pred: torch.Tensor, levels: torch.Tensor, max_bin: int,
                 config: LoudnessConfig = LoudnessConfig()) -> torch.Tensor:
    """The resynthesis's magnitudes (T, F) with each unit moved to its level of the stream (relative to the
    resynthesis's own loudest unit), the gain interpolated linearly between unit centres."""
    own = unit_means(frame_levels_db(pred, max_bin).cpu(), config.frames_per_unit)  # (U,) on the CPU, as the gain
    levels = levels.cpu()  # (pred may be on the model's device; the gain is interpolated with NumPy, then moved)
    n = min(len(own), len(levels))
    if n == 0:
        return pred
    target = own[:n].max() - levels[:n].float() * config.step_db
    gain_db = (target - own[:n]).clamp(min=-config.range_db, max=config.range_db)  # (n,)
    centres = (torch.arange(n, dtype=torch.float64) + 0.5) * config.frames_per_unit - 0.5
    frames = np.arange(len(pred), dtype=np.float64)
    per_frame = np.interp(frames, centres.numpy(), gain_db.double().numpy())  # (T,), flat beyond the ends
    gain = torch.from_numpy(10 ** (per_frame / 20)).to(pred.dtype).to(pred.device)
    return pred * gain.unsqueeze(1)


def stream_bits_per_second(levels: list[torch.Tensor], seconds: float) -> float:
    """The stream's cost: empirical entropy (bits) of the level changes from unit to unit (the first level of
    each utterance counted as a change from 0), over all units, per second of audio."""
    changes = [torch.diff(lv, prepend=lv.new_zeros(1)) for lv in levels if len(lv)]
    if not changes or seconds <= 0:
        return 0.0
    _, counts = torch.unique(torch.cat(changes), return_counts=True)
    p = counts.double() / counts.sum()
    return -float((p * torch.log2(p)).sum()) * int(counts.sum()) / seconds
