"""Writing a file's user tags (and a description) into the file itself, on request, atomically and verified.

Sound designers keep keywords in their files so they travel with the sounds: WAV RIFF `LIST/INFO` IKEY/ICMT
(+ the BWF `bext` description; riff_writer.py), Vorbis comments KEYWORDS/DESCRIPTION in FLAC and Ogg (mutagen),
ID3v2 `TXXX:KEYWORDS` and `COMM` in MP3. Keywords are added to what the file holds, never removed; a
description replaces the file's own. Every write goes to a hidden copy beside the file (a name the scan
ignores), is flushed, checked (same samples; `read_tags` reads back what was written) and only then moved over
the original with `os.replace`; any failure leaves the original untouched and says why in the file's `TagWrite`.
A dry run makes and checks the copy too, and replaces nothing. A library's file that is a link to a file outside
it is written only when asked (`follow_links`); copies left by a killed run are removed by the next one.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from app.services.jobs import Job
from app.services.library import riff_writer
from app.services.library.embedded_tags import read_tags
from core.audio import AudioError, audio_info, decode
from core.display import display_name
from core.files import LEFTOVER_AGE_S, hash_file, in_flight, remove_leftovers

if TYPE_CHECKING:
    from app.services.library.library import Library

WRITTEN, UNCHANGED, REFUSED, WOULD_WRITE = "written", "unchanged", "refused", "would write"
TMP_SUFFIX = ".earshot-tmp"
VERIFY_BLOCK_FRAMES = 1 << 21  # frames decoded at a time when comparing the copy with the original
WAV_EXT = (".wav", ".wave", ".bwf")
VORBIS_EXT = (".flac", ".ogg", ".oga", ".opus")
MP3_EXT = (".mp3",)
_STALE = re.compile(r"[a-z0-9_]{8}")  # tempfile's random part


@dataclass
class TagWrite:
    """What writing the tags of one file did (status: written, unchanged, refused or 'would write')."""

    path: str  # as the caller named it (relative to the library for library jobs)
    status: str
    reason: str = ""  # why it was refused, or why nothing changed
    fields: dict[str, str] = field(default_factory=dict)  # container field -> the value written (or to be)
    real: str = ""  # the file written (or to be) when `path` is a link to it


class TagWriteError(Exception):
    """Why one file's tags were not written (the original is untouched)."""


# -------------------------------------------------------------------------------------------- keywords


def keyword_set(values: Sequence[str]) -> set[str]:
    """Every keyword a field's values hold, casefolded: split at ';' and, separately, at ',' (both are in use)."""
    out: set[str] = set()
    for v in values:
        for sep in (";", ","):
            out.update(" ".join(k.split()).casefold() for k in v.split(sep))
    out.discard("")
    return out


def missing_keywords(existing: Sequence[str], keywords: Sequence[str]) -> list[str]:
    have = keyword_set(existing)
    return [k for k in dict.fromkeys(keywords) if k.casefold() not in have]


def _joined(existing: Sequence[str], added: Sequence[str]) -> str:
    return "; ".join([v for v in existing if v.strip()] + list(added))


# ---------------------------------------------------------------------------------- formats: plan, write


def _plan_wav(path: str, keywords: Sequence[str], description: str | None) -> dict[str, list[str]]:
    with open(path, "rb") as fh:
        chunks = riff_writer.read_chunks(fh)
        entries = riff_writer.info_entries(fh, riff_writer.info_chunk(chunks, fh))
        bext = next((c for c in chunks if c.cid == b"bext" and c.size >= riff_writer.BEXT_DESCRIPTION_BYTES), None)
        bext_text = ""
        if bext is not None:
            fh.seek(bext.body)
            bext_text = riff_writer.decode_value(fh.read(riff_writer.BEXT_DESCRIPTION_BYTES))
    plan: dict[str, list[str]] = {}
    old_keys = [riff_writer.decode_value(raw) for cid, raw in entries if cid == b"IKEY"]  # duplicates merged
    comment = next((riff_writer.decode_value(raw) for cid, raw in entries if cid == b"ICMT"), "")
    added = missing_keywords(old_keys, keywords)
    if added:
        plan["IKEY"] = [_joined(old_keys, added)]
    if description is not None:
        if comment != description:
            plan["ICMT"] = [description]
        fits = description.isascii() and len(description) <= riff_writer.BEXT_DESCRIPTION_BYTES
        if bext is not None and fits and bext_text != description:
            plan["bext description"] = [description]
    return plan


