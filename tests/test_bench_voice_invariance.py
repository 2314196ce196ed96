"""bench/bench_voice_invariance.py: the same-word-other-voice rate and the per-voice mean removal (issue 41)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.bench_voice_invariance import invariance_rate, voice_mean_removed


def unit(rows: list[list[float]]) -> np.ndarray:
    x = np.asarray(rows, dtype=np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_rate_counts_same_word_other_voice_against_other_word_same_voice() -> None:
    # two voices, two words; voice A's "b" sits next to A's "a", so A's "a" prefers its own voice's other word
    emb = unit([[1, 0, 0], [0.9, 0.1, 0], [0.7, 0, 0.7], [0, 1, 0]])
    words, voices = ["a", "b", "a", "b"], ["A", "A", "B", "B"]
    rate, pairs = invariance_rate(emb, words, voices)
    assert pairs == 4  # each token: one same-word token in the other voice, one other word in its own voice
    sims = emb @ emb.T
    won = [sims[0, 2] > sims[0, 1], sims[1, 3] > sims[1, 0], sims[2, 0] > sims[2, 3], sims[3, 1] > sims[3, 2]]
    assert rate == pytest.approx(np.mean(won)) and 0 < rate < 1


def test_voice_mean_removal_takes_out_a_shift_shared_by_a_voice() -> None:
    rng = np.random.default_rng(0)
    words = rng.standard_normal((5, 16))
    shift = 3 * rng.standard_normal(16)  # voice B adds the same large offset to every word
    emb = unit(np.concatenate([words, words + shift]).tolist())
    labels, voices = list("abcde") * 2, ["A"] * 5 + ["B"] * 5
    assert invariance_rate(emb, labels, voices)[0] < 0.5
    fixed = voice_mean_removed(emb, voices, emb.mean(axis=0))
    assert np.allclose(np.linalg.norm(fixed, axis=1), 1.0)
    assert invariance_rate(fixed, labels, voices)[0] > 0.8
