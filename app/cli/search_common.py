"""What `earshot search` and `earshot similar` share: their parser and flags (library, model, -k, filters),
the search session they open, the --folder check, and the answer printed as a table or JSON."""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.cli.common import MODEL_HELP, path_arg, print_events, require_catalog
from app.services.search.query import MAX_QUERY_CHARS  # stdlib only: `earshot --help` stays fast
from core.config import number
from core.display import printable

if TYPE_CHECKING:
    from app.services.search.answer import SearchAnswer

MAX_FILTER_RATE = 2**32 - 1  # Hz: a WAV header's sample-rate field
MAX_CHANNELS = 65_535  # a WAV header's channel-count field

OUTPUT_HELP = f"""output:
  plain text: one result per line; characters that would break a line or a terminal in a file name are
  escaped (\\n, \\t, \\xNN for control characters and for bytes that are not UTF-8, \\\\ for a backslash).
  --json (and --queries): every string is valid Unicode. "path" is the file's path as text; when the name
  is not valid UTF-8, "path" shows the undecodable bytes as U+FFFD and "path_bytes" holds the exact bytes
  in base64: open that one. --queries prints JSON lines {{"query", "line", "results": [...]}}.
  a query over {MAX_QUERY_CHARS:,} characters is searched by its first {MAX_QUERY_CHARS:,}: said on standard error,
  with --json also as one JSON line {{"query_shortened": {{"chars", "kept"}}}} there; each --queries line
  has "query_shortened" (null when the whole query was searched).
  a damaged catalog repaired on opening: what was set aside, kept, restored and lost is said on standard
  error ("library: ..."), with --json also as one JSON line {{"repair": {{...}}}} there."""


def new_parser(sub: Any, name: str, what: str) -> argparse.ArgumentParser:  # noqa: ANN401 - argparse internals
    """The subcommand's parser, with the output notes as its epilog; the command adds its own arguments first."""
    return sub.add_parser(name, help=what, description=what + ".", epilog=OUTPUT_HELP,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def add_library_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--library", type=path_arg, action="append", default=None, metavar="FOLDER",
                   help="the (indexed) library folder, or a library location's name (`earshot locations`); "
                        "repeat it to search several together: their best results, each saying where it is")
    p.add_argument("--set", dest="location_set", default=None, metavar="NAME",
                   help="search a saved set of library locations (`earshot locations save-set`)")
    p.add_argument("--model", default=None, help=MODEL_HELP)
    p.add_argument("-k", type=result_count, default=10,
                   help="number of results, at least 1 (default 10; more than the library holds gives all)")


def add_filter_arguments(p: argparse.ArgumentParser) -> None:
    """--names-weight, the filters and --json."""
    p.add_argument("--names-weight", type=unit_interval, default=None, metavar="W",
                   help="the names' share of the fused score, 0..1 (search: default the tuned weight; similar: "
                        "default 0 = sound only, more adds how alike the names and tags are)")
    p.add_argument("--min-duration", type=number(float, low=0), default=None, metavar="SECONDS")
    p.add_argument("--max-duration", type=number(float, low=0), default=None, metavar="SECONDS")
    p.add_argument("--folder", default=None, help="only this folder (relative to the library) and below")
    p.add_argument("--format", dest="formats", action="append", default=None, metavar="EXT",
                   help="only files of this format (extension, e.g. wav, flac); repeatable")
    p.add_argument("--min-sample-rate", type=number(int, low=1, high=MAX_FILTER_RATE), default=None, metavar="HZ")
    p.add_argument("--max-sample-rate", type=number(int, low=1, high=MAX_FILTER_RATE), default=None, metavar="HZ")
    p.add_argument("--channels", type=number(int, low=1, high=MAX_CHANNELS), default=None, metavar="N",
                   help="only files with N channels")
    p.add_argument("--favourites", action="store_true", help="only files marked as favourites")
    p.add_argument("--category", default=None, metavar="UCS",
                   help="only files whose sound was heard as this UCS category (e.g. DOORS, 'dirt and sand'), "
                        "confidently enough to show it")
    p.add_argument("--json", action="store_true", help="print JSON (see below for file names)")


