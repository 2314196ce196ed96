"""The search work the GUI runs in its workers (opening, indexing, searching), and the JSON the CLI prints."""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.services.audio import display_name
from app.services.jobs import Job
from app.services.library.records import FailedFile, Hit, IndexReport, SearchFilters
from app.services.search.embedder import RetrievalEmbedder
from app.services.search.session import SearchSession


def open_session_job(path: str | os.PathLike[str], embedder: RetrievalEmbedder) -> Job[SearchSession]:
    yield {"message": f"opening library {display_name(path)}"}
    return SearchSession.open(path, embedder)


@dataclass
class Results:
    """One search's answer for the GUI: hits, and what an empty list means."""

    hits: list[Hit]
    query: str  # the text, or the display name of the file for "similar"
    mode: str  # "text" | "similar"
    indexed: int  # vectors in the index when it ran (0: nothing indexed yet)
    filtered: bool = False


def search_job(session: SearchSession, text: str, k: int, filters: SearchFilters | None, mode: str = "both",
               names_weight: float | None = None, prefix_last: bool = False) -> Job[Results]:
    yield {"message": f"searching for “{text}”"}
    hits = session.search(text, k, filters, mode=mode, names_weight=names_weight, prefix_last=prefix_last)
    return Results(hits, text, "text", session.searchable_count(mode), bool(filters and filters.active))


def similar_job(session: SearchSession, path: str | os.PathLike[str], k: int,
                filters: SearchFilters | None, names_weight: float | None = None,
                any_length: bool = False) -> Job[Results]:
    yield {"message": f"finding sounds like {display_name(Path(path).name)}"}
    hits = session.similar(path, k, filters, names_weight=names_weight, any_length=any_length)
    return Results(hits, display_name(Path(path).name), "similar", session.indexed_count(),
                   bool(filters and filters.active))


@dataclass
class IndexOutcome:
    report: IndexReport
    failed: list[FailedFile]  # every failed file in the catalog, not only this run's
    folders: list[str]
    indexed: int


def index_session_job(session: SearchSession, **kwargs: Any) -> Job[IndexOutcome]:
    """Index, then gather what the Search tab shows about the catalog (all off the GUI thread)."""
    report = yield from session.index_job(**kwargs)
    return IndexOutcome(report, session.failed_files(), session.folders(), session.indexed_count())


def catalog_job(session: SearchSession) -> Job[tuple[list[FailedFile], list[str], int]]:
    yield {"message": "reading the catalog"}
    return session.failed_files(), session.folders(), session.indexed_count()


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
           "user_tags": list(hit.user_tags), "favourite": hit.favourite}
    if hit.match is not None:
        m = hit.match
        out["match"] = {"matched_terms": m.matched_terms, "name_score": round(m.name_score, 5),
                        "keyword_score": round(m.keyword_score, 5), "semantic_score": round(m.semantic_score, 5),
                        "sound_score": round(m.sound_score, 5) if m.heard else None,  # None: not indexed yet
                        "fields": {k: display_name(v) for k, v in m.fields.items()},
                        "spans": {k: [list(sp) for sp in v] for k, v in m.spans.items()}}
    return out

