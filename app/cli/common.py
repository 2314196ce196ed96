"""What the library commands (index, search, similar, tags) share: path arguments, the catalog check, and
what opening a library repaired, said on standard error."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

MODEL_HELP = "retrieval model: a registry name or a .safetensors path (default: the default retrieval model)"


def path_arg(text: str) -> Path:
    """A file or folder argument: an empty one is refused (as '.' it would be the working folder: an unset
    `"$LIBRARY"` would index, search or tag whatever folder the command was typed in)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path (an unset variable?); give a file or folder")
    return Path(text)


def text_path_arg(text: str) -> str:
    """`path_arg` for the arguments kept as text ('-' meaning standard input or output)."""
    return str(path_arg(text)) if text != "-" else text


def require_catalog(library: Path) -> None:
    """`library` is a folder that was indexed: opening one that never was would make an empty catalog in it (and
    then find nothing there), so say what to do instead."""
    from app.services.library import catalog
    from app.services.library.records import LibraryError

    if not library.is_dir():
        raise ValueError(f"{library}: not a folder")
    try:
        found = catalog.existing_catalog(library)
    except LibraryError as e:  # a folder that cannot be entered
        raise ValueError(str(e)) from None
    if found is None:
        raise ValueError(f"{library} has not been indexed yet; run `earshot index {library}` first")


def print_events(library: Any, as_json: bool = False) -> None:  # noqa: ANN401 - a Library
    """What opening a library had to repair (a damaged catalog: what was set aside, kept, restored and lost; a
    rebuilt index) and failed writes, on standard error: a repair is never silent. as_json (search and similar,
    whose standard output is a list): the repair also as one JSON line {"repair": {...}} (`repair_fields`)."""
    for event in library.events:
        print(f"library: {event}", file=sys.stderr)
    if as_json and library.repair is not None:
        print(json.dumps(repair_fields(library)), file=sys.stderr)


def repair_fields(library: Any) -> dict[str, Any]:  # noqa: ANN401 - a Library
    """{"repair": what salvaging a damaged catalog set aside, kept, restored and lost} for JSON; {} if nothing."""
    return {"repair": library.repair.as_dict()} if library.repair is not None else {}
