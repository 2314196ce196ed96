"""Search quality on the development libraries of bench/data/search_libraries (issue 23), beside the baseline.

Each library is a Debian package's sounds under their original folders and names, plus a mixed copy with a seeded
half of the files renamed recorder-style (`Recordings/REC_1A2B3C4D.ogg`). Queries and relevance were committed
before any system ran on them (bench/data/search_libraries/*/RELEVANCE.md says how relevance was decided: from
the package's own data and sources, not from the names). No model was trained or tuned on these packages.

Rankings per library: `baseline` (bench/names_baseline.py: MiniLM over folder + name words), Earshot's `names`,
`sound` and `both` (the default retrieval model), `random` (mean over 200 permutations) and, on mixed copies,
`best_names_possible`: a perfect names-only ranking, which finds a query's relevant files only where they kept
their names. mAP@10 = mean over queries of 1/rank of the first relevant file (0 beyond 10); R@10.

`python -m bench library_quality` (JSON to bench/out/); `python -m bench.library_quality --library flare`.
Libraries are built (apt-get download) and indexed once into $XDG_CACHE_HOME/earshot/bench-library-quality.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from bench import names_baseline, pinned, search_libraries

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "earshot" / "bench-library-quality"
K = 10
T = TypeVar("T")  # what a replay collects of one library copy
R = TypeVar("R")  # a replayed rule's constants


def first_relevant_ranks(order: Sequence[str], relevant: set[str]) -> int:
    """1-based rank of the first relevant file in a ranked list; beyond K (and the list) when none is listed: names
    mode lists only the files whose names match, and an empty list found nothing (len + 1 would be rank 1)."""
    for i, f in enumerate(order, 1):
        if f in relevant:
            return i
    return max(len(order), K) + 1


def metrics(ranks: Sequence[int]) -> dict[str, float]:
    r = np.asarray(ranks, dtype=np.float64)
    return {"mAP@10": round(float(np.where(r <= K, 1.0 / r, 0.0).mean()), 4),
            "R@10": round(float((r <= K).mean()), 4)}


def random_metrics(files: Sequence[str], queries: list[dict], seeds: int = 200) -> dict[str, float]:
    rng = np.random.default_rng(0)
    runs = []
    for _ in range(seeds):
        order = [files[i] for i in rng.permutation(len(files))]
        runs.append([first_relevant_ranks(order, set(q["relevant"])) for q in queries])
    per_seed = [metrics(r) for r in runs]
    return {m: round(float(np.mean([p[m] for p in per_seed])), 4) for m in ("mAP@10", "R@10")}


def best_names_possible(queries: list[dict]) -> dict[str, float]:
    """A perfect names-only ranking: rank 1 where a relevant file kept its name, else none in the top 10."""
    return metrics([1 if any(not f.startswith(search_libraries.MIXED_FOLDER + "/") for f in q["relevant"])
                    else K + 1 for q in queries])


@contextlib.contextmanager
def indexed_session(folder: Path, model: str | None = None) -> Iterator[Any]:  # a SearchSession
    """The folder indexed with the default retrieval model, or `model` (a name or a path), incrementally (once per
    model), and open for searching."""
    from app.services.jobs import drain
    from app.services.search.embedder import load_embedder
    from app.services.search.session import SearchSession

    session = SearchSession.open(folder, load_embedder(str(pinned.retrieval(model)[1])))  # never the user's pick
    try:
        drain(session.index_job())
        yield session
    finally:
        session.close()


def earshot_orders(folder: Path, files: list[str], queries: list[dict], modes: Sequence[str],
                   model: str | None = None) -> dict[str, list[list[str]]]:
    """Each query's ranked files in each of Earshot's modes (the sound channel: `model`, default the shipped one)."""
    if not modes:
        return {}
    with indexed_session(folder, model) as session:
        return {mode: [[h.rel_path for h in session.search(q["query"], k=len(files), mode=mode)] for q in queries]
                for mode in modes}


def renamed(path: str) -> bool:
    return path.startswith(search_libraries.MIXED_FOLDER + "/")


def renamed_ranks(orders: Sequence[Sequence[str]], queries: list[dict]) -> list[int]:
    """Issue 38's renamed-files measure of a mixed copy: for each query with a relevant renamed file, the rank of
    the first one among the renamed files only (their order in the ranking, scored against the renamed relevant
    ones): how well a system finds the files whose names say nothing."""
    return [first_relevant_ranks([f for f in order if renamed(f)], {f for f in q["relevant"] if renamed(f)})
            for order, q in zip(orders, queries, strict=True) if any(renamed(f) for f in q["relevant"])]


def score_folder(folder: Path, model: names_baseline.MiniLM, modes: Sequence[str], retrieval: str | None = None
                 ) -> dict:
    doc = json.loads((folder / "relevance.json").read_text())
    queries = doc["queries"]
    files = names_baseline.library_files(folder)
    sim = names_baseline.scores(model, files, [q["query"] for q in queries])  # (Q, F)
    orders = {"baseline": [[files[i] for i in np.argsort(-row, kind="stable")] for row in sim],
              **earshot_orders(folder, files, queries, modes, retrieval)}
    table = {mode: metrics([first_relevant_ranks(o, set(q["relevant"])) for o, q in zip(ranked, queries,
                                                                                         strict=True)])
             for mode, ranked in orders.items()}
    table["random"] = random_metrics(files, queries)
    out = {"files": len(files), "queries": len(queries), "rankings": table}
    if doc["mixed"]:
        table["best_names_possible"] = best_names_possible(queries)
        out["renamed_files"] = {mode: metrics(renamed_ranks(ranked, queries)) for mode, ranked in orders.items()}
        out["renamed_files"]["random"] = random_metrics([f for f in files if renamed(f)], [
            {"relevant": [f for f in q["relevant"] if renamed(f)]} for q in queries
            if any(renamed(f) for f in q["relevant"])])
    return out


def run(libraries: Sequence[str] | None = None, modes: Sequence[str] = ("names", "sound", "both"),
        baseline_model: str | None = None, retrieval: str | None = None) -> dict:
    model = names_baseline.MiniLM(baseline_model)
    out: dict[str, dict] = {}
    for name in libraries or search_libraries.library_names():
        built = search_libraries.build(name, CACHE / "libraries", search_libraries.cache_dir(None), mixed=True,
                                       seed=0)
        out[name] = score_folder(Path(built["folder"]), model, modes, retrieval)
        out[f"{name}-mixed"] = score_folder(Path(built["mixed_folder"]), model, modes, retrieval)
    return {"libraries": out, "table": table_lines(out), **pinned.model_fields(*pinned.retrieval(retrieval)),
            "notes": "unseen packages (no model trained or tuned on them); queries and relevance committed "
                     "before any system ran (bench/data/search_libraries)"}


def tuning_copies(collect: Callable[[Path], T]) -> dict[str, dict[str, T]]:
    """`collect` run on each tuning library and its mixed copy: {library: {copy name: what it gave}} (the
    leave-one-library-out replays of library_fusion, library_prf and library_adapt)."""
    data: dict[str, dict[str, T]] = {}
    for name in search_libraries.tuning_library_names():
        built = search_libraries.build(name, CACHE / "libraries", search_libraries.cache_dir(None), mixed=True,
                                       seed=0)
        data[name] = {name: collect(Path(built["folder"])), f"{name}-mixed": collect(Path(built["mixed_folder"]))}
    return data


def leave_one_library_out(data: Mapping[str, Mapping[str, Any]], table: Mapping[str, Mapping[R, float]],
                          rules: Sequence[R], prefer: Callable[[R], Any] = lambda r: 0) -> dict[str, tuple[R, dict]]:
    """For each library held out: the rule with the best mean score over the other libraries' copies (ties: the
    highest `prefer`), and the held-out copies' scores under it. table: {copy: {rule: score}}."""
    out = {}
    for held in data:
        train = [copy for name, copies in data.items() if name != held for copy in copies]
        rule = max(rules, key=lambda r: (float(np.mean([table[c][r] for c in train])), prefer(r)))
        out[held] = (rule, {copy: table[copy][rule] for copy in data[held]})
    return out


