"""Writing a file's user tags (and a description) into the file itself, on request, atomically and verified.

Where each format keeps them and how: tag_formats.py (WAV INFO and bext, Vorbis comments, ID3). Keywords are added
to what the file holds, never removed; a description replaces the file's own, an empty one only with `clear`.
Every write goes to a hidden copy beside the file (a name the scan ignores, within 255 bytes), which takes the
file's permissions, owner and extended attributes, is flushed, checked (the same samples, decoded to the end; the
fields written read back exactly; every other field byte for byte: tag_fields.py) and only then moved over the
original with `os.replace`; any failure leaves the original untouched and says why in the file's `TagWrite`.
A dry run makes and checks the copy too, and replaces nothing. A library's file that is a link to a file outside
it is written only when asked (`follow_links`); copies left by a killed run are removed by the next one; one
library's tags are written by one job at a time.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import tempfile
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from app.services.jobs import Job
from app.services.library import riff_writer, tag_fields
from app.services.library.embedded_tags import read_tags
from app.services.library.tag_formats import (
    Plan,
    TagWriteError,
    keyword_set,
    kind_of,
    missing_keywords,
    plan_tags,
    read_back,
    set_fields,
    write_copy,
)
from core.audio import AudioError, audio_info, length_is_estimate, stream_blocks
from core.display import display_name
from core.files import LEFTOVER_AGE_S, hash_file, in_flight, remove_leftovers

if TYPE_CHECKING:
    from app.services.library.library import Library

WRITTEN, UNCHANGED, REFUSED, WOULD_WRITE = "written", "unchanged", "refused", "would write"
TMP_SUFFIX = ".earshot-tmp"
VERIFY_BLOCK_FRAMES = 1 << 18  # frames decoded at a time when comparing the copy with the original
NAME_MAX = 255  # bytes in a file name (ext4, XFS, APFS, NTFS): the copy's name must fit too
__all__ = ["TagWriteError", "keyword_set", "missing_keywords", "plan_tags"]  # the formats' names, used from here
_STALE = re.compile(r"[a-z0-9_]{8}")  # tempfile's random part


@dataclass
class TagWrite:
    """What writing the tags of one file did (status: written, unchanged, refused or 'would write')."""

    path: str  # as the caller named it (relative to the library for library jobs)
    status: str
    reason: str = ""  # why it was refused, or why nothing changed
    fields: dict[str, str] = field(default_factory=dict)  # container field -> the value written (or to be)
    real: str = ""  # the file written (or to be) when `path` is a link to it


# --------------------------------------------------------------------------------------- checks, verify


def _refusal(path: str, st: os.stat_result, expect: tuple[int, int] | None, expect_hash: str | None) -> str:
    """Why the file must not be written ('' = it may). A file whose size or time is not `expect` (its catalog
    row's) is one the catalog does not know, unless its bytes hash to `expect_hash`: the catalog's hash, which an
    Earshot write updates (so writing twice needs no index run in between)."""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if not st.st_mode & 0o222 or not os.access(path, os.W_OK):
        return "the file is read-only"
    if st.st_nlink > 1:
        return f"the file has {st.st_nlink} hard links; replacing it would separate them"
    if expect is not None and (st.st_size, st.st_mtime_ns) != expect and (
            expect_hash is None or hash_file(path) != expect_hash):
        return "the file changed since it was indexed; index the library again before writing its tags"
    return ""


def _same_audio(original: str, copy: str) -> None:
    """TagWriteError unless `copy` decodes to exactly the samples of `original`, compared block by block to the
    end of each stream: an MP3's frame count in its header is an estimate (without a Xing/Info header it follows
    the file's size, which the tag changes), so its frames are counted by decoding."""
    a, b = audio_info(original), audio_info(copy)
    estimated = length_is_estimate(a)
    if (a.sample_rate, a.channels, a.format, a.subtype) != (b.sample_rate, b.channels, b.format, b.subtype) or (
            not estimated and a.frames != b.frames):
        raise TagWriteError(f"the copy's audio format differs ({b.format}/{b.subtype}, {b.frames} frames at "
                            f"{b.sample_rate} Hz, not {a.format}/{a.subtype}, {a.frames} at {a.sample_rate} Hz)")
    start = 0
    copy_blocks = stream_blocks(copy, block_frames=VERIFY_BLOCK_FRAMES)
    for x in stream_blocks(original, block_frames=VERIFY_BLOCK_FRAMES):  # (n, C), full blocks but the last
        y = next(copy_blocks, np.zeros((0, b.channels), np.float32))
        if x.shape != y.shape:
            raise TagWriteError(f"the copy decodes to {start + len(y)} frames or more, the original to "
                                f"{start + len(x)} or more")
        same = (x == y) | (np.isnan(x) & np.isnan(y))
        if not same.all():
            raise TagWriteError(f"the copy's audio differs from the original's at frame "
                                f"{start + int(np.argmin(same.all(axis=1)))}")
        start += len(x)
    if next(copy_blocks, None) is not None:
        raise TagWriteError(f"the copy decodes to more than the original's {start} frames")


def _check_read_back(original: str, copy: str, kind: str, plan: Plan) -> None:
    """The copy holds the plan's fields exactly (however long), every other field as the original held it, byte
    for byte, and its tags read with no new problem."""
    wrong = read_back(kind, copy, plan)
    if wrong:
        raise TagWriteError(f"the copy's tags do not read back as written ({', '.join(wrong)})")
    changed = tag_fields.changed_fields(tag_fields.raw_fields(original, kind), tag_fields.raw_fields(copy, kind),
                                        set_fields(kind, plan))
    if changed:
        raise TagWriteError(f"writing would change fields it does not set ({', '.join(changed[:5])}): the tag "
                            "library rewrote them; file kept")
    before, after = read_tags(original), read_tags(copy)
    new = [p for p in after.problems if p not in before.problems]
    if new:
        raise TagWriteError(f"the copy's tags read with a problem: {'; '.join(new)}")


def _verify(original: str, copy: str, kind: str, plan: Plan) -> None:
    if kind == "wav" and riff_writer.chunk_digest(original) != riff_writer.chunk_digest(copy):
        raise TagWriteError("the copy's data chunk differs from the original's")
    _same_audio(original, copy)
    _check_read_back(original, copy, kind, plan)


# ---------------------------------------------------------------------------------------------- writing


def _remove_stale_copies(folder: str, name: str) -> None:
    """Copies of this file left by a write that was killed, however recently (never another file's, a user's file,
    or a copy that a live run is writing: core.files.in_flight)."""
    prefix, suffix = _temp_affixes(name)

    def stale(entry: str) -> float | None:
        ours = entry.startswith(prefix) and entry.endswith(suffix)
        return 0.0 if ours and _STALE.fullmatch(entry[len(prefix):-len(suffix)]) else None

    remove_leftovers(folder, stale)


def remove_leftover_copies(library: Library) -> list[str]:
    """Hidden copies that killed runs left in the library's folders (a write's copy can be as big as the sound),
    removed unless a live run is writing them; returns their paths relative to the library."""
    def copy(entry: str) -> float | None:
        return LEFTOVER_AGE_S if entry.startswith(".") and TMP_SUFFIX in entry else None

    removed = []
    for folder in ["", *library.files.folders()]:
        removed += [f"{folder}/{p.name}" if folder else p.name
                    for p in remove_leftovers(os.path.join(library.root, folder), copy)]
    return removed


def _temp_affixes(name: str) -> tuple[str, str]:
    """Prefix and suffix of the copy's name: hidden from the scan, the extension kept for the tag readers, within
    NAME_MAX bytes with tempfile's 8 random characters: a name too long for that is cut (between characters) and
    followed by a hash of it, so two long names that begin alike never share their copies' prefix."""
    suffix = TMP_SUFFIX + os.path.splitext(name)[1]
    room = NAME_MAX - len(os.fsencode(suffix)) - 2 - 8  # the two dots and the random part
    raw = os.fsencode(name)
    if len(raw) <= room:
        return f".{name}.", suffix
    mark = "~" + hashlib.sha256(raw).hexdigest()[:8]
    cut = raw[:max(0, room - len(mark))]
    while cut and 0x80 <= cut[-1] < 0xC0:  # a UTF-8 character's continuation bytes, then its lead byte
        cut = cut[:-1]
    if cut and cut[-1] >= 0xC0:
        cut = cut[:-1]
    return f".{os.fsdecode(cut)}{mark}.", suffix


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_copy(target: str, tmp_fd: int, kind: str, plan: Plan, tmp: str) -> None:
    write_copy(kind, target, tmp_fd, tmp, plan)
    _fsync(tmp)


def _carry_over(target: str, tmp: str, st: os.stat_result) -> None:
    """Give the copy what the replaced file had besides its bytes: permission bits, owner and group, and its
    extended attributes (user.xdg.tags, Finder tags, ACLs); TagWriteError when one cannot be carried over."""
    os.chmod(tmp, stat.S_IMODE(st.st_mode))
    with suppress(OSError):
        os.chown(tmp, st.st_uid, st.st_gid)
    now = os.stat(tmp)
    if (now.st_uid, now.st_gid) != (st.st_uid, st.st_gid):
        raise TagWriteError("the file's owner or group cannot be given to its copy (it belongs to another user); "
                            "replacing it would change who owns it")
    if not hasattr(os, "listxattr"):
        return
    try:
        names = os.listxattr(target)
    except OSError as e:
        if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return  # a file system without extended attributes
        raise
    for attr in names:
        try:
            os.setxattr(tmp, attr, os.getxattr(target, attr))
        except OSError as e:
            raise TagWriteError(f"its extended attribute {attr} cannot be carried over to the copy "
                                f"({e.strerror or e})") from None


def replace_checked(tmp: str, target: str, st: os.stat_result) -> None:
    """Move the verified copy over the original, unless the original changed while the copy was made."""
    now = os.stat(target)
    if (now.st_ino, now.st_size, now.st_mtime_ns) != (st.st_ino, st.st_size, st.st_mtime_ns):
        raise TagWriteError("the file changed while its tags were written; nothing replaced")
    os.replace(tmp, target)
    with suppress(OSError):
        _fsync(os.path.dirname(target))  # the rename itself on disk


def _atomic_write(target: str, st: os.stat_result, kind: str, plan: Plan, replace: bool = True) -> None:
    folder, name = os.path.split(target)
    _remove_stale_copies(folder, name)
    prefix, suffix = _temp_affixes(name)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=folder)
    try:
        with in_flight(tmp):  # another run's clean-up leaves it alone
            _write_copy(target, fd, kind, plan, tmp)
            _carry_over(target, tmp, st)
            _verify(target, tmp, kind, plan)
            if not replace:  # a dry run: checked as a write is, nothing replaced
                os.unlink(tmp)
                return
            replace_checked(tmp, target, st)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def write_tags(path: str | os.PathLike[str], keywords: Sequence[str], description: str | None = None, *,
               clear: bool = False, expect: tuple[int, int] | None = None, expect_hash: str | None = None,
               dry_run: bool = False, name: str | None = None) -> TagWrite:
    """Write `keywords` (added to the file's own) and `description` into the file at `path`; never raises for a
    file that cannot be written (the report says why). An empty description is refused unless `clear`, which
    removes the file's own. expect: (size, mtime_ns) the file must still have (its catalog row), unless its bytes
    hash to `expect_hash`: a file changed since is refused. name: how the report names the file."""
    shown = name if name is not None else os.fspath(path)
    target = os.path.realpath(path)  # a symlink's target is written, the link kept
    if clear and description is None:
        description = ""
    if description is not None and not description.strip():
        if not clear:
            return TagWrite(shown, REFUSED, "an empty description is not written (it would erase the file's own); "
                                            "ask for that with --clear")
        description = ""
    elif clear:
        return TagWrite(shown, REFUSED, "a description to write and --clear at once: say one")
    try:
        st = os.stat(target)
        why = _refusal(target, st, expect, expect_hash)
        if why:
            return TagWrite(shown, REFUSED, why)
        kind, plan = _planned(target, keywords, description)
        fields = {k: "; ".join(v) for k, v in plan.items()}
        if not plan:
            return TagWrite(shown, UNCHANGED, "the file already holds these tags")
        _atomic_write(target, st, kind, plan, replace=not dry_run)
        return TagWrite(shown, WOULD_WRITE if dry_run else WRITTEN, "", fields)
    except FileNotFoundError:
        return TagWrite(shown, REFUSED, "file not found")
    except PermissionError as e:
        return TagWrite(shown, REFUSED, f"permission denied ({e.strerror or e})")
    except OSError as e:  # a read-only or full disk, an I/O error: nothing was replaced
        return TagWrite(shown, REFUSED, f"could not write the copy beside the file ({e.strerror or e}); file kept")
    except (TagWriteError, riff_writer.RiffError, tag_fields.FieldError, AudioError) as e:
        return TagWrite(shown, REFUSED, str(e).replace(display_name(target) + ": ", ""))
    except Exception as e:  # noqa: BLE001 - a tag library's error on one file is that file's refusal
        return TagWrite(shown, REFUSED, f"{type(e).__name__}: {str(e)[:200]}")


