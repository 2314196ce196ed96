"""Embedded tags as search text: title, artist, album, comment, description, keywords, genre.

Read with mutagen (ID3 in MP3/WAV/AIFF, Vorbis comments in Ogg/FLAC/Opus, MP4 atoms) plus the RIFF chunks
mutagen does not read: WAV `LIST/INFO` (INAM, ICMT, IKEY, ...), the BWF `bext` description and the `iXML`
NOTE/DESCRIPTION fields that sound-effects libraries (UCS metadata) fill in.

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
            if cid in (b"LIST", b"bext", b"iXML"):
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
