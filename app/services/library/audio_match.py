"""Whether two files hold the same recording, from their audio (the check behind "Find duplicates").

A file's *print* is its log band energies: decoded mono at 16 kHz (so that another sample rate, bit depth or
lossless format reads alike; what a 22-kHz copy lacks above 8 kHz is never compared), 25-ms frames every 10 ms,
32 log-spaced bands from 50 Hz to 8 kHz, in dB. Two prints *match* by the lesser of two Pearson correlations of
their overlapping frames (of the dB values, and of the dB values less each band's mean: the spectrum, and its
course in time), at the best of the lags of up to MAX_LAG_S (a copy trimmed at its start slides into place); a
level change adds a constant to every dB value, which both correlations ignore. Frames silent in both are left
out (60 dB below each print's own peak), so that two quiet tails do not agree for them, and what is below that
floor in a band counts as the floor. A click of a few tens of milliseconds has too few frames for either print to
say anything: two such clicks are compared by their samples (the best normalised cross-correlation at 16 kHz).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.audio import decode

RATE = 16_000
FRAME, HOP = 400, 160  # 25 ms, 10 ms
BANDS, LOW_HZ, HIGH_HZ = 32, 50.0, 8_000.0
MAX_LAG_S = 0.2
MIN_FRAMES = 6  # loud frames of each compared at the least: over two or three, unrelated blips correlate
FINE_BELOW_S = 1.0  # a sound shorter than this is compared on a finer print too (a 0.1-s blip has 10 frames)
FINE_FRAME, FINE_HOP = 160, 40  # 10 ms, 2.5 ms
MAX_SECONDS = 60.0  # read at most this much of each file (a duplicate's start already says it)
WAVE_BELOW_S = 0.1  # a sound shorter than this keeps its samples: its prints may be too short to say
MIN_WAVE_SHARE = 0.5  # the shorter click holds at least this share of the longer one's samples
SILENT_DB = 60.0
FLOOR_DB = -100.0


@dataclass(frozen=True)
class Print:
    bands: np.ndarray  # (T, BANDS) dB
    seconds: float
    fine: np.ndarray | None = None  # (T', BANDS) dB at FINE_HOP, for a sound shorter than FINE_BELOW_S
    wave: np.ndarray | None = None  # (N,) at RATE, for a sound shorter than WAVE_BELOW_S


def audio_print(path: str, max_seconds: float = MAX_SECONDS) -> Print:
    """The file's print (AudioError/OSError as decode raises them)."""
    d = decode(path, RATE, duration=max_seconds)
    return print_of(d.audio, d.duration)


def print_of(audio: np.ndarray, seconds: float) -> Print:
    """(N,) mono at RATE -> its print."""
    fine = band_db(audio, FINE_FRAME, FINE_HOP) if seconds < FINE_BELOW_S else None
    wave = np.asarray(audio, dtype=np.float32) if seconds < WAVE_BELOW_S else None
    return Print(band_db(audio), seconds, fine, wave)


def band_db(audio: np.ndarray, frame: int = FRAME, hop: int = HOP) -> np.ndarray:
    """(N,) mono at RATE -> (T, BANDS) band energies in dB (T >= 1: a short file is zero-padded to one frame)."""
    x = np.asarray(audio, dtype=np.float32)
    if len(x) < frame:
        x = np.pad(x, (0, frame - len(x)))
    frames = np.lib.stride_tricks.sliding_window_view(x, frame)[::hop] * np.hanning(frame).astype(np.float32)
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2  # (T, F)
    freqs = np.fft.rfftfreq(frame, 1 / RATE)
    edges = np.geomspace(LOW_HZ, HIGH_HZ, BANDS + 1)
    which = np.searchsorted(edges, freqs, side="right") - 1  # (F,) band of each bin, -1 / BANDS outside
    inside = (which >= 0) & (which < BANDS)
    bands = np.zeros((len(power), BANDS), dtype=np.float64)
    np.add.at(bands.T, which[inside], power[:, inside].T)
    return np.maximum(10 * np.log10(bands + 1e-12), FLOOR_DB).astype(np.float32)


def match(a: Print, b: Print, max_lag_s: float = MAX_LAG_S) -> float:
    """How alike two prints are, -1..1: the best correlation over lags (1: the same sound, at any level); two
    short sounds are compared on their fine prints. -1 when too little of them is loud to say."""
    if a.fine is not None and b.fine is not None:
        said = _match(a.fine, b.fine, round(max_lag_s * RATE / FINE_HOP))
    else:
        said = _match(a.bands, b.bands, round(max_lag_s * RATE / HOP))
    if said == -1.0 and a.wave is not None and b.wave is not None:
        return wave_match(a.wave, b.wave, round(max_lag_s * RATE))
    return said


def wave_match(a: np.ndarray, b: np.ndarray, max_lag: int) -> float:
    """Two clicks' samples alike, -1..1: the best |normalised cross-correlation| within +-max_lag samples, over
    the whole of both (a part of the other's samples scores its share of the energy). -1 when one is much shorter
    than the other, or silent."""
    if min(len(a), len(b)) < MIN_WAVE_SHARE * max(len(a), len(b)):
        return -1.0
    den = float(np.sqrt((a.astype(np.float64) ** 2).sum() * (b.astype(np.float64) ** 2).sum()))
    if den < 1e-12:
        return -1.0
    n = 1 << int(np.ceil(np.log2(len(a) + len(b))))
    xc = np.fft.irfft(np.fft.rfft(a, n) * np.conj(np.fft.rfft(b, n)), n)  # (n,) lag k at k, lag -k at n - k
    lags = np.concatenate([xc[:max_lag + 1], xc[n - max_lag:]]) if max_lag < n // 2 else xc
    return float(np.abs(lags).max() / den)


def _match(a: np.ndarray, b: np.ndarray, max_lag: int) -> float:
    floor_a, floor_b = float(a.max()) - SILENT_DB, float(b.max()) - SILENT_DB  # each its own: level-invariant
    best = -1.0
    for lag in range(-max_lag, max_lag + 1):
        x, y = _overlap(a, b, lag)
        if len(x) < max(1, min(len(a), len(b)) // 2):
            continue  # too little overlap to say anything
        loud_x, loud_y = x.max(axis=1) > floor_a, y.max(axis=1) > floor_b
        if min(loud_x.sum(), loud_y.sum()) < MIN_FRAMES:
            continue
        loud = loud_x | loud_y
        # below the floor is silence: a resampler's or a codec's -90 dB residue is not a difference
        x, y = np.maximum(x[loud], floor_a), np.maximum(y[loud], floor_b)
        shape = _pearson(x.ravel(), y.ravel())  # the spectra alike
        # and their course in time: each band's mean removed (two sounds of one spectral tilt agree on that alone,
        # two steady tones of other pitches on their edges alone)
        course = _pearson((x - x.mean(axis=0)).ravel(), (y - y.mean(axis=0)).ravel())
        best = max(best, min(shape, course))
    return best


def _overlap(a: np.ndarray, b: np.ndarray, lag: int) -> tuple[np.ndarray, np.ndarray]:
    """The frames of a and b that meet when b starts `lag` frames later than a (negative: earlier)."""
    if lag >= 0:
        a = a[lag:]
    else:
        b = b[-lag:]
    n = min(len(a), len(b))
    return a[:n], b[:n]


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    x, y = x - x.mean(), y - y.mean()
    den = float(np.sqrt((x * x).sum() * (y * y).sum()))
    return float((x * y).sum() / den) if den > 1e-9 else (1.0 if np.allclose(x, y) else 0.0)
