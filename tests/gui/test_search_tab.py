"""Search tab with a tiny untrained retrieval model: automatic indexing (the GUI keeps turning), search as you
type, preview, find similar, failed files, filters, playback and the empty states; names <-> sound, why a
result matched, tags on several results at once, favourites, and the format / sample rate / channels filters."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from PySide6.QtCore import QPoint, Qt, QTimer, QUrl
from PySide6.QtGui import QGuiApplication
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QDialog, QDialogButtonBox

from app.services.devices import DeviceStatus, Player
from app.services.library.records import Hit, MatchInfo
from app.services.registry import ModelRegistry
from app.services.search.fusion import LOOSE_NAMES
from app.ui.results_table import PATH_ROLE, ResultsTable
from app.ui.search_state import BALANCE_STEPS, balance, balance_position
from app.ui.search_tab import SearchTab
from app.ui.search_text import field_spans, highlight, tag_spans, why_html
from app.ui.tag_dialog import TagDialog, split_tags
from core.checkpoints import save_checkpoint
from models.frontends import PasstMel, frontend_to_dict
from models.passt import passt_tiny
from models.retrieval import RetrievalConfig, RetrievalModel
from models.text import text_tiny
from tests.fake_streams import FakeSpeakers

SR = 32000
WINDOW_S = 2.0
NO_AUDIO = DeviceStatus(False, False, "no audio input device (microphone) found; no audio output device found",
                       output_problem="no audio output device found")
SPEAKERS = DeviceStatus(False, True, "output: fake speakers", [], ["fake speakers"])
SHOTS = Path(__file__).resolve().parents[2] / "bench" / "out" / "screenshots"


def write_tiny_model(folder: Path, name: str = "tiny-retrieval", **audio_overrides: object) -> Path:
    torch.manual_seed(0)
    audio = passt_tiny(window_seconds=WINDOW_S, input_tdim=200, patchout=(0, 0), **audio_overrides)
    model = RetrievalModel(RetrievalConfig(audio=audio, text=text_tiny(), embed_dim=16)).eval()
    return save_checkpoint(folder / f"{name}.safetensors", "retrieval", model, model.config,
                           features=frontend_to_dict(PasstMel()))


def write(path: Path, audio: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, audio, SR, subtype="PCM_16")


def make_library(root: Path, n_extra: int = 0, extra_seconds: float = 8.0) -> Path:
    """Short sounds in birds/, longer ones in engines/, a 5-s file in long/, a copy, a corrupt file."""
    rng = np.random.default_rng(0)
    t = lambda s: np.arange(round(s * SR)) / SR  # noqa: E731
    write(root / "birds/tone.wav", 0.3 * np.sin(2 * np.pi * 700 * t(0.8)))
    write(root / "birds/chirp.wav", 0.3 * np.sin(2 * np.pi * (300 + 900 * t(1.2)) * t(1.2)))
    write(root / "engines/noise.wav", 0.1 * rng.standard_normal(round(2.5 * SR)))
    write(root / "engines/hum.wav", 0.3 * np.sin(2 * np.pi * 90 * t(3.0)))
    write(root / "long/mixed.wav", np.concatenate([0.3 * np.sin(2 * np.pi * 500 * t(2.0)),
                                                   0.1 * rng.standard_normal(2 * SR), np.zeros(SR)]))
    for i in range(n_extra):  # more work for the responsiveness test
        write(root / f"extra/noise_{i}.wav", 0.1 * rng.standard_normal(round(extra_seconds * SR)))
    shutil.copy(root / "birds/chirp.wav", root / "engines/chirp_copy.wav")
    (root / "birds/broken.wav").write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt this is not audio")
    return root


def shot(widget: SearchTab, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    widget.grab().save(str(SHOTS / f"search_{name}.png"))


def tiny_registry(folder: Path) -> ModelRegistry:
    """A registry of `folder` holding the tiny retrieval model (write_tiny_model), scanned, on the CPU."""
    write_tiny_model(folder)
    reg = ModelRegistry(folders=[(folder, "user")], device="cpu")
    reg.scan()
    return reg


@pytest.fixture
def registry(tmp_path: Path) -> ModelRegistry:
    return tiny_registry(tmp_path / "models")


def shown_tab(qtbot, registry: ModelRegistry, width: int = 1100) -> SearchTab:  # noqa: ANN001 (qtbot)
    """A Search tab as a user meets it: width x 700, no audio device (a normal state), `registry`'s models,
    shown. The caller shuts it down."""
    widget = SearchTab()
    qtbot.addWidget(widget)
    widget.resize(width, 700)
    widget.set_audio_status(NO_AUDIO)
    widget.set_registry(registry)
    widget.show()
    return widget


@pytest.fixture
def tab(qtbot, registry: ModelRegistry) -> Iterator[SearchTab]:
    widget = shown_tab(qtbot, registry)
    yield widget
    widget.shutdown()


def open_and_index(qtbot, tab: SearchTab, registry: ModelRegistry, root: Path) -> object:
    with qtbot.waitSignal(tab.indexing_finished, timeout=60_000) as blocker:
        tab.set_models(registry.entries())
        tab.set_library(root)
    return blocker.args[0]


def search(qtbot, tab: SearchTab, text: str) -> object:
    """Type `text` and wait for its results (a list of the library's sounds still on its way is skipped)."""
    with qtbot.waitSignal(tab.results_shown, timeout=20_000, check_params_cb=lambda r: r.mode != "browse") as blocker:
        tab.query_edit.setText(text)
    return blocker.args[0]


def table_names(tab: SearchTab) -> list[str]:
    return [tab.table.plain(r, ResultsTable.NAME) for r in range(tab.table.rowCount())]


def column(tab: SearchTab, col: int) -> list[str]:
    return [tab.table.plain(r, col) for r in range(tab.table.rowCount())]


# --------------------------------------------------------------------------------------------- tests


def test_empty_states(qtbot, tmp_path: Path, registry: ModelRegistry) -> None:
    tab = SearchTab()
    qtbot.addWidget(tab)
    tab.resize(900, 600)
    tab.set_registry(ModelRegistry(folders=[(tmp_path / "none", "user")]))
    tab.set_models([])
    assert tab.stack.currentWidget() is tab.empty
    assert "No retrieval model loaded" in tab.empty.message.text()
    assert "No library folder open" in tab.empty.message.text()
    shot(tab, "no_model")

    tab.set_registry(registry)
    tab.set_models(registry.entries())  # a model but no library yet
    assert tab.stack.currentWidget() is tab.empty
    assert "No library yet" in tab.empty.message.text()
    shot(tab, "no_library")
    qtbot.waitUntil(lambda: tab.embedder is not None, timeout=20_000)
    tab.shutdown()


def test_indexes_automatically_and_the_gui_keeps_turning(qtbot, tab: SearchTab, tmp_path: Path) -> None:
    # a PaSST a few times the tiny one, so that indexing lasts long enough to watch the event loop
    write_tiny_model(tmp_path / "big", "bigger-retrieval", embed_dim=192, depth=6, num_heads=4)
    registry = ModelRegistry(folders=[(tmp_path / "big", "user")], device="cpu")
    registry.scan()
    tab.set_registry(registry)
    root = make_library(tmp_path / "lib", n_extra=20, extra_seconds=10.0)
    events: list[str] = []  # in the order the GUI thread saw them: timer ticks and each new progress line
    timer = QTimer()
    timer.setInterval(50)  # 20 Hz
    timer.timeout.connect(lambda: events.append("tick"))
    timer.start()
    with qtbot.waitSignal(tab.indexing_finished, timeout=60_000) as blocker:
        tab.set_models(registry.entries())  # loads the model, opens the library, indexes: all in workers
        tab.set_library(root)
        while not blocker.signal_triggered:
            label = tab.indexing.index_label.text()
            if label not in events:
                events.append(label)
            qtbot.wait(20)
    timer.stop()
    outcome = blocker.args[0]
    assert outcome is not None and len(outcome.report.embedded) == 26 and outcome.indexed == 26
    indexing = [i for i, e in enumerate(events) if e.startswith("Indexing ") and "files" in e]
    assert len(indexing) >= 2, events  # the progress came file by file
    # the event loop turned while the files were indexed, not only before and after (the order, not a rate:
    # a loaded box runs fewer ticks, a blocked GUI thread none)
    assert "tick" in events[indexing[0]:indexing[-1]], events
    assert "26 sounds indexed" in tab.indexing.index_label.text()
    # the controls reset when the worker's thread has ended, a moment after its result (a separate signal)
    qtbot.waitUntil(lambda: not tab.indexing.cancel_button.isVisibleTo(tab), timeout=10_000)
    assert tab.indexing.reindex_button.isVisibleTo(tab)


def test_search_preview_similar_failed_filters(qtbot, tab: SearchTab, registry: ModelRegistry,
                                               tmp_path: Path) -> None:
    root = make_library(tmp_path / "lib")
    open_and_index(qtbot, tab, registry, root)
    assert tab.stack.currentWidget() is tab.page

    # failed files are listed with their reasons
    assert tab.lists.tabText(1) == "Failed files (1)"
    reason = tab.lists.failed_list.item(0).text()
    assert reason.startswith("birds/broken.wav") and ("corrupt" in reason or "not" in reason), reason

    # search as you type: nothing until the debounce has passed, then results best first
    tab.query_edit.setText("a bird")
    qtbot.wait(100)
    assert tab.state.results is None or tab.state.results.mode == "browse"  # no query yet: the library's sounds
    results = search(qtbot, tab, "a bird sings")
    assert len(results.hits) == 6 and tab.lists.results_stack.currentWidget() is tab.table
    scores = [h.score for h in results.hits]
    assert scores == sorted(scores, reverse=True) and tab.table.rowCount() == 6
    assert "6 results" in tab.lists.results_header.text()

    # selecting shows the preview (waveform + spectrogram), decoded in a worker
    row = [h.rel_path for h in tab.state.hits].index("long/mixed.wav")
    with qtbot.waitSignal(tab.preview_shown, timeout=20_000) as blocker:
        tab.table.selectRow(row)
    preview = blocker.args[0]
    assert preview.duration_s == pytest.approx(5.0) and preview.spectrogram.shape[1] == 257
    assert "mixed.wav" in tab.preview_pane.preview_title.text()
    hit = tab.state.hits[row]
    assert len(hit.window_scores) == 3 and tab.preview_pane.window_plot.isVisibleTo(tab)  # per-window similarity
    assert tab.preview_pane.start_s == hit.best_window_start_s and tab.preview_pane.waveform.best.isVisible()
    shot(tab, "results")

    # no output device: Play is disabled and says why
    assert not tab.preview_pane.play_button.isEnabled() and "no audio output" in tab.preview_pane.play_button.toolTip()

    # drag out as a file; copy path; reveal in the file manager
    mime = tab.table.mimeData([tab.table.item(row, 0)])
    assert [u.toLocalFile() for u in mime.urls()] == [str(root / "long/mixed.wav")]
    tab.preview_pane.copy_selected_path()
    assert QGuiApplication.clipboard().text() == str(root / "long/mixed.wav")
    opened: list[QUrl] = []
    tab.preview_pane.open_url = lambda url: opened.append(url) or True  # a file manager opened it
    tab.preview_pane.reveal_selected()
    assert opened and opened[0].toLocalFile() == str(root / "long")

    # find similar: the copy of a file comes first, with cosine ~1
    chirp = [h.rel_path for h in tab.state.hits].index("birds/chirp.wav")
    tab.table.selectRow(chirp)
    with qtbot.waitSignal(tab.results_shown, timeout=20_000) as blocker:
        tab.preview_pane.similar_button.click()
    similar = blocker.args[0]
    assert similar.mode == "similar" and similar.hits[0].rel_path == "engines/chirp_copy.wav"
    assert similar.hits[0].score > 0.999 and "sounds like chirp.wav" in tab.lists.results_header.text()

    # filters narrow the results (back to the text query by typing)
    search(qtbot, tab, "a bird sings!")
    with qtbot.waitSignal(tab.results_shown, timeout=20_000) as blocker:
        tab.filters_bar.max_spin.setValue(1.0)
    assert {h.rel_path for h in blocker.args[0].hits} == {"birds/tone.wav"}
    with qtbot.waitSignal(tab.results_shown, timeout=20_000) as blocker:
        tab.filters_bar.max_spin.setValue(0.0)
        tab.filters_bar.folder_combo.setCurrentIndex(tab.filters_bar.folder_combo.findData("engines"))
    assert {h.folder for h in blocker.args[0].hits} == {"engines"} and len(blocker.args[0].hits) == 3
    assert tab.filters_bar.folder_combo.findData("long") > 0 and tab.filters_bar.folder_combo.findData("birds") > 0

    # no results: say so, with the reason
    with qtbot.waitSignal(tab.results_shown, timeout=20_000) as blocker:
        tab.filters_bar.min_spin.setValue(100.0)
    assert blocker.args[0].hits == [] and tab.lists.results_stack.currentWidget() is tab.lists.no_results
    assert "No sounds match" in tab.lists.no_results.text() and "filters" in tab.lists.no_results.text()
    shot(tab, "no_results")


def preview_long_file(qtbot, tab: SearchTab, registry: ModelRegistry, root: Path) -> int:  # noqa: ANN001
    """make_library's long/mixed.wav previewed, with fake speakers and Autoplay off; its row."""
    tab.preview_pane.player = Player(stream_factory=FakeSpeakers)
    tab.preview_pane.transport.autoplay_button.setChecked(False)  # Autoplay: test_search_audition.py
    tab.set_audio_status(SPEAKERS)
    open_and_index(qtbot, tab, registry, root)
    search(qtbot, tab, "noise")
    row = [h.rel_path for h in tab.state.hits].index("long/mixed.wav")
    with qtbot.waitSignal(tab.preview_shown, timeout=20_000):
        tab.table.selectRow(row)
    return row


def test_playback_space_bar_and_click_to_seek(qtbot, tab: SearchTab, registry: ModelRegistry,
                                              tmp_path: Path) -> None:
    row = preview_long_file(qtbot, tab, registry, make_library(tmp_path / "lib"))
    assert tab.preview_pane.play_button.isEnabled()
    best = tab.state.hits[row].best_window_start_s

    # the space bar plays from the best window of a long file; again stops
    tab.table.setFocus()
    QTest.keyClick(tab.table, Qt.Key.Key_Space)
    assert tab.preview_pane.player.playing and tab.preview_pane.player.position == pytest.approx(best)
    assert tab.preview_pane.play_button.text() == "Stop"
    QTest.keyClick(tab.table, Qt.Key.Key_Space)
    assert not tab.preview_pane.player.playing and tab.preview_pane.play_button.text() == "Play"

    # ... but a space typed into the query is a space
    tab.query_edit.setFocus()
    QTest.keyClicks(tab.query_edit, " x")
    assert tab.query_edit.text() == "noise x" and not tab.preview_pane.player.playing

    # click on the waveform: play from there
    vb = tab.preview_pane.waveform.getPlotItem().getViewBox()
    target = vb.mapViewToScene(pg_point(3.5, 0.0))
    pos = tab.preview_pane.waveform.mapFromScene(target)
    QTest.mouseClick(tab.preview_pane.waveform.viewport(), Qt.MouseButton.LeftButton,
                     pos=QPoint(int(pos.x()), int(pos.y())))
    assert tab.preview_pane.start_s == pytest.approx(3.5, abs=0.1)
    tab.preview_pane.toggle_play()
    assert tab.preview_pane.player.position == pytest.approx(tab.preview_pane.start_s, abs=1e-3)
    tab.preview_pane.seek_to(1.0)  # while playing: the position moves
    assert tab.preview_pane.player.position == pytest.approx(1.0)
    tab.preview_pane.stop_playback()


def pg_point(x: float, y: float) -> object:
    from PySide6.QtCore import QPointF

    return QPointF(x, y)


def test_cancel_and_pause_indexing(qtbot, tab: SearchTab, registry: ModelRegistry, tmp_path: Path) -> None:
    root = make_library(tmp_path / "lib", n_extra=12)
    with qtbot.waitSignal(tab.session_ready, timeout=30_000):
        tab.set_models(registry.entries())
        tab.set_library(root)
    tab.indexing.toggle_pause()
    assert tab.indexing.runner.is_paused() and tab.indexing.pause_button.text() == "Resume"
    tab.indexing.toggle_pause()
    assert not tab.indexing.runner.is_paused()
    with qtbot.waitSignal(tab.indexing_finished, timeout=30_000) as blocker:
        tab.indexing.cancel()
    if blocker.args[0] is None:  # cancelled before the end (it may also have finished first)
        assert "cancelled" in tab.indexing.index_label.text()
    qtbot.waitUntil(lambda: tab.indexing.runner is None, timeout=10_000)
    assert tab.indexing.reindex_button.isVisibleTo(tab)
    # indexing again picks up where it stopped
    with qtbot.waitSignal(tab.indexing_finished, timeout=60_000) as blocker:
        tab.indexing.reindex_button.click()
    assert blocker.args[0].indexed == 18


def test_the_first_indexing_fills_the_folder_tree_once_files_are_listed_and_says_when_it_is_paused(
        qtbot, tab: SearchTab, registry: ModelRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A first-contact trial: during a first indexing the tree showed only "All sounds" until the names pass ended
    (names embedded on a large library take long), though name search worked; paused, the row kept the
    progress that arrived after the click ("names embedded 123/123") with no word of the pause."""
    from app.ui import search_tab

    gate, real = threading.Event(), search_tab.index_session_job

    def held_after_listing(session, **kwargs):  # noqa: ANN001, ANN003, ANN202 - the names take long from here
        job = real(session, **kwargs)
        while True:
            try:
                p = next(job)
            except StopIteration as stop:
                return stop.value
            yield p
            if p.get("part") == "listing" and p.get("part_done") == p.get("part_total"):  # every file listed
                gate.wait(30)

    monkeypatch.setattr(search_tab, "index_session_job", held_after_listing)
    try:
        tab.set_models(registry.entries())
        tab.set_library(make_library(tmp_path / "lib"))
        qtbot.waitUntil(lambda: {"birds", "engines", "long"} <= set(tab.state.folders), timeout=30_000)
        assert tab.indexing.running()
        tab.indexing.pause_button.click()
        late = {"phase": "names", "part": "embedding", "part_done": 7, "part_total": 7}  # sent before the click
        tab._index_progress(late)
        label = tab.indexing.index_label.text()
        assert label.startswith("Paused · Reading names and tags") and label.endswith("names embedded 7/7")
        tab.indexing.pause_button.click()
        assert not tab.indexing.index_label.text().startswith("Paused")
    finally:
        gate.set()
    qtbot.waitUntil(lambda: not tab.indexing.running(), timeout=60_000)


def test_switching_library_closes_the_old_one(qtbot, tab: SearchTab, registry: ModelRegistry,
                                              tmp_path: Path) -> None:
    first = make_library(tmp_path / "a")
    open_and_index(qtbot, tab, registry, first)
    old = tab.session
    second = tmp_path / "b"
    write(second / "only.wav", 0.2 * np.sin(2 * np.pi * 440 * np.arange(SR) / SR))
    with qtbot.waitSignal(tab.indexing_finished, timeout=60_000) as blocker:
        tab.set_library(second)
    assert old.closed and blocker.args[0].indexed == 1
    results = search(qtbot, tab, "a tone")
    assert [h.rel_path for h in results.hits] == ["only.wav"]
    assert tab.lists.tabText(1) == "Failed files (0)"


# ------------------------------------------------------------------- names <-> sound, why, tags, favourites


def test_highlight_marks_spans_and_escapes_the_rest() -> None:
    html = highlight("Door<Creak> & co", [(5, 10), (0, 2), (1, 4)])  # overlapping spans merge
    assert html.count("<span") == 2 and "&lt;" in html and "&amp;" in html and "<Creak>" not in html
    assert html.startswith('<span style="') and ">Door</span>" in html and ">Creak</span>" in html
    assert highlight("plain", []) == "plain"


def test_the_list_marks_the_words_the_service_found_and_no_others() -> None:
    """One matched-word rule, the service's (hit.match.spans): the list only moves its spans to where it shows
    each field; a field the service found nothing in stays plain even if a query word appears there."""
    fields = {"name": "DOORWood_Creak.wav", "folder": "Doors/Wood", "tags": "", "user_tags": "creaky; old door"}
    m = MatchInfo(matched_terms=["door", "creak"], fields=fields,
                  spans={"name": [(0, 4), (9, 14)], "user_tags": [(12, 16)]})  # no span in the folder
    hit = Hit(Path("/l/Doors/Wood/DOORWood_Creak.wav"), 0.5, 1.0, "Doors/Wood", 0.0, [0.4], 1, "", match=m,
              user_tags=["creaky", "old door"])
    name = "DOORWood_Creak.wav"
    assert [name[a:b] for a, b in field_spans(hit, "name", name)] == ["DOOR", "Creak"]
    shown = f"Library/{name}"  # the same name shown inside a longer text
    assert [shown[a:b] for a, b in field_spans(hit, "name", shown)] == ["DOOR", "Creak"]
    assert field_spans(hit, "folder", "Doors/Wood") == []  # "Door" is there, but the service did not mark it
    tags = "creaky, old door"  # as the list shows them; the service joined them with "; "
    assert [tags[a:b] for a, b in tag_spans(hit)] == ["door"]
    hit.user_tags = ["old door"]  # edited since the search: the span follows its tag
    assert [hit.user_tags[0][a:b] for a, b in tag_spans(hit)] == ["door"]
    assert tag_spans(Hit(Path("/x.wav"), 0.1, 1.0, "", 0.0, [0.1])) == []  # find similar: no match info


def test_why_says_what_matched_and_each_channels_score() -> None:
    def hit(terms: list[str], name_score: float, sound: float) -> Hit:
        m = MatchInfo(matched_terms=terms, spans={"name": [(0, 4)]} if terms else {},
                      fields={"name": "Door_01.wav", "folder": "", "tags": "", "user_tags": ""},
                      name_score=name_score, sound_score=sound)
        return Hit(Path("/l/Door_01.wav"), 0.5, 1.0, "", 0.0, [0.4], 1, "Door_01.wav", match=m)

    why = why_html(hit(["door"], 0.8, 0.31))
    assert ">door</span> in its name" in why and "names 0.80" in why and "sound 0.31" in why
    assert "sound" not in why_html(hit(["door"], 0.8, 0.0), ("names",))
    assert "names" not in why_html(hit([], 0.0, 0.42), ("sound",))
    assert "matched by its sound" in why_html(hit([], 0.0, 0.42))
    assert "means something close" in why_html(hit([], 0.3, 0.42))
    assert "means something close" not in why_html(hit([], 0.09, 0.42))  # a faint likeness: sound decided
    assert "matched by its sound" in why_html(hit([], 0.09, 0.42))
    assert "loosely related" in why_html(hit([], 0.09, 0.0), ("names",))


def test_balance_positions_map_to_modes_and_weights() -> None:
    assert balance(0) == ("names", None) and balance(BALANCE_STEPS) == ("sound", None)
    assert balance(25) == ("both", 0.75) and balance(60, default_position=60) == ("both", None)
    assert balance(balance_position(0.3)) == ("both", 0.3)


def test_tag_dialog_adds_to_all_removes_from_all_and_keeps_partial(qtbot) -> None:
    dialog = TagDialog([["rain", "night"], ["rain"]], known=["Rainforest", "wind"])
    qtbot.addWidget(dialog)
    items = {dialog.list.item(i).text(): dialog.list.item(i) for i in range(dialog.list.count())}
    assert items["rain"].checkState() == Qt.CheckState.Checked
    assert items["night"].checkState() == Qt.CheckState.PartiallyChecked
    assert dialog.changes() == ([], [])  # nothing touched: nothing changes
    dialog.new_edit.setText("wind, Rain ,, storm")
    dialog.add_typed()
    assert dialog.new_edit.text() == ""
    add, remove = dialog.changes()
    assert sorted(add) == ["storm", "wind"] and remove == []  # "Rain" is the listed "rain", on all already
    items["rain"].setCheckState(Qt.CheckState.Unchecked)
    items["night"].setCheckState(Qt.CheckState.Checked)
    add, remove = dialog.changes()
    assert sorted(add) == ["night", "storm", "wind"] and remove == ["rain"]
    completer = dialog.new_edit.completer()
    completer.setCompletionPrefix("rain")
    assert completer.currentCompletion() == "Rainforest"  # the library's tags complete, any case
    assert split_tags(" a, b ,a,, ") == ["a", "b"]


def press_ok(dialog: TagDialog) -> None:
    dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Ok).click()
    assert dialog.result() == QDialog.DialogCode.Accepted


def make_named_library(root: Path) -> Path:
    """Sounds whose names say what they are, in several formats, rates and channel counts."""
    t = lambda s, sr=SR: np.arange(round(s * sr)) / sr  # noqa: E731
    rng = np.random.default_rng(1)
    write(root / "Doors/DOORWood_Creak Slow_01.wav", 0.3 * np.sin(2 * np.pi * 300 * t(1.0)))
    write(root / "Doors/door_slam.wav", 0.3 * rng.standard_normal(SR // 2))
    root.joinpath("Animals/Birds").mkdir(parents=True)
    sf.write(root / "Animals/Birds/lark_song.flac", 0.3 * np.sin(2 * np.pi * 2000 * t(1.5, 48000)), 48000)
    stereo = np.stack([np.sin(2 * np.pi * 90 * t(2.0, 22050))] * 2, axis=1) * 0.3
    root.joinpath("Vehicles").mkdir()
    sf.write(root / "Vehicles/engine idle.ogg", stereo, 22050)
    write(root / "rain_on_window.wav", 0.05 * rng.standard_normal(2 * SR))
    return root


@pytest.fixture
def named(qtbot, tab: SearchTab, registry: ModelRegistry, tmp_path: Path) -> SearchTab:
    open_and_index(qtbot, tab, registry, make_named_library(tmp_path / "named"))
    return tab


def test_names_sound_control_and_why_it_matched(qtbot, named: SearchTab) -> None:
    tab = named
    assert tab.balance.slider.value() == tab.balance.slider.marked  # the tuned default, marked
    assert tab.state.ranking() == ("both", None)
    results = search(qtbot, tab, "door creak")
    assert len(results.hits) == 5  # fused: every file has a sound score (the tiny model's are random)
    row = [h.rel_path for h in results.hits].index("Doors/DOORWood_Creak Slow_01.wav")
    name_html = tab.table.item(row, ResultsTable.NAME).text()
    assert "<span" in name_html and ">DOOR</span>" in name_html and ">Creak</span>" in name_html
    assert "<span" in tab.table.item(row, ResultsTable.FOLDER).text()  # Doors: matched in the folder too
    assert tab.table.plain(row, ResultsTable.NAME) == "DOORWood_Creak Slow_01.wav"
    assert float(tab.table.plain(row, ResultsTable.NAMES)) > 0
    float(tab.table.plain(row, ResultsTable.SOUND))  # fused: the sound score is shown beside it
    lark = [h.rel_path for h in results.hits].index("Animals/Birds/lark_song.flac")
    assert "<span" not in tab.table.item(lark, ResultsTable.NAME).text()  # nothing matched there
    # where the real matches end: a result only the sound channel supports is greyed and says so
    assert tab.table.item(lark, ResultsTable.NAME).data(Qt.ItemDataRole.ForegroundRole) is not None
    assert "sound alone" in tab.table.item(lark, ResultsTable.NAME).toolTip()
    assert tab.table.item(row, ResultsTable.NAME).data(Qt.ItemDataRole.ForegroundRole) is None
    tab.table.selectRow(row)
    why = tab.preview_pane.why_label.text()
    assert "matched" in why and ">door</span>" in why and "name and folder" in why and "sound" in why

    # names only: files whose names say nothing of it are gone, and there is no sound score
    with qtbot.waitSignal(tab.results_shown, timeout=20_000) as blocker:
        tab.balance.names_button.click()
    assert tab.balance.slider.value() == 0 and tab.state.ranking() == ("names", None)
    names_hits = blocker.args[0].hits  # keyword matches first; weak semantic neighbours may follow
    assert {h.folder for h in names_hits[:2]} == {"Doors"}
    larks = [h for h in names_hits if h.rel_path == "Animals/Birds/lark_song.flac"]  # listed last, if at all
    assert not larks or (larks[0].match.name_score <= LOOSE_NAMES and names_hits.index(larks[0]) >= 2)
    assert set(column(tab, ResultsTable.SOUND)) == {"–"}
    tab.table.selectRow(0)
    assert "names" in tab.preview_pane.why_label.text() and "sound" not in tab.preview_pane.why_label.text()

    # find similar by sound alone (the button), or by sound and name (the context menu)
    with qtbot.waitSignal(tab.results_shown, timeout=20_000) as blocker:
        tab.preview_pane.similar_button.click()
    assert blocker.args[0].mode == "similar" and tab.table.channels == ("sound",)
    action = next(a for a in tab.context_menu(0).actions() if a.text() == "Find similar by sound and name")
    with qtbot.waitSignal(tab.results_shown, timeout=20_000) as blocker:
        action.trigger()
    assert blocker.args[0].mode == "similar" and tab.table.channels == ("names", "sound")
    assert "by sound and name" in tab.lists.results_header.text()
    search(qtbot, tab, "door creak!")  # typing goes back to text search
    shot(tab, "names_why")

    # sound only: the slider's other end; the query runs again by itself
    with qtbot.waitSignal(tab.results_shown, timeout=20_000) as blocker:
        tab.balance.sound_button.click()
    assert tab.state.ranking() == ("sound", None) and len(blocker.args[0].hits) == 5
    # a mix in between, then back to the default with a double-click on the slider
    with qtbot.waitSignal(tab.results_shown, timeout=20_000):
        tab.balance.slider.setValue(40)  # (30 is the default position since the names weight became 0.7)
    assert tab.state.ranking() == ("both", 0.6)
    QTest.mouseDClick(tab.balance.slider, Qt.MouseButton.LeftButton)
    assert tab.balance.slider.value() == tab.balance.slider.marked and tab.state.ranking() == ("both", None)
    # the position is kept for the next session
    again = SearchTab()
    qtbot.addWidget(again)
    assert again.balance.slider.value() == tab.balance.slider.value()
    again.shutdown()


def test_tags_on_several_results_and_favourites(qtbot, named: SearchTab) -> None:
    tab = named
    tab.balance.names_button.click()
    search(qtbot, tab, "door")
    doors = [r for r, h in enumerate(tab.state.hits) if h.folder == "Doors"]
    assert len(doors) == 2
    door_paths = {tab.state.hits[r].rel_path for r in doors}
    tab.table.clearSelection()
    for r in doors:
        tab.table.selectionModel().select(tab.table.model().index(r, 0),
                                          tab.table.selectionModel().SelectionFlag.Select
                                          | tab.table.selectionModel().SelectionFlag.Rows)
    assert len(tab.state.selected_hits()) == 2 and tab.preview_pane.tags_button.text() == "Tags of 2…"

    # add two tags to both at once
    dialog = TagDialog([[], []], tab.state.known_tags, tab)
    qtbot.addWidget(dialog)
    dialog.new_edit.setText("wooden, spooky house")  # typed, not yet added: OK adds it
    press_ok(dialog)
    with qtbot.waitSignal(tab.tags_changed, timeout=20_000):
        tab.marks.edit_tags(dialog)
    for r in doors:
        assert set(tab.table.plain(r, ResultsTable.TAGS).split(", ")) == {"wooden", "spooky house"}
    assert {"wooden", "spooky house"} <= set(tab.state.known_tags)
    shot(tab, "tags")

    # tags are searchable, and the matched tag is highlighted in the list
    results = search(qtbot, tab, "spooky")
    assert {h.rel_path for h in results.hits[:2]} == door_paths
    assert "<span" in tab.table.item(0, ResultsTable.TAGS).text()

    # remove one from one of them
    tab.table.selectRow(0)
    first = tab.state.hits[0]
    dialog = TagDialog([first.user_tags], tab.state.known_tags, tab)
    qtbot.addWidget(dialog)
    dialog.list.findItems("wooden", Qt.MatchFlag.MatchExactly)[0].setCheckState(Qt.CheckState.Unchecked)
    press_ok(dialog)
    with qtbot.waitSignal(tab.tags_changed, timeout=20_000) as blocker:
        tab.marks.edit_tags(dialog)
    assert blocker.args[0] == {first.file_id: ["spooky house"]} and tab.state.hits[0].user_tags == ["spooky house"]

    # a tag the catalog refuses: a clear message, nothing changed
    dialog = TagDialog([first.user_tags], tab.state.known_tags, tab)
    qtbot.addWidget(dialog)
    dialog.new_edit.setText("rain;wind")
    with qtbot.waitSignal(tab.status_changed, timeout=20_000,
                          check_params_cb=lambda m: "rain;wind" in m) as blocker:
        press_ok(dialog)
        tab.marks.edit_tags(dialog)
    assert "';'" in blocker.args[0] and tab.state.hits[0].user_tags == ["spooky house"]

    # favourites: a click on the star marks it; the favourites-only filter shows only those
    assert tab.table.plain(1, ResultsTable.STAR) == "☆"
    star = tab.table.visualItemRect(tab.table.item(1, ResultsTable.STAR)).center()
    with qtbot.waitSignal(tab.favourites_changed, timeout=20_000) as blocker:
        QTest.mouseClick(tab.table.viewport(), Qt.MouseButton.LeftButton, pos=star)
    assert blocker.args == [[tab.state.hits[1].file_id], True] and tab.table.plain(1, ResultsTable.STAR) == "★"
    favourite = tab.state.hits[1].rel_path
    with qtbot.waitSignal(tab.results_shown, timeout=20_000) as blocker:
        tab.filters_bar.favourites_check.setChecked(True)
    assert [h.rel_path for h in blocker.args[0].hits] == [favourite] and blocker.args[0].hits[0].favourite
    # unmarking it (the button acts on the selection) empties the filtered list
    tab.table.selectRow(0)
    assert tab.preview_pane.favourite_button.isChecked()
    with qtbot.waitSignal(tab.results_shown, timeout=20_000) as blocker:
        tab.preview_pane.favourite_button.click()
    assert blocker.args[0].hits == [] and "favourites" in tab.lists.no_results.text()
    # the context menu offers the same, for the whole selection
    tab.filters_bar.favourites_check.setChecked(False)
    search(qtbot, tab, "door")
    tab.table.selectAll()
    menu = tab.context_menu(0)
    texts = [a.text() for a in menu.actions()]
    n = len(tab.state.hits)
    assert f"Edit tags… ({n} sounds)" in texts and f"Add to favourites ({n} sounds)" in texts


def test_format_rate_and_channel_filters(qtbot, named: SearchTab) -> None:
    tab = named
    bar = tab.filters_bar
    tab.balance.sound_button.click()
    results = search(qtbot, tab, "a sound")
    assert len(results.hits) == 5

    def shown_after(change: object) -> set[str]:
        with qtbot.waitSignal(tab.results_shown, timeout=20_000) as blocker:
            change()
        return {h.rel_path for h in blocker.args[0].hits}

    assert shown_after(lambda: bar.format_combo.setCurrentText("FLAC")) == {"Animals/Birds/lark_song.flac"}
    assert shown_after(lambda: bar.format_combo.setCurrentText("Any format")) and len(tab.state.hits) == 5
    assert shown_after(lambda: bar.rate_combo.setCurrentText("≥ 44.1 kHz")) == {"Animals/Birds/lark_song.flac"}
    assert shown_after(lambda: bar.rate_combo.setCurrentText("≤ 22.05 kHz")) == {"Vehicles/engine idle.ogg"}
    bar.rate_combo.setCurrentText("Any rate")
    assert shown_after(lambda: bar.channels_combo.setCurrentText("Stereo")) == {"Vehicles/engine idle.ogg"}
    mono = shown_after(lambda: bar.channels_combo.setCurrentText("Mono"))
    assert len(mono) == 4 and "Vehicles/engine idle.ogg" not in mono
    assert bar.filters().channels == 1 and bar.filters().active


def test_a_catalog_repaired_on_opening_is_said_in_the_status_line(qtbot, tab: SearchTab, registry: ModelRegistry,
                                                                  tmp_path: Path) -> None:
    """Issue 27 item 1: the GUI opened a damaged catalog, repaired it, and said nothing."""
    root = make_library(tmp_path / "lib")
    (root / ".earshot").mkdir()
    (root / ".earshot" / "catalog.sqlite").write_bytes(b"not a database" * 400)
    open_and_index(qtbot, tab, registry, root)
    assert "Catalog repaired: damaged catalog moved to catalog.sqlite.damaged-" in tab.status_label.text()


def test_a_read_only_catalog_is_opened_and_says_indexing_needs_write_access(qtbot, tab: SearchTab,
                                                                             registry: ModelRegistry,
                                                                             tmp_path: Path, monkeypatch) -> None:
    """Issue 27 item 16: a shared library indexed by someone else (no write access) is searched, not re-indexed."""
    from app.services.library import catalog

    root = make_library(tmp_path / "lib")
    open_and_index(qtbot, tab, registry, root)
    tab.shutdown()
    real = catalog.can_write
    monkeypatch.setattr(catalog, "can_write", lambda folder: real(folder) and folder.name != ".earshot")
    monkeypatch.setattr(catalog, "user_data_dir", lambda *a, **k: str(tmp_path / "private"))
    other = SearchTab()
    qtbot.addWidget(other)
    other.set_audio_status(NO_AUDIO)
    other.set_registry(registry)
    try:
        assert open_and_index(qtbot, other, registry, root) is None  # indexing refused
        assert "read-only" in other.status_label.text() and "write access" in other.status_label.text()
        assert "write access" in other.indexing.index_label.text()
        assert search(qtbot, other, "tone").hits
    finally:
        other.shutdown()


def test_down_from_the_search_box_goes_into_the_results(qtbot, tab: SearchTab, registry: ModelRegistry,
                                                        tmp_path: Path) -> None:
    open_and_index(qtbot, tab, registry, make_library(tmp_path / "lib"))
    search(qtbot, tab, "a bird sings")
    tab.activateWindow()
    tab.query_edit.setFocus()
    qtbot.waitUntil(tab.query_edit.hasFocus, timeout=5_000)
    shown = max(tab.table.currentRow(), 0)  # the result being previewed, if one is
    qtbot.keyClick(tab.query_edit, Qt.Key.Key_Down)
    assert tab.table.hasFocus() and tab.table.currentRow() == shown and tab.table.selectedItems()


def test_a_new_search_opens_at_its_best_results_while_the_previewed_file_stays_selected(
        qtbot, tab: SearchTab, registry: ModelRegistry, tmp_path: Path) -> None:
    """A first-contact trial: with a file far down the list previewed, the next search opened scrolled down to it,
    the best results out of view."""
    open_and_index(qtbot, tab, registry, make_library(tmp_path / "lib", n_extra=40, extra_seconds=0.3))
    search(qtbot, tab, "noise")
    last = tab.table.rowCount() - 1
    assert last > 30
    tab.table.selectRow(last)
    previewed = tab.table.item(last, ResultsTable.NAME).data(PATH_ROLE)
    qtbot.waitUntil(lambda: tab.state.preview_hit is not None and str(tab.state.preview_hit.path) == previewed,
                    timeout=10_000)
    assert tab.table.verticalScrollBar().value() > 0
    search(qtbot, tab, "noise extra")
    rows = [tab.table.item(r, ResultsTable.NAME).data(PATH_ROLE) for r in range(tab.table.rowCount())]
    assert previewed in rows and rows.index(previewed) > 30, "the test needs the previewed file far down"
    assert tab.table.verticalScrollBar().value() == 0
    assert tab.table.selected_rows() == [rows.index(previewed)]


def test_a_new_search_previews_its_best_result_unless_the_user_picked_one(
        qtbot, tab: SearchTab, registry: ModelRegistry, tmp_path: Path) -> None:
    """A first-contact trial: the library's first sound, selected only because the list opened on it, stayed
    selected and previewed through every later search (almost always among 50 results), far down the list; Down
    from the query box jumped to it, so Space and Find similar acted on a sound nobody chose."""
    open_and_index(qtbot, tab, registry, make_library(tmp_path / "lib", n_extra=40, extra_seconds=0.3))
    qtbot.waitUntil(lambda: tab.state.shown_kind == "browse" and tab.state.preview_hit is not None, timeout=10_000)
    first = tab.state.preview_hit.path
    search(qtbot, tab, "noise extra")
    paths = [h.path for h in tab.state.hits]
    assert first in paths and paths.index(first) > 0, "the test needs the first sound listed, not at the top"
    assert tab.table.selected_rows() == [0] and tab.state.preview_hit.path == paths[0]
    tab.activateWindow()
    tab.query_edit.setFocus()
    qtbot.waitUntil(tab.query_edit.hasFocus, timeout=5_000)
    qtbot.keyClick(tab.query_edit, Qt.Key.Key_Down)
    assert tab.table.currentRow() == 0
    tab.table.selectRow(3)  # the user's pick is kept while it is listed
    picked = tab.state.preview_hit.path
    search(qtbot, tab, "noise")
    assert tab.state.selected_hit().path == picked


def test_without_an_output_device_autoplay_is_greyed_and_says_why(qtbot, tab: SearchTab) -> None:
    """A first-contact trial: with no sound card, selecting a result with Autoplay on did nothing and said nothing;
    the message it got elsewhere also complained about the microphone, which playback does not need."""
    autoplay, play = tab.preview_pane.transport.autoplay_button, tab.preview_pane.play_button
    assert not autoplay.isEnabled()  # the fixture's tab has no audio device
    assert "output device" in autoplay.toolTip() and "microphone" not in autoplay.toolTip()
    assert "microphone" not in play.toolTip()
    tab.set_audio_status(SPEAKERS)
    assert autoplay.isEnabled() and autoplay.toolTip().startswith("Play each result")


def test_the_names_pass_progress_says_its_phase_once() -> None:
    """A first-contact trial read "Reading names and tags (...) · reading names and tags (100/123)"."""
    from app.ui.search_text import format_progress

    line = format_progress({"phase": "names", "message": "reading names and tags (100/123)", "part": "reading",
                            "part_done": 100, "part_total": 123})
    assert line == "Reading names and tags (name search works when this is done) · files read 100/123"
    assert format_progress({"phase": "names", "message": "scanning"}).endswith(" · scanning")


@pytest.mark.parametrize("width", [712, 1016])  # the tab in a 720x480 and a 1024x700 window
def test_the_search_bars_read_right_in_a_small_window(qtbot, registry: ModelRegistry, tmp_path: Path,
                                                      width: int) -> None:
    """At 720x480 the query box was 50 px wide ("door" of "creaky door"), a greyed "Save recording…" read
    "e recordin" and the filters "Any forr", "★ Favour". Save shows once there is a recording; the filters take a
    second row where one does not hold them; the balance slider gives way before the query does."""
    tab = shown_tab(qtbot, registry, width)
    (tmp_path / "empty").mkdir()
    open_and_index(qtbot, tab, registry, tmp_path / "empty")
    qtbot.wait(50)
    assert not tab.record_query.save_button.isVisible()  # nothing recorded yet
    assert tab.minimumSizeHint().width() <= width  # else a window that small squeezes the bars below it
    assert tab.width() == width and tab.query_edit.width() >= 120
    bars = [tab.model_combo, tab.record_query.record_button, tab.record_query.seconds_spin, tab.balance,
            tab.filters_bar.format_combo, tab.filters_bar.rate_combo, tab.filters_bar.channels_combo,
            tab.filters_bar.favourites_check, tab.filters_bar.folder_combo]
    cut = [w for w in bars if w.width() < w.minimumSizeHint().width()]
    assert not cut, [(type(w).__name__, w.width(), w.minimumSizeHint().width()) for w in cut]
    filters = tab.filters_bar
    one_row = filters.tail.geometry().top() == filters.head.geometry().top()
    assert one_row == (width > 1000)  # a 1024-px window keeps them in one row
    tab.shutdown()


def test_the_format_column_is_shown_from_the_headers_menu_and_kept(qtbot, tab: SearchTab, registry: ModelRegistry,
                                                                   tmp_path: Path) -> None:
    """Sample rate and channels at a glance: hidden at first (the names need the room), shown from the header's
    right-click menu, right after Duration, and still shown in the next window; the preview's title says it too."""
    open_and_index(qtbot, tab, registry, make_library(tmp_path / "lib"))
    search(qtbot, tab, "noise")
    table = tab.table
    assert table.isColumnHidden(ResultsTable.FORMAT)
    menu = table.header_menu()
    menu.actions()[0].toggle()
    assert not table.isColumnHidden(ResultsTable.FORMAT)
    assert set(column(tab, ResultsTable.FORMAT)) == {"32 kHz mono"}
    header = table.horizontalHeader()
    assert header.visualIndex(ResultsTable.FORMAT) == header.visualIndex(ResultsTable.DURATION) + 1
    assert not ResultsTable().isColumnHidden(ResultsTable.FORMAT)  # remembered
    with qtbot.waitSignal(tab.preview_shown, timeout=20_000):
        table.selectRow(0)
    assert " · 32 kHz mono" in tab.preview_pane.preview_title.text()
