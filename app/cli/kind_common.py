"""What `earshot train KIND` and `earshot eval KIND` share: a subcommand per model kind (core/kinds.py), whose
flags are added only for the kind invoked, and running the job with its events and printed result."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Sequence
from typing import Any

Handler = Callable[[argparse.Namespace], int]
ArgumentAdder = Callable[[argparse.ArgumentParser], None]


def trainer_override(argv: Sequence[str]) -> str | None:
    """`--trainer-module MODULE` (tests, plug-ins): train/evaluate with MODULE instead of the kind's trainer."""
    for i, arg in enumerate(argv):
        if arg == "--trainer-module" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--trainer-module="):
            return arg.split("=", 1)[1]
    return None


def add_kind_parsers(sub: Any, verb: str, what: str, argv: Sequence[str], handler: Handler,  # noqa: ANN401
                     arguments: Callable[[str, str | None], ArgumentAdder]) -> None:
    """`earshot VERB KIND` for every kind; `arguments(kind, trainer_override)` gives the function that adds the
    kind's own flags, asked for (and its module imported) only when `argv` invokes that kind."""
    from core import kinds  # the table only: no trainer (and no torch) is imported for other commands

    parser = sub.add_parser(verb, help=f"{what}: {', '.join(kinds.NAMES)}")
    sub_kinds = parser.add_subparsers(dest="kind", metavar="KIND", required=True)
    for kind in kinds.KINDS.values():
        p = sub_kinds.add_parser(kind.name, help=kind.label, description=f"{what}: {kind.label}")
        p.set_defaults(handler=handler)
        p.add_argument("--events", metavar="PATH", default=None,
                       help="also write JSON lines (progress events, then the result or the error) to PATH, "
                            "or '-' for standard output; the Train tab reads these")
        p.add_argument("--trainer-module", metavar="MODULE", default=None, help=argparse.SUPPRESS)
        if list(argv[:2]) == [verb, kind.name]:
            try:
                add_arguments = arguments(kind.name, trainer_override(argv))
            except kinds.KindError:
                continue  # the handler reports it
            add_arguments(p)


def run_task(args: argparse.Namespace, make_job: Callable[[], Any], desc: str) -> int:
    from app.services.jobs import JobCancelled, run_in_terminal
    from core.events import EventWriter

    # under torchrun only rank 0 reports; the other processes train silently beside it
    main_rank = int(os.environ.get("RANK", "0")) == 0
    events = EventWriter(args.events if main_rank else None)
    quiet = args.events == "-" or not main_rank
    try:
        result = run_in_terminal(events.tee(make_job()), desc=desc, disable=True if quiet else None)
    except JobCancelled:
        events.cancelled()
        raise
    except Exception as e:
        events.error(e)
        raise
    finally:
        events.close()
    if args.events != "-" and main_rank:
        print_result(result, getattr(args, "json", False))
    return 0


def print_result(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(result, indent=2, default=str))
        return
    special = ("per_speaker", "notes")  # an evaluation's per-speaker table and its notes come last
    for key, value in result.items():
        if key in special:
            continue
        if isinstance(value, dict):
            print(f"{key}:")
            for k, v in value.items():
                if isinstance(v, dict):  # deeper tables (per speaker ...) are for --json
                    print(f"  {k:>24}: ({len(v)} entries; see --json)")
                else:
                    print(f"  {k:>24}: {v:.4f}" if isinstance(v, float) else f"  {k:>24}: {v}")
        else:
            print(f"{key:>26}: {value:.4f}" if isinstance(value, float) else f"{key:>26}: {value}")
    if isinstance(result.get("per_speaker"), dict) and result["per_speaker"]:
        from training.speech_eval_cli import per_speaker_table

        print("per speaker:")
        print(per_speaker_table(result["per_speaker"]))
    for note in result.get("notes") or ():
        print(f"note: {note}")
