"""The command-line face of `earshot eval words|units` (training/speech_eval.py runs them): their arguments and
the per-speaker table they print. Torch-free, so the `earshot` parser and its printing never import an evaluation
(core/kinds.py names the argument adders)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any


def add_words_eval_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="a words checkpoint (.safetensors)")
    parser.add_argument("--data", action="append", required=True, metavar="DIR",
                        help="folder with words.csv or metadata.csv (FSDD, the speech corpus); repeatable")
    _add_selection_arguments(parser)
    parser.add_argument("--max-items", type=int, default=None, help="evaluate a seeded random subset")
    parser.add_argument("--no-dtw", action="store_true", help="skip the MFCC+DTW baseline")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", action="store_true", help="print JSON")


def add_units_eval_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=Path, required=True, help="units checkpoint (.safetensors)")
    p.add_argument("--data", type=Path, action="append", required=True,
                   help="words.csv / metadata.csv / utterances.csv folder (FSDD, the speech corpus); repeatable")
    _add_selection_arguments(p)
    p.add_argument("--max-per-cell", type=int, default=None, help="items per (speaker, word) at most")
    p.add_argument("--representation", choices=("codebook", "onehot"), default="codebook")
    p.add_argument("--resynth-items", type=int, default=20, help="items per speaker for the spectral distance")
    p.add_argument("--no-baseline", action="store_true", help="skip the MFCC baseline ABX")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def _add_selection_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--split", default="test",
                   help="CSV rows of this split: test (FSDD), heldout, heldout-kajongg, heldout-letters, "
                        "heldout-numbers, heldout-saytime, heldout-mandarin (speech corpus), dev, train ... 'all': "
                        "every row; 'a,b': the rows of either")
    p.add_argument("--speaker", action="append", default=[], help="only these speakers; repeatable")
    p.add_argument("--exclude-speaker", action="append", default=[], help="leave these speakers out; repeatable")


def per_speaker_table(per_speaker: dict[str, dict[str, Any]], fmt: Callable[[Any], str] | None = None) -> str:
    """The per-speaker numbers as a text table: one row per speaker, one column per score."""
    def show(v: Any) -> str:  # noqa: ANN401 - JSON-like values
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "—"
        return f"{v:.4f}" if isinstance(v, float) else str(v)

    fmt = fmt or show
    columns: list[str] = []
    for row in per_speaker.values():
        columns += [k for k in row if k not in columns]
    name_w = max([len("speaker"), *map(len, per_speaker)])
    cells = {s: [fmt(row.get(c)) for c in columns] for s, row in per_speaker.items()}
    widths = [max(len(c), *(len(cells[s][k]) for s in cells)) for k, c in enumerate(columns)]
    lines = ["  ".join([f"{'speaker':<{name_w}}", *(f"{c:>{w}}" for c, w in zip(columns, widths, strict=True))])]
    for s, vals in cells.items():
        lines.append("  ".join([f"{s:<{name_w}}", *(f"{v:>{w}}" for v, w in zip(vals, widths, strict=True))]))
    return "\n".join(lines)
