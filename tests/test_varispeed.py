"""Varispeed and Reverse for auditioning (app/services/search/audition.py, core.audio.varispeed): the samples
played and the map between the file's time and the position in them."""

from __future__ import annotations

import numpy as np
import pytest

from app.services.search.audition import Audition
from core.audio import varispeed

SR = 48000


def tone(hz: float, seconds: float, channels: int = 1) -> np.ndarray:
    x = (0.5 * np.sin(2 * np.pi * hz * np.arange(round(seconds * SR)) / SR)).astype(np.float32)
    return np.stack([x, -x], axis=1) if channels == 2 else x


def crossings_hz(x: np.ndarray) -> float:
    """A tone's frequency from its rising zero crossings (away from the resampler's edges)."""
    x = x[len(x) // 10:-len(x) // 10]
    up = np.flatnonzero((x[:-1] < 0) & (x[1:] >= 0))
    return (len(up) - 1) * SR / (up[-1] - up[0])


@pytest.mark.parametrize("semitones", [12, 7, 1, -1, -5, -12])
def test_varispeed_moves_pitch_and_length_together_by_the_ratio(semitones: int) -> None:
    x = tone(440, 1.0, channels=2)
    ratio = 2 ** (semitones / 12)
    y = varispeed(x, ratio)
    assert y.dtype == np.float32 and y.shape[1] == 2
    assert len(y) == pytest.approx(len(x) / ratio, abs=2)
    assert crossings_hz(y[:, 0]) == pytest.approx(440 * ratio, rel=1e-3)
    np.testing.assert_allclose(y[:, 1], -y[:, 0], atol=1e-6)  # the channels kept apart


def test_varispeed_at_1_is_the_samples_and_a_bad_ratio_is_refused() -> None:
    x = tone(440, 0.1)
    assert varispeed(x, 1.0) is x
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="speed ratio"):
            varispeed(x, bad)


def test_audition_samples_are_reversed_then_resampled_and_plain_is_the_array_itself() -> None:
    x = tone(300, 0.5) * np.linspace(0, 1, SR // 2, dtype=np.float32)  # a swell: its reverse is a fade
    assert Audition().samples(x) is x and Audition().plain
    assert np.array_equal(Audition(reverse=True).samples(x), x[::-1])
    down = Audition(-12, reverse=True).samples(x)
    assert len(down) == pytest.approx(2 * len(x), abs=2)
    assert np.abs(down[:SR // 10]).max() > 5 * np.abs(down[-SR // 10:]).max()  # loud first: played backwards


@pytest.mark.parametrize("how", [Audition(), Audition(12), Audition(-7, True), Audition(0, True)])
def test_file_time_and_position_map_both_ways(how: Audition) -> None:
    start, end = 2.0, 6.0
    for t in (2.0, 3.25, 6.0):
        assert how.file_time(how.position(t, start, end), start, end) == pytest.approx(t)
    first = end if how.reverse else start  # what is heard at the first sample played
    assert how.file_time(0.0, start, end) == first
    assert how.position(9.0, start, end) == pytest.approx((0.0 if how.reverse else 4.0) / how.ratio)  # clamped


def test_audition_says_what_it_does() -> None:
    assert [a.describe() for a in (Audition(), Audition(3), Audition(-5, True), Audition(0, True))] == [
        "as recorded", "+3 semitones", "backwards, −5 semitones", "backwards"]
