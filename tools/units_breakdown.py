"""Where a units model's ABX gain over MFCC goes on one set (issue 41): across-speaker ABX of the units and of
raw MFCC+Δ+ΔΔ, split by the X token's length and by word pair (the pairs the units confuse most).

    python -m tools.units_breakdown --model M --data DIR [--data DIR] --split S [--pairs 8]

The same clips, encoding and ABX as `earshot eval units` (training/speech_eval.py, training/abx.py); a cell is
(X's speaker, word A, word B), its error the share of (A, B, X) triplets with d(A, X) > d(B, X). Length bins are
the set's own tertiles of the X tokens' durations. Prints JSON.
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from training import abx

Cells = dict[tuple[str, str, str], float]  # (X speaker, word A, word B) -> error of the cell


def cell_errors(items: Sequence[np.ndarray], words: Sequence[str], speakers: Sequence[str]) -> Cells:
    """Across-speaker ABX error of every cell (A, B from one speaker, X of A's word from another)."""
    groups = abx._groups(words, speakers, None, 0)
    dist = abx._distances(list(items), groups, "across")  # (N, N), NaN where no triplet needs the pair
    by_speaker: dict[str, list[str]] = defaultdict(list)
    for s, w in groups:
        by_speaker[s].append(w)
    cells: Cells = {}
    for s, ws in by_speaker.items():
        for wa, wb in itertools.permutations(ws, 2):
            A, B = groups[(s, wa)], groups[(s, wb)]
            for t in by_speaker:
                X = groups.get((t, wa)) if t != s else None
                if X:
                    err = abx.triplet_errors(dist[np.ix_(A, X)], dist[np.ix_(B, X)], same_ax=False)
                    cells[(t, wa, wb)] = float(err)
    return cells


def by_length(cells: Cells, length: dict[tuple[str, str], float], edges: np.ndarray) -> list[float]:
    """Mean cell error per tertile of X's duration."""
    bins: list[list[float]] = [[], [], []]
    for (t, wa, _), err in cells.items():
        bins[int(np.searchsorted(edges, length[(t, wa)]))].append(err)
    return [round(100 * float(np.mean(b)), 2) if b else float("nan") for b in bins]


def worst_pairs(units: Cells, mfcc: Cells, n: int) -> list[dict[str, Any]]:
    """The unordered word pairs with the highest units error, with MFCC's error on the same cells."""
    pairs: dict[frozenset[str], list[tuple[float, float]]] = defaultdict(list)
    for key, err in units.items():
        pairs[frozenset(key[1:])].append((err, mfcc[key]))
    rows = [{"pair": " / ".join(sorted(p)), "units": round(100 * float(np.mean([u for u, _ in v])), 1),
             "mfcc": round(100 * float(np.mean([m for _, m in v])), 1)} for p, v in pairs.items()]
    return sorted(rows, key=lambda r: -r["units"])[:n]


def breakdown(model_path: str, data: Sequence[str], split: str, n_pairs: int) -> dict[str, Any]:
    from app.services.jobs import drain
    from core import audio as audio_path
    from core.checkpoints import load_model
    from training.speech_eval import Selection, _encode_clips, list_eval_clips

    model, ckpt = load_model(model_path, kind="units")
    clips = [c for c in list_eval_clips(data, Selection(split))[0]]
    got = drain(_encode_clips(model, clips, "codebook", 0, audio_path.resampler_from_training(ckpt.training),
                              ckpt.features or None))
    units = cell_errors(got.unit_items, got.words, got.speakers)
    mfcc = cell_errors(got.mfcc_items, got.words, got.speakers)
    length = {(s, w): len(m) / 100 for m, w, s in zip(got.mfcc_items, got.words, got.speakers, strict=True)}
    edges = np.quantile(list(length.values()), [1 / 3, 2 / 3])
    return {"model": model_path, "data": list(data), "split": split, "cells": len(units),
            "units_cell_mean": round(100 * float(np.mean(list(units.values()))), 2),
            "mfcc_cell_mean": round(100 * float(np.mean(list(mfcc.values()))), 2),
            "length_edges_s": [round(float(e), 2) for e in edges],
            "units_by_length": by_length(units, length, edges), "mfcc_by_length": by_length(mfcc, length, edges),
            "worst_pairs": worst_pairs(units, mfcc, n_pairs)}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.units_breakdown", description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--data", action="append", required=True)
    p.add_argument("--split", required=True)
    p.add_argument("--pairs", type=int, default=8)
    args = p.parse_args(argv)
    print(json.dumps(breakdown(args.model, args.data, args.split, args.pairs), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
