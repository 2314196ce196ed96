"""Embedded tags as search text: title, artist, album, comment, description, keywords, genre.

Read with mutagen (ID3 in MP3/WAV/AIFF, Vorbis comments in Ogg/FLAC/Opus, MP4 atoms) plus the RIFF chunks
mutagen does not read: WAV `LIST/INFO` (INAM, ICMT, IKEY, ...), the BWF `bext` description and the `iXML`
NOTE/DESCRIPTION fields that sound-effects libraries (UCS metadata) fill in. Vorbis comments of FLAC and Ogg
files are read from their bytes here (mutagen would replace undecodable bytes without a word), and an ID3 tag's
text frames are checked here too (mutagen drops a frame that does not decode).

Tags are a bonus, never a reason to fail: `read_tags` returns the text it could read and a `problem` string
(invalid UTF-8, an oversized tag block, a tag library error) that the catalog records and `Library.tag_problems`
lists, while the file is indexed by its name and sound as usual. Sizes are bounded: a chunk over
`MAX_CHUNK_BYTES` is skipped unread, every field is cut at `MAX_FIELD_CHARS`, the whole text at `MAX_TEXT_CHARS`.
"""

from __future__ import annotations

import os
import re
import struct
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any

MAX_CHUNK_BYTES = 1 << 20  # a tag chunk larger than this is skipped (a 10-MB "comment" is not a description)
MAX_FIELD_CHARS = 2000
MAX_TEXT_CHARS = 8000
MUTAGEN_MAX_FILE = 1 << 30  # mutagen reads tags from the head/tail; the limit only guards absurd inputs

# tag names per container, mapped to what they mean (only these become search text)
ID3_FRAMES = {"TIT2": "title", "TIT1": "title", "TIT3": "title", "TPE1": "artist", "TALB": "album",
              "COMM": "comment", "TCON": "genre", "USLT": "comment"}
ID3_TXXX = {"description", "keywords", "comment", "category", "subcategory", "fxname", "catid"}
VORBIS_KEYS = {"title", "artist", "album", "comment", "description", "keywords", "genre", "subject",
               "category", "subcategory", "fxname"}
MP4_KEYS = {"\xa9nam": "title", "\xa9ART": "artist", "\xa9alb": "album", "\xa9cmt": "comment", "\xa9gen": "genre",
            "desc": "description", "ldes": "description", "keyw": "keywords"}
RIFF_INFO = {b"INAM": "title", b"IART": "artist", b"IPRD": "album", b"ICMT": "comment", b"IKEY": "keywords",
             b"IGNR": "genre", b"ISBJ": "subject", b"ISRC": "source", b"ITCH": "artist"}
IXML_FIELDS = {"NOTE", "DESCRIPTION", "KEYWORDS", "TRACK_TITLE", "FXNAME", "CATEGORY", "SUBCATEGORY",
               "CATEGORYFULL", "BWF_DESCRIPTION", "SCENE", "LIBRARY", "TITLE"}

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]+")
_SPACES = re.compile(r"\s+")


@dataclass
class TagText:
    """What the tags of one file say, and what went wrong reading them ('' = nothing)."""

    fields: dict[str, list[str]] = field(default_factory=dict)  # meaning -> values
    problems: list[str] = field(default_factory=list)

    def add(self, meaning: str, value: Any) -> None:  # noqa: ANN401 - tag values are str, bytes or lists of them
        if isinstance(value, list | tuple):
            for v in value:
                self.add(meaning, v)
            return
        if isinstance(value, bytes):
            value = self.decode(value, meaning)
        text = clean(str(value))
        if text and text not in self.fields.get(meaning, []):
            self.fields.setdefault(meaning, []).append(text[:MAX_FIELD_CHARS])

    def decode(self, raw: bytes, what: str) -> str:
        raw = raw.split(b"\x00", 1)[0] if b"\x00" in raw.rstrip(b"\x00") else raw.rstrip(b"\x00")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            self.problems.append(f"{what}: not valid UTF-8 (read as Latin-1)")
            return raw.decode("latin-1")

    @property
    def text(self) -> str:
        """One line of search text: every value once, title first."""
        order = ["title", "description", "keywords", "comment", "subject", "category", "subcategory", "fxname",
                 "genre", "album", "artist", "source"]
        parts = [v for key in order + sorted(set(self.fields) - set(order)) for v in self.fields.get(key, [])]
        return " · ".join(dict.fromkeys(parts))[:MAX_TEXT_CHARS]

    @property
    def problem(self) -> str:
        return "; ".join(dict.fromkeys(self.problems))


