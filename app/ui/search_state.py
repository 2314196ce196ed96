"""The Search tab's state without Qt: what to search for, what came back, what is selected and previewed.

Model/view, as in napari's evented models and Qt's item models: `SearchState` holds the library folder, the query,
the names <-> sound balance, the filters, the results and which of them are selected, the previewed hit, the
library's failed files, folders and tags, and the searches shown so far. Its methods change it and tell the
listeners of `events`; the tab's widgets draw it and send the user's actions to it, and the tab runs the jobs it
asks for (`start_search` returns a `SearchRequest`; the answer comes back through `accept`). No Qt, no torch:
tests/test_search_state.py drives it directly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.services.library.records import SearchFilters
from app.services.search.fusion import NAMES_WEIGHT
from app.services.search.request import RESULTS_K, SearchRequest
from app.ui.search_text import channel_scores
from app.ui.state_events import Event
from core.display import natural_key, natural_path_key

if TYPE_CHECKING:
    from app.services.library.records import FailedFile, Hit
    from app.services.search.preview import Preview
    from app.services.search.search_jobs import Results

BALANCE_STEPS = 100  # slider position = the sound channel's share in percent: 0 = names only, 100 = sound only
HISTORY_LIMIT = 100
SCORE_SORTS = ("names", "sound")  # a channel's score column: sorted best first


def balance(position: int, default_position: int | None = None) -> tuple[str, float | None]:
    """Slider position -> (mode, names_weight) for the search service; None = the service's tuned default."""
    if position <= 0:
        return "names", None
    if position >= BALANCE_STEPS:
        return "sound", None
    if position == default_position:
        return "both", None
    return "both", round(1.0 - position / BALANCE_STEPS, 2)


def balance_position(names_weight: float) -> int:
    return round((1.0 - names_weight) * BALANCE_STEPS)


def balance_text(position: int) -> str:
    if position <= 0:
        return "names only"
    if position >= BALANCE_STEPS:
        return "sound only"
    return f"names {BALANCE_STEPS - position} % · sound {position} %"


class SearchEvents:
    """What changed in a `SearchState`; listeners run after the change."""

    def __init__(self) -> None:
        self.search = Event()  # (now: bool) the query, balance or filters changed: search again, now or debounced
        self.results = Event()  # new results (or none)
        self.hits = Event()  # (rows: list[int]) these results' tags or favourite marks changed
        self.selection = Event()  # other results are selected
        self.preview = Event()  # the previewed result changed, or its audio arrived
        self.catalog = Event()  # the library's failed files and folders changed
        self.library = Event()  # another library folder, or the library became ready or closed


