"""The library commands of `earshot`: index, search, similar, tags (the Search tab, headless).

`add_library_parsers(sub)` adds their sub-commands to the parser `app.cli` builds; each handler takes the
parsed arguments and returns the exit code (user-facing problems are raised as ValueError: `app.cli.main`
prints them as one line, exit code 2).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.services.search.query import MAX_QUERY_CHARS, Query, parse  # stdlib only: `earshot --help` stays fast
from core.config import number
from core.display import printable

if TYPE_CHECKING:
    from app.services.search.answer import SearchAnswer

MAX_FILTER_RATE = 2**32 - 1  # Hz: a WAV header's sample-rate field
MAX_CHANNELS = 65_535  # a WAV header's channel-count field
LONG_FILE_WINDOWS = 6  # = library.embedding.LONG_FILE_WINDOWS (a test keeps them equal; importing it costs numpy)


def add_library_parsers(sub: Any) -> None:  # noqa: ANN401 - argparse internals
    """The index, search, similar and tags sub-commands."""
    model_help = "retrieval model: a registry name or a .safetensors path (default: the default retrieval model)"
    p = sub.add_parser("index", help="index a sound library folder for search (only new and changed files)")
    p.add_argument("folder", type=path_arg)
    p.add_argument("--model", default=None, help=model_help)
    p.add_argument("--retry-failed", action="store_true", help="read files that failed before again")
    p.add_argument("--rehash", action="store_true",
                   help="hash every file again, not only those whose size or modification time changed "
                        "(finds edits that kept both)")
    p.add_argument("--all-windows", action="store_true",
                   help=f"embed every window of a long file (default: {LONG_FILE_WINDOWS} windows spread evenly over "
                        "it, a fraction of the time); applies to files indexed from now on")
    p.add_argument("--device", default="auto", help="under torchrun: each process embeds on its own GPU")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_index)

    for name, what in (("search", "find sounds in a library by a description"),
                       ("similar", "find sounds in a library that sound like a file")):
        p = sub.add_parser(name, help=what, description=what + ".", epilog=OUTPUT_HELP,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        if name == "search":
            p.add_argument("text", nargs="?", default=None,
                           help="a description, e.g. 'a door creaks open'; '-' (or none, with standard input "
                                "piped) reads one query per line from standard input")
            p.add_argument("--queries", metavar="FILE", type=text_path_arg, default=None,
                           help="answer many queries in one call: one per line of FILE ('-': standard input); "
                                "prints JSON lines, one object per query")
        else:
            p.add_argument("file", type=path_arg, nargs="?", default=None,
                           help="an audio file (in the library or not); or --record")
            p.add_argument("--any-length", action="store_true",
                           help="also sounds much longer or shorter than the file (by default only those from a "
                                "quarter to four times its length, plus a second: music and ambiences do not "
                                "crowd out the one-shots like a one-shot)")
            _add_record_arguments(p)
        p.add_argument("--library", type=path_arg, required=True, help="the (indexed) library folder")
        p.add_argument("--model", default=None, help=model_help)
        p.add_argument("-k", type=result_count, default=10,
                       help="number of results, at least 1 (default 10; more than the library holds gives all)")
        if name == "search":
            p.add_argument("--mode", choices=("names", "sound", "both"), default="both",
                           help="rank by what files are called and tagged (names), by how they sound (sound), or "
                                "both fused (default)")
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
        p.add_argument("--json", action="store_true", help="print JSON (see below for file names)")
        p.set_defaults(handler=cmd_search if name == "search" else cmd_similar)

    p = sub.add_parser("tags", help="add, remove, export or import your own tags and favourites",
                       description="Your tags and favourites, stored in the library's catalog and searched with "
                                   "the names. Tags are separated by ';' in the CSV (columns path,tags,favourite).")
    tag_sub = p.add_subparsers(dest="tags_command", metavar="ACTION", required=True)
    for action, what in (("add", "add tags to files"), ("remove", "remove tags from files")):
        t = tag_sub.add_parser(action, help=what, description=what + ".")
        t.add_argument("files", nargs="+", type=path_arg, help="files in the library (relative to it, or absolute)")
        t.add_argument("--tag", "-t", dest="tags", action="append", required=True, help="a tag; repeatable")
        t.add_argument("--library", type=path_arg, required=True)
        t.set_defaults(handler=cmd_tags)
    for action, what in (("favourite", "mark files as favourites"), ("unfavourite", "unmark favourites")):
        t = tag_sub.add_parser(action, help=what, description=what + ".")
        t.add_argument("files", nargs="+", type=path_arg, help="files in the library (relative to it, or absolute)")
        t.add_argument("--library", type=path_arg, required=True)
        t.set_defaults(handler=cmd_tags)
    t = tag_sub.add_parser("export", help="write every file's tags and favourite mark as CSV")
    t.add_argument("--library", type=path_arg, required=True)
    t.add_argument("-o", "--output", type=text_path_arg, default="-",
                   help="CSV file to write ('-', the default: standard output)")
    t.set_defaults(handler=cmd_tags)
    t = tag_sub.add_parser("import", help="merge tags and favourites from a CSV (path,tags,favourite)")
    t.add_argument("csv", type=path_arg)
    t.add_argument("--library", type=path_arg, required=True)
    t.add_argument("--json", action="store_true", help="print JSON")
    t.set_defaults(handler=cmd_tags)
    _add_tags_write_parser(tag_sub)


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


def path_arg(text: str) -> Path:
    """A file or folder argument: an empty one is refused (as '.' it would be the working folder: an unset
    `"$LIBRARY"` would index, search or tag whatever folder the command was typed in)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path (an unset variable?); give a file or folder")
    return Path(text)


