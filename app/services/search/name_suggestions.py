"""Names for the recordings whose names say nothing (issue 39, item 4): `CatID_FXName.ext`, UCS style.

For a file, its nearest *named* sounds by the stored sound vectors (NEIGHBOURS of them, the silent ones left
out) lend their name words, each weighted by how alike the sounds are; the FXName is the WORDS heaviest, in the
order the closest neighbour's name has them. The CatID is the UCS subcategory whose words (category and
subcategory names and their synonyms, `data/ucs_thesaurus.tsv`) those weighted words and the file's own stored
sound categories support most. Nothing is renamed here: the user edits and accepts (library/renames.py).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from app.services.library import names
from app.services.library.library import Library
from app.services.search.keywords import inflection_key
from app.services.search.thesaurus import ucs_rows

NEIGHBOURS = 5  # named sounds a suggestion draws on
WORDS = 3  # words of the FXName
MAX_FX_NAME = 40  # characters: UCS asks for a short FXName
CATEGORY_PRIOR = 0.5  # the file's own stored category, x its confidence, beside the neighbours' words
_NOISE = re.compile(r"^(?:\d+|[a-z]|v\d+|take|mono|stereo|loop|final|new|copy)$")  # says nothing in a name


@dataclass(frozen=True)
class Suggestion:
    file_id: int
    rel_path: str
    name: str  # the new file name, extension kept
    cat_id: str  # '' when no UCS subcategory fits
    words: tuple[str, ...]  # the FXName's words
    drawn_from: tuple[str, ...]  # the named sounds whose words it used, closest first


@functools.cache
def catid_words() -> dict[str, frozenset[str]]:
    """UCS CatID -> the inflection keys of its category, subcategory and synonym words."""
    table = names.ucs_table()
    out: dict[str, set[str]] = {cat: {inflection_key(w) for w in e.words} for cat, e in table.items()}
    for cat, head, syns in ucs_rows():
        if cat in out:
            out[cat] |= {*head, *syns}
    return {c: frozenset(ws) for c, ws in out.items()}


def suggest_names(lib: Library, model_id: str, file_ids: Sequence[int]) -> list[Suggestion]:
    """A suggestion per file that has a sound vector (others are left out), names unique per folder."""
    taken: set[str] = set()
    out = []
    vectors = lib.vectors.of_files(model_id, list(file_ids))
    categories = lib.vectors.categories_of(model_id, list(file_ids))
    for fid in file_ids:
        rel = _rel_path(lib, fid)
        if fid not in vectors or rel is None:
            continue
        near = _named_neighbours(lib, model_id, vectors[fid], fid)
        weights = _word_weights(near)
        words = _fx_words(weights, near)
        cat_id = best_catid(weights, categories.get(fid, []))
        name = _unique(lib.root, rel, file_stem(cat_id, words), taken)
        taken.add(f"{rel.rpartition('/')[0]}/{name}".lower())
        out.append(Suggestion(fid, rel, name, cat_id, tuple(words), tuple(p for p, _, _ in near)))
    return out


def _rel_path(lib: Library, file_id: int) -> str | None:
    row = lib.files.row_of(file_id)
    return row[0] if row else None


def _named_neighbours(lib: Library, model_id: str, vector: object, file_id: int
                      ) -> list[tuple[str, float, list[str]]]:
    """(relative path, cosine, name words) of the closest named sounds, closest first."""
    found = lib.search.nearest_files(vector, model_id, 4 * NEIGHBOURS + 1, exclude=[file_id])
    silent = lib.text.silent_files([f for f, _ in found])
    out = []
    for fid, cos in found:
        rel = _rel_path(lib, fid)
        if fid in silent or rel is None:
            continue
        words = [w for w in names.name_words(Path(rel).stem) if not _NOISE.match(w)]
        if words:
            out.append((rel, float(cos), words))
        if len(out) == NEIGHBOURS:
            break
    return out


def _word_weights(near: Sequence[tuple[str, float, list[str]]]) -> dict[str, float]:
    """word -> the summed cosines of the neighbours whose names hold it (once per name)."""
    weights: dict[str, float] = {}
    for _, cos, words in near:
        for w in dict.fromkeys(words):
            weights[w] = weights.get(w, 0.0) + max(cos, 0.0)
    return weights


def _fx_words(weights: dict[str, float], near: Sequence[tuple[str, float, list[str]]]) -> list[str]:
    """The WORDS heaviest words, in the order the closest neighbour's name (then the next's) has them."""
    best = sorted(weights, key=lambda w: -weights[w])[:WORDS]
    order = [w for _, _, words in near for w in words]
    return sorted(best, key=order.index)


def best_catid(weights: dict[str, float], categories: Sequence[tuple[str, float]]) -> str:
    """The UCS CatID the weighted words and the stored categories support most ('' when nothing does)."""
    prior = {c: CATEGORY_PRIOR * p for c, p in categories}
    table = names.ucs_table()
    keys = {inflection_key(w): x for w, x in weights.items()}
    best, score = "", 0.0
    for cat_id, vocab in catid_words().items():
        entry = table[cat_id]
        s = sum(x for k, x in keys.items() if k in vocab) + prior.get(entry.category, 0.0)
        s += 1e-6 * (entry.subcategory == "MISC")  # a category known only from the sound: its MISC
        if s > score + 1e-9:
            best, score = cat_id, s
    return best


def file_stem(cat_id: str, words: Sequence[str]) -> str:
    """'DOORWood_Door Creak Slow' (no CatID: the FXName alone; no words: 'Untitled')."""
    fx = " ".join(w.capitalize() for w in words)[:MAX_FX_NAME].strip() or "Untitled"
    return f"{cat_id}_{fx}" if cat_id else fx


def _unique(root: Path, rel: str, stem: str, taken: set[str]) -> str:
    """`stem + ext`, or with ' 2', ' 3', ... when the folder (on disk or in this batch) has it already."""
    folder, ext = rel.rpartition("/")[0], Path(rel).suffix
    for n in range(1, 10_000):
        name = f"{stem}{'' if n == 1 else f' {n}'}{ext}"
        path = f"{folder}/{name}" if folder else name
        if path == rel or (path.lower() not in taken and not (root / path).exists()):
            return name
    raise ValueError(f"{rel}: no free name for {stem!r}")
