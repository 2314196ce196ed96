"""The Search tab's jobs that the search service does not offer itself, without Qt: run a `SearchRequest` (a
search, a find similar or a browse page), edit
tags, mark favourites, read the library's tags. They belong with the service (`app.services.search`) and move
there when it offers them."""

from __future__ import annotations

from collections.abc import Sequence

from app.services.jobs import Job
from app.services.search.browse import browse_job
from app.services.search.jobs import Results, search_job, similar_job
from app.services.search.session import SearchSession
from app.ui.search_state import SearchRequest


def request_job(session: SearchSession, request: SearchRequest) -> Job[Results]:
    if request.kind == "browse":
        return browse_job(session, request.filters, request.sort, request.descending, request.offset, request.k)
    if request.kind == "similar" and request.target is not None:
        return similar_job(session, request.target, request.k, request.filters, names_weight=request.names_weight,
                           any_length=request.any_length)
    return search_job(session, request.query, request.k, request.filters, mode=request.ranking,
                      names_weight=request.names_weight, prefix_last=True)  # the word being typed: a prefix too


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
