"""Train tab: pick a model, a data folder and settings; train in the background and watch the curves."""

from __future__ import annotations

from PySide6.QtWidgets import QWidget

from app.ui.widgets import EmptyState


class TrainTab(EmptyState):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(
            "Train",
            "Pick a model kind (retrieval, units or words), a data folder and settings, then train in the "
            "background while the loss and metric curves update live.\n\n"
            "Training from this panel is not available yet in this version of Earshot.",
            parent=parent,
        )
