"""Turning a file into vectors: windows streamed from the audio path, embedded, pooled.

A file is embedded window by window (`embedder.window_seconds`, streamed with `audio.iter_blocks`, never
loaded whole). The file vector is the mean of its window vectors weighted by how much real audio each window
covers (the zero-padded tail counts less), L2-normalised; per-window vectors are kept (float32) to show where
in a long file the match is.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from app.services.audio import iter_blocks
from app.services.library.catalog import normalise
from app.services.library.records import Embedder, PathLike, PreparingEmbedder


def windows_of(path: PathLike, embedder: Embedder, batch: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(windows (w, S), coverage (w,)) batches of a file, streamed; coverage = real-audio fraction."""
    size = round(embedder.window_seconds * embedder.sample_rate)
    buf: list[np.ndarray] = []
    cover: list[float] = []
    for block in iter_blocks(path, embedder.sample_rate, embedder.window_seconds, pad_last=False):
        cover.append(len(block) / size)
        buf.append(block if len(block) == size else np.pad(block, (0, size - len(block))))
        if len(buf) == batch:
            yield np.stack(buf), np.array(cover, dtype=np.float32)
            buf, cover = [], []
    if buf:
        yield np.stack(buf), np.array(cover, dtype=np.float32)


def pool(windows: np.ndarray, cover: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Coverage-weighted mean of raw window vectors, L2-normalised, and normalised windows. (D,), (W, D)"""
    mean = (cover[:, None] * windows).sum(0) / max(float(cover.sum()), 1e-12)
    return normalise(mean), normalise(windows)


def embed(embedder: Embedder, batches: np.ndarray | Sequence[Any]) -> np.ndarray:
    """(W, S) windows, or a list of window batches (arrays, or what `embedder.prepare_windows` made of them)
    -> (W, D), in order, shape-checked."""
    if isinstance(batches, np.ndarray):
        batches = [batches]
    n = sum(len(b) for b in batches)
    if batches and not isinstance(batches[0], np.ndarray):
        if not isinstance(embedder, PreparingEmbedder):
            raise TypeError(f"{type(embedder).__name__} cannot embed prepared windows (no embed_prepared)")
        out = embedder.embed_prepared(batches)
    else:
        out = embedder.embed_windows(np.concatenate(batches) if len(batches) != 1 else batches[0])
    out = np.asarray(out, dtype=np.float32)
    if out.shape != (n, embedder.dim):
        raise ValueError(f"embedder returned shape {out.shape} for {n} windows, expected ({n}, {embedder.dim})")
    return out


def embed_file(path: PathLike, embedder: Embedder, batch: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """(file vector (D,), window vectors (W, D)) of one file, streamed window by window."""
    vecs, covers = [], []
    for windows, cover in windows_of(path, embedder, batch):
        vecs.append(embed(embedder, windows))
        covers.append(cover)
    return pool(np.concatenate(vecs), np.concatenate(covers))
