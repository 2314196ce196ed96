"""Which UCS category each class of the aiSFX checkpoint's classifier heads is: a study, and the mapping it writes.

Hypothesis: each head `fc.k` was trained with a label encoder over the UCS categories its dataset held, so its
classes are UCS category names in ALPHABETICAL order, a subset of the 82 UCS v8.2.1 categories of size C (the
head's class count). The study (rules fixed before any score was seen):

1. Fit corpus: the 1,403 captioned clips of ../shared/data/sfx, each embedded as the index embeds a file's first
   window (`RetrievalEmbedder.prepare_windows` + `model.audio_features` of resources/models/retrieval-default,
   the frozen aiSFX tower; first 10 s); the heads read the first 512 dims (the mean block embedding).
2. Labels from words (`ucs_labels`), the same rule for captions and for held-out file paths: the text is split
   into lower-case words (camelCase, digits and `_-./` split; a plural also tried as its singular). A word gives
   each UCS category it reaches a vote: 3 if it is a word of the category's name ("birds"), 1 if of one of its
   subcategory names ("arrow" in WEAPONS/ARROW) or of one of its subcategories' synonyms, 0.5 if a word of their
   explanations (stop words and words under 3 letters ignored); each vote is divided by how many categories the
   word reaches at that tier (a generic word spreads thin), and a category keeps the word's best tier. A text is
   labelled with the categories of the highest total, split equally among ties, if that total is >= 1.
3. Alignment (`align`): A[k, c] = Pearson correlation, over the labelled fit clips, of class k's softmax
   posterior with the clip's label weight for category c (0 where c has no labelled clip). For each head on its
   own, the order-keeping dynamic programme picks categories c_0 < c_1 < ... < c_{C-1} maximising sum A[k, c_k]
   (every class gets one category, the subset is whatever maximises the sum: nothing else is chosen by hand).
4. Control: the same DP on A with its class rows shuffled (SHUFFLES seeded permutations). A head is UCS-like,
   and kept, only if its real score beats every shuffled score.
5. Held out: the nine search-bench libraries (bench/data/search_libraries; their Debian packages are never in the
   fit corpus), each file's first 10 s embedded the same way, labelled from its path relative to the library
   root by rule 2. A file is predicted as category c when the kept heads' mapped probability of c
   (`core.aisfx_heads.CategoryReader`) is the highest and >= THRESHOLD (the app's shown-confidence bar).
   Per category: precision over labelled predicted files, recall over labelled files; a category is dropped
   (its classes map to null) when precision < PRECISION_BAR or fewer than MIN_JUDGED labelled files were
   predicted as it (too few to judge). Scores are those of the undropped mapping (one pass, no refit).

    python -m tools.aisfx_categories [--sfx DIR] [--ucs FILE] [--out JSON] [--cache DIR]

Embeddings are cached in --cache (default /tmp/aisfx_categories); library audio comes from the .debs in the
search-library cache (`bench.search_libraries.cache_dir`, as `python -m bench.search_libraries` fetched them).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SFX_DIR = ROOT.parent / "shared" / "data" / "sfx"
UCS_JSON = ROOT.parent / "shared" / "data" / "ucs" / "en.json"
MODEL = ROOT / "resources" / "models" / "retrieval-default.safetensors"
OUT = ROOT / "app" / "services" / "library" / "data" / "aisfx_categories.json"
CACHE = Path("/tmp/aisfx_categories")
SHUFFLES = 200  # shuffled class orders per head (the control)
THRESHOLD = 0.5  # a category is shown at this confidence (app/services/search/sound_categories.CATEGORY_SHOWN)
PRECISION_BAR = 0.5  # held-out precision a category needs to be kept
MIN_JUDGED = 3  # labelled held-out files predicted as a category, fewest to judge it by
TIERS = {"name": 3.0, "subcategory": 1.0, "synonym": 1.0, "explanation": 0.5}
STOP = frozenset("the and for with not that this from are any such into other others sounds sound fitting list "
                 "category categories etc also all can its one has have more less misc miscellaneous type types "
                 "including include includes like used use made being "
                 # caption words that say how, not what (fixed from the labels, before any head was scored)
                 "die dies dying miss misses single someone out through heavy big small past".split())


# ------------------------------------------------------------------------------------------------ labels


def words(text: str) -> list[str]:
    """Lower-case words of a caption or a file path: camelCase, digits and punctuation split."""
    text = re.sub(r"([a-z])([A-Z])", r"\1 \2", text)
    return re.findall(r"[a-z]+", text.lower())


def variants(word: str) -> list[str]:
    """The word and its singular guesses (a plural caption word finds the singular synonym)."""
    out = [word]
    if word.endswith("ies") and len(word) > 4:
        out.append(word[:-3] + "y")
    if word.endswith("es") and len(word) > 3:
        out.append(word[:-2])
    if word.endswith("s") and len(word) > 3:
        out.append(word[:-1])
    return out


@dataclass(frozen=True)
class Vocabulary:
    """word -> {category: vote} (rule 2 of the module docstring), and the sorted UCS categories."""

    votes: dict[str, dict[str, float]]
    categories: tuple[str, ...]


def vocabulary(entries: Iterable[dict]) -> Vocabulary:
    """The UCS schedule (en.json entries) as word votes."""
    reach: dict[str, dict[str, set[str]]] = {t: {} for t in TIERS}  # tier -> word -> categories
    cats: set[str] = set()
    for e in entries:
        cat = e["Category"]
        cats.add(cat)
        found = {"name": words(cat), "subcategory": words(e["SubCategory"]),
                 "synonym": [w for s in e.get("Synonyms", []) for w in words(s)],
                 "explanation": words(e.get("Explanations", ""))}
        for tier, ws in found.items():
            for w in ws:
                if len(w) >= 3 and w not in STOP:
                    reach[tier].setdefault(w, set()).add(cat)
    votes: dict[str, dict[str, float]] = {}
    for tier, by_word in reach.items():
        for w, where in by_word.items():
            for c in where:
                for v in variants(w):  # "doors" is found by "door" too (lookups try the same variants)
                    if len(v) < 3 or v in STOP:
                        continue
                    slot = votes.setdefault(v, {})
                    slot[c] = max(slot.get(c, 0.0), TIERS[tier] / len(where))
    return Vocabulary(votes, tuple(sorted(cats)))


def load_vocabulary(path: Path = UCS_JSON) -> Vocabulary:
    return vocabulary(json.loads(path.read_text(encoding="utf-8")))


def ucs_labels(text: str, vocab: Vocabulary) -> dict[str, float]:
    """{category: weight} (weights sum to 1; empty: no category reaches a total vote of 1)."""
    total: dict[str, float] = {}
    for w in dict.fromkeys(words(text)):
        if len(w) < 3 or w in STOP:
            continue
        hit: dict[str, float] = {}  # the word's best vote per category over its variants
        for v in variants(w):
            for c, vote in vocab.votes.get(v, {}).items():
                hit[c] = max(hit.get(c, 0.0), vote)
        for c, vote in hit.items():
            total[c] = total.get(c, 0.0) + vote
    best = max(total.values(), default=0.0)
    if best < 1.0:
        return {}
    top = [c for c, v in total.items() if v >= best - 1e-9]
    return {c: 1.0 / len(top) for c in top}


def label_matrix(texts: Sequence[str], vocab: Vocabulary) -> np.ndarray:
    """(n, K) label weights over vocab.categories (a row of zeros: unlabelled)."""
    index = {c: i for i, c in enumerate(vocab.categories)}
    y = np.zeros((len(texts), len(vocab.categories)))
    for i, t in enumerate(texts):
        for c, w in ucs_labels(t, vocab).items():
            y[i, index[c]] = w
    return y


# --------------------------------------------------------------------------------------------- alignment


def association(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(n, C) posteriors, (n, K) labels of labelled clips -> (C, K) Pearson correlations (0 for a constant column)."""
    pc, yc = p - p.mean(axis=0), y - y.mean(axis=0)
    num = pc.T @ yc
    den = np.outer(np.sqrt((pc**2).sum(axis=0)), np.sqrt((yc**2).sum(axis=0)))
    return np.divide(num, den, out=np.zeros_like(num), where=den > 1e-12)


