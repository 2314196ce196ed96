"""What a silent file's sound categories say to a query (issue 39, item 3).

A recorder's `REC_0001.wav` has no words, but the model's category heads heard it (core/aisfx_heads.py; stored
beside its vector): "DOORS 0.81". Each UCS category is given a short sentence (`category_text`), encoded once
with the names' sentence encoder; a silent file's names score then reads its categories as words:

    heard(s) = sum over its stored categories c of  p(c) * cos(query, text(c))

(confidence-weighted, so an unsure file says less), mapped to the names scale like a name's cosine and scaled by
CATEGORY_GAIN (fusion.fuse_arrays). The session also brings in silent files whose categories answer the query
best, wherever they are in the library. Pure NumPy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np


def category_text(category: str) -> str:
    """The sentence a UCS category is read as: its name in plain words ("DIRT & SAND" -> "dirt and sand")."""
    return category.lower().replace("&", "and").replace("  ", " ")


def category_text_with_subcategories(category: str) -> str:
    """The category's name and its UCS subcategories' ("doors: antique, cabinet, creak, ..."): a variant the
    benchmark replays (bench/library_categories.py)."""
    from app.services.library.names import ucs_table

    subs = sorted({e.subcategory.lower() for e in ucs_table().values() if e.category == category} - {"misc"})
    return category_text(category) + (": " + ", ".join(subs) if subs else "")


class CategoryWords:
    """Sentence vectors of the categories' texts, encoded on first use by `encode` (texts -> (N, D') unit rows)."""

    def __init__(self, encode: Callable[[list[str]], np.ndarray],
                 text: Callable[[str], str] = category_text) -> None:
        self.encode, self.text = encode, text
        self._vectors: dict[str, np.ndarray] = {}

    def vectors(self, categories: Sequence[str]) -> np.ndarray:
        """(K, D') unit vectors, in the order given."""
        new = [c for c in dict.fromkeys(categories) if c not in self._vectors]
        if new:
            for c, v in zip(new, np.asarray(self.encode([self.text(c) for c in new]), dtype=np.float32),
                            strict=True):
                self._vectors[c] = v / max(float(np.linalg.norm(v)), 1e-12)
        return np.stack([self._vectors[c] for c in categories]) if categories else np.zeros((0, 0), np.float32)


@dataclass(frozen=True)
class SilentCategories:
    """The silent files' stored categories as arrays: S files, each with up to KEPT (category, confidence)."""

    ids: np.ndarray  # (S,) file ids
    which: np.ndarray  # (S, KEPT) index into `names`
    confidence: np.ndarray  # (S, KEPT) 0..1; 0 pads a file with fewer categories
    names: tuple[str, ...]

    @classmethod
    def of(cls, files: Mapping[int, Sequence[tuple[str, float]]]) -> SilentCategories:
        names = tuple(sorted({c for cats in files.values() for c, _ in cats}))
        index = {c: i for i, c in enumerate(names)}
        kept = max((len(c) for c in files.values()), default=0)
        which, conf = np.zeros((len(files), kept), np.int64), np.zeros((len(files), kept), np.float32)
        for row, cats in enumerate(files.values()):
            for j, (c, p) in enumerate(cats):
                which[row, j], conf[row, j] = index[c], p
        return cls(np.fromiter(files, np.int64, len(files)), which, conf, names)

    def heard(self, query: np.ndarray, words: CategoryWords) -> tuple[np.ndarray, np.ndarray]:
        """For the query's unit sentence vector (D',): each file's heard(s) above (S,), and the category that
        says most (S,), an index into `names`."""
        if not len(self.ids) or not self.names:
            return np.zeros(len(self.ids)), np.zeros(len(self.ids), np.int64)
        cos = words.vectors(self.names) @ np.asarray(query, dtype=np.float32)  # (K,)
        parts = self.confidence * cos[self.which]  # (S, KEPT)
        return parts.sum(axis=1), self.which[np.arange(len(self.ids)), parts.argmax(axis=1)]

    def heard_as(self, query: np.ndarray, words: CategoryWords, floor: float) -> dict[int, tuple[float, str]]:
        """file id -> (heard(s), its category saying most), for the files whose heard(s) is above `floor`, best
        first."""
        said, best = self.heard(query, words)
        keep = np.flatnonzero(said > floor)
        keep = keep[np.argsort(-said[keep], kind="stable")]
        return {int(self.ids[i]): (float(said[i]), self.names[int(best[i])]) for i in keep}
