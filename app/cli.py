"""`earshot` command line. With no subcommand it opens the GUI; subcommands work headless.

Subcommands mirror the tabs; each long one drives the same job generator the GUI runs, with a tqdm bar.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from app import __version__

Handler = Callable[[argparse.Namespace], int]

# kind -> module in training/ with add_train_arguments(p), train(args) -> Job[dict],
# add_eval_arguments(p) and evaluate(args) -> Job[dict]; imported only when that kind is invoked
TASKS = {
    "retrieval": ("training.retrieval_train", "text-to-audio retrieval (PaSST + text encoder)"),
    "units": ("training.units_train", "speech units (Transformer VQ-VAE + codebook inverter)"),
    "words": ("training.words_train", "multi-view acoustic word embeddings"),
}


def _task_module(kind: str) -> Any:  # noqa: ANN401 - a module
    import importlib
    import importlib.util

    name = TASKS[kind][0]
    if importlib.util.find_spec(name) is None:
        raise LookupError(f"training and evaluation of {kind} models are not available in this version of Earshot")
    return importlib.import_module(name)


def _add_task_parsers(sub: Any, verb: str, argv: Sequence[str]) -> None:  # noqa: ANN401 - argparse internals
    what = "train a model" if verb == "train" else "evaluate model checkpoint(s)"
    parser = sub.add_parser(verb, help=f"{what}: {', '.join(TASKS)}")
    kinds = parser.add_subparsers(dest="kind", metavar="KIND", required=True)
    for kind, (_, description) in TASKS.items():
        p = kinds.add_parser(kind, help=description, description=f"{what}: {description}")
        p.set_defaults(handler=cmd_train if verb == "train" else cmd_eval)
        p.add_argument("--events", metavar="PATH", default=None,
                       help="also write JSON lines (progress events, then the result or the error) to PATH, "
                            "or '-' for standard output; the Train tab reads these")
        # arguments come from the task module; import it only when this kind is the one invoked
        if len(argv) >= 2 and argv[0] == verb and argv[1] == kind:
            try:
                module = _task_module(kind)
            except LookupError:
                continue
            (module.add_train_arguments if verb == "train" else module.add_eval_arguments)(p)


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="earshot",
        description="Explore audio with research models. Run without a subcommand to open the window.",
    )
    parser.add_argument("--version", action="version", version=f"earshot {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("gui", help="open the Earshot window (the default)")
    p.add_argument("--library", type=Path, help="sound library folder to open")
    p.set_defaults(handler=cmd_gui)

    p = sub.add_parser("info", help="compute devices, audio devices and models found on this machine")
    p.add_argument("--device", default="auto", help="device preference to resolve (auto, cpu, cuda, mps)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_info)

    p = sub.add_parser("models", help="list the available model checkpoints")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_models)

    p = sub.add_parser("probe", help="decode audio files and report what Earshot sees (or why it can't)")
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument("--sample-rate", type=int, default=None, help="resample to this rate (Hz)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_probe)

    _add_search_parsers(sub)
    _add_task_parsers(sub, "train", argv)
    _add_task_parsers(sub, "eval", argv)
    return parser


def _add_search_parsers(sub: Any) -> None:  # noqa: ANN401 - argparse internals
    model_help = "retrieval model: a registry name or a .safetensors path (default: the default retrieval model)"
    p = sub.add_parser("index", help="index a sound library folder for search (only new and changed files)")
    p.add_argument("folder", type=Path)
    p.add_argument("--model", default=None, help=model_help)
    p.add_argument("--retry-failed", action="store_true", help="read files that failed before again")
    p.add_argument("--rehash", action="store_true",
                   help="hash every file again, not only those whose size or modification time changed "
                        "(finds edits that kept both)")
    p.add_argument("--device", default="auto", help="under torchrun: each process embeds on its own GPU")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_index)

    for name, what in (("search", "find sounds in a library by a description"),
                       ("similar", "find sounds in a library that sound like a file")):
        p = sub.add_parser(name, help=what)
        if name == "search":
            p.add_argument("text", help="a description, e.g. 'a door creaks open'")
        else:
            p.add_argument("file", type=Path, help="an audio file (in the library or not)")
        p.add_argument("--library", type=Path, required=True, help="the (indexed) library folder")
        p.add_argument("--model", default=None, help=model_help)
        p.add_argument("-k", type=int, default=10, help="number of results (default 10)")
        p.add_argument("--min-duration", type=float, default=None, metavar="SECONDS")
        p.add_argument("--max-duration", type=float, default=None, metavar="SECONDS")
        p.add_argument("--folder", default=None, help="only this folder (relative to the library) and below")
        p.add_argument("--json", action="store_true", help="print JSON")
        p.set_defaults(handler=cmd_search if name == "search" else cmd_similar)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    listen_for_interrupt()
    parser = build_parser(argv)
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
    except (ValueError, OSError, LookupError) as e:  # user-facing problems: a message, not a traceback
        print(f"earshot: error: {e}", file=sys.stderr)
        return 2


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
        "user_models_dir": str(user_models_dir()),
    }
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        for key, value in info.items():
            print(f"{key:>16}: {', '.join(value) if isinstance(value, list) else value}")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from app.services.registry import ModelRegistry

    registry = ModelRegistry()
    entries = registry.scan()
    rows = [
        {"name": e.name, "kind": e.kind, "source": e.source, "path": str(e.path),
         "metrics": e.training.get("metrics", {})}
        for e in entries
    ]
    if args.json:
        print(json.dumps({"models": rows, "problems": [
            {"path": str(p.path), "message": p.message} for p in registry.problems]}, indent=2))
        return 0
    if not rows:
        print("no models yet; train one with the Train tab or `earshot train`")
    for r in rows:
        print(f"{r['name']:<28} {r['kind']:<10} {r['source']:<8} {r['path']}")
    for p in registry.problems:
        print(f"problem: {p.path}: {p.message}", file=sys.stderr)
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    from app.services.audio import AudioError, decode

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
            else:
                print(f"error  {r['path']}: {r['error']}")
    return 0 if all(r["ok"] for r in rows) else 1


def cmd_index(args: argparse.Namespace) -> int:
    from app.services.jobs import run_in_terminal
    from app.services.library import LibraryError
    from app.services.search import SearchSession, load_embedder, summarize
    from training import distributed as ddp

    if ddp.launched_by_torchrun():  # one shard of the files per process, merged by rank 0
        return _sharded_index(args)
    embedder = load_embedder(args.model)
    try:
        session = SearchSession.open(args.folder, embedder)
        try:
            report = run_in_terminal(session.index_job(retry_failed=args.retry_failed, rehash=args.rehash),
                                     desc="index", disable=True if args.json else None)
        finally:
            for event in session.library.events:  # repairs on opening (damaged catalog or index), write failures
                print(f"library: {event}", file=sys.stderr)
            session.close()
    except LibraryError as e:  # a broken model, a full disk, a damaged catalog: a message, not a traceback
        raise ValueError(str(e)) from None
    _print_index_summary(summarize(report) | {"touched": report.touched, "unavailable": report.unavailable},
                         args.json)
    return 0


def _sharded_index(args: argparse.Namespace) -> int:
    from app.services.jobs import run_in_terminal
    from app.services.library import LibraryError
    from app.services.library.sharded import sharded_index_job
    from app.services.search import load_embedder, summarize
    from training import distributed as ddp
    from training.device import resolve_device

    ctx, device = ddp.setup(resolve_device(getattr(args, "device", "auto")))
    embedder = load_embedder(args.model, device=str(device))
    try:
        out = run_in_terminal(sharded_index_job(args.folder, embedder, ctx), desc=f"index (rank {ctx.rank})",
                              disable=True if args.json or not ctx.is_main else None)
    except LibraryError as e:
        raise ValueError(str(e)) from None
    finally:
        ddp.teardown(ctx)
    if ctx.is_main:
        report, shards = out
        _print_index_summary(summarize(report) | {"sharded": shards}, args.json)
    return 0


def _print_index_summary(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary, indent=2))
        return
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
    for e in summary["scan_errors"]:
        print(f"scan: {e}", file=sys.stderr)
    if "sharded" in summary:
        sh = summary["sharded"]
        print(f"sharded over {sh['processes']} processes: {sh['planned']} files planned, {sh['merged']} merged "
              "into the catalog before the final pass")
        for f in sh["failures"]:
            print(f"failed: {f['error']}", file=sys.stderr)


def cmd_search(args: argparse.Namespace) -> int:
    return _search_command(args, lambda s, f: s.search(args.text, args.k, f))


def cmd_similar(args: argparse.Namespace) -> int:
    return _search_command(args, lambda s, f: s.similar(args.file.resolve(), args.k, f))


def _search_command(args: argparse.Namespace, run: Callable[[Any, Any], list[Any]]) -> int:
    from app.services.library import LibraryError, SearchFilters
    from app.services.search import SearchSession, hit_dict, load_embedder

    if not args.library.is_dir():
        raise ValueError(f"{args.library}: not a folder")
    embedder = load_embedder(args.model)
    filters = SearchFilters(args.min_duration, args.max_duration, args.folder)
    try:
        session = SearchSession.open(args.library, embedder)
        try:
            if session.indexed_count() == 0:
                print(f"earshot: {args.library} has no sounds indexed with {embedder.name}; run `earshot index "
                      f"{args.library}` first", file=sys.stderr)
            hits = [hit_dict(h) for h in run(session, filters)]
        finally:
            session.close()
    except LibraryError as e:  # a message, not a traceback
        raise ValueError(str(e)) from None
    if args.json:
        print(json.dumps(hits, indent=2))
        return 0
    if not hits:
        print("no results")
    else:
        print(f"{'score':>7}  {'duration':>8}  path")
    for h in hits:
        print(f"{h['score']:7.3f}  {h['duration']:7.1f}s  {h['path']}")
    return 0


def _print_result(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(result, indent=2, default=str))
        return
    for key, value in result.items():
        if isinstance(value, dict):
            print(f"{key}:")
            for k, v in value.items():
                print(f"  {k:>24}: {v:.4f}" if isinstance(v, float) else f"  {k:>24}: {v}")
        else:
            print(f"{key:>26}: {value:.4f}" if isinstance(value, float) else f"{key:>26}: {value}")


def cmd_train(args: argparse.Namespace) -> int:
    module = _task_module(args.kind)
    return _run_task(args, lambda: module.train(args), f"train {args.kind}")


def cmd_eval(args: argparse.Namespace) -> int:
    module = _task_module(args.kind)
    return _run_task(args, lambda: module.evaluate(args), f"eval {args.kind}")


def _run_task(args: argparse.Namespace, make_job: Callable[[], Any], desc: str) -> int:
    from app.services.jobs import JobCancelled, run_in_terminal

    # under torchrun only rank 0 reports; the other processes train silently beside it
    main_rank = int(os.environ.get("RANK", "0")) == 0
    events = EventWriter(args.events if main_rank else None)
    quiet = args.events == "-" or not main_rank
    try:
        result = run_in_terminal(events.tee(make_job()), desc=desc, disable=True if quiet else None)
    except JobCancelled:
        events.write({"event": "cancelled"})
        raise
    except Exception as e:
        events.write({"event": "error", "message": str(e) or type(e).__name__, "type": type(e).__name__})
        raise
    finally:
        events.close()
    if args.events != "-" and main_rank:
        _print_result(result, getattr(args, "json", False))
    return 0


class EventWriter:
    """JSON lines for another process to follow a job: {"event": "progress"|"result"|"error"|"cancelled", ...}.

    Written to a file, the numeric progress values also go to `metrics.csv` beside it in long form
    (`time,step,name,value`: one row per value), for spreadsheets and pandas.
    """

    def __init__(self, target: str | None) -> None:
        self._file = None
        self._csv = None
        if target == "-":
            self._file = sys.stdout
        elif target:
            self._file = open(target, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
            path = Path(target).with_name("metrics.csv")
            new = not path.exists()
            self._csv = open(path, "a", encoding="utf-8", newline="")  # noqa: SIM115 - closed in close()
            if new:
                self._csv.write("time,step,name,value\n")

    def write(self, event: dict[str, Any]) -> None:
        if self._file is None:
            return
        import time

        now = round(time.time(), 3)
        self._file.write(json.dumps({"time": now, **event}, default=str) + "\n")
        self._file.flush()
        if self._csv is not None and event.get("event") == "progress":
            step = event.get("step", "")
            for name, value in event.items():
                if name not in ("event", "step", "total") and isinstance(value, int | float) \
                        and not isinstance(value, bool):
                    self._csv.write(f"{now},{step},{name},{value}\n")
            self._csv.flush()

    def tee(self, job: Any) -> Any:  # noqa: ANN401 - a job generator
        try:
            while True:
                try:
                    progress = next(job)
                except StopIteration as stop:
                    self.write({"event": "result", "result": stop.value})
                    return stop.value
                self.write({"event": "progress", **progress})
                yield progress
        finally:
            job.close()

    def close(self) -> None:
        if self._file is not None and self._file is not sys.stdout:
            self._file.close()
        if self._csv is not None:
            self._csv.close()


if __name__ == "__main__":
    sys.exit(main())
