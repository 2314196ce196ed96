"""The loudness stream beside the units (core/loudness.py): levels per unit, the resynthesis moved onto them, its
cost in bit/s."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core import loudness as L
from core.frontend_builder import FRAMES_PER_UNIT
from training.speech_eval import envelope_correlation

F = 40  # frequency bins in these toy spectrograms


def spectrogram_at(levels_db: list[float]) -> torch.Tensor:
    """Linear magnitudes (U * FRAMES_PER_UNIT, F) whose energy over all bins is levels_db[u] dB in unit u."""
    frames = torch.tensor(levels_db, dtype=torch.float64).repeat_interleave(FRAMES_PER_UNIT)
    per_bin = 10 ** (frames / 10) / F  # energy per bin
    return per_bin.sqrt().unsqueeze(1).expand(-1, F).float().clone()


def test_levels_are_steps_below_the_loudest_unit_and_silence_is_the_deepest() -> None:
    mag = spectrogram_at([0.0, -12.0, -24.0, -7.0, -200.0])
    assert L.unit_levels(mag, F).tolist() == [0, 2, 4, 1, 10]  # 6-dB steps; -7 dB rounds to one step; 60 dB is silence
    assert L.levels_of(L.frame_levels_db(mag, F)).tolist() == [0, 2, 4, 1, 10]
    coarse = L.LoudnessConfig(step_db=12.0)
    assert L.unit_levels(mag, F, coarse).tolist() == [0, 1, 2, 1, 5]
    assert L.levels_of(torch.zeros(0)).tolist() == []


def test_a_partial_last_unit_is_averaged_over_the_frames_it_has() -> None:
    frames = torch.tensor([0.0] * FRAMES_PER_UNIT + [-18.0])  # one whole unit, then one frame of the next
    assert L.unit_means(frames, FRAMES_PER_UNIT).tolist() == [0.0, -18.0]


def test_a_flat_resynthesis_takes_the_speech_envelope() -> None:
    target = spectrogram_at([-30.0, -6.0, 0.0, -18.0, -40.0, -12.0, -3.0, -50.0])
    flat = torch.ones_like(target) * 0.01  # the units alone carried no loudness
    assert envelope_correlation(flat, target, F) == 0.0
    moved = L.apply_levels(flat, L.unit_levels(target, F), F)
    assert envelope_correlation(moved, target, F) > 0.9  # a step target, a gain interpolated between centres
    own = L.unit_means(L.frame_levels_db(moved, F), FRAMES_PER_UNIT) - float(L.frame_levels_db(flat, F).max())
    # 6-dB steps below the resynthesis's own level, the gain interpolated between unit centres: a peak or a dip
    # between two neighbours is softened by them, the order of the units' levels is kept
    target_steps = np.array([-30.0, -6.0, 0.0, -18.0, -42.0, -12.0, -6.0, -48.0])
    assert np.allclose(own.numpy(), target_steps, atol=7.0) and float(own.max()) > -4.0
    assert (np.argsort(own.numpy(), kind="stable") == np.argsort(target_steps, kind="stable")).all()


def test_the_stream_costs_the_entropy_of_its_changes() -> None:
    assert L.stream_bits_per_second([torch.zeros(50, dtype=torch.long)], 2.0) == 0.0  # nothing ever changes
    alternating = torch.tensor([0, 1] * 25)  # changes +1, -1, ... (the first from 0 is +0): entropy ~1 bit each
    bps = L.stream_bits_per_second([alternating], 2.0)
    assert 24.0 < bps <= 50 * np.log2(3) / 2.0
    assert L.stream_bits_per_second([], 1.0) == 0.0


def test_digital_silence_is_the_deepest_level_even_where_nothing_is_louder() -> None:
    """A muted microphone (or all-NaN input, sanitised to zeros) is silence, not the loudest level: its
    resynthesis must not be raised to the resynthesis's loudest unit."""
    silent = torch.zeros(3 * FRAMES_PER_UNIT, F)
    assert L.unit_levels(silent, F).tolist() == [10, 10, 10]
    assert L.unit_levels(spectrogram_at([-200.0, -30.0]), F).tolist() == [10, 0]  # beside sound, as before
    pred = spectrogram_at([-20.0, 0.0, -40.0])
    moved = L.apply_levels(pred, L.unit_levels(silent, F), F)
    assert float(L.frame_levels_db(moved, F).max()) < float(L.frame_levels_db(pred, F).max()) - 40


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device"))])
def test_the_resynthesis_is_moved_on_the_device_it_is_on(device: str) -> None:
    """The Units tab's model runs on the chosen device (CUDA by default where there is one): its magnitudes are
    moved there, the gain computed beside them."""
    target = spectrogram_at([0.0, -12.0, -30.0])
    pred = torch.ones_like(target).to(device)
    moved = L.apply_levels(pred, L.unit_levels(target, F).to(device), F)
    assert moved.device == pred.device and moved.shape == pred.shape
    assert torch.allclose(moved.cpu(), L.apply_levels(pred.cpu(), L.unit_levels(target, F), F))
