"""Choosing the "no good match" threshold leave-one-library-out on the development libraries (issue 23).

A query counts as having no good match when its first relevant file is beyond rank 10 of the default (fused)
search. The confidence is a logistic regression of "a relevant file is in the top 10" on the best hit's
features (fusion.match_features); its threshold is the one with the best F1 of flagging the others. For each
library held out, both are fitted on the other two (with their mixed copies) and scored on the held-out one:
the precision and recall printed are held out. `shipped`: the fit on all three (fusion.CONFIDENCE_W, NO_MATCH).

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
    from bench import pinned

    queries = json.loads((folder / "relevance.json").read_text())["queries"]
    files = names_baseline.library_files(folder)
    from app.services.jobs import drain

    session = SearchSession.open(folder, load_embedder(str(pinned.shipped()[1])))  # not the user's default
    try:
        drain(session.index_job())  # incremental: indexed by bench.library_quality already
        out = []
        for q in queries:
            hits = session.search(q["query"], k=len(files))
            m = hits[0].match
            best = fusion.Scores(hits[0].score, m.name_score, m.keyword_score, m.semantic_score, m.sound_norm,
                                 m.sound_score)
            out.append({"query": q["query"], "features": fusion.match_features(best).tolist(),
                        "flagged": hits.no_good_match,
                        "rank": first_relevant_ranks([h.rel_path for h in hits], set(q["relevant"]))})
        return out
    finally:
        session.close()


def prf(flag: np.ndarray, bad: np.ndarray) -> tuple[float, float, float]:
    """Precision, recall and F1 of flagging the queries without a good match."""
    tp = float((flag & bad).sum())
    p, r = tp / max(int(flag.sum()), 1), tp / max(int(bad.sum()), 1)
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1e-2, steps: int = 50) -> np.ndarray:
    """Logistic regression weights (D,) by Newton's method with a small L2 penalty: x (N, D), y (N,) in {0, 1}."""
    w = np.zeros(x.shape[1])
    for _ in range(steps):
        p = 1 / (1 + np.exp(-x @ w))
        hess = (x.T * (p * (1 - p))) @ x + l2 * np.eye(len(w))
        w -= np.linalg.solve(hess, x.T @ (p - y) + l2 * w)
    return w


def fit(rows: list[dict]) -> tuple[np.ndarray, float]:
    """The confidence's weights and the threshold with the best F1 (the lowest of equals), fitted on rows."""
    x, good = np.array([r["features"] for r in rows]), np.array([r["rank"] <= K for r in rows])
    w = fit_logistic(x, good.astype(float))
    conf = 1 / (1 + np.exp(-x @ w))
    grid = np.round(np.linspace(0.05, 0.95, 91), 2)
    return w, float(max(grid, key=lambda t: prf(conf < t, ~good)[2]))


def main() -> int:
    data: dict[str, list[dict]] = {}
    for name in search_libraries.tuning_library_names():
        built = search_libraries.build(name, CACHE / "libraries", search_libraries.cache_dir(None), mixed=True,
                                       seed=0)
        data[name] = records(Path(built["folder"])) + records(Path(built["mixed_folder"]))
    out = {}
    for held in data:
        w, t = fit([r for n, rs in data.items() if n != held for r in rs])
        x, bad = np.array([r["features"] for r in data[held]]), np.array([r["rank"] > K for r in data[held]])
        flag = 1 / (1 + np.exp(-x @ w)) < t
        p, r, _ = prf(flag, bad)
        out[held] = {"weights": np.round(w, 2).tolist(), "threshold": t, "held_out_precision": round(p, 3),
                     "held_out_recall": round(r, 3), "queries": len(bad), "no_good_match": int(bad.sum()),
                     "flagged": int(flag.sum())}
    w, t = fit([r for rs in data.values() for r in rs])
    shipped = {"weights": np.round(w, 2).tolist(), "threshold": t}
    print(json.dumps({"held_out": out, "shipped": shipped, "records": data}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
