"""A text query's candidates from both channels in one call, and the hits that show the best of them in another.

    CandidateRequest + encode() --gather---------> Candidates   (ids and each channel's raw scores)
    file ids + query vector     --explained_hits-> Hits         (windows, the text to highlight, tags)

The keyword channel needs no query vector, so it runs (FTS5 on the catalog's read-only connection, in a thread)
while `encode` computes the query's vectors on the caller's thread: the slowest part of a names search and the
query encoding overlap instead of adding up. Then the nearest files of each vector channel; every candidate of
one channel is scored exactly by the others (their vectors from the loaded indexes), so the fused ranking of the
union does not depend on which channel found a file. A request's quoted phrases are a condition: only files
whose texts hold them come back; each vector channel's nearest are searched among those files (a phrase that
50,000 files hold must not lose them all to nearer files without it), and when few files hold it, every one of
them is a candidate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from app.services.library.records import Hit, MatchInfo, SearchFilters

if TYPE_CHECKING:
    from app.services.library.library import Library

REQUIRED_SCORED = 20_000  # a phrase matching at most this many files makes every one of them a candidate


@dataclass(frozen=True)
class QueryVectors:
    """A query in each vector channel's space; None where that channel is not asked."""

    sound: np.ndarray | None  # (D,) the retrieval model's text tower: compared with the audio vectors
    text: np.ndarray | None  # (D',) the sentence encoder's: compared with the names' sentence vectors


@dataclass(frozen=True)
class CandidateRequest:
    """What one text query asks of the library."""

    sound_model: str  # the retrieval model's id (its audio vectors)
    text_model: str | None  # the sentence encoder's id; None: no sentence vectors (keywords only)
    n: int  # candidates per channel (sound only: the files returned)
    keyword_parts: tuple[str, ...] = ()  # the query's FTS5 parts, OR-ed; none: no keyword channel
    exclude: str | None = None  # FTS5 expression of the excluded words: their files never come back
    require: str | None = None  # FTS5 expression of the quoted phrases: only files that hold them come back
    common_cap: int = 0  # a part matching this many files or more is left out of the BM25 ranking, when another
    # part is more specific (BM25 costs a step per matching file; such a word weighs next to nothing in it)
    filters: SearchFilters | None = None
    sound_only: bool = False  # the sound channel alone: its n nearest files, best first, nothing else scored
    exclude_ids: tuple[int, ...] = ()  # files never returned (find similar: the file itself)


@dataclass
class Candidates:
    """Each channel's raw scores over the union of the candidates (file id -> score); a file missing from one
    has no score there (no keyword match, no vector)."""

    keyword: dict[int, float]  # BM25, higher is better
    semantic: dict[int, float]  # cosine of the names' sentence vector
    sound: dict[int, float]  # cosine of the audio vector (sound only: best first)
    query: QueryVectors  # the vectors they were scored with
    tagged: set[int] = field(default_factory=set)  # keyword candidates the user tagged with every query word
    skip: list[int] = field(default_factory=list)  # files never returned (excluded words, the file itself)
    within: set[int] | None = None  # only these files may come back (they hold the query's phrases)

    def ids(self) -> list[int]:
        return list(dict.fromkeys([*self.keyword, *self.semantic, *self.sound]))


def gather(library: Library, request: CandidateRequest, encode: Callable[[], QueryVectors]) -> Candidates:
    """The request's candidates from both channels, scored over their union."""
    search, filters = library.search, request.filters
    with ThreadPoolExecutor(1, thread_name_prefix="earshot-keywords") as pool:
        keywords = pool.submit(_keyword_candidates, library, request)
        query = encode()  # leaving the block joins the keyword thread (its error, if any, is raised below)
    excluded, found, tagged, required = keywords.result()
    excluded |= set(request.exclude_ids)
    skip = sorted(excluded)
    if required is not None:
        required = search.allowed_files(sorted(required - excluded), filters)
    if request.sound_only:
        sound = dict(search.nearest_files(query.sound, request.sound_model, request.n, filters, skip, required)
                     ) if query.sound is not None else {}
        out = Candidates({}, {}, sound, query)
        if required is not None and query.sound is not None:
            _score_required(library, out, required, request)
            out.sound = dict(sorted(out.sound.items(), key=lambda fs: (-fs[1], fs[0]))[:request.n])
        return out
    keyword: dict[int, float] = {}
    if found:
        allowed = search.allowed_files([f for f, _ in found], filters)
        keyword = {f: s for f, s in found if f in allowed and f not in excluded}
    semantic: dict[int, float] = {}
    sound: dict[int, float] = {}
    if query.text is not None and request.text_model is not None:
        semantic = dict(search.nearest_files(query.text, request.text_model, request.n, filters, skip, required))
    if query.sound is not None:
        sound = dict(search.nearest_files(query.sound, request.sound_model, request.n, filters, skip, required))
    out = Candidates(keyword, semantic, sound, query, tagged & keyword.keys(), skip, required)
    if required is not None:
        _score_required(library, out, required, request)
    if query.sound is not None:
        fill(library, out.sound, out.ids(), request.sound_model, query.sound)
    if query.text is not None and request.text_model is not None:
        fill(library, out.semantic, out.ids(), request.text_model, query.text)
    return out


