"""Atomic file writes, the one copy: write a temp file beside the target, fsync, rename over it; and the one
file hasher (`hash_file`, SHA-256 of the bytes).

A crash, a cancel or a full disk mid-write leaves the previous file intact and no half file behind. Used by
checkpoints and resume states, WAV writing, the FAISS index files and the training-run service. Standard
library only, so app/ can import it without pulling in torch.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import overload


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str], fsync: bool = True) -> Iterator[Path]:
    """Yield a temp path in `target`'s folder to write; on success it is fsynced (unless `fsync=False`) and
    renamed to `target`, on any exception (KeyboardInterrupt included) it is removed and the error re-raised.
    The file gets the permissions a plain `open(target, "w")` would leave: those of the file it replaces, else
    0666 less the umask (an export is not made private)."""
    target = Path(target)
    try:
        tmp = _new_file_beside(target)
        mode = stat.S_IMODE(os.stat(tmp).st_mode)  # 0666 less the umask, as the kernel created it
    except OSError as e:  # name the file the user asked for, not a temp name they never chose
        raise OSError(e.errno, e.strerror, str(target)) from None
    try:
        yield tmp
        with contextlib.suppress(FileNotFoundError):
            mode = stat.S_IMODE(os.stat(target).st_mode)
        os.chmod(tmp, mode)  # also when the writer made the file anew (safetensors writes it 0600)
        if fsync:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _new_file_beside(target: Path) -> Path:
    """An empty, new file `.NAME.XXXXXXXX.tmp` in `target`'s folder, created with mode 0666 so that the kernel
    applies the umask as it does for open(target, "w") (mkstemp's 0600 would make every export private; reading
    the umask with os.umask would change it for every thread for a moment)."""
    for _ in range(100):
        tmp = target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp"
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(target))


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


def cache_root() -> Path:
    """Earshot's cache folder: $EARSHOT_CACHE_DIR, else the platform's user cache folder for "earshot"."""
    from platformdirs import user_cache_dir

    return Path(os.environ.get("EARSHOT_CACHE_DIR") or user_cache_dir("earshot"))
