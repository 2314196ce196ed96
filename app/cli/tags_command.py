"""`earshot tags ACTION`: your own tags and favourites, stored in the library's catalog: add, remove, favourite,
unfavourite, export and import as CSV (path,tags,favourite), and write them into the audio files themselves."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from app.cli.common import path_arg, print_events, repair_fields, require_catalog, text_path_arg
from app.services.library.tag_case import split_tags
from core.display import printable

FILES_HELP = "files in the library (relative to it, or absolute)"


def add_parser(sub: Any, argv: Sequence[str]) -> None:  # noqa: ANN401 - argparse internals
    p = sub.add_parser("tags", help="add, remove, export or import your own tags and favourites",
                       description="Your tags and favourites, stored in the library's catalog and searched with "
                                   "the names. Tags are separated by ';' in the CSV (columns path,tags,favourite).")
    tag_sub = p.add_subparsers(dest="tags_command", metavar="ACTION", required=True)
    for action, what in (("add", "add tags to files"), ("remove", "remove tags from files")):
        t = tag_sub.add_parser(action, help=what, description=what + ".")
        t.add_argument("files", nargs="+", type=path_arg, help=FILES_HELP)
        t.add_argument("--tag", "-t", dest="tags", action="append", required=True, help="tags; commas separate tags "
                       "('rifle, automatic' is two); repeatable")
        t.add_argument("--library", type=path_arg, required=True)
        t.set_defaults(handler=run)
    for action, what in (("favourite", "mark files as favourites"), ("unfavourite", "unmark favourites")):
        t = tag_sub.add_parser(action, help=what, description=what + ".")
        t.add_argument("files", nargs="+", type=path_arg, help=FILES_HELP)
        t.add_argument("--library", type=path_arg, required=True)
        t.set_defaults(handler=run)
    t = tag_sub.add_parser("export", help="write every file's tags and favourite mark as CSV")
    t.add_argument("--library", type=path_arg, required=True)
    t.add_argument("-o", "--output", type=text_path_arg, default="-",
                   help="CSV file to write ('-', the default: standard output)")
    t.set_defaults(handler=run)
    t = tag_sub.add_parser("import", help="merge tags and favourites from a CSV (path,tags,favourite)")
    t.add_argument("csv", type=path_arg)
    t.add_argument("--library", type=path_arg, required=True)
    t.add_argument("--json", action="store_true", help="print JSON")
    t.set_defaults(handler=run)
    _add_write_parser(tag_sub)


def _add_write_parser(tag_sub: Any) -> None:  # noqa: ANN401 - argparse internals
    t = tag_sub.add_parser(
        "write", help="write your tags into the audio files themselves (WAV INFO, Vorbis comments, ID3)",
        description="Write each file's tags into the file (WAV: LIST/INFO IKEY; FLAC/Ogg/Opus: Vorbis KEYWORDS; "
                    "MP3: ID3 TXXX:KEYWORDS), added to the keywords it holds. Each file is written as a hidden copy "
                    "that must decode to the same samples and read its tags back before it replaces the original; "
                    "a file that is read-only or changed since it was indexed is refused.")
    t.add_argument("files", nargs="*", type=path_arg, help="files in the library (default: every file with tags)")
    t.add_argument("--library", type=path_arg, required=True)
    t.add_argument("--description", metavar="TEXT", help="also write this description into the FILES named "
                   "(WAV: ICMT and the bext description; FLAC/Ogg: DESCRIPTION; MP3: COMM); an empty one is refused")
    t.add_argument("--clear", action="store_true", help="erase the description of the FILES named instead (only "
                   "when asked: an empty --description, an unset variable, is refused)")
    t.add_argument("--dry-run", action="store_true",
                   help="only list what would be written: each copy is made and checked as for the write, then "
                        "removed (nothing replaced)")
    t.add_argument("--follow-links", action="store_true",
                   help="also write a file the library only links to, outside the library (the report names it)")
    t.add_argument("--json", action="store_true", help="print JSON")
    t.set_defaults(handler=_write)


def run(args: argparse.Namespace) -> int:
    from app.services.library.library import Library
    from app.services.library.records import LibraryError
    from app.services.search.tag_editor import TagEditor

    require_catalog(args.library)
    try:
        with Library.open(args.library) as lib:
            print_events(lib)
            editor = TagEditor(lib)
            return _action(args, editor)
    except LibraryError as e:
        raise ValueError(str(e)) from None


def _action(args: argparse.Namespace, editor: Any) -> int:  # noqa: ANN401 - a TagEditor
    action = args.tags_command
    if action == "export":
        if args.output == "-":
            n = editor.export_csv(sys.stdout)
        else:
            n = _export_to_file(editor, args.output)
        print(f"{n} files with tags or favourites", file=sys.stderr)
        return 0
    if action == "import":
        return _import(args, editor)
    ids, unknown = editor.file_ids(args.files)
    if unknown:
        raise ValueError(f"not in the library (index it first?): {', '.join(printable(u) for u in unknown)}")
    if action in ("favourite", "unfavourite"):
        editor.library.user_tags.set_favourite(ids, action == "favourite")
        print(f"{len(ids)} files {'marked' if action == 'favourite' else 'unmarked'}")
        return 0
    tags = split_tags(",".join(args.tags))  # as the tag dialog reads them: "rifle, automatic" is two tags
    if not tags:  # `-t "$UNSET"` or `-t ,`: refused, as an empty tag was before the split
        raise ValueError("empty tag: give -t a tag (commas separate tags)")
    changed = (editor.add_tags if action == "add" else editor.remove_tags)(ids, tags)
    for given, spelled in editor.library.user_tags.library_spelling(tags).items():
        print(f"earshot: tag {printable(given)!r} is the library's {printable(spelled)!r} (tags ignore case); "
              f"{'added' if action == 'add' else 'removed'} as {printable(spelled)!r}", file=sys.stderr)
    print(f"{len(changed)} of {len(ids)} files changed")
    return 0


def _import(args: argparse.Namespace, editor: Any) -> int:  # noqa: ANN401 - a TagEditor
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


def _check_description(args: argparse.Namespace) -> None:
    """--description and --clear name the files they apply to; an empty description is refused unless --clear
    (`--description "$UNSET"` erased every file's own)."""
    if args.description is not None and not args.description.strip():
        if not args.clear:
            raise ValueError("--description is empty: that would erase the files' own descriptions; to erase them, "
                             "pass --clear instead")
        args.description = None
    if args.clear and args.description is not None:
        raise ValueError("--clear erases the descriptions, --description writes one: give one of them")
    if (args.description is not None or args.clear) and not args.files:
        raise ValueError(f"{'--clear' if args.clear else '--description'} needs the files to describe (it is not "
                         "applied to every tagged file)")


def _write(args: argparse.Namespace) -> int:
    """`tags write`: the tags into the files (app/services/library/tag_writer.py), each verified before it replaces
    the original; exit code 1 when a file was refused."""
    from app.services.jobs import drain
    from app.services.library.library import Library
    from app.services.library.records import LibraryError
    from app.services.library.tag_writer import REFUSED, WRITTEN, write_library_tags

    require_catalog(args.library)
    _check_description(args)
    try:
        with Library.open(args.library) as lib:
            ids = [lib.files.id_of(p) for p in args.files]
            unknown = [printable(p) for p, i in zip(args.files, ids, strict=True) if i is None]
            if unknown:
                raise ValueError(f"not in the library (index it first?): {', '.join(unknown)}")
            report = drain(write_library_tags(lib, [i for i in ids if i is not None] if args.files else None,
                                              dry_run=args.dry_run, description=args.description,
                                              clear=args.clear, follow_links=args.follow_links))
            print_events(lib)  # copies of killed runs removed
    except LibraryError as e:
        raise ValueError(str(e)) from None
    if args.json:
        print(json.dumps([{"path": printable(r.path), "status": r.status, "reason": r.reason, "fields": r.fields,
                           "real_path": printable(r.real) if r.real else None} for r in report], indent=2))
    else:
        for r in report:
            said = r.reason or "; ".join(f"{k}={v!r}" for k, v in r.fields.items())
            real = f" -> {printable(r.real)}" if r.real and r.status != REFUSED else ""
            print(f"{r.status:11}  {printable(r.path)}{real}  {said}")
        counts = {s: sum(r.status == s for r in report) for s in dict.fromkeys(r.status for r in report)}
        print(", ".join(f"{n} {s}" for s, n in counts.items()) or "no files with tags")
        if any(r.status == WRITTEN for r in report):
            print("run 'earshot index' on the library to read the written tags back", file=sys.stderr)
    return 1 if any(r.status == REFUSED for r in report) else 0
