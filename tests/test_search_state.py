"""The Search tab's state without Qt: what it asks to search for, which answers it shows, selection and preview,
tags and favourites, and what the list says; plus the proof that it (and the tab's texts) import no Qt or torch."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.services.library.records import Hit, MatchInfo, SearchFilters
from app.services.search.answer import SearchAnswer
from app.services.search.fusion import NAMES_WEIGHT
from app.services.search.search_jobs import Results
from app.ui.search_state import BALANCE_STEPS, HISTORY_LIMIT, RESULTS_K, SearchState, balance_position
from app.ui.search_text import no_results_message, results_header, why_html
from tests.heard import Heard

ROOT = Path(__file__).resolve().parents[1]


def hit(name: str, file_id: int, favourite: bool = False, tags: list[str] | None = None) -> Hit:
    return Hit(Path(f"/lib/{name}"), 0.5, 1.0, "", 0.0, [0.5], file_id, name, user_tags=list(tags or []),
               favourite=favourite)


def results(*names: str, query: str = "door", mode: str = "text") -> Results:
    return Results(SearchAnswer(mode, [hit(n, i + 1) for i, n in enumerate(names)]), query, indexed=10)


@pytest.fixture
def state() -> SearchState:
    s = SearchState()
    s.set_library(Path("/lib"))
    s.set_ready(True)
    return s


def test_typing_asks_for_a_debounced_search_enter_and_find_similar_for_one_now(state: SearchState) -> None:
    heard = Heard(state)
    state.set_query("door")
    state.set_query("door creak", now=True)
    state.set_filters(SearchFilters(max_duration=2.0))
    state.find_similar(Path("/lib/a.wav"))
    assert heard.events == [("search", False), ("search", True), ("search", False), ("search", True)]
    assert state.mode == "similar" and state.query == "door creak"
    heard.clear()
    state.set_balance(0)  # the balance re-ranks a text search only
    assert heard.events == [] and state.balance == 0
    state.set_query("door")
    state.set_balance(BALANCE_STEPS + 50)
    assert heard.names() == ["search", "search"] and state.balance == BALANCE_STEPS  # clamped


def test_start_search_builds_the_request_of_the_moment(state: SearchState) -> None:
    state.set_query("  door  ")
    state.set_filters(SearchFilters(folder="Doors"))
    request = state.start_search()
    assert (request.kind, request.query, request.ranking, request.names_weight) == ("text", "door", "both", None)
    assert request.filters.folder == "Doors" and request.target is None
    state.set_balance(balance_position(0.4))
    assert state.start_search().names_weight == 0.4
    state.set_balance(0)
    assert state.start_search().ranking == "names"
    state.find_similar(Path("/lib/a.wav"))
    by_sound = state.start_search()
    assert (by_sound.kind, by_sound.target, by_sound.ranking, by_sound.names_weight) == \
        ("similar", Path("/lib/a.wav"), "sound", None)
    state.find_similar(Path("/lib/a.wav"), NAMES_WEIGHT)
    assert state.start_search().ranking == "both"
    assert len({request.id, by_sound.id}) == 2  # every request is new


def test_an_empty_query_browses_the_library_with_the_filters(state: SearchState) -> None:
    state.set_query("door")
    state.accept(state.start_search(), results("a.wav"))
    state.set_filters(SearchFilters(folder="Doors"), search=False)
    state.set_query("   ")
    request = state.start_search()
    assert request.kind == "browse" and request.query == "" and request.filters.folder == "Doors"
    assert (request.sort, request.descending, request.offset) == ("name", False, 0)


def test_only_the_latest_answer_is_shown_and_it_goes_into_the_history(state: SearchState) -> None:
    state.set_query("door")
    first = state.start_search()
    state.set_query("door creak")
    second = state.start_search()
    assert not state.accept(first, results("old.wav"))  # came too late
    state.defer()  # another search was asked for while `second` ran: its answer is stale too
    assert not state.accept(second, results("stale.wav")) and state.results is None
    third = state.start_search()
    assert state.accept(third, results("new.wav"))
    assert [h.name for h in state.hits] == ["new.wav"] and state.history == [third]
    for _ in range(HISTORY_LIMIT + 5):
        state.accept(state.start_search(), results("new.wav"))
    assert len(state.history) == HISTORY_LIMIT and state.history[-1].id > third.id


def test_channels_follow_the_ranking_of_the_results_shown(state: SearchState) -> None:
    state.set_query("door")
    state.set_balance(0)
    state.accept(state.start_search(), results("a.wav"))
    assert state.channels() == ("names",)
    state.set_balance(BALANCE_STEPS // 2)
    state.accept(state.start_search(), results("a.wav"))
    assert state.channels() == ("names", "sound")
    state.find_similar(Path("/lib/a.wav"))
    state.accept(state.start_search(), results("b.wav", mode="similar"))
    assert state.channels() == ("sound",)


def test_selection_and_the_preview_it_asks_for(state: SearchState) -> None:
    state.set_query("door")
    state.accept(state.start_search(), results("a.wav", "b.wav", "c.wav"))
    heard = Heard(state)
    state.select([2, 0, 7], current=2)  # a row past the end is not a result
    assert state.selected == [0, 2] and state.selected_hit().name == "c.wav"
    state.select([0, 1], current=2)  # the current row is not selected: the first selected is shown
    assert state.selected_hit().name == "a.wav" and [h.name for h in state.selected_hits()] == ["a.wav", "b.wav"]
    first = state.preview_selected()
    assert first is not None and state.preview_hit.name == "a.wav" and state.preview is None
    assert state.set_preview(first, "audio of a")  # (a Preview, for the state only an object)
    assert state.preview_selected() is None  # the same file: nothing to load again
    state.select([1], current=1)
    second = state.preview_selected()
    assert not state.set_preview(first, "late audio of a") and state.preview is None
    assert state.set_preview(second, "audio of b") and state.preview == "audio of b"
    assert heard.names().count("selection") == 3 and heard.names().count("preview") == 5
    state.select([], current=-1)
    assert state.preview_selected() is None and state.preview_hit is None and state.preview is None


def test_new_results_keep_the_previewed_file_selected(state: SearchState) -> None:
    state.set_query("door")
    state.accept(state.start_search(), results("a.wav", "b.wav"))
    state.select([1], current=1)
    state.preview_selected()
    state.accept(state.start_search(), results("c.wav", "b.wav", "a.wav"))
    assert state.row_to_select() == 1
    state.accept(state.start_search(), results("c.wav"))
    assert state.row_to_select() == 0


def test_tags_and_favourites_change_their_rows_and_unmarked_favourites_leave_the_filtered_list(
        state: SearchState) -> None:
    state.set_query("door")
    state.accept(state.start_search(), results("a.wav", "b.wav", "c.wav"))
    heard = Heard(state)
    state.set_tags({2: ["wood"], 3: ["wood", "old"]}, known=["old", "wood"])
    assert heard.events == [("hits", [1, 2])] and state.hits[2].user_tags == ["wood", "old"]
    assert state.known_tags == ["old", "wood"]
    heard.clear()
    state.set_favourite([1], True)
    assert heard.events == [("hits", [0])] and state.hits[0].favourite
    state.set_filters(SearchFilters(favourites_only=True), search=False)
    heard.clear()
    state.set_favourite([1], False)
    assert heard.events == [("hits", [0]), ("search", True)] and not state.hits[0].favourite


def test_another_library_shows_nothing_of_the_last_one(state: SearchState) -> None:
    state.set_query("door")
    state.accept(state.start_search(), results("a.wav"))
    state.defer()
    heard = Heard(state)
    state.set_library(Path("/other"))
    assert state.results is None and not state.ready and not state.pending
    assert heard.names() == ["results", "library"] and state.library == Path("/other")


def test_back_and_forward_walk_over_different_lists_and_typing_drops_what_was_ahead() -> None:
    state = SearchState()
    for query in ("door", "door", "door creak"):
        state.set_query(query)
        state.accept(state.start_search(), Results(SearchAnswer("text"), query, 1))
    state.find_similar(Path("/lib/a.wav"))
    state.accept(state.start_search(), Results(SearchAnswer("similar"), "a.wav", 1))
    assert state.go(-1).query == "door creak" and state.query == "door creak" and state.mode == "text"
    state.accept(state.start_search(), Results(SearchAnswer("text"), "door creak", 1))
    assert state.go(-1).query == "door"  # the repeated "door" is one step
    state.accept(state.start_search(), Results(SearchAnswer("text"), "door", 1))
    assert state.go(-1) is None and not state.can_go(-1) and state.can_go(1)
    assert state.go(1).query == "door creak"
    state.accept(state.start_search(), Results(SearchAnswer("text"), "door creak", 1))
    entry = state.go(1)
    assert entry.kind == "similar" and state.mode == "similar" and state.similar_to == Path("/lib/a.wav")
    state.go(-1)
    state.accept(state.start_search(), Results(SearchAnswer("text"), "door creak", 1))
    state.set_query("rain")
    state.accept(state.start_search(), Results(SearchAnswer("text"), "rain", 1))
    assert not state.can_go(1) and [r.query for r in state.history][-2:] == ["door creak", "rain"]


def test_a_header_click_sorts_results_as_shown_and_browsing_asks_the_library() -> None:
    state = SearchState()
    state.set_query("door")
    state.accept(state.start_search(), results("b.wav", "C.wav", "a.wav"))
    state.sort_by("name")
    assert [h.name for h in state.hits] == ["a.wav", "b.wav", "C.wav"]
    state.sort_by("name")
    assert [h.name for h in state.hits] == ["C.wav", "b.wav", "a.wav"] and state.descending
    state.set_query("door creak")
    assert state.sort == "" and state.start_search().kind == "text"  # a new search: relevance first
    heard = Heard(state)
    state.set_query("")
    state.sort_by("name")  # the list is by name already: the other way
    assert state.start_search().descending
    state.sort_by("duration")
    request = state.start_search()
    assert "search" in heard.names() and (request.kind, request.sort, request.descending) == ("browse", "duration",
                                                                                                False)


def test_show_more_asks_for_the_next_page_or_more_results() -> None:
    state = SearchState()
    browse = state.start_search()
    page = [hit(f"{i}.wav", i) for i in range(RESULTS_K)]
    state.accept(browse, Results(SearchAnswer("browse", page, total=120), "", 120))
    more = state.show_more()
    assert more.kind == "browse" and more.offset == RESULTS_K
    state.accept(more, Results(SearchAnswer("browse", [hit("x.wav", 99)], total=120, offset=RESULTS_K), "", 120))
    assert len(state.hits) == RESULTS_K + 1 and len(state.history) == 1  # added, not a new entry
    state.set_query("door")
    state.accept(state.start_search(), Results(SearchAnswer("text", page), "door", 120))
    more = state.show_more()
    assert more.kind == "text" and more.k == 2 * RESULTS_K and more.offset == 0
    state.accept(more, Results(SearchAnswer("text", [hit("few.wav", 1)]), "door", 120))
    assert not state.can_show_more()  # fewer than asked for: that was all


def test_what_the_list_says() -> None:
    found = results("a.wav", "b.wav")
    assert results_header(found, "both") == "2 results for “door”"
    assert results_header(results("a.wav", query="x.wav", mode="similar"), "both") == \
        "1 result for sounds like x.wav by sound and name in the whole library"
    assert results_header(None, "both").startswith("Type a description")
    empty = Results(SearchAnswer("text"), "door", indexed=0)
    assert no_results_message(empty, indexing=True, favourites_only=False) == \
        "No sounds are indexed yet — indexing is running."
    filtered = Results(SearchAnswer("text"), "door", indexed=5, filtered=True)
    assert "not only favourites" in no_results_message(filtered, indexing=False, favourites_only=True)
    assert no_results_message(Results(SearchAnswer("text"), "door", 5), False, False) == "No sounds match “door”."


def test_why_names_only_the_fields_the_service_found_words_in() -> None:
    m = MatchInfo(matched_terms=["door"], spans={"folder": [(0, 4)]}, name_score=0.8, sound_score=0.3,
                  fields={"name": "Door_01.wav", "folder": "Doors", "tags": "", "user_tags": ""})
    h = hit("Doors/Door_01.wav", 1)
    h.match = m
    assert "in its folder ·" in why_html(h)  # "Door" is in the name too, but the service marked the folder only


def test_a_new_list_selects_its_best_unless_the_user_picked_a_listed_sound(state: SearchState) -> None:
    """A first-contact trial: a sound selected only because it was best stuck through every later search."""
    state.set_query("door")
    state.accept(state.start_search(), results("a.wav", "b.wav"))
    state.select([0], current=0)  # the list's own selection
    state.preview_selected()
    state.set_query("rain")
    state.accept(state.start_search(), results("c.wav", "a.wav"))
    assert state.row_to_select() == 0
    state.select([1], current=1, by_user=True)
    state.preview_selected()
    state.set_query("wood")
    state.accept(state.start_search(), results("d.wav", "a.wav"))
    assert state.row_to_select() == 1
    state.set_query("metal")
    state.accept(state.start_search(), results("e.wav"))  # the pick is gone, and forgotten
    state.set_query("wood")
    state.accept(state.start_search(), results("d.wav", "a.wav"))
    assert state.picked is None and state.row_to_select() == 0


def test_sorting_a_search_cycles_back_to_relevance_order(state: SearchState) -> None:
    state.set_query("door")
    state.accept(state.start_search(), results("b.wav", "c.wav", "a.wav"))
    order = lambda: [h.name for h in state.hits]  # noqa: E731
    state.sort_by("name")
    assert order() == ["a.wav", "b.wav", "c.wav"]
    state.sort_by("name")
    assert order() == ["c.wav", "b.wav", "a.wav"]
    state.sort_by("name")
    assert order() == ["b.wav", "c.wav", "a.wav"] and state.sort == ""
    state.sort_by("sound")  # best first, then the other way, then relevance again
    assert state.sort == "sound" and state.descending
    state.sort_by("sound")
    assert not state.descending
    state.sort_by("sound")
    assert state.sort == "" and order() == ["b.wav", "c.wav", "a.wav"]


def test_the_sort_box_sorts_a_search_and_brings_back_relevance_order(state: SearchState) -> None:
    """An earlier trial: the sort box was hidden while a query was in the box, so a search could be sorted only
    by clicking headers. Chosen in the box, an order applies as a first header click does, and choosing it again
    does not turn it around."""
    state.set_query("door")
    state.accept(state.start_search(), results("b.wav", "c.wav", "a.wav"))
    order = lambda: [h.name for h in state.hits]  # noqa: E731
    state.choose_sort("name")
    assert order() == ["a.wav", "b.wav", "c.wav"] and not state.descending
    state.choose_sort("name")
    assert order() == ["a.wav", "b.wav", "c.wav"]  # the order shown again: unchanged
    state.choose_sort("sound")
    assert state.sort == "sound" and state.descending  # a score: best first
    state.choose_sort("")
    assert state.sort == "" and order() == ["b.wav", "c.wav", "a.wav"]  # relevance, the search's own order
    state.set_query("")
    heard = Heard(state)
    state.choose_sort("modified")  # browsing: the library is asked for the sorted list (newest first)
    request = state.start_search()
    assert "search" in heard.names() and (request.sort, request.descending) == ("modified", True)