def text_path_arg(text: str) -> str:
    """`path_arg` for the arguments kept as text ('-' meaning standard input or output)."""
    return str(path_arg(text)) if text != "-" else text


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


def cmd_index(args: argparse.Namespace) -> int:
    from app.services.jobs import run_in_terminal
    from app.services.library.library import busy_refusal
    from app.services.library.records import LibraryError
    from app.services.search.embedder import load_embedder
    from app.services.search.search_jobs import summarize
    from app.services.search.session import SearchSession
    from core import distributed as ddp

    if ddp.launched_by_torchrun():  # one shard of the files per process, merged by rank 0
        return _sharded_index(args)
    busy = busy_refusal(args.folder)
    if busy:  # refused at once, not after loading the model
        raise ValueError(busy)
    embedder = load_embedder(args.model)
    try:
        session = SearchSession.open(args.folder, embedder)
        windows = {"max_windows": 0} if args.all_windows else {}
        try:
            report = run_in_terminal(session.index_job(retry_failed=args.retry_failed, rehash=args.rehash, **windows),
                                     desc="index", disable=True if args.json else None)
        finally:
            print_events(session.library)
            session.close()
    except LibraryError as e:  # a broken model, a full disk, a damaged catalog: a message, not a traceback
        raise ValueError(str(e)) from None
    _print_index_summary(summarize(report) | {"touched": report.touched, "unavailable": report.unavailable}
                         | repair_fields(session.library), args.json, args.folder)
    return 0


def _sharded_index(args: argparse.Namespace) -> int:
    from app.services.jobs import run_in_terminal
    from app.services.library.records import LibraryError
    from app.services.library.sharded import sharded_index_job
    from app.services.search.embedder import load_embedder
    from app.services.search.search_jobs import summarize
    from core import distributed as ddp
    from core.device import resolve_device

    ctx, device = ddp.setup(resolve_device(getattr(args, "device", "auto")))
    embedder = load_embedder(args.model, device=str(device))
    from app.services.search.embedder import default_text_encoder

    text_encoder = default_text_encoder() if ctx.is_main else None
    try:
        out = run_in_terminal(sharded_index_job(args.folder, embedder, ctx, text_encoder=text_encoder),
                              desc=f"index (rank {ctx.rank})",
                              disable=True if args.json or not ctx.is_main else None)
    except LibraryError as e:
        raise ValueError(str(e)) from None
    finally:
        ddp.teardown(ctx)
    if ctx.is_main:
        report, shards = out
        _print_index_summary(summarize(report) | {"sharded": shards}, args.json, args.folder)
    return 0


