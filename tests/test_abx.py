from __future__ import annotations

import itertools

import numpy as np
import pytest

from training.abx import (
    abx_error,
    angular_distance,
    bitrate,
    dtw_cost,
    dtw_distance,
    pairwise_dtw,
    triplet_errors,
    units_to_items,
)


def at_angle(deg: float) -> np.ndarray:
    """A one-frame item: the 2-D unit vector at `deg` degrees."""
    r = np.deg2rad(deg)
    return np.array([[np.cos(r), np.sin(r)]])


def brute_force_dtw(d: np.ndarray) -> float:
    """Enumerate every monotone path from (0, 0) to the end; the cheapest path's cost / its length."""
    Ta, Tb = d.shape
    best = (np.inf, 0)

    def walk(i: int, j: int, cost: float, n: int) -> None:
        nonlocal best
        cost, n = cost + d[i, j], n + 1
        if (i, j) == (Ta - 1, Tb - 1):
            best = min(best, (cost, n))
            return
        for di, dj in ((1, 1), (1, 0), (0, 1)):
            if i + di < Ta and j + dj < Tb:
                walk(i + di, j + dj, cost, n)

    walk(0, 0, 0.0, 0)
    return best[0] / best[1]


def test_angular_distance_hand_values():
    a = np.array([[1.0, 0.0], [0.0, 2.0], [-3.0, 0.0]])
    d = angular_distance(a, a[:1])[:, 0]
    np.testing.assert_allclose(d, [0.0, 0.5, 1.0], atol=1e-7)
    np.testing.assert_allclose(angular_distance(at_angle(0), at_angle(45)), [[0.25]], atol=1e-7)


def test_dtw_normalised_cost_hand_examples():
    assert dtw_cost(np.array([[0.0, 1.0], [1.0, 0.0]])) == 0.0  # the diagonal, free
    assert dtw_cost(np.array([[0.0, 0.5]])) == pytest.approx(0.25)  # path of length 2, cost 0.5
    assert dtw_cost(np.array([[1.0, 1.0], [1.0, 1.0]])) == pytest.approx(1.0)  # diagonal: 2 / 2
    # 3x2: the best path goes down, then diagonally: cells (0,0) (1,0) (2,1), cost 0.6 over 3 cells
    d = np.array([[0.2, 0.9], [0.1, 0.8], [0.7, 0.3]])
    assert dtw_cost(d) == pytest.approx((0.2 + 0.1 + 0.3) / 3)
    # identical sequences of different speeds: zero
    a = np.array([[1.0, 0.0], [0.0, 1.0]])
    b = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    assert dtw_distance(a, b) == pytest.approx(0.0, abs=1e-7)


def test_dtw_matches_brute_force_and_batches_with_padding():
    rng = np.random.default_rng(0)
    mats = [rng.random((rng.integers(1, 5), rng.integers(1, 6))) for _ in range(12)]
    for d in mats:
        assert dtw_cost(d) == pytest.approx(brute_force_dtw(d), abs=1e-12)
    Ta, Tb = max(m.shape[0] for m in mats), max(m.shape[1] for m in mats)
    padded = np.full((len(mats), Ta, Tb), 7.0)  # padding must not leak into the result
    for n, m in enumerate(mats):
        padded[n, : m.shape[0], : m.shape[1]] = m
    batched = dtw_cost(padded, [m.shape[0] for m in mats], [m.shape[1] for m in mats])
    np.testing.assert_allclose(batched, [brute_force_dtw(m) for m in mats], atol=1e-12)


def test_pairwise_dtw_equals_one_by_one():
    rng = np.random.default_rng(1)
    items = [rng.normal(size=(rng.integers(2, 9), 3)) for _ in range(7)]
    pairs = np.array(list(itertools.combinations(range(7), 2)))
    got = pairwise_dtw(items, pairs, batch=4)
    np.testing.assert_allclose(got, [dtw_distance(items[i], items[j]) for i, j in pairs], atol=1e-12)


def test_triplet_errors_ties_count_half():
    d_ax = np.array([[0.0, 0.3], [0.3, 0.0]])  # A = X excluded: triplets (A0, X1) and (A1, X0)
    d_bx = np.array([[0.3, 0.1]])  # X0: 0.3 vs 0.3 tie -> 1/2; X1: 0.3 > 0.1 -> error 1
    assert triplet_errors(d_ax, d_bx, same_ax=True) == pytest.approx(0.75)
    assert triplet_errors(np.array([[0.2]]), np.array([[0.1], [0.2], [0.3]]), same_ax=False) == pytest.approx(0.5)


def test_abx_hand_case_with_tie():
    # one speaker; word a: 0 and 45 degrees, word b: 90 degrees. (a, b) triplets:
    # X = a@45: d(A, X) = 0.25 = d(B, X) -> tie, 1/2;  X = a@0: d(A, X) = 0.25 < d(B, X) = 0.5 -> 0.
    # (b, a) has no cell (one b token cannot be both A and X). ABX = 0.25.
    items = [np.array([[1.0, 0.0]]), np.array([[1.0, 1.0]]), np.array([[0.0, 1.0]])]  # exact tie by symmetry
    assert abx_error(items, ["a", "a", "b"], ["s"] * 3, "within") == pytest.approx(0.25)


