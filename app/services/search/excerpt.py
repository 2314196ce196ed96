"""A part of a sound written as a file of its own: what a sound designer drags from the preview into a DAW, or
exports, after selecting the part of a long ambience or take they want.

The samples are the file's own, not the preview's (mono, maybe an excerpt): every channel at the file's rate,
PCM read and written in integer types, so a WAV, AIFF or FLAC part is bit-exact (PCM or float in another
container, RF64 or AU, becomes a WAV of the same samples). Lossy or odd sources (Ogg, MP3, ...) become 24-bit
WAV: a DAW takes it, and nothing is encoded lossily twice. The part streams through in blocks (core.audio's
frame_blocks, frame_writer): memory stays near one block whatever its length and channels. The file is written
beside its final name and checked (frames, rate, channels, samples) before it takes that name; an existing file is
never replaced ("name 2.wav").
What a killed export left in the folder (its hidden part) is removed by the next export there.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import math
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.audio import (
    EXACT_DTYPE,
    AudioError,
    AudioInfo,
    audio_info,
    can_write,
    frame_blocks,
    frame_span,
    frame_writer,
)
from core.display import display_name
from core.files import LEFTOVER_AGE_S, atomic_path, remove_leftovers

KEPT_FORMATS = {"WAV": ".wav", "WAVEX": ".wav", "AIFF": ".aiff", "FLAC": ".flac", "W64": ".w64", "CAF": ".caf"}
EXACT_SUBTYPES = {"PCM_S8", "PCM_U8", "PCM_16", "PCM_24", "PCM_32", "FLOAT", "DOUBLE"}  # re-written bit for bit
FALLBACK = ("WAV", "PCM_24", ".wav")  # for sources whose format is lossy or not writable
MIN_EXCERPT_S = 0.01  # a shorter selection is a click, not a part
DRAG_KEEP_S = 24 * 3600  # dragged parts are temporary files: those older than this are removed
# a name's bytes: most file systems allow 255, less free_names's " 99" and some room
NAME_BYTES = 255 - 14 - 6
STAGED_PREFIX = ".earshot-part-"
# what a killed export leaves: the staged part being written (`..earshot-part-HEX.wav.HEX.tmp`, atomic_path's,
# marked in flight while written) or, killed between its two renames, the staged part itself
_WRITING = re.compile(r"\.\.earshot-part-[0-9a-f]{12}\.\w+\.[0-9a-f]{8}\.tmp")
_STAGED = re.compile(r"\.earshot-part-[0-9a-f]{12}\.\w+")
STAGED_KEEP_S = 600.0  # a staged part lives for a rename's time: one this old is a killed export's


class ExcerptError(AudioError):
    """The part cannot be written: an empty range, a source that cannot be read, a failed check."""


def excerpt_format(info: AudioInfo) -> tuple[str, str, str]:
    """(libsndfile format, subtype, suffix) of a source's parts: its own where it is lossless and writable; the
    same samples in a WAV for PCM or float in another container (RF64, AU, ...); else FALLBACK."""
    if info.subtype in EXACT_SUBTYPES:
        suffix = KEPT_FORMATS.get(info.format)
        if suffix is not None and can_write(info.format, info.subtype):
            return info.format, info.subtype, suffix
        if can_write("WAV", info.subtype):
            return "WAV", info.subtype, ".wav"
    return FALLBACK


def excerpt_name(source: Path, start_s: float, end_s: float, suffix: str) -> str:
    """'Door_Creak_01 (1.25-3.50 s).wav': the source's name and where the part lies in it, cut to NAME_BYTES
    (a name's limit is in bytes: 80 Japanese characters already fill it)."""
    tail = f" ({start_s:.2f}-{end_s:.2f} s){suffix}"
    room = NAME_BYTES - len(tail.encode())
    stem = display_name(source.stem).encode()[:room].decode("utf-8", "ignore")  # no character cut in two
    return stem + tail


def free_names(folder: Path, name: str) -> Iterator[Path]:
    """`folder / name`, then 'stem 2.ext', 'stem 3.ext', ...: the names a part may take, in order."""
    stem, suffix = os.path.splitext(name)
    yield folder / name
    for n in itertools.count(2):
        yield folder / f"{stem} {n}{suffix}"


def write_excerpt(source: Path, start_s: float, end_s: float, folder: Path, fsync: bool = True) -> Path:
    """Write [start_s, end_s) of `source` (file seconds) into `folder` under a new name; the path written.
    Raises ExcerptError (nothing to write, an unreadable source, a failed check) or OSError (a folder that
    cannot be written, a full disk: nothing is left behind, and the message names the file asked for)."""
    if not (math.isfinite(start_s) and math.isfinite(end_s)):
        raise ExcerptError(f"the part of {display_name(source.name)} to save has no start or end "
                           f"({start_s}, {end_s})")
    if not end_s - start_s >= MIN_EXCERPT_S:
        raise ExcerptError(f"select at least {MIN_EXCERPT_S * 1000:.0f} ms of {display_name(source.name)} to save")
    info, first, count = frame_span(source, start_s, end_s)
    if count == 0:
        raise ExcerptError(f"{display_name(source.name)} has no audio between {start_s:.2f} and {end_s:.2f} s")
    fmt, subtype, suffix = excerpt_format(info)
    sr = info.sample_rate
    target = folder / excerpt_name(source, first / sr, (first + count) / sr, suffix)  # asked for: what errors name
    remove_leftovers(folder, _leftover_age)
    staged = folder / f"{STAGED_PREFIX}{secrets.token_hex(6)}{suffix}"  # written and checked under a hidden name
    part = Part(source, info, first, count, EXACT_DTYPE.get(info.subtype, "float32"), exact=subtype == info.subtype)
    try:
        with atomic_path(staged, fsync=fsync) as tmp:
            written = _write_part(part, tmp, target, fmt, subtype)
            _check_written(tmp, target, part, written)
    except OSError as e:  # a folder that cannot be written: named by the file asked for, not the hidden one
        if e.filename is not None and os.fspath(e.filename) != os.fspath(target):
            raise OSError(e.errno, e.strerror, str(target)) from None
        raise
    try:  # named by the frames it holds (an MP3's header may promise a few more than it has)
        return claim_free_name(staged, folder, excerpt_name(source, first / sr, (first + written) / sr, suffix))
    finally:
        with contextlib.suppress(FileNotFoundError):
            staged.unlink()


@dataclass(frozen=True)
class Part:
    """The frames of a source to export: [first, first + count), read as `dtype` (its own samples exactly when
    `exact`, else float32 for a 24-bit WAV)."""

    source: Path
    info: AudioInfo
    first: int
    count: int
    dtype: str
    exact: bool

    def blocks(self) -> Iterator[np.ndarray]:
        return frame_blocks(self.source, self.first, self.count, self.dtype)


def _write_part(part: Part, tmp: Path, target: Path, fmt: str, subtype: str) -> int:
    """Write the part to `tmp` block by block; the frames written."""
    written = 0
    try:
        with frame_writer(tmp, part.info.sample_rate, part.info.channels, fmt, subtype) as write:
            for block in part.blocks():  # (n, C)
                write(block)
                written += len(block)
    except OSError as e:  # libsndfile says "System error." for a full disk: say which
        raise _write_error(target, part.count * part.info.channels * np.dtype(part.dtype).itemsize, e) from None
    if written == 0:
        raise ExcerptError(f"{display_name(part.source.name)} has no audio in the part selected")
    return written


def _leftover_age(name: str) -> float | None:
    """How old a killed export's leftover named `name` must be to go (None: not one; core.files.remove_leftovers)."""
    if _WRITING.fullmatch(name):
        return LEFTOVER_AGE_S
    return STAGED_KEEP_S if _STAGED.fullmatch(name) else None


def claim_free_name(staged: Path, folder: Path, name: str) -> Path:
    """Give the finished file `staged` the first free name of `free_names(name)`, without ever replacing a file,
    even one another export makes at the same moment: a hard link fails where the name exists. Where the file
    system has no hard links (FAT, some shares), a rename to a name checked just before."""
    for path in free_names(folder, name):
        try:
            os.link(staged, path)
            return path
        except FileExistsError:
            continue
        except OSError:  # no hard links here
            if not os.path.lexists(path):
                os.replace(staged, path)
                return path
    raise AssertionError("unreachable: free_names never ends")


def _write_error(target: Path, nbytes: int, e: OSError) -> OSError:
    """The error of a failed write of about `nbytes`, named by the file asked for: a full disk as such."""
    if shutil.disk_usage(target.parent).free < nbytes:
        return OSError(errno.ENOSPC, f"not enough free space for {nbytes / 1e6:.1f} MB", str(target))
    return OSError(e.errno or errno.EIO, f"cannot write the part ({e.strerror})", str(target))


def _check_written(path: Path, target: Path, part: Part, written: int) -> None:
    """`path` holds the part: its frames, rate and channels, and the samples themselves (exactly, NaN included,
    where the source's samples were kept; to 24-bit precision in the WAV that a lossy source becomes), compared
    block by block with the source read again."""
    wrong = ExcerptError(f"{display_name(target.name)}: the file written does not read back as the part selected")
    back = audio_info(path)
    if (back.sample_rate, back.channels, back.frames) != (part.info.sample_rate, part.info.channels, written):
        raise wrong
    source = part.blocks()
    for got in frame_blocks(path, dtype=part.dtype if part.exact else "float64"):
        want = next(source, None)
        if want is None or len(want) != len(got) or not _same(got, want, part.exact):
            raise wrong


def _same(got: np.ndarray, want: np.ndarray, exact: bool) -> bool:
    if exact:
        return bool(np.array_equal(got, want, equal_nan=want.dtype.kind == "f"))
    return bool(np.abs(got - np.clip(_as_float(want), -1, 1)).max(initial=0.0) <= 2 ** -22)


def _as_float(data: np.ndarray) -> np.ndarray:
    """Samples as float64 in [-1, 1): integers as libsndfile scales them (full scale is 2 ** (bits - 1))."""
    if data.dtype.kind == "i":
        return data / float(2 ** (8 * data.dtype.itemsize - 1))
    return data.astype(np.float64)


def drag_folder(cache: Path) -> Path:
    """Where dragged parts are written (under Earshot's cache), cleared of those older than DRAG_KEEP_S: a DAW
    copies what is dropped on it, so these are only needed while a drag lasts."""
    folder = cache / "dragged-parts"
    folder.mkdir(parents=True, exist_ok=True)
    old = time.time() - DRAG_KEEP_S
    for f in folder.iterdir():
        try:
            if f.is_file() and f.stat().st_mtime < old:
                f.unlink()
        except OSError:
            continue  # in use or gone: next time
    return folder