def result_count(text: str) -> int:
    """-k: a whole number >= 1 (argparse turns the ArgumentTypeError into a usage message, exit code 2)."""
    try:
        k = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number of results, got {text!r}") from None
    if k < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {k}")
    return number(int, low=1)(text)  # and fits 64 bits (more than the library holds gives all)


def unit_interval(text: str) -> float:
    """--names-weight: a number from 0 to 1."""
    try:
        w = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number from 0 to 1, got {text!r}") from None
    if not 0.0 <= w <= 1.0:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1, got {w}")
    return w


def filters(args: argparse.Namespace) -> Any:  # noqa: ANN401 - a SearchFilters
    """The filters of the arguments; one that can match no file at all is a usage error, not "no results"."""
    from app.services.library.records import SearchFilters

    for what, low, high in (("duration", args.min_duration, args.max_duration),
                            ("sample-rate", args.min_sample_rate, args.max_sample_rate)):
        if low is not None and high is not None and low > high:
            raise ValueError(f"--min-{what} {low:g} is above --max-{what} {high:g}: no file could match")
    if args.formats is not None and not all(f.strip(". ") for f in args.formats):
        raise ValueError("--format: give an extension such as wav or flac (got an empty one)")
    return SearchFilters(args.min_duration, args.max_duration, args.folder, formats=args.formats,
                         min_sample_rate=args.min_sample_rate, max_sample_rate=args.max_sample_rate,
                         channels=args.channels, favourites_only=args.favourites,
                         category=shown_category_arg(args.category) if args.category is not None else None)


def shown_category_arg(text: str) -> str:
    """--category: a UCS category that Earshot shows (the others' held-out precision was too low)."""
    from app.services.library.categories import showable
    from app.services.library.names import ucs_category

    category, shown = ucs_category(text), showable()
    if category not in shown:
        raise ValueError(f"--category: {category} is not shown: its sounds were not recognised precisely enough "
                         f"on libraries held out from the study (docs/categories.md); shown: "
                         f"{', '.join(sorted(shown)) or 'none (no category mapping installed)'}")
    return category


def resolve_libraries(args: argparse.Namespace) -> None:
    """args.locations: the libraries to search (--library folders or location names, --set), in order, each
    once; args.library: the first (the commands that take one read it)."""
    from app.services.library.locations import Location, Locations

    saved = Locations.load()
    if saved.problem:
        print(f"earshot: {saved.problem}", file=sys.stderr)
    wanted: list[Location] = []
    for value in args.library or []:
        known = saved.find(value)
        if value.is_dir():
            wanted.append(known if known is not None and known.path == Path(os.path.abspath(value))
                          else Location(value.resolve().name or str(value), value))
        elif known is not None:
            wanted.append(known)
        else:
            names = ", ".join(loc.name for loc in saved.locations) or "none yet"
            raise ValueError(f"--library {printable(value)}: no such folder, nor a library location of that name "
                             f"(locations: {names})")
    if getattr(args, "location_set", None):
        wanted += saved.of_set(args.location_set)
    if not wanted:
        raise ValueError("give --library FOLDER (repeat it to search several libraries together) or --set NAME")
    args.locations = unique_locations(wanted)
    args.library = args.locations[0].path


def unique_locations(wanted: list[Any]) -> list[Any]:  # noqa: ANN401 - Locations
    """Each folder once, and names unique (a second "sfx" becomes "sfx (2)")."""
    from app.services.library.locations import Location

    out: list[Location] = []
    for loc in wanted:
        if any(os.path.abspath(o.path) == os.path.abspath(loc.path) for o in out):
            continue
        name, n = loc.name, 2
        while any(o.name == name for o in out):
            name, n = f"{loc.name} ({n})", n + 1
        out.append(Location(name, Path(loc.path)))
    return out


