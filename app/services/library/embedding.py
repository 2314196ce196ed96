"""Turning a file into vectors: windows streamed from the audio path, embedded, pooled.

A file is embedded window by window (`embedder.window_seconds`, streamed with `audio.iter_blocks`, never
loaded whole). The file vector is the mean of its window vectors weighted by how much real audio each window
covers (the zero-padded tail counts less), L2-normalised; per-window vectors are kept (float32) to show where
in a long file the match is.

A long file (music, an ambience) is embedded from at most `max_windows` windows spread evenly over it
(`spread_windows`: the first, the last and evenly between): a 3-minute track costs 6 windows instead of 18,
and its mean vector barely moves. Where each kept window starts follows from the file's duration and the number
of windows kept (`window_starts`), so nothing more is stored. The kept windows are decoded on their own (a seek
each): decoding a long Ogg Vorbis track whole cost more than the model on the windows it kept.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from app.services.library.catalog import normalise
from app.services.library.categories import CATEGORIES_KEPT
from app.services.library.records import Embedder, PathLike, PreparingEmbedder
from core.audio import AudioInfo, EmptyAudioError, audio_info, decode, iter_blocks

LONG_FILE_WINDOWS = 6  # windows embedded from a long file by default (0: all of them)


SEEK_PAD_S = 0.05  # audio decoded each side of a window read on its own: the resampler's filter context, cut off
MIN_TAIL = 0.05  # a last window with less audio than this share of a window is left out (the file has others): a
# few samples of a long file's end, peak-normalised on their own, once "matched" better than what the file holds


def window_count(duration: float, window_seconds: float) -> int:
    """How many windows a file of `duration` seconds is embedded from: whole windows, and a last, partly padded
    one when it holds MIN_TAIL of a window or is the only one. The same count from the header's duration as the
    decoder gives (a resampler that drops a last sample changes nothing)."""
    if window_seconds <= 0:
        return 1
    full = math.floor(duration / window_seconds + 1e-9)
    rest = duration - full * window_seconds
    return max(1, full + (1 if rest >= MIN_TAIL * window_seconds or full == 0 else 0))


def spread_windows(n: int, max_windows: int) -> list[int]:
    """Which of n windows to embed: all when n <= max_windows (or max_windows is 0), else max_windows of them,
    the first and the last and evenly between."""
    if not max_windows or n <= max_windows:
        return list(range(n))
    if max_windows == 1:
        return [0]
    return [round(j * (n - 1) / (max_windows - 1)) for j in range(max_windows)]


def window_starts(duration: float, window_seconds: float, kept: int) -> np.ndarray:
    """Start (s) of each of the `kept` windows stored for a file of `duration`: consecutive windows when all were
    kept, else the evenly spread ones `spread_windows` chose. (kept,)"""
    n = window_count(duration, window_seconds)
    idx = np.arange(kept) if kept >= n else np.array(spread_windows(n, kept))
    return idx * float(window_seconds)


def windows_of(path: PathLike, embedder: Embedder, batch: int, max_windows: int = 0, info: AudioInfo | None = None
               ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(windows (w, S), coverage (w,)) batches of a file, streamed; coverage = real-audio fraction. With
    `max_windows` and the file's header `info`, only the windows `spread_windows` chooses, each decoded on its own
    (`spread_blocks`)."""
    size = round(embedder.window_seconds * embedder.sample_rate)
    n = window_count(info.duration if info else 0.0, embedder.window_seconds)
    keep = spread_windows(n, max_windows) if info and max_windows and n > max_windows else None
    blocks = enumerate(iter_blocks(path, embedder.sample_rate, embedder.window_seconds, pad_last=False)) \
        if keep is None or info is None \
        else spread_blocks(path, keep, embedder.sample_rate, embedder.window_seconds, info.sample_rate)
    buf: list[np.ndarray] = []
    cover: list[float] = []
    for i, block in blocks:
        if i and len(block) < MIN_TAIL * size:
            continue
        cover.append(len(block) / size)
        buf.append(block if len(block) == size else np.pad(block, (0, size - len(block))))
        if len(buf) == batch:
            yield np.stack(buf), np.array(cover, dtype=np.float32)
            buf, cover = [], []
    if buf:
        yield np.stack(buf), np.array(cover, dtype=np.float32)


