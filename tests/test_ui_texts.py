"""The Search tab's texts (Qt-free, app/ui/search_text.py): durations people can read, counts in good English."""

from __future__ import annotations

from pathlib import Path

from app.services.library.records import Hit
from app.services.search.answer import SearchAnswer
from app.services.search.search_jobs import Results
from app.ui.durations import format_duration
from app.ui.search_text import results_header


def test_a_click_shorter_than_a_tenth_of_a_second_is_shown_in_milliseconds() -> None:
    assert format_duration(0.026) == "26 ms"  # was "0.0 s": as if the file had no length
    assert format_duration(0.25) == "0.2 s" and format_duration(75) == "1:15"


def test_how_long_a_run_took_is_said_in_the_one_unit_that_matters() -> None:
    assert [format_duration(s, rough=True) for s in (4.4, 1625, 9000)] == ["4 s", "27 min", "2.5 h"]


def _hit(i: int) -> Hit:
    return Hit(path=Path(f"/lib/{i}.wav"), score=0.5, duration=1.0, folder="", best_window_start_s=0.0,
               window_scores=[0.5], file_id=i, rel_path=f"{i}.wav")


def test_one_result_is_singular() -> None:
    one = Results(SearchAnswer("text", [_hit(1)]), "door", indexed=3)
    assert results_header(one, "both") == "1 result for “door”"
    two = Results(SearchAnswer("text", [_hit(1), _hit(2)]), "door", indexed=3)
    assert results_header(two, "both").startswith("2 results for")