def align(a: np.ndarray) -> tuple[float, list[int]]:
    """Order-keeping alignment: (C, K) scores, C <= K -> (max sum a[k, c_k], [c_k]) with c_0 < c_1 < ... ."""
    n_cls, n_cat = a.shape
    if n_cls > n_cat:
        raise ValueError(f"{n_cls} classes cannot take increasing distinct categories out of {n_cat}")
    best = np.full((n_cls, n_cat), -np.inf)  # best[k, c]: classes 0..k placed, class k on category c
    came = np.zeros((n_cls, n_cat), dtype=np.int64)  # the category of class k-1 on that best path
    best[0] = a[0]
    for k in range(1, n_cls):
        run, arg = -np.inf, -1  # the best of best[k-1, :c] so far
        for c in range(n_cat):
            if c >= 1 and best[k - 1, c - 1] > run:
                run, arg = best[k - 1, c - 1], c - 1
            if run > -np.inf:
                best[k, c], came[k, c] = run + a[k, c], arg
    path = [int(np.argmax(best[-1]))]
    for k in range(n_cls - 1, 0, -1):
        path.append(int(came[k, path[-1]]))
    path.reverse()
    return float(best[-1, path[-1]]), path


def shuffled_scores(a: np.ndarray, shuffles: int = SHUFFLES, seed: int = 0) -> np.ndarray:
    """The DP's score with the class order shuffled (rows of `a` permuted), `shuffles` times."""
    rng = np.random.default_rng(seed)
    return np.array([align(a[rng.permutation(len(a))])[0] for _ in range(shuffles)])


