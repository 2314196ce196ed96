"""Word-discrimination metrics for acoustic word embeddings: average precision over ranked pairs, and the
MFCC + DTW baseline. numpy only.

Average precision follows the step-wise definition used by scikit-learn: AP = Σ_n (R_n - R_{n-1}) P_n over
the distinct score thresholds, highest first. Tied scores form one threshold, so the result does not
depend on how ties happen to be ordered (it lies between the optimistic and pessimistic orderings). A list
without positives has no AP: the functions return NaN there.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def average_precision(scores: np.ndarray, labels: np.ndarray) -> float:
    """AP of a ranking by `scores` (higher = more similar) against boolean `labels` (True = positive)."""
    scores = np.asarray(scores, dtype=np.float64).ravel()
    labels = np.asarray(labels).astype(bool).ravel()
    if scores.shape != labels.shape:
        raise ValueError(f"scores {scores.shape} and labels {labels.shape} differ in length")
    if np.isnan(scores).any():
        raise ValueError("scores contain NaN")
    n_pos = int(labels.sum())
    if n_pos == 0:
        return float("nan")
    order = np.argsort(-scores, kind="stable")
    s, y = scores[order], labels[order]
    tp = np.cumsum(y)  # (N,) true positives down to each rank
    last = np.r_[np.flatnonzero(s[1:] != s[:-1]), len(s) - 1]  # last rank of each tie group
    tp_at, n_at = tp[last], last + 1
    precision = tp_at / n_at
    recall_gain = np.diff(np.r_[0, tp_at]) / n_pos
    return float(np.sum(recall_gain * precision))


def _unit_rows(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def word_discrimination_ap(embeddings: np.ndarray, words: Sequence[object]) -> float:
    """Same-different AP: every pair of tokens i < j ranked by cosine similarity; same word = positive."""
    e = _unit_rows(embeddings)  # (N, D)
    words = np.asarray(words)
    if len(words) != len(e):
        raise ValueError(f"{len(e)} embeddings but {len(words)} words")
    i, j = np.triu_indices(len(e), k=1)
    sims = np.einsum("nd,nd->n", e[i], e[j]) if len(i) else np.zeros(0)
    return average_precision(sims, words[i] == words[j])


def cross_view_ap(
    acoustic_emb: np.ndarray,
    acoustic_words: Sequence[object],
    written_emb: np.ndarray,
    written_words: Sequence[object],
) -> float:
    """Every acoustic token against every distinct written word, ranked by cosine; a match is positive.

    Repeated written words are kept once (the first row), so a word is not counted twice.
    """
    a = _unit_rows(acoustic_emb)  # (Na, D)
    w = _unit_rows(written_emb)  # (Nw, D)
    aw, ww = np.asarray(acoustic_words), np.asarray(written_words)
    if len(aw) != len(a) or len(ww) != len(w):
        raise ValueError("each embedding needs exactly one word")
    _, first = np.unique(ww, return_index=True)
    first = np.sort(first)
    w, ww = w[first], ww[first]
    sims = a @ w.T  # (Na, Nw)
    return average_precision(sims.ravel(), (aw[:, None] == ww[None, :]).ravel())


def cosine_cost(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(Ta, D), (Tb, D) -> (Ta, Tb) frame-wise cosine distance 1 - cos (a zero frame is at distance 1)."""
    return 1.0 - _unit_rows(a) @ _unit_rows(b).T


def dtw_distance(a: np.ndarray, b: np.ndarray) -> float:
    """DTW cost on frame-wise cosine distance, divided by the length of the best path.

    Steps (1,0), (0,1), (1,1), path from (0,0) to (Ta-1,Tb-1). The path minimises the summed cost; among
    equal-cost predecessors the diagonal wins (the shorter path). Cells are filled one anti-diagonal at a
    time, each diagonal vectorised.
    """
    C = cosine_cost(np.atleast_2d(a), np.atleast_2d(b))  # (n, m)
    n, m = C.shape
    if n == 0 or m == 0:
        raise ValueError("dtw_distance needs at least one frame in each sequence")
    # padded tables: row/col 0 are the start (D[0,0] = 0) and walls (inf)
    D = np.full((n + 1, m + 1), np.inf)
    L = np.zeros((n + 1, m + 1), dtype=np.int64)
    D[0, 0] = 0.0
    for d in range(2, n + m + 1):  # padded i + j
        i = np.arange(max(1, d - m), min(n, d - 1) + 1)
        j = d - i
        prev = np.stack([D[i - 1, j - 1], D[i - 1, j], D[i, j - 1]])  # (3, cells): diag, up, left
        step = np.argmin(prev, axis=0)  # argmin takes the first minimum: diagonal on ties
        pi = i - (step != 2)
        pj = j - (step != 1)
        D[i, j] = C[i - 1, j - 1] + prev[step, np.arange(len(i))]
        L[i, j] = L[pi, pj] + 1
    return float(D[n, m] / L[n, m])


def dtw_pairwise_ap(features_list: Sequence[np.ndarray], words: Sequence[object]) -> float:
    """Same-different AP of the MFCC + DTW baseline: every pair i < j scored by -DTW distance."""
    words = np.asarray(words)
    if len(words) != len(features_list):
        raise ValueError(f"{len(features_list)} feature sequences but {len(words)} words")
    i, j = np.triu_indices(len(features_list), k=1)
    scores = np.array([-dtw_distance(features_list[p], features_list[q]) for p, q in zip(i, j, strict=True)])
    return average_precision(scores, words[i] == words[j])
