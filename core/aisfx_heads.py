"""The aiSFX checkpoint's nine classifier heads, in NumPy, and the UCS categories they are read as.

The wheel's checkpoint carries, beside the encoder, one MLP per training dataset (`fc.<k>`: 512 -> 256 -> ReLU
-> 128 -> ReLU -> classes) over a 2.3-s block's 512-d embedding; the dataset table names each head and its class
count, never the classes. Which UCS category each class is comes from a study of the heads' outputs
(`tools/aisfx_categories.py` writes the mapping the app ships, `app/services/library/data/aisfx_categories.json`;
evidence in docs/categories.md). A clip is read from the mean half of its [mean ; max] tower features (the mean
block embedding), so the heads need nothing the index does not already compute.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HEAD_DIM = 512  # the per-block embedding the heads read (the mean half of the 1024-d clip features)


class HeadsError(RuntimeError):
    """The checkpoint has no usable heads, or the mapping does not fit them."""


@dataclass(frozen=True)
class Head:
    """One dataset's classifier: three affine layers (weights (out, in), biases (out,))."""

    name: str
    layers: tuple[tuple[np.ndarray, np.ndarray], ...]

    @property
    def classes(self) -> int:
        return int(self.layers[-1][0].shape[0])

    def logits(self, emb: np.ndarray) -> np.ndarray:
        """(n, 512) block embeddings -> (n, classes)."""
        x = np.asarray(emb, dtype=np.float32)
        for i, (w, b) in enumerate(self.layers):
            x = x @ w.T + b
            if i < len(self.layers) - 1:
                x = np.maximum(x, 0.0)
        return x


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def read_heads(path: str | Path | None = None) -> dict[str, Head]:
    """The heads of the wheel's checkpoint (or `path`), by dataset name. A .safetensors file of the encoder alone
    has none: HeadsError."""
    from core.aisfx_weights import find_checkpoint, read_checkpoint  # torch: only when the heads are read

    path = Path(path) if path is not None else find_checkpoint()
    if path is None:
        raise HeadsError("no aiSFX checkpoint installed: its classifier heads give the sound categories")
    state, table = read_checkpoint(path)
    heads: dict[str, Head] = {}
    for name, (index, classes) in table.items():
        prefix = f"fc.{int(index)}."
        try:
            layers = tuple((state[f"{prefix}{j}.weight"].float().numpy(), state[f"{prefix}{j}.bias"].float().numpy())
                           for j in (0, 2, 4))
        except KeyError:
            raise HeadsError(f"{path}: the dataset table names head {name!r}, the weights lack {prefix}*") from None
        head = Head(name, layers)
        if layers[0][0].shape[1] != HEAD_DIM or head.classes != int(classes):
            raise HeadsError(f"{path}: head {name!r} is {layers[0][0].shape[1]} -> {head.classes}, the table says "
                             f"{HEAD_DIM} -> {int(classes)}")
        heads[name] = head
    if not heads:
        raise HeadsError(f"{path}: no classifier heads in this checkpoint (a converted encoder-only file?)")
    return heads


@dataclass(frozen=True)
class CategoryReader:
    """Heads + the class -> UCS category mapping: clip features -> probabilities over `categories`."""

    categories: tuple[str, ...]  # the UCS categories some kept head predicts, sorted
    heads: tuple[Head, ...]
    targets: tuple[np.ndarray, ...]  # per head: (classes,) index into `categories`, -1 for an unmapped class

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        """(n, >=512) tower features ([mean ; max] or block embeddings) -> (n, K): each head's softmax summed into
        the categories it maps to, averaged over the heads that predict that category. Not renormalised: what
        went to unmapped classes stays "none of these" (renormalised over a few kept categories, every sound
        became one of them)."""
        emb = np.asarray(features, dtype=np.float32)[:, :HEAD_DIM]
        total = np.zeros((len(emb), len(self.categories)), dtype=np.float64)
        covered = np.zeros(len(self.categories), dtype=np.float64)
        for head, target in zip(self.heads, self.targets, strict=True):
            p = softmax(head.logits(emb).astype(np.float64))
            keep = target >= 0
            np.add.at(total.T, target[keep], p[:, keep].T)
            covered[np.unique(target[keep])] += 1
        return (total / np.maximum(covered, 1.0)).astype(np.float32)


def load_mapping(path: str | Path, part: str = "aligned") -> dict[str, list[str | None]]:
    """{head name: [UCS category or None per class]} of the heads the study kept: the whole alignment
    ("aligned", what the index stores and search reads) or only the categories precise enough to show
    ("heads"). A mapping without "aligned" is read as its "heads"."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        heads = data.get(part) or data["heads"]
        return {str(h): [None if c is None else str(c) for c in v["classes"]] for h, v in heads.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise HeadsError(f"{path}: not a readable category mapping ({e})") from None


def shown_categories(path: str | Path) -> frozenset[str]:
    """The categories the mapping shows: those some kept head maps to in its "heads" list."""
    return frozenset(c for cs in load_mapping(path, "heads").values() for c in cs if c is not None)


def category_reader(mapping: str | Path, checkpoint: str | Path | None = None) -> CategoryReader:
    """The heads of the wheel's checkpoint (or `checkpoint`) read through the mapping file at `mapping`."""
    heads, classes = read_heads(checkpoint), load_mapping(mapping)
    names = sorted({c for cs in classes.values() for c in cs if c is not None})
    index = {c: i for i, c in enumerate(names)}
    kept, targets = [], []
    for name, cs in classes.items():
        head = heads.get(name)
        if head is None or head.classes != len(cs):
            raise HeadsError(f"{mapping}: head {name!r} maps {len(cs)} classes, the checkpoint's has "
                             f"{None if head is None else head.classes}")
        kept.append(head)
        targets.append(np.array([-1 if c is None else index[c] for c in cs], dtype=np.int64))
    return CategoryReader(tuple(names), tuple(kept), tuple(targets))
