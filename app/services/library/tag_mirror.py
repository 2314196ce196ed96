"""The user-tags mirror: every tagged or favourite file's tags and mark in a small JSON file beside the catalog.

The catalog is the truth; the mirror is the second copy that a damaged page cannot take along: after a salvage
the library puts back from it what the damaged catalog lost (UserTags.restore). It is rewritten after every
change, atomically (core/files.py) and read back before it replaces the previous one, so it is either the old
or the new copy, never half of one. File names that are not UTF-8 round-trip: JSON escapes their surrogates.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from core.files import atomic_path

MIRROR_NAME = "user-tags.json"
FORMAT = "earshot-user-tags"
VERSION = 1


@dataclass
class MirroredFile:
    """One file's entry: its catalog id (ids are never reused), relative path, tags and favourite mark."""

    id: int
    path: str
    tags: list[str]
    favourite: bool


def write_mirror(path: Path, files: Iterable[MirroredFile]) -> int:
    """Replace the mirror at `path` with `files`; returns how many. Raises OSError (a full disk, no write access)
    with the previous mirror intact."""
    entries = [{"id": f.id, "path": f.path, "tags": f.tags, "favourite": f.favourite} for f in files]
    text = json.dumps({"format": FORMAT, "version": VERSION, "files": entries}, ensure_ascii=True, indent=1)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="ascii")
        if tmp.read_text(encoding="ascii") != text:  # verified before it replaces the old copy
            raise OSError(f"{tmp.name}: read back differently from what was written")
    return len(entries)


def read_mirror(path: Path) -> list[MirroredFile] | None:
    """The mirror's files; None when there is no mirror. Raises ValueError saying what is wrong with a file that
    is not a mirror this version can read."""
    try:
        data = json.loads(path.read_text(encoding="ascii"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read it ({e})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("files"), list):
        raise ValueError("not an Earshot user-tags mirror")
    if data.get("version") != VERSION:
        raise ValueError(f"version {data.get('version')!r} (this Earshot reads {VERSION})")
    out = []
    for entry in data["files"]:
        try:
            fid, rel, tags, fav = entry["id"], entry["path"], entry["tags"], entry["favourite"]
        except (KeyError, TypeError):
            continue  # a damaged entry: the others still count
        if isinstance(fid, int) and _is_path(rel) and isinstance(tags, list) and isinstance(fav, bool):
            out.append(MirroredFile(fid, rel, [t for t in tags if isinstance(t, str)], fav))
    return out


def _is_path(rel: object) -> bool:
    """A relative path as the catalog writes it (os.fsdecode form: only surrogates that stand for bytes)."""
    if not isinstance(rel, str) or not rel:
        return False
    try:
        os.fsencode(rel)
    except UnicodeEncodeError:
        return False
    return True
