"""File names as people read them: printable even when the bytes are not valid UTF-8, and in natural order."""

from __future__ import annotations

import os
import re

PathLike = str | bytes | os.PathLike

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_NUMBERS = re.compile(r"(\d+)")


def display_name(path: PathLike) -> str:
    """A printable file name even when the name is not valid UTF-8 (undecodable bytes become U+FFFD)."""
    return os.fsencode(path).decode("utf-8", "replace")


def printable(path: str | os.PathLike[str]) -> str:
    """A file name on one line, unambiguously: backslash, control characters and non-UTF-8 bytes escaped."""
    out = []
    for c in os.fsencode(path).decode("utf-8", "surrogateescape"):
        if 0xDC80 <= ord(c) <= 0xDCFF:  # an undecodable byte
            out.append(f"\\x{ord(c) - 0xDC00:02x}")
        elif c == "\\":
            out.append("\\\\")
        elif c in _ESCAPES:
            out.append(_ESCAPES[c])
        elif not c.isprintable() and c != " ":
            out.append(f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return "".join(out)


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key of a name as people count: numbers as numbers, letters case-blind ('2.ogg' before '10.ogg',
    'Kick' beside 'kick'); a number sorts before text at the same place."""
    parts = _NUMBERS.split(text.casefold())
    return tuple((0, int(p)) if i % 2 else (1, p) for i, p in enumerate(parts) if p)


def natural_path_key(path: str) -> tuple[tuple[tuple[int, int | str], ...], ...]:
    """A '/'-separated path's key, folder by folder (a folder comes right before what it holds)."""
    return tuple(natural_key(part) for part in path.split("/"))