def _print_index_summary(summary: dict[str, Any], as_json: bool, folder: Path) -> None:
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    if not summary["files"] and not summary["removed"] and not summary["scan_errors"]:  # a wrong folder, most likely
        from core.audio import SUPPORTED_EXTENSIONS

        print(f"{printable(str(folder))}: no audio files found (looked for "
              f"{', '.join(sorted(SUPPORTED_EXTENSIONS))}, in every subfolder)", file=sys.stderr)
    print(f"{summary['files']} files: {summary['embedded']} embedded, {summary['moved']} moved, "
          f"{summary['copied']} copied, {summary['unchanged']} unchanged, {summary['removed']} removed, "
          f"{summary['failed']} failed")
    if summary.get("touched"):
        print(f"{summary['touched']} files had a new modification time or were re-hashed: content unchanged")
    if summary.get("unavailable"):
        print(f"{summary['unavailable']} catalogued files are under folders that cannot be listed now: kept, "
              "hidden from results until the folders are back", file=sys.stderr)
    print(f"{summary['audio_seconds']:.1f} s of audio in {summary['elapsed_s']:.1f} s "
          f"({summary['x_realtime']:.1f}x real time) with {summary['model']}")
    for f in summary["failures"]:
        print(f"failed: {f['error']}", file=sys.stderr)
    if summary.get("texts"):
        print(f"names and tags read for {summary['texts']} files ({summary['text_vectors']} sentences embedded)")
    for t in summary.get("tag_problems", []):
        print(f"tags: {printable(t['path'])}: {t['error']} (indexed by name and sound)", file=sys.stderr)
    for e in summary["scan_errors"]:
        print(f"scan: {e}", file=sys.stderr)
    if "sharded" in summary:
        sh = summary["sharded"]
        print(f"sharded over {sh['processes']} processes: {sh['planned']} files planned, {sh['merged']} merged "
              "into the catalog before the final pass")
        for f in sh["failures"]:
            print(f"failed: {f['error']}", file=sys.stderr)


def cmd_search(args: argparse.Namespace) -> int:
    queries = _queries(args)
    if queries is None:
        query = _checked_query(args.text)  # parsed once: the search reads this Query
        return _search_command(args, lambda s, f: s.search(query, args.k, f, mode=args.mode,
                                                           names_weight=args.names_weight), text_only=True)
    return _search_many(args, queries)


def _checked_query(text: str) -> Query:
    """The query given as the argument, parsed, when it has something to look for: an empty one, one of only
    punctuation or emoji, or one of only exclusions would answer "no results" as if the library had nothing for
    it. (The Search tab asks the same service on every keystroke, where an empty answer is right.)"""
    query = parse(text)
    if not query.empty:
        return query
    if query.shortened_from is not None:  # the words, if any, come after the part that is read
        raise ValueError(f"search: the first {MAX_QUERY_CHARS:,} characters of the query (of "
                         f"{query.shortened_from:,}) hold no words to search for; put the words first")
    if not text.strip():
        raise ValueError("search: the description is empty; say what to look for, e.g. 'a door creaks'")
    if query.excluded:
        raise ValueError(f"search: {printable(text)!r} only excludes; add words to look for, e.g. 'door -metal'")
    raise ValueError(f"search: {printable(text)!r} has no words to search for (letters or digits)")


