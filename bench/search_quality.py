"""Development benchmark for search quality: names, sound and both, on a library laid out the way people keep one.

`python -m bench search_quality` (also run by `make bench`) prints JSON and writes bench/out/search_quality.json.

What is measured, exactly (the JSON says the same in `notes`):
- Library: the clips of the sfx corpus's held-out split (`split` = val, 207 clips; the corpus has no test split)
  copied into a folder tree rebuilt from each clip's ORIGINAL path in its Debian package (`source_file`):
  `usr/share/scratch/Media/Sounds/Animal/Bird.wav` -> `scratch/Animal/Bird.wav`. The package is the top folder
  (without `-data` and version suffixes), install prefixes, archive members' containers (`public.zip!`) and
  generic folders (`Media`, `Sounds`, `data`, `core`, ...) are dropped, the rest of the path is kept. The file
  keeps its source's format when core.audio writes it (.wav, .ogg; .oga -> .ogg), else it becomes .wav.
- The same audio a second time, with hash-like names (`a3f9c1e2.wav`) and no folders: a library whose names say
  nothing. Fused search should rank there like sound-only.
- Only the held-out split, because the default retrieval model was trained on the corpus's train split: its
  sound channel has seen those clips (and their captions), so scoring it there would flatter it.
- Queries: bench/data/search_quality_queries.csv, written the way users search (categories, paraphrases), each
  with its relevant clips given as a regular expression over the clips' captions (`caption`, `caption_2`),
  case-insensitive; every query has at least one relevant clip (checked at run time; counts in the JSON).
  NB: the captions were derived from the source file names, so names-only search has an easy time on words that
  are in the names; the paraphrase and category queries are where it does not.
- Each library is indexed with the shipped retrieval model (or `--model`; bench/pinned.py) into a cache folder
  ($XDG_CACHE_HOME/earshot/bench-search-quality; built once, then indexing is incremental), and every query ranks
  the whole library (k = all files) in each mode the search service offers: `sound` (audio embedding only),
  `names` (the text channel: names, folders, tags) and `both` (fused). Before the service had modes, only
  sound-only ran (the JSON's `modes_available` says which ran).
- Metrics from training/ranking.py (`retrieval_metrics`, pessimistic ties, files a mode does not return rank
  below every returned one): mAP@10 = mean over queries of 1/rank of the first relevant file (0 beyond 10),
  R@10 = share of queries with a relevant file in the top 10. Also `AP@10`: the mean average precision over the
  top 10 with all relevant files counted (sum of precision@i at relevant ranks i <= 10 / min(#relevant, 10)),
  which rewards finding all of them. Random ranking: the mean over 200 seeded permutations.
- Honest fusion tuning (`cross_validation` in the JSON): every query's raw channel scores (BM25, sentence cosine,
  sound cosine) are read once and each candidate fusion rule is replayed on them offline with the service's own
  fusion code (`app.services.search.fusion.fuse_arrays`, the same candidate sets; `replica_check` says the replay of the
  shipped rule gives the service's fused mAP@10). The names score keeps the service's constants (they define
  names-only search, the baseline); the rules differ in how the sound channel joins it: the weighted sum
  w * names + (1 - w) * sound with the raw sound cosine (`sum_cosine`) or the cosine min-max scaled over the
  candidates (`sum_minmax`), over w = 0.5 .. 0.95, and reciprocal-rank fusion over (w, k). 5-fold
  cross-validation over queries, repeated over 5 seeded shuffles: the rule is chosen on 4 folds (best mean
  mAP@10), scored on the held-out fold; `cv_mAP@10` is the mean held-out score, `held_out_vs_names_only` counts
  the held-out queries the chosen rule ranked worse or better than names-only. Shipped = the rule in the
  service (with the default model, the one chosen on every fold: its in-sample and held-out scores agree; with
  another sound channel, `--model`, the held-out choice may differ). The sfx val split is held out from the
  default sound model's training but drawn from the same corpus and captions: a held-out split of the training
  distribution, not unseen data.
- `fused_vs_names_only`: every query on which fused and names-only search put the first relevant file at a
  different rank, worst for fusion first.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import inspect
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.results import write_result
from core.audio import decode, write_audio
from training.ranking import retrieval_metrics

ROOT = Path(__file__).resolve().parents[1]
SFX = ROOT.parent / "shared" / "data" / "sfx"
QUERIES = Path(__file__).parent / "data" / "search_quality_queries.csv"
SPLITS = ("val", "test")  # held out from the default model's training (the corpus has only val today)
K = 10
RANDOM_SEEDS = 200
# folders that say where a package keeps its files, not what a sound is
GENERIC = {"usr", "share", "games", "media", "sounds", "sound", "data", "core", "audio", "sfx", "mods", "public",
           "baseoa", "missionpack", "base", "default", "snd_classic", "stereo", "techs", "commondata"}
WRITABLE = {".wav": ".wav", ".ogg": ".ogg", ".oga": ".ogg"}  # source extension -> what core.audio.write_audio writes


@dataclass
class Clip:
    audio: Path  # the corpus file (32 kHz mono wav)
    captions: list[str]
    named: str  # relative path in the named library
    hashed: str  # relative path in the hash-named library


# ------------------------------------------------------------------------------------------ library layout


def package_folder(package: str) -> str:
    """'wesnoth-1.16-data' -> 'wesnoth', '0ad-data' -> '0ad', 'sound-icons' unchanged."""
    return re.sub(r"(-[\d.]+)?-data$", "", package)


def named_path(source_file: str, package: str) -> str:
    """The clip's path in a user's library: package folder, the meaningful folders of its source path, its name.

    'usr/share/scratch/Media/Sounds/Animal/Bird.wav' (scratch) -> 'scratch/Animal/Bird.wav'
    """
    parts = [p for p in source_file.replace("!/", "/").split("/") if p]
    name = parts.pop()
    top = package_folder(package)
    app_dirs = {top.lower(), package.lower(), top.split("-")[0].lower()}
    keep = [p for p in parts
            if p.lower() not in GENERIC and not p.lower().startswith(tuple(app_dirs)) and not re.fullmatch(r"[\d.]+", p)
            and not re.search(r"\.(zip|pk3|wz)$", p, re.I) and not p.lower().startswith(("megapack", "minetest_game"))]
    stem, ext = os.path.splitext(name)
    return "/".join([top, *keep, stem + WRITABLE.get(ext.lower(), ".wav")])


def hashed_path(named: str) -> str:
    return hashlib.sha1(named.encode()).hexdigest()[:8] + ".wav"


def load_clips(sfx: Path = SFX, splits: tuple[str, ...] = SPLITS) -> list[Clip]:
    with open(sfx / "captions.csv", newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["split"] in splits]
    clips, seen = [], set()
    for r in rows:
        named = named_path(r["source_file"], r["source_package"])
        stem, ext = os.path.splitext(named)
        n = 2
        while named.lower() in seen:  # two sources with one name (e.g. the same name in two archives)
            named, n = f"{stem}-{n}{ext}", n + 1
        seen.add(named.lower())
        caps = [c for c in (r.get("caption", ""), r.get("caption_2", "")) if c]
        clips.append(Clip(sfx / r["path"], caps, named, hashed_path(named)))
    return clips


def write_library(clips: list[Clip], root: Path, which: str) -> int:
    """Copy every clip into `root` under its `which` ('named' | 'hashed') path; files already there are kept.
    Returns how many were written."""
    written = 0
    for c in clips:
        dest = root / getattr(c, which)
        if dest.is_file():
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        d = decode(c.audio, mono=False, max_seconds=None)  # (N, C) at the clip's own rate
        write_audio(dest, d.audio, d.sample_rate)  # atomic: a killed run leaves no half-written file
        written += 1
    return written


# ------------------------------------------------------------------------------------------ queries


def load_queries(path: Path = QUERIES) -> list[tuple[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return [(r["query"].strip(), r["relevant_caption_regex"]) for r in csv.DictReader(f) if r["query"].strip()]


def relevance(queries: list[tuple[str, str]], clips: list[Clip]) -> np.ndarray:
    """(n_queries, n_clips) bool: the query's regex finds one of the clip's captions."""
    rel = np.zeros((len(queries), len(clips)), dtype=bool)
    for i, (_, pattern) in enumerate(queries):
        rx = re.compile(pattern, re.I)
        rel[i] = [any(rx.search(c) for c in clip.captions) for clip in clips]
    return rel


# ------------------------------------------------------------------------------------------ metrics


def ap_at_k(sim: np.ndarray, rel: np.ndarray, k: int = K) -> float:
    """Mean over queries of average precision in the top k, all relevant files counted."""
    out = []
    for s, r in zip(sim, rel, strict=True):
        order = np.argsort(-s, kind="stable")[:k]
        hits = r[order].astype(float)
        precision = np.cumsum(hits) / np.arange(1, len(hits) + 1)
        out.append(float((precision * hits).sum() / min(int(r.sum()), k)))
    return float(np.mean(out))


def scores(sim: np.ndarray, rel: np.ndarray) -> dict[str, float]:
    m = retrieval_metrics(sim, rel, k=K)
    return {"mAP@10": round(m["mAP@10"], 4), "R@10": round(m["R@10"], 4), "AP@10": round(ap_at_k(sim, rel), 4),
            "R@1": round(m["R@1"], 4), "median_rank": m["median_rank"]}


def random_scores(rel: np.ndarray, seeds: int = RANDOM_SEEDS) -> dict[str, float]:
    rng = np.random.default_rng(0)
    runs = [scores(rng.random(rel.shape), rel) for _ in range(seeds)]  # (n_queries, n_clips) random scores
    return {key: round(float(np.mean([r[key] for r in runs])), 4) for key in runs[0]}


# ------------------------------------------------------------------------------------------ ranking


def supports_modes(session: Any) -> bool:  # noqa: ANN401
    return "mode" in inspect.signature(session.search).parameters


def rank_matrix(session: Any, queries: list[str], index_of: dict[str, int], n: int, mode: str | None,  # noqa: ANN401
                **kwargs: Any) -> np.ndarray:
    """(n_queries, n) scores from the ranks the session returns: n - rank for returned files, -inf otherwise."""
    sim = np.full((len(queries), n), -np.inf)
    for i, q in enumerate(queries):
        hits = session.search(q, n, **({"mode": mode} if mode else {}), **kwargs)
        for rank, h in enumerate(hits):
            j = index_of.get(Path(h.rel_path).as_posix() if h.rel_path else "")
            if j is not None and sim[i, j] == -np.inf:
                sim[i, j] = n - rank
    return sim


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "earshot" / "bench-search-quality"


def open_indexed(root: Path, embedder: Any) -> Any:  # noqa: ANN401
    from app.services.jobs import drain
    from app.services.search.search_jobs import summarize
    from app.services.search.session import SearchSession

    session = SearchSession.open(root, embedder)
    report = summarize(drain(session.index_job()))
    if report.get("failed"):
        print(f"{root.name}: {report['failed']} files failed to index", file=sys.stderr)
    return session


def evaluate_library(session: Any, clips: list[Clip], which: str, queries: list[tuple[str, str]],  # noqa: ANN401
                     rel: np.ndarray, weights: list[float] | None = None) -> dict[str, Any]:
    index_of = {getattr(c, which): j for j, c in enumerate(clips)}
    texts = [q for q, _ in queries]
    modes = ["sound", "names", "both"] if supports_modes(session) else [None]
    out: dict[str, Any] = {}
    per_query: dict[str, np.ndarray] = {}  # (Q,) reciprocal rank of the first relevant file, per ranking
    for mode in modes:
        t0 = time.perf_counter()
        sim = rank_matrix(session, texts, index_of, len(clips), mode)
        label = {"sound": "sound_only", "names": "names_only", "both": "fused", None: "sound_only"}[mode]
        out[label] = {**scores(sim, rel), "seconds": round(time.perf_counter() - t0, 2)}
        per_query[label] = first_relevant_rr(sim, rel)
    if weights and supports_modes(session) and "names_weight" in inspect.signature(session.search).parameters:
        out["fused_by_names_weight"] = {
            str(w): scores(rank_matrix(session, texts, index_of, len(clips), "both", names_weight=w), rel)
            for w in weights}
    out["random"] = random_scores(rel)
    out["per_query_reciprocal_rank"] = {k: [round(float(x), 3) for x in v] for k, v in per_query.items()}
    if supports_modes(session) and hasattr(session, "encode_query"):
        ch = channel_scores(session, texts, [getattr(c, which) for c in clips])
        out["cross_validation"] = cross_validate(ch, rel, out["fused"]["mAP@10"], per_query["names_only"])
    if "names_only" in per_query:
        out["fused_vs_names_only"] = [{"query": r["query"], "fused_rr": round(r["a"], 3),
                                       "names_only_rr": round(r["b"], 3)}
                                      for r in versus(per_query["fused"], per_query["names_only"], texts)]
    return out


# ------------------------------------------------------------------------------------------ honest fusion tuning

WEIGHTS = [round(0.5 + 0.05 * i, 2) for i in range(10)]  # the names' weight: 0.5 .. 0.95
RRF_KS = [2, 5, 10, 20, 60]
FOLDS, REPEATS = 5, 5


@dataclass
class Channels:
    """Raw channel scores of every clip for every query, (Q, N) each, and the service's candidate sets."""

    keyword: np.ndarray  # BM25, 0 = no match
    semantic: np.ndarray  # sentence cosine, 0 = no vector
    sound: np.ndarray  # sound cosine, NaN = no vector
    candidate: np.ndarray  # bool: among some channel's top CANDIDATES (what the service fuses)


