"""The search work the GUI runs in its workers (opening, indexing, a `SearchRequest`, tags, favourites), and the
JSON the CLI prints."""

from __future__ import annotations

import base64
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.services.jobs import Job
from app.services.library.categories import shown_category
from app.services.library.records import FailedFile, Hit, IndexReport
from app.services.search.answer import SearchAnswer
from app.services.search.embedder import RetrievalEmbedder
from app.services.search.request import SearchRequest
from app.services.search.session import SearchSession
from core.display import display_name


def open_session_job(path: str | os.PathLike[str], embedder: RetrievalEmbedder) -> Job[SearchSession]:
    yield {"message": f"opening library {display_name(path)}"}
    return SearchSession.open(path, embedder)


@dataclass
class Results:
    """One answer as the Search tab shows it: the service's `SearchAnswer`, and what an empty list means."""

    answer: SearchAnswer
    query: str  # the text, or the display name of the file for "similar"
    indexed: int  # files searchable when it ran (0: nothing indexed yet)
    filtered: bool = False
    folder: str | None = None  # the folder the search was limited to (None: the whole library)
    hits: list[Hit] = field(init=False)  # the answer's hits as shown: sorted by a column, pages appended

    def __post_init__(self) -> None:
        self.hits = list(self.answer.hits)

    @property
    def mode(self) -> str:
        """"text" | "similar" | "browse"."""
        return self.answer.kind


def request_job(session: SearchSession, request: SearchRequest) -> Job[Results]:
    """The answer to one of the Search tab's requests."""
    filtered = request.filters.active
    if request.kind == "browse":
        yield {"message": "listing sounds"}
        page = session.browse(request.filters, request.sort, request.descending, request.offset, request.k)
        return Results(page, "", session.searchable_count("names"), filtered)
    if request.kind == "similar" and request.target is not None:
        name = display_name(Path(request.target).name)
        yield {"message": f"finding sounds like {name}"}
        answer = session.similar(request.target, request.k, request.filters, names_weight=request.names_weight,
                                 any_length=request.any_length)
        return Results(answer, name, session.indexed_count(), filtered, request.filters.folder)
    yield {"message": f"searching for “{request.query}”"}
    answer = session.search(request.query, request.k, request.filters, mode=request.ranking,
                            names_weight=request.names_weight, prefix_last=True)  # the word being typed: a prefix
    return Results(answer, request.query, session.searchable_count(request.ranking), filtered)


def tags_job(session: SearchSession, file_ids: Sequence[int], add: Sequence[str], remove: Sequence[str]
             ) -> Job[tuple[dict[int, list[str]], list[str]]]:
    """Add and remove user tags on several files; returns each file's tags now and the library's tag list."""
    yield {"message": f"tagging {len(file_ids)} sounds"}
    if add:
        session.add_tags(list(file_ids), list(add))
    if remove:
        session.remove_tags(list(file_ids), list(remove))
    return {i: list(session.tags_of(i)) for i in file_ids}, list(session.all_tags())


def favourite_job(session: SearchSession, file_ids: Sequence[int], on: bool) -> Job[tuple[list[int], bool]]:
    yield {"message": ("marking" if on else "unmarking") + f" {len(file_ids)} favourites"}
    session.set_favourite(list(file_ids), on)
    return list(file_ids), on


def all_tags_job(session: SearchSession) -> Job[list[str]]:
    yield {"message": "reading the library's tags"}
    return list(session.all_tags())


@dataclass
class IndexOutcome:
    report: IndexReport
    failed: list[FailedFile]  # every failed file in the catalog, not only this run's
    folders: list[str]
    indexed: int
    categories: list[tuple[str, int]] = field(default_factory=list)  # (UCS category, sounds heard as it)


def index_session_job(session: SearchSession, **kwargs: Any) -> Job[IndexOutcome]:
    """Index, then gather what the Search tab shows about the catalog (all off the GUI thread)."""
    report = yield from session.index_job(**kwargs)
    return IndexOutcome(report, session.failed_files(), session.folders(), session.indexed_count(),
                        session.category_counts())


def catalog_job(session: SearchSession
                ) -> Job[tuple[list[FailedFile], list[str], int, list[tuple[str, int]]]]:
    yield {"message": "reading the catalog"}
    return session.failed_files(), session.folders(), session.indexed_count(), session.category_counts()


def summarize(report: IndexReport) -> dict[str, Any]:
    """An IndexReport as numbers for the CLI and the status line (throughput in × real time)."""
    elapsed = max(report.elapsed_s, 1e-9)
    return {
        "model": report.model_id,
        "files": report.files_seen,
        "unchanged": report.unchanged,
        "embedded": len(report.embedded),
        "moved": len(report.moved),
        "copied": len(report.copied),
        "removed": report.removed,
        "failed": len(report.failed),
        "windows": report.windows,
        "long_files_spread": report.spread,
        "audio_seconds": round(report.audio_seconds, 3),
        "elapsed_s": round(report.elapsed_s, 3),
        "x_realtime": round(report.audio_seconds / elapsed, 2) if report.audio_seconds else 0.0,
        "failures": [{"path": f.path, "error": f.error} for f in report.failed],
        "scan_errors": list(report.scan_errors),
        "texts": report.texts,
        "text_vectors": report.text_vectors,
        "tag_problems": [{"path": f.path, "error": f.error} for f in report.tag_problems],
    }


def path_fields(path: str | os.PathLike[str], key: str = "path") -> dict[str, str]:
    """A path for JSON: {key: text}, plus {key + "_bytes": base64 of the exact bytes} when the name is not
    valid UTF-8. The text is then only for display (undecodable bytes become U+FFFD); open the bytes."""
    raw = os.fsencode(path)
    try:
        return {key: raw.decode("utf-8")}
    except UnicodeDecodeError:
        return {key: raw.decode("utf-8", "replace"), f"{key}_bytes": base64.b64encode(raw).decode("ascii")}


def hit_dict(hit: Hit) -> dict[str, Any]:
    """A hit as JSON-safe values: every string is valid Unicode (see `path_fields` for odd file names)."""
    out = {**path_fields(hit.path), "name": hit.name, "folder": display_name(hit.folder),
           "score": round(hit.score, 5), "duration": round(hit.duration, 3),
           "best_window_start_s": hit.best_window_start_s, "window_scores": [round(s, 5) for s in hit.window_scores],
           "sample_rate": hit.sample_rate, "channels": hit.channels,
           "user_tags": list(hit.user_tags), "favourite": hit.favourite,
           "category": shown_category(hit.categories), "categories": [{"category": c, "confidence": round(p, 3)}
                                                            for c, p in hit.categories]}
    if hit.location:
        out["location"] = hit.location
    if hit.match is not None:
        m = hit.match
        out["match"] = {"matched_terms": m.matched_terms, "name_score": round(m.name_score, 5),
                        "keyword_score": round(m.keyword_score, 5), "semantic_score": round(m.semantic_score, 5),
                        "sound_score": round(m.sound_score, 5) if m.heard else None,  # None: not indexed yet
                        "found_by": m.found_by, "like_path": display_name(m.like_path) if m.like_path else None,
                        "category": m.category or None,
                        "fields": {k: display_name(v) for k, v in m.fields.items()},
                        "spans": {k: [list(sp) for sp in v] for k, v in m.spans.items()}}
    return out

