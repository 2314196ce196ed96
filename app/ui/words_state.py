"""The Words tab's state without Qt: the loaded word space, the collection and its selected item, the recording
to search and the last search's result, and the word being recorded.

`WordsState` holds them; its methods are the tab's transitions and tell the listeners of `events`. The tab runs
the jobs (models, embeddings, search) and owns the microphone and the speakers; its panels draw the events.
No Qt, no torch: tests/test_words_state.py drives it directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from app.services.words.word_space import SAMPLE_RATE, WordSet
from app.ui.state_events import Event

if TYPE_CHECKING:
    from app.services.devices import DeviceStatus
    from app.services.words.word_space import LoadResult, TermSearchResult, WordItem, WordSpace

SPEECH_LEVEL = 0.02  # peak amplitude that counts as speech while recording
SPEECH_SECONDS = 2.0  # recording stops this long after speech starts
MAX_RECORD_SECONDS = 6.0  # ... or after this long in any case
NEAREST_K = 8


class WordsEvents:
    """What changed in a `WordsState`; listeners run after the change."""

    def __init__(self) -> None:
        self.ready = Event()  # a model is loaded (or not): the controls that need one
        self.devices = Event()  # the audio devices changed
        self.items = Event()  # the collection changed: list, matrix, map, nearest, the query picker
        self.selection = Event()  # another item is selected: its nearest neighbours
        self.recording = Event()  # another recording to search (its result is gone)
        self.result = Event()  # a search's result arrived
        self.message = Event()  # (text: str, error: bool) the status line


class Take:
    """One spoken word being recorded: complete ~2 s after speech starts, or after 6 s in any case."""

    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        self.blocks: list[np.ndarray] = []
        self.samples = 0
        self.speech_at: float | None = None  # seconds into the recording when speech started

    def add(self, block: np.ndarray) -> bool:
        """Add a block (N,); True when the word is complete."""
        block = block.reshape(-1)
        before = self.samples
        if len(block):
            self.blocks.append(block)
            self.samples += len(block)
        loud = np.flatnonzero(np.abs(block) >= SPEECH_LEVEL)
        if self.speech_at is None and len(loud):
            self.speech_at = (before + int(loud[0])) / self.sample_rate
        seconds = self.samples / self.sample_rate
        spoken = self.speech_at is not None and seconds - self.speech_at >= SPEECH_SECONDS
        return spoken or seconds >= MAX_RECORD_SECONDS

    def audio(self) -> np.ndarray:
        return np.concatenate(self.blocks) if self.blocks else np.zeros(0, np.float32)


class WordsState:
    def __init__(self) -> None:
        self.events = WordsEvents()
        self.space: WordSpace | None = None
        self.ready = False  # the space is loaded and no other is loading: adding and searching work
        self.loaded_device = ""  # the device preference the space was loaded for
        self.words = WordSet()
        self.row = -1  # the selected item
        self.audio: DeviceStatus | None = None
        self.search_audio: np.ndarray | None = None  # the recording to search, 16 kHz mono
        self.search_label = ""
        self.search_result: TermSearchResult | None = None
        self.recordings = 0  # words recorded so far: their labels count them

    # ------------------------------------------------------------------------------------------ messages

    def say(self, text: str) -> None:
        self.events.message.emit(text, False)

    def error(self, text: str) -> None:
        self.events.message.emit(text, True)

    # ------------------------------------------------------------------------------------------ models

    def loading(self, device: str) -> None:
        """A model is being loaded for `device`: nothing that needs one works until it is in."""
        self.loaded_device = device
        self._set_ready(False)

    def needs_loading(self, name: str, device: str) -> bool:
        """Whether model `name` on `device` is not the one loaded (a new model or another device preference)."""
        return self.space is None or self.space.name != name or self.loaded_device != device

    def space_loaded(self, space: WordSpace) -> list[WordItem]:
        """The model is in; returns the items to embed again with it (the collection of the last model)."""
        self.space = space
        self._set_ready(True)
        self.say(f"Model {space.name} ready ({space.dim}-d space).")
        return list(self.words.items)

    def no_model(self) -> None:
        self.space = None
        self._set_ready(False)

    def _set_ready(self, ready: bool) -> None:
        self.ready = ready
        self.events.ready.emit()

    def can_record(self) -> bool:
        return self.ready and self.audio is not None and self.audio.input_ok

    def set_audio_status(self, status: DeviceStatus) -> None:
        self.audio = status
        self.events.devices.emit()

    # ------------------------------------------------------------------------------------------ the collection

    def reembedded(self, items: list[WordItem]) -> None:
        self.words = WordSet(items)
        self._changed()

    def add_items(self, items: list[WordItem]) -> None:
        """New items, the last of them selected."""
        if not items:
            return
        self.words.add(items)
        self._changed(select=len(self.words) - 1)

    def items_loaded(self, result: LoadResult) -> None:
        """Items from files or typed words: added, and the first problem said (with how many more)."""
        self.add_items(result.items)
        if result.errors:
            more = f" (and {len(result.errors) - 1} more)" if len(result.errors) > 1 else ""
            self.error(result.errors[0] + more)
        elif result.items:
            self.say(f"Added {', '.join(it.label for it in result.items)}.")

    def remove_selected(self) -> None:
        row = self.row
        if 0 <= row < len(self.words):
            removed = self.words.remove(row)
            self._changed(select=min(row, len(self.words) - 1))
            self.say(f"Removed {removed.label}.")

    def clear(self) -> None:
        self.words.clear()
        self._changed()

    def _changed(self, select: int | None = None) -> None:
        row = self.row if select is None else select
        self.row = max(0, min(row, len(self.words) - 1)) if len(self.words) else -1
        self.events.items.emit()

    def select(self, row: int) -> None:
        self.row = row if 0 <= row < len(self.words) else -1
        self.events.selection.emit()

    def selected(self) -> WordItem | None:
        return self.words.items[self.row] if 0 <= self.row < len(self.words) else None

    def nearest_lines(self) -> list[str]:
        """The selected item's nearest neighbours: cosine, ♪ spoken or ✎ written, label; best first."""
        if self.selected() is None:
            return []
        lines = []
        for j, score in self.words.nearest(self.row, k=NEAREST_K):
            other = self.words.items[j]
            lines.append(f"{score:+.3f}  {'♪' if other.kind == 'spoken' else '✎'} {other.label}")
        return lines

    def next_recording_label(self) -> str:
        self.recordings += 1
        return f"recording {self.recordings}"

    # ------------------------------------------------------------------------------------------ term search

    def set_search_audio(self, audio: np.ndarray, label: str = "recording") -> None:
        """The recording to search, 16 kHz mono."""
        self.search_audio = np.asarray(audio, dtype=np.float32)
        self.search_label = f"{label} · {len(audio) / SAMPLE_RATE:.1f} s"
        self.search_result = None
        self.events.recording.emit()

    def search_query(self, text: str) -> WordItem | str | None:
        """What to search for: the selected item when it is the text, else an item of that label, else the text
        itself (a written word). None when there is nothing to search yet (and the state says why)."""
        text = text.strip()
        if self.space is None:
            self.error("No words model loaded yet.")
        elif self.search_audio is None:
            self.error("Open an audio file to search first.")
        elif not text:
            self.error("Pick an item or type a word to search for.")
        else:
            labels = [it.label for it in self.words.items]
            selected = self.selected()
            if selected is not None and selected.label == text:
                return selected
            return self.words.items[labels.index(text)] if text in labels else text
        return None

    def search_done(self, result: TermSearchResult) -> None:
        self.search_result = result
        if result.hits:
            best = result.hits[0]
            self.say(f"Best match at {best.start_s:.2f}–{best.end_s:.2f} s (cosine {best.score:.3f}).")
        self.events.result.emit()
