"""`earshot search TEXT --library L`: find sounds in a library by a description; many queries at once as JSON
lines (--queries FILE, '-', or standard input piped)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from app.cli import search_common as sc
from app.cli.common import text_path_arg
from app.services.search.query import MAX_QUERY_CHARS, Query, parse  # stdlib only: `earshot --help` stays fast
from core.display import printable

NAME = "search"


def add_parser(sub: Any, argv: Sequence[str]) -> None:  # noqa: ANN401 - argparse internals
    p = sc.new_parser(sub, NAME, "find sounds in a library by a description")
    p.add_argument("text", nargs="?", default=None,
                   help="a description, e.g. 'a door creaks open' or '-metal door' (a leading '-' excludes a "
                        "word); '-' alone (or none, with standard input piped) reads one query per line from "
                        "standard input")
    p.add_argument("--queries", metavar="FILE", type=text_path_arg, default=None,
                   help="answer many queries in one call: one per line of FILE ('-': standard input); "
                        "prints JSON lines, one object per query")
    sc.add_library_arguments(p)
    p.add_argument("--mode", choices=("names", "sound", "both"), default="both",
                   help="rank by what files are called and tagged (names), by how they sound (sound), or "
                        "both fused (default)")
    sc.add_filter_arguments(p)
    p.set_defaults(handler=run)


def query_first(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """`earshot search "-keeper haunted"`: a query that starts with '-' (an exclusion first) is the query, where
    argparse would read it as `-k eeper haunted` or `-h`. argv (after 'search') with each such argument moved
    behind '--': a token that starts with one '-' and is neither an option of `parser` (or `-k5`, an option's
    value attached) nor the value of the option before it. With a '--' already there, argv is left as typed."""
    if "--" in argv:
        return argv
    takes_value = {o: a.nargs != 0 for a in parser._actions for o in a.option_strings}
    kept, queries, value_next = [], [], False
    for token in argv:
        if value_next or token == "-" or not token.startswith("-") or token.startswith("--"):
            value_next = not value_next and takes_value.get(token, False)
            kept.append(token)
        elif token in takes_value:
            value_next = takes_value[token]
            kept.append(token)
        elif takes_value.get(token[:2]) and token[2:].lstrip("=").isdigit():  # -k5, -k=5
            kept.append(token)
        else:
            queries.append(token)
    return [*kept, "--", *queries] if queries else argv


def run(args: argparse.Namespace) -> int:
    sc.resolve_libraries(args)
    queries = _queries(args)
    if queries is None:
        query = _checked_query(args.text)  # parsed once: the search reads this Query
        return sc.answer_command(args, lambda s, f: s.search(query, args.k, f, mode=args.mode,
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
    # lines end at '\n' only ('\r\n' too): U+2028 or a form feed inside a query must not shift later line numbers
    queries = [(i, q.strip()) for i, q in enumerate(text.split("\n"), start=1) if q.strip()]
    if not queries:
        raise ValueError(f"{'standard input' if source == '-' else source}: no queries (one per line)")
    return queries


def _search_many(args: argparse.Namespace, queries: list[tuple[int, str]]) -> int:
    """One JSON line per query, written as each is answered (a pipe sees results while later ones run)."""
    from app.services.library.records import LibraryError
    from app.services.search.search_jobs import hit_dict

    search_filters = sc.filters(args)
    try:
        session = sc.open_search(args, text_only=True)
        try:
            sc.check_folder(args.folder, session)
            for line, query in queries:
                res = session.search(query, args.k, search_filters, mode=args.mode, names_weight=args.names_weight)
                said = sc.shortened(res)
                if said is not None:
                    print(f"earshot: line {line}: {sc.shortened_note(said)}", file=sys.stderr)
                print(json.dumps({"query": query, "line": line, "results": [hit_dict(h) for h in res],
                                  "did_you_mean": res.did_you_mean, "no_good_match": res.no_good_match,
                                  "query_shortened": said}), flush=True)
        finally:
            sc.print_all_events(session, as_json=True)
            session.close()
    except LibraryError as e:
        raise ValueError(str(e)) from None
    except BrokenPipeError:  # the reader went away (`| head -3`): stop quietly, as other Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
    return 0
