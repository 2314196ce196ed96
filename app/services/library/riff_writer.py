"""Rewriting a RIFF/WAVE file's `LIST/INFO` chunk (and the BWF `bext` description) into a new file, every other
chunk copied byte for byte.

mutagen writes ID3 into WAV files but has no writer for RIFF INFO, which is what Soundminer, BaseHead and most
DAWs show as a WAV file's keywords (IKEY) and comment (ICMT). The writer walks the top-level chunks, refuses
anything it does not understand (RF64, a chunk running past the end, stray bytes after the last chunk), and
streams the audio through unchanged: the `data` chunk's bytes are the same in the copy (`chunk_digest` checks it).
"""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import dataclass
from typing import BinaryIO

COPY_BLOCK = 1 << 20
BEXT_DESCRIPTION_BYTES = 256  # the BWF description field: ASCII, NUL-padded
MAX_RIFF_BYTES = 0xFFFFFFFF + 8  # a RIFF size field is 32 bits


class RiffError(ValueError):
    """A WAV file this writer will not rewrite, and why."""


@dataclass(frozen=True)
class Chunk:
    cid: bytes
    offset: int  # of the chunk's 8-byte header
    size: int  # body bytes, without the pad byte

    @property
    def body(self) -> int:
        return self.offset + 8


def read_chunks(fh: BinaryIO) -> list[Chunk]:
    """The top-level chunks of a RIFF/WAVE file; RiffError when its layout is not one this writer can keep."""
    size = os.fstat(fh.fileno()).st_size
    fh.seek(0)
    head = fh.read(12)
    if head[:4] == b"RF64":
        raise RiffError("an RF64 (over 4 GB) WAV file: its sizes live in a ds64 chunk this writer does not rewrite")
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        raise RiffError("not a RIFF/WAVE file")
    chunks, pos = [], 12
    while pos < size:
        if pos + 8 > size:
            raise RiffError(f"{size - pos} stray bytes after the last chunk")
        fh.seek(pos)
        cid, n = struct.unpack("<4sI", fh.read(8))
        if pos + 8 + n > size:
            raise RiffError(f"chunk {cid.decode('latin-1')!r} at byte {pos} runs past the end of the file (truncated)")
        chunks.append(Chunk(cid, pos, n))
        pos += 8 + n + (n & 1)  # a missing pad byte after the last chunk is tolerated (the copy gets one)
    if not any(c.cid == b"data" for c in chunks):
        raise RiffError("no data chunk")
    return chunks


def info_chunk(chunks: list[Chunk], fh: BinaryIO) -> Chunk | None:
    """The first `LIST` chunk of type INFO."""
    for c in chunks:
        if c.cid == b"LIST" and c.size >= 4:
            fh.seek(c.body)
            if fh.read(4) == b"INFO":
                return c
    return None


def info_entries(fh: BinaryIO, chunk: Chunk | None) -> list[tuple[bytes, bytes]]:
    """(id, raw value) of the INFO list's sub-chunks, in order; a damaged tail is left out."""
    if chunk is None:
        return []
    fh.seek(chunk.body)
    data = fh.read(chunk.size)
    out, pos = [], 4
    while pos + 8 <= len(data):
        cid, n = struct.unpack("<4sI", data[pos:pos + 8])
        if pos + 8 + n > len(data):
            break
        out.append((cid, data[pos + 8:pos + 8 + n]))
        pos += 8 + n + (n & 1)
    return out


def decode_value(raw: bytes) -> str:
    """An INFO value as text (UTF-8, else Latin-1 as tags.read_tags reads it), NULs stripped."""
    raw = raw.split(b"\x00", 1)[0]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _pack(cid: bytes, body: bytes) -> bytes:
    return cid + struct.pack("<I", len(body)) + body + (b"\x00" if len(body) & 1 else b"")


def new_info_body(entries: list[tuple[bytes, bytes]], values: dict[bytes, str | None]) -> bytes:
    """The INFO list with `values` (UTF-8, NUL-terminated) in place of their entries (None: the entries go), the
    rest byte for byte; new entries go at the end."""
    done: set[bytes] = set()
    parts = [b"INFO"]
    for cid, raw in entries:
        if cid in values:
            if cid in done or values[cid] is None:
                continue  # a duplicate of an entry already replaced, or one to remove
            raw = str(values[cid]).encode("utf-8") + b"\x00"
            done.add(cid)
        parts.append(_pack(cid, raw))
    parts += [_pack(cid, text.encode("utf-8") + b"\x00") for cid, text in values.items()
              if cid not in done and text is not None]
    return b"".join(parts)


def _copy(src: BinaryIO, dst: BinaryIO, start: int, n: int) -> None:
    src.seek(start)
    while n > 0:
        block = src.read(min(COPY_BLOCK, n))
        if not block:
            raise RiffError("the file became shorter while it was copied")
        dst.write(block)
        n -= len(block)


def write_riff_copy(src_path: str | os.PathLike[str], dst: BinaryIO, values: dict[bytes, str | None],
                    bext_description: str | None = None) -> None:
    """Write `src_path` to `dst` with its INFO entries set to `values` (None: removed; the first INFO list replaced
    in place, or a new one appended) and, when given and the file has a `bext` chunk, its 256-byte description set.
    Every other chunk is copied byte for byte; the RIFF size is fixed up."""
    with open(src_path, "rb") as src:
        chunks = read_chunks(src)
        info = info_chunk(chunks, src)
        body = new_info_body(info_entries(src, info), values)
        dst.write(b"RIFF\x00\x00\x00\x00WAVE")
        for c in chunks:
            if c is info:
                dst.write(_pack(b"LIST", body))
            elif c.cid == b"bext" and bext_description is not None and c.size >= BEXT_DESCRIPTION_BYTES:
                dst.write(c.cid + struct.pack("<I", c.size))
                dst.write(bext_description.encode("ascii").ljust(BEXT_DESCRIPTION_BYTES, b"\x00"))
                _copy(src, dst, c.body + BEXT_DESCRIPTION_BYTES, c.size - BEXT_DESCRIPTION_BYTES)
                dst.write(b"\x00" if c.size & 1 else b"")
            else:
                _copy(src, dst, c.offset, 8 + c.size)
                dst.write(b"\x00" if c.size & 1 else b"")
        if info is None:
            dst.write(_pack(b"LIST", body))
        end = dst.tell()
        if end > MAX_RIFF_BYTES:
            raise RiffError("the file with its tags would be over 4 GB, more than a RIFF file can hold")
        dst.seek(4)
        dst.write(struct.pack("<I", end - 8))
        dst.seek(end)


def chunk_digest(path: str | os.PathLike[str], cid: bytes = b"data") -> str:
    """SHA-256 of the bodies of every top-level chunk `cid` (the audio bytes, for `data`)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for c in read_chunks(fh):
            if c.cid == cid:
                fh.seek(c.body)
                left = c.size
                while left > 0:
                    block = fh.read(min(COPY_BLOCK, left))
                    if not block:
                        break
                    h.update(block)
                    left -= len(block)
    return h.hexdigest()
