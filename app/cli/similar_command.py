"""`earshot similar FILE --library L`: find sounds in a library that sound like a file (in the library or not),
or like a sound recorded from the microphone (--record SECONDS)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from app.cli import search_common as sc
from app.cli.common import path_arg, require_catalog
from core.config import number


def add_parser(sub: Any, argv: Sequence[str]) -> None:  # noqa: ANN401 - argparse internals
    p = sc.new_parser(sub, "similar", "find sounds in a library that sound like a file")
    p.add_argument("file", type=path_arg, nargs="?", default=None,
                   help="an audio file (in the library or not); or --record")
    p.add_argument("--any-length", action="store_true",
                   help="also sounds much longer or shorter than the file (by default only those from a "
                        "quarter to four times its length, plus a second: music and ambiences do not "
                        "crowd out the one-shots like a one-shot)")
    p.add_argument("--record", type=number(float, low=0, low_exclusive=True), default=None, metavar="SECONDS",
                   help="record SECONDS (0.2 to 30) from the default microphone, trim the silence around "
                        "the sound, and find what sounds like it")
    p.add_argument("--save", type=path_arg, default=None, metavar="FILE",
                   help="with --record: keep the (trimmed) recording as a WAV file")
    sc.add_library_arguments(p)
    sc.add_filter_arguments(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    sc.resolve_libraries(args)
    if args.record is None:
        if args.file is None:
            raise ValueError("similar: give an audio file, or --record SECONDS to record one")
        if args.save is not None:
            raise ValueError("similar: --save keeps a recording: use it with --record")
        return sc.answer_command(args, lambda s, f: s.similar(args.file.resolve(), args.k, f,
                                                              names_weight=args.names_weight,
                                                              any_length=args.any_length))
    if args.file is not None:
        raise ValueError("similar: give an audio file or --record, not both")
    from app.services.search.recording import check_seconds

    check_seconds(args.record)
    for loc in args.locations:
        require_catalog(loc.path)  # before asking anyone to make a sound
    import tempfile

    with tempfile.TemporaryDirectory(prefix="earshot-recording-") as tmp:
        query = _record_query(args.record, args.save, Path(tmp))
        return sc.answer_command(args, lambda s, f: s.similar(query, args.k, f, names_weight=args.names_weight,
                                                              any_length=args.any_length))


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
