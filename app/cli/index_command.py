"""`earshot index FOLDER`: index a sound library for search (only new and changed files); under torchrun, one
shard of the files per process, merged by rank 0."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from app.cli.common import MODEL_HELP, path_arg, print_events, repair_fields
from app.ui.durations import format_duration
from core.display import printable

LONG_FILE_WINDOWS = 6  # = library.embedding.LONG_FILE_WINDOWS (a test keeps them equal; importing it costs numpy)


def add_parser(sub: Any, argv: Sequence[str]) -> None:  # noqa: ANN401 - argparse internals
    p = sub.add_parser("index", help="index a sound library folder for search (only new and changed files)")
    p.add_argument("folder", type=path_arg)
    p.add_argument("--model", default=None, help=MODEL_HELP)
    p.add_argument("--retry-failed", action="store_true", help="read files that failed before again")
    p.add_argument("--rehash", action="store_true",
                   help="hash every file again, not only those whose size or modification time changed "
                        "(finds edits that kept both)")
    p.add_argument("--all-windows", action="store_true",
                   help=f"embed every window of a long file (default: {LONG_FILE_WINDOWS} windows spread evenly over "
                        "it, a fraction of the time); applies to files indexed from now on")
    p.add_argument("--device", default="auto", help="under torchrun: each process embeds on its own GPU")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from app.services.jobs import run_in_terminal
    from app.services.library.library import index_refusal
    from app.services.library.records import LibraryError
    from app.services.search.embedder import load_embedder
    from app.services.search.search_jobs import summarize
    from app.services.search.session import SearchSession
    from core import distributed as ddp

    if ddp.launched_by_torchrun():  # one shard of the files per process, merged by rank 0
        return _sharded_index(args)
    refused = index_refusal(args.folder)
    if refused:  # at once, not after loading the model (seconds, hundreds of MB)
        raise ValueError(refused)
    embedder = load_embedder(args.model)
    try:
        session = SearchSession.open(args.folder, embedder)
        windows = {"max_windows": 0} if args.all_windows else {}
        try:
            report = run_in_terminal(session.index_job(retry_failed=args.retry_failed, rehash=args.rehash, **windows),
                                     desc="index", disable=True if args.json else None, describe=progress_text)
        finally:
            print_events(session.library)
            session.close()
    except LibraryError as e:  # a broken model, a full disk, a damaged catalog: a message, not a traceback
        raise ValueError(str(e)) from None
    _print_summary(summarize(report) | {"touched": report.touched, "unavailable": report.unavailable}
                   | repair_fields(session.library), args.json, args.folder)
    return 0


def _sharded_index(args: argparse.Namespace) -> int:
    from app.services.jobs import run_in_terminal
    from app.services.library.records import LibraryError
    from app.services.library.sharded import sharded_index_job
    from app.services.search.embedder import load_embedder
    from app.services.search.search_jobs import summarize
    from core import distributed as ddp
    from core.device import resolve_device

    ctx, device = ddp.setup(resolve_device(getattr(args, "device", "auto")))
    embedder = load_embedder(args.model, device=str(device))
    from app.services.search.embedder import default_text_encoder

    text_encoder = default_text_encoder() if ctx.is_main else None
    try:
        out = run_in_terminal(sharded_index_job(args.folder, embedder, ctx, text_encoder=text_encoder),
                              desc=f"index (rank {ctx.rank})",
                              disable=True if args.json or not ctx.is_main else None, describe=progress_text)
    except LibraryError as e:
        raise ValueError(str(e)) from None
    finally:
        ddp.teardown(ctx)
    if ctx.is_main:
        report, shards = out
        _print_summary(summarize(report) | {"sharded": shards}, args.json, args.folder)
    return 0


def progress_text(p: Mapping[str, Any]) -> str:
    """An index run's progress in words, beside the bar's count: '35.2 s of audio · about 2 min left ·
    door_creak.wav' (not the fields the GUI reads: files_done=…, eta_s=…, phase=…)."""
    parts = [f"{format_duration(float(p['audio_seconds']))} of audio"] if p.get("audio_seconds") else []
    if isinstance(eta := p.get("eta_s"), int | float):
        parts.append(f"about {format_duration(max(0.0, float(eta)), rough=True)} left")
    return " · ".join([*parts, str(p["message"])] if p.get("message") else parts)


def _print_summary(summary: dict[str, Any], as_json: bool, folder: Path) -> None:
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    if not summary["files"] and not summary["removed"] and not summary["scan_errors"]:  # a wrong folder, most likely
        from core.audio import SUPPORTED_EXTENSIONS

        print(f"{printable(str(folder))}: no audio files found (looked for "
              f"{', '.join(sorted(SUPPORTED_EXTENSIONS))}, in every subfolder)", file=sys.stderr)
    print(f"{summary['files']} files: {summary['embedded']} embedded, {summary['moved']} moved, "
          f"{summary['copied']} copied, {summary['unchanged']} unchanged, {summary['removed']} removed, "
          f"{summary['failed']} failed")
    if summary.get("touched"):
        print(f"{summary['touched']} files had a new modification time or were re-hashed: content unchanged")
    if summary.get("unavailable"):
        print(f"{summary['unavailable']} catalogued files are under folders that cannot be listed now: kept, "
              "hidden from results until the folders are back", file=sys.stderr)
    if summary["embedded"]:
        print(f"{summary['audio_seconds']:.1f} s of audio in {summary['elapsed_s']:.1f} s "
              f"({summary['x_realtime']:.1f}x real time) with {summary['model']}")
    elif summary["files"]:  # no audio embedded: a throughput of 0.0x would read like a failure
        changed = summary["moved"] or summary["copied"] or summary["removed"] or summary["failed"]
        print(f"{'no new audio' if changed else 'nothing new'}: {summary['unchanged']} files unchanged")
    for f in summary["failures"]:
        print(f"failed: {f['error']}", file=sys.stderr)
    if summary.get("texts"):
        print(f"names and tags read for {summary['texts']} files ({summary['text_vectors']} sentences embedded)")
    for t in summary.get("tag_problems", []):
        print(f"tags: {printable(t['path'])}: {t['error']} (indexed by name and sound)", file=sys.stderr)
    for e in summary["scan_errors"]:
        print(f"scan: {e}", file=sys.stderr)
    if "sharded" in summary:
        sh = summary["sharded"]
        print(f"sharded over {sh['processes']} processes: {sh['planned']} files planned, {sh['merged']} merged "
              "into the catalog before the final pass")
        for f in sh["failures"]:
            print(f"failed: {f['error']}", file=sys.stderr)