def clean(text: str) -> str:
    """Control characters out, whitespace collapsed; lone surrogates (undecodable bytes) replaced."""
    text = text.encode("utf-8", "replace").decode("utf-8")
    return _SPACES.sub(" ", _CONTROL.sub(" ", text)).strip()


def read_tags(path: str | os.PathLike[str]) -> TagText:
    """The search text in a file's embedded tags; never raises for a bad file (problems are in `.problems`)."""
    out = TagText()
    try:
        _read_mutagen(path, out)
    except Exception as e:  # noqa: BLE001 - any tag library failure is the tags' problem, not the file's
        out.problems.append(f"tags could not be read ({type(e).__name__}: {str(e)[:120]})")
    if os.fspath(path).lower().endswith((".wav", ".wave", ".bwf")):
        try:
            _read_riff(path, out)
        except (OSError, ValueError, struct.error) as e:
            out.problems.append(f"RIFF chunks could not be read ({str(e)[:120]})")
    else:
        try:
            with open(path, "rb") as fh:
                head = fh.read(10)
                if head[:3] == b"ID3" and len(head) == 10:  # MP3 (and some FLAC) files begin with their ID3 tag
                    size = _syncsafe(head[6:10])
                    if size <= MAX_CHUNK_BYTES:
                        _id3_undecodable(head + fh.read(size), out)
        except (OSError, ValueError, struct.error):
            pass  # mutagen has said what it could not read
    return out


def _read_mutagen(path: str | os.PathLike[str], out: TagText) -> None:
    import mutagen

    try:
        f = mutagen.File(path)
    except mutagen.MutagenError as e:
        out.problems.append(f"tags could not be read ({str(e)[:160]})")
        return
    if f is None or f.tags is None:
        return
    from mutagen.id3 import ID3

    tags = f.tags
    kind = type(tags).__name__
    if isinstance(tags, ID3):  # MP3, and the ID3 chunk of WAV and AIFF files
        for frame in tags.values():
            name = frame.FrameID
            if name == "TXXX":
                if frame.desc.lower() in ID3_TXXX:
                    out.add(frame.desc.lower(), [str(t) for t in frame.text])
            elif name in ID3_FRAMES:
                out.add(ID3_FRAMES[name], [str(t) for t in getattr(frame, "text", [])] if name != "USLT"
                        else [frame.text])
    elif kind == "MP4Tags":
        for key, meaning in MP4_KEYS.items():
            if key in tags:
                out.add(meaning, [str(v) for v in tags[key]])
    elif hasattr(tags, "items"):  # Vorbis comments (Ogg, FLAC, Opus), APEv2
        raw = _vorbis_comment_bytes(path, type(f).__name__)
        if raw is not None:
            _vorbis_fields(raw, out)
            return
        for key, values in tags.items():
            if str(key).lower() in VORBIS_KEYS:
                out.add(str(key).lower(), [str(v) for v in (values if isinstance(values, list) else [values])])


def _read_riff(path: str | os.PathLike[str], out: TagText) -> None:
    """LIST/INFO, bext and iXML chunks of a RIFF/WAVE file, walking the chunk headers (bounded reads)."""
    with open(path, "rb") as fh:
        head = fh.read(12)
        if len(head) < 12 or head[:4] not in (b"RIFF", b"RF64") or head[8:12] != b"WAVE":
            return
        size = os.fstat(fh.fileno()).st_size
        pos = 12
        while pos + 8 <= size:
            fh.seek(pos)
            cid, n = struct.unpack("<4sI", fh.read(8))
            body = pos + 8
            if cid in (b"LIST", b"bext", b"iXML", b"id3 ", b"ID3 "):
                if n > MAX_CHUNK_BYTES:
                    out.problems.append(f"{cid.decode('ascii')} chunk of {n / 1e6:.1f} MB skipped (tags over "
                                        f"{MAX_CHUNK_BYTES >> 20} MB are not read)")
                else:
                    fh.seek(body)
                    data = fh.read(n)
                    if cid == b"LIST":
                        _list_info(data, out)
                    elif cid == b"bext":
                        out.add("description", out.decode(data[:256], "bext description"))
                    elif cid in (b"id3 ", b"ID3 "):
                        _id3_undecodable(data, out)
                    else:
                        _ixml(data, out)
            pos = body + n + (n & 1)  # chunks are word-aligned


