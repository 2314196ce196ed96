"""The Words tab's state without Qt: loading a model (and embedding the collection again), adding, selecting and
removing words, their nearest neighbours, what a search looks for, the recorded take; plus the proof that it
imports no Qt or torch."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from app.services.words.word_space import SAMPLE_RATE, LoadResult, TermHit, TermSearchResult, WordItem
from app.ui.words_state import MAX_RECORD_SECONDS, SPEECH_SECONDS, Take, WordsState
from tests.heard import Heard

ROOT = Path(__file__).resolve().parents[1]


def item(label: str, angle: float, kind: str = "spoken") -> WordItem:
    """A word whose vector points `angle` radians round the circle: neighbours are the nearest angles."""
    audio = np.zeros(SAMPLE_RATE // 2, np.float32) if kind == "spoken" else None
    return WordItem(label, kind, np.array([np.cos(angle), np.sin(angle)], np.float32), audio)


def space(name: str = "tiny") -> SimpleNamespace:
    return SimpleNamespace(name=name, dim=2, resampler="soxr")


@pytest.fixture
def state() -> WordsState:
    s = WordsState()
    s.set_audio_status(SimpleNamespace(input_ok=True, output_ok=True))
    s.loading("cpu")
    s.space_loaded(space())
    return s


def test_a_model_is_ready_once_loaded_and_hands_back_the_collection_to_embed_again(state: WordsState) -> None:
    heard = Heard(state)
    state.add_items([item("one", 0.0)])
    assert not state.needs_loading("tiny", "cpu") and state.needs_loading("tiny", "cuda")
    assert state.needs_loading("other", "cpu")
    state.loading("cuda")
    assert not state.ready and not state.can_record()
    again = state.space_loaded(space("other"))
    assert [it.label for it in again] == ["one"] and state.ready and state.can_record()
    assert ("message", "Model other ready (2-d space).", False) in heard.events
    state.reembedded([item("one", 0.1)])
    assert state.words.items[0].vector[1] > 0 and heard.names()[-1] == "items"
    state.no_model()
    assert state.space is None and not state.ready


def test_added_words_are_selected_and_their_nearest_neighbours_listed(state: WordsState) -> None:
    heard = Heard(state)
    state.items_loaded(LoadResult([item("one", 0.0), item("two", 0.2), item("ten", 3.0, "written")], []))
    assert state.row == 2 and heard.names() == ["items", "message"]
    assert heard.events[-1] == ("message", "Added one, two, ten.", False)
    state.select(0)
    lines = state.nearest_lines()
    assert lines[0].endswith("♪ two") and lines[0].startswith("+0.980") and lines[1].endswith("✎ ten")
    state.select(7)
    assert state.selected() is None and state.nearest_lines() == []


def test_a_load_with_problems_says_the_first_and_how_many_more(state: WordsState) -> None:
    heard = Heard(state)
    state.items_loaded(LoadResult([], ["a.wav: no speech", "b.wav: no speech", "c.wav: unreadable"]))
    assert heard.events == [("message", "a.wav: no speech (and 2 more)", True)]


def test_removing_keeps_a_neighbour_selected_and_clearing_selects_nothing(state: WordsState) -> None:
    state.add_items([item("one", 0.0), item("two", 0.5), item("three", 1.0)])
    state.remove_selected()  # the last: its neighbour before it is selected
    assert [it.label for it in state.words.items] == ["one", "two"] and state.row == 1
    state.select(0)
    state.remove_selected()
    assert state.row == 0 and state.selected().label == "two"
    state.clear()
    assert state.row == -1 and len(state.words) == 0
    state.remove_selected()  # nothing to remove: nothing happens


def test_a_search_looks_for_the_selected_item_an_item_by_label_or_the_typed_text(state: WordsState) -> None:
    heard = Heard(state)
    assert state.search_query("seven") is None and heard.events[-1] == \
        ("message", "Open an audio file to search first.", True)
    state.set_search_audio(np.zeros(3 * SAMPLE_RATE), "three seconds")
    assert state.search_label == "three seconds · 3.0 s" and "recording" in heard.names()
    assert state.search_query("  ") is None and heard.events[-1][1].startswith("Pick an item")
    one, again = item("one", 0.0), item("one", 1.0)
    state.add_items([one, again])
    assert state.search_query("one") is again  # the selected one of the two named "one"
    state.select(-1)
    assert state.search_query("one") is one
    assert state.search_query(" seven ") == "seven"  # a written word to look up
    state.no_model()
    assert state.search_query("one") is None and heard.events[-1][1] == "No words model loaded yet."


def test_a_search_result_says_where_the_best_match_is(state: WordsState) -> None:
    heard = Heard(state)
    times = np.linspace(0.2, 2.9, 4)
    state.search_done(TermSearchResult(times, times, times, [TermHit(0.9, 1.3, 0.3)], 3.0))
    assert heard.events[0] == ("message", "Best match at 0.90–1.30 s (cosine 0.300).", False)
    assert heard.names()[-1] == "result" and state.search_result.hits[0].start_s == 0.9


def test_a_take_ends_two_seconds_after_speech_starts_or_after_six_seconds() -> None:
    rate = 1000
    take = Take(rate)
    assert not take.add(np.zeros(500, np.float32))
    speech = np.zeros(1000, np.float32)
    speech[200] = 0.5
    assert not take.add(speech) and take.speech_at == pytest.approx(0.7)
    assert not take.add(np.zeros(int((SPEECH_SECONDS - 1.0) * rate), np.float32))  # 1.8 s after speech
    assert take.add(np.zeros(300, np.float32)) and len(take.audio()) == take.samples
    quiet = Take(rate)
    assert not quiet.add(np.zeros(int(MAX_RECORD_SECONDS * rate) - 1, np.float32))
    assert quiet.add(np.zeros(1, np.float32)) and quiet.speech_at is None
    assert len(Take(rate).audio()) == 0


def test_recorded_words_are_counted_in_their_labels(state: WordsState) -> None:
    assert [state.next_recording_label() for _ in range(2)] == ["recording 1", "recording 2"]