def _write_wav(src: str, out: Any, plan: dict[str, list[str]]) -> None:  # noqa: ANN401 - a binary file
    values = {cid.encode(): plan[cid][0] for cid in ("IKEY", "ICMT") if cid in plan}
    bext = plan.get("bext description", [None])[0]
    riff_writer.write_riff_copy(src, out, values, bext)


def _plan_vorbis(path: str, keywords: Sequence[str], description: str | None) -> dict[str, list[str]]:
    import mutagen

    f = mutagen.File(path)
    if f is None or type(f).__name__ not in ("FLAC", "OggVorbis", "OggOpus"):
        raise TagWriteError(f"not a FLAC, Ogg Vorbis or Ogg Opus file ({type(f).__name__ if f else 'unknown'})")
    tags = f.tags if f.tags is not None else {}
    old = [str(v) for v in tags.get("KEYWORDS", [])]
    plan: dict[str, list[str]] = {}
    added = missing_keywords(old, keywords)
    if added:
        plan["KEYWORDS"] = old + added
    if description is not None and [str(v) for v in tags.get("DESCRIPTION", [])] != [description]:
        plan["DESCRIPTION"] = [description]
    return plan


def _write_vorbis(path: str, plan: dict[str, list[str]]) -> None:
    import mutagen

    f = mutagen.File(path)
    if f.tags is None:
        f.add_tags()
    for key, values in plan.items():
        f.tags[key] = values
    f.save()


def _id3_keywords(tags: Any) -> list[str]:  # noqa: ANN401 - mutagen's ID3
    return [str(t) for fr in tags.getall("TXXX") if fr.desc.lower() == "keywords" for t in fr.text] if tags else []


def _id3_comment(tags: Any) -> list[str]:  # noqa: ANN401 - mutagen's ID3
    return [str(t) for fr in tags.getall("COMM") if fr.desc == "" for t in fr.text] if tags else []


def _plan_mp3(path: str, keywords: Sequence[str], description: str | None) -> dict[str, list[str]]:
    from mutagen.mp3 import MP3

    f = MP3(path)
    old = _id3_keywords(f.tags)
    plan: dict[str, list[str]] = {}
    added = missing_keywords(old, keywords)
    if added:
        plan["TXXX:KEYWORDS"] = [_joined(old, added)]
    if description is not None and _id3_comment(f.tags) != [description]:
        plan["COMM"] = [description]
    return plan


def _write_mp3(path: str, plan: dict[str, list[str]]) -> None:
    from mutagen.id3 import COMM, TXXX
    from mutagen.mp3 import MP3

    f = MP3(path)
    if f.tags is None:
        f.add_tags()
    tags = f.tags
    version = 3 if tags.version[:2] == (2, 3) else 4  # keep an ID3v2.3 tag v2.3 (older players read only that)
    if "TXXX:KEYWORDS" in plan:
        for key in [k for k, fr in tags.items() if fr.FrameID == "TXXX" and fr.desc.lower() == "keywords"]:
            del tags[key]
        tags.add(TXXX(encoding=3, desc="KEYWORDS", text=plan["TXXX:KEYWORDS"]))
    if "COMM" in plan:
        for key in [k for k, fr in tags.items() if fr.FrameID == "COMM" and fr.desc == ""]:
            del tags[key]
        tags.add(COMM(encoding=3, lang="eng", desc="", text=plan["COMM"]))
    f.save(v2_version=version)


