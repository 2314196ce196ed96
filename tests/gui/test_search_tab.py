"""Search tab with a tiny untrained retrieval model: automatic indexing (the GUI keeps turning), search as you
type, preview, find similar, failed files, filters, playback and the empty states."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from PySide6.QtCore import QPoint, Qt, QTimer, QUrl
from PySide6.QtGui import QGuiApplication
from PySide6.QtTest import QTest

from app.services.audio import DeviceStatus, Player
from app.services.registry import ModelRegistry
from app.ui.search_tab import SearchTab
from models.frontends import PasstMel, frontend_to_dict
from models.passt import passt_tiny
from models.retrieval import RetrievalConfig, RetrievalModel
from models.text import text_tiny
from training.checkpoints import save_checkpoint

SR = 32000
WINDOW_S = 2.0
NO_AUDIO = DeviceStatus(False, False, "no audio input device (microphone) found; no audio output device found")
SPEAKERS = DeviceStatus(False, True, "output: fake speakers", [], ["fake speakers"])
SHOTS = Path(__file__).resolve().parents[2] / "bench" / "out" / "screenshots"


class FakeSpeakers:
    """Stands in for sounddevice.OutputStream; nothing pulls audio, so playback stays 'playing'."""

    def __init__(self, **kwargs: object) -> None:
        self.active = False

    def start(self) -> None:
        self.active = True

    def stop(self) -> None:
        self.active = False

    def close(self) -> None:
        self.active = False


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


@pytest.fixture
def registry(tmp_path: Path) -> ModelRegistry:
    write_tiny_model(tmp_path / "models")
    reg = ModelRegistry(folders=[(tmp_path / "models", "user")], device="cpu")
    reg.scan()
    return reg


@pytest.fixture
def tab(qtbot, registry: ModelRegistry) -> Iterator[SearchTab]:
    widget = SearchTab()
    qtbot.addWidget(widget)
    widget.resize(1100, 700)
    widget.set_audio_status(NO_AUDIO)
    widget.set_registry(registry)
    widget.show()
    yield widget
    widget.shutdown()


def open_and_index(qtbot, tab: SearchTab, registry: ModelRegistry, root: Path) -> object:
    with qtbot.waitSignal(tab.indexing_finished, timeout=60_000) as blocker:
        tab.set_models(registry.entries())
        tab.set_library(root)
    return blocker.args[0]


def search(qtbot, tab: SearchTab, text: str) -> object:
    with qtbot.waitSignal(tab.results_shown, timeout=20_000) as blocker:
        tab.query_edit.setText(text)
    return blocker.args[0]


def table_names(tab: SearchTab) -> list[str]:
    return [tab.table.item(r, 0).text() for r in range(tab.table.rowCount())]


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
    ticks: list[float] = []
    timer = QTimer()
    timer.setInterval(50)  # 20 Hz
    timer.timeout.connect(lambda: ticks.append(time.monotonic()))
    progress: list[str] = []
    timer.start()
    start = time.monotonic()
    with qtbot.waitSignal(tab.indexing_finished, timeout=60_000) as blocker:
        tab.set_models(registry.entries())  # loads the model, opens the library, indexes: all in workers
        tab.set_library(root)
        while not blocker.signal_triggered:
            progress.append(tab.index_label.text())
            qtbot.wait(20)
    end = time.monotonic()
    timer.stop()
    outcome = blocker.args[0]
    assert outcome is not None and len(outcome.report.embedded) == 26 and outcome.indexed == 26
    assert any(p.startswith("Indexing ") and "files" in p for p in progress)
    during = [t for t in ticks if start <= t <= end]
    gaps = np.diff([start, *during, end])
    print(f"load + open + index took {end - start:.2f} s, {len(during)} ticks, longest gap {gaps.max():.3f} s")
    # the 20-Hz timer fired all through: at least 60 % of its ticks, never a gap of half a second
    assert end - start > 0.5, "indexing was too quick to measure"
    assert len(during) >= 0.6 * (end - start) / 0.05
    assert gaps.max() < 0.5, f"event loop stalled for {gaps.max():.2f} s"
    assert "26 sounds indexed" in tab.index_label.text()
    # the controls reset when the worker's thread has ended, a moment after its result (a separate signal)
    qtbot.waitUntil(lambda: not tab.cancel_button.isVisibleTo(tab), timeout=10_000)
    assert tab.reindex_button.isVisibleTo(tab)


def test_search_preview_similar_failed_filters(qtbot, tab: SearchTab, registry: ModelRegistry,
                                               tmp_path: Path) -> None:
    root = make_library(tmp_path / "lib")
    open_and_index(qtbot, tab, registry, root)
    assert tab.stack.currentWidget() is tab.page

    # failed files are listed with their reasons
    assert tab.lists.tabText(1) == "Failed files (1)"
    reason = tab.failed_list.item(0).text()
    assert reason.startswith("birds/broken.wav") and ("corrupt" in reason or "not" in reason), reason

    # search as you type: nothing until the debounce has passed, then results best first
    tab.query_edit.setText("a bird")
    qtbot.wait(100)
    assert tab.results is None
    results = search(qtbot, tab, "a bird sings")
    assert len(results.hits) == 6 and tab.results_stack.currentWidget() is tab.table
    scores = [float(tab.table.item(r, 3).text()) for r in range(tab.table.rowCount())]
    assert scores == sorted(scores, reverse=True) and tab.table.rowCount() == 6
    assert "6 results" in tab.results_header.text()

    # selecting shows the preview (waveform + spectrogram), decoded in a worker
    row = [h.rel_path for h in tab.hits].index("long/mixed.wav")
    with qtbot.waitSignal(tab.preview_shown, timeout=20_000) as blocker:
        tab.table.selectRow(row)
    preview = blocker.args[0]
    assert preview.duration_s == pytest.approx(5.0) and preview.spectrogram.shape[1] == 257
    assert "mixed.wav" in tab.preview_title.text()
    hit = tab.hits[row]
    assert len(hit.window_scores) == 3 and tab.window_plot.isVisibleTo(tab)  # per-window similarity
    assert tab.start_s == hit.best_window_start_s and tab.waveform.best.isVisible()
    shot(tab, "results")

    # no output device: Play is disabled and says why
    assert not tab.play_button.isEnabled() and "no audio output" in tab.play_button.toolTip()

    # drag out as a file; copy path; reveal in the file manager
    mime = tab.table.mimeData([tab.table.item(row, 0)])
    assert [u.toLocalFile() for u in mime.urls()] == [str(root / "long/mixed.wav")]
    tab.copy_selected_path()
    assert QGuiApplication.clipboard().text() == str(root / "long/mixed.wav")
    opened: list[QUrl] = []
    tab.open_url = opened.append
    tab.reveal_selected()
    assert opened and opened[0].toLocalFile() == str(root / "long")

    # find similar: the copy of a file comes first, with cosine ~1
    chirp = [h.rel_path for h in tab.hits].index("birds/chirp.wav")
    tab.table.selectRow(chirp)
    with qtbot.waitSignal(tab.results_shown, timeout=20_000) as blocker:
        tab.similar_button.click()
    similar = blocker.args[0]
    assert similar.mode == "similar" and similar.hits[0].rel_path == "engines/chirp_copy.wav"
    assert similar.hits[0].score > 0.999 and "sounds like chirp.wav" in tab.results_header.text()

    # filters narrow the results (back to the text query by typing)
    search(qtbot, tab, "a bird sings!")
    with qtbot.waitSignal(tab.results_shown, timeout=20_000) as blocker:
        tab.max_spin.setValue(1.0)
    assert {h.rel_path for h in blocker.args[0].hits} == {"birds/tone.wav"}
    with qtbot.waitSignal(tab.results_shown, timeout=20_000) as blocker:
        tab.max_spin.setValue(0.0)
        tab.folder_combo.setCurrentIndex(tab.folder_combo.findData("engines"))
    assert {h.folder for h in blocker.args[0].hits} == {"engines"} and len(blocker.args[0].hits) == 3
    assert tab.folder_combo.findData("long") > 0 and tab.folder_combo.findData("birds") > 0

    # no results: say so, with the reason
    with qtbot.waitSignal(tab.results_shown, timeout=20_000) as blocker:
        tab.min_spin.setValue(100.0)
    assert blocker.args[0].hits == [] and tab.results_stack.currentWidget() is tab.no_results
    assert "No sounds match" in tab.no_results.text() and "filters" in tab.no_results.text()
    shot(tab, "no_results")


def test_playback_space_bar_and_click_to_seek(qtbot, tab: SearchTab, registry: ModelRegistry,
                                              tmp_path: Path) -> None:
    root = make_library(tmp_path / "lib")
    tab.player = Player(stream_factory=FakeSpeakers)
    tab.set_audio_status(SPEAKERS)
    open_and_index(qtbot, tab, registry, root)
    search(qtbot, tab, "noise")
    row = [h.rel_path for h in tab.hits].index("long/mixed.wav")
    with qtbot.waitSignal(tab.preview_shown, timeout=20_000):
        tab.table.selectRow(row)
    assert tab.play_button.isEnabled()
    best = tab.hits[row].best_window_start_s

    # the space bar plays from the best window of a long file; again stops
    tab.table.setFocus()
    QTest.keyClick(tab.table, Qt.Key.Key_Space)
    assert tab.player.playing and tab.player.position == pytest.approx(best)
    assert tab.play_button.text() == "Stop"
    QTest.keyClick(tab.table, Qt.Key.Key_Space)
    assert not tab.player.playing and tab.play_button.text() == "Play"

    # ... but a space typed into the query is a space
    tab.query_edit.setFocus()
    QTest.keyClicks(tab.query_edit, " x")
    assert tab.query_edit.text() == "noise x" and not tab.player.playing

    # click on the waveform: play from there
    vb = tab.waveform.getPlotItem().getViewBox()
    target = vb.mapViewToScene(pg_point(3.5, 0.0))
    pos = tab.waveform.mapFromScene(target)
    QTest.mouseClick(tab.waveform.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(int(pos.x()), int(pos.y())))
    assert tab.start_s == pytest.approx(3.5, abs=0.1)
    tab.toggle_play()
    assert tab.player.position == pytest.approx(tab.start_s, abs=1e-3)
    tab.seek_to(1.0)  # while playing: the position moves
    assert tab.player.position == pytest.approx(1.0)
    tab.stop_playback()


def pg_point(x: float, y: float) -> object:
    from PySide6.QtCore import QPointF

    return QPointF(x, y)


def test_cancel_and_pause_indexing(qtbot, tab: SearchTab, registry: ModelRegistry, tmp_path: Path) -> None:
    root = make_library(tmp_path / "lib", n_extra=12)
    with qtbot.waitSignal(tab.session_ready, timeout=30_000):
        tab.set_models(registry.entries())
        tab.set_library(root)
    tab.toggle_pause()
    assert tab.index_runner.is_paused() and tab.pause_button.text() == "Resume"
    tab.toggle_pause()
    assert not tab.index_runner.is_paused()
    with qtbot.waitSignal(tab.indexing_finished, timeout=30_000) as blocker:
        tab.cancel_indexing()
    if blocker.args[0] is None:  # cancelled before the end (it may also have finished first)
        assert "cancelled" in tab.index_label.text()
    qtbot.waitUntil(lambda: tab.index_runner is None, timeout=10_000)
    assert tab.reindex_button.isVisibleTo(tab)
    # indexing again picks up where it stopped
    with qtbot.waitSignal(tab.indexing_finished, timeout=60_000) as blocker:
        tab.reindex_button.click()
    assert blocker.args[0].indexed == 18


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
