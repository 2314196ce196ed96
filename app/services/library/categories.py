"""The sound categories as the library stores and shows them (issue 39).

The index stores each file's likeliest UCS categories beside its vector (`vectors.categories`, from the aiSFX
heads: core/aisfx_heads.py), read through the whole alignment of the heads' classes, so that search can read an
unnamed file's sound as words. Only some of those categories are *shown* (the Category column, "By category",
`--category`, `--json`'s "category"): those whose held-out precision passed the study's bar (the mapping's
"heads" list; docs/categories.md), at CATEGORY_SHOWN confidence or more.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path

CATEGORIES_KEPT = 3  # a file's likeliest sound categories stored
CATEGORY_SHOWN = 0.5  # a shown category at this confidence or more (the study's threshold)
MAPPING = Path(__file__).resolve().parent / "data" / "aisfx_categories.json"


def mapping_path() -> Path:
    """The heads' class -> category mapping: the shipped one unless $EARSHOT_CATEGORY_MAPPING names another."""
    return Path(os.environ.get("EARSHOT_CATEGORY_MAPPING") or MAPPING)


def showable() -> frozenset[str]:
    """The categories precise enough to show (empty when the mapping cannot be read)."""
    return _showable(mapping_path())


@functools.cache
def _showable(path: Path) -> frozenset[str]:
    from core.aisfx_heads import HeadsError, shown_categories

    try:
        return shown_categories(path)
    except HeadsError:
        return frozenset()


def shown(categories: Sequence[tuple[str, float]], threshold: float = CATEGORY_SHOWN) -> list[tuple[str, float]]:
    """The stored categories (best first) that are shown: showable and confident enough."""
    keep = showable()
    return [(c, p) for c, p in categories if p >= threshold and c in keep]


def shown_category(categories: Sequence[tuple[str, float]]) -> str | None:
    """What a sound is shown as: its top stored category, when that one is shown."""
    top = shown(categories[:1])
    return top[0][0] if top else None
