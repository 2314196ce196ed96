"""`SearchRequest`: one search the Search tab asks the service for (a text search, a find similar or a browse
page); `jobs.request_job` answers it with a `SearchAnswer`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.services.library.records import SearchFilters

RESULTS_K = 50  # results per page: "Show more" asks for this many more


@dataclass(frozen=True)
class SearchRequest:
    """One search the state asked for; its answer is shown only while it is the latest request."""

    id: int
    kind: str  # "text" | "similar" | "browse" (an empty query: the library's sounds, sorted)
    query: str  # the text ('' for similar and browse)
    target: Path | None  # the file to find sounds like
    ranking: str  # "both" | "names" | "sound": which channels score the results
    names_weight: float | None  # None: the service's tuned default
    filters: SearchFilters
    k: int = RESULTS_K  # how many results (browse: this page's size)
    sort: str = "name"  # browse: name | folder | duration | modified (app.services.search.browse.SORTS)
    descending: bool = False
    offset: int = 0  # browse: where the page starts; > 0 adds it to the results shown ("Show more")
    any_length: bool = False  # similar: also files much longer or shorter than the target

    def shows_the_same(self, other: SearchRequest) -> bool:
        """Whether two requests list the same thing (the history's Back and Forward skip repeats)."""
        return (self.kind, self.query, self.target, self.filters.folder) == \
            (other.kind, other.query, other.target, other.filters.folder)
