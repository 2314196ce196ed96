"""The Search tab's "Export selection…" dialog: where the selected part goes (a folder outside the library by
default, the last one chosen remembered by the preview), its file name (the source's and the part's times as the
preview shows them), its format (WAV or FLAC in 16 or 24 bits, or the source's own where it is lossless) and
optional fades. It only asks: the preview writes the file in a worker (app/services/search/excerpt.py's
`export_part`). A name already taken is replaced only once the user says so.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QStandardPaths
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.services.search.excerpt import NAME_BYTES, SUFFIX_BYTES, ExportFormat, Fades, fitted_name
from app.ui.durations import part_file_label
from core.display import display_name

FADE_MAX_MS = 10_000  # a fade is a short ramp against clicks, not a mix move
FADE_LABELS = {"linear": "Linear", "equal-power": "Equal power"}
PROBLEM_STYLE = "color: #c0392b"
STANDARD_LOCATIONS = (QStandardPaths.StandardLocation.MusicLocation,
                      QStandardPaths.StandardLocation.DocumentsLocation,
                      QStandardPaths.StandardLocation.DesktopLocation,
                      QStandardPaths.StandardLocation.HomeLocation)


@dataclass(frozen=True)
class ExportChoice:
    """What the user chose: the file, its format, the fades, and whether a file of that name may be replaced."""

    target: Path
    form: ExportFormat
    fades: Fades
    replace: bool


def part_file_stem(source: Path, a: float, b: float) -> str:
    """'mixed (1.0-3.0 s)': the source's name and the part's times as the preview shows them (`part_text`), cut
    to leave room for a suffix within a name's bytes."""
    return fitted_name(display_name(source.stem), f" ({part_file_label(a, b)})", reserve=SUFFIX_BYTES)


def inside(folder: Path, roots: Iterable[Path | None]) -> bool:
    """`folder` is one of `roots` or lies under one (links followed)."""
    f = Path(os.path.realpath(folder))
    for root in roots:
        r = Path(os.path.realpath(root)) if root is not None else None
        if r is not None and (f == r or r in f.parents):
            return True
    return False


def standard_folders() -> list[Path]:
    """The user's Music, Documents, Desktop and home folders (QStandardPaths), those the platform names."""
    return [Path(p) for p in (QStandardPaths.writableLocation(loc) for loc in STANDARD_LOCATIONS) if p]


def default_export_folder(libraries: Iterable[Path | None], remembered: str) -> Path:
    """Where the dialog opens: the folder chosen last time, else the user's Music (Documents, Desktop, home)
    folder, the first of them that exists and is not inside a library (a part saved there would be indexed as
    a sound of its own); the folder above the first library where all of them are."""
    roots = [r for r in libraries if r is not None]
    candidates = ([Path(remembered)] if remembered else []) + standard_folders()
    for folder in candidates:
        if folder.is_dir() and not inside(folder, roots):
            return folder
    above = [r.parent for r in roots if r.parent.is_dir() and writable(r.parent) and not inside(r.parent, roots)]
    return above[0] if above else Path.home()


def writable(folder: Path) -> bool:
    return os.access(folder, os.W_OK | os.X_OK)


def folder_problem(text: str) -> str:
    """Why a part cannot be saved into the folder typed ('' when it can)."""
    if not text.strip():
        return "Choose a folder to save the part in."
    folder = Path(text.strip()).expanduser()
    if not folder.is_absolute():
        return f"Give the folder's whole path (from {os.sep}), not “{text.strip()}”."
    if not folder.exists():
        return f"The folder {display_name(folder)} does not exist."
    if not folder.is_dir():
        return f"{display_name(folder)} is a file, not a folder."
    if not writable(folder):
        return f"Earshot may not write into {display_name(folder)} (read-only, or not yours): choose another folder."
    return ""


def name_problem(stem: str, suffix: str) -> str:
    """Why `stem + suffix` cannot be a file's name ('' when it can)."""
    if not stem.strip():
        return "Give the file a name."
    if any(c in stem for c in "/\\\0") or stem.strip() in (".", ".."):
        return "A file name cannot hold / or \\ (choose the folder above)."
    if len(os.fsencode(stem.strip() + suffix)) > NAME_BYTES:
        return f"That name is too long for a file ({NAME_BYTES} bytes at most)."
    return ""