def _kind(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    for kind, exts in (("wav", WAV_EXT), ("vorbis", VORBIS_EXT), ("mp3", MP3_EXT)):
        if ext in exts:
            return kind
    raise TagWriteError(f"no tag writer for {ext or 'files without an extension'} (WAV, FLAC, Ogg and MP3 only)")


def plan_tags(path: str, keywords: Sequence[str], description: str | None = None) -> dict[str, list[str]]:
    """The fields that writing would change (container field -> values); empty when the file holds them all."""
    kind = _kind(path)
    if kind == "wav":
        return _plan_wav(path, keywords, description)
    if kind == "vorbis":
        return _plan_vorbis(path, keywords, description)
    return _plan_mp3(path, keywords, description)


# --------------------------------------------------------------------------------------- checks, verify


def _refusal(path: str, st: os.stat_result, expect: tuple[int, int] | None) -> str:
    """Why the file must not be written ('' = it may)."""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if not st.st_mode & 0o222 or not os.access(path, os.W_OK):
        return "the file is read-only"
    if st.st_nlink > 1:
        return f"the file has {st.st_nlink} hard links; replacing it would separate them"
    if expect is not None and (st.st_size, st.st_mtime_ns) != expect:
        return "the file changed since it was indexed; index the library again before writing its tags"
    return ""


def _same_audio(original: str, copy: str) -> None:
    """TagWriteError unless `copy` decodes to exactly the samples of `original` (block by block)."""
    a, b = audio_info(original), audio_info(copy)
    if (a.frames, a.sample_rate, a.channels, a.format, a.subtype) != (
            b.frames, b.sample_rate, b.channels, b.format, b.subtype):
        raise TagWriteError(f"the copy's audio format differs ({b.format}/{b.subtype}, {b.frames} frames at "
                            f"{b.sample_rate} Hz, not {a.format}/{a.subtype}, {a.frames} at {a.sample_rate} Hz)")
    sr = a.sample_rate
    for start in range(0, max(a.frames, 1), VERIFY_BLOCK_FRAMES):
        n = min(VERIFY_BLOCK_FRAMES, a.frames - start)
        kw: dict[str, Any] = {"mono": False, "max_seconds": None, "keep_nonfinite": True, "start": start / sr,
                              "duration": n / sr}
        x, y = decode(original, **kw).audio, decode(copy, **kw).audio
        if x.shape != y.shape:
            raise TagWriteError(f"the copy decodes to {len(y)} frames from frame {start}, the original to {len(x)}")
        same = (x == y) | (np.isnan(x) & np.isnan(y))
        if not same.all():
            first = int(np.argmin(same.all(axis=1)))
            raise TagWriteError(f"the copy's audio differs from the original's at frame {start + first}")


def _check_read_back(original: str, copy: str, keywords: Sequence[str], description: str | None) -> None:
    before, after = read_tags(original), read_tags(copy)
    missing = missing_keywords(after.fields.get("keywords", []), keywords)
    if missing:
        raise TagWriteError(f"the copy's tags do not read back (missing keywords: {', '.join(missing)})")
    said = after.fields.get("description", []) + after.fields.get("comment", [])
    if description is not None and description.strip() and " ".join(description.split()) not in said:
        raise TagWriteError("the copy's tags do not read back (the description is missing)")
    new = [p for p in after.problems if p not in before.problems]
    if new:
        raise TagWriteError(f"the copy's tags read with a problem: {'; '.join(new)}")


def _verify(original: str, copy: str, kind: str, keywords: Sequence[str], description: str | None) -> None:
    if kind == "wav" and riff_writer.chunk_digest(original) != riff_writer.chunk_digest(copy):
        raise TagWriteError("the copy's data chunk differs from the original's")
    _same_audio(original, copy)
    _check_read_back(original, copy, keywords, description)


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
    """Prefix and suffix of the copy's name: hidden from the scan, the extension kept for the tag readers."""
    return f".{name}.", TMP_SUFFIX + os.path.splitext(name)[1]


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_copy(target: str, tmp_fd: int, kind: str, plan: dict[str, list[str]], tmp: str) -> None:
    with os.fdopen(tmp_fd, "wb") as out:
        if kind == "wav":
            _write_wav(target, out, plan)
        else:
            with open(target, "rb") as src:
                shutil.copyfileobj(src, out, riff_writer.COPY_BLOCK)
    if kind == "vorbis":
        _write_vorbis(tmp, plan)
    elif kind == "mp3":
        _write_mp3(tmp, plan)
    _fsync(tmp)


def replace_checked(tmp: str, target: str, st: os.stat_result) -> None:
    """Move the verified copy over the original, unless the original changed while the copy was made."""
    now = os.stat(target)
    if (now.st_ino, now.st_size, now.st_mtime_ns) != (st.st_ino, st.st_size, st.st_mtime_ns):
        raise TagWriteError("the file changed while its tags were written; nothing replaced")
    os.replace(tmp, target)
    with suppress(OSError):
        _fsync(os.path.dirname(target))  # the rename itself on disk


def _atomic_write(target: str, st: os.stat_result, kind: str, plan: dict[str, list[str]],
                  keywords: Sequence[str], description: str | None, replace: bool = True) -> None:
    folder, name = os.path.split(target)
    _remove_stale_copies(folder, name)
    prefix, suffix = _temp_affixes(name)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=folder)
    try:
        with in_flight(tmp):  # another run's clean-up leaves it alone
            _write_copy(target, fd, kind, plan, tmp)
            os.chmod(tmp, stat.S_IMODE(st.st_mode))
            with suppress(OSError):
                os.chown(tmp, st.st_uid, st.st_gid)
            _verify(target, tmp, kind, keywords, description)
            if not replace:  # a dry run: checked as a write is, nothing replaced
                os.unlink(tmp)
                return
            replace_checked(tmp, target, st)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def write_tags(path: str | os.PathLike[str], keywords: Sequence[str], description: str | None = None, *,
               expect: tuple[int, int] | None = None, dry_run: bool = False, name: str | None = None) -> TagWrite:
    """Write `keywords` (added to the file's own) and `description` into the file at `path`; never raises for a
    file that cannot be written (the report says why). expect: (size, mtime_ns) the file must still have
    (its catalog row): a file changed since is refused. name: how the report names the file."""
    shown = name if name is not None else os.fspath(path)
    target = os.path.realpath(path)  # a symlink's target is written, the link kept
    try:
        st = os.stat(target)
        why = _refusal(target, st, expect)
        if why:
            return TagWrite(shown, REFUSED, why)
        kind = _kind(target)
        problem = read_tags(target).problem if kind != "wav" else ""
        if problem:  # mutagen would write back what it read, undecodable bytes replaced
            return TagWrite(shown, REFUSED, f"its tags do not all decode ({problem}); writing would replace the "
                                            "bytes that do not")
        plan = plan_tags(target, keywords, description)
        fields = {k: "; ".join(v) for k, v in plan.items()}
        if not plan:
            return TagWrite(shown, UNCHANGED, "the file already holds these tags")
        _atomic_write(target, st, kind, plan, keywords, description, replace=not dry_run)
        return TagWrite(shown, WOULD_WRITE if dry_run else WRITTEN, "", fields)
    except FileNotFoundError:
        return TagWrite(shown, REFUSED, "file not found")
    except PermissionError as e:
        return TagWrite(shown, REFUSED, f"permission denied ({e.strerror or e})")
    except OSError as e:  # a read-only or full disk, an I/O error: nothing was replaced
        return TagWrite(shown, REFUSED, f"could not write the copy beside the file ({e.strerror or e}); file kept")
    except (TagWriteError, riff_writer.RiffError, AudioError) as e:
        return TagWrite(shown, REFUSED, str(e).replace(display_name(target) + ": ", ""))
    except Exception as e:  # noqa: BLE001 - a tag library's error on one file is that file's refusal
        return TagWrite(shown, REFUSED, f"{type(e).__name__}: {str(e)[:200]}")


