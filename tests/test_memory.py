"""core/memory.py: glibc's arenas capped and freed memory handed back (a no-op where there is no glibc)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from core import memory


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))


@pytest.mark.skipif(not sys.platform.startswith("linux") or memory._libc() is None, reason="glibc only")
def test_trim_hands_freed_heap_memory_back() -> None:
    blocks = [np.ones(16_000, np.float64) for _ in range(4000)]  # 500 MB in 128-kB blocks: on the heap
    del blocks[::2]  # freed, but fragmented: glibc keeps it
    before = rss_mb()
    assert memory.trim()
    assert rss_mb() < before - 100
    del blocks


def test_it_is_harmless_where_it_cannot_apply(monkeypatch) -> None:
    memory._libc.cache_clear()
    monkeypatch.setattr(sys, "platform", "darwin")
    try:
        assert memory.trim() is False and memory.limit_arenas() is False
    finally:
        memory._libc.cache_clear()
