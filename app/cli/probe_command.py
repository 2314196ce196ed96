"""`earshot probe FILE...`: decode audio files and report what Earshot sees (or why it can't)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from app.cli.common import path_arg
from core.config import number

MAX_RATE = 768_000  # Hz: probe resamples to at most this (the highest rate audio interfaces record at)


def add_parser(sub: Any, argv: Sequence[str]) -> None:  # noqa: ANN401 - argparse internals
    p = sub.add_parser("probe", help="decode audio files and report what Earshot sees (or why it can't)")
    p.add_argument("files", nargs="+", type=path_arg)
    p.add_argument("--sample-rate", type=number(int, low=1, high=MAX_RATE), default=None,
                   help=f"resample to this rate (Hz, 1 to {MAX_RATE})")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from core.audio import AudioError, measure

    rows = []
    for path in args.files:
        try:  # decoded block by block: a 2-hour WAV took 4 GB decoded whole (and a 6-hour take was refused)
            d = measure(path, sample_rate=args.sample_rate)
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
