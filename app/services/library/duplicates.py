"""Duplicates in a library: the same recording in several files (issue 39, item 5).

Two files are duplicates when their bytes are the same (the catalog's content hash: found at once), or when they
hold the same sound in another form (another format, sample rate or bit depth, trimmed a little, at another
level). Those are found in two steps: candidates from the stored sound vectors (each file's nearest neighbours
in the model's index, cosine >= `min_cosine`, durations within `max_gap_s` or `max_gap` of each other), then the
audio itself (audio_match.py: the prints of both files must match >= `min_match`). Pairs join into groups (one
file's duplicates are its group). The thresholds were measured on made copies of the development libraries'
sounds (bench/duplicates_quality.py; docs/categories.md, "Duplicates").
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from app.services.jobs import Job
from app.services.library import audio_match
from app.services.library.catalog import id_chunks
from app.services.library.library import Library
from core.audio import AudioError


@dataclass(frozen=True)
class DuplicateConfig:
    neighbours: int = 32  # nearest files by sound looked at per file (a short bright sound at another rate
    # or trimmed is often 10th-30th: the audio check decides)
    min_cosine: float = 0.7  # stored vectors at least this alike to be compared by their audio
    max_gap_s: float = 0.3  # durations may differ by this much (seconds) ...
    max_gap: float = 0.1  # ... or by this share of the longer one
    min_match: float = 0.95  # audio prints at least this alike (audio_match.match); both chosen by
    # bench/duplicates_quality.py on the tuning libraries
    block: int = 2048  # vectors searched at once


@dataclass(frozen=True)
class DupFile:
    file_id: int
    rel_path: str
    duration: float
    sample_rate: int
    channels: int
    size: int


@dataclass
class DuplicateGroup:
    files: list[DupFile]  # the group's files, by path
    identical: bool  # every file holds the same bytes
    match: float = 1.0  # the weakest audio match that joined the group (1.0: identical)
    pairs: list[tuple[int, int, float]] = field(default_factory=list)  # (file id, file id, match) joined by sound


def find_duplicates(lib: Library, model_id: str, config: DuplicateConfig | None = None,
                    file_id: int | None = None) -> Job[list[DuplicateGroup]]:
    """The library's groups of duplicates (or only the group of `file_id`), largest first."""
    config = config or DuplicateConfig()
    files = _files(lib)
    yield {"message": "files with the same bytes", "step": 0, "total": 3}
    links = _same_bytes(lib, files, file_id)
    yield {"message": "files that sound alike", "step": 1, "total": 3}
    candidates = _candidates(lib, model_id, files, config, file_id)
    yield {"message": f"comparing the audio of {len(candidates)} pairs", "step": 2, "total": 3}
    matched = yield from _verified(lambda fid: lib.root / files[fid][0].rel_path, files, candidates, config)
    groups = _groups(files, links, matched)
    if file_id is not None:
        groups = [g for g in groups if any(f.file_id == file_id for f in g.files)]
    return groups


ID_SHIFT = 40  # several libraries: a file is (its library's place + 1) << ID_SHIFT | its id (library_set.py)


def find_duplicates_across(libs: Sequence[tuple[str, Library]], model_id: str,
                           config: DuplicateConfig | None = None) -> Job[list[DuplicateGroup]]:
    """Groups of duplicates over several libraries: each one's own and the copies of a sound in another. Paths
    start with the library's name; ids are numbered across them (ID_SHIFT)."""
    config = config or DuplicateConfig()
    files: dict[int, tuple[DupFile, str | None]] = {}
    roots: dict[int, Path] = {}
    offsets = [(part + 1) << ID_SHIFT for part in range(len(libs))]
    for (name, lib), offset in zip(libs, offsets, strict=True):
        for fid, (f, digest) in _files(lib).items():
            files[fid + offset] = (replace(f, file_id=fid + offset, rel_path=f"{name}/{f.rel_path}"), digest)
            roots[fid + offset] = lib.root / f.rel_path
    yield {"message": "files with the same bytes", "step": 0, "total": 3}
    links = _same_bytes(None, files, None)
    yield {"message": "files that sound alike", "step": 1, "total": 3}
    candidates: set[tuple[int, int]] = set()
    for (_, lib), a in zip(libs, offsets, strict=True):
        for (_, other), b in zip(libs, offsets, strict=True):
            if b >= a:  # each pair of libraries once, and each library with itself
                candidates |= _candidates(lib, model_id, files, config, None, other, (a, b))
    yield {"message": f"comparing the audio of {len(candidates)} pairs", "step": 2, "total": 3}
    matched = yield from _verified(roots.__getitem__, files, candidates, config)
    return _groups(files, links, matched)


def _files(lib: Library) -> dict[int, tuple[DupFile, str | None]]:
    """Searchable files: id -> (file, content hash)."""
    with lib.lock:
        rows = lib.catalog.db.execute(
            "SELECT id, path, duration, sample_rate, channels, size, hash FROM files"
            " WHERE status = 'ok' AND available = 1").fetchall()
    return {r[0]: (DupFile(r[0], os.fsdecode(bytes(r[1])), float(r[2] or 0.0), int(r[3] or 0), int(r[4] or 0),
                           int(r[5] or 0)), r[6]) for r in rows}