def cmd_similar(args: argparse.Namespace) -> int:
    if args.record is None:
        if args.file is None:
            raise ValueError("similar: give an audio file, or --record SECONDS to record one")
        if args.save is not None:
            raise ValueError("similar: --save keeps a recording: use it with --record")
        return _search_command(args, lambda s, f: s.similar(args.file.resolve(), args.k, f,
                                                            names_weight=args.names_weight,
                                                            any_length=args.any_length))
    if args.file is not None:
        raise ValueError("similar: give an audio file or --record, not both")
    from app.services.search.recording import check_seconds

    check_seconds(args.record)
    _require_catalog(args.library)  # before asking anyone to make a sound
    import tempfile

    with tempfile.TemporaryDirectory(prefix="earshot-recording-") as tmp:
        query = _record_query(args.record, args.save, Path(tmp))
        return _search_command(args, lambda s, f: s.similar(query, args.k, f, names_weight=args.names_weight,
                                                            any_length=args.any_length))


# ---------------------------------------------------------------------------------- similar --record


def _add_record_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--record", type=number(float, low=0, low_exclusive=True), default=None, metavar="SECONDS",
                   help="record SECONDS (0.2 to 30) from the default microphone, trim the silence around "
                        "the sound, and find what sounds like it")
    p.add_argument("--save", type=path_arg, default=None, metavar="FILE",
                   help="with --record: keep the (trimmed) recording as a WAV file")


def _record_query(seconds: float, save: Path | None, tmp: Path) -> Path:
    """Record from the microphone (saying on standard error when to make the sound); the trimmed WAV's path."""
    from app.services.search.recording import check_seconds, default_name, record_job
    from core.audio import AudioError

    check_seconds(seconds)
    if save is not None and not save.parent.is_dir():
        raise ValueError(f"--save {save}: folder {save.parent} does not exist")
    print(f"earshot: opening the microphone to record {seconds:g} s…", file=sys.stderr, flush=True)
    job = record_job(seconds)
    announced = False
    try:
        while True:
            progress = next(job)
            if progress.get("listening") and not announced:
                print(f"earshot: recording {seconds:g} s: make the sound now", file=sys.stderr, flush=True)
                announced = True
    except StopIteration as done:
        recording = done.value
    except AudioError as e:  # no microphone, a device that failed, only silence: a message, exit code 2
        raise ValueError(f"similar --record: {e}") from None
    finally:
        job.close()
    if recording.problem:
        print(f"earshot: the recording ended early: {recording.problem}", file=sys.stderr)
    path = recording.save(save if save is not None else tmp / default_name())
    kept = f"saved to {path}" if save is not None else "not saved (--save FILE keeps it)"
    print(f"earshot: recorded {recording.duration:.1f} s of sound ({recording.recorded_seconds:.1f} s before "
          f"trimming the silence), {kept}", file=sys.stderr)
    return path


def _filters(args: argparse.Namespace) -> Any:  # noqa: ANN401 - a SearchFilters
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
                         channels=args.channels, favourites_only=args.favourites)


def cmd_tags(args: argparse.Namespace) -> int:
    from app.services.library.library import Library
    from app.services.library.records import LibraryError
    from app.services.search.tag_editor import TagEditor

    _require_catalog(args.library)
    try:
        with Library.open(args.library) as lib:
            print_events(lib)
            editor = TagEditor(lib)
            return _tags_action(args, editor)
    except LibraryError as e:
        raise ValueError(str(e)) from None