class SearchState:
    def __init__(self) -> None:
        self.events = SearchEvents()
        self.library: Path | None = None
        self.ready = False  # a library is open with a model: searches, tags and favourites can run
        self.query = ""
        self.mode = "text"  # what the results list shows: "text" search or "similar" to a file
        self.similar_to: Path | None = None
        self.similar_names_weight: float | None = None  # None: find similar by sound alone
        self.similar_any_length = False  # find similar: lengths far from the target's too (music for a one-shot)
        self.similar_in_folder = False  # find similar: only in the folder browsed (else the whole library)
        self.default_balance = balance_position(NAMES_WEIGHT)
        self.balance = self.default_balance
        self.filters = SearchFilters()
        self.results: Results | None = None
        self.shown_request: SearchRequest | None = None  # the request the results shown answer
        self.history: list[SearchRequest] = []  # the searches whose results were shown, oldest first
        self.history_pos = -1  # the entry shown now: Back goes before it, Forward after it
        self.k = RESULTS_K  # results asked for: "Show more" raises it, a new search starts again
        self.sort = ""  # the column the list is sorted by: '' = relevance (searches) / name (browsing)
        self.descending = False
        self.ranked: list[Hit] = []  # the search's results in relevance order: a third header click brings it back
        self._navigating: SearchRequest | None = None  # Back/Forward: the history entry to show again
        self._replay = 0  # the request showing it
        self.pending = False  # a search is running and another was asked for: drop its answer, run again
        self.selected: list[int] = []  # rows of the selected results
        self.current = -1  # the row with the keyboard focus
        self.picked: Path | None = None  # the sound the user chose (click, keys): new lists keep it selected
        self.same_list = False  # the results shown are the last list again (sorted, more rows, searched again)
        self.preview_hit: Hit | None = None
        self.preview: Preview | None = None
        self.preview_error = ""  # why the previewed result's audio could not be loaded (its file gone, damaged)
        self.failed: list[FailedFile] = []
        self.folders: list[str] = []
        self.categories: list[tuple[str, int]] = []  # (UCS category, sounds heard as it): "By category"
        self.known_tags: list[str] = []  # the library's user tags: the tag editor's completions
        self._request = 0  # id of the latest search request
        self._preview_request = 0

    @property
    def hits(self) -> list[Hit]:
        return self.results.hits if self.results is not None else []

    # ------------------------------------------------------------------------------------------ library

    def set_library(self, path: Path) -> None:
        """Another library folder: nothing from the last one is shown."""
        self.library = Path(path)
        self.ready = self.pending = False
        self.picked, self.ranked = None, []
        self.set_results(None)
        self.events.library.emit()

    def set_ready(self, ready: bool) -> None:
        self.ready = ready
        if not ready:
            self.pending = False
        self.events.library.emit()

    @property
    def shown_ranking(self) -> str:
        """The ranking of the results shown (which scores they have)."""
        return self.shown_request.ranking if self.shown_request is not None else "both"

    @property
    def shown_kind(self) -> str:
        """The kind of request the results shown answer ("browse": the library listed; '' before any)."""
        return self.shown_request.kind if self.shown_request is not None else ""

    def set_catalog(self, failed: list[FailedFile], folders: list[str],
                    categories: Sequence[tuple[str, int]] = ()) -> None:
        self.failed, self.folders, self.categories = list(failed), list(folders), list(categories)
        self.events.catalog.emit()

    def set_known_tags(self, tags: list[str]) -> None:
        """The library's user tags (the tag editor's completions)."""
        self.known_tags = list(tags)

    # ---------------------------------------------------------------------------------- what to search for

    def set_query(self, text: str, now: bool = False) -> None:
        """The user typed (or pressed Enter: `now`): back to a text search."""
        if text.strip() != self.query.strip():  # a new search comes in relevance order (browsing: by name)
            self.sort, self.descending = "", False
        self.query, self.mode, self.k = text, "text", RESULTS_K
        self.events.search.emit(now)

    def set_balance(self, position: int, search: bool = True) -> None:
        self.balance = min(max(int(position), 0), BALANCE_STEPS)
        if search and self.mode == "text":
            self.events.search.emit(False)

    def set_filters(self, filters: SearchFilters, search: bool = True) -> None:
        self.filters, self.k = filters, RESULTS_K
        if search:
            self.events.search.emit(False)

    def find_similar(self, target: Path, names_weight: float | None = None) -> None:
        """Sounds like `target` (a result, or a file outside the library); `names_weight` also weighs names."""
        self.mode, self.similar_to, self.similar_names_weight = "similar", Path(target), names_weight
        self.k, self.sort, self.descending = RESULTS_K, "", False
        self.events.search.emit(True)

    def set_similar_any_length(self, on: bool) -> None:
        """Find similar among every length (on) or among lengths like the target's (off, the default); a similar
        list shown is searched again."""
        self.similar_any_length = bool(on)
        if self.mode == "similar" and self.similar_to is not None:
            self.k = RESULTS_K
            self.events.search.emit(True)

    def set_similar_in_folder(self, on: bool) -> None:
        """Find similar in the folder browsed only (on) or in the whole library (off, the default: the copy of a
        sound in another folder is what a sound designer looks for); a similar list shown is searched again."""
        self.similar_in_folder = bool(on)
        if self.mode == "similar" and self.similar_to is not None:
            self.k = RESULTS_K
            self.events.search.emit(True)

    def similar_filters(self) -> SearchFilters:
        """The filters a find similar runs with: the folder browsed only when asked for (`similar_in_folder`)."""
        return self.filters if self.similar_in_folder else replace(self.filters, folder=None)

    def ranking(self) -> tuple[str, float | None]:
        """(mode, names_weight) the balance asks for."""
        return balance(self.balance, self.default_balance)

    # ----------------------------------------------------------------------------------------- searching

    def start_search(self) -> SearchRequest | None:
        """The search to run now, with a new id (older answers are dropped from now on); an empty query lists
        the library's sounds (with the filters, sorted): a "browse" request."""
        self.pending = False
        self._request += 1
        back, self._navigating = self._navigating, None
        if back is not None:  # Back/Forward: the entry again, under a new id, with the filters set now
            self._replay = self._request
            return replace(back, id=self._request, k=self.k, offset=0, filters=self.filters)
        if self.mode == "similar" and self.similar_to is not None:
            weight = self.similar_names_weight
            return SearchRequest(self._request, "similar", "", self.similar_to, "both" if weight else "sound",
                                 weight, self.similar_filters(), self.k, any_length=self.similar_any_length)
        text = self.query.strip()
        if not text:
            return SearchRequest(self._request, "browse", "", None, "names", None, self.filters, self.k,
                                 self.sort or "name", self.descending)
        mode, weight = self.ranking()
        return SearchRequest(self._request, "text", text, None, mode, weight, self.filters, self.k)

    def browsing(self) -> bool:
        """Whether the list shows the library's sounds (an empty query) rather than a search's results."""
        return self.mode == "text" and not self.query.strip()

    def defer(self) -> None:
        """A search is asked for while one runs: the running one's answer is dropped; search again after it."""
        self.pending = True

    def accept(self, request: SearchRequest, results: Results) -> bool:
        """Show `results` if they answer the latest request; False if they came too late. A browse page after
        the first is added to the list shown; other answers go into the history (Back/Forward)."""
        if request.id != self._request or self.pending:
            return False
        if request.offset > 0 and self.results is not None:
            results.hits = [*self.hits, *results.hits]
            self.same_list = True
            self.set_results(results)
            return True
        self.same_list = self.shown_request is not None and request.shows_the_same(self.shown_request)
        if self.picked not in [h.path for h in results.hits]:
            self.picked = None  # the user's pick is gone: the best result of this list takes its place
        self._remember(request)
        self.shown_request = request
        self.ranked = list(results.hits)
        if request.kind != "browse" and self.sort:
            results.hits = sort_hits(results.hits, self.sort, self.descending)
        self.set_results(results)
        return True

    def _remember(self, request: SearchRequest) -> None:
        """Into the history: after the entry shown now (what was ahead of it is dropped), unless Back or Forward
        showed one of its entries again."""
        if request.id == self._replay and 0 <= self.history_pos < len(self.history):
            self.history[self.history_pos] = request  # Back/Forward arrived here
            return
        self.history = [*self.history[:self.history_pos + 1], request][-HISTORY_LIMIT:]
        self.history_pos = len(self.history) - 1

    # ------------------------------------------------------------------------------------ back, forward

    def _step(self, direction: int) -> int | None:
        """The history entry Back (-1) or Forward (+1) shows: the next one listing something else."""
        if not 0 <= self.history_pos < len(self.history):
            return None
        shown, pos = self.history[self.history_pos], self.history_pos + direction
        while 0 <= pos < len(self.history) and self.history[pos].shows_the_same(shown):
            pos += direction
        return pos if 0 <= pos < len(self.history) else None

    def can_go(self, direction: int) -> bool:
        return self._step(direction) is not None

    def go(self, direction: int) -> SearchRequest | None:
        """Back (-1) or Forward (+1): the query, the similar target and the sort of that entry come back and it
        is searched again (now); returns it (None at either end)."""
        pos = self._step(direction)
        if pos is None:
            return None
        entry = self.history[pos]
        self.history_pos, self._navigating, self.k = pos, entry, RESULTS_K
        self.query, self.filters = entry.query, replace(self.filters, folder=entry.filters.folder)
        self.sort, self.descending = (entry.sort, entry.descending) if entry.kind == "browse" else ("", False)
        self.mode = "similar" if entry.kind == "similar" else "text"
        if entry.kind == "similar":
            self.similar_to, self.similar_names_weight = entry.target, entry.names_weight
        self.events.search.emit(True)
        return entry

    # --------------------------------------------------------------------------------- sorting, paging

    def sort_by(self, key: str) -> None:
        """A column header was clicked: sort by it (again: the other way). Browsing asks the library for the
        sorted list. A search's results are sorted as shown, a score column best first, and a third click on the
        column brings back their relevance order (also the order of a new search)."""
        if self.browsing():
            shown = self.sort or "name"
            self.descending = not self.descending if key == shown else key == "modified"  # newest first
            self.sort, self.k = key, RESULTS_K
            self.events.search.emit(True)
            return
        if self.results is None or (key in SCORE_SORTS and key not in self.channels()):
            return  # a score this list does not have
        first = key in SCORE_SORTS  # the way a first click sorts: scores descending, the rest ascending
        if key != self.sort:
            self.sort, self.descending = key, first
        elif self.descending == first:
            self.descending = not first
        else:
            self.sort, self.descending = "", False  # the third click: relevance order again
        self._show_sorted()

    def choose_sort(self, key: str) -> None:
        """The sort box: list by `key` the way a first header click does ('' = a search's relevance order);
        choosing the order shown again changes nothing (a header click would turn it around)."""
        if key == (self.sort or ("name" if self.browsing() else "")):
            return
        if self.browsing():
            self.sort_by(key)
            return
        if self.results is None or (key in SCORE_SORTS and key not in self.channels()):
            return
        self.sort, self.descending = key, key in SCORE_SORTS
        self._show_sorted()

    def _show_sorted(self) -> None:
        """The search's results again in the order chosen, from their relevance order."""
        if self.results is None:
            return
        self.results.hits = sort_hits(self.ranked, self.sort, self.descending)
        self.same_list = True
        self.set_results(self.results)

    def can_show_more(self) -> bool:
        """Whether "Show more" can bring more: a browse list shorter than its total, or a full page of results."""
        results = self.results
        if results is None or not results.hits:
            return False
        if self.shown_kind == "browse":
            return len(results.hits) < (results.answer.total or 0)
        return len(results.hits) >= self.k and len(results.hits) < results.indexed

    def show_more(self) -> SearchRequest | None:
        """The request bringing the next page: browsing asks for the page after the shown rows (added to them),
        a search is asked again for RESULTS_K more results. None when there is no more."""
        if not self.can_show_more():
            return None
        request = self.start_search()
        if request is None:
            return None
        if request.kind == "browse":
            return replace(request, offset=len(self.hits))
        self.k += RESULTS_K
        return replace(request, k=self.k)

    def set_results(self, results: Results | None) -> None:
        self.results = results
        self.events.results.emit()

    def channels(self) -> tuple[str, ...]:
        """The channels that scored the results shown: find similar and sound-only have no names score, a list
        of the library's sounds none."""
        results, ranking = self.results, self.shown_ranking
        if self.shown_kind == "browse":
            return ()  # listed, not searched: no scores
        if results is None or (results.mode == "similar" and ranking == "sound"):
            return ("sound",)
        return {"names": ("names",), "sound": ("sound",)}.get(ranking, ("names", "sound"))

    # ------------------------------------------------------------------------------------------ selection

    def select(self, rows: list[int], current: int, by_user: bool = False) -> None:
        """Rows selected; `by_user`: the user chose them (a click, the keys), not a new list."""
        self.selected = sorted(r for r in rows if 0 <= r < len(self.hits))
        self.current = current
        if by_user:
            hit = self.selected_hit()
            self.picked = hit.path if hit is not None else None
        self.events.selection.emit()

    def selected_hit(self) -> Hit | None:
        """The result the preview shows: the current row when it is selected, else the first selected."""
        rows = self.selected
        row = self.current if self.current in rows else (rows[0] if rows else -1)
        return self.hits[row] if 0 <= row < len(self.hits) else None

    def selected_hits(self) -> list[Hit]:
        return [self.hits[r] for r in self.selected if r < len(self.hits)]

    def row_to_select(self) -> int:
        """Where the selection goes in new results: in the same list again (sorted, more rows) the file previewed so
        far; in a new list the sound the user picked when it is among them, else the best. A file selected only
        because it was best (the library's first sound, say) would otherwise stick through every search: out of
        50 results it is almost always somewhere in the list."""
        paths = [h.path for h in self.hits]
        previewed = self.preview_hit.path if self.preview_hit is not None else None
        keep = previewed if self.same_list else self.picked
        return paths.index(keep) if keep in paths else 0

    # -------------------------------------------------------------------------------------------- preview

    def preview_selected(self) -> int | None:
        """Point the preview at the selected result. Returns a request id when its audio has to be loaded (another
        file), None when there is nothing to load (nothing selected, or the same file with new scores)."""
        hit, request = self.selected_hit(), None
        self.preview_error = ""
        if hit is None:
            self.preview_hit = self.preview = None
        elif self.preview is not None and self.preview_hit is not None and hit.path == self.preview_hit.path:
            self.preview_hit = hit  # the same file, with this search's scores
        else:
            self.preview_hit, self.preview = hit, None
            self._preview_request += 1
            request = self._preview_request
        self.events.preview.emit()
        return request

    def set_preview(self, request: int, preview: Preview) -> bool:
        """The audio of preview `request`; False (and nothing changes) when another result was selected since."""
        if request != self._preview_request or self.preview_hit is None:
            return False
        self.preview = preview
        self.events.preview.emit()
        return True

    def preview_failed(self, request: int, message: str) -> bool:
        """Preview `request` could not be loaded (its file is gone, say): the preview says why and shows no sound;
        False (and nothing changes) when another result was selected since."""
        if request != self._preview_request or self.preview_hit is None:
            return False
        self.preview, self.preview_error = None, message or "cannot be read"
        self.events.preview.emit()
        return True

    # --------------------------------------------------------------------------------- tags, favourites

    def set_tags(self, per_file: dict[int, list[str]], known: list[str]) -> None:
        """The tags of some files after an edit, and the library's tags now."""
        self.known_tags = list(known)
        rows = [r for r, h in enumerate(self.hits) if h.file_id in per_file]
        for r in rows:
            self.hits[r].user_tags = per_file[self.hits[r].file_id]
        self.events.hits.emit(rows)

    def set_favourite(self, file_ids: list[int], on: bool) -> None:
        """Files marked or unmarked; unmarked ones leave a favourites-only list, so it is searched again."""
        ids = set(file_ids)
        rows = [r for r, h in enumerate(self.hits) if h.file_id in ids]
        for r in rows:
            self.hits[r].favourite = on
        self.events.hits.emit(rows)
        if not on and self.filters.favourites_only:
            self.events.search.emit(True)


def sort_hits(hits: list[Hit], key: str, descending: bool) -> list[Hit]:
    """Results sorted as shown by a column (name, folder, duration, a channel's score: unscored last when
    descending); other keys ('' = relevance) keep their order."""
    keys: dict[str, Callable[[Hit], Any]] = {
        "name": lambda h: natural_key(h.name.rpartition("/")[2]),
        "folder": lambda h: natural_path_key(h.folder),
        "duration": lambda h: h.duration,
        "names": lambda h: _score(channel_scores(h)[0]),
        "sound": lambda h: _score(channel_scores(h)[1]),
    }
    if key not in keys:
        return list(hits)
    return sorted(hits, key=keys[key], reverse=descending)


def _score(value: float | None) -> float:
    return float("-inf") if value is None else value
