"""`earshot` command line. With no subcommand it opens the GUI; subcommands work headless.

Subcommands mirror the tabs; each long one drives the same job generator the GUI runs, with a tqdm bar.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from app import __version__
from app.cli_library import add_library_parsers, path_arg
from core import memory
from core.config import bound_numbers, number

Handler = Callable[[argparse.Namespace], int]
MAX_RATE = 768_000  # Hz: probe resamples to at most this (the highest rate audio interfaces record at)


def _trainer_override(argv: Sequence[str]) -> str | None:
    """`--trainer-module MODULE` (tests, plug-ins): train/evaluate with MODULE instead of the kind's trainer."""
    for i, arg in enumerate(argv):
        if arg == "--trainer-module" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--trainer-module="):
            return arg.split("=", 1)[1]
    return None


def _task_module(kind: str, trainer: str | None = None) -> Any:  # noqa: ANN401 - a module
    from core import kinds

    return kinds.get(kind, trainer).trainer_module()


def _module_for(kind: str, trainer: str | None) -> Any:  # noqa: ANN401 - a module
    """The trainer module of `kind`; tests replace `_task_module(kind)` for the plain case."""
    return _task_module(kind) if trainer is None else _task_module(kind, trainer)


def _add_task_parsers(sub: Any, verb: str, argv: Sequence[str]) -> None:  # noqa: ANN401 - argparse internals
    from core import kinds  # the table only: no trainer (and no torch) is imported for other commands

    what = "train a model" if verb == "train" else "evaluate model checkpoint(s)"
    parser = sub.add_parser(verb, help=f"{what}: {', '.join(kinds.NAMES)}")
    sub_kinds = parser.add_subparsers(dest="kind", metavar="KIND", required=True)
    for kind in kinds.KINDS.values():
        p = sub_kinds.add_parser(kind.name, help=kind.label, description=f"{what}: {kind.label}")
        p.set_defaults(handler=cmd_train if verb == "train" else cmd_eval)
        p.add_argument("--events", metavar="PATH", default=None,
                       help="also write JSON lines (progress events, then the result or the error) to PATH, "
                            "or '-' for standard output; the Train tab reads these")
        p.add_argument("--trainer-module", metavar="MODULE", default=None, help=argparse.SUPPRESS)
        # arguments come from the trainer module; import it only when this kind is the one invoked
        if len(argv) >= 2 and argv[0] == verb and argv[1] == kind.name:
            override = _trainer_override(argv)
            try:
                module = _module_for(kind.name, override)
            except kinds.KindError:
                continue  # the handler reports it
            (module.add_train_arguments if verb == "train" else _eval_functions(kind.name, override)[0])(p)


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="earshot",
        description="Explore audio with research models. Run without a subcommand to open the window.",
    )
    parser.add_argument("--version", action="version", version=f"earshot {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("gui", help="open the Earshot window (the default)")
    p.add_argument("--library", type=path_arg, help="sound library folder to open")
    p.set_defaults(handler=cmd_gui)

    p = sub.add_parser("info", help="compute devices, audio devices and models found on this machine")
    p.add_argument("--device", default="auto", help="device preference to resolve (auto, cpu, cuda, mps)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_info)

    p = sub.add_parser("models", help="list the available model checkpoints")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_models)

    p = sub.add_parser("probe", help="decode audio files and report what Earshot sees (or why it can't)")
    p.add_argument("files", nargs="+", type=path_arg)
    p.add_argument("--sample-rate", type=number(int, low=1, high=MAX_RATE), default=None,
                   help=f"resample to this rate (Hz, 1 to {MAX_RATE})")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_probe)

    add_library_parsers(sub)
    _add_task_parsers(sub, "train", argv)
    _add_task_parsers(sub, "eval", argv)
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
    args = parser.parse_args(argv)
    handler: Handler = getattr(args, "handler", cmd_gui)
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