class ExportDialog(QDialog):
    """Folder, file name, format and fades of a part to export; Save checks them (and asks before replacing a
    file) before it closes. `ask_folder` and `confirm_replace` are seams for tests."""

    def __init__(self, about: str, stem: str, formats: list[ExportFormat], default: int, folder: Path,
                 part_seconds: float, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Export selection")
        self.formats = formats
        self._replace = False
        self.ask_folder: Callable[[str], str] = lambda start: QFileDialog.getExistingDirectory(
            self, "Export the selection to", start)
        self.confirm_replace: Callable[[Path], bool] = self._confirm_replace
        col = QVBoxLayout(self)
        self.about_label = QLabel(about)
        self.about_label.setWordWrap(True)
        col.addWidget(self.about_label)
        form = QFormLayout()
        form.addRow("Folder", self._folder_row(folder))
        form.addRow("File name", self._name_row(stem))
        self.format_box = QComboBox()
        for f in formats:
            self.format_box.addItem(f.label)
        self.format_box.setCurrentIndex(default)
        self.format_box.setToolTip("The part's samples are the file's own, at its own rate and with its channels; "
                                   "16-bit keeps the top 16 bits of a deeper source")
        self.format_box.currentIndexChanged.connect(self._format_changed)
        form.addRow("Format", self.format_box)
        top = max(0, min(FADE_MAX_MS, int(part_seconds * 1000)))
        self.fade_in_box, self.fade_out_box = self._fade_box(top, "in"), self._fade_box(top, "out")
        fades = QHBoxLayout()
        fades.addWidget(QLabel("in"))
        fades.addWidget(self.fade_in_box)
        fades.addWidget(QLabel("out"))
        fades.addWidget(self.fade_out_box)
        self.shape_box = QComboBox()
        for key, label in FADE_LABELS.items():
            self.shape_box.addItem(label, key)
        self.shape_box.setToolTip("Linear: the level rises in a straight line; equal power: as a sine, which "
                                  "sounds even when two faded parts overlap")
        fades.addWidget(self.shape_box)
        fades.addStretch(1)
        form.addRow("Fades", fades)
        col.addLayout(form)
        self.problem_label = QLabel("")
        self.problem_label.setWordWrap(True)
        self.problem_label.setStyleSheet(PROBLEM_STYLE)
        self.problem_label.setVisible(False)
        col.addWidget(self.problem_label)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        self.save_button = buttons.button(QDialogButtonBox.StandardButton.Save)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        col.addWidget(buttons)
        self._format_changed(default)
        self.setMinimumWidth(480)

    def _folder_row(self, folder: Path) -> QHBoxLayout:
        self.folder_edit = QLineEdit(str(folder))
        self.folder_edit.setToolTip("The folder the part is saved in (outside the library by default: a part saved "
                                    "inside it is indexed as a sound of its own)")
        self.folder_edit.textChanged.connect(self._clear_problem)
        self.browse_button = QPushButton("Choose…")
        self.browse_button.clicked.connect(self._browse)
        row = QHBoxLayout()
        row.addWidget(self.folder_edit, 1)
        row.addWidget(self.browse_button)
        return row

    def _name_row(self, stem: str) -> QHBoxLayout:
        self.name_edit = QLineEdit(stem)
        self.name_edit.setToolTip("The new file's name: the sound's and where the part lies in it, as the preview "
                                  "shows it")
        self.name_edit.textChanged.connect(self._clear_problem)
        self.suffix_label = QLabel()
        row = QHBoxLayout()
        row.addWidget(self.name_edit, 1)
        row.addWidget(self.suffix_label)
        return row

    def _fade_box(self, top: int, which: str) -> QSpinBox:
        box = QSpinBox()
        box.setRange(0, top)
        box.setSingleStep(5)
        box.setSuffix(" ms")
        box.setAccessibleName(f"Fade {which}")
        box.setToolTip(f"Fade {which} over this many milliseconds of the part (0: none); only the saved file is "
                       "faded")
        return box

    @property
    def form(self) -> ExportFormat:
        return self.formats[self.format_box.currentIndex()]

    def stem(self) -> str:
        """The name typed, less the format's suffix if it was typed too."""
        stem, suffix = self.name_edit.text().strip(), self.form.suffix
        return stem[:-len(suffix)] if stem.lower().endswith(suffix) and len(stem) > len(suffix) else stem

    def target(self) -> Path:
        return Path(self.folder_edit.text().strip()).expanduser() / (self.stem() + self.form.suffix)

    def problem(self) -> str:
        """Why the part cannot be saved as chosen ('' when it can)."""
        problem = folder_problem(self.folder_edit.text()) or name_problem(self.stem(), self.form.suffix)
        if not problem and self.target().is_dir():
            problem = f"{display_name(self.target())} is a folder: give the file another name."
        return problem

    def choice(self) -> ExportChoice:
        fades = Fades(self.fade_in_box.value() / 1000, self.fade_out_box.value() / 1000,
                      str(self.shape_box.currentData()))
        return ExportChoice(self.target(), self.form, fades, self._replace)

    def accept(self) -> None:
        """Save: only a target that can be written, and a file already there only once the user agreed."""
        problem = self.problem()
        self.problem_label.setText(problem)
        self.problem_label.setVisible(bool(problem))
        if problem:
            return
        target = self.target()
        self._replace = os.path.lexists(target)
        if self._replace and not self.confirm_replace(target):
            return
        super().accept()

    def _confirm_replace(self, target: Path) -> bool:
        answer = QMessageBox.question(
            self, "Replace the file?", f"{display_name(target.name)} already exists in "
            f"{display_name(target.parent)}. Replace it with the part?",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.No)
        return answer == QMessageBox.StandardButton.Yes

    def _browse(self) -> None:
        folder = self.ask_folder(self.folder_edit.text())
        if folder:
            self.folder_edit.setText(folder)

    def _format_changed(self, _index: int) -> None:
        self.suffix_label.setText(self.form.suffix)
        self._clear_problem()

    def _clear_problem(self) -> None:
        self.problem_label.setVisible(False)
