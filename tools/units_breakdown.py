"""Where a units model's ABX gain over MFCC goes on one set (issue 41): across-speaker ABX of the units and of
raw MFCC+Δ+ΔΔ, split by the X word's length, by word pair (the pairs the units confuse most) and, for bopomofo
syllables, by what a pair differs in (initial, final or both).

    python -m tools.units_breakdown --model M --data DIR [--data DIR] --split S [--pairs 8]

The same clips, encoding and ABX cells as `earshot eval units` (training/speech_eval.py, `abx.abx_scores`); a
cell's error is the mean over the speakers of A and B; bins and groups average cells plainly. Length: the mean
duration of X's (speaker, word) tokens, in the set's own tertiles. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from training import abx

Cells = dict[tuple[str, str, str], float]  # (X speaker, word A, word B) -> error
INITIALS = {chr(c) for c in range(0x3105, 0x311A)}  # bopomofo initials ㄅ..ㄙ


def cell_errors(items: Sequence[np.ndarray], words: Sequence[str], speakers: Sequence[str]) -> Cells:
    """Across-speaker ABX error of every cell, averaged over the speakers A and B came from."""
    score = abx.abx_scores(items, words, speakers, "across")
    return {key: float(np.mean([err for err, _ in v])) for key, v in score.cells.items()}


def grouped(cells: Cells, group: Callable[[tuple[str, str, str]], str]) -> dict[str, list[float]]:
    """Mean cell error (%) and cell count per group of cells."""
    out: dict[str, list[float]] = defaultdict(list)
    for key, err in cells.items():
        out[group(key)].append(err)
    return {g: [round(100 * float(np.mean(v)), 2), len(v)] for g, v in sorted(out.items())}


def syllable_contrast(key: tuple[str, str, str]) -> str:
    """What two bopomofo syllables differ in: their initial, their final, or both."""
    (ia, fa), (ib, fb) = ((w[0], w[1:]) if w[:1] in INITIALS else ("", w) for w in key[1:])
    return "final (same initial)" if ia == ib else "initial (same final)" if fa == fb else "both"


def worst_pairs(units: Cells, mfcc: Cells, n: int) -> list[dict[str, Any]]:
    """The unordered word pairs with the highest units error, with MFCC's error on the same cells."""
    pairs: dict[frozenset[str], list[tuple[float, float]]] = defaultdict(list)
    for key, err in units.items():
        pairs[frozenset(key[1:])].append((err, mfcc[key]))
    rows = [{"pair": " / ".join(sorted(p)), "cells": len(v), "units": round(100 * float(np.mean([u for u, _ in v])), 1),
             "mfcc": round(100 * float(np.mean([m for _, m in v])), 1)} for p, v in pairs.items()]
    return sorted(rows, key=lambda r: (-r["units"], -r["cells"]))[:n]


def breakdown(model_path: str, data: Sequence[str], split: str, n_pairs: int) -> dict[str, Any]:
    from app.services.jobs import drain
    from core import audio as audio_path
    from core.checkpoints import load_model
    from training.speech_eval import Selection, _encode_clips, list_eval_clips

    model, ckpt = load_model(model_path, kind="units")
    clips = list_eval_clips(data, Selection(split))[0]
    got = drain(_encode_clips(model, clips, "codebook", 0, audio_path.resampler_from_training(ckpt.training),
                              ckpt.features or None))
    units = cell_errors(got.unit_items, got.words, got.speakers)
    mfcc = cell_errors(got.mfcc_items, got.words, got.speakers)
    seconds: dict[tuple[str, str], list[float]] = defaultdict(list)
    for feats, w, s in zip(got.mfcc_items, got.words, got.speakers, strict=True):
        seconds[(s, w)].append(len(feats) / 100)  # MFCC frames every 10 ms
    length = {k: float(np.mean(v)) for k, v in seconds.items()}
    edges = np.quantile(list(length.values()), [1 / 3, 2 / 3])

    def tertile(key: tuple[str, str, str]) -> str:
        return ("1 short", "2 middle", "3 long")[int(np.searchsorted(edges, length[key[:2]]))]

    out = {"model": model_path, "data": list(data), "split": split, "cells": len(units),
           "units_cell_mean": round(100 * float(np.mean(list(units.values()))), 2),
           "mfcc_cell_mean": round(100 * float(np.mean(list(mfcc.values()))), 2),
           "length_edges_s": [round(float(e), 2) for e in edges],
           "by_length": {"units": grouped(units, tertile), "mfcc": grouped(mfcc, tertile)},
           "worst_pairs": worst_pairs(units, mfcc, n_pairs)}
    if all("\u3105" <= w[:1] <= "\u312f" for w in got.words):  # bopomofo syllables
        out["by_contrast"] = {"units": grouped(units, syllable_contrast), "mfcc": grouped(mfcc, syllable_contrast)}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.units_breakdown", description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--data", action="append", required=True)
    p.add_argument("--split", required=True)
    p.add_argument("--pairs", type=int, default=8)
    args = p.parse_args(argv)
    print(json.dumps(breakdown(args.model, args.data, args.split, args.pairs), indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
