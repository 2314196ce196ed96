"""The fields a file's tags hold, as raw bytes: what the tag writer must keep byte for byte.

`raw_fields(path, kind)` lists (field name, bytes) for WAV `LIST/INFO` entries and the `bext` description, the
Vorbis comments (and vendor string) of FLAC and Ogg, and the ID3v2 frames and ID3v1 tag of MP3. The writer
compares these before and after a write: every field it did not set must come back unchanged.
`cannot_rewrite(path, kind)` says why a file's fields would not survive the tag library's rewrite (mutagen
decodes every Vorbis comment and replaces the bytes that are not UTF-8; it cannot write ID3v2.2).
`strict_info_value` reads an INFO value Earshot adds to (IKEY): UTF-8 with no text after a NUL, or refused.
"""

from __future__ import annotations

import os
import struct
from collections import Counter

from app.services.library import riff_writer
from app.services.library.embedded_tags import MAX_CHUNK_BYTES, id3_frames, syncsafe, vorbis_comment_bytes

ID3V1_BYTES = 128
BEXT_FIELD = "bext description"


class FieldError(ValueError):
    """A field whose bytes the writer would have to change to write the file (the reason names it)."""


def strict_info_value(cid: str, raw: bytes) -> str:
    """An INFO value as text that writes back to the same bytes: UTF-8, NUL padding only at the end."""
    text = raw.rstrip(b"\x00")
    if b"\x00" in text:
        raise FieldError(f"INFO {cid} holds text after a NUL byte, which rewriting it would drop")
    try:
        return text.decode("utf-8")
    except UnicodeDecodeError:
        raise FieldError(f"INFO {cid} is not UTF-8 (Latin-1, Shift-JIS or another code page?); rewriting it would "
                         "change its bytes") from None


def raw_fields(path: str | os.PathLike[str], kind: str) -> list[tuple[str, bytes]]:
    """(field, raw bytes) of every tag field the file holds, in file order."""
    if kind == "wav":
        return _wav_fields(path)
    if kind == "vorbis":
        return _vorbis_fields(path)
    return _mp3_fields(path)


def changed_fields(before: list[tuple[str, bytes]], after: list[tuple[str, bytes]], set_: set[str]) -> list[str]:
    """The fields not in `set_` that differ between the two lists (compared as multisets: a tag library may
    reorder them)."""
    kept = Counter(f for f in before if f[0] not in set_)
    now = Counter(f for f in after if f[0] not in set_)
    return sorted({name for name, _ in (kept - now) + (now - kept)})


def cannot_rewrite(path: str | os.PathLike[str], kind: str) -> str:
    """Why the tag library would change fields it was not asked to ('' = nothing)."""
    if kind == "vorbis":
        return _vorbis_undecodable(path)
    if kind == "mp3":
        with open(path, "rb") as fh:
            head = fh.read(4)
        if head[:3] == b"ID3" and len(head) == 4 and head[3] == 2:
            return "its ID3 tag is version 2.2, which mutagen cannot write back (every frame would be converted)"
    return ""


# ------------------------------------------------------------------------------------------------ formats


def _wav_fields(path: str | os.PathLike[str]) -> list[tuple[str, bytes]]:
    with open(path, "rb") as fh:
        chunks = riff_writer.read_chunks(fh)
        out = [(cid.decode("latin-1"), raw) for cid, raw in riff_writer.info_entries(fh, riff_writer.info_chunk(
            chunks, fh))]
        bext = next((c for c in chunks if c.cid == b"bext" and c.size >= riff_writer.BEXT_DESCRIPTION_BYTES), None)
        if bext is not None:
            fh.seek(bext.body)
            out.append((BEXT_FIELD, fh.read(riff_writer.BEXT_DESCRIPTION_BYTES)))
    return out


def _vorbis_entries(path: str | os.PathLike[str]) -> tuple[bytes, list[bytes]]:
    """(vendor string, `KEY=value` entries) of a FLAC or Ogg file's comment block, from its bytes."""
    import mutagen

    f = mutagen.File(path)
    block = vorbis_comment_bytes(path, type(f).__name__) if f is not None else None
    if block is None:
        return b"", []
    n = struct.unpack_from("<I", block, 0)[0]
    vendor, pos = block[4:4 + n], 4 + n
    count = struct.unpack_from("<I", block, pos)[0]
    pos += 4
    entries = []
    for _ in range(min(count, len(block) // 4)):
        size = struct.unpack_from("<I", block, pos)[0]
        entries.append(block[pos + 4:pos + 4 + size])
        pos += 4 + size
    return vendor, entries


def _vorbis_fields(path: str | os.PathLike[str]) -> list[tuple[str, bytes]]:
    vendor, entries = _vorbis_entries(path)
    out = [("vendor", vendor)]
    for entry in entries:
        key, _, value = entry.partition(b"=")
        out.append((key.decode("latin-1").upper(), value))
    return out


def _vorbis_undecodable(path: str | os.PathLike[str]) -> str:
    vendor, entries = _vorbis_entries(path)
    try:
        vendor.decode("utf-8")
    except UnicodeDecodeError:
        return "its Vorbis vendor string is not UTF-8; mutagen would replace the bytes that are not"
    for entry in entries:
        key, sep, _ = entry.partition(b"=")
        what = f"Vorbis comment {key.decode('latin-1').upper()[:40]}"
        if not sep or not key.isascii():
            return f"{what} is not KEY=value; mutagen would rewrite it"
        try:
            entry.decode("utf-8")
        except UnicodeDecodeError:
            return f"{what} is not UTF-8; mutagen would replace the bytes that are not"
    return ""


def _mp3_fields(path: str | os.PathLike[str]) -> list[tuple[str, bytes]]:
    """ID3v2 frames as (name, body): TXXX and COMM named with their description (the writer sets
    TXXX:KEYWORDS and COMM, the one without a description), plus the ID3v1 tag at the end."""
    out: list[tuple[str, bytes]] = []
    with open(path, "rb") as fh:
        head = fh.read(10)
        if head[:3] == b"ID3" and len(head) == 10 and syncsafe(head[6:10]) <= MAX_CHUNK_BYTES:
            for fid, body in id3_frames(head + fh.read(syncsafe(head[6:10]))):
                out.append((_frame_name(fid, body), body))
        size = os.fstat(fh.fileno()).st_size
        if size >= ID3V1_BYTES:
            fh.seek(size - ID3V1_BYTES)
            tail = fh.read(ID3V1_BYTES)
            if tail[:3] == b"TAG":
                out.append(("ID3v1", tail))
    return out


def _frame_name(fid: str, body: bytes) -> str:
    """'TXXX:<description>' and 'COMM:<description>' (as the writer names what it sets), else the frame id."""
    if fid not in ("TXXX", "COMM") or not body:
        return fid
    encoding, rest = body[0], body[4:] if fid == "COMM" else body[1:]
    wide = encoding in (1, 2)
    if wide:  # a UTF-16 description ends at the first aligned pair of NULs
        end = next((i for i in range(0, len(rest) - 1, 2) if rest[i:i + 2] == b"\x00\x00"), len(rest))
    else:
        end = rest.find(b"\x00") if b"\x00" in rest else len(rest)
    codec = {0: "latin-1", 1: "utf-16", 2: "utf-16-be", 3: "utf-8"}.get(encoding, "latin-1")
    desc = rest[:end].decode(codec, "replace")
    return f"{fid}:{desc.upper() if fid == 'TXXX' else desc}"
