"""`earshot duplicates --library L [FILE]`: the library's groups of duplicate sounds (the same bytes, or the same
recording in another format, sample rate, bit depth, trimmed a little or at another level), or FILE's."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from app.cli.common import MODEL_HELP, path_arg, print_events, require_catalog
from core.display import printable


def add_parser(sub: Any, argv: Sequence[str]) -> None:  # noqa: ANN401 - argparse internals
    p = sub.add_parser("duplicates", help="find duplicate sounds in a library",
                       description="Groups of files that hold the same sound: the same bytes, or the same recording "
                                   "in another form (found by the stored sound vectors, then checked on the audio). "
                                   "Nothing is deleted: the GUI's Find duplicates moves files to the trash.")
    p.add_argument("file", type=path_arg, nargs="?", default=None, help="only this library file's duplicates")
    p.add_argument("--library", type=path_arg, action="append", default=None, metavar="FOLDER",
                   help="the (indexed) library folder, or a library location's name; repeat it to find copies "
                        "across several")
    p.add_argument("--set", dest="location_set", default=None, metavar="NAME",
                   help="the libraries of a saved set of locations (`earshot locations save-set`)")
    p.add_argument("--model", default=None, help=MODEL_HELP)
    p.add_argument("--json", action="store_true", help="print JSON: a list of groups")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from app.cli.search_common import resolve_libraries
    from app.services.jobs import run_in_terminal
    from app.services.search.embedder import LazyEmbedder
    from app.services.search.library_set import LibrarySet, each_session
    from app.services.search.session import SearchSession

    resolve_libraries(args)
    for loc in args.locations:
        require_catalog(loc.path)
    embedder = LazyEmbedder(args.model)  # the stored vectors: no model loaded
    session: Any = SearchSession.open(args.library, embedder) if len(args.locations) == 1 else \
        LibrarySet.open(args.locations, embedder)
    try:
        for one in each_session(session):
            print_events(one.library)
            if one.indexed_count() == 0:
                raise ValueError(f"{printable(one.root)} has no sounds indexed with {embedder.name}; run "
                                 f"`earshot index {printable(one.root)}` first")
        groups = run_in_terminal(session.duplicates_job(args.file), desc="duplicates",
                                 describe=lambda p: str(p.get("message", "")))  # words, not the job's fields
    finally:
        session.close()
    if args.json:
        print(json.dumps([group_dict(g) for g in groups], indent=1))
        return 0
    if not groups:
        print("no duplicates found")
    for g in groups:
        how = "the same bytes" if g.identical else f"the same sound (audio match {g.match:.3f})"
        print(f"{len(g.files)} files, {how}:")
        for f in g.files:
            print(f"  {f.duration:7.2f}s  {f.sample_rate / 1000:g} kHz  {printable(f.rel_path)}")
    return 0


def group_dict(g: Any) -> dict[str, Any]:  # noqa: ANN401 - a DuplicateGroup
    from app.services.search.search_jobs import path_fields

    return {"identical": g.identical, "match": round(g.match, 4),
            "files": [{**path_fields(f.rel_path), "duration": round(f.duration, 3), "sample_rate": f.sample_rate,
                       "channels": f.channels, "size": f.size} for f in g.files]}