def _tags_action(args: argparse.Namespace, editor: Any) -> int:  # noqa: ANN401 - a TagEditor
    action = args.tags_command
    if action == "export":
        if args.output == "-":
            n = editor.export_csv(sys.stdout)
        else:
            n = _export_to_file(editor, args.output)
        print(f"{n} files with tags or favourites", file=sys.stderr)
        return 0
    if action == "import":
        r = editor.import_csv(args.csv)
        if args.json:
            print(json.dumps({"rows": r.rows, "files_changed": r.files, "tags_added": r.tags_added,
                              "unknown": [{"line": ln, "path": printable(p)} for ln, p in r.unknown],
                              "errors": [{"line": ln, "error": e} for ln, e in r.errors]}
                             | repair_fields(editor.library), indent=2))
        else:
            print(f"{r.rows} rows: {r.files} files changed, {r.tags_added} tags added")
        for line, path in r.unknown:
            print(f"{args.csv}:{line}: {printable(path) or '(empty path)'}: not in the library; row not applied",
                  file=sys.stderr)
        for line, error in r.errors:
            print(f"{args.csv}:{line}: {error}; row not applied", file=sys.stderr)
        return 1 if r.unknown or r.errors else 0
    ids, unknown = editor.file_ids(args.files)
    if unknown:
        raise ValueError(f"not in the library (index it first?): {', '.join(printable(u) for u in unknown)}")
    if action in ("favourite", "unfavourite"):
        editor.library.user_tags.set_favourite(ids, action == "favourite")
        print(f"{len(ids)} files {'marked' if action == 'favourite' else 'unmarked'}")
        return 0
    changed = (editor.add_tags if action == "add" else editor.remove_tags)(ids, args.tags)
    for given, spelled in editor.library.user_tags.library_spelling(args.tags).items():
        print(f"earshot: tag {printable(given)!r} is the library's {printable(spelled)!r} (tags ignore case); "
              f"{'added' if action == 'add' else 'removed'} as {printable(spelled)!r}", file=sys.stderr)
    print(f"{len(changed)} of {len(ids)} files changed")
    return 0


def _export_to_file(editor: Any, output: str) -> int:  # noqa: ANN401 - a TagEditor
    """Export the tags to the file `output` atomically: a failure (a full disk) leaves a file of that name as it
    was, never cut short."""
    from core.files import atomic_path

    try:
        with atomic_path(output) as tmp:
            with open(tmp, "w", encoding="utf-8", errors="surrogateescape", newline="") as fh:
                n = int(editor.export_csv(fh))
        return n
    except OSError as e:
        raise ValueError(f"{printable(output)}: could not write the tags ({e.strerror or e}); nothing written "
                         "(a file of that name is left as it was)") from None


def _queries(args: argparse.Namespace) -> list[tuple[int, str]] | None:
    """(line number, query) pairs for the many-queries mode, or None for one query given as an argument.

    Many queries come from --queries FILE, from '-' as the text, or from standard input when no text is given
    and standard input is not a terminal. Blank lines are skipped; `line` keeps the place in the input."""
    source = args.queries
    piped = sys.stdin is not None and not sys.stdin.isatty()
    if source is None and (args.text == "-" or (args.text is None and piped)):
        source = "-"
    if source is None:
        if args.text is None:
            raise ValueError("search: give a description, --queries FILE, or queries on standard input")
        return None
    if args.text not in (None, "-"):
        raise ValueError("search: give either a description or --queries, not both")
    try:
        if source == "-":
            raw = sys.stdin.buffer.read()
        else:
            with open(source, "rb") as f:
                raw = f.read()
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        where = "standard input" if source == "-" else source
        raise ValueError(f"{where}: queries must be UTF-8 text (byte {e.start} is not)") from None
    queries = [(i, q.strip()) for i, q in enumerate(text.splitlines(), start=1) if q.strip()]
    if not queries:
        raise ValueError(f"{'standard input' if source == '-' else source}: no queries (one per line)")
    return queries


def _require_catalog(library: Path) -> None:
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


def _open_search(args: argparse.Namespace, text_only: bool) -> Any:  # noqa: ANN401 - a SearchSession
    from app.services.search.embedder import LazyEmbedder, load_query_embedder
    from app.services.search.session import SearchSession

    _require_catalog(args.library)
    # text queries need only the text tower (NumPy, no torch import): the command starts several times faster
    # similar on a library file reads its stored vector: the sound model loads only if audio must be embedded
    embedder = load_query_embedder(args.model) if text_only else LazyEmbedder(args.model)
    session = SearchSession.open(args.library, embedder)
    if session.indexed_count() == 0:  # its names may still be searched (the text channel has no model)
        message = (f"{args.library} has no sounds indexed with {embedder.name}; run `earshot index {args.library}` "
                   "first")
        if not text_only or getattr(args, "mode", "both") == "sound":  # nothing this command could answer from
            print_events(session.library, as_json=args.json)  # what opening repaired is said all the same
            session.close()
            raise ValueError(message)
        print(f"earshot: {message}", file=sys.stderr)
    # only an index run looks at the folders again: when they are back, their files stay hidden until then
    hidden = session.library.files.unavailable_count()
    if hidden:
        print(f"earshot: {hidden} catalogued {'file is' if hidden == 1 else 'files are'} hidden: under folders "
              f"that could not be listed when {printable(args.library)} was last indexed; once they are back, "
              f"`earshot index {printable(args.library)}` shows them again", file=sys.stderr)
    return session