def channel_scores(session: Any, texts: list[str], paths: list[str]) -> Channels:  # noqa: ANN401
    """Each channel's raw scores for each query over the whole library, read the way the service reads them."""
    from app.services.search.fusion import CANDIDATES
    from app.services.search.query import parse

    lib, enc = session.library, session.text_encoder
    ids = [lib.files.id_of(p) for p in paths]
    col = {fid: j for j, fid in enumerate(ids) if fid is not None}
    n = len(paths)

    def matrix(model_id: str) -> np.ndarray | None:  # (N, D) vectors in clip order, NaN rows where missing
        vecs = lib.vectors.of_files(model_id, [f for f in ids if f is not None])
        if not vecs:
            return None  # e.g. no sentence vectors in a library whose names say nothing
        dim = len(next(iter(vecs.values())))
        return np.stack([vecs.get(f, np.full(dim, np.nan, np.float32)) for f in ids])

    snd_m = matrix(session.embedder.model_id)
    sem_m = matrix(enc.model_id) if enc is not None else None
    if snd_m is None:
        raise SystemExit(f"{lib.root}: no sound vectors to cross-validate with")
    q_n = len(texts)
    kw, sem, snd = np.zeros((q_n, n)), np.zeros((q_n, n)), np.full((q_n, n), np.nan)
    cand = np.zeros((q_n, n), bool)
    for i, text in enumerate(texts):
        query = parse(text)
        vectors = session.encode_query(query.free_text)
        sound_q, text_q = vectors.sound, vectors.text
        match = query.fts_match()
        for fid, score in lib.text.keyword_search(match, CANDIDATES) if match else []:
            if fid in col:
                kw[i, col[fid]], cand[i, col[fid]] = score, True
        snd[i] = snd_m @ (sound_q / np.linalg.norm(sound_q))
        cand[i, top(snd[i], CANDIDATES)] = True
        if sem_m is not None and text_q is not None:
            cos = sem_m @ (text_q / np.linalg.norm(text_q))
            cand[i, top(cos, CANDIDATES)] = True
            sem[i] = np.nan_to_num(cos)
    return Channels(kw, sem, snd, cand)