# ------------------------------------------------------------------------------------------- embeddings


def load_embedder():  # noqa: ANN201 - a RetrievalEmbedder (torch imported lazily)
    """The index's embedder over the frozen aiSFX tower (its text tower in NumPy: only the sound half runs)."""
    from app.services.search.embedder import RetrievalEmbedder

    return RetrievalEmbedder.from_checkpoint(MODEL, sound_half=True)


def first_window(path: Path, sample_rate: int, samples: int) -> np.ndarray | None:
    """A file's first library window: decoded, mono, resampled, zero-padded as the library pads it (None: the
    file cannot be read)."""
    from core.audio import AudioError, decode

    try:
        wave = decode(path, sample_rate, duration=samples / sample_rate).audio[:samples]
    except (AudioError, OSError):
        return None
    return np.pad(wave, (0, samples - len(wave)))


def embed_files(paths: Sequence[Path], cache: Path) -> np.ndarray:
    """(n, 512) mean block embeddings (the first half of the tower features the index computes), cached; an
    unreadable file's row is NaN (left out of every score)."""
    if cache.is_file():
        got = np.load(cache)
        if got.shape[0] == len(paths):
            return got
    import torch

    embedder = load_embedder()
    out = np.full((len(paths), 512), np.nan, dtype=np.float32)
    for i, p in enumerate(paths):
        window = first_window(p, embedder.sample_rate, embedder.window_samples)
        if window is None:
            print(f"  unreadable, left out: {p}", file=sys.stderr)
            continue
        prepared = embedder.prepare_windows(window[None])
        with torch.inference_mode():
            for _, feats, frames in prepared.groups:
                out[i] = embedder.model.audio_features(feats, frames).float().cpu().numpy()[0, :512]
        if i % 100 == 0:
            print(f"  embedded {i}/{len(paths)}", file=sys.stderr, flush=True)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.save(cache, out)
    return out