def _check_folder(folder: str | None, session: Any) -> None:  # noqa: ANN401 - a SearchSession
    """--folder names a folder of the library that holds catalogued sounds: a mistyped one, or one outside the
    library, would otherwise answer "no results" as if the library had nothing for the query."""
    if not folder:
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


def _search_command(args: argparse.Namespace, run: Callable[[Any, Any], SearchAnswer], text_only: bool = False
                    ) -> int:
    from app.services.library.records import LibraryError
    from app.services.search.search_jobs import hit_dict
    from core.audio import AudioError

    filters = _filters(args)
    try:
        session = _open_search(args, text_only)
        try:
            _check_folder(args.folder, session)
            answer = run(session, filters)
        finally:
            print_events(session.library, as_json=args.json)
            session.close()
    except (LibraryError, AudioError) as e:  # a message, not a traceback (AudioError: a bad query file)
        raise ValueError(str(e)) from None
    hits = answer.hits
    shortened = _shortened(answer)
    if shortened is not None:  # on stderr in both forms: the table or the JSON list stays as it was
        print(f"earshot: {_shortened_note(shortened)}", file=sys.stderr)
        if args.json:
            print(json.dumps({"query_shortened": shortened}), file=sys.stderr)
    if args.json:  # a list of hits, as before; the query's notes go to stderr (--queries lines carry them)
        print(json.dumps([hit_dict(h) for h in hits], indent=2))
        for note in _search_notes(answer):
            print(f"earshot: {note}", file=sys.stderr)
        return 0
    for note in _search_notes(answer):
        print(note)
    if not hits:
        held = " and ".join(f'"{p}"' for p in answer.required_phrases)
        print("no results" + ("; --any-length also lists sounds of other lengths"
                              if getattr(args, "any_length", True) is False else "")
              + (f"; only files whose name, folder or tags hold {held} can match" if held else ""))
    else:
        print(f"{'score':>7}  {'duration':>8}  path")
    for h in hits:
        why = f"  [{', '.join(h.match.matched_terms)}]" if h.match is not None and h.match.matched_terms else ""
        tags = f"  #{' #'.join(h.user_tags)}" if h.user_tags else ""
        print(f"{h.score:7.3f}  {h.duration:7.1f}s  {'*' if h.favourite else ''}{printable(h.path)}{why}{tags}")
    return 0


def _search_notes(answer: SearchAnswer) -> list[str]:
    """What a search says about its results as a whole: a corrected query, no good match."""
    fixed = answer.did_you_mean
    return ([f"did you mean: {fixed}"] if fixed else []) + (["no good match: even the best results look unrelated"]
                                                            if answer.hits and answer.no_good_match else [])


def _shortened(answer: SearchAnswer) -> dict[str, int] | None:
    """{"chars": the query's length, "kept": how many were searched} when it was cut to the limit, else None."""
    length = answer.shortened_from
    return None if length is None else {"chars": length, "kept": MAX_QUERY_CHARS}


def _shortened_note(shortened: dict[str, int]) -> str:
    return (f"the query is {shortened['chars']:,} characters long; only its first {shortened['kept']:,} were "
            "searched")