def _planned(target: str, keywords: Sequence[str], description: str | None) -> tuple[str, Plan]:
    """(kind, plan) of a write; TagWriteError when the tag library would change fields it was not asked to."""
    kind = kind_of(target)
    problem = read_tags(target).problem if kind != "wav" else ""
    if problem:  # mutagen would write back what it read, undecodable bytes replaced
        raise TagWriteError(f"its tags do not all decode ({problem}); writing would replace the bytes that do not")
    problem = tag_fields.cannot_rewrite(target, kind)
    if problem:
        raise TagWriteError(problem)
    return kind, plan_tags(target, keywords, description)


# --------------------------------------------------------------------------------------- a library's files


def write_library_tags(library: Library, file_ids: Sequence[int] | None = None, *, dry_run: bool = False,
                       description: str | None = None, clear: bool = False,
                       follow_links: bool = False) -> Job[list[TagWrite]]:
    """Write each file's user tags (from the catalog) into the file: every tagged file, or `file_ids` (with
    `description`, when given, as each one's description). A job: yields progress, returns one `TagWrite` per
    file. A file changed since it was indexed is refused; a written file is read again (and its embedded tags
    with it) by the next index run. A link to a file outside the library is refused unless `follow_links`; a
    followed link's report names the real file. Copies left by killed runs go first (a library event says so).
    One such job per library at a time (a lock in its catalog folder): a second one is a LibraryError."""
    with library.catalog.tag_writing():
        return (yield from _write_each(library, file_ids, dry_run, description, clear, follow_links))