def table_lines(out: dict[str, dict]) -> list[str]:
    names = ["baseline", "names", "sound", "both", "best_names_possible", "random"]
    lines = [f"{'library':22} " + " ".join(f"{n[:10]:>10}" for n in names) + "   (mAP@10; renamed files: sound, "
             "both)"]
    for lib, r in out.items():
        cells = [f"{r['rankings'][n]['mAP@10']:10.3f}" if n in r["rankings"] else f"{'':>10}" for n in names]
        extra = r.get("renamed_files", {})
        tail = "   " + " ".join(f"{extra[m]['mAP@10']:.3f}" for m in ("sound", "both") if m in extra)
        lines.append(f"{lib:22} " + " ".join(cells) + (tail if extra else ""))
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.library_quality", description=__doc__.split("\n\n")[0])
    p.add_argument("--library", action="append", help="only this library (repeatable)")
    p.add_argument("--modes", default="names,sound,both", help="Earshot's modes to score (comma-separated; '' for "
                   "the baseline alone)")
    p.add_argument("--baseline-model", help="the baseline script with another mean-pooled sentence encoder (a "
                   "local sentence-transformers folder) instead of all-MiniLM-L6-v2")
    p.add_argument("--model", help="the sound channel's retrieval model (a name or a .safetensors path; default: the "
                   "shipped one)")
    args = p.parse_args(argv)
    result = run(args.library, [m for m in args.modes.split(",") if m], args.baseline_model, args.model)
    print("\n".join(result["table"]))
    print(json.dumps(result["libraries"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
