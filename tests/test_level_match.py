"""core/level_match.py: a resynthesis brought to its input's speech level, never over the true-peak ceiling."""

from __future__ import annotations

import numpy as np
import pytest

from core.level_match import LevelMatchConfig, limit_peaks, match_level, speech_level_db, true_peak

RATE = 16000
CEILING = 10 ** (LevelMatchConfig().ceiling_db / 20)


def db(x: np.ndarray) -> float:
    return 20 * float(np.log10(np.sqrt(np.mean(np.square(x, dtype=np.float64)))))


def syllables(seconds: float = 2.0, amplitude: float = 0.2, seed: int = 0) -> np.ndarray:
    """Noise bursts shaped like syllables (~4 a second), speech-like in level and crest factor."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    envelope = np.clip(np.sin(2 * np.pi * 2 * t), 0, None) ** 2
    return (amplitude * envelope * rng.standard_normal(len(t))).astype(np.float32)


def test_the_level_is_the_speechs_not_the_silences() -> None:
    speech = syllables()
    room = 0.001 * np.random.default_rng(9).standard_normal(3 * RATE).astype(np.float32)  # -60 dBFS: not silent
    padded = np.concatenate([room, speech, room])
    assert db(padded) < db(speech) - 4  # plain RMS: the pauses drag it down
    assert speech_level_db(padded, RATE) == pytest.approx(speech_level_db(speech, RATE), abs=1.0)
    assert speech_level_db(np.zeros(RATE, np.float32), RATE) == -np.inf


def test_a_quiet_copy_is_brought_to_the_inputs_level_over_its_speech() -> None:
    speech = np.concatenate([np.zeros(RATE, np.float32), syllables(), np.zeros(RATE, np.float32)])
    quiet = 0.1 * syllables(seed=1) * (np.abs(syllables(seed=0)) > 0)  # other samples, same syllables, -20 dB
    quiet = np.concatenate([np.zeros(RATE, np.float32), quiet, 0.001 * np.ones(RATE, np.float32)])
    got = match_level(quiet, speech, RATE)
    assert got.matched and got.gain_db == pytest.approx(20.0, abs=1.5) and got.limited_db < 0.05
    assert speech_level_db(got.audio, RATE, over=speech) == pytest.approx(speech_level_db(speech, RATE), abs=0.05)


def test_a_hot_input_never_clips_its_resynthesis_and_the_guard_costs_little_level() -> None:
    """The input peaks at -0.5 dBFS; its 'resynthesis' has a crest factor 6 dB higher (Griffin-Lim's phase): one
    gain would put its peaks 5.5 dB over full scale. The limiter takes only the peaks down."""
    speech = syllables(amplitude=0.3)
    speech *= 0.944 / np.abs(speech).max()
    spiky = syllables(amplitude=0.3, seed=2)
    spiky[::800] *= 4.0  # sparse spikes
    got = match_level(0.05 * spiky, speech, RATE)
    assert true_peak(got.audio) <= CEILING + 1e-6 and np.abs(got.audio).max() < 1.0
    assert got.matched and 0.0 < got.limited_db < 1.0
    level = speech_level_db(got.audio, RATE, over=speech)
    assert level == pytest.approx(speech_level_db(speech, RATE), abs=1.0)


def test_the_limiter_leaves_quiet_audio_alone_and_catches_peaks_between_samples() -> None:
    quiet = syllables(amplitude=0.05)
    np.testing.assert_array_equal(limit_peaks(quiet, RATE), quiet)
    n = np.arange(RATE)
    tone = np.sin(2 * np.pi * (RATE / 4) * n / RATE + np.pi / 4).astype(np.float32)  # samples at +-0.707: peaks
    # between them reach 1.0
    assert np.abs(tone).max() < 0.75 and true_peak(tone) > 0.95
    assert true_peak(limit_peaks(tone, RATE)) <= CEILING + 1e-6


def test_no_speech_to_match_leaves_the_resynthesis_as_it_is() -> None:
    out = syllables(amplitude=0.01)
    for reference in (np.zeros(len(out), np.float32), np.full(len(out), 1e-5, np.float32)):  # muted, -100 dBFS
        got = match_level(out, reference, RATE)
        assert not got.matched and got.gain_db == 0.0
        np.testing.assert_array_equal(got.audio, out)
    silent = match_level(np.zeros(len(out), np.float32), syllables(), RATE)  # nothing to raise
    assert not silent.matched and not silent.audio.any()
    assert match_level(np.zeros(0, np.float32), np.zeros(0, np.float32), RATE).audio.shape == (0,)