def _search_many(args: argparse.Namespace, queries: list[tuple[int, str]]) -> int:
    """One JSON line per query, written as each is answered (a pipe sees results while later ones run)."""
    from app.services.library.records import LibraryError
    from app.services.search.search_jobs import hit_dict

    filters = _filters(args)
    try:
        session = _open_search(args, text_only=True)
        try:
            _check_folder(args.folder, session)
            for line, query in queries:
                res = session.search(query, args.k, filters, mode=args.mode, names_weight=args.names_weight)
                shortened = _shortened(res)
                if shortened is not None:
                    print(f"earshot: line {line}: {_shortened_note(shortened)}", file=sys.stderr)
                print(json.dumps({"query": query, "line": line, "results": [hit_dict(h) for h in res],
                                  "did_you_mean": res.did_you_mean, "no_good_match": res.no_good_match,
                                  "query_shortened": shortened}), flush=True)
        finally:
            print_events(session.library, as_json=True)
            session.close()
    except LibraryError as e:
        raise ValueError(str(e)) from None
    except BrokenPipeError:  # the reader went away (`| head -3`): stop quietly, as other Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
    return 0


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


# --------------------------------------------------------------------------- tags write (issue 24, item 7)


def _add_tags_write_parser(tag_sub: Any) -> None:  # noqa: ANN401 - argparse internals
    t = tag_sub.add_parser(
        "write", help="write your tags into the audio files themselves (WAV INFO, Vorbis comments, ID3)",
        description="Write each file's tags into the file (WAV: LIST/INFO IKEY; FLAC/Ogg/Opus: Vorbis KEYWORDS; "
                    "MP3: ID3 TXXX:KEYWORDS), added to the keywords it holds. Each file is written as a hidden copy "
                    "that must decode to the same samples and read its tags back before it replaces the original; "
                    "a file that is read-only or changed since it was indexed is refused.")
    t.add_argument("files", nargs="*", type=path_arg, help="files in the library (default: every file with tags)")
    t.add_argument("--library", type=path_arg, required=True)
    t.add_argument("--description", metavar="TEXT", help="also write this description into the FILES named "
                   "(WAV: ICMT and the bext description; FLAC/Ogg: DESCRIPTION; MP3: COMM)")
    t.add_argument("--dry-run", action="store_true", help="only list what would be written")
    t.add_argument("--json", action="store_true", help="print JSON")
    t.set_defaults(handler=cmd_tags_write)


def cmd_tags_write(args: argparse.Namespace) -> int:
    from app.services.jobs import drain
    from app.services.library.library import Library
    from app.services.library.records import LibraryError
    from app.services.library.tag_writer import REFUSED, WRITTEN, write_library_tags

    _require_catalog(args.library)
    if args.description is not None and not args.files:
        raise ValueError("--description needs the files to describe (it is not written into every tagged file)")
    try:
        with Library.open(args.library) as lib:
            ids = [lib.files.id_of(p) for p in args.files]
            unknown = [printable(p) for p, i in zip(args.files, ids, strict=True) if i is None]
            if unknown:
                raise ValueError(f"not in the library (index it first?): {', '.join(unknown)}")
            report = drain(write_library_tags(lib, [i for i in ids if i is not None] if args.files else None,
                                              dry_run=args.dry_run, description=args.description))
    except LibraryError as e:
        raise ValueError(str(e)) from None
    if args.json:
        print(json.dumps([{"path": printable(r.path), "status": r.status, "reason": r.reason, "fields": r.fields}
                          for r in report], indent=2))
    else:
        for r in report:
            said = r.reason or "; ".join(f"{k}={v!r}" for k, v in r.fields.items())
            print(f"{r.status:11}  {printable(r.path)}  {said}")
        counts = {s: sum(r.status == s for r in report) for s in dict.fromkeys(r.status for r in report)}
        print(", ".join(f"{n} {s}" for s, n in counts.items()) or "no files with tags")
        if any(r.status == WRITTEN for r in report):
            print("run 'earshot index' on the library to read the written tags back", file=sys.stderr)
    return 1 if any(r.status == REFUSED for r in report) else 0
