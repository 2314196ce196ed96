"""`earshot train KIND`: train a model in this process (the Train tab launches it; torchrun scales it out)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from app.cli.kind_common import add_kind_parsers, run_task


def add_parser(sub: Any, argv: Sequence[str]) -> None:  # noqa: ANN401 - argparse internals
    add_kind_parsers(sub, "train", "train a model", argv, run,
                     lambda kind, trainer: _module_for(kind, trainer).add_train_arguments)


def run(args: argparse.Namespace) -> int:
    module = _module_for(args.kind, args.trainer_module)
    return run_task(args, lambda: module.train(args), f"train {args.kind}")


def _task_module(kind: str, trainer: str | None = None) -> Any:  # noqa: ANN401 - a module
    from core import kinds

    return kinds.get(kind, trainer).trainer_module()


def _module_for(kind: str, trainer: str | None) -> Any:  # noqa: ANN401 - a module
    """The trainer module of `kind`; tests replace `_task_module(kind)` for the plain case."""
    return _task_module(kind) if trainer is None else _task_module(kind, trainer)
