"""The shipped aiSFX head -> UCS mapping (app/services/library/data/aisfx_categories.json) and the study's DP
(tools/aisfx_categories.py); fast: no corpus is embedded."""

from __future__ import annotations

import csv
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from core.aisfx_weights import find_checkpoint
from tools.aisfx_categories import UCS_JSON, align, association, load_vocabulary, ucs_labels

ROOT = Path(__file__).resolve().parents[1]
MAPPING = ROOT / "app" / "services" / "library" / "data" / "aisfx_categories.json"
UCS_CSV = ROOT / "app" / "services" / "library" / "data" / "ucs_categories.csv"
needs_weights = pytest.mark.skipif(find_checkpoint() is None,
                                   reason="needs the aiSFX weights (pip install --no-deps aisfx==0.1.2)")


def ucs_names() -> set[str]:
    with open(UCS_CSV, newline="", encoding="utf-8") as fh:
        return {r["Category"] for r in csv.DictReader(line for line in fh if not line.startswith("#"))}


def test_the_shipped_mapping_is_well_formed() -> None:
    doc = json.loads(MAPPING.read_text(encoding="utf-8"))
    names, dropped = ucs_names(), set(doc["dropped"])
    assert isinstance(doc["threshold"], float) and 0.0 < doc["threshold"] < 1.0 and doc["source"]
    assert dropped <= names and doc["heads"]
    for head, v in doc["heads"].items():
        kept = [c for c in v["classes"] if c is not None]
        assert kept, f"{head}: every class null"
        assert set(kept) <= names, f"{head}: not UCS categories: {set(kept) - names}"
        assert all(a < b for a, b in itertools.pairwise(kept)), f"{head}: categories not strictly alphabetical"
        assert not set(kept) & dropped, f"{head}: maps dropped categories {set(kept) & dropped}"
    for c, s in doc["heldout"].items():
        assert c in names and set(s) == {"precision", "recall", "n"}
        assert c in dropped or (s["precision"] is not None and s["precision"] >= 0.5)


@needs_weights
def test_the_shipped_mapping_fits_the_installed_heads() -> None:
    from core.aisfx_heads import category_reader, read_heads

    heads, doc = read_heads(), json.loads(MAPPING.read_text(encoding="utf-8"))
    for head, v in doc["heads"].items():
        assert len(v["classes"]) == heads[head].classes, head
    reader = category_reader(MAPPING)
    p = reader.probabilities(np.random.default_rng(0).standard_normal((4, 1024)).astype(np.float32))
    assert p.shape == (4, len(reader.categories)) and np.all(np.isfinite(p))


def brute_force(a: np.ndarray) -> float:
    return max(sum(a[k, c] for k, c in enumerate(cs)) for cs in itertools.combinations(range(a.shape[1]), len(a)))


def test_align_keeps_the_order_where_each_class_alone_would_not() -> None:
    # row by row the best categories are 1, 0, 3 (out of order); in order the best is 1, 2, 3 (5 + 0 + 1)
    a = np.array([[0, 5, 0, 0, 0], [6, 0, 0, 0, 0], [0, 0, 0, 1, 0]], dtype=float)
    assert align(a) == (6.0, [1, 2, 3])
    assert align(np.eye(3)) == (3.0, [0, 1, 2])


def test_align_finds_the_best_increasing_assignment() -> None:
    rng = np.random.default_rng(1)
    for n_cls, n_cat in [(1, 4), (3, 3), (3, 7), (4, 8), (5, 6)]:
        a = rng.standard_normal((n_cls, n_cat))
        score, path = align(a)
        assert all(x < y for x, y in itertools.pairwise(path)) and len(path) == n_cls
        assert score == pytest.approx(sum(a[k, c] for k, c in enumerate(path)))
        assert score == pytest.approx(brute_force(a))
    with pytest.raises(ValueError):
        align(np.zeros((3, 2)))


def test_association_is_a_correlation() -> None:
    p = np.array([[0.8, 0.2], [0.2, 0.8], [0.8, 0.2]])
    y = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    a = association(p, y)
    assert a[0, 0] == pytest.approx(1.0) and a[1, 1] == pytest.approx(1.0) and a[0, 2] == 0.0


@pytest.mark.skipif(not UCS_JSON.is_file(), reason="needs ../shared/data/ucs/en.json")
def test_words_find_their_ucs_category() -> None:
    vocab = load_vocabulary()
    assert "BIRDS" in ucs_labels("a bird sings", vocab)
    assert "DOORS" in ucs_labels("sounds/DoorOpen_02.wav", vocab)
    assert ucs_labels("the qzx of a zzvb", vocab) == {}  # no word UCS knows: unlabelled, not a guess