def _list_info(data: bytes, out: TagText) -> None:
    if data[:4] != b"INFO":
        return
    pos = 4
    while pos + 8 <= len(data):
        cid, n = struct.unpack("<4sI", data[pos:pos + 8])
        value = data[pos + 8:pos + 8 + n]
        if cid in RIFF_INFO:
            out.add(RIFF_INFO[cid], out.decode(value, f"INFO {cid.decode('ascii', 'replace')}"))
        pos += 8 + n + (n & 1)


def _ixml(data: bytes, out: TagText) -> None:
    text = out.decode(data, "iXML")
    try:
        root = ET.fromstring(text.strip().strip("\x00"))
    except ET.ParseError as e:
        out.problems.append(f"iXML is not well-formed XML ({e})")
        return
    for el in root.iter():
        if el.tag.upper() in IXML_FIELDS and el.text and el.text.strip():
            out.add(el.tag.lower(), el.text)


# -------------------------------------------------------------------- Vorbis comments, from their bytes

MAX_OGG_PAGES = 64  # the comment header is in the first pages; a stream that never completes it is damaged


def _vorbis_comment_bytes(path: str | os.PathLike[str], container: str) -> bytes | None:
    """The Vorbis comment block of a FLAC, Ogg Vorbis or Ogg Opus file (framing removed), or None when the
    container is another one or the block cannot be found (mutagen's decoded values are used then)."""
    try:
        if container == "FLAC":
            return _flac_comment(path)
        if container in ("OggVorbis", "OggOpus"):
            return _ogg_comment(path, b"\x03vorbis" if container == "OggVorbis" else b"OpusTags")
    except (OSError, ValueError, struct.error, EOFError):
        return None
    except Exception:  # noqa: BLE001 - mutagen's page reader raises its own errors for a damaged stream
        return None
    return None


def _flac_comment(path: str | os.PathLike[str]) -> bytes | None:
    with open(path, "rb") as fh:
        head = fh.read(10)
        start = 10 + _syncsafe(head[6:10]) if head[:3] == b"ID3" and len(head) == 10 else 0
        fh.seek(start)
        if fh.read(4) != b"fLaC":
            return None
        for _ in range(128):  # metadata blocks: 1 byte (last flag, type), 3 bytes of length
            header = fh.read(4)
            if len(header) < 4:
                return None
            kind, n = header[0] & 0x7F, int.from_bytes(header[1:4], "big")
            if kind == 4:
                return fh.read(n) if n <= MAX_CHUNK_BYTES else None
            if header[0] & 0x80:
                return None
            fh.seek(n, os.SEEK_CUR)
    return None


def _ogg_comment(path: str | os.PathLike[str], magic: bytes) -> bytes | None:
    from mutagen.ogg import OggPage

    with open(path, "rb") as fh:
        first = OggPage(fh)  # the identification header
        pages: list[OggPage] = []
        for _ in range(MAX_OGG_PAGES):
            page = OggPage(fh)
            if page.serial != first.serial:
                continue
            pages.append(page)
            if page.complete or len(page.packets) > 1:
                packet = OggPage.to_packets(pages)[0]
                return packet[len(magic):] if packet.startswith(magic) else None
    return None


