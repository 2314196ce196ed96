"""Choosing audio files, worded the same in every tab: "Open audio file…" takes one file to look at or search (the
Units tab, the Words tab's search), "Add audio files…" adds files to a set (the Words tab's collection). The
dialogs offer the formats the one audio path reads (`core.audio.SUPPORTED_EXTENSIONS`)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QWidget

from core.audio import SUPPORTED_EXTENSIONS

OPEN_AUDIO_FILE = "Open audio file…"  # one file, to look at or search
ADD_AUDIO_FILES = "Add audio files…"  # several files, added to a set


def audio_filter() -> str:
    patterns = " ".join(f"*{e}" for e in sorted(SUPPORTED_EXTENSIONS))
    return f"Audio ({patterns});;All files (*)"


def open_audio_file(parent: QWidget) -> Path | None:
    """The file the user chose in an "Open Audio File" dialog (None: cancelled)."""
    path, _ = QFileDialog.getOpenFileName(parent, "Open Audio File", str(Path.home()), audio_filter())
    return Path(path) if path else None


def add_audio_files(parent: QWidget) -> list[Path]:
    """The files the user chose in an "Add Audio Files" dialog (none: cancelled)."""
    paths, _ = QFileDialog.getOpenFileNames(parent, "Add Audio Files", str(Path.home()), audio_filter())
    return [Path(p) for p in paths]
