"""`SearchAnswer`: what a text search, a find similar and a browse page all return.

One type for the three, so that the CLI, the Search tab and the benchmarks read the same fields: the hits, best
first (or in the browse order), and what the answer says as a whole — the query as read and as corrected, that
even the best hit is unrelated, that a long query was cut, and for a browse page how many sounds there are.
It is a sequence of its hits (`len`, iteration, indexing), so code that only lists results reads it as a list.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, overload

if TYPE_CHECKING:
    from app.services.library.records import Hit
    from app.services.search.query import Query

KINDS = ("text", "similar", "browse")


@dataclass
class SearchAnswer(Sequence["Hit"]):
    kind: str  # one of KINDS
    hits: list[Hit] = field(default_factory=list)
    query: Query | None = None  # a text search's query as read (parsed once); None for similar and browse
    corrected: Query | None = None  # the query with its typos corrected against the library's words; None: none
    no_good_match: bool = False  # even the best hit's calibrated confidence says it is unrelated
    total: int | None = None  # browse: the sounds passing the filters, all pages together
    offset: int = 0  # browse: where this page starts in the sorted list

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")

    @property
    def did_you_mean(self) -> str | None:
        """The corrected query as text (None: nothing was corrected)."""
        return self.corrected.raw if self.corrected is not None else None

    @property
    def shortened_from(self) -> int | None:
        """The query's length when it was over query.MAX_QUERY_CHARS and only its first characters were read."""
        return self.query.shortened_from if self.query is not None else None

    @property
    def required_phrases(self) -> list[str]:
        """The quoted phrases every hit holds (a condition: an empty answer says so)."""
        return self.query.required_phrases if self.query is not None else []

    def __len__(self) -> int:
        return len(self.hits)

    def __iter__(self) -> Iterator[Hit]:
        return iter(self.hits)

    @overload
    def __getitem__(self, i: int) -> Hit: ...
    @overload
    def __getitem__(self, i: slice) -> list[Hit]: ...
    def __getitem__(self, i: int | slice) -> Hit | list[Hit]:
        return self.hits[i]