def top(x: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest finite values."""
    finite = np.flatnonzero(np.isfinite(x))
    return finite[np.argsort(-x[finite], kind="stable")[:k]]


def fused_sim(ch: Channels, rule: tuple) -> np.ndarray:
    """(Q, N) scores of a rule replayed on the channels with the service's fusion: ("sum", w, sound scale) = the
    weighted sum (sound "cosine" or "minmax"); ("rrf", w, k) = reciprocal-rank fusion. The names score keeps
    the service's constants (they define names-only search). Candidates only (the rest -inf, like files the
    service does not return)."""
    from app.services.search.fusion import FusionRule, fuse_arrays

    fusion = FusionRule(kind="sum", sound_scale=rule[2]) if rule[0] == "sum" else FusionRule(kind="rrf",
                                                                                             rrf_k=rule[2])
    sim = np.full(ch.sound.shape, -np.inf)
    for i in range(len(sim)):
        c = np.flatnonzero(ch.candidate[i])
        if not len(c):
            continue
        kw, sem, snd = ch.keyword[i, c], ch.semantic[i, c], ch.sound[i, c]
        fused = fuse_arrays(kw, sem, snd, rule[1], fusion)[0]
        order = np.lexsort((c, -np.nan_to_num(snd, nan=-9.0), -fused))  # fused, then sound, then id order
        sim[i, c[order]] = len(c) - np.arange(len(c))
    return sim


def rules() -> dict[str, list[tuple]]:
    return {"sum_cosine": [("sum", w, "cosine") for w in WEIGHTS],
            "sum_minmax": [("sum", w, "minmax") for w in WEIGHTS],
            "rrf": [("rrf", w, k) for w in WEIGHTS for k in RRF_KS]}


def shipped_rule() -> tuple:
    from app.services.search.fusion import FUSION, NAMES_WEIGHT, RRF_K, SOUND_SCALE

    return (FUSION, NAMES_WEIGHT, SOUND_SCALE if FUSION == "sum" else RRF_K)


def cross_validate(ch: Channels, rel: np.ndarray, service_fused: float, names_rr: np.ndarray | None = None
                   ) -> dict[str, Any]:
    """Choose a rule on 4 folds of queries, score it on the fifth; repeated over seeded shuffles. With the
    names-only per-query scores, also how many held-out queries the chosen rules lost or won against them."""
    families = rules()
    every = [r for rs in families.values() for r in rs]
    rr = {r: first_relevant_rr(fused_sim(ch, r), rel) for r in every}  # (Q,) held-out-able per-query scores
    shipped = shipped_rule()
    rr.setdefault(shipped, first_relevant_rr(fused_sim(ch, shipped), rel))
    q_n = rel.shape[0]
    out: dict[str, Any] = {"folds": FOLDS, "repeats": REPEATS,
                           "replica_check": {"service_fused_mAP@10": service_fused,
                                             "replayed_shipped_mAP@10": round(float(rr[shipped].mean()), 4)},
                           "shipped_rule": list(shipped),
                           "shipped_mAP@10_not_held_out": round(float(rr[shipped].mean()), 4)}
    for family, candidates in {**families, "any": every}.items():
        held, chosen, test_ids = [], [], []
        for rep in range(REPEATS):
            perm = np.random.default_rng(rep).permutation(q_n)
            for f in range(FOLDS):
                test = perm[f::FOLDS]
                train = np.setdiff1d(perm, test)
                best = max(candidates, key=lambda r: (rr[r][train].mean(), -candidates.index(r)))
                held.append(rr[best][test])
                chosen.append(best)
                test_ids.append(test)
        full_best = max(candidates, key=lambda r: (rr[r].mean(), -candidates.index(r)))
        scores_ = np.concatenate(held)
        out[family] = {"cv_mAP@10": round(float(scores_.mean()), 4),
                       "cv_mAP@10_sd_over_repeats": round(float(np.std([np.concatenate(held[r * FOLDS:(r + 1) * FOLDS])
                                                                       .mean() for r in range(REPEATS)])), 4),
                       "chosen_per_fold": [list(c) for c in chosen[:FOLDS]],
                       "chosen_how_often": {str(list(r)): chosen.count(r) for r in dict.fromkeys(chosen)},
                       "best_on_all_queries": list(full_best),
                       "best_on_all_queries_mAP@10_not_held_out": round(float(rr[full_best].mean()), 4)}
        if names_rr is not None:
            base = names_rr[np.concatenate(test_ids)]
            out[family]["held_out_vs_names_only"] = {"worse": int((scores_ < base).sum()),
                                                     "better": int((scores_ > base).sum()),
                                                     "of": len(base)}
    return out


def versus(a: np.ndarray, b: np.ndarray, queries: list[str]) -> list[dict[str, Any]]:
    """The queries on which two rankings' reciprocal ranks of the first relevant file differ, worst for `a`
    first: where fusion loses to (or beats) names-only."""
    rows = [{"query": q, "a": float(x), "b": float(y)} for q, x, y in zip(queries, a, b, strict=True) if x != y]
    return sorted(rows, key=lambda r: r["a"] - r["b"])


def first_relevant_rr(sim: np.ndarray, rel: np.ndarray) -> np.ndarray:
    from training.ranking import caption_ranks

    ranks = caption_ranks(sim, rel)
    return np.where(ranks <= K, 1.0 / ranks, 0.0)


def run(weights: list[float] | None = None, sfx: Path = SFX, model: str | None = None) -> dict[str, Any]:
    from app.services.search.embedder import cap_threads, load_embedder
    from bench import pinned

    cap_threads()
    clips = load_clips(sfx)
    queries = load_queries()
    rel = relevance(queries, clips)
    empty = [q for (q, _), r in zip(queries, rel, strict=True) if not r.any()]
    if empty:
        raise SystemExit(f"queries without a relevant clip in the library: {empty}")
    name, path, chosen = pinned.retrieval(model)  # the shipped model unless --model: not the user's default
    embedder = load_embedder(str(path))
    result: dict[str, Any] = {
        **pinned.model_fields(name, path, chosen),
        "library": {"clips": len(clips), "splits": list(SPLITS), "cache": str(cache_dir()),
                    "examples": [c.named for c in clips[:: max(1, len(clips) // 8)]]},
        "queries": len(queries),
        "relevant_per_query": {q: int(r.sum()) for (q, _), r in zip(queries, rel, strict=True)},
    }
    for which in ("named", "hashed"):
        root = cache_dir() / which
        write_library(clips, root, which)
        session = open_indexed(root, embedder)
        try:
            result["modes_available"] = ["sound", "names", "both"] if supports_modes(session) else ["sound"]
            result[which] = evaluate_library(session, clips, which, queries, rel, weights if which == "named"
                                             else None)
        finally:
            session.close()
    result["notes"] = __doc__.split("What is measured, exactly (the JSON says the same in `notes`):")[1].strip()
    return result


def table(result: dict[str, Any]) -> str:
    lines = [f"{'library':8} {'ranking':14} {'mAP@10':>7} {'R@10':>6} {'AP@10':>6}"]
    for which in ("named", "hashed"):
        for label in ("names_only", "sound_only", "fused", "random"):
            if label in result.get(which, {}):
                m = result[which][label]
                lines.append(f"{which:8} {label:14} {m['mAP@10']:7.3f} {m['R@10']:6.3f} {m['AP@10']:6.3f}")
        cv = result.get(which, {}).get("cross_validation")
        if cv:
            for family in ("sum_cosine", "sum_minmax", "rrf", "any"):
                c = cv[family]
                vs = c.get("held_out_vs_names_only", {})
                lines.append(f"{which:8} {'CV ' + family:14} {c['cv_mAP@10']:7.3f}   (held-out folds; vs names-only: "
                             f"{vs.get('worse', '-')} worse, {vs.get('better', '-')} better of {vs.get('of', '-')})")
        for r in result.get(which, {}).get("fused_vs_names_only", []) if which == "named" else []:
            lines.append(f"{which:8}   fused {r['fused_rr']:.3f} vs names-only {r['names_only_rr']:.3f}: {r['query']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.search_quality", description=__doc__.split("\n")[0])
    p.add_argument("--counts", action="store_true", help="only print each query's number of relevant clips")
    p.add_argument("--sweep", type=str, default="", help="names_weight values to score fused search at, e.g. "
                   "0,0.25,0.5,0.75,1 (once the service takes names_weight)")
    p.add_argument("--model", default=None, help="the retrieval model whose sound channel to use (a registry name "
                   "such as retrieval-passt-small, or a .safetensors path); default: the shipped one, whatever the "
                   "user's default")
    args = p.parse_args(argv)
    if args.counts:
        clips, queries = load_clips(), load_queries()
        for (q, _), r in zip(queries, relevance(queries, clips), strict=True):
            names = sorted({clips[j].named for j in np.flatnonzero(r)})
            print(f"{int(r.sum()):3d}  {q:28}  {', '.join(names[:4])}{' ...' if len(names) > 4 else ''}")
        return 0
    weights = [float(w) for w in args.sweep.split(",") if w.strip()] or None
    result = run(weights, model=args.model)
    write_result("search_quality", result)
    print(table(result), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
