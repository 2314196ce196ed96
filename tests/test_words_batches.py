"""The words trainer's batches: none of a single word. Such a batch has no negatives, so the loss is exactly 0
there (the quick test's loss curve dropped to 0 at steps 1, 5 and 9 of a 3-word folder) and its step learns
nothing."""

from __future__ import annotations

import numpy as np
import pytest

from training.words_train import make_batches


@pytest.mark.parametrize(("n_words", "tokens", "batch_size", "seed"), [
    (3, 100, 32, 0), (3, 100, 32, 1), (10, 500, 32, 2), (10, 1403, 32, 3), (50, 400, 64, 4), (4, 30, 8, 5),
])  # fmt: skip
def test_no_batch_holds_a_single_word(n_words: int, tokens: int, batch_size: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    word_ids = rng.integers(0, n_words, tokens)
    word_ids[:n_words] = np.arange(n_words)  # every word at least once
    lengths = (rng.uniform(30, 120, n_words)[word_ids] * rng.uniform(0.9, 1.1, tokens)).astype(int)  # a length per word
    for epoch in range(4):
        batches = make_batches(lengths, word_ids, batch_size, 4, np.random.default_rng([seed, epoch]))
        assert sorted(np.concatenate(batches).tolist()) == list(range(tokens))  # every token once
        assert all(len(b) <= batch_size for b in batches)
        lone = [b for b in batches if len(np.unique(word_ids[b])) < 2]
        assert not lone, f"epoch {epoch}: {len(lone)} of {len(batches)} batches hold one word"


def test_batches_without_a_lone_word_are_as_before() -> None:
    """Mixing touches only the batches that need it: the same draws give the same batches otherwise (a run
    resumed across this change takes the same steps)."""
    word_ids = np.tile(np.arange(16), 4)  # 16 words of 4 tokens, every batch of 32 holds 8 words
    lengths = np.arange(64) % 7 + 20
    got = make_batches(lengths, word_ids, 32, 4, np.random.default_rng(0))
    rng = np.random.default_rng(0)
    groups = [rng.permutation(np.flatnonzero(word_ids == w)) for w in range(16)]
    keys = np.array([lengths[g].mean() for g in groups]) * rng.uniform(0.8, 1.2, 16)
    order = np.argsort(keys, kind="stable")
    packed = [np.concatenate([groups[g] for g in order[:8]]), np.concatenate([groups[g] for g in order[8:]])]
    expected = [packed[i] for i in rng.permutation(2)]
    assert [b.tolist() for b in got] == [b.tolist() for b in expected]
