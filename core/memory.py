"""Keeping a long-running process's memory near what it uses (Linux glibc; a no-op elsewhere).

glibc gives each thread that allocates its own malloc arena and keeps freed memory in them for reuse: the indexer's
reader threads, the tower's workers and ONNX Runtime's threads each hold on to the peak of what they once used
(~150 MB more than in use while a library of long tracks is indexed). `limit_arenas` (before threads start) caps
the arenas at two, `trim` hands the free memory back to the system (milliseconds; called between batches)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

M_ARENA_MAX = -8  # glibc's mallopt parameter number
ARENAS = 2


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


def trim() -> bool:
    """Give freed heap memory back to the system; True when some was."""
    libc = _libc()
    return bool(libc is not None and libc.malloc_trim(0))
