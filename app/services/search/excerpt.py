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

Export (`export_part`) is the same path with the user's choices: a file name and folder, a format (`export_formats`:
WAV or FLAC in 16 or 24 bits, or the source's own where it is lossless), optional fades on the exported samples
(core.audio's apply_fades), and a file of that name replaced only when the caller says the user agreed.
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
    apply_fades,
    audio_info,
    can_write,
    frame_blocks,
    frame_span,
    frame_writer,
)
from core.display import display_name
from core.files import LEFTOVER_AGE_S, atomic_path, remove_leftovers

KEPT_FORMATS = {"WAV": ".wav", "WAVEX": ".wav", "AIFF": ".aiff", "FLAC": ".flac", "W64": ".w64", "CAF": ".caf"}
SUFFIX_BYTES = max(len(s) for s in KEPT_FORMATS.values())  # the longest suffix a part's file takes
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
    return fitted_name(display_name(source.stem), f" ({start_s:.2f}-{end_s:.2f} s){suffix}")


def fitted_name(stem: str, tail: str, reserve: int = 0) -> str:
    """`stem + tail`, the stem cut so that the whole and `reserve` bytes more (a suffix to come) fit NAME_BYTES (no
    character cut in two)."""
    room = NAME_BYTES - reserve - len(tail.encode())
    return stem.encode()[:max(room, 0)].decode("utf-8", "ignore") + tail


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
    info, first, count = _span(source, start_s, end_s)
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


def _span(source: Path, start_s: float, end_s: float) -> tuple[AudioInfo, int, int]:
    """frame_span of a part to save; ExcerptError where there is none (no numbers, too short, past the end)."""
    if not (math.isfinite(start_s) and math.isfinite(end_s)):
        raise ExcerptError(f"the part of {display_name(source.name)} to save has no start or end "
                           f"({start_s}, {end_s})")
    if not end_s - start_s >= MIN_EXCERPT_S:
        raise ExcerptError(f"select at least {MIN_EXCERPT_S * 1000:.0f} ms of {display_name(source.name)} to save")
    info, first, count = frame_span(source, start_s, end_s)
    if count == 0:
        raise ExcerptError(f"{display_name(source.name)} has no audio between {start_s:.2f} and {end_s:.2f} s")
    return info, first, count


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


def _write_part(part: Part, tmp: Path, target: Path, fmt: str, subtype: str,
                blocks: Iterator[np.ndarray] | None = None) -> int:
    """Write the part (or `blocks`, made from it) to `tmp` block by block; the frames written."""
    written = 0
    try:
        with frame_writer(tmp, part.info.sample_rate, part.info.channels, fmt, subtype) as write:
            for block in part.blocks() if blocks is None else blocks:  # (n, C)
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


# ------------------------------------------------------------------------------------------------- export

SUBTYPE_WORDS = {"PCM_S8": "8-bit", "PCM_U8": "8-bit", "PCM_16": "16-bit", "PCM_24": "24-bit", "PCM_32": "32-bit",
                 "FLOAT": "32-bit float", "DOUBLE": "64-bit float"}
FORMAT_WORDS = {"WAV": "WAV", "WAVEX": "WAV", "AIFF": "AIFF", "FLAC": "FLAC", "W64": "Wave64", "CAF": "CAF"}
SUBTYPE_BITS = {"PCM_S8": 8, "PCM_U8": 8, "PCM_16": 16, "PCM_24": 24, "PCM_32": 32, "FLOAT": 24, "DOUBLE": 53}
FLAC_MAX_CHANNELS = 8  # libsndfile's FLAC encoder takes up to 8
STORED_QUANTUM = {"PCM_24": 256, "PCM_S8": 256, "PCM_U8": 256}  # the step of their samples as read (EXACT_DTYPE)


@dataclass(frozen=True)
class ExportFormat:
    """A format a part may be saved in: its name in the dialog and libsndfile's names for it."""

    label: str  # "WAV 24-bit", "AIFF 24-bit (as the source)"
    format: str  # libsndfile's major format
    subtype: str
    suffix: str


STANDARD_FORMATS = (ExportFormat("WAV 16-bit", "WAV", "PCM_16", ".wav"),
                    ExportFormat("WAV 24-bit", "WAV", "PCM_24", ".wav"),
                    ExportFormat("FLAC 16-bit", "FLAC", "PCM_16", ".flac"),
                    ExportFormat("FLAC 24-bit", "FLAC", "PCM_24", ".flac"))


@dataclass(frozen=True)
class Fades:
    """Fades on an exported part's own samples: seconds in and out, and their shape (core.audio's FADE_SHAPES)."""

    fade_in_s: float = 0.0
    fade_out_s: float = 0.0
    shape: str = "linear"


