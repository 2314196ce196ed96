"""`earshot`: the top-level parser, dispatch, and how a command ends (`earshot: error: ...` and exit code 2 for
a user-facing problem). With no subcommand it opens the GUI.

Each command is a module with `add_parser(subparsers, argv)` and `run(args) -> int`. Those modules import their
work inside `run`, so building the parser (and `earshot --help`) loads no torch, numpy or Qt.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Callable, Sequence

from app import __version__
from app.cli import (
    duplicates_command,
    eval_command,
    gui_command,
    index_command,
    info_command,
    locations_command,
    models_command,
    probe_command,
    search_command,
    similar_command,
    tags_command,
    train_command,
)
from core import memory
from core.config import bound_numbers

Handler = Callable[[argparse.Namespace], int]
COMMANDS = (gui_command, info_command, models_command, probe_command, index_command, search_command,  # the order
            similar_command, duplicates_command, tags_command, locations_command, train_command,
            eval_command)  # `earshot --help` lists


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The whole parser; `argv` tells train and eval which kind's flags to add (only that kind's are imported)."""
    parser = argparse.ArgumentParser(
        prog="earshot",
        description="Explore audio with research models. Run without a subcommand to open the window.",
    )
    parser.add_argument("--version", action="version", version=f"earshot {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub, argv)
    bound_numbers(parser)  # flags that trainer modules write by hand: 64-bit integers, finite floats
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    listen_for_interrupt()
    memory.limit_arenas()  # before any worker thread allocates (core/memory.py)
    memory.map_large_blocks()
    parser = build_parser(argv)
    problem = unknown_command(argv, subcommands(parser))
    if problem:
        print(f"earshot: error: {problem}", file=sys.stderr)
        return 2
    if argv and argv[0] == search_command.NAME:  # a query may start with '-'
        argv = [argv[0], *search_command.query_first(argv[1:], subparser(parser, argv[0]))]
    args = parser.parse_args(argv)
    handler: Handler = getattr(args, "handler", gui_command.run)
    if not hasattr(args, "library"):
        args.library = None
    from app.services.jobs import JobCancelled

    try:
        return handler(args)
    except JobCancelled:
        print("cancelled", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        if not stdout_is_a_pipe():
            raise
        # the reader of the output went away (`| head -3`): stop quietly, as --queries does and other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return 0
    except (ValueError, OSError, LookupError) as e:  # user-facing problems: a message, not a traceback
        print(f"earshot: error: {e}", file=sys.stderr)
        return 2


def stdout_is_a_pipe() -> bool:
    """Is standard output a pipe or socket (whose reader can go away), not a file or a terminal?"""
    import stat

    try:
        mode = os.fstat(sys.stdout.fileno()).st_mode
    except (OSError, ValueError, AttributeError):  # closed, replaced by an object without a descriptor
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def subcommands(parser: argparse.ArgumentParser) -> list[str]:
    return [name for a in parser._actions if isinstance(a, argparse._SubParsersAction) for name in a.choices]


def subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]


def unknown_command(argv: Sequence[str], commands: Sequence[str]) -> str | None:
    """A mistyped subcommand gets the closest one (argparse only lists them all)."""
    if not argv or argv[0].startswith("-") or argv[0] in commands:
        return None
    close = difflib.get_close_matches(argv[0], commands, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}?" if close else f"choose from {', '.join(commands)}"
    return f"unknown command {argv[0]!r}; {hint}"


def listen_for_interrupt() -> None:
    """SIGINT is how Ctrl-C and the Train tab's Cancel stop a job cleanly. A shell starts background jobs with
    SIGINT ignored, and Python then never raises KeyboardInterrupt: take the signal back in that case."""
    import signal
    import threading

    main_thread = threading.current_thread() is threading.main_thread()  # only it may set signal handlers
    if main_thread and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
