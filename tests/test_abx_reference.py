"""Cross-check training.abx against the reference ZeroSpeech / Libri-light ABX (`zerospeech-libriabx2`).

The reference computes one cell at a time (`get_theta_group_dtw`: cosine-angle frame distance, DTW with
path-length normalisation found by backtracking, compiled in `libri_light_dtw`); we compare our DTW
distances and per-cell errors with it, and our full `abx_error` with the reference cells averaged in the
ZeroSpeech order (cell -> word pair over contexts -> mean over word pairs).
"""

from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np
import pytest
import torch

from training import abx

ref_group = pytest.importorskip(
    "zrc_abx2.ABX_src.abx_group_computation",
    reason="zerospeech-libriabx2 is not installed (pip install zerospeech-libriabx2; it compiles a Cython DTW)",
)
ref_dtw = pytest.importorskip("libri_light_dtw", reason="zerospeech-libriabx2's compiled DTW is missing")
Pooling = pytest.importorskip("zrc_abx2.ABX_src.models").Pooling


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def make_items(rng: np.random.Generator, n_speakers: int = 3, n_words: int = 3, per: int = 3
               ) -> tuple[list[np.ndarray], list[str], list[str]]:
    """Word items: a word is a random trajectory; tokens are noisy, time-warped copies, speakers offset it."""
    dim = 6
    protos = [rng.normal(size=(rng.integers(6, 10), dim)) for _ in range(n_words)]
    offsets = [0.6 * rng.normal(size=dim) for _ in range(n_speakers)]
    items, words, speakers = [], [], []
    for s, w, _ in itertools.product(range(n_speakers), range(n_words), range(per)):
        p = protos[w]
        idx = np.sort(rng.choice(len(p), size=rng.integers(len(p) - 2, len(p) + 4), replace=True))
        items.append(p[idx] + offsets[s] + 0.8 * rng.normal(size=(len(idx), dim)))
        words.append(f"w{w}")
        speakers.append(f"s{s}")
    return items, words, speakers


def padded(group: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    sizes = torch.tensor([len(g) for g in group])
    data = torch.zeros(len(group), int(sizes.max()), group[0].shape[1])
    for i, g in enumerate(group):
        data[i, : len(g)] = torch.from_numpy(unit(g)).float()
    return data, sizes


def reference_cell_error(A: list[np.ndarray], B: list[np.ndarray], X: list[np.ndarray], within: bool) -> float:
    """1 - theta of the reference; within speaker the reference passes X = A with `symmetric=True`."""
    a, sa = padded(A)
    b, sb = padded(B)
    x, sx = padded(A if within else X)
    theta = ref_group.get_theta_group_dtw(a, b, x, sa, sb, sx, ref_group.get_cosine_distance_batch,
                                          within, Pooling.NONE)
    return 1.0 - theta


def test_dtw_distance_matches_reference() -> None:
    rng = np.random.default_rng(0)
    diffs = []
    for _ in range(40):
        a, b = rng.normal(size=(rng.integers(3, 15), 5)), rng.normal(size=(rng.integers(3, 15), 5))
        dist = abx.angular_distance(a, b).astype(np.float32)
        ref = ref_dtw._dtw(len(a), len(b), dist, True)
        diffs.append(abs(abx.dtw_distance(a, b) - ref))
    # float32 in the reference; the path length may differ only on exact ties, which random data lacks
    assert max(diffs) < 1e-5, max(diffs)


@pytest.mark.parametrize("mode", ["within", "across"])
def test_abx_error_matches_reference(mode: str) -> None:
    rng = np.random.default_rng(1)
    items, words, speakers = make_items(rng)
    ours = abx.abx_error(items, words, speakers, mode)

    groups: dict[tuple[str, str], list[np.ndarray]] = defaultdict(list)
    for x, w, s in zip(items, words, speakers, strict=True):
        groups[(s, w)].append(x)
    spk = sorted({s for s, _ in groups})
    wrd = sorted({w for _, w in groups})
    by_pair: dict[tuple[str, str], list[float]] = defaultdict(list)
    cell_diffs = []
    for s, (wa, wb) in itertools.product(spk, itertools.permutations(wrd, 2)):
        for t in ([s] if mode == "within" else [t for t in spk if t != s]):
            A, B, X = groups[(s, wa)], groups[(s, wb)], groups[(t, wa)]
            ref = reference_cell_error(A, B, X, within=mode == "within")
            d_ax = np.array([[abx.dtw_distance(a, x) for x in X] for a in A])
            d_bx = np.array([[abx.dtw_distance(b, x) for x in X] for b in B])
            cell_diffs.append(abs(abx.triplet_errors(d_ax, d_bx, same_ax=mode == "within") - ref))
            by_pair[(wa, wb)].append(ref)
    reference = float(np.mean([np.mean(v) for v in by_pair.values()]))
    assert max(cell_diffs) < 1e-6, max(cell_diffs)  # every cell agrees (the reference divides in float32)
    assert ours == pytest.approx(reference, abs=1e-6)
    assert 0.0 <= ours < 0.5  # the words are discriminable: better than chance
