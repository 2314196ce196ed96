"""Issue 38's fusion constants, replayed leave-one-library-out on the tuning libraries (bench/library_quality.py).

Each query's candidates are searched once (every file of these small libraries is a candidate): the keyword
strength, the names' cosine, the sound cosine, whether the file's names are silent, and the files' sound
vectors. Every rule is then replayed with the shipped code (fusion.fused_ranking, sounds_like.lift):
    keyword share (the bounded boost), semantic ceiling, names weight, and the sounds-like share, scale, floor.
The objective, fixed before any replay: the mean over a library's copies of the fused mAP@10, plus, on its
mixed copy, the renamed-files mAP@10 (library_quality.renamed_ranks), each copy's numbers weighing alike. For
each library held out the rule is chosen on the other two and scored on it: the `held_out` numbers are the
ones to quote. The held-out libraries (not in search_libraries.TUNING) are never replayed here.

`python -m bench.library_meaning` (JSON to stdout)
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import numpy as np

from bench import names_baseline
from bench.library_quality import (
    K,
    first_relevant_ranks,
    indexed_session,
    leave_one_library_out,
    renamed_ranks,
    tuning_copies,
)

SHARES = (0.05, 0.1, 0.2)
CEILS = (0.6, 0.8, 1.0)
WEIGHTS = (0.7, 0.8, 0.9)
LIKE_SHARES = (0.5, 0.7)
LIKE_SCALES = (0.5, 0.7, 0.85, 1.0)
FLOORS = (0.0, 0.5)
RULES = list(itertools.product(SHARES, CEILS, WEIGHTS, LIKE_SHARES, LIKE_SCALES, FLOORS))
FIELDS = ("share", "ceil", "w", "like_share", "like_scale", "like_floor")


def channels(folder: Path) -> dict:
    """Per query: the relevant files and every file's channel scores; the files' unit sound vectors."""
    queries = json.loads((folder / "relevance.json").read_text())["queries"]
    files = names_baseline.library_files(folder)
    with indexed_session(folder) as session:
        lib = session.library
        ids = {f: lib.files.id_of(folder / f) for f in files}
        silent = lib.text.silent_files([i for i in ids.values() if i is not None])
        vecs = lib.vectors.of_files(session.embedder.model_id, [i for i in ids.values() if i is not None])
        rows = []
        for q in queries:
            hits = session.search(q["query"], k=len(files), mode="both")
            rows.append({"relevant": q["relevant"], "ids": [h.file_id for h in hits],
                         "kw": [h.match.keyword_score for h in hits], "sem": [h.match.semantic_score for h in hits],
                         "snd": [h.match.sound_score for h in hits]})
    names = {i: f for f, i in ids.items() if i is not None}
    unit = {i: v / max(float(np.linalg.norm(v)), 1e-12) for i, v in vecs.items()}
    return {"rows": rows, "names": names, "silent": silent, "vectors": unit}


def replay(data: dict, rule: tuple[float, ...]) -> tuple[float, float | None]:
    """(fused mAP@10, renamed-files mAP@10 or None on a named copy) of one rule."""
    from app.services.search import fusion, sounds_like

    share, ceil, w, like_share, like_scale, floor = rule
    fr = fusion.FusionRule(keyword_share=share, sem_ceil=ceil, like_share=like_share, like_scale=like_scale,
                           like_floor=floor)
    aps, orders, queries = [], [], []
    for r in data["rows"]:
        kw = dict(zip(r["ids"], r["kw"], strict=True))
        sem = {i: s for i, s in zip(r["ids"], r["sem"], strict=True) if i not in data["silent"]}
        snd = dict(zip(r["ids"], r["snd"], strict=True))
        ranked = fusion.fused_ranking(kw, sem, snd, w, fr, silent=data["silent"])
        ranked = sounds_like.lift(ranked, data["vectors"], fr)
        order = [data["names"][f] for f, _ in ranked]
        rank = first_relevant_ranks(order, set(r["relevant"]))
        aps.append(1 / rank if rank <= K else 0.0)
        orders.append(order)
        queries.append({"relevant": r["relevant"]})
    ren = renamed_ranks(orders, queries)
    renamed = float(np.mean([1 / x if x <= K else 0.0 for x in ren])) if ren and any(
        n.startswith("Recordings/") for n in data["names"].values()) else None
    return float(np.mean(aps)), renamed


def objective(scores: tuple[float, float | None]) -> float:
    fused, ren = scores
    return fused + (ren if ren is not None else 0.0)


def main() -> int:
    data = tuning_copies(channels)
    if len(sys.argv) > 1:  # a pickle of the channels, to replay other rules without searching again
        import pickle

        Path(sys.argv[1]).write_bytes(pickle.dumps(data))
    table = {}
    for parts in data.values():
        for copy, d in parts.items():
            table[copy] = {r: replay(d, r) for r in RULES}
            print(copy, "replayed", file=sys.stderr)
    flat = {c: {r: objective(v) for r, v in t.items()} for c, t in table.items()}
    held = {lib: {"rule_chosen_on_the_others": dict(zip(FIELDS, r, strict=True)),
                  **{c: {"fused": round(table[c][r][0], 4), "renamed": None if table[c][r][1] is None
                         else round(table[c][r][1], 4)} for c in scores}}
            for lib, (r, scores) in leave_one_library_out(data, flat, RULES).items()}
    best = max(RULES, key=lambda r: np.mean([flat[c][r] for c in flat]))
    print(json.dumps({"held_out": held, "best_on_all": dict(zip(FIELDS, best, strict=True)),
                      "best_on_all_scores": {c: table[c][best] for c in table}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
