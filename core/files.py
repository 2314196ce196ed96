"""Atomic file writes, the one copy: write a temp file beside the target, fsync, rename over it; and the one
file hasher (`hash_file`, SHA-256 of the bytes).

A crash, a cancel or a full disk mid-write leaves the previous file intact and no half file behind. Used by
checkpoints and resume states, WAV writing, the FAISS index files and the training-run service. Standard
library only, so app/ can import it without pulling in torch.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import overload


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str], fsync: bool = True) -> Iterator[Path]:
    """Yield a temp path in `target`'s folder to write; on success it is fsynced (unless `fsync=False`) and
    renamed to `target`, on any exception (KeyboardInterrupt included) it is removed and the error re-raised."""
    target = Path(target)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as e:  # name the file the user asked for, not a temp name they never chose
        raise OSError(e.errno, e.strerror, str(target)) from None
    os.close(fd)
    try:
        yield Path(tmp)
        if fsync:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@overload
def hash_file(path: str | os.PathLike[str], stop: None = None, chunk: int = ...) -> str: ...


@overload
def hash_file(path: str | os.PathLike[str], stop: threading.Event, chunk: int = ...) -> str | None: ...


def hash_file(path: str | os.PathLike[str], stop: threading.Event | None = None, chunk: int = 1 << 20) -> str | None:
    """SHA-256 hex of the file's bytes, the one file hasher (library files, index files, checkpoints); None if
    `stop` was set while reading."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
            if stop is not None and stop.is_set():
                return None
    return h.hexdigest()
