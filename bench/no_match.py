"""Choosing the "no good match" threshold leave-one-library-out on the development libraries (issue 23).

A query counts as having no good match when its first relevant file is beyond rank 10 of the default (fused)
search. For each library held out, the threshold on the best hit's confidence (fusion.confidence) is chosen on
the other two (with their mixed copies) by F1 of flagging such queries, and scored on the held-out one: the
precision and recall printed are held out; no query chooses the threshold it is scored with.

`python -m bench.no_match` (the libraries are those of bench/library_quality.py, built and indexed there).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from bench import names_baseline, search_libraries
from bench.library_quality import CACHE, K, first_relevant_ranks


def records(folder: Path) -> list[dict]:
    """Per query: the best hit's confidence and the rank of the first relevant file (fused search)."""
    from app.services.search import fusion
    from app.services.search.embedder import load_embedder
    from app.services.search.session import SearchSession

    queries = json.loads((folder / "relevance.json").read_text())["queries"]
    files = names_baseline.library_files(folder)
    session = SearchSession.open(folder, load_embedder())
    try:
        out = []
        for q in queries:
            hits = session.search(q["query"], k=len(files))
            m = hits[0].match
            best = fusion.Scores(hits[0].score, m.name_score, m.keyword_score, m.semantic_score, m.sound_norm,
                                 m.sound_score)
            out.append({"query": q["query"], "confidence": fusion.confidence(best, fusion.NAMES_WEIGHT),
                        "flagged": hits.no_good_match,
                        "rank": first_relevant_ranks([h.rel_path for h in hits], set(q["relevant"]))})
        return out
    finally:
        session.close()


def f1(conf: np.ndarray, bad: np.ndarray, t: float) -> tuple[float, float, float]:
    flag = conf < t
    tp = float((flag & bad).sum())
    p = tp / max(flag.sum(), 1)
    r = tp / max(bad.sum(), 1)
    return (2 * p * r / (p + r) if p + r else 0.0), p, r


def choose(conf: np.ndarray, bad: np.ndarray) -> float:
    """The threshold with the best F1 (the midpoint between neighbouring confidences; the lowest on ties)."""
    s = np.unique(conf)
    cands = np.concatenate([[s[0] - 1e-6], (s[1:] + s[:-1]) / 2, [s[-1] + 1e-6]])
    scores = [f1(conf, bad, t)[0] for t in cands]
    return float(cands[int(np.argmax(scores))])


def main() -> int:
    data: dict[str, list[dict]] = {}
    for name in search_libraries.library_names():
        built = search_libraries.build(name, CACHE / "libraries", search_libraries.cache_dir(None), mixed=True,
                                       seed=0)
        data[name] = records(Path(built["folder"])) + records(Path(built["mixed_folder"]))
    out = {}
    for held in data:
        train = [r for n, rs in data.items() if n != held for r in rs]
        t = choose(np.array([r["confidence"] for r in train]), np.array([r["rank"] > K for r in train]))
        test = data[held]
        conf, bad = np.array([r["confidence"] for r in test]), np.array([r["rank"] > K for r in test])
        _, p, r = f1(conf, bad, t)
        out[held] = {"threshold_chosen_on_the_others": round(t, 4), "held_out_precision": round(p, 3),
                     "held_out_recall": round(r, 3), "queries": len(test), "no_good_match": int(bad.sum()),
                     "flagged": int((conf < t).sum())}
    print(json.dumps({"held_out": out, "records": data}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