def spread_blocks(path: PathLike, windows: Sequence[int], sample_rate: int, window_seconds: float,
                  file_rate: int) -> Iterator[tuple[int, np.ndarray]]:
    """(window index, its samples (<= S,)) of the chosen windows of a long file (stored at `file_rate` Hz), each
    decoded on its own: a seek to about SEEK_PAD_S before it (on the grid of whole samples at both rates, so the
    resampler keeps the stream's phase), resampled with that much context each side, then cut to the window:
    what `iter_blocks` gives for it, to float32 rounding."""
    size = round(window_seconds * sample_rate)
    grid = math.gcd(int(file_rate), int(sample_rate))  # 1/grid s: whole samples at both rates
    for i in windows:
        start = i * window_seconds
        first = max(0.0, math.floor((start - SEEK_PAD_S) * grid) / grid)  # the stream's sample phase, kept
        try:
            audio = decode(path, sample_rate, start=first, duration=window_seconds + (start - first) + SEEK_PAD_S).audio
        except EmptyAudioError:  # the audio ends before its header said: the windows past the end are not there
            return
        block = audio[round((start - first) * sample_rate):][:size]
        if not len(block):
            return
        yield i, block


def pool(windows: np.ndarray, cover: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Coverage-weighted mean of raw window vectors, L2-normalised, and normalised windows. (D,), (W, D)"""
    mean = (cover[:, None] * windows).sum(0) / max(float(cover.sum()), 1e-12)
    return normalise(mean), normalise(windows)


def embed(embedder: Embedder, batches: np.ndarray | Sequence[Any]) -> np.ndarray:
    """(W, S) windows, or a list of window batches (arrays, or what `embedder.prepare_windows` made of them)
    -> (W, D), in order, shape-checked."""
    return embed_with_categories(embedder, batches)[0]


def embed_with_categories(embedder: Embedder, batches: np.ndarray | Sequence[Any]
                          ) -> tuple[np.ndarray, np.ndarray | None]:
    """As `embed`, with each window's category probabilities ((W, K), or None: the embedder has no heads)."""
    if isinstance(batches, np.ndarray):
        batches = [batches]
    n = sum(len(b) for b in batches)
    cats = None
    if batches and not isinstance(batches[0], np.ndarray):
        if not isinstance(embedder, PreparingEmbedder):
            raise TypeError(f"{type(embedder).__name__} cannot embed prepared windows (no embed_prepared)")
        with_cats = getattr(embedder, "embed_prepared_with_categories", None)
        out, cats = with_cats(batches) if with_cats is not None else (embedder.embed_prepared(batches), None)
    else:
        windows = np.concatenate(batches) if len(batches) != 1 else batches[0]
        with_cats = getattr(embedder, "embed_windows_with_categories", None)
        out, cats = with_cats(windows) if with_cats is not None else (embedder.embed_windows(windows), None)
    out = np.asarray(out, dtype=np.float32)
    if out.shape != (n, embedder.dim):
        raise ValueError(f"embedder returned shape {out.shape} for {n} windows, expected ({n}, {embedder.dim})")
    if cats is not None and (cats.ndim != 2 or len(cats) != n):
        raise ValueError(f"embedder returned category probabilities of shape {cats.shape} for {n} windows")
    return out, cats


def pool_categories(probs: np.ndarray, cover: np.ndarray, names: Sequence[str], keep: int = CATEGORIES_KEPT
                    ) -> str | None:
    """(W, K) window probabilities -> the file's likeliest categories as stored ('NAME 0.812;NAME 0.104', best
    first): the coverage-weighted mean, as the file vector is pooled; None when there are none."""
    if not len(probs) or not len(names):
        return None
    mean = (cover[:, None] * probs).sum(0) / max(float(cover.sum()), 1e-12)  # (K,)
    best = np.argsort(-mean, kind="stable")[:keep]
    return ";".join(f"{names[i]} {mean[i]:.3f}" for i in best)


def embed_file(path: PathLike, embedder: Embedder, batch: int = 16, max_windows: int = LONG_FILE_WINDOWS
               ) -> tuple[np.ndarray, np.ndarray]:
    """(file vector (D,), window vectors (W, D)) of one file, streamed window by window; a long file from
    `max_windows` spread windows (0: every one), as the indexer does."""
    mean, windows, _ = embed_file_with_categories(path, embedder, batch, max_windows)
    return mean, windows


def embed_file_with_categories(path: PathLike, embedder: Embedder, batch: int = 16,
                               max_windows: int = LONG_FILE_WINDOWS) -> tuple[np.ndarray, np.ndarray, str | None]:
    """As `embed_file`, with the file's categories as stored (`pool_categories`; None: the model has none)."""
    vecs, covers, cats = [], [], []
    info = audio_info(path) if max_windows else None
    for windows, cover in windows_of(path, embedder, batch, max_windows, info):
        v, c = embed_with_categories(embedder, windows)
        vecs.append(v)
        covers.append(cover)
        if c is not None:
            cats.append(c)
    cover = np.concatenate(covers)
    names = getattr(embedder, "category_names", ())
    return (*pool(np.concatenate(vecs), cover), pool_categories(np.concatenate(cats), cover, names) if cats
            else None)
