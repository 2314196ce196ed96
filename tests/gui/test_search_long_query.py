"""The Search tab says so when a pasted query is too long and only its first characters were searched."""

from __future__ import annotations

from pathlib import Path

from app.services.search.query import MAX_QUERY_CHARS
from tests.gui.test_search_tab import make_library, open_and_index, search, shown_tab, tiny_registry


def test_a_query_over_the_limit_is_said_to_be_shortened(qtbot, tmp_path: Path) -> None:
    registry = tiny_registry(tmp_path / "models")
    tab = shown_tab(qtbot, registry)
    try:
        open_and_index(qtbot, tab, registry, make_library(tmp_path / "lib"))
        text = "a bird sings" + " loudly" * 300
        results = search(qtbot, tab, text)
        header = tab.lists.results_header.text()
        assert header.startswith(f"Query too long: searched its first {MAX_QUERY_CHARS:,} of {len(text):,} "
                                 "characters · "), header
        assert results.answer.shortened_from == len(text)
        assert len(header) < 300 and len(tab.lists.results_header.toolTip()) < 300  # the query quoted, cut
        search(qtbot, tab, "a bird sings")  # a query within the limit: the note goes
        assert not tab.lists.results_header.text().startswith("Query too long")
    finally:
        tab.shutdown()
