"""Text-to-audio retrieval metrics (DCASE task 6b): mAP@10 and recall@{1,5,10} over caption queries.

`sim` is (n_captions, n_clips): one row per caption query, higher = more similar. Each caption has a set of
correct clips: its own clip, given as an index array, or a (n_captions, n_clips) boolean mask, e.g. from
`correct_from_captions`, where every clip with an identical caption counts as correct.

The rank of a caption is that of its best-scoring correct clip (the first correct clip in the ranked list).
Ties are broken pessimistically by default: an incorrect clip with the same score as the best correct one
ranks above it. A model that gives every clip the same score thus ranks last, not first; scores that tie by
chance are rare with float embeddings, so the choice matters little for real models. `ties="optimistic"`
ranks correct clips above tied incorrect ones.

A NaN similarity is the worst possible score under either tie rule: a NaN clip never ranks above anything,
so a model that gives NaN everywhere ranks last, never first. Such a model is broken: callers refuse its
embeddings first with `require_finite`, which raises `NonFiniteError` with a message instead of a score.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from core.finite import NonFiniteError, require_finite, to_numpy

__all__ = ["NonFiniteError", "require_finite"]

TIES = ("pessimistic", "optimistic")


def correct_mask(caption_to_clip: Any, shape: tuple[int, int]) -> np.ndarray:
    """(n_captions,) clip indices or an (n_captions, n_clips) bool mask -> (n_captions, n_clips) bool mask."""
    c = to_numpy(caption_to_clip)
    n_captions, n_clips = shape
    if c.ndim == 2:
        if c.shape != shape:
            raise ValueError(f"correct mask has shape {c.shape}, similarity has {shape}")
        return c.astype(bool)
    if c.shape != (n_captions,):
        raise ValueError(f"caption_to_clip has shape {c.shape}, expected ({n_captions},)")
    if c.size and (c.min() < 0 or c.max() >= n_clips):
        raise ValueError(f"caption_to_clip holds clip indices outside 0..{n_clips - 1}")
    mask = np.zeros(shape, dtype=bool)
    mask[np.arange(n_captions), c.astype(np.int64)] = True
    return mask


def correct_from_captions(
    caption_texts: Sequence[str], caption_to_clip: Any, n_clips: int | None = None
) -> np.ndarray:
    """(n_captions, n_clips) bool: clip j is correct for caption i if any caption of clip j is the same text.

    Texts are compared after lowercasing and collapsing whitespace, so identical captions of different clips
    count as correct for each other.
    """
    clips = to_numpy(caption_to_clip).astype(np.int64)
    if len(clips) != len(caption_texts):
        raise ValueError(f"{len(caption_texts)} captions but {len(clips)} clip indices")
    n_clips = int(clips.max()) + 1 if n_clips is None else n_clips
    keys = [" ".join(t.lower().split()) for t in caption_texts]
    clips_of_text: dict[str, set[int]] = {}
    for key, clip in zip(keys, clips, strict=True):
        clips_of_text.setdefault(key, set()).add(int(clip))
    mask = np.zeros((len(keys), n_clips), dtype=bool)
    for i, key in enumerate(keys):
        mask[i, sorted(clips_of_text[key])] = True
    return mask


def caption_ranks(sim: Any, caption_to_clip: Any, ties: str = "pessimistic") -> np.ndarray:
    """(n_captions,) 1-based rank of each caption's best-scoring correct clip."""
    if ties not in TIES:
        raise ValueError(f"ties must be one of {TIES}, got {ties!r}")
    s = to_numpy(sim).astype(np.float64)
    if s.ndim != 2:
        raise ValueError(f"similarity must be (n_captions, n_clips), got shape {s.shape}")
    correct = correct_mask(caption_to_clip, s.shape)
    if not correct.any(axis=1).all():
        raise ValueError("every caption needs at least one correct clip")
    nan = np.isnan(s)
    best = np.where(correct & ~nan, s, -np.inf).max(axis=1, keepdims=True)  # (n_captions, 1)
    above = s >= best if ties == "pessimistic" else s > best
    ranks = 1 + (above & ~correct & ~nan).sum(axis=1)
    # NaN is the worst score, whatever the tie rule: a caption whose correct clips are all NaN ranks last
    lost = ~(correct & ~nan).any(axis=1)
    return np.where(lost, 1 + (~correct).sum(axis=1), ranks)


def retrieval_metrics(
    sim: Any, caption_to_clip: Any, k: int = 10, ties: str = "pessimistic"
) -> dict[str, float]:
    """Text-to-audio metrics: mAP@k (mean of 1/rank if rank <= k else 0), R@1, R@5, R@10 (and R@k),
    mean and median rank. `caption_to_clip`: (n_captions,) clip indices or an (n_captions, n_clips) mask."""
    ranks = caption_ranks(sim, caption_to_clip, ties)
    out = {f"mAP@{k}": float(np.where(ranks <= k, 1.0 / ranks, 0.0).mean())}
    for r in sorted({1, 5, 10, k}):
        out[f"R@{r}"] = float((ranks <= r).mean())
    out["mean_rank"] = float(ranks.mean())
    out["median_rank"] = float(np.median(ranks))
    out["n_captions"] = float(len(ranks))
    return out


def ensemble_similarity(sims: Sequence[Any]) -> Any:
    """Average of several models' similarity matrices (same shape); torch in -> torch out, else numpy."""
    if not sims:
        raise ValueError("ensemble_similarity needs at least one matrix")
    shapes = {tuple(s.shape) for s in sims}
    if len(shapes) != 1:
        raise ValueError(f"similarity matrices differ in shape: {sorted(shapes)}")
    if all(hasattr(s, "detach") for s in sims):
        import torch

        return torch.stack(list(sims)).mean(dim=0)
    return np.mean([to_numpy(s) for s in sims], axis=0)
