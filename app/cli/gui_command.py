"""`earshot gui` (also the default, with no subcommand): open the Earshot window."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from app.cli.common import path_arg


def add_parser(sub: Any, argv: Sequence[str]) -> None:  # noqa: ANN401 - argparse internals
    p = sub.add_parser("gui", help="open the Earshot window (the default)")
    p.add_argument("--library", type=path_arg, help="sound library folder to open")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from app.ui.main_window import run_gui

    return run_gui(library=args.library)