def _vorbis_fields(data: bytes, out: TagText) -> None:
    """The fields of a Vorbis comment block (vendor string, count, then `KEY=value` entries), each value
    decoded strictly: one that is not UTF-8 is read as Latin-1 and named as a problem."""
    vendor = struct.unpack_from("<I", data, 0)[0]
    pos = 4 + vendor
    count = struct.unpack_from("<I", data, pos)[0]
    pos += 4
    for _ in range(min(count, len(data) // 4)):
        n = struct.unpack_from("<I", data, pos)[0]
        entry = data[pos + 4:pos + 4 + n]
        pos += 4 + n
        key, sep, value = entry.partition(b"=")
        name = key.decode("ascii", "replace").lower()
        if sep and name in VORBIS_KEYS:
            out.add(name, out.decode(value, f"Vorbis comment {name.upper()}"))


# ----------------------------------------------------------------------------- ID3 frames that do not decode

ID3_V22 = {"TT1": "TIT1", "TT2": "TIT2", "TT3": "TIT3", "TP1": "TPE1", "TAL": "TALB", "COM": "COMM",
           "TCO": "TCON", "ULT": "USLT", "TXX": "TXXX"}


def _syncsafe(b: bytes) -> int:
    return (b[0] & 0x7F) << 21 | (b[1] & 0x7F) << 14 | (b[2] & 0x7F) << 7 | (b[3] & 0x7F)


def _id3_frames(tag: bytes) -> list[tuple[str, bytes]]:
    """(frame id, body) of an ID3v2.2/2.3/2.4 tag's frames; compressed and encrypted frames are left out."""
    if tag[:3] != b"ID3" or len(tag) < 10:
        return []
    major, flags = tag[3], tag[5]
    data = tag[10:10 + _syncsafe(tag[6:10])]
    if major < 4 and flags & 0x80:  # whole-tag unsynchronisation (v2.2, v2.3)
        data = data.replace(b"\xff\x00", b"\xff")
    pos = 0
    if flags & 0x40 and major >= 3:  # an extended header
        n = struct.unpack_from(">I", data, 0)[0]
        pos = _syncsafe(data[:4]) if major == 4 else 4 + n
    frames = []
    head = 6 if major == 2 else 10
    while pos + head <= len(data) and data[pos:pos + 1] not in (b"\x00", b""):
        if major == 2:
            fid, n, fflags = data[pos:pos + 3].decode("latin-1"), int.from_bytes(data[pos + 3:pos + 6], "big"), 0
            fid = ID3_V22.get(fid, fid)
        else:
            fid = data[pos:pos + 4].decode("latin-1")
            n = _syncsafe(data[pos + 4:pos + 8]) if major == 4 else struct.unpack_from(">I", data, pos + 4)[0]
            fflags = struct.unpack_from(">H", data, pos + 8)[0]
        body = data[pos + head:pos + head + n]
        pos += head + n
        if major == 4:
            if fflags & 0x000C:  # compressed or encrypted
                continue
            if fflags & 0x0002:
                body = body.replace(b"\xff\x00", b"\xff")
            if fflags & 0x0001:  # a data length indicator comes first
                body = body[4:]
        elif major == 3 and fflags & 0x00C0:
            continue
        frames.append((fid, body))
    return frames


def _id3_undecodable(tag: bytes, out: TagText) -> None:
    """Name the text frames of an ID3 tag that do not decode in their declared encoding (mutagen drops those
    frames), reading UTF-8 ones as Latin-1 as the RIFF chunks are."""
    for fid, body in _id3_frames(tag):
        if not body or (fid not in ID3_FRAMES and fid != "TXXX"):
            continue
        encoding, text = body[0], body[1:]
        if fid in ("COMM", "USLT"):
            text = text[3:]  # the language code
        codec = {1: "utf-16", 2: "utf-16-be", 3: "utf-8"}.get(encoding)
        if codec is None:
            continue  # Latin-1 always decodes
        try:
            text.decode(codec)
            continue
        except UnicodeDecodeError:
            pass
        if codec != "utf-8":
            out.problems.append(f"ID3 {fid}: not valid UTF-16")
            continue
        parts = text.split(b"\x00")
        if fid in ("COMM", "USLT", "TXXX"):
            desc, parts = parts[0].decode("latin-1").lower(), parts[1:]
            if fid == "TXXX" and desc not in ID3_TXXX:
                continue
        meaning = desc if fid == "TXXX" else ID3_FRAMES[fid]
        for value in parts:
            out.add(meaning, out.decode(value, f"ID3 {fid}"))
