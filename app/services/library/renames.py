"""Renaming users' files in a batch, atomically per file, with an undo list (issue 39, item 4: suggested names).

Each file is renamed in its own folder by one `os.rename` (atomic on every local file system: the file is under
its old name or its new one, never both or neither, whatever kills the process). A name that exists already is
never replaced. Before the first rename the batch is written to the catalog folder's journal (`renames.json`,
atomically), and each rename done is recorded there as it happens: the journal is the undo list of the last
batch, also after a crash. The catalog follows on the next index run, which recognises a renamed file by its
content and moves its row, so tags, favourites, categories and vectors stay with it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from app.services.jobs import Job
from app.services.library.library import Library
from core.files import atomic_path

JOURNAL = "renames.json"
MAX_NAME_BYTES = 255  # a file name's limit on the common file systems
FORBIDDEN = set('/\\\0:*?"<>|')  # not in a name on any of Linux, macOS, Windows


class RenameError(ValueError):
    """A batch that cannot be done as asked (the message names the file and why); nothing was renamed."""


@dataclass(frozen=True)
class Rename:
    old: str  # relative path ('/'-separated)
    new_name: str  # the new file name, in the same folder

    @property
    def new(self) -> str:
        folder = self.old.rpartition("/")[0]
        return f"{folder}/{self.new_name}" if folder else self.new_name


@dataclass
class RenameReport:
    done: list[Rename] = field(default_factory=list)
    failed: list[tuple[Rename, str]] = field(default_factory=list)  # (rename, why) found only while renaming


def name_problem(name: str) -> str | None:
    """Why a file name cannot be used, or None."""
    if not name.strip() or name in (".", ".."):
        return "an empty name"
    if bad := sorted(set(name) & FORBIDDEN):
        return f"it holds {' '.join(repr(c) for c in bad)}"
    if len(os.fsencode(name)) > MAX_NAME_BYTES:
        return f"it is longer than {MAX_NAME_BYTES} bytes"
    if name != name.strip() or name.endswith("."):
        return "it starts or ends with a space, or ends with a dot"
    return None


def check(root: Path, renames: Sequence[Rename]) -> None:
    """RenameError for the first rename that cannot be done: a bad name, a missing file, a name taken (on disk or
    twice in the batch)."""
    taken: set[str] = set()
    for r in renames:
        if problem := name_problem(r.new_name):
            raise RenameError(f"{r.old}: cannot be renamed to {r.new_name!r}: {problem}")
        if not (root / r.old).is_file():
            raise RenameError(f"{r.old}: not found (moved or deleted since it was listed)")
        if r.new != r.old and ((root / r.new).exists() or r.new.lower() in taken):
            raise RenameError(f"{r.old}: {r.new} exists already (nothing is ever replaced)")
        taken.add(r.new.lower())


def apply(lib: Library, renames: Sequence[Rename]) -> Job[RenameReport]:
    """Rename the files (checked first: a problem renames none), journalled for undo."""
    root = lib.root
    todo = [r for r in renames if r.new != r.old]
    check(root, todo)
    journal = lib.catalog_dir / JOURNAL
    entries = [{"old": r.old, "new": r.new, "done": False} for r in todo]
    _write(journal, entries)
    report = RenameReport()
    for i, (r, entry) in enumerate(zip(todo, entries, strict=True)):
        try:
            if (root / r.new).exists():  # appeared since the check: never replaced
                raise FileExistsError(f"{r.new} exists already")
            os.rename(root / r.old, root / r.new)
        except OSError as e:
            report.failed.append((r, e.strerror or str(e)))
        else:
            entry["done"] = True
            _write(journal, entries)
            report.done.append(r)
        yield {"message": f"renamed {r.old}", "files_done": i + 1, "files_total": len(todo)}
    return report


def last_batch(lib: Library) -> list[Rename]:
    """The renames of the last batch that were done (the undo list), oldest first; [] when there is none. One the
    journal had not marked done yet (a kill between the rename and the journal's update) is read from the disk:
    done when its new name exists and its old one does not."""
    try:
        entries = json.loads((lib.catalog_dir / JOURNAL).read_text(encoding="utf-8"))["renames"]
        batch = [(Rename(str(e["old"]), str(e["new"]).rpartition("/")[2]), bool(e.get("done"))) for e in entries]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    root = lib.root
    return [r for r, done in batch if done or ((root / r.new).exists() and not (root / r.old).exists())]


def undo(lib: Library) -> Job[RenameReport]:
    """Put the last batch's files back under their old names (newest first); the journal is then emptied. A file
    renamed again since, or whose old name is taken, is left and reported."""
    root, report = lib.root, RenameReport()
    batch = last_batch(lib)
    for i, r in enumerate(reversed(batch)):
        back = Rename(r.new, r.old.rpartition("/")[2])
        try:
            if not (root / r.new).is_file():
                raise FileNotFoundError(f"{r.new} is gone (renamed or moved since)")
            if (root / r.old).exists():
                raise FileExistsError(f"{r.old} exists again")
            os.rename(root / r.new, root / r.old)
        except OSError as e:
            report.failed.append((back, e.strerror or str(e)))
        else:
            report.done.append(back)
        yield {"message": f"renamed back {r.old}", "files_done": i + 1, "files_total": len(batch)}
    _write(lib.catalog_dir / JOURNAL, [])
    return report


def _write(journal: Path, entries: list[dict]) -> None:
    with atomic_path(journal) as tmp:
        tmp.write_text(json.dumps({"written": time.time(), "renames": entries}, indent=1), encoding="utf-8")
