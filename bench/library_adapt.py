"""Letting the library teach the sound channel its vocabulary, replayed leave-one-library-out (issue 23).

The text query is expanded by the sound of the library's own files whose names are near it:
    q' = unit(q + lam * unit(sum_i softmax(sim_i / TAU) * audio_i))   over the TOP files most similar by `src`
where `src` is the names channel's sentence cosine ("sem"), its names score ("name") or the retrieval model's
joint-space text vector of the file's folder + name words ("joint"); the sound channel then scores every file
with q', and the fusion weight w is chosen with it. (src, lam, w) are chosen on two libraries (each with its
mixed copy) and scored on the third: the `held_out` numbers are the ones to quote. A second rule tried here
maps a recorder-named file's adapted sound score onto the names scale (`silent_as_names`).

`python -m bench.library_adapt` (uses the indexed libraries of bench/library_quality.py)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from bench import names_baseline
from bench.library_quality import K, indexed_session, leave_one_library_out, tuning_copies

TAU, TOP = 0.05, 50  # fixed beforehand
GRID = [(s, lam, w) for s in ("sem", "name", "joint") for lam in (0.0, 0.5, 1.0, 2.0)
        for w in (0.3, 0.5, 0.6, 0.7, 0.8, 0.9)]


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def collect(folder: Path) -> dict:
    """Per query: every file's names score and sentence cosine; per file: its audio and name-text vectors."""
    queries = json.loads((folder / "relevance.json").read_text())["queries"]
    files = names_baseline.library_files(folder)
    with indexed_session(folder) as s:
        rows = []
        for q in queries:
            hits = {h.rel_path: h for h in s.search(q["query"], k=len(files), mode="both")}
            rows.append({"relevant": set(q["relevant"]),
                         "name": np.array([hits[f].match.name_score for f in files]),
                         "sem": np.array([hits[f].match.semantic_score for f in files])})
            ids = [hits[f].file_id for f in files]
        vecs = s.library.vectors.of_files(s.embedder.model_id, ids)
        audio = unit(np.stack([vecs[i] for i in ids]))  # (F, D)
        joint = unit(s.embedder.embed_text([names_baseline.name_text(f) for f in files]))  # (F, D)
        qv = unit(s.embedder.embed_text([q["query"] for q in queries]))  # (Q, D)
    for r, v in zip(rows, qv, strict=True):
        r["q"] = v
        r["joint"] = joint @ v
    return {"files": files, "rows": rows, "audio": audio}


def first_rank_score(order: np.ndarray, files: list[str], relevant: set[str]) -> float:
    for i, j in enumerate(order[:K], 1):
        if files[j] in relevant:
            return 1.0 / i
    return 0.0


def replay(d: dict, src: str, lam: float, w: float) -> float:
    files, audio = d["files"], d["audio"]
    out = []
    for r in d["rows"]:
        q = r["q"]
        if lam > 0:
            idx = np.argsort(-r[src])[:TOP]
            wt = np.exp((r[src][idx] - r[src][idx].max()) / TAU)
            q = unit(q + lam * unit((wt / wt.sum()) @ audio[idx]))
        snd = audio @ q
        fused = w * r["name"] + (1 - w) * snd
        out.append(first_rank_score(np.lexsort((np.arange(len(files)), -snd, -fused)), files, r["relevant"]))
    return float(np.mean(out))


def main() -> int:
    data = tuning_copies(collect)
    table = {lib: {g: replay(d, *g) for g in GRID} for parts in data.values() for lib, d in parts.items()}
    held_out = {held: {"chosen_on_the_others": g, **{lib: round(v, 4) for lib, v in scores.items()},
                       "shipped": {lib: round(table[lib][("sem", 0.0, 0.7)], 4) for lib in data[held]}}
                for held, (g, scores) in leave_one_library_out(data, table, GRID).items()}
    print(json.dumps({"held_out": held_out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
