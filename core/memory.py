"""Keeping a long-running process's memory near what it uses (Linux glibc; a no-op elsewhere).

glibc gives each thread that allocates its own malloc arena and keeps freed memory in them for reuse: the indexer's
reader threads, the tower's workers and ONNX Runtime's threads each hold on to the peak of what they once used
(~150 MB more than in use while a library of long tracks is indexed). `limit_arenas` (before threads start) caps
the arenas at two, `map_large_blocks` gives blocks of 4 MB and more (decoded audio, front-end frames, the tower's
activations) mappings of their own, `trim` hands the free memory back to the system (milliseconds; called between
batches). `freeze_long_lived` keeps Python's full garbage collections short in a process that holds a model."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import sys

M_ARENA_MAX = -8  # glibc's mallopt parameter numbers
M_MMAP_THRESHOLD = -3
ARENAS = 2
LARGE_BLOCK = 4 << 20  # bytes: from this size a block is mapped on its own and unmapped when freed


@functools.cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt  # noqa: B018 - glibc has both; musl has neither
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas (call before worker threads start); True when it applied."""
    libc = _libc()
    return bool(libc is not None and libc.mallopt(M_ARENA_MAX, arenas))


def map_large_blocks(threshold: int = LARGE_BLOCK) -> bool:
    """Fix glibc's mmap threshold (call at start); True when it applied. glibc raises the threshold to the size of
    every mapped block freed (up to 32 MB), so after the first large buffer the next ones come from the heap and
    its peak stays. Indexing a real library's 363 files (bench.index_process): peak RSS 1006 -> 905 MB, for ~8 %
    of the speed (mapping fresh pages costs page faults); 8 MB kept less (930-955 MB)."""
    libc = _libc()
    return bool(libc is not None and libc.mallopt(M_MMAP_THRESHOLD, threshold))


def trim() -> bool:
    """Give freed heap memory back to the system; True when some was."""
    libc = _libc()
    return bool(libc is not None and libc.malloc_trim(0))


def freeze_long_lived() -> int:
    """Take every object alive now (imported libraries, a loaded model, the window's widgets) out of the cyclic
    garbage collector's sight; returns how many are frozen. A full collection walks every tracked object with the
    GIL held: ~530,000 once the GUI has a model, 0.4-1.2 s in which the window froze, every few clicks on a
    31,000-file library; frozen, it walks only what was made since. Refcounting still frees frozen objects; only a
    frozen reference cycle that becomes garbage stays (a model replaced now and then, not a growing leak)."""
    gc.freeze()
    return gc.get_freeze_count()
