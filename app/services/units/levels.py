"""The microphone's input level, as the Units tab's meter shows it (no Qt): the peak and RMS in dBFS of each
block the tab drains from the recorder, a held peak that stays HOLD_SECONDS and then falls, and clipping at
CLIP_DB and above. The caller passes the clock (`now`, seconds), so tests need no sleeping."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FLOOR_DB = -60.0  # the meter's bottom: anything quieter reads as this (digital silence would be -inf)
CLIP_DB = -1.0  # a peak within 1 dB of full scale: clipped, or too hot for any gain change to be safe
HOLD_SECONDS = 1.5  # a held peak stays put this long (time to read it), then falls
FALL_DB_PER_SECOND = 20.0  # ... at this rate, as common peak meters' hold does


def dbfs(amplitude: float) -> float:
    """Amplitude (1.0 = full scale) in dBFS, never below FLOOR_DB."""
    return max(FLOOR_DB, 20.0 * float(np.log10(max(amplitude, 1e-12))))


def block_level(block: np.ndarray) -> tuple[float, float]:
    """(peak, RMS) in dBFS of a block (n,) or (n, C) of float samples; (FLOOR_DB, FLOOR_DB) for an empty one."""
    x = np.asarray(block, dtype=np.float32)
    if x.size == 0:
        return FLOOR_DB, FLOOR_DB
    x = np.nan_to_num(x, nan=0.0, posinf=1.0, neginf=-1.0)  # the session counts these; the meter just reads them
    peak = float(np.abs(x).max())
    rms = float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))
    return dbfs(peak), dbfs(rms)


@dataclass
class InputLevel:
    """The meter's state: inactive (nothing to show) until `start`, updated once per drained block."""

    active: bool = False
    peak_db: float = FLOOR_DB
    rms_db: float = FLOOR_DB
    hold_db: float = FLOOR_DB
    _held_db: float = FLOOR_DB  # the peak the hold was last set to
    _held_at: float = 0.0  # ... and when

    def start(self, now: float) -> None:
        self._reset(active=True, now=now)

    def stop(self) -> None:
        self._reset(active=False, now=0.0)

    def _reset(self, active: bool, now: float) -> None:
        self.active = active
        self.peak_db = self.rms_db = self.hold_db = self._held_db = FLOOR_DB
        self._held_at = now

    def update(self, block: np.ndarray, now: float) -> None:
        """Take the samples drained since the last update. A tick that drained nothing keeps the last block's
        levels (the recorder's blocks and the GUI's ticks are not in step; reading that as silence would make
        the bars flicker) and only lets the hold fall."""
        if not self.active:
            return
        if len(block):
            self.peak_db, self.rms_db = block_level(block)
        if self.peak_db >= self._falling_hold(now):
            self._held_db, self._held_at = self.peak_db, now
        self.hold_db = max(self.peak_db, self._falling_hold(now))

    def _falling_hold(self, now: float) -> float:
        fall = max(0.0, now - self._held_at - HOLD_SECONDS) * FALL_DB_PER_SECOND
        return max(FLOOR_DB, self._held_db - fall)

    @property
    def clipping(self) -> bool:
        """The latest block's peak is at CLIP_DB or above."""
        return self.active and self.peak_db >= CLIP_DB

    @property
    def held_clipping(self) -> bool:
        """The held peak is at CLIP_DB or above: a clip in the last HOLD_SECONDS stays visible."""
        return self.active and self.hold_db >= CLIP_DB
