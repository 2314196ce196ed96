"""ABX discriminability and bitrate of discovered units, the ZeroSpeech way. numpy only.

Item distance: frame-wise angular distance aligned by DTW, divided by the path length (ABXpy / ZeroSpeech
`dtw`). ABX on word items: A and X are tokens of one word, B of another; a triplet scores 1 if d(A, X) >
d(B, X), ½ on a tie; `within` one speaker or `across` speakers, averaged per cell, then per word pair, as the
ZeroSpeech / Libri-light evaluation does. `max_items` bounds the cost by subsampling each (speaker, word) group.
The distance and the averaging order written out: docs/speech-eval.md.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


def angular_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(..., Ta, D), (..., Tb, D) -> (..., Ta, Tb) frame-wise arccos(cosine similarity) / π."""
    a = _unit_rows(a)
    b = _unit_rows(b)
    cos = np.clip(a @ np.swapaxes(b, -1, -2), -1.0, 1.0)
    return np.arccos(cos) / np.pi


def _unit_rows(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def dtw_cost(dist: np.ndarray, lengths_a: np.ndarray | None = None, lengths_b: np.ndarray | None = None
             ) -> np.ndarray | float:
    """Path-length-normalised DTW cost of a distance matrix (Ta, Tb), or of a batch (P, Ta, Tb) of padded
    matrices with their true sizes `lengths_a`, `lengths_b` (P,); returns a float or (P,) costs.

    Computed along anti-diagonals i + j = k, vectorised over the cells of a diagonal and the batch. Padding
    never leaks in: a cell only depends on cells with smaller i and j.
    """
    single = dist.ndim == 2
    d = np.asarray(dist, dtype=np.float64)[None] if single else np.asarray(dist, dtype=np.float64)
    P, Ta, Tb = d.shape
    la = np.full(P, Ta) if lengths_a is None else np.asarray(lengths_a)
    lb = np.full(P, Tb) if lengths_b is None else np.asarray(lengths_b)
    cost = np.full((P, Ta + 1, Tb + 1), np.inf)  # 1-based; row/column 0 is the boundary
    steps = np.zeros((P, Ta + 1, Tb + 1))
    cost[:, 0, 0] = 0.0
    for k in range(2, Ta + Tb + 1):
        i = np.arange(max(1, k - Tb), min(Ta, k - 1) + 1)  # cells (i, k - i) of this anti-diagonal
        j = k - i
        # predecessors in tie-break order: diagonal, up, left
        prev_cost = np.stack([cost[:, i - 1, j - 1], cost[:, i - 1, j], cost[:, i, j - 1]])  # (3, P, n)
        prev_steps = np.stack([steps[:, i - 1, j - 1], steps[:, i - 1, j], steps[:, i, j - 1]])
        best = prev_cost.argmin(axis=0)[None]  # (1, P, n)
        cost[:, i, j] = np.take_along_axis(prev_cost, best, 0)[0] + d[:, i - 1, j - 1]
        steps[:, i, j] = np.take_along_axis(prev_steps, best, 0)[0] + 1
    rows = np.arange(P)
    out = cost[rows, la, lb] / steps[rows, la, lb]
    return float(out[0]) if single else out


def dtw_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Normalised DTW cost between two feature sequences (Ta, D) and (Tb, D) under the angular distance."""
    return float(dtw_cost(angular_distance(a, b)))


def pairwise_dtw(items: Sequence[np.ndarray], pairs: np.ndarray, batch: int = 1024) -> np.ndarray:
    """DTW distances for index pairs (P, 2) into `items`, batched by similar lengths to limit padding."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    lengths = np.array([len(x) for x in items])
    la, lb = lengths[pairs[:, 0]], lengths[pairs[:, 1]]
    order = np.lexsort((lb, la))
    out = np.empty(len(pairs))
    dim = items[0].shape[1] if len(items) else 0
    for s in range(0, len(pairs), batch):
        idx = order[s : s + batch]
        ta, tb = la[idx].max(), lb[idx].max()
        A = np.zeros((len(idx), ta, dim))
        B = np.zeros((len(idx), tb, dim))
        for n, (p, q) in enumerate(pairs[idx]):
            A[n, : la[idx[n]]] = items[p]
            B[n, : lb[idx[n]]] = items[q]
        out[idx] = dtw_cost(angular_distance(A, B), la[idx], lb[idx])
    return out


def triplet_errors(d_ax: np.ndarray, d_bx: np.ndarray, same_ax: bool) -> float:
    """Mean ABX error of one cell. d_ax (nA, nX): distances of A items to X items; d_bx (nB, nX).
    With same_ax (within speaker, A and X drawn from the same tokens) the pairs A = X are left out."""
    ax = d_ax[:, None, :]  # (nA, 1, nX)
    bx = d_bx[None, :, :]  # (1, nB, nX)
    err = (ax > bx) + 0.5 * (ax == bx)  # (nA, nB, nX)
    keep = np.ones((d_ax.shape[0], 1, d_ax.shape[1]), dtype=bool)
    if same_ax:
        keep[np.arange(d_ax.shape[0]), 0, np.arange(d_ax.shape[0])] = False
    keep = np.broadcast_to(keep, err.shape)
    return float(err[keep].mean()) if keep.any() else float("nan")


def abx_error(
    items: Sequence[np.ndarray],
    words: Sequence[str],
    speakers: Sequence[str],
    mode: str = "within",
    max_items: int | None = None,
    seed: int = 0,
) -> float:
    """ABX error rate in [0, 1] (0.5 = chance) of word items (T, D); see the module docstring for the
    triplets and the averaging order. NaN if no triplet can be formed."""
    return abx_scores(items, words, speakers, mode, max_items, seed).error


@dataclass
class AbxScore:
    """ABX error overall and per speaker, with the number of triplets behind each and, when no triplet can be
    formed, why. Per speaker = the cells whose X token is that speaker's (within: the speaker's own cells;
    across: X from that speaker, A and B from any other), averaged in the same order as the whole."""

    error: float  # NaN: no triplet
    triplets: int
    per_speaker: dict[str, float] = field(default_factory=dict)  # NaN: no triplet with X from this speaker
    per_speaker_triplets: dict[str, int] = field(default_factory=dict)
    reason: str | None = None  # why there is no triplet (None when there is one)
    # (X speaker, word A, word B) -> [(error, triplets)], one entry per speaker of A and B (tools/units_breakdown)
    cells: dict[tuple[str, str, str], list[tuple[float, int]]] = field(default_factory=dict)


def abx_scores(
    items: Sequence[np.ndarray],
    words: Sequence[str],
    speakers: Sequence[str],
    mode: str = "within",
    max_items: int | None = None,
    seed: int = 0,
) -> AbxScore:
    """`abx_error` with the per-speaker breakdown and triplet counts; DTW distances are computed once."""
    if mode not in ("within", "across"):
        raise ValueError(f"mode must be 'within' or 'across', got {mode!r}")
    if not len(items) == len(words) == len(speakers):
        raise ValueError("items, words and speakers differ in length")
    groups = _groups(words, speakers, max_items, seed)  # (speaker, word) -> item indices
    # renumber the items kept after subsampling, so the distance matrix is only as large as needed
    used = sorted(i for idx in groups.values() for i in idx)
    pos = {i: n for n, i in enumerate(used)}
    groups = {key: [pos[i] for i in idx] for key, idx in groups.items()}
    reason = missing_triplets(groups, mode)
    if reason is not None:  # nothing to compute: say why instead of returning a bare NaN
        return AbxScore(float("nan"), 0, {s: float("nan") for s, _ in groups}, {s: 0 for s, _ in groups}, reason)
    dist = _distances([items[i] for i in used], groups, mode)  # (N, N), NaN where no triplet needs a pair

    def d(rows: list[int], cols: list[int]) -> np.ndarray:
        return dist[np.ix_(rows, cols)]

    spk_words: dict[str, list[str]] = defaultdict(list)
    for s, w in groups:
        spk_words[s].append(w)
    # (X speaker, word_A, word_B) -> [(cell mean, triplets)]
    cells: dict[tuple[str, str, str], list[tuple[float, int]]] = defaultdict(list)
    for s, ws in spk_words.items():
        x_speakers = [s] if mode == "within" else [t for t in spk_words if t != s]
        for wa, wb in itertools.permutations(ws, 2):
            A, B = groups[(s, wa)], groups[(s, wb)]
            for t in x_speakers:
                X = groups.get((t, wa))
                if not X or (mode == "within" and len(X) < 2):
                    continue
                n = len(B) * (len(A) * len(X) - (len(X) if mode == "within" else 0))
                cells[(t, wa, wb)].append((triplet_errors(d(A, X), d(B, X), same_ax=mode == "within"), n))
    per_speaker = {s: _average_cells({k: v for k, v in cells.items() if k[0] == s}) for s in spk_words}
    counts = {s: sum(n for k, v in cells.items() if k[0] == s for _, n in v) for s in spk_words}
    return AbxScore(_average_cells(cells), sum(counts.values()), per_speaker, counts, cells=dict(cells))


def _average_cells(cells: dict[tuple[str, str, str], list[tuple[float, int]]]) -> float:
    """Steps 2 and 3 of the averaging: per ordered word pair the mean over its contexts, then the mean over
    word pairs. NaN without cells."""
    by_pair: dict[tuple[str, str], list[float]] = defaultdict(list)
    for (_, wa, wb), values in cells.items():
        by_pair[(wa, wb)].extend(e for e, _ in values)
    if not by_pair:
        return float("nan")
    return float(np.mean([np.mean(v) for v in by_pair.values()]))


def missing_triplets(groups: dict[tuple[str, str], list[int]], mode: str) -> str | None:
    """Why no ABX triplet can be formed from (speaker, word) -> tokens, or None if one can.

    within: one speaker needs >= 2 tokens of a word (A and X) and 1 token of another word (B).
    across: a speaker needs tokens of 2 words (A, B) and another speaker a token of A's word (X)."""
    spk_words: dict[str, dict[str, int]] = defaultdict(dict)
    for (s, w), idx in groups.items():
        spk_words[s][w] = len(idx)
    if not spk_words:
        return "no word tokens (ABX needs word labels: a words.csv or FSDD metadata.csv)"
    if mode == "within":
        if any(len(ws) >= 2 and max(ws.values()) >= 2 for ws in spk_words.values()):
            return None
        return ("within-speaker ABX needs one speaker with >= 2 tokens of one word and a token of another word; "
                f"here every (speaker, word) has {max(max(ws.values()) for ws in spk_words.values())} token(s) "
                f"at most, over {len(spk_words)} speaker(s)")
    if len(spk_words) < 2:
        return f"across-speaker ABX needs >= 2 speakers; here there is {len(spk_words)} ({next(iter(spk_words))})"
    for s, ws in spk_words.items():
        if len(ws) >= 2 and any(w in spk_words[t] for t in spk_words if t != s for w in ws):
            return None
    return ("across-speaker ABX needs a speaker with tokens of >= 2 words, one of which another speaker also "
            "says; no speaker pair shares such a word here")


def _groups(words: Sequence[str], speakers: Sequence[str], max_items: int | None, seed: int
            ) -> dict[tuple[str, str], list[int]]:
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, (w, s) in enumerate(zip(words, speakers, strict=True)):
        groups[(s, w)].append(i)
    if max_items is not None:
        rng = np.random.default_rng(seed)
        for key in sorted(groups):
            if len(groups[key]) > max_items:
                groups[key] = sorted(rng.choice(groups[key], max_items, replace=False).tolist())
    return dict(groups)


def _distances(items: Sequence[np.ndarray], groups: dict[tuple[str, str], list[int]], mode: str
               ) -> np.ndarray:
    """(N, N) DTW distances of every pair a triplet may need: within one speaker (within) or across two
    (across); each pair is computed once (DTW with symmetric steps and distance is symmetric)."""
    by_speaker: dict[str, list[int]] = defaultdict(list)
    for (s, _), idx in groups.items():
        by_speaker[s].extend(idx)
    pairs: list[tuple[int, int]] = []
    if mode == "within":
        for idx in by_speaker.values():
            pairs.extend(itertools.combinations(idx, 2))
    else:
        for s, t in itertools.combinations(sorted(by_speaker), 2):
            pairs.extend((i, j) for i in by_speaker[s] for j in by_speaker[t])
    dist = np.full((len(items), len(items)), np.nan)
    np.fill_diagonal(dist, 0.0)
    if pairs:
        p = np.array(pairs)
        dist[p[:, 0], p[:, 1]] = dist[p[:, 1], p[:, 0]] = pairwise_dtw(items, p)
    return dist


# ---------------------------------------------------------------------------------------------- units


def units_to_items(codes: Sequence[int] | np.ndarray, codebook: np.ndarray | None = None,
                   codebook_size: int | None = None) -> np.ndarray:
    """Unit ids (T,) -> ABX item (T, D): codebook vectors if `codebook` (K, C) is given, else one-hot rows
    of size `codebook_size` (default max id + 1). Under the angular distance one-hot frames are 0 apart
    when the units agree and ½ when they differ. Padding ids (< 0) are dropped."""
    codes = np.asarray(codes, dtype=np.int64)
    codes = codes[codes >= 0]
    if codebook is not None:
        return np.asarray(codebook, dtype=np.float64)[codes]
    size = codebook_size if codebook_size is not None else int(codes.max(initial=-1)) + 1
    out = np.zeros((len(codes), max(size, 1)))
    out[np.arange(len(codes)), codes] = 1.0
    return out


def bitrate(unit_sequences: Sequence[Sequence[int]], durations_s: Sequence[float]) -> float:
    """Bits per second of a unit transcription: (N / D) · H, N the total number of symbols, D the total
    duration in seconds, H the entropy in bits of the unit distribution pooled over all utterances."""
    if len(unit_sequences) != len(durations_s):
        raise ValueError("unit_sequences and durations_s differ in length")
    flat = np.concatenate([np.asarray(s, dtype=np.int64).ravel() for s in unit_sequences] or [np.zeros(0)])
    total = float(np.sum(durations_s))
    if flat.size == 0 or total <= 0:
        return 0.0
    _, counts = np.unique(flat, return_counts=True)
    p = counts / counts.sum()
    entropy = max(0.0, float(-(p * np.log2(p)).sum()))  # one symbol: 0, not -0
    return flat.size / total * entropy
