"""Pseudo-relevance feedback into the sound space, replayed leave-one-library-out on the development libraries.

Where a file's names say nothing about a query (names score 0: a recorder-style name, or words unrelated to
it), the sound of the query's best named matches can: the centroid of the best `TOP` files whose names score is
at least `SURE` is compared with every candidate's sound vector, and files whose names are silent get
    + beta * clip((cos - floor) / (1 - floor), 0, 1)
on top of the shipped fusion. beta and floor are chosen on two libraries (each with its mixed copy) by mean
mAP@10 and scored on the third: the `held_out` numbers are the ones to quote.

`python -m bench.library_prf`
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from bench import names_baseline
from bench.library_quality import K, first_relevant_ranks, indexed_session, leave_one_library_out, tuning_copies

TOP, SURE = 3, 0.5  # fixed beforehand: the best three files whose names agree at least halfway
BETAS = (0.0, 0.1, 0.2, 0.3, 0.5)
FLOORS = (0.5, 0.6, 0.7, 0.8)
RULES = [(b, f) for b in BETAS for f in FLOORS]


def channels(folder: Path) -> list[dict]:
    """Per query: the relevant files, every candidate's names score, fused score and unit sound vector."""
    queries = json.loads((folder / "relevance.json").read_text())["queries"]
    files = names_baseline.library_files(folder)
    with indexed_session(folder) as session:
        out = []
        for q in queries:
            hits = session.search(q["query"], k=len(files))
            vecs = session.library.vectors.of_files(session.embedder.model_id, [h.file_id for h in hits])
            dim = session.embedder.dim
            v = np.stack([vecs.get(h.file_id, np.zeros(dim, np.float32)) for h in hits])
            v /= np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
            out.append({"relevant": set(q["relevant"]), "files": [h.rel_path for h in hits],
                        "names": np.array([h.match.name_score for h in hits]),
                        "fused": np.array([h.score for h in hits]), "vecs": v})
        return out


def replay(rows: list[dict], beta: float, floor: float) -> float:
    ap = []
    for r in rows:
        fused = r["fused"].copy()
        sure = np.flatnonzero(r["names"] >= SURE)[:TOP]  # hits come best first
        if beta > 0 and len(sure):
            c = r["vecs"][sure].mean(axis=0)
            cos = r["vecs"] @ (c / max(float(np.linalg.norm(c)), 1e-12))
            fused += np.where(r["names"] <= 0, beta * np.clip((cos - floor) / (1 - floor), 0, 1), 0.0)
        order = [r["files"][i] for i in np.argsort(-fused, kind="stable")]
        rank = first_relevant_ranks(order, r["relevant"])
        ap.append(1 / rank if rank <= K else 0.0)
    return float(np.mean(ap))


def main() -> int:
    data = tuning_copies(channels)
    table = {lib: {r: round(replay(rows, *r), 4) for r in RULES}
             for parts in data.values() for lib, rows in parts.items()}
    held_out = {held: {"beta_floor_chosen_on_the_others": r, **scores}
                for held, (r, scores) in leave_one_library_out(data, table, RULES, lambda r: -r[0]).items()}
    best = max(RULES, key=lambda x: (np.mean([v[x] for v in table.values()]), -x[0]))
    print(json.dumps({"held_out": held_out, "chosen_on_all": best, "without": {
        lib: v[(0.0, FLOORS[0])] for lib, v in table.items()},
        "by_rule": {lib: {str(r): v for r, v in rows.items()} for lib, rows in table.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
