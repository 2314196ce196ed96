"""Atomic file writes, the one copy: write a temp file beside the target, fsync, rename over it.

A crash, a cancel or a full disk mid-write leaves the previous file intact and no half file behind. Used by
checkpoints and resume states, WAV writing, the FAISS index files and the training-run service. Standard
library only, so app/ can import it without pulling in torch.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str], fsync: bool = True) -> Iterator[Path]:
    """Yield a temp path in `target`'s folder to write; on success it is fsynced (unless `fsync=False`) and
    renamed to `target`, on any exception (KeyboardInterrupt included) it is removed and the error re-raised."""
    target = Path(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
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
