"""Units (and words, when they are known) as a Praat TextGrid, written by praatio in Praat's long text format,
atomically (core.files.atomic_path): the Units tab's export beside the `START:ID` text format.

Tier "units": one interval per run of equal consecutive units, labelled with the unit id. Praat users read an
interval tier as segments, as they read a phone tier: a unit held for five frames is one 200-ms segment. One
interval per 40-ms unit would repeat the label across a run and put boundaries where nothing changes. The
boundaries are the text export's own start times (the intervals are built from its parsed tokens), where the
unit id changes, plus the end of the last unit. Tier "words" (only when words are given): one interval per word.
Gaps are written as empty intervals, as Praat expects a tier to cover the whole file.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from praatio import textgrid
from praatio.utilities.constants import Interval

from core.files import atomic_path

UNITS_TIER = "units"
WORDS_TIER = "words"
Word = tuple[float, float, str]  # (start s, end s, label)


def unit_intervals(tokens: Sequence[tuple[float, int]], unit_seconds: float) -> list[Interval]:
    """Text-export tokens [(start, unit id), ...] -> one interval per run of equal ids; the last unit ends
    `unit_seconds` after its start (rounded to the text format's millisecond)."""
    intervals: list[Interval] = []
    for i, (start, unit) in enumerate(tokens):
        if i and unit == tokens[i - 1][1]:
            continue  # inside a run
        if intervals:
            intervals[-1] = Interval(intervals[-1].start, start, intervals[-1].label)
        intervals.append(Interval(start, round(start + unit_seconds, 3), str(unit)))
    if intervals:  # the last run lasts until its last unit ends
        intervals[-1] = Interval(intervals[-1].start, round(tokens[-1][0] + unit_seconds, 3), intervals[-1].label)
    return intervals


def write_units_textgrid(path: str | os.PathLike[str], tokens: Sequence[tuple[float, int]], unit_seconds: float,
                         duration: float, words: Sequence[Word] = ()) -> Path:
    """Write the "units" tier (and a "words" tier when `words` are given) spanning 0..duration (or the last
    unit's end, if later) to `path`, atomically."""
    units = unit_intervals(tokens, unit_seconds)
    end = max(duration, units[-1].end if units else 0.0, unit_seconds)  # Praat needs xmax > xmin
    grid = textgrid.Textgrid(minTimestamp=0.0, maxTimestamp=end)
    grid.addTier(textgrid.IntervalTier(UNITS_TIER, units, 0.0, end))
    if words:
        grid.addTier(textgrid.IntervalTier(WORDS_TIER, [Interval(s, min(e, end), w) for s, e, w in words], 0.0, end))
    path = Path(path)
    with atomic_path(path) as tmp:
        grid.save(str(tmp), format="long_textgrid", includeBlankSpaces=True, reportingMode="error")
    return path
