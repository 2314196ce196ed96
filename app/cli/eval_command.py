"""`earshot eval KIND`: evaluate model checkpoint(s) with the kind's evaluator (core/kinds.py)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from app.cli.kind_common import ArgumentAdder, add_kind_parsers, run_task


def add_parser(sub: Any, argv: Sequence[str]) -> None:  # noqa: ANN401 - argparse internals
    add_kind_parsers(sub, "eval", "evaluate model checkpoint(s)", argv, run, _eval_arguments)


def _eval_arguments(kind: str, trainer: str | None) -> ArgumentAdder:
    """The kind's torch-free argument adder alone: `earshot eval KIND --help` imports no evaluator."""
    from core import kinds

    return kinds.get(kind, trainer).eval_arguments()


def run(args: argparse.Namespace) -> int:
    from core import kinds

    _, evaluate = kinds.get(args.kind, args.trainer_module).eval_functions()
    return run_task(args, lambda: evaluate(args), f"eval {args.kind}")