def test_abx_across_hand_case():
    items = [at_angle(0), at_angle(90), at_angle(10)]
    words, speakers = ["a", "b", "a"], ["s1", "s1", "s2"]
    assert abx_error(items, words, speakers, "across") == 0.0  # X = a@10 is nearer A = a@0
    items[2] = at_angle(80)
    assert abx_error(items, words, speakers, "across") == 1.0  # X = a@80 is nearer B = b@90


def test_abx_averages_cells_then_speakers_then_word_pairs():
    # s1: a and b well apart (every triplet right). s2: a tokens at 0 and 90 degrees, one b at 45 degrees,
    # so its (a, b) cell is all wrong and it has no (b, a) cell. Per word pair: (a, b) = mean(0, 1) = 0.5,
    # (b, a) = 0 (s1 only). Overall mean(0.5, 0) = 0.25, whatever the number of triplets per cell.
    s1 = [at_angle(d) for d in (0, 3, 6, 87, 90, 93)]
    s2 = [at_angle(d) for d in (0, 90, 45)]
    items = s1 + s2
    words = ["a", "a", "a", "b", "b", "b"] + ["a", "a", "b"]
    speakers = ["s1"] * 6 + ["s2"] * 3
    assert abx_error(items, words, speakers, "within") == pytest.approx(0.25)


def test_abx_separated_vs_indistinguishable():
    rng = np.random.default_rng(0)
    protos = np.eye(6)[:3]
    items, words, speakers = [], [], []
    for s in ("x", "y", "z"):
        for w in range(3):
            for _ in range(4):
                T = rng.integers(4, 10)
                items.append(protos[w] + 0.05 * rng.normal(size=(T, 6)))
                words.append(str(w))
                speakers.append(s)
    assert abx_error(items, words, speakers, "within") == 0.0
    assert abx_error(items, words, speakers, "across") == 0.0
    same = [np.ones((5, 6))] * len(items)  # all identical: every comparison ties
    assert abx_error(same, words, speakers, "within") == 0.5
    assert abx_error(same, words, speakers, "across") == 0.5
    noise = [rng.normal(size=(rng.integers(4, 10), 6)) for _ in items]
    assert abx_error(noise, words, speakers, "within") == pytest.approx(0.5, abs=0.1)


def test_abx_subsampling_is_seeded():
    rng = np.random.default_rng(3)
    items = [rng.normal(size=(5, 4)) for _ in range(24)]
    words = [str(i % 2) for i in range(24)]
    speakers = ["s"] * 24
    a = abx_error(items, words, speakers, max_items=4, seed=1)
    assert a == abx_error(items, words, speakers, max_items=4, seed=1)
    assert 0.0 <= a <= 1.0
    with pytest.raises(ValueError):
        abx_error(items, words, speakers, mode="sideways")


def test_units_to_items():
    one_hot = units_to_items([2, 0, -1, 2], codebook_size=4)
    np.testing.assert_array_equal(one_hot, [[0, 0, 1, 0], [1, 0, 0, 0], [0, 0, 1, 0]])
    codebook = np.arange(8.0).reshape(4, 2)
    np.testing.assert_array_equal(units_to_items([3, 1], codebook), [[6, 7], [2, 3]])
    # one-hot frames: same unit 0 apart, different units 1/2 apart
    assert dtw_distance(units_to_items([1, 1], codebook_size=3), units_to_items([1], codebook_size=3)) == 0.0
    assert dtw_distance(units_to_items([1], codebook_size=3), units_to_items([2], codebook_size=3)) == 0.5


def test_bitrate_hand_examples():
    # two equiprobable symbols at 25 Hz: 1 bit per symbol, 25 symbols per second
    assert bitrate([[0, 1] * 25], [2.0]) == pytest.approx(25.0)
    assert bitrate([[3] * 10], [1.0]) == 0.0  # one symbol carries no information
    # four symbols pooled over two utterances: H = 2 bits, 8 symbols in 2 s -> 8 bits/s
    assert bitrate([[0, 1, 2, 3], [3, 2, 1, 0]], [1.5, 0.5]) == pytest.approx(8.0)
    # pooled, not per utterance: each utterance alone has entropy 0, pooled 1 bit
    assert bitrate([[0, 0], [1, 1]], [1.0, 1.0]) == pytest.approx(4 / 2 * 1.0)


def test_abx_scores_keep_each_cell_per_speaker_of_a_and_b():
    """`cells`: (X speaker, word A, word B) -> one (error, triplets) per speaker A and B came from."""
    from training.abx import abx_scores

    # three voices; X = s3's "a" is near s1's a (right) and near s2's b (wrong)
    items = [at_angle(0), at_angle(90), at_angle(80), at_angle(40), at_angle(10), at_angle(0)]
    words = ["a", "b", "a", "b", "a", "b"]
    speakers = ["s1", "s1", "s2", "s2", "s3", "s3"]
    score = abx_scores(items, words, speakers, "across")
    assert sorted(score.cells[("s3", "a", "b")]) == [(0.0, 1), (1.0, 1)]  # from s1: right; from s2: wrong
    assert len(score.cells) == 6  # 3 X speakers x 2 ordered word pairs, each a list over the other 2 speakers
    assert all(len(v) == 2 for v in score.cells.values())
