"""How the Search tab's preview plays a sound: faster or slower (varispeed, as sample browsers call it: speed and
pitch together, like a tape, in semitones) and backwards. Qt-free: the samples to play (core.audio's `varispeed`,
libsoxr) and the map between the file's time and the position in those samples, which the play head and
click-to-seek go through. Nothing here touches the file or an export: only what is heard.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.audio import varispeed

SEMITONES = 12  # the control's reach either way: an octave up (twice as fast) or down (half as fast)


@dataclass(frozen=True)
class Audition:
    """How to play: `semitones` up (faster) or down (slower), and whether backwards."""

    semitones: int = 0
    reverse: bool = False

    @property
    def ratio(self) -> float:
        """The speed: 2 ** (semitones / 12); 2 plays an octave up in half the time."""
        return 2.0 ** (self.semitones / 12)

    @property
    def plain(self) -> bool:
        """The file as it is: its own samples are played."""
        return self.semitones == 0 and not self.reverse

    def describe(self) -> str:
        """"backwards", "+3 semitones", "backwards, −5 semitones", "as recorded"."""
        st = f"{'+' if self.semitones > 0 else '−'}{abs(self.semitones)} semitones" if self.semitones else ""
        return ", ".join(w for w in ("backwards" if self.reverse else "", st) if w) or "as recorded"

    def samples(self, audio: np.ndarray) -> np.ndarray:
        """What plays for `audio` ((N,) or (N, C), from the part's or sound's start): reversed, then resampled to
        about N / ratio frames at the same rate; `audio` itself when plain."""
        if self.plain:
            return audio
        x = audio[::-1] if self.reverse else audio
        return varispeed(x, self.ratio)

    def position(self, seconds: float, start_s: float, end_s: float) -> float:
        """Where in the played samples (seconds) the file's time `seconds` is heard, for a part [start_s, end_s)."""
        into = (end_s - seconds) if self.reverse else (seconds - start_s)
        return min(max(into, 0.0), end_s - start_s) / self.ratio

    def file_time(self, position: float, start_s: float, end_s: float) -> float:
        """The file's time heard at `position` seconds into the played samples (the play head)."""
        into = min(max(position * self.ratio, 0.0), end_s - start_s)
        return end_s - into if self.reverse else start_s + into