def sound_neighbours(library: Library, out: Candidates, request: CandidateRequest, vectors: Sequence[np.ndarray]
                     ) -> list[int]:
    """The files nearest each of `vectors` in the sound space, under the request's filters and conditions, added
    to the candidates with their sound cosine to the query (and their names' cosine): the files that sound like
    the best matches, found wherever they are in the library. Returns the files new to the candidates."""
    known = set(out.ids())
    found: list[int] = []
    for v in vectors:
        found += [f for f, _ in library.search.nearest_files(v, request.sound_model, request.n, request.filters,
                                                             out.skip, out.within) if f not in known]
    new = list(dict.fromkeys(found))
    if new and out.query.sound is not None:
        fill(library, out.sound, new, request.sound_model, out.query.sound)
    if new and out.query.text is not None and request.text_model is not None:
        fill(library, out.semantic, new, request.text_model, out.query.text)
    return new


def _score_required(library: Library, out: Candidates, required: set[int], request: CandidateRequest) -> None:
    """Few files hold the query's phrases: each of them becomes a candidate, scored in every vector channel it
    has a vector in (the keyword channel scored those it ranked; the others hold the phrase and nothing more)."""
    if len(required) > REQUIRED_SCORED:
        return
    ids = sorted(required)
    if out.query.sound is not None:
        fill(library, out.sound, ids, request.sound_model, out.query.sound)
    if out.query.text is not None and request.text_model is not None:
        fill(library, out.semantic, ids, request.text_model, out.query.text)


def fill(library: Library, scores: dict[int, float], ids: Sequence[int], model_id: str, q: np.ndarray) -> None:
    """Add the cosine to q of every file among `ids` that `scores` lacks (files without a vector stay out)."""
    missing = [f for f in ids if f not in scores]
    if missing:
        qn = np.asarray(q, np.float32) / max(float(np.linalg.norm(q)), 1e-12)  # (D,)
        scores.update(library.vectors.scores(model_id, missing, qn))


def explained_hits(library: Library, file_ids: Sequence[int], model_id: str, query: np.ndarray | None
                   ) -> dict[int, Hit]:
    """Hits of the given files with their per-window similarity to `query` (see
    VectorSearch.hits_for), the text the why-matched display highlights (`match.fields`: name, folder, embedded
    tags, user tags), the user's tags and the favourite mark. Scores are the caller's (0 here)."""
    hits = library.search.hits_for(file_ids, model_id, query)
    ids = list(hits)
    fields, tags, favourites = library.text.fields(ids), library.user_tags.of_files(ids), \
        library.user_tags.favourites(ids)
    for fid, hit in hits.items():
        path, tag_text = fields.get(fid, (hit.rel_path, ""))
        hit.user_tags = tags.get(fid, [])
        hit.favourite = fid in favourites
        folder, _, name = path.rpartition("/")
        hit.match = MatchInfo(fields={"name": name, "folder": folder, "tags": tag_text,
                                      "user_tags": "; ".join(hit.user_tags)})
    return hits


def _keyword_candidates(library: Library, request: CandidateRequest
                        ) -> tuple[set[int], list[tuple[int, float]], set[int], set[int] | None]:
    """The files the request excludes, the best keyword matches (file id, BM25) beyond them, the files the user
    tagged with every word of the query, and the files holding its phrases (None: it has none)."""
    text = library.text
    excluded = text.keyword_files(request.exclude) if request.exclude else set()
    required = text.keyword_files(request.require) if request.require else None
    if request.sound_only or not request.keyword_parts:
        return excluded, [], set(), required
    match = text.specific_match(request.keyword_parts, request.common_cap)
    if match and request.require:  # BM25 ranks the files that hold the phrases, not the best of any
        match = f"({match}) AND ({request.require})"
    found = text.keyword_search(match, request.n + len(excluded)) if match else []
    return excluded, found, text.user_tagged(request.keyword_parts) - excluded, required
