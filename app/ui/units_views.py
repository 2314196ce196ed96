"""The Units tab's views, drawn from a `UnitsState`: the scrolling live spectrogram with its unit strip, and the
review of the whole utterance (original with its units, resynthesis, codebook usage) side by side."""

from __future__ import annotations

import numpy as np
from PySide6.QtWidgets import QGridLayout, QVBoxLayout, QWidget

from app.ui.unit_plots import LIVE_LEVELS, SpectrogramPane, UnitStrip, UsageHistogram, robust_levels
from app.ui.units_state import LIVE_SECONDS, UnitsState

RESYNTH_TITLE = {True: ("resynthesis (units + loudness)", "units + loudness"),  # wordings, longest first
                 False: ("resynthesis (from units only)", "units only")}


class LivePane(QWidget):
    """The last LIVE_SECONDS of the utterance, scrolling while it records; `redraws` counts its redraws."""

    def __init__(self, state: UnitsState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.redraws = 0
        # empty, the view shows the window it fills while recording (0..LIVE_SECONDS, then it scrolls)
        self.live_view = SpectrogramPane((f"live (last {LIVE_SECONDS:g} s)",), empty_range=(0.0, LIVE_SECONDS))
        self.live_view.setMinimumHeight(100)
        self.live_strip = UnitStrip()
        self.live_strip.setXLink(self.live_view)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.live_view, 1)
        column.addWidget(self.live_strip)
        state.events.cleared.connect(self.clear)
        state.events.live.connect(self.redraw)

    def clear(self) -> None:
        self.live_view.clear_frames()
        self.live_strip.set_units([], 0.04)

    def redraw(self) -> None:
        s, window = self.state.session, self.state.live_window()
        self.live_view.set_frames(window.frames, s.hop_seconds, start=window.start, levels=LIVE_LEVELS,
                                  x_range=window.x_range)
        self.live_strip.set_units(window.units, s.unit_seconds, start=window.units_start)
        self.live_view.setXRange(*window.x_range, padding=0)
        self.redraws += 1


class ReviewPane(QWidget):
    """The whole utterance: original spectrogram + units, the resynthesis beside it, the codebook usage."""

    def __init__(self, state: UnitsState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self._levels: tuple[float, float] | None = None  # colour range of the original, reused for the resynthesis
        self.original_view = SpectrogramPane(("original (zoom in with the wheel to read unit ids)",
                                              "original (the wheel zooms)", "original"), zoomable=True)
        self.original_strip = UnitStrip()
        self.original_strip.setXLink(self.original_view)
        self.resynth_view = SpectrogramPane(RESYNTH_TITLE[True], zoomable=True)
        self.resynth_view.setXLink(self.original_view)
        self.histogram = UsageHistogram()
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.addWidget(self.original_view, 0, 0)
        grid.addWidget(self.original_strip, 1, 0)
        grid.addWidget(self.resynth_view, 0, 1)
        grid.addWidget(self.histogram, 0, 2, 2, 1)
        for column, stretch in enumerate((3, 3, 2)):
            grid.setColumnStretch(column, stretch)
        for w in (self.original_view, self.resynth_view, self.histogram):
            w.setMinimumHeight(100)
        state.events.cleared.connect(self.clear)
        state.events.review.connect(self.show_utterance)
        state.events.resynthesis.connect(self.show_resynthesis)

    def clear(self) -> None:
        self.original_view.clear_frames()
        self.original_strip.set_units([], 0.04)
        self.resynth_view.clear_frames()
        s = self.state.session
        self.histogram.set_counts(np.zeros(s.codebook_size if s else 0, np.int64))
        self.histogram.set_titles("codebook usage")

    def show_utterance(self) -> None:
        s = self.state.session
        self._levels = robust_levels(s.spectrogram)
        self.original_view.set_frames(s.spectrogram, s.hop_seconds, levels=self._levels)
        self.original_strip.set_units(s.units, s.unit_seconds)
        counts = s.codebook_histogram()
        self.histogram.set_counts(counts)
        used, n = int((counts > 0).sum()), s.codebook_size
        self.histogram.set_titles(f"codebook usage: {used} of {n} units", f"{used} of {n} units used", f"{used}/{n}")

    def show_resynthesis(self) -> None:
        result, s = self.state.resynthesis, self.state.session
        self.resynth_view.set_frames(result.spectrogram, s.hop_seconds if s else 0.01, levels=self._levels)
        wordings = RESYNTH_TITLE[result.loudness]
        self.resynth_view.set_titles(*(f"{t} · {result.speaker}" for t in wordings), wordings[-1])