def export_formats(info: AudioInfo) -> tuple[list[ExportFormat], int]:
    """The formats a part of this source may be saved in, and the one offered first: WAV and FLAC (up to 8
    channels) in 16 and 24 bits, and the source's own where it is lossless (AIFF, Wave64, CAF, 32-bit float, ...;
    PCM in RF64 or AU as a WAV), which is the one offered; else WAV 24-bit (an Ogg or MP3 source)."""
    formats = [f for f in STANDARD_FORMATS if f.format != "FLAC" or info.channels <= FLAC_MAX_CHANNELS]
    default = 1  # WAV 24-bit
    if info.subtype in EXACT_SUBTYPES:
        fmt, subtype, suffix = excerpt_format(info)
        own = ExportFormat(f"{FORMAT_WORDS.get(fmt, fmt)} {SUBTYPE_WORDS[subtype]} (as the source)", fmt, subtype,
                           suffix)
        same = next((i for i, f in enumerate(formats) if (f.suffix, f.subtype) == (suffix, subtype)), None)
        if same is None:
            formats.append(own)
            default = len(formats) - 1
        else:
            formats[same] = own
            default = same
    return formats, default


def export_part(source: Path, start_s: float, end_s: float, target: Path, form: ExportFormat,
                fades: Fades = Fades(), replace: bool = False, fsync: bool = True) -> Path:
    """Write [start_s, end_s) of `source` (file seconds) to `target` in `form`: the file's own samples and
    channels at its own rate (no resampling), in the format's sample type (bit for bit where it is the source's),
    faded in and out on the exported samples as `fades` says. Written and read back under a hidden name beside
    `target`, then given its name: a file there is replaced only when `replace` (the user agreed), else
    FileExistsError. Raises ExcerptError or OSError (named by `target`) like `write_excerpt`; nothing is left
    behind. Returns `target`."""
    info, first, count = _span(source, start_s, end_s)
    if not replace and os.path.lexists(target):
        raise FileExistsError(errno.EEXIST, "a file of this name is already there", str(target))
    folder, sr = target.parent, info.sample_rate
    remove_leftovers(folder, _leftover_age)
    staged = folder / f"{STAGED_PREFIX}{secrets.token_hex(6)}{form.suffix}"
    part = Part(source, info, first, count, EXACT_DTYPE.get(info.subtype, "float32"),
                exact=form.subtype == info.subtype)
    fade = (round(fades.fade_in_s * sr), round(fades.fade_out_s * sr), fades.shape)
    try:
        with atomic_path(staged, fsync=fsync) as tmp:
            written = _write_part(part, tmp, target, form.format, form.subtype, _export_blocks(part, fade, form))
            _check_export(tmp, target, part, written, form, fade)
    except OSError as e:
        if e.filename is not None and os.fspath(e.filename) != os.fspath(target):
            raise OSError(e.errno, e.strerror, str(target)) from None
        raise
    try:
        return _claim(staged, target, replace)
    finally:
        with contextlib.suppress(FileNotFoundError):
            staged.unlink()


def _export_blocks(part: Part, fade: tuple[int, int, str], form: ExportFormat) -> Iterator[np.ndarray]:
    """The part's blocks as exported: faded (in their own sample type), and floats headed for PCM made finite and
    cut to [-1, 1] (libsndfile would wrap them around)."""
    first = 0
    for block in part.blocks():  # (n, C)
        out = apply_fades(block, first, part.count, *fade, quantum=STORED_QUANTUM.get(part.info.subtype, 1))
        first += len(block)
        if out.dtype.kind == "f" and form.subtype.startswith("PCM"):
            out = np.clip(np.nan_to_num(out, nan=0.0, posinf=1.0, neginf=-1.0), -1.0, 1.0)
        yield out


def _check_export(path: Path, target: Path, part: Part, written: int, form: ExportFormat,
                  fade: tuple[int, int, str]) -> None:
    """`path` holds the part as exported: its frames, rate, channels and sample type, and the samples (exactly in
    the source's own type, else to the precision of the format's), compared block by block with the source read
    and faded again."""
    wrong = ExcerptError(f"{display_name(target.name)}: the file written does not read back as the part selected")
    back = audio_info(path)
    if (back.sample_rate, back.channels, back.frames, back.subtype) != (
            part.info.sample_rate, part.info.channels, written, form.subtype):
        raise wrong
    tolerance = max(2.0 ** (2 - SUBTYPE_BITS.get(form.subtype, 24)), 2.0 ** -22)
    want_blocks = _export_blocks(part, fade, form)
    for got in frame_blocks(path, dtype=part.dtype if part.exact else "float64"):
        want = next(want_blocks, None)
        if want is None or len(want) != len(got):
            raise wrong
        if part.exact and not np.array_equal(got, want, equal_nan=want.dtype.kind == "f"):
            raise wrong
        if not part.exact and np.abs(got - np.clip(_as_float(want), -1, 1)).max(initial=0.0) > tolerance:
            raise wrong


def _claim(staged: Path, target: Path, replace: bool) -> Path:
    """Give the checked file `staged` the name `target`: over a file there only when `replace`; else a hard link,
    which fails where the name exists (a file made there meanwhile is never replaced), or where the file system
    has no hard links, a rename to a name checked just before."""
    if replace:
        os.replace(staged, target)
        return target
    try:
        os.link(staged, target)
    except FileExistsError:
        raise FileExistsError(errno.EEXIST, "a file of this name is already there", str(target)) from None
    except OSError:  # no hard links here
        if os.path.lexists(target):
            raise FileExistsError(errno.EEXIST, "a file of this name is already there", str(target)) from None
        os.replace(staged, target)
    return target
