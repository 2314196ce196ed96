"""Spoken-term search's scoring (no Qt): a cheap pass over the whole recording, then exact scores where it matters.

Exact scoring embeds each window as a word on its own (its samples through the front end, zero-padded as a
spoken word is), so a hit's score is the one the same audio gets in the Words tab's comparisons; but the front
end then runs once per window, ~370 times over a 6.5-s sentence (issue 41: ~12 s on a loaded 2-core box). The
coarse pass runs the front end once over the whole recording and embeds slices of its frames (a window's
frames in context instead of in zeros); only the best `candidates` regions it finds are scored exactly, and
the hits come from the exact scores alone. `space` is a `word_space.WordSpace` (duck-typed: no import cycle).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

RESCORE_HOPS = 1  # grid centres each side of a coarse candidate that are scored exactly (the slices' offset)
MIN_CANDIDATES = 8  # regions scored exactly: at least this many, and twice the hits asked for
MAX_WIDENING = 4  # rounds that grow a region whose best exact score lies on its edge


@dataclass
class TermHit:
    start_s: float
    end_s: float
    score: float

    @property
    def centre_s(self) -> float:
        return 0.5 * (self.start_s + self.end_s)


@dataclass
class TermSearchResult:
    times: np.ndarray  # (W,) window centres in seconds
    scores: np.ndarray  # (W,) best cosine over the window lengths centred there (coarse where not rescored)
    window_s: np.ndarray  # (W,) length of that best window
    hits: list[TermHit]  # best matches, best first, non-overlapping, from exact scores
    duration_s: float  # of the searched recording


def pick_hits(times: np.ndarray, scores: np.ndarray, window_s: np.ndarray, k: int = 5) -> list[TermHit]:
    """Greedy non-maximum suppression: the best windows, each overlapping a better one by at most 25 %."""
    hits: list[TermHit] = []
    for i in np.argsort(-scores, kind="stable"):
        c, w = float(times[i]), float(window_s[i])
        start, end = c - w / 2, c + w / 2
        if all(min(end, h.end_s) - max(start, h.start_s) <= 0.25 * min(w, h.end_s - h.start_s) for h in hits):
            hits.append(TermHit(start, end, float(scores[i])))
            if len(hits) >= k:
                break
    return hits


def valid_windows(grid: np.ndarray, lengths: Sequence[int], num_samples: int) -> np.ndarray:
    """(L, G) bool: the window of length L centred on grid[g] lies inside the recording."""
    return np.stack([(grid - n // 2 >= 0) & (grid - n // 2 + n <= num_samples) for n in lengths])


def best_over_lengths(scores: np.ndarray, lengths: Sequence[int], sr: int) -> tuple[np.ndarray, np.ndarray]:
    """(L, G) scores -> the best score at each centre (G,) and its window's length in seconds (G,)."""
    return scores.max(axis=0), np.asarray(lengths, dtype=np.float64)[scores.argmax(axis=0)] / sr


