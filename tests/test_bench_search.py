"""The names + sound latency benchmark's synthetic library: realistic names, a catalog the search really uses."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from bench.bench_search import build_synthetic_library, hybrid_queries, synthetic_names


def test_synthetic_names_are_unique_and_mixed() -> None:
    rows = list(synthetic_names(2000, np.random.default_rng(0)))
    paths = [p for p, _, _ in rows]
    assert len(set(paths)) == len(paths)
    names = [p.rpartition("/")[2] for p in paths]
    ucs = sum(bool(re.match(r"[A-Z]{2,}[a-z]\w*_[A-Z]", n)) for n in names)  # CatID_Subject Descriptor_take
    zoom = sum("/ZOOM" in p for p in paths)
    tagged = sum(bool(t) for _, t, _ in rows)
    user = sum(bool(u) for _, _, u in rows)
    assert 0.35 < ucs / 2000 < 0.55 and 0.05 < zoom / 2000 < 0.15
    assert 0.25 < tagged / 2000 < 0.35 and 0.02 < user / 2000 < 0.08


def test_queries_are_distinct_and_use_the_syntax() -> None:
    qs = hybrid_queries(50, np.random.default_rng(0))
    assert len(set(qs)) == 50
    assert any(q.startswith('"') and " -" in q for q in qs) and any("*" in q for q in qs)


def test_synthetic_catalog_is_searched_by_both_channels(tmp_path: Path) -> None:
    from app.services.search.embedder import default_text_encoder
    from app.services.search.session import SearchSession

    text = default_text_encoder()
    if text is None:
        pytest.skip("the MiniLM text encoder is not installed")
    from bench.bench_search import load_model

    embedder, _ = load_model()
    root = tmp_path / "lib"
    build_synthetic_library(root, 600, embedder, text, np.random.default_rng(0), chunk=250)
    session = SearchSession.open(root, embedder)
    try:
        assert session.library.stats().files == 600
        assert session.library.vectors.kind(embedder.model_id) and session.library.vectors.kind(text.model_id)
        hits = session.search("door creak", 10, mode="names")
        assert hits and all(h.match is not None and h.match.name_score > 0 for h in hits)
        words = [h for h in hits if h.match.matched_terms]
        assert words, "the keyword channel finds the names' words"
        assert len(session.search("heavy door", 10, mode="both")) == 10
        assert len(session.search("heavy door", 10, mode="sound")) == 10
    finally:
        session.close()
