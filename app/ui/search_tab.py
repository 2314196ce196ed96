"""Search tab: describe a sound, hear the best matches from your library."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Slot
from PySide6.QtWidgets import QWidget

from app.ui.tab_base import ModelTab


class SearchTab(ModelTab):
    kind = "retrieval"
    title = "Search"
    purpose = "Type a description such as “a door creaks open” and hear the best matches from your sound library."

    def __init__(self, parent: QWidget | None = None) -> None:
        self.library: Path | None = None
        super().__init__(parent)

    def empty_message(self) -> str:
        if self.library is None:
            where = "No library folder open (File → Open Library…, or drop a folder on the window)."
        else:
            where = f"Library: {self.library}"
        return f"{super().empty_message()}\n\n{where}"

    @Slot(Path)
    def set_library(self, path: Path) -> None:
        self.library = path
        self.set_models(self.models)