def open_search(args: argparse.Namespace, text_only: bool) -> Any:  # noqa: ANN401 - a SearchSession / LibrarySet
    from app.services.search.embedder import LazyEmbedder, load_query_embedder

    if not hasattr(args, "locations"):
        resolve_libraries(args)
    for loc in args.locations:
        require_catalog(loc.path)
    # text queries need only the text tower (NumPy, no torch import): the command starts several times faster
    # similar on a library file reads its stored vector: the sound model loads only if audio must be embedded
    embedder = load_query_embedder(args.model) if text_only else LazyEmbedder(args.model)
    if len(args.locations) > 1:
        return _open_set(args, embedder, text_only)
    return _open_one(args, args.library, embedder, text_only)


def _open_set(args: argparse.Namespace, embedder: Any, text_only: bool) -> Any:  # noqa: ANN401 - a LibrarySet
    from app.services.search.library_set import LibrarySet

    parts = []
    try:
        for loc in args.locations:
            parts.append((loc.name, _open_one(args, loc.path, embedder, text_only, alone=False)))
    except BaseException:
        for _, session in parts:
            session.close()
        raise
    found = LibrarySet(parts)
    if found.indexed_count() == 0 and (not text_only or getattr(args, "mode", "both") == "sound"):
        found.close()
        raise ValueError(f"none of the libraries has sounds indexed with {embedder.name}; run `earshot index` on "
                         "them first")
    return found


def _open_one(args: argparse.Namespace, library: Path, embedder: Any, text_only: bool,  # noqa: ANN401
              alone: bool = True) -> Any:  # noqa: ANN401 - a SearchSession
    from app.services.search.session import SearchSession

    session = SearchSession.open(library, embedder)
    if session.indexed_count() == 0:  # its names may still be searched (the text channel has no model)
        message = (f"{library} has no sounds indexed with {embedder.name}; run `earshot index {library}` "
                   "first")
        if alone and (not text_only or getattr(args, "mode", "both") == "sound"):  # nothing to answer from
            print_events(session.library, as_json=args.json)  # what opening repaired is said all the same
            session.close()
            raise ValueError(message)
        print(f"earshot: {message}", file=sys.stderr)
    # only an index run looks at the folders again: when they are back, their files stay hidden until then
    hidden = session.library.files.unavailable_count()
    if hidden:
        print(f"earshot: {hidden} catalogued {'file is' if hidden == 1 else 'files are'} hidden: under folders "
              f"that could not be listed when {printable(library)} was last indexed; once they are back, "
              f"`earshot index {printable(library)}` shows them again", file=sys.stderr)
    return session


def each_session(session: Any) -> list[Any]:  # noqa: ANN401 - a SearchSession / LibrarySet
    """The sessions of a set, or the one session."""
    return list(session.sessions) if hasattr(session, "sessions") else [session]


def print_all_events(session: Any, as_json: bool) -> None:  # noqa: ANN401 - a SearchSession / LibrarySet
    for one in each_session(session):
        print_events(one.library, as_json=as_json)


def check_folder(folder: str | None, session: Any) -> None:  # noqa: ANN401 - a SearchSession
    """--folder names a folder of the library that holds catalogued sounds: a mistyped one, or one outside the
    library, would otherwise answer "no results" as if the library had nothing for the query."""
    if not folder:
        return
    if hasattr(session, "sessions"):  # a set: the folder starts with a location's name
        head, _, rest = folder.strip("/").partition("/")
        if head not in session.names:
            raise ValueError(f"--folder {printable(folder)}: with several libraries, start it with a location's "
                             f"name ({', '.join(session.names)})")
        check_folder(rest, session.sessions[session.names.index(head)])
        return
    library = session.library
    key = library.files.key(folder)
    if key == b".." or key.startswith(b"../"):
        raise ValueError(f"--folder {printable(folder)} is not inside the library {printable(library.root)}")
    folders = session.folders()
    if key in (b"", b".") or os.fsdecode(key) in folders:
        return
    if (library.root / os.fsdecode(key)).is_dir():
        raise ValueError(f"--folder {printable(folder)} holds no indexed sounds; run `earshot index "
                         f"{printable(library.root)}` if it has new ones")
    close = difflib.get_close_matches(os.fsdecode(key), folders, n=1)
    hint = f"did you mean {printable(close[0])}?" if close else "folders are relative to the library"
    raise ValueError(f"--folder {printable(folder)}: no such folder in the library; {hint}")


