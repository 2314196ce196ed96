"""Units tab: speak, watch discovered speech units scroll by, hear speech rebuilt from units alone."""

from __future__ import annotations

from app.ui.tab_base import ModelTab


class UnitsTab(ModelTab):
    kind = "units"
    title = "Units"
    purpose = (
        "Record speech and watch discrete units, discovered without transcriptions, appear under the "
        "spectrogram; then hear it resynthesised from the units in your voice or another's."
    )
