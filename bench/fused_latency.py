"""Fused-search latency on a synthetic library of N files: `python -m bench.fused_latency N FOLDER [--model M]`,
or `python -m bench fused_latency` (also in `make bench`: 100k and 1M files, libraries cached under
$XDG_CACHE_HOME/earshot/bench-fused-latency, JSON in bench/out/fused_latency.json). The model is the shipped
default unless `--model` names another (bench/pinned.py); the JSON says which.

Builds (once) a catalog of N files straight into SQLite -- three caption words per name under a UCS-category folder,
their FTS rows, clustered unit vectors for the default model's sound space and the MiniLM text space (2,000 centres)
-- lets the library build its FAISS indexes (HNSW at 100k, IVF at 1M), opens it (`open_s`: opened and the first
query answered; `in_memory_s`: a mapped IVF index also copied into memory in the background), then times
`SearchSession.search(text, 10, mode=...)` end to end (query encoding + both channels + fusion + why-matched) for
160 new queries (the search-quality queries with a number appended: no cache hits) per mode, on one torch/FAISS/BLAS
thread. The sound mode runs after `both` on the same texts, so its encoder cache is warm: it times the search alone.
Prints JSON with wall-clock p50/p95 per mode, the same for the process's CPU time (what the search costs with a core
to itself: on a shared, loaded box the wall clock also counts waiting for a core), the query-encoding p50 and the
1-min load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from app.services.library import catalog as C
from app.services.library.library import Library
from app.services.search.embedder import cap_threads, default_text_encoder, load_query_embedder
from app.services.search.session import SearchSession
from bench import pinned

ROOT = Path(__file__).resolve().parents[1]
BATCH = 20_000


def unit(rng: np.random.Generator, n: int, centres: np.ndarray) -> np.ndarray:
    """(n, D) unit vectors around random centres."""
    c = centres[rng.integers(0, len(centres), n)]
    x = c + 1.3 * rng.standard_normal(c.shape).astype(np.float32) / np.sqrt(c.shape[1])
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def vocabulary() -> tuple[list[str], list[str]]:
    with open(ROOT.parent / "shared/data/sfx/captions.csv", encoding="utf-8") as f:
        words = sorted({w for line in f for w in line.split(",")[1].lower().split() if w.isalpha() and len(w) > 2})
    with open(ROOT / "app/services/library/data/ucs_categories.csv", encoding="utf-8") as f:
        cats = [line.split(",")[1].lower() for line in f if not line.startswith(("#", "CatID"))]
    return words, cats


def build(root: Path, n_files: int, tower: Any, enc: Any) -> None:  # noqa: ANN401 - text tower, encoder
    rng = np.random.default_rng(0)
    words, cats = vocabulary()
    root.mkdir(parents=True, exist_ok=True)
    lib = Library.open(root)
    db = lib.db
    db.execute("PRAGMA synchronous = OFF")  # a benchmark catalog: rebuilt, not recovered, after a crash
    db.execute("PRAGMA cache_size = -262144")  # 256 MiB: the 1M build's B-tree inserts stay in memory
    sound_c = rng.standard_normal((2000, tower.dim)).astype(np.float32)
    text_c = rng.standard_normal((2000, enc.dim)).astype(np.float32)
    seen: set[bytes] = set()
    with C.transaction(db):
        db.execute("INSERT INTO models(model_id, dim, sample_rate, window_seconds) VALUES (?, ?, 32000, 10)",
                   (tower.model_id, tower.dim))
        db.execute("INSERT INTO models(model_id, dim, sample_rate, window_seconds) VALUES (?, ?, 0, 0)",
                   (enc.model_id, enc.dim))
        for start in range(0, n_files, BATCH):
            n = min(BATCH, n_files - start)
            w = rng.integers(0, len(words), (n, 3))
            cat = rng.integers(0, len(cats), n)
            files, texts, fts = [], [], []
            for i in range(n):
                fid, a, b, c = start + i + 1, words[w[i, 0]], words[w[i, 1]], words[w[i, 2]]
                folder, name = f"{cats[cat[i]]}/{a}", f"{a}_{b}_{c}_{i % 7:02d}"
                key = f"{folder}/{name}.wav".encode()
                if key in seen:  # three random words twice in one folder (1M files): a take number makes it unique
                    key = f"{folder}/{name}-{fid}.wav".encode()
                seen.add(key)
                files.append((fid, key, 1000, 0, f"h{fid}", 3.0, 44100, 1 + i % 2, "ok", 0.0, "wav"))
                texts.append((fid, key, 0, 1, f"{a} {b} {c}", folder.replace("/", " "), ""))
                fts.append((fid, f"{a} {b} {c} {name}", folder.replace("/", " "), "", ""))
            db.executemany("INSERT INTO files(id, path, size, mtime_ns, hash, duration, sample_rate, channels,"
                           " status, indexed_at, format) VALUES (?,?,?,?,?,?,?,?,?,?,?)", files)
            db.executemany("INSERT INTO texts(file_id, path, mtime_ns, version, name, folder, tags)"
                           " VALUES (?,?,?,?,?,?,?)", texts)
            db.executemany("INSERT INTO text_fts(rowid, name, folder, tags, user_tags) VALUES (?,?,?,?,?)", fts)
            for model_id, centres in ((tower.model_id, sound_c), (enc.model_id, text_c)):
                v = unit(rng, n, centres)
                db.executemany("INSERT INTO vectors(model_id, file_id, vector, n_windows, windows)"
                               " VALUES (?,?,?,1,?)",
                               [(model_id, start + i + 1, v[i].tobytes(), v[i].tobytes()) for i in range(n)])
            print(f"{start + n} rows", file=sys.stderr)
    for model_id in (tower.model_id, enc.model_id):
        print(model_id, lib.vectors.index(model_id).kind, file=sys.stderr)  # built and saved
    lib.close()


def percentiles(ms: list[float], cpu: list[float]) -> dict[str, float]:
    return {"p50_ms": round(float(np.percentile(ms, 50)), 1), "p95_ms": round(float(np.percentile(ms, 95)), 1),
            "cpu_p50_ms": round(float(np.percentile(cpu, 50)), 1),
            "cpu_p95_ms": round(float(np.percentile(cpu, 95)), 1), "n": len(ms)}


def main(n_files: int, root: Path, model: str | None = None) -> dict[str, Any]:
    name, path, chosen = pinned.retrieval(model)
    tower, enc = load_query_embedder(str(path)), default_text_encoder()
    out: dict[str, Any] = {"N": n_files, **pinned.model_fields(name, path, chosen)}
    if not (root / ".earshot" / "catalog.sqlite").exists():
        t = time.perf_counter()
        build(root, n_files, tower, enc)
        out["build_s"] = round(time.perf_counter() - t, 1)
    elif not _has_model(root, tower.model_id):  # built for another model: its sound vectors are not this one's
        raise SystemExit(f"{root} was built for another model than {name}: give another folder")
    cap_threads(1)
    t = time.perf_counter()
    session = SearchSession(Library.open(root), tower, text_encoder=enc)
    session.search("warm up", 10, mode="both")  # loads both FAISS indexes
    out["open_s"] = round(time.perf_counter() - t, 1)  # and the first query answered
    session.library.vectors.wait_in_memory()  # a mapped IVF index is copied into memory in the background
    out["in_memory_s"] = round(time.perf_counter() - t, 1)
    with open(ROOT / "bench/data/search_quality_queries.csv", encoding="utf-8") as f:
        queries = [line.split(",")[0] for line in f][1:]
    out["load_1min_before"] = round(os.getloadavg()[0], 2)
    try:
        for mode in ("both", "sound", "names"):
            ms, cpu = [], []
            for i, q in enumerate(queries * 2):
                t, c = time.perf_counter(), time.process_time()
                session.search(f"{q} {i}", 10, mode=mode)  # a new query each time: no cache hit
                ms.append((time.perf_counter() - t) * 1000)
                cpu.append((time.process_time() - c) * 1000)
            out[mode] = percentiles(ms[5:], cpu[5:])
        ms, cpu = [], []
        for i, q in enumerate(queries):
            t, c = time.perf_counter(), time.process_time()
            tower.embed_with_mean(f"{q} x{i}")
            ms.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() - c) * 1000)
        out["encode_both_p50_ms"] = round(float(np.percentile(ms, 50)), 1)
        out["encode_both_cpu_p50_ms"] = round(float(np.percentile(cpu, 50)), 1)
        out["load_1min"] = round(os.getloadavg()[0], 2)
    finally:
        session.close()
    return out


def _has_model(root: Path, model_id: str) -> bool:
    with Library.open(root) as lib:
        return lib.db.execute("SELECT 1 FROM models WHERE model_id = ?", (model_id,)).fetchone() is not None


SIZES = (100_000, 1_000_000)


def run() -> dict[str, Any]:
    """`python -m bench fused_latency`: both sizes, libraries built once into the cache folder."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "earshot" / "bench-fused-latency"
    return {f"{n // 1000}k": main(n, base / f"lib{n // 1000}k") for n in SIZES}


if __name__ == "__main__":
    p = argparse.ArgumentParser(prog="python -m bench.fused_latency", description=__doc__.split("\n")[0])
    p.add_argument("n_files", type=int)
    p.add_argument("folder", type=Path, help="the synthetic library (built there on the first run)")
    p.add_argument("--model", default=None, help="the retrieval model (a registry name or a .safetensors path); "
                   "default: the shipped one, whatever the user's default is")
    args = p.parse_args()
    print(json.dumps(main(args.n_files, args.folder, args.model)))
