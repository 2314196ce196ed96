"""Words tab: spoken and written words in one embedding space."""

from __future__ import annotations

from app.ui.tab_base import ModelTab


class WordsTab(ModelTab):
    kind = "words"
    title = "Words"
    purpose = (
        "Record or load spoken words, type written words, and compare them in one space: a similarity "
        "matrix, a 2-D map, and search of recordings by a typed or spoken word."
    )
