"""The Units tab's input level (app/services/units/levels.py): dBFS peak and RMS per block, peak hold, clipping."""

from __future__ import annotations

import numpy as np
import pytest

from app.services.units.levels import CLIP_DB, FALL_DB_PER_SECOND, FLOOR_DB, HOLD_SECONDS, InputLevel, block_level


def sine(amplitude: float, n: int = 1600) -> np.ndarray:
    return (amplitude * np.sin(2 * np.pi * 440 * np.arange(n) / 16000)).astype(np.float32)


def test_block_level_in_dbfs() -> None:
    peak, rms = block_level(sine(0.5))
    assert peak == pytest.approx(-6.02, abs=0.05) and rms == pytest.approx(-9.03, abs=0.05)  # a sine: peak/√2
    assert block_level(np.zeros(512, np.float32)) == (FLOOR_DB, FLOOR_DB)  # digital silence: the floor, not -inf
    assert block_level(np.zeros((0, 1), np.float32)) == (FLOOR_DB, FLOOR_DB)
    assert block_level(sine(0.5).reshape(-1, 1))[0] == pytest.approx(peak)  # (n, C) as the recorder drains it


def test_clipping_from_minus_one_dbfs() -> None:
    level = InputLevel()
    level.start(0.0)
    level.update(sine(0.88), 0.0)  # -1.1 dBFS
    assert not level.clipping and level.peak_db < CLIP_DB
    level.update(sine(0.9), 0.1)  # -0.9 dBFS
    assert level.clipping and level.held_clipping


def test_the_held_peak_stays_then_falls_and_an_empty_tick_keeps_the_levels() -> None:
    level = InputLevel()
    level.update(sine(0.5), 0.0)
    assert not level.active and level.peak_db == FLOOR_DB  # not started: nothing to show
    level.start(0.0)
    level.update(sine(0.5), 0.0)
    level.update(sine(0.05), 0.5)  # -26 dB: the bars drop, the hold stays
    assert level.peak_db == pytest.approx(-26.0, abs=0.1) and level.hold_db == pytest.approx(-6.02, abs=0.05)
    level.update(np.zeros(0, np.float32), 0.6)  # nothing drained this tick: the last block's levels stay
    assert level.peak_db == pytest.approx(-26.0, abs=0.1)
    level.update(sine(0.05), HOLD_SECONDS + 0.5)  # half a second into the fall
    assert level.hold_db == pytest.approx(-6.02 - 0.5 * FALL_DB_PER_SECOND, abs=0.05)
    level.update(sine(0.05), HOLD_SECONDS + 10)  # fallen to the current peak, never below it
    assert level.hold_db == pytest.approx(level.peak_db)
    level.update(sine(0.9), 20.0)  # a new high sets the hold at once
    assert level.hold_db == pytest.approx(level.peak_db) and level.held_clipping
    level.update(sine(0.05), 20.5)
    assert level.held_clipping and not level.clipping  # the clip stays visible for a while
    level.stop()
    assert not level.active and level.hold_db == FLOOR_DB and not level.held_clipping
