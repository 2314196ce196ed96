"""Replaying fusion rules on the development libraries of bench/library_quality.py, leave-one-library-out.

Each query's candidates are searched once (their keyword, names-cosine and sound scores); every rule is then
replayed in NumPy. For each library held out, a rule's constant is chosen on the other two (each with its mixed
copy) by mean mAP@10 and scored on the held-out library: the `held_out` numbers are the ones to quote.

`python -m bench.library_fusion`
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from bench import names_baseline
from bench.library_quality import K, first_relevant_ranks, indexed_session, leave_one_library_out, tuning_copies

WEIGHTS = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0)
SHARES = (0.1, 0.2, 0.3, 0.4, 0.5)  # the keyword's share of the names score
RULES = [(w, s) for w in WEIGHTS for s in SHARES]


def channels(folder: Path) -> list[dict]:
    """Per query: the relevant files and every candidate's (keyword relative, names cosine, sound cosine)."""
    queries = json.loads((folder / "relevance.json").read_text())["queries"]
    files = names_baseline.library_files(folder)
    with indexed_session(folder) as session:
        out = []
        for q in queries:
            hits = session.search(q["query"], k=len(files))
            out.append({"relevant": q["relevant"], "files": [h.rel_path for h in hits],
                        "kw": [h.match.keyword_score for h in hits], "sem": [h.match.semantic_score for h in hits],
                        "snd": [h.match.sound_score for h in hits]})
        return out


def replay(rows: list[dict], w: float, share: float) -> float:
    """mAP@10 of the sum rule with names weight w and keyword share `share`."""
    from app.services.search.fusion import FusionRule, names_score

    ap = []
    for r in rows:
        kw, sem, snd = (np.asarray(r[c], np.float64) for c in ("kw", "sem", "snd"))
        fused = w * names_score(kw, sem, FusionRule(keyword_share=share)) + (1 - w) * snd
        order = [r["files"][i] for i in np.lexsort((-snd, -fused))]
        rank = first_relevant_ranks(order, set(r["relevant"]))
        ap.append(1 / rank if rank <= K else 0.0)
    return float(np.mean(ap))


def main() -> int:
    data = tuning_copies(channels)
    table = {lib: {r: round(replay(rows, *r), 4) for r in RULES}
             for parts in data.values() for lib, rows in parts.items()}
    held_out = {held: {"w_share_chosen_on_the_others": r, **scores}
                for held, (r, scores) in leave_one_library_out(data, table, RULES).items()}
    best = max(RULES, key=lambda x: np.mean([v[x] for v in table.values()]))
    print(json.dumps({"held_out": held_out, "chosen_on_all": best, "shipped_0.7_0.2": {
        lib: v[(0.7, 0.2)] for lib, v in table.items()},
        "by_rule": {lib: {str(r): v for r, v in rows.items()} for lib, rows in table.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