# --------------------------------------------------------------------------------------- a library's files


def write_library_tags(library: Library, file_ids: Sequence[int] | None = None, *, dry_run: bool = False,
                       description: str | None = None, follow_links: bool = False) -> Job[list[TagWrite]]:
    """Write each file's user tags (from the catalog) into the file: every tagged file, or `file_ids` (with
    `description`, when given, as each one's description). A job: yields progress, returns one `TagWrite` per
    file. A file changed since it was indexed is refused; a written file is read again (and its embedded tags
    with it) by the next index run. A link to a file outside the library is refused unless `follow_links`; a
    followed link's report names the real file. Copies left by killed runs go first (a library event says so)."""
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
        if not tags.get(row.id) and description is None:
            out.append(TagWrite(rel, UNCHANGED, "no tags to write"))
            continue
        path = os.path.join(library.root, rel)
        real = os.path.realpath(path)
        if os.path.commonpath([real, root]) != root and not follow_links:
            out.append(TagWrite(rel, REFUSED, f"a link to {display_name(real)}, outside the library: written only "
                                              "when asked to follow links (--follow-links)", real=real))
            continue
        done = write_tags(path, tags.get(row.id, []), description, expect=(row.size, row.mtime_ns),
                          dry_run=dry_run, name=rel)
        done.real = real if real != os.path.join(root, rel) else ""  # a link followed
        if done.status == WRITTEN:  # the same audio (verified): not embedded again by the next index run
            with suppress(OSError):  # unreadable right after the write: the next index reads it anew
                library.files.rewritten_same_audio(row.id, hash_file(path))
        out.append(done)
    yield {"step": len(ids), "total": len(ids), "message": "tags written" if not dry_run else "tags checked"}
    return out
