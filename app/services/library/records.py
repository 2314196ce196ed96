"""What the library hands out and takes in: errors, the embedder protocol, filters and result records."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from app.services.audio import display_name

PathLike = str | os.PathLike


class LibraryError(Exception):
    """A library that cannot be opened or used (newer catalog, conflicting model, no such file)."""


class DiskFullError(LibraryError):
    """The disk holding the catalog is full; what was committed before is kept and indexing can resume."""


class BrokenModelError(LibraryError):
    """The model produced NaN/inf: it is refused as a whole, the catalog is left as it was."""


@runtime_checkable
class Embedder(Protocol):
    """What the library needs from a retrieval model."""

    model_id: str  # identifies the weights (e.g. checkpoint name + hash); one index per model_id
    sample_rate: int  # audio is decoded to this rate, mono
    dim: int
    window_seconds: float  # files are cut into windows of this length (the last one zero-padded)

    def embed_windows(self, audio_windows: np.ndarray) -> np.ndarray:
        """(W, samples) float32 -> (W, dim), one vector per window."""
        ...

    def embed_text(self, texts: list[str]) -> np.ndarray:
        """N texts -> (N, dim) in the same space as the audio vectors."""
        ...


@dataclass
class SearchFilters:
    min_duration: float | None = None  # seconds
    max_duration: float | None = None
    folder: str | None = None  # relative folder (or absolute inside the library); matches it and below

    @property
    def active(self) -> bool:
        return self.min_duration is not None or self.max_duration is not None or bool(self.folder)


@dataclass
class Hit:
    path: Path  # absolute
    score: float  # cosine similarity with the query
    duration: float
    folder: str  # relative folder, '' for the library root
    best_window_start_s: float  # where in the file the best-matching window starts
    window_scores: list[float]  # similarity of every window
    file_id: int = 0
    rel_path: str = ""

    @property
    def name(self) -> str:
        return display_name(self.rel_path or self.path)


@dataclass
class FailedFile:
    path: str  # relative, os.fsdecode form
    error: str
    file_id: int = 0


@dataclass
class LibraryStats:
    root: Path
    catalog: Path
    files: int
    ok: int
    errors: int
    audio_seconds: float
    vectors: dict[str, int]  # model_id -> vectors in the catalog
    unavailable: int = 0  # files under folders that could not be listed last time (kept, hidden)


@dataclass
class IndexReport:
    model_id: str
    files_seen: int = 0
    unchanged: int = 0
    embedded: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)  # new paths of moved/renamed files (not re-embedded)
    copied: list[str] = field(default_factory=list)  # copies of known content (vector reused)
    touched: int = 0  # mtime changed, content did not
    failed: list[FailedFile] = field(default_factory=list)
    removed: int = 0  # catalog rows of files that are gone
    requeued: int = 0  # files that changed while being read
    windows: int = 0  # windows embedded
    audio_seconds: float = 0.0  # audio embedded
    elapsed_s: float = 0.0
    scan_errors: list[str] = field(default_factory=list)
    unavailable: int = 0  # catalogued files under folders that could not be listed: kept, hidden from results
