"""core/memory.py: glibc's arenas capped and freed memory handed back (a no-op where there is no glibc)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


@pytest.mark.skipif(not sys.platform.startswith("linux") or memory._libc() is None, reason="glibc only")
def test_large_blocks_stay_mapped_after_a_larger_one_was_freed() -> None:
    """glibc raises its mmap threshold to every mapped block freed, so later large buffers came from the heap and
    its peak stayed; with the threshold fixed they are mapped (and unmapped) on their own. In a process of its own:
    the setting is process-wide."""
    code = """
import numpy as np
from core import memory
import sys
def heap_kb():  # numpy's huge-page advice splits the heap into several mappings
    spans = [line.split()[0].split("-") for line in open("/proc/self/maps") if line.rstrip().endswith("[heap]")]
    return sum(int(b, 16) - int(a, 16) for a, b in spans) // 1024
if sys.argv[1] == "fixed":
    assert memory.map_large_blocks()
big = np.ones(20 << 17)  # 20 MB, mapped; freeing it raises glibc's own threshold
del big
before = heap_kb()
block = np.ones(6 << 17)  # 6 MB
print(heap_kb() - before)
"""
    grown = {mode: int(subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, check=True,
                                      cwd=Path(__file__).resolve().parents[1]).stdout) for mode in ("fixed", "glibc")}
    assert grown["glibc"] >= 6 << 10  # the control: the 6 MB block came from the heap
    assert grown["fixed"] < 1 << 10


def test_it_is_harmless_where_it_cannot_apply(monkeypatch) -> None:
    memory._libc.cache_clear()
    monkeypatch.setattr(sys, "platform", "darwin")
    try:
        assert memory.trim() is False and memory.limit_arenas() is False and memory.map_large_blocks() is False
    finally:
        memory._libc.cache_clear()