def _write_each(library: Library, file_ids: Sequence[int] | None, dry_run: bool, description: str | None,
                clear: bool, follow_links: bool) -> Job[list[TagWrite]]:
    left = remove_leftover_copies(library)
    if left:
        library.events.append(f"removed {len(left)} hidden {'copy' if len(left) == 1 else 'copies'} left by an "
                              f"interrupted tag write: {', '.join(display_name(p) for p in left[:5])}"
                              f"{' ...' if len(left) > 5 else ''}")
    root = os.path.realpath(library.root)
    rows = {r.id: r for r in library.files.rows("").values()}
    ids = sorted(library.user_tags.of_files(list(rows))) if file_ids is None else list(dict.fromkeys(file_ids))
    tags = library.user_tags.of_files([i for i in ids if i in rows])
    out: list[TagWrite] = []
    for step, fid in enumerate(ids):
        row = rows.get(int(fid))
        yield {"step": step, "total": len(ids), "message": f"writing tags {step + 1}/{len(ids)}"}
        if row is None:
            out.append(TagWrite(str(fid), REFUSED, f"no such file in the library: id {fid}"))
            continue
        rel = os.fsdecode(row.path)
        if not tags.get(row.id) and description is None and not clear:
            out.append(TagWrite(rel, UNCHANGED, "no tags to write"))
            continue
        path = os.path.join(library.root, rel)
        real = os.path.realpath(path)
        if os.path.commonpath([real, root]) != root and not follow_links:
            out.append(TagWrite(rel, REFUSED, f"a link to {display_name(real)}, outside the library: written only "
                                              "when asked to follow links (--follow-links)", real=real))
            continue
        done = write_tags(path, tags.get(row.id, []), description, clear=clear, expect=(row.size, row.mtime_ns),
                          expect_hash=row.hash, dry_run=dry_run, name=rel)
        done.real = real if real != os.path.join(root, rel) else ""  # a link followed
        if done.status == WRITTEN:  # the same audio (verified): not embedded again by the next index run
            with suppress(OSError):  # unreadable right after the write: the next index reads it anew
                library.files.rewritten_same_audio(row.id, hash_file(path))
        out.append(done)
    yield {"step": len(ids), "total": len(ids), "message": "tags written" if not dry_run else "tags checked"}
    return out