def _same_bytes(lib: Library | None, files: dict[int, tuple[DupFile, str | None]], file_id: int | None
                ) -> list[tuple[int, int]]:
    """Pairs of files whose content hashes are the same (each group as a chain)."""
    by_hash: dict[str, list[int]] = {}
    for fid, (_, digest) in files.items():
        if digest:
            by_hash.setdefault(digest, []).append(fid)
    chains = [sorted(ids) for ids in by_hash.values() if len(ids) > 1
              and (file_id is None or file_id in ids)]
    return [(c[i], c[i + 1]) for c in chains for i in range(len(c) - 1)]


def _candidates(lib: Library, model_id: str, files: dict[int, tuple[DupFile, str | None]], config: DuplicateConfig,
                file_id: int | None, other: Library | None = None, ids: tuple[int, int] = (0, 0)
                ) -> set[tuple[int, int]]:
    """Pairs (low id, high id) of different content whose vectors and durations are alike enough: `lib`'s files
    among themselves, or (`other`) `lib`'s files near `other`'s in its index; `ids`: what each library's ids are
    offset by in `files` (files of several libraries)."""
    there = other if other is not None else lib
    index = there.vectors.index(model_id)
    if index is None or len(index) == 0:
        return set()
    mine_of, theirs_of = _owners(lib, model_id, ids[0]), _owners(there, model_id, ids[1])
    mine = [v for v, f in mine_of.items() if f in files and (file_id is None or f == file_id)]
    out: set[tuple[int, int]] = set()
    for start in range(0, len(mine), config.block):
        block = mine[start:start + config.block]
        vectors = _vectors(lib, block)  # (B, D)
        scores, found = index.search(vectors, config.neighbours + 1)  # (B, k), (B, k)
        for row, vid in enumerate(block):
            a = mine_of[vid]
            for score, other_vid in zip(scores[row], found[row], strict=True):
                b = theirs_of.get(int(other_vid))
                if b is None or b == a or b not in files or score < config.min_cosine:
                    continue
                if files[a][1] and files[a][1] == files[b][1]:
                    continue  # same bytes: already linked
                if _durations_close(files[a][0].duration, files[b][0].duration, config):
                    out.add((min(a, b), max(a, b)))
    return out


def _owners(lib: Library, model_id: str, offset: int = 0) -> dict[int, int]:
    """Vector id -> its file's id (+ offset) of the model's vectors."""
    with lib.lock:
        rows = lib.catalog.db.execute("SELECT id, file_id FROM vectors WHERE model_id = ?", (model_id,)).fetchall()
    return {v: f + offset for v, f in rows}


def _vectors(lib: Library, vector_ids: Sequence[int]) -> np.ndarray:
    rows: dict[int, np.ndarray] = {}
    with lib.lock:
        for part, marks in id_chunks(vector_ids):
            for vid, blob in lib.catalog.db.execute(f"SELECT id, vector FROM vectors WHERE id IN ({marks})", part):
                rows[vid] = np.frombuffer(blob, dtype=np.float32)
    return np.stack([rows[v] for v in vector_ids])


def _durations_close(a: float, b: float, config: DuplicateConfig) -> bool:
    return abs(a - b) <= max(config.max_gap_s, config.max_gap * max(a, b))


def _verified(path_of: Callable[[int], Path], files: dict[int, tuple[DupFile, str | None]],
              pairs: set[tuple[int, int]], config: DuplicateConfig) -> Job[list[tuple[int, int, float]]]:
    """The candidate pairs whose audio prints match, with how well. A file that cannot be read matches nothing."""
    prints: dict[int, audio_match.Print | None] = {}

    def print_of(fid: int) -> audio_match.Print | None:
        if fid not in prints:
            try:
                prints[fid] = audio_match.audio_print(str(path_of(fid)))
            except (AudioError, OSError):
                prints[fid] = None
        return prints[fid]

    out = []
    for i, (a, b) in enumerate(sorted(pairs)):
        pa, pb = print_of(a), print_of(b)
        if pa is not None and pb is not None:
            m = audio_match.match(pa, pb)
            if m >= config.min_match:
                out.append((a, b, m))
        if i % 16 == 0:
            yield {"message": f"comparing the audio of {len(pairs)} pairs", "files_done": i, "files_total": len(pairs)}
    return out


def _groups(files: dict[int, tuple[DupFile, str | None]], same: list[tuple[int, int]],
            matched: list[tuple[int, int, float]]) -> list[DuplicateGroup]:
    """Union-find over both kinds of links -> groups, largest first, then by first path."""
    parent: dict[int, int] = {}

    def root(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in [*same, *[(a, b) for a, b, _ in matched]]:
        parent[root(a)] = root(b)
    members: dict[int, list[int]] = {}
    for x in list(parent):
        members.setdefault(root(x), []).append(x)
    groups = []
    for ids in members.values():
        inside = set(ids)
        links = [(a, b, m) for a, b, m in matched if a in inside]
        digests = {files[i][1] for i in ids}
        groups.append(DuplicateGroup(sorted((files[i][0] for i in ids), key=lambda f: f.rel_path),
                                     identical=len(digests) == 1 and None not in digests,
                                     match=min((m for _, _, m in links), default=1.0), pairs=links))
    return sorted(groups, key=lambda g: (-len(g.files), g.files[0].rel_path))
