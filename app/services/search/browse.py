"""Browsing without typing: the library's catalogued sounds, filtered and sorted, one page at a time (no Qt).

An empty query in the Search tab lists sounds (all of them, a folder, the favourites) instead of nothing. The
files pass the same `SearchFilters` as a search (`library.search.allowed_files`), are sorted by name, folder,
duration or date modified, and the page asked for becomes a `SearchAnswer` of `Hit`s through the same
`explained_hits` as search results (with tags and favourite marks, no scores).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.services.library.records import SearchFilters
from app.services.search.answer import SearchAnswer
from app.services.search.candidates import explained_hits
from core.display import natural_key, natural_path_key

if TYPE_CHECKING:
    from app.services.library.library import Library

SORTS = ("name", "folder", "duration", "modified")


@dataclass(frozen=True)
class Listed:
    """One catalogued sound as the browse list sorts it."""

    file_id: int
    rel_path: str
    duration: float
    mtime_ns: int

    @property
    def name(self) -> str:
        return self.rel_path.rpartition("/")[2]

    @property
    def folder(self) -> str:
        return self.rel_path.rpartition("/")[0]


SORT_KEYS: dict[str, Callable[[Listed], tuple]] = {  # names and folders in natural order (core.display)
    "name": lambda f: (natural_key(f.name), natural_path_key(f.folder)),
    "folder": lambda f: (natural_path_key(f.folder), natural_key(f.name)),
    "duration": lambda f: (f.duration, natural_key(f.name)),
    "modified": lambda f: (f.mtime_ns, natural_key(f.name)),
}


def listed_files(library: Library, filters: SearchFilters | None) -> list[Listed]:
    """The library's readable, available sounds passing `filters`, unsorted: one query with the filters in it
    (checking every file id against them took 62 queries under the library's lock at 31,000 files)."""
    rows = library.search.listed_rows(filters)
    return [Listed(i, os.fsdecode(bytes(p)), float(d or 0.0), int(m or 0)) for i, p, d, m in rows]


def browse(library: Library, model_id: str, filters: SearchFilters | None = None, sort: str = "name",
           descending: bool = False, offset: int = 0, limit: int = 50) -> SearchAnswer:
    """Sounds `offset` .. `offset + limit` of the library sorted by `sort` (one of SORTS), as hits; `total`: how
    many pass the filters."""
    if sort not in SORT_KEYS:
        raise ValueError(f"sort must be one of {', '.join(SORTS)}, got {sort!r}")
    files = sorted(listed_files(library, filters), key=SORT_KEYS[sort], reverse=descending)
    page = files[max(0, offset):max(0, offset) + max(0, limit)]
    hits = explained_hits(library, [f.file_id for f in page], model_id, None)
    return SearchAnswer("browse", [hits[f.file_id] for f in page if f.file_id in hits], total=len(files),
                        offset=max(0, offset))