def sfx_corpus(sfx: Path, cache: Path) -> tuple[np.ndarray, list[str]]:
    """(n, 512) embeddings of the captioned clips and their captions (caption_2 appended when there is one)."""
    with open(sfx / "captions.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    emb = embed_files([sfx / r["path"] for r in rows], cache / "sfx.npy")
    ok = np.isfinite(emb).all(axis=1)
    return emb[ok], [f"{r['caption']} {r.get('caption_2') or ''}".strip() for r, k in zip(rows, ok, strict=True) if k]


def library_files(cache: Path) -> tuple[np.ndarray, list[str], list[str]]:
    """The search-bench libraries (built from the cached .debs): embeddings, path texts, library names."""
    from bench import search_libraries as sl

    emb, texts, libs = [], [], []
    for name in sl.library_names():
        lib = sl.load_library(name)
        folder = cache / "libraries" / name
        if not (folder / ".built").is_file():
            sl.materialise(lib, cache / "libraries", sl.cache_dir(None))
            (folder / ".built").touch()
        emb.append(embed_files([folder / lib.final_path(p) for p in lib.paths], cache / f"lib-{name}.npy"))
        texts += lib.paths  # the package's own names (before any recorder-style renaming)
        libs += [name] * len(lib.paths)
    emb_all = np.concatenate(emb)
    ok = np.isfinite(emb_all).all(axis=1)
    keep = np.flatnonzero(ok)
    return emb_all[ok], [texts[i] for i in keep], [libs[i] for i in keep]


# ------------------------------------------------------------------------------------------------- study


def study_heads(emb: np.ndarray, y: np.ndarray, vocab: Vocabulary, heads: dict) -> dict[str, dict]:
    """Per head: the alignment, its real score, the shuffled control and whether the head is kept."""
    from core.aisfx_heads import softmax

    labelled = y.sum(axis=1) > 0
    out = {}
    for name, head in heads.items():
        p = softmax(head.logits(emb[labelled]).astype(np.float64))
        a = association(p, y[labelled])
        score, path = align(a)
        control = shuffled_scores(a)
        out[name] = {"classes": [vocab.categories[c] for c in path], "score": score,
                     "shuffled_mean": float(control.mean()), "shuffled_sd": float(control.std()),
                     "shuffled_max": float(control.max()), "kept": bool(score > control.max()),
                     "per_class": [float(a[k, c]) for k, c in enumerate(path)]}
    return out


def heldout_scores(probs: np.ndarray, names: Sequence[str], y: np.ndarray, vocab: Vocabulary
                   ) -> dict[str, dict]:
    """Per mapped category: precision / recall at THRESHOLD on labelled held-out files, n = files predicted."""
    labelled = y.sum(axis=1) > 0
    col = {c: i for i, c in enumerate(vocab.categories)}
    top, conf = probs.argmax(axis=1), probs.max(axis=1)
    out = {}
    for j, c in enumerate(names):
        predicted = labelled & (top == j) & (conf >= THRESHOLD)
        truth = labelled & (y[:, col[c]] > 0)
        hits = int((predicted & truth).sum())
        out[c] = {"precision": round(hits / predicted.sum(), 3) if predicted.any() else None,
                  "recall": round(hits / truth.sum(), 3) if truth.any() else None,
                  "n": int(predicted.sum()), "labelled": int(truth.sum())}
    return out


def dropped_categories(heldout: dict[str, dict]) -> list[str]:
    return sorted(c for c, s in heldout.items()
                  if s["n"] < MIN_JUDGED or s["precision"] is None or s["precision"] < PRECISION_BAR)


def mapping_document(study: dict[str, dict], heldout: dict[str, dict]) -> dict:
    """The JSON the app ships (format: docs/categories.md)."""
    dropped = dropped_categories(heldout)
    heads = {n: {"classes": [None if c in dropped else c for c in s["classes"]]}
             for n, s in study.items() if s["kept"]}
    aligned = {n: {"classes": s["classes"]} for n, s in study.items() if s["kept"]}
    return {"heads": heads, "aligned": aligned, "threshold": THRESHOLD, "dropped": dropped,
            "heldout": {c: {k: s[k] for k in ("precision", "recall", "n")} for c, s in sorted(heldout.items())},
            "source": "tools/aisfx_categories.py: aiSFX checkpoint heads (aisfx 0.1.2, Ma & Lerch, CC BY 4.0) "
                      "aligned to UCS v8.2.1 categories (CC0) in alphabetical order on ../shared/data/sfx "
                      "captions; held-out precision on bench/data/search_libraries; see docs/categories.md"}


def dump_mapping(doc: dict) -> str:
    """The mapping as JSON with each head's class list on one line (diffs show which class changed)."""
    text = json.dumps(doc, indent=1)
    return re.sub(r"\[\s*((?:null|\"[^\"]*\")(?:,\s*(?:null|\"[^\"]*\"))*)\s*\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text) + "\n"


def reader_for(heads: dict, classes: dict[str, list[str | None]]):  # noqa: ANN201 - a CategoryReader
    """The CategoryReader of these heads through {head: [category or None per class]} (as the app builds it)."""
    from core.aisfx_heads import CategoryReader

    names = sorted({c for cs in classes.values() for c in cs if c is not None})
    index = {c: i for i, c in enumerate(names)}
    return CategoryReader(tuple(names), tuple(heads[n] for n in classes),
                          tuple(np.array([-1 if c is None else index[c] for c in cs]) for cs in classes.values()))


def run(sfx: Path, ucs: Path, out: Path, cache: Path) -> dict:
    import torch

    from core.aisfx_heads import read_heads

    torch.set_num_threads(1)
    vocab = load_vocabulary(ucs)
    emb, captions = sfx_corpus(sfx, cache)
    y = label_matrix(captions, vocab)
    heads = read_heads()
    study = study_heads(emb, y, vocab, heads)
    lib_emb, lib_texts, _ = library_files(cache)
    y_lib = label_matrix(lib_texts, vocab)
    reader = reader_for(heads, {n: s["classes"] for n, s in study.items() if s["kept"]})
    heldout = heldout_scores(reader.probabilities(lib_emb), reader.categories, y_lib, vocab)
    doc = mapping_document(study, heldout)
    out.write_text(dump_mapping(doc), encoding="utf-8")
    # after the fact, not used for any choice: the shipped mapping's own precision (the kept categories only;
    # what went to dropped classes is "none"), and how often the aligned top category is right at any confidence
    shipped = reader_for(heads, {n: v["classes"] for n, v in doc["heads"].items()})
    top = reader.probabilities(lib_emb).argmax(axis=1)
    col = [vocab.categories.index(c) for c in reader.categories]
    labelled = y_lib.sum(axis=1) > 0
    report = {"labelled_fit": int((y.sum(axis=1) > 0).sum()), "fit_clips": len(y),
              "labelled_heldout": int(labelled.sum()), "heldout_files": len(lib_texts), "study": study,
              "heldout": heldout,
              "heldout_shipped": heldout_scores(shipped.probabilities(lib_emb), shipped.categories, y_lib, vocab),
              "top1_precision_any_confidence": float((y_lib[np.arange(len(top)), np.array(col)[top]] > 0)[labelled]
                                                     .mean())}
    (cache / "report.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.aisfx_categories", description=__doc__.split("\n\n")[0])
    p.add_argument("--sfx", type=Path, default=SFX_DIR, help="the captioned clips (captions.csv + audio/)")
    p.add_argument("--ucs", type=Path, default=UCS_JSON, help="UCS schedule, English (en.json)")
    p.add_argument("--out", type=Path, default=OUT, help="mapping JSON to write")
    p.add_argument("--cache", type=Path, default=CACHE, help="embeddings cache and report.json")
    a = p.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("EARSHOT_TRUNK_THREADS", "1")  # the index's tower, one thread (a shared machine)
    report = run(a.sfx, a.ucs, a.out, a.cache)
    print(f"fit: {report['labelled_fit']}/{report['fit_clips']} clips labelled; held out: "
          f"{report['labelled_heldout']}/{report['heldout_files']} files labelled")
    for name, s in report["study"].items():
        print(f"{name:28s} C={len(s['classes']):3d} real {s['score']:7.2f}  shuffled {s['shuffled_mean']:6.2f} "
              f"± {s['shuffled_sd']:.2f} (max {s['shuffled_max']:.2f})  {'kept' if s['kept'] else 'left out'}")
    for c, s in report["heldout"].items():
        print(f"  {c:20s} precision {s['precision']}  recall {s['recall']}  n {s['n']}  labelled {s['labelled']}")
    print(f"after the fact: top-1 precision at any confidence {report['top1_precision_any_confidence']:.3f}; the "
          "shipped mapping's own held-out scores:")
    for c, s in report["heldout_shipped"].items():
        print(f"  {c:20s} precision {s['precision']}  recall {s['recall']}  n {s['n']}  labelled {s['labelled']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