def cmd_gui(args: argparse.Namespace) -> int:
    from app.ui.main_window import run_gui

    return run_gui(library=args.library)


def cmd_info(args: argparse.Namespace) -> int:
    from app.services.environment import probe_environment
    from app.services.jobs import drain
    from app.services.registry import ModelRegistry, user_models_dir

    env = drain(probe_environment(ModelRegistry(), args.device))
    info: dict[str, Any] = {
        "earshot": __version__,
        "python": env.python,
        "torch": env.torch_version,
        "devices": env.devices,
        "device": env.device,
        "device_error": env.device_error,
        "audio_input": env.audio_input,
        "audio_output": env.audio_output,
        "audio": env.audio_message,
        "models": [e.name for e in env.models],
        "model_problems": [{"path": str(p.path), "message": p.message} for p in env.model_problems],
        "user_models_dir": str(user_models_dir()),
    }
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        for key, value in info.items():
            if key != "model_problems":
                print(f"{key:>16}: {', '.join(value) if isinstance(value, list) else value}")
        for p in env.model_problems:
            print(f"problem: {p.path}: {p.message}", file=sys.stderr)
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from app.services.registry import ModelRegistry

    registry = ModelRegistry()
    entries = registry.scan()
    defaults = {e.kind: e.name for e in map(registry.default_for, {e.kind for e in entries}) if e is not None}
    rows = [
        {"name": e.name, "kind": e.kind, "source": e.source, "default": defaults.get(e.kind) == e.name,
         "path": str(e.path), "metrics": e.training.get("metrics", {})}
        for e in entries
    ]
    if args.json:
        print(json.dumps({"models": rows, "problems": [
            {"path": str(p.path), "message": p.message} for p in registry.problems]}, indent=2))
        return 0
    if not rows:
        print("no models yet; train one with the Train tab or `earshot train`")
    for r in rows:  # source: shipped with Earshot or the user's own; the default is what a tab uses unless told
        source = "shipped" if r["source"] == "default" else r["source"]
        mark = f"default {r['kind']}" if r["default"] else ""
        print(f"{r['name']:<28} {r['kind']:<10} {source:<8} {mark:<18} {r['path']}")
    for p in registry.problems:
        print(f"problem: {p.path}: {p.message}", file=sys.stderr)
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    from core.audio import AudioError, decode

    rows = []
    for path in args.files:
        try:
            d = decode(path, sample_rate=args.sample_rate)
            rows.append({"path": str(path), "ok": True, "duration": round(d.duration, 3),
                         "sample_rate": d.sample_rate, "source_rate": d.source_rate, "channels": d.channels})
        except AudioError as e:
            rows.append({"path": str(path), "ok": False, "error": str(e), "type": type(e).__name__})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            if r["ok"]:
                print(f"ok     {r['path']}: {r['duration']} s, {r['source_rate']} Hz, {r['channels']} ch")
            else:  # the audio path's errors begin with the file's name already
                reason = r["error"].removeprefix(f"{r['path']}: ")
                print(f"error  {r['path']}: {reason}")
    return 0 if all(r["ok"] for r in rows) else 1


def _print_result(result: dict[str, Any], as_json: bool) -> None:
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


def cmd_train(args: argparse.Namespace) -> int:
    module = _module_for(args.kind, args.trainer_module)
    return _run_task(args, lambda: module.train(args), f"train {args.kind}")


def _eval_functions(kind: str, trainer: str | None) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(add_eval_arguments, evaluate) of `kind`: its evaluator (speech: training.speech_eval) or its trainer's."""
    from core import kinds

    return kinds.get(kind, trainer).eval_functions()


def cmd_eval(args: argparse.Namespace) -> int:
    _, evaluate = _eval_functions(args.kind, args.trainer_module)
    return _run_task(args, lambda: evaluate(args), f"eval {args.kind}")


def _run_task(args: argparse.Namespace, make_job: Callable[[], Any], desc: str) -> int:
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
        _print_result(result, getattr(args, "json", False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
