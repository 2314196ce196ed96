"""What the library hands out and takes in: errors, the embedder protocol, filters and result records.

The library takes an `Embedder` (the protocol here), never a model, so the retrieval model can change without
touching the library (docs/library.md).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from core.display import display_name

PathLike = str | os.PathLike
TEXT_PREFIX = "text:"  # the model id of a sentence encoder's vectors starts so (the text channel's)


def is_text_model(model_id: str) -> bool:
    return model_id.startswith(TEXT_PREFIX)


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


@runtime_checkable
class TextEncoder(Protocol):
    """What the text channel needs from a sentence encoder (app.services.search.text_tower.SentenceEncoder)."""

    model_id: str  # "text:<encoder>": its vectors are stored like a model's
    dim: int

    def embed_text(self, texts: list[str]) -> np.ndarray:
        """N texts -> (N, dim) unit vectors."""
        ...


@runtime_checkable
class PreparingEmbedder(Embedder, Protocol):
    """An embedder whose front end can run apart from its model (the indexer's reader threads run it)."""

    def prepare_windows(self, audio_windows: np.ndarray) -> Any:  # noqa: ANN401 - the embedder's own batch type
        """(W, samples) float32 -> the model's input for them."""
        ...

    def embed_prepared(self, batches: Sequence[Any]) -> np.ndarray:
        """Prepared batches (of one or several files) -> (their windows, dim), in order."""
        ...


@dataclass
class SearchFilters:
    min_duration: float | None = None  # seconds
    max_duration: float | None = None
    folder: str | None = None  # relative folder (or absolute inside the library); matches it and below
    formats: tuple[str, ...] | list[str] | None = None  # extensions without the dot, any case: ("wav", "flac")
    min_sample_rate: int | None = None  # Hz, of the file as stored
    max_sample_rate: int | None = None
    channels: int | None = None  # 1 = mono, 2 = stereo, ...
    favourites_only: bool = False
    category: str | None = None  # a UCS category its sound was heard as (the top one, shown: CATEGORY_SHOWN)

    @property
    def active(self) -> bool:
        return (self.min_duration is not None or self.max_duration is not None or bool(self.folder)
                or bool(self.formats) or self.min_sample_rate is not None or self.max_sample_rate is not None
                or self.channels is not None or self.favourites_only or bool(self.category))

    @property
    def format_set(self) -> list[str]:
        return sorted({f.lower().lstrip(".") for f in self.formats or () if f.strip(". ")})


Span = tuple[int, int]  # [start, end) character offsets


@dataclass
class MatchInfo:
    """Why a result matched: the query words found in its name, folder, tags or user tags (with where, to
    highlight them), and the score of each channel (0..1 after normalisation; sound_score is the raw cosine)."""

    matched_terms: list[str] = field(default_factory=list)
    spans: dict[str, list[Span]] = field(default_factory=dict)  # field -> spans in that field's text below
    fields: dict[str, str] = field(default_factory=dict)  # name, folder, tags, user_tags: the text the spans index
    name_score: float = 0.0  # text channel: keyword (BM25) and semantic (MiniLM) combined, 0..1
    keyword_score: float = 0.0  # how strongly the file holds the query's words, 0..1 (search/keywords.py)
    semantic_score: float = 0.0  # cosine of the query and the file's text, raw
    sound_score: float = 0.0  # cosine of the query and the file's audio, raw
    sound_norm: float = 0.0  # the sound score as fused, 0..1
    heard: bool = True  # the file's audio is embedded; False while indexing has not reached it (no sound score)
    found_by: str = ""  # "name", "sound", "like" (it sounds like the named match at like_path) or "category"
    like_path: str = ""  # relative path of the named match it sounds like
    category: str = ""  # found by "category": the sound category of its that answered the query


@dataclass
class Hit:
    path: Path  # absolute
    score: float  # the ranking score: cosine with the query (sound), or the fused score (names/both)
    duration: float
    folder: str  # relative folder, '' for the library root
    best_window_start_s: float  # where in the file the best-matching window starts
    window_scores: list[float]  # similarity of every window
    file_id: int = 0
    rel_path: str = ""
    match: MatchInfo | None = None
    user_tags: list[str] = field(default_factory=list)
    favourite: bool = False
    sample_rate: int = 0  # the file's own, from its header (0: unknown)
    channels: int = 0
    embedded: bool = True  # its audio has a vector of the model asked (False: only its names are indexed yet)
    categories: list[tuple[str, float]] = field(default_factory=list)  # what its sound was heard as, best first
    location: str = ""  # the library location it is in, when several are searched together (library_set.py)

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
    text_vectors: int = 0  # files with a sentence vector of their names and tags
    tag_problems: int = 0  # files whose embedded tags could not (all) be read: indexed by name and sound anyway


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
    spread: int = 0  # long files embedded from spread windows, not every one (embedding.LONG_FILE_WINDOWS)
    audio_seconds: float = 0.0  # audio embedded
    elapsed_s: float = 0.0
    scan_errors: list[str] = field(default_factory=list)
    unavailable: int = 0  # catalogued files under folders that could not be listed: kept, hidden from results
    texts: int = 0  # files whose name/tag text was derived (new, renamed, changed, or upgraded catalogs)
    text_vectors: int = 0  # sentence vectors embedded (only files whose text changed)
    tag_problems: list[FailedFile] = field(default_factory=list)  # tags that could not be read (files indexed)