def answer_command(args: argparse.Namespace, run: Callable[[Any, Any], SearchAnswer], text_only: bool = False
                   ) -> int:
    """Open the library, answer with `run(session, filters)`, print the answer (a table, or JSON with --json)."""
    from app.services.library.records import LibraryError
    from app.services.search.search_jobs import hit_dict
    from core.audio import AudioError

    search_filters = filters(args)
    try:
        session = open_search(args, text_only)
        try:
            check_folder(args.folder, session)
            answer = run(session, search_filters)
        finally:
            print_all_events(session, as_json=args.json)
            session.close()
    except (LibraryError, AudioError) as e:  # a message, not a traceback (AudioError: a bad query file)
        raise ValueError(str(e)) from None
    said = shortened(answer)
    if said is not None:  # on stderr in both forms: the table or the JSON list stays as it was
        print(f"earshot: {shortened_note(said)}", file=sys.stderr)
        if args.json:
            print(json.dumps({"query_shortened": said}), file=sys.stderr)
    if args.json:  # a list of hits, as before; the query's notes go to stderr (--queries lines carry them)
        print(json.dumps([hit_dict(h) for h in answer.hits], indent=2))
        for note in search_notes(answer):
            print(f"earshot: {note}", file=sys.stderr)
        return 0
    _print_table(args, answer)
    return 0


def _print_table(args: argparse.Namespace, answer: SearchAnswer) -> None:
    for note in search_notes(answer):
        print(note)
    hits = answer.hits
    if not hits:
        held = " and ".join(f'"{p}"' for p in answer.required_phrases)
        print("no results" + ("; --any-length also lists sounds of other lengths"
                              if getattr(args, "any_length", True) is False else "")
              + (f"; only files whose name, folder or tags hold {held} can match" if held else ""))
    else:
        print(f"{'score':>7}  {'duration':>8}  " + ("location: path" if any(h.location for h in hits) else "path"))
    for h in hits:
        why = f"  [{', '.join(h.match.matched_terms)}]" if h.match is not None and h.match.matched_terms else ""
        if h.match is not None and h.match.found_by == "like":
            why = f"  [sounds like {printable(h.match.like_path)}]"
        elif h.match is not None and h.match.found_by == "category":
            why = f"  [heard as {h.match.category}]"
        tags = f"  #{' #'.join(h.user_tags)}" if h.user_tags else ""
        where = f"{printable(h.location)}: " if h.location else ""
        print(f"{h.score:7.3f}  {h.duration:7.1f}s  {where}{'*' if h.favourite else ''}{printable(h.path)}{why}{tags}")


def search_notes(answer: SearchAnswer) -> list[str]:
    """What a search says about its results as a whole: a corrected query, no good match."""
    fixed = answer.did_you_mean
    return ([f"did you mean: {fixed}"] if fixed else []) + (["no good match: even the best results look unrelated"]
                                                            if answer.hits and answer.no_good_match else [])


def shortened(answer: SearchAnswer) -> dict[str, int] | None:
    """{"chars": the query's length, "kept": how many were searched} when it was cut to the limit, else None."""
    length = answer.shortened_from
    return None if length is None else {"chars": length, "kept": MAX_QUERY_CHARS}


def shortened_note(said: dict[str, int]) -> str:
    return f"the query is {said['chars']:,} characters long; only its first {said['kept']:,} were searched"
