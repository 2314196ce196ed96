"""Files whose names say nothing, lifted beside the named matches they sound like (issue 38, item 3).

A recorder's `REC_0001.wav` has no names score, so a weak name match of any other file outranked it even when
it is a copy of the best match. Here the best named matches (fusion.LIKE_FROM) vouch, by their stored sound
vectors, for the silent files that sound like them. With F the best match's fused score, j a voucher and s a
silent file (cosines of unit sound vectors; `sound` the min-max sound score over the candidates):

    like(s)  = max over j of  fused(j) / F * clip((cos(s, j) - LIKE_FLOOR) / (1 - LIKE_FLOOR), 0, 1)
    score(s) = LIKE_SCALE * F * ((1 - LIKE_SHARE) * sound(s) + LIKE_SHARE * like(s))

on the named files' scale, and a near-identical copy (cos >= DUPLICATE) scores LIKE_TOP x its voucher's, just
below it. A silent file keeps its own score (fusion.py) when that is higher. Pure NumPy; the session finds the
silent files near the vouchers anywhere in the library (candidates.sound_neighbours).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from app.services.search.fusion import DUPLICATE, LIKE_FROM, LIKE_TOP, FusionRule, Scores


def vouchers(ranked: Sequence[tuple[int, Scores]], n: int = LIKE_FROM) -> list[tuple[int, Scores]]:
    """The best n named matches (a positive score, names that say something): those that may vouch."""
    return [(f, sc) for f, sc in ranked if not sc.silent and sc.fused > 0][:n]


def like_scores(top: np.ndarray, top_vectors: np.ndarray, vectors: np.ndarray, sound: np.ndarray,
                rule: FusionRule) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For M vouchers' scores (M,, best first) and unit vectors (M, D) and S silent files' unit vectors (S, D)
    and min-max sound scores (S,): each file's score (S,), the voucher most alike (S,), an index into top, and
    whether sounding like it is what lifted the file (S,) bool."""
    cos = vectors @ top_vectors.T  # (S, M)
    alike = np.clip((cos - rule.like_floor) / max(1.0 - rule.like_floor, 1e-9), 0.0, 1.0) * (top / top[0])
    which = np.argmax(alike, axis=1)
    like = alike[np.arange(len(vectors)), which]  # (S,)
    score = rule.like_scale * top[0] * ((1 - rule.like_share) * sound + rule.like_share * like)
    copies = cos >= DUPLICATE  # (S, M)
    copy_score = np.where(copies, LIKE_TOP * top[None, :], -np.inf).max(axis=1)
    which = np.where(copy_score > score, np.argmax(np.where(copies, top[None, :], -np.inf), axis=1), which)
    by_like = (copy_score > score) | (rule.like_share * like > (1 - rule.like_share) * sound)
    return np.maximum(score, copy_score), which, by_like


def lift(ranked: Sequence[tuple[int, Scores]], vectors: Mapping[int, np.ndarray], rule: FusionRule
         ) -> list[tuple[int, Scores]]:
    """The ranking with each silent file scored the better of its own score and the one above (`vectors`: file
    id -> unit sound vector, for the vouchers and the silent files), best first (then by the sound cosine, then
    the file id, as fusion orders)."""
    top = [(f, sc) for f, sc in vouchers(ranked) if f in vectors]
    silent = [i for i, (f, sc) in enumerate(ranked) if sc.silent and f in vectors]
    out = list(ranked)
    if top and silent:
        scores, which, by_like = like_scores(
            np.array([sc.fused for _, sc in top]), np.stack([vectors[f] for f, _ in top]),
            np.stack([vectors[ranked[i][0]] for i in silent]), np.array([ranked[i][1].sound for i in silent]), rule)
        for i, s, j, liked in zip(silent, scores, which, by_like, strict=True):
            f, sc = ranked[i]
            if s > sc.fused:
                out[i] = (f, replace(sc, fused=float(s), like=top[j][0] if liked else None))
    return sorted(out, key=lambda fs: (-fs[1].fused, -(fs[1].sound_raw if fs[1].heard else -np.inf), fs[0]))
