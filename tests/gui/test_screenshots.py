"""The README screenshots: the real window with the default models, each tab at work, grabbed offscreen."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtGui import QImage

from app.ui.main_window import demo_library
from tools import screenshots


def snapshot(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*")}


@pytest.mark.slow
def test_grab_tabs_writes_four_pictures_of_tabs_at_work(qapp, tmp_path: Path, capfd, fsdd: Path) -> None:
    assert screenshots.FSDD == fsdd  # the screenshots read the same copy the fixture found
    demo_before = snapshot(demo_library())
    paths = screenshots.grab_tabs(tmp_path / "shots", size=(1100, 700), step_seconds=60)
    assert [p.name for p in paths] == ["tab-search.png", "tab-units.png", "tab-words.png", "tab-train.png"]
    for p in paths:
        image = QImage(str(p))
        assert image.width() >= 1000 and image.height() >= 600, p
        assert p.stat().st_size > 20_000, p  # a real picture, not a blank window
    # every step got what it waited for (indexing, results, preview, units, resynthesis, validation)
    assert "warning" not in capfd.readouterr().err
    assert snapshot(demo_library()) == demo_before  # the index went into a copy, not into resources/


@pytest.mark.slow
def test_grab_train_basic_at_both_sizes(qapp, tmp_path: Path, capfd, fsdd: Path) -> None:
    paths = screenshots.grab_train_basic(tmp_path / "shots", step_seconds=60, fsdd=fsdd)
    assert [p.name for p in paths] == ["train-basic-1024.png", "train-basic-1600.png"]
    for p, (width, height) in zip(paths, screenshots.TRAIN_SIZES, strict=True):
        image = QImage(str(p))
        assert (image.width(), image.height()) == (width, height), p
        assert p.stat().st_size > 20_000, p
    assert "warning" not in capfd.readouterr().err  # the words settings came and the FSDD folder was checked


@pytest.mark.slow
def test_grab_units_live_while_recording(qapp, tmp_path: Path, capfd, fsdd: Path) -> None:
    """The Units tab mid-recording: the meter reading speech and the voice fitted to it (no warning = both)."""
    paths = screenshots.grab_units_live(tmp_path / "shots", record_seconds=2.0, step_seconds=60, fsdd=fsdd)
    assert [p.name for p in paths] == ["tab-units.png"]
    image = QImage(str(paths[0]))
    assert (image.width(), image.height()) == (1024, 700) and paths[0].stat().st_size > 20_000
    assert "warning" not in capfd.readouterr().err
