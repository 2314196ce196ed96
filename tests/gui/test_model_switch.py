"""Issue 40, item 3: choosing another model in the Search tab asked nothing and re-embedded the whole library;
now it says how many sounds that model has not heard and about how long, and a no keeps the model in use."""

from __future__ import annotations

from pathlib import Path

from test_search_tab import make_library, open_and_index, shown_tab, write_tiny_model

from app.services.registry import ModelRegistry


def indexed_with_two_models(qtbot, tmp_path: Path) -> object:  # noqa: ANN001 - a SearchTab
    """A Search tab over an indexed library, with a second tiny model to switch to."""
    models = tmp_path / "models"
    write_tiny_model(models)
    write_tiny_model(models, name="tiny-other", depth=1)
    registry = ModelRegistry(folders=[(models, "user")], device="cpu")
    registry.scan()
    tab = shown_tab(qtbot, registry)
    open_and_index(qtbot, tab, registry, make_library(tmp_path / "lib"))
    return tab


def test_switching_model_asks_first_with_what_it_costs(qtbot, tmp_path: Path) -> None:
    tab = indexed_with_two_models(qtbot, tmp_path)
    in_use = tab.embedder.name
    other = next(i for i in range(tab.model_combo.count()) if tab.model_entry_at(i).name != in_use)
    asked: list[str] = []
    tab.confirm_switch = lambda text: asked.append(text) or False
    tab.model_combo.setCurrentIndex(other)  # as a user's pick does
    assert len(asked) == 1 and "has not heard 6 of this library's sounds" in asked[0], asked
    assert "of audio" in asked[0] and "measured here" not in asked[0]  # no minute embedded yet: no rate to tell
    assert tab.embedder.name == in_use and tab.model_combo.currentText() == in_use  # a no changes nothing
    tab.index_rate = 50.0
    tab.confirm_switch = lambda text: asked.append(text) or True
    with qtbot.waitSignal(tab.indexing_finished, timeout=60_000):
        tab.model_combo.setCurrentIndex(other)
        # until the new model's index is ready, the model in use answers: the library stays searchable by sound
        assert tab.session is not None and tab.embedder.name == in_use and tab.state.ready
        assert len(tab.session.search("a chirp", 6, mode="sound")) == 6
    assert "at the 50× real time measured here" in asked[-1] and tab.embedder.name != in_use
    assert tab.session is not None and tab.session.embedder is tab.embedder
    assert tab.session.indexed_count() == 6  # every sound heard by the new model before it took over
    tab.shutdown()


def test_a_library_opened_during_a_switch_drops_the_next_models_index(qtbot, tmp_path: Path) -> None:
    tab = indexed_with_two_models(qtbot, tmp_path)
    in_use = tab.embedder.name
    tab.confirm_switch = lambda text: True
    tab.model_combo.setCurrentIndex(next(i for i in range(tab.model_combo.count())
                                         if tab.model_entry_at(i).name != in_use))
    with qtbot.waitSignal(tab.indexing_finished, timeout=60_000):
        tab.set_library(make_library(tmp_path / "other"))  # the user moves on before the new index is ready
    qtbot.waitUntil(lambda: tab._pending_session is None or tab._pending_session.closed, timeout=30_000)
    assert tab.embedder.name == in_use and tab.session.root == tmp_path / "other"
    tab.shutdown()