def coarse_scores(space: Any, x: np.ndarray, q: np.ndarray, lengths: Sequence[int], grid: np.ndarray,  # noqa: ANN401
                  valid: np.ndarray, hop: int, batch_size: int = 256) -> np.ndarray:
    """(L, G) cosines of the query with slices of the whole recording's frames (-inf outside `valid`).

    A window of n samples starting at a multiple of the front end's hop is the slice of
    `frontend.num_frames(n)` frames from there: the same frames an isolated word of n samples has, but seeing
    its neighbours. Slices start every `hop` samples (at least one frame apart); each grid centre takes the
    score of the slices around it (interpolated)."""
    import torch

    scores = np.full((len(lengths), len(grid)), -np.inf, dtype=np.float32)
    frame_hop = int(space.frontend.config.hop_length)
    with torch.inference_mode():
        feats = space.frontend(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))[None].to(space.device))
        stride = max(1, hop // frame_hop)
        for li, n in enumerate(lengths):
            T = int(space.frontend.num_frames(int(n)))
            if feats.shape[1] < T or not valid[li].any():
                continue
            slices = feats[0].unfold(0, T, stride).transpose(1, 2)  # (K, T, F) views
            sims = []
            for b in range(0, len(slices), batch_size):
                part = slices[b:b + batch_size].contiguous()  # (b, T, F)
                sims.append(space.model.embed_acoustic(part, torch.full((len(part),), T)).float().cpu().numpy() @ q)
            centres = np.arange(len(slices)) * stride * frame_hop + n / 2
            scores[li, valid[li]] = np.interp(grid[valid[li]], centres, np.concatenate(sims))
    return scores


def candidate_regions(coarse: np.ndarray, grid: np.ndarray, lengths: Sequence[int], sr: int, k: int,
                      hops: int) -> list[tuple[int, int]]:
    """Grid index ranges [lo, hi] to score exactly: the k best non-overlapping coarse places, +- `hops` centres."""
    cols = np.flatnonzero(np.isfinite(coarse).any(axis=0))
    best, widths = best_over_lengths(coarse[:, cols], lengths, sr)
    regions = []
    for hit in pick_hits(grid[cols] / sr, best, widths, k):
        j = int(np.abs(grid - hit.centre_s * sr).argmin())
        regions.append((max(0, j - hops), min(len(grid) - 1, j + hops)))
    return regions


def widen(regions: list[tuple[int, int]], exact: np.ndarray, valid: np.ndarray) -> list[tuple[int, int]]:
    """Each region grown by one centre on the side where its best exact score lies on its edge (a peak the
    coarse pass placed a little off); a region whose best is inside stays."""
    out = []
    for lo, hi in regions:
        j = lo + int(exact[:, lo:hi + 1].max(axis=0).argmax())
        lo -= j == lo and lo > 0 and bool(valid[:, lo - 1].any())
        hi += j == hi and hi + 1 < valid.shape[1] and bool(valid[:, hi + 1].any())
        out.append((lo, hi))
    return out


def exact_scores(space: Any, wave: Any, q: np.ndarray, lengths: Sequence[int], grid: np.ndarray,  # noqa: ANN401
                 todo: np.ndarray, batch_size: int = 64) -> Generator[dict[str, Any], None, np.ndarray]:
    """Job: (L, G) cosines of the query with each window of `todo` (L, G bool) embedded as a word on its own
    (-inf elsewhere); equal lengths batch without padding. `wave`: the recording as a float32 tensor."""
    import torch

    scores = np.full(todo.shape, -np.inf, dtype=np.float32)
    jobs = [(li, np.flatnonzero(todo[li])[b:b + batch_size]) for li in range(len(lengths))
            for b in range(0, int(todo[li].sum()), batch_size)]
    for step, (li, idx) in enumerate(jobs, 1):
        n = int(lengths[li])
        chunk = torch.stack([wave[int(g) - n // 2: int(g) - n // 2 + n] for g in grid[idx]])  # (b, n)
        scores[li, idx] = space.embed_waves(chunk) @ q
        yield {"step": step, "total": len(jobs), "message": f"{n / space.sample_rate:.2f}-s windows"}
    return scores


def search_scores(space: Any, x: np.ndarray, q: np.ndarray, lengths: Sequence[int], grid: np.ndarray,  # noqa: ANN401
                  hop: int, top_k: int, exhaustive: bool = False, batch_size: int = 64
                  ) -> Generator[dict[str, Any], None, tuple[np.ndarray, np.ndarray]]:
    """Job: (L, G) scores for the curve (exact where computed, coarse elsewhere) and (L, G) bool: which are exact.
    `exhaustive` scores every valid window exactly (the search before issue 41; slow, for comparison)."""
    import torch

    wave = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    valid = valid_windows(grid, lengths, len(x))
    if exhaustive:
        exact = yield from exact_scores(space, wave, q, lengths, grid, valid, batch_size)
        return exact, valid
    coarse = coarse_scores(space, x, q, lengths, grid, valid, hop)
    yield {"message": "scored the whole recording; rescoring the best places"}
    scores, done = coarse.copy(), np.zeros_like(valid)
    regions = candidate_regions(coarse, grid, lengths, space.sample_rate, max(MIN_CANDIDATES, 2 * top_k),
                                RESCORE_HOPS)
    for _ in range(MAX_WIDENING + 1):
        todo = np.zeros_like(valid)
        for lo, hi in regions:
            todo[:, lo:hi + 1] = valid[:, lo:hi + 1]
        todo &= ~done
        if not todo.any():
            break
        exact = yield from exact_scores(space, wave, q, lengths, grid, todo, batch_size)
        scores[todo], done = exact[todo], done | todo
        regions = widen(regions, np.where(done, scores, -np.inf), valid)
    return scores, done
