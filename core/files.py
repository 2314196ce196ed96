"""Atomic file writes, the one copy: write a temp file beside the target, fsync, rename over it; and the one
file hasher (`hash_file`, SHA-256 of the bytes).

A crash, a cancel or a full disk mid-write leaves the previous file intact and no half file behind. Used by
checkpoints and resume states, WAV writing, the FAISS index files and the training-run service. Standard
library only, so app/ can import it without pulling in torch. A kill -9 leaves the temp file: a writer marks
its temp files `in_flight` (an flock), and `remove_leftovers` removes those of a writer that is gone.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable, Iterator
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
        with in_flight(tmp):
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


LEFTOVER_AGE_S = 2.0  # a sweep judges no temp file younger than this: its writer may not have marked it yet
UNMARKED_AGE_S = 24 * 3600.0  # where flock is missing (Windows, some shares), a leftover is one older than this


@contextlib.contextmanager
def in_flight(path: str | os.PathLike[str]) -> Iterator[None]:
    """Mark the temp file `path` as being written by this process while the block runs (an flock on it, released
    by the kernel when the process dies), so that `remove_leftovers` leaves it alone. Best effort: where flock is
    missing or refused, nothing is marked. (On NFS flock is a POSIX lock, which closing any other descriptor of the
    file releases: a concurrent cleaner may then take a copy in flight, which fails that write; nothing is lost.)"""
    fd = None
    try:
        import fcntl

        fd = os.open(path, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except (ImportError, OSError):
        pass
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


def remove_leftovers(folder: str | os.PathLike[str], min_age_s: Callable[[str], float | None]) -> list[Path]:
    """Remove the temp files in `folder` left by writers that are gone; returns those removed. `min_age_s(name)`:
    None for a name that is no such temp file, else how long since its last change it must be (a sweep of names
    any run may be writing: LEFTOVER_AGE_S). A file a live writer marks `in_flight` is kept; without flock, one
    younger than UNMARKED_AGE_S. Never raises: a folder or file that cannot be looked at is left as it is."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    removed = []
    for name in names:
        age = min_age_s(name)
        if age is not None and _remove_if_left(os.path.join(folder, name), age):
            removed.append(Path(folder) / name)
    return removed


def _remove_if_left(path: str, min_age_s: float) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        age = time.time() - st.st_mtime
        if not stat.S_ISREG(st.st_mode) or age < min_age_s:
            return False
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # its writer is alive
        except (ImportError, OSError):
            if age < UNMARKED_AGE_S:
                return False
        os.unlink(path)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


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
