"""The Units tab's views, drawn from a `UnitsState`: the scrolling live spectrogram with its unit strip, and the
review of the whole utterance: the original with its units above the resynthesis (one time axis, one frequency
scale, one colour range), the codebook usage and a paragraph on what the user is looking at beside them."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGridLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

from app.ui.unit_plots import LIVE_LEVELS, SpectrogramPane, UnitStrip, UsageHistogram, robust_levels
from app.ui.units_state import LIVE_SECONDS, UnitsState

RESYNTH_TITLE = {True: ("resynthesis (units + loudness)", "units + loudness"),  # wordings, longest first
                 False: ("resynthesis (from units only)", "units only")}


def what_you_see(n_units: int | None, unit_ms: float) -> str:
    """The review's paragraph, in plain words: what a unit is, how often, what to look for (issue 41)."""
    which = f"one of the model's {n_units} speech sounds" if n_units else "one of the model's speech sounds"
    return (f"Each coloured cell is a unit: {which}, learnt from speech without transcripts, one every "
            f"{unit_ms:.0f} ms (zoom in to read the numbers). Top: what was said. Bottom: speech rebuilt from "
            "the units and the loudness, on the same time and frequency axes. Look for the same sound getting the "
            "same unit each time, and for the bright bands (formants) moving alike in both: the words are kept, "
            "the voice's detail is not.")


class LivePane(QWidget):
    """The last LIVE_SECONDS of the utterance, scrolling while it records; `redraws` counts its redraws."""

    def __init__(self, state: UnitsState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.redraws = 0
        # empty, the view shows the window it fills while recording (0..LIVE_SECONDS, then it scrolls)
        self.live_view = SpectrogramPane((f"live (last {LIVE_SECONDS:g} s)",), empty_range=(0.0, LIVE_SECONDS))
        self.live_view.setMinimumHeight(100)
        self.live_view.sparse_frequency_ticks()
        self.live_view.setLabel("bottom", "")  # the seconds need no label; the height goes to the spectrogram
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
    """The whole utterance: original spectrogram + units above the resynthesis; the codebook usage and what to
    look for beside them."""

    def __init__(self, state: UnitsState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self._levels: tuple[float, float] | None = None  # colour range of the original, reused for the resynthesis
        self.original_view = SpectrogramPane(("original (zoom in with the wheel to read unit ids)",
                                              "original (the wheel zooms)", "original"), zoomable=True)
        self.original_view.setLabel("bottom", "")  # the resynthesis below shares its time axis and says "time (s)"
        self.original_strip = UnitStrip()
        self.original_strip.setXLink(self.original_view)
        self.resynth_view = SpectrogramPane(RESYNTH_TITLE[True], zoomable=True)
        self.resynth_view.setXLink(self.original_view)
        self.histogram = UsageHistogram()
        self.about_label = QLabel(what_you_see(None, 40))
        self.about_label.setWordWrap(True)
        self.about_label.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.about_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # wraps to its column
        self._lay_out()
        state.events.cleared.connect(self.clear)
        state.events.model.connect(self._say_what_you_see)
        state.events.review.connect(self.show_utterance)
        state.events.resynthesis.connect(self.show_resynthesis)

    def _lay_out(self) -> None:
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setVerticalSpacing(2)
        grid.addWidget(self.original_view, 0, 0)
        grid.addWidget(self.original_strip, 1, 0)
        grid.addWidget(self.resynth_view, 2, 0)
        grid.addWidget(self.histogram, 0, 1, 2, 1)
        grid.addWidget(self.about_label, 2, 1)
        grid.setColumnStretch(0, 5)
        grid.setColumnStretch(1, 2)
        grid.setRowStretch(0, 1)
        grid.setRowStretch(2, 1)
        for w in (self.original_view, self.resynth_view, self.histogram):
            w.setMinimumHeight(90)

    def _say_what_you_see(self) -> None:
        s = self.state.session
        self.about_label.setText(what_you_see(s.codebook_size if s else None, 1000 * s.unit_seconds if s else 40))

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
