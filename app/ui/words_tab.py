"""Words tab: spoken and written words in one embedding space.

The tab draws a Qt-free `WordsState` (`words_state.py`: the model, the collection, the recording searched and
its result) with its panels: the bar (`words_controls.py`), the collection with the selected word's nearest
neighbours (`words_collection.py`), a similarity-matrix heat map and a 2-D PCA map (`word_views.py`), and a
spoken-term search page (`words_search.py`: a longer recording, a query, scores over time, best hits).
Every model call runs in a `JobRunner`; errors land in the status line and `status_changed`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from PySide6.QtCore import Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import QSplitter, QTabWidget, QVBoxLayout, QWidget

from app.services.devices import DeviceStatus, Player, Recorder, device_status
from app.services.jobs import Job, format_progress
from app.services.registry import ModelEntry, ModelRegistry
from app.services.words.word_space import (
    SAMPLE_RATE,
    TermSearchResult,
    WordSet,
    WordSpace,
    load_items_job,
    load_recording_job,
    load_space_job,
    query_vector_job,
    recording_item_job,
    reembed_job,
    term_search_job,
    text_items_job,
)
from app.ui.audio_files import add_audio_files, open_audio_file
from app.ui.tab_base import ModelTab
from app.ui.word_views import CompareViews
from app.ui.words_collection import CollectionPane
from app.ui.words_controls import WordsBar
from app.ui.words_search import TermSearchPane
from app.ui.words_state import Take, WordsState


class WordsTab(ModelTab):
    kind = "words"
    title = "Words"
    purpose = (
        "Record or load spoken words, type written words, and compare them in one space: a similarity "
        "matrix, a 2-D map, and search of recordings by a typed or spoken word."
    )

    model_ready = Signal(str)  # a words model is loaded (its name)
    items_changed = Signal()  # the collection changed and the views were redrawn
    search_finished = Signal(object)  # TermSearchResult
    job_prefix = "words"

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.registry: ModelRegistry | None = None
        self.words_state = WordsState()
        self.recorder: Recorder | None = None
        self.make_recorder: Callable[[], Recorder] = lambda: Recorder(sample_rate=SAMPLE_RATE)
        self.player = Player()
        self._take: Take | None = None
        self._record_timer = QTimer(self)
        self._record_timer.setInterval(33)  # ~30 Hz
        self._record_timer.timeout.connect(self._drain_recorder)
        self._build()
        self._listen()
        self.set_audio_status(device_status())

    # ------------------------------------------------------------------------------------ what the state holds

    @property
    def space(self) -> WordSpace | None:
        return self.words_state.space

    @property
    def words(self) -> WordSet:
        return self.words_state.words

    @property
    def audio(self) -> DeviceStatus:
        return self.words_state.audio

    @property
    def search_audio(self) -> np.ndarray | None:
        return self.words_state.search_audio

    @property
    def search_result(self) -> TermSearchResult | None:
        return self.words_state.search_result

    # ------------------------------------------------------------------------------------------ building

    def has_working_view(self) -> bool:
        return True

    def _build(self) -> None:
        state = self.words_state
        self.build_model_chooser()
        self.bar = WordsBar(state, self.model_label, self.model_combo)
        self.collection = CollectionPane(state)
        self.compare = CompareViews()
        self.search_pane = TermSearchPane(state)
        self.views = QTabWidget()
        self.views.addTab(self.compare, "Compare")
        self.views.addTab(self.search_pane, "Search a recording")
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.collection)
        split.addWidget(self.views)
        split.setStretchFactor(0, 0)
        split.setStretchFactor(1, 1)
        split.setSizes([280, 820])
        page = QVBoxLayout(self.page)
        page.setContentsMargins(6, 6, 6, 6)
        page.addWidget(self.bar)
        page.addWidget(split, 1)
        page.addWidget(self.build_status_label())
        self._name_widgets()
        self._connect_widgets()

    def _name_widgets(self) -> None:
        """The panels' widgets under the names the tab has always had (tests, screenshots)."""
        named = {self.bar: ("add_files_button", "record_button", "word_edit", "add_word_button", "device_label"),
                 self.collection: ("items_list", "remove_button", "clear_button", "nearest_label", "nearest_list"),
                 self.search_pane: ("open_recording_button", "recording_label", "query_combo", "search_button",
                                    "search_wave", "score_plot", "score_curve", "hits_list")}
        for panel, names in named.items():
            for name in names:
                setattr(self, name, getattr(panel, name))

    def _connect_widgets(self) -> None:
        self.add_files_button.clicked.connect(self.choose_files)
        self.record_button.clicked.connect(self.toggle_recording)
        self.word_edit.returnPressed.connect(self.add_typed_word)
        self.add_word_button.clicked.connect(self.add_typed_word)
        self.compare.item_clicked.connect(self.items_list.setCurrentRow)
        self.collection.play_requested.connect(self.play_selected)
        self.open_recording_button.clicked.connect(self.choose_recording)
        self.search_button.clicked.connect(self.run_search)
        self.search_pane.play_from.connect(lambda seconds: self._play(self.search_audio, seconds))

    def _listen(self) -> None:
        events = self.words_state.events
        events.message.connect(lambda text, error: (self.error if error else self.status)(text))
        events.items.connect(lambda: self.compare.draw(self.words))
        events.items.connect(self.items_changed.emit)
        events.result.connect(lambda: self.search_finished.emit(self.search_result))
        events.ready.emit()  # nothing loaded yet: the controls that need a model are off

    # --------------------------------------------------------------------------------------- model setup

    @Slot(list)
    def set_models(self, entries: list[ModelEntry]) -> None:
        super().set_models(entries)
        chosen = self.fill_model_combo(self.model_combo, self.model_label)
        if not chosen:
            self.words_state.no_model()
        elif self.words_state.needs_loading(chosen, self.device_preference()):
            self._model_chosen(self.model_combo.currentIndex())  # new model, or the device preference changed

    @Slot(int)
    def _model_chosen(self, index: int) -> None:
        entry = self.model_entry_at(index)
        if entry is None:
            return
        self.words_state.loading(self.device_preference())
        registry = self.registry
        self.run_job(lambda: load_space_job(registry, entry), f"load-{entry.name}", self._space_loaded)

    @Slot(object)
    def _space_loaded(self, space: WordSpace) -> None:
        items = self.words_state.space_loaded(space)
        if items:
            self.run_job(lambda: reembed_job(space, items), "reembed", self.words_state.reembedded)
        self.model_ready.emit(space.name)

    # ------------------------------------------------------------------------------------------ devices

    def set_audio_status(self, status: DeviceStatus) -> None:
        """Enable recording and playback according to the audio devices (none is a normal state)."""
        self.words_state.set_audio_status(status)

    # --------------------------------------------------------------------------------------- running jobs

    @Slot(dict)
    def job_progress(self, progress: dict) -> None:
        self.status(format_progress(progress))

    # ------------------------------------------------------------------------------------------- adding

    @Slot()
    def choose_files(self) -> None:
        paths = add_audio_files(self)
        if paths:
            self.add_files(paths)

    def add_files(self, paths: list[Path]) -> None:
        space = self.space
        if space is None:
            self.error("No words model loaded yet.")
            return
        self.run_job(lambda: load_items_job(space, paths), "files", self.words_state.items_loaded)

    @Slot()
    def add_typed_word(self) -> None:
        text = self.word_edit.text().strip()
        if not text:
            self.error("Type a word (or ARPAbet phonemes such as S EH V AH N) first.")
            return
        self.add_words([text])
        self.word_edit.clear()

    def add_words(self, texts: list[str]) -> None:
        space = self.space
        if space is None:
            self.error("No words model loaded yet.")
            return
        self.run_job(lambda: text_items_job(space, texts), "text", self.words_state.items_loaded)

    @Slot()
    def remove_selected(self) -> None:
        self.words_state.remove_selected()

    # ------------------------------------------------------------------------------------------ recording

    @Slot()
    def toggle_recording(self) -> None:
        if self.recorder is not None:
            self._stop_recording()
            return
        if not self.audio.input_ok or self.space is None:
            self.bar.show_recording(False)
            self.error(self.audio.recording_unavailable())
            return
        recorder = self.make_recorder()
        try:
            recorder.start()
        except Exception as e:  # NoAudioDeviceError and PortAudio surprises: a message, not a crash
            self.bar.show_recording(False)
            self.error(f"Cannot record: {e}")
            return
        self.recorder, self._take = recorder, Take(recorder.sample_rate)
        self.bar.show_recording(True)
        self.status("Recording… say one word.")
        self._record_timer.start()

    @Slot()
    def _drain_recorder(self) -> None:
        recorder, take = self.recorder, self._take
        if recorder is None or take is None:
            return
        complete = take.add(recorder.drain())
        if recorder.error or complete:
            self._stop_recording()

    def _stop_recording(self) -> None:
        recorder, self.recorder = self.recorder, None
        self._record_timer.stop()
        self.bar.show_recording(False)
        if recorder is None or self._take is None:
            return
        recorder.stop()
        self._take.add(recorder.drain())
        if recorder.error:
            self.error(recorder.error)
            return
        audio, space = self._take.audio(), self.space
        if space is None:
            return
        label = self.words_state.next_recording_label()
        self.run_job(lambda: recording_item_job(space, audio, recorder.sample_rate, label), "recording",
                     lambda item: self.words_state.add_items([item]))

    # ------------------------------------------------------------------------------------------ playback

    def _play(self, audio: np.ndarray, start_s: float = 0.0) -> None:
        if not self.audio.output_ok:
            self.error(self.audio.playback_unavailable())
            return
        try:
            self.player.play(audio, SAMPLE_RATE, start_seconds=start_s)
        except Exception as e:  # no device after all: a message
            self.error(f"Cannot play: {e}")

    @Slot()
    def play_selected(self) -> None:
        item = self.words_state.selected()
        if item is not None and item.audio is not None:
            self._play(item.audio)

    # ------------------------------------------------------------------------------------ term search

    @Slot()
    def choose_recording(self) -> None:
        path = open_audio_file(self)
        if path is not None:
            self.open_recording(path)

    def open_recording(self, path: Path) -> None:
        resampler = self.space.resampler if self.space is not None else "soxr"  # the model's, as in training
        self.run_job(lambda: load_recording_job(path, resampler), "open-recording",
                     lambda audio: self.set_search_audio(audio, path.name))

    def set_search_audio(self, audio: np.ndarray, label: str = "recording") -> None:
        """The recording to search, 16 kHz mono."""
        self.words_state.set_search_audio(audio, label)

    @Slot()
    def run_search(self) -> None:
        state = self.words_state
        query = state.search_query(self.query_combo.currentText())
        space, audio = state.space, state.search_audio
        if query is None or space is None or audio is None:
            return
        self.search_button.setEnabled(False)

        def job() -> Job[TermSearchResult]:
            vector, duration, _ = yield from query_vector_job(space, query)
            return (yield from term_search_job(space, audio, SAMPLE_RATE, vector, query_duration_s=duration))

        runner = self.run_job(job, "search", state.search_done)
        runner.finished.connect(lambda: self.search_button.setEnabled(self.space is not None))

    # ------------------------------------------------------------------------------------------ shutdown

    def shutdown(self, timeout_ms: int = 5000) -> None:
        """Stop recording/playback and wait for this tab's jobs (tests, window close)."""
        if self.recorder is not None:
            self._record_timer.stop()
            self.recorder.stop()
            self.recorder = None
        self.player.stop()
        self.stop_jobs(timeout_ms)
