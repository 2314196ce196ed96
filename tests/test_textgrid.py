"""Praat TextGrid export of units (app/services/units/textgrid.py), read back with praatio."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from praatio import textgrid

from app.services.units.textgrid import unit_intervals, write_units_textgrid
from app.services.units.units_session import UnitsSession, parse_units_text
from tests.test_units_service import fsdd_speech, stream, tiny_units_model


def read_tiers(path: Path) -> dict[str, list[tuple[float, float, str]]]:
    grid = textgrid.openTextgrid(str(path), includeEmptyIntervals=False, reportingMode="error")
    return {name: [tuple(e) for e in grid.getTier(name).entries] for name in grid.tierNames}


def test_one_interval_per_run_of_equal_units() -> None:
    tokens = [(0.0, 5), (0.04, 5), (0.08, 3), (0.12, 3), (0.16, 3), (0.2, 7)]
    assert [tuple(i) for i in unit_intervals(tokens, 0.04)] == [(0.0, 0.08, "5"), (0.08, 0.2, "3"),
                                                                (0.2, 0.24, "7")]
    assert unit_intervals([], 0.04) == []


def test_the_textgrid_has_the_text_exports_boundaries_and_a_words_tier_only_when_words_are_known(
        fsdd: Path, tmp_path: Path) -> None:
    session = UnitsSession(tiny_units_model(3))
    stream(session, fsdd_speech(fsdd, 2), np.random.default_rng(1))
    tokens = parse_units_text(session.export_units_text(tmp_path / "u.txt").read_text())
    changes = [t for i, (t, u) in enumerate(tokens) if i == 0 or u != tokens[i - 1][1]]  # where the id changes
    assert 5 <= len(changes) < len(tokens)  # several runs, some longer than one unit

    tiers = read_tiers(session.export_textgrid(tmp_path / "u.TextGrid"))
    assert list(tiers) == ["units"]  # no words known: no words tier
    units = tiers["units"]
    assert [s for s, _, _ in units] == changes  # the text export's start times, exactly
    assert [e for _, e, _ in units] == changes[1:] + [round(tokens[-1][0] + 0.04, 3)]
    labels = [str(u) for i, (_, u) in enumerate(tokens) if i == 0 or u != tokens[i - 1][1]]
    assert [label for _, _, label in units] == labels
    grid = textgrid.openTextgrid(str(tmp_path / "u.TextGrid"), includeEmptyIntervals=True)
    assert grid.minTimestamp == 0.0 and grid.maxTimestamp == pytest.approx(max(session.duration, units[-1][1]))

    session.words = [(0.05, 0.4, "zero"), (0.55, 0.9, "zero")]
    tiers = read_tiers(session.export_textgrid(tmp_path / "w.TextGrid"))
    assert list(tiers) == ["units", "words"] and tiers["words"] == session.words
    assert tiers["units"] == units


def test_a_failed_write_leaves_the_previous_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "u.TextGrid"
    write_units_textgrid(target, [(0.0, 1)], 0.04, 0.04)
    before = target.read_bytes()

    def half_then_fail(self: textgrid.Textgrid, fn: str, **_: object) -> None:
        Path(fn).write_text("File type = \"ooTextFile\"\n")
        raise OSError("disk full")

    monkeypatch.setattr(textgrid.Textgrid, "save", half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        write_units_textgrid(target, [(0.0, 2)], 0.04, 0.04)
    assert target.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["u.TextGrid"]
