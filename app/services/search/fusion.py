"""Fusing the two channels' scores into one ranking: pure NumPy, no torch and no library.

The rule: over the union of the channels' candidates,
    fused = w * names + (1 - w) * sound cosine
    names = KEYWORD_SHARE * how strongly the file holds the query's words (keywords.py, 0..1)
            + (1 - KEYWORD_SHARE) * the MiniLM cosine mapped from [SEM_FLOOR, SEM_CEIL] to [0, 1],
            or USER_TAGGED for a file the user tagged with every word of the query
The cosine orders the files; the keywords are a bounded boost that breaks near-ties (issue 38).
How the constants were chosen, and what the earlier rules got wrong: docs/search-fusion.md. The benchmarks
(bench/search_quality.py, bench/fused_latency.py) replay and cross-validate rules with this module.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np

SEARCH_MODES = ("names", "sound", "both")
NAMES_WEIGHT = 0.8  # the names' share of the fused score (the GUI slider and --names-weight override it)
KEYWORD_SHARE = 0.2  # the keywords' share of the names score (a bounded boost); the rest is the MiniLM cosine
SEM_FLOOR, SEM_CEIL = 0.2, 1.0  # MiniLM cosines below the floor say nothing; graded up to 1 (meaning orders)
FUSION = "sum"  # "sum" (the rule above), or "rrf": reciprocal-rank fusion, kept to compare
SOUND_SCALE = "cosine"  # the sum's sound score: "cosine" (raw) or "minmax" (rescaled over the candidates)
RRF_K = 5.0  # reciprocal-rank fusion's constant: small, so the top ranks of each channel count most
CANDIDATES = 100  # each channel's candidates per query (at least k): the fusion ranks their union exactly
COMMON_SHARE, COMMON_MIN = 0.005, 2000  # a keyword matching more files than both is left out of the BM25 ranking
CONFIDENCE_W = np.array([2.0, 3.0, -0.86])  # the confidence's logistic weights (match_features), and
NO_MATCH = 0.63  # the threshold below which the best hit is "no good match": both fitted by bench/no_match.py on
# the development libraries; each library's precision and recall, held out, in docs/search-fusion.md
SILENT_GAIN = 0.0  # a silent file's names score, standing in for names that say nothing: this x its min-max sound
CATEGORY_GAIN = 0.0  # a silent file's categories read as words (sound_categories.py): this x their names score;
# off: bench/library_categories.py's rule chose 0 on the tuning libraries (docs/categories.md has every number)
# a silent file next to the best named matches (sounds_like.py): how much sounding like them counts beside its own
# sound, from which cosine, and how high the best silent file may come (x the best match's score)
LIKE_FLOOR, LIKE_SHARE, LIKE_SCALE = 0.0, 0.7, 1.0
LIKE_FROM = 3  # the best named matches that vouch for the silent files sounding like them
DUPLICATE, LIKE_TOP = 0.95, 0.99  # a silent file this alike (cosine) is a copy: LIKE_TOP x its match's score
USER_TAGGED = 1.0  # the names score of a file the user tagged with every query word: their own word for it
NAMES_MIN = 0.0  # names mode lists files with a keyword match or a names score above this (a cosine above the
# floor: graded from it; a cut at 0.1 lost 0.01-0.04 on every tuning library)
LOOSE_NAMES = 0.05  # a names score at most this (a cosine of 0.25) says the name is at best loosely related


def check_mode(mode: str) -> str:
    if mode not in SEARCH_MODES:
        raise ValueError(f"search mode must be one of {', '.join(SEARCH_MODES)} (got {mode!r})")
    return mode


def fusion_weight(mode: str, names_weight: float | None) -> float:
    """The names' weight for a mode: sound 0, names 1, both the given weight (checked) or the tuned default."""
    if names_weight is not None:
        if isinstance(names_weight, bool) or not isinstance(names_weight, int | float | np.floating) \
                or not 0.0 <= float(names_weight) <= 1.0:
            raise ValueError(f"names weight must be a number from 0 to 1 (got {names_weight!r})")
    if mode == "sound":
        return 0.0
    if mode == "names":
        return 1.0
    return float(NAMES_WEIGHT if names_weight is None else names_weight)


@dataclass(frozen=True)
class FusionRule:
    """The constants that turn the channels' raw scores into one."""

    keyword_share: float = KEYWORD_SHARE
    sem_floor: float = SEM_FLOOR
    sem_ceil: float = SEM_CEIL
    kind: str = FUSION  # "sum" | "rrf"
    sound_scale: str = SOUND_SCALE  # "cosine" | "minmax" (the sum's sound score)
    rrf_k: float = RRF_K
    silent_gain: float = SILENT_GAIN
    category_gain: float = CATEGORY_GAIN
    like_floor: float = LIKE_FLOOR
    like_share: float = LIKE_SHARE
    like_scale: float = LIKE_SCALE


@dataclass
class Scores:
    """One candidate's scores after fusion (what MatchInfo shows)."""

    fused: float  # the rule's score (sum: w * names + (1 - w) * sound cosine; can be below 0)
    name: float  # 0..1
    keyword: float  # 0..1, how strongly the file holds the query's words (keywords.py)
    semantic_raw: float  # cosine (0 when the file has no text vector)
    sound: float  # 0..1, min-max over the candidates
    sound_raw: float  # cosine
    heard: bool = True  # the file's audio is embedded (False: still indexing, its sound scores mean nothing yet)
    tagged: bool = False  # the user tagged it with every word of the query
    silent: bool = False  # its name, folder and tags say nothing (a recorder's name): ranked by its sound
    like: int | None = None  # lifted for sounding like this named match (a file id)
    category: str | None = None  # a silent file found by its sound's category (the one that said most)


def match_features(best: Scores) -> np.ndarray:
    """What the confidence reads of the best hit (3,): whether a query word is in its name, folder or tags, the
    cosine of its names' sentence vector, and 1 (the bias)."""
    return np.array([float(best.keyword > 0), best.semantic_raw, 1.0])


def confidence(best: Scores) -> float:
    """How likely the best hit is what was asked, 0..1, the same scale for every query: a logistic fit of "a
    relevant file is in the top 10" on the development libraries (bench/no_match.py)."""
    return float(1.0 / (1.0 + np.exp(-float(match_features(best) @ CONFIDENCE_W))))


def no_good_match(best: Scores, w: float) -> bool:
    """Even the best hit is unrelated: its confidence is below the threshold. Sound alone is never flagged: the
    sound cosine did not tell relevant from unrelated on the development libraries (its fitted weight changed
    sign from one held-out library to the next)."""
    return w > 0 and not best.tagged and confidence(best) < NO_MATCH


def fused_ranking(keyword: Mapping[int, float], semantic: Mapping[int, float], sound: Mapping[int, float],
                  w: float, rule: FusionRule | None = None, tagged: Collection[int] = (),
                  silent: Collection[int] = (), heard: Mapping[int, tuple[float, str]] | None = None
                  ) -> list[tuple[int, Scores]]:
    """(file id, scores) of the union of the channels' candidates, best first, fused by `rule` (default: the
    shipped one) with the names' weight w; ties broken by the sound cosine, then the file id. Each mapping is
    file id -> raw score (keyword strength 0..1; sentence cosine; sound cosine); a file missing from one has no
    score there.
    `tagged`: files the user tagged with every query word: their names score is USER_TAGGED (a keyword in a tag
    list weighs little in BM25, and the sentence of several tags may be far from the one word asked).
    `silent`: files whose names say nothing; their names score is what their sound says (SILENT_GAIN) or, from
    `heard` (file id -> (cosine, category), sound_categories.heard_cosines), what their sound's categories say."""
    ids = list(dict.fromkeys([*keyword, *semantic, *sound]))
    if not ids:
        return []
    snd = np.array([sound.get(f, np.nan) for f in ids], dtype=np.float64)  # (N,)
    kw = np.array([keyword.get(f, 0.0) for f in ids])
    sem = np.array([semantic.get(f, 0.0) for f in ids])
    own = np.array([f in tagged for f in ids], dtype=bool)
    mute = np.array([f in silent for f in ids], dtype=bool)
    heard = heard or {}
    said = np.array([heard[f][0] if f in heard else 0.0 for f in ids])
    fused, name, kw_n, snd_n = fuse_arrays(kw, sem, snd, w, rule or FusionRule(), own, mute, said)
    have = np.isfinite(snd)
    raw = np.where(have, snd, -np.inf)
    order = np.lexsort((np.array(ids), -raw, -fused))  # fused, then sound, then id
    return [(ids[i], Scores(float(fused[i]), float(name[i]), float(kw_n[i]), float(sem[i]), float(snd_n[i]),
                            float(snd[i]) if have[i] else 0.0, bool(have[i]), bool(own[i]), bool(mute[i]),
                            category=by_category(ids[i], bool(mute[i]), float(name[i]), heard)))
            for i in order]


def by_category(fid: int, silent: bool, name: float, heard: Mapping[int, tuple[float, str]]) -> str | None:
    """The category that gave a silent file a names score (what its sound's categories say), if any."""
    return heard[fid][1] if silent and name > 0 and fid in heard else None


def fuse_arrays(kw: np.ndarray, sem: np.ndarray, snd: np.ndarray, w: float, rule: FusionRule,
                tagged: np.ndarray | None = None, silent: np.ndarray | None = None, heard: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The fusion of N candidates' raw scores, vectorised: keyword strength (N,) (0: no keyword match), sentence
    cosine (N,) (0: no text vector), sound cosine (N,) (NaN: none), tagged by the user with every query word (N,),
    silent names (N,) bool (their names score: rule.silent_gain x the min-max sound, or rule.category_gain x what
    their categories say, `heard` (N,) a cosine, whichever is higher).
    Returns fused, names (0..1), keyword (0..1) and min-max sound (0..1, what the result list draws) scores,
    (N,)."""
    have = np.isfinite(snd)
    snd_norm = np.zeros(len(snd))
    if have.any():
        lo, hi = snd[have].min(), snd[have].max()
        snd_norm[have] = (snd[have] - lo) / (hi - lo) if hi - lo > 1e-9 else 1.0
    name = names_score(kw, sem, rule)
    if silent is not None:
        said = rule.category_gain * names_score(np.zeros(len(kw)), heard, rule) if heard is not None else 0.0
        name = np.where(silent, np.maximum(rule.silent_gain * snd_norm, said), name)
    if tagged is not None:
        name = np.where(tagged, np.maximum(name, USER_TAGGED), name)
    kw_norm = np.clip(kw, 0.0, 1.0)
    if rule.kind == "rrf":
        k = rule.rrf_k
        fused = np.where(name > 0, w / (k + ranks(name)), 0.0) \
            + np.where(have, (1 - w) / (k + ranks(np.where(have, snd, -np.inf))), 0.0)
        return (k + 1) * fused, name, kw_norm, snd_norm
    if rule.sound_scale == "minmax":
        sound = snd_norm
    else:  # the raw cosine; a file without a sound vector counts as the lowest candidate
        sound = np.where(have, snd, snd[have].min() if have.any() else 0.0)
    return w * name + (1 - w) * sound, name, kw_norm, snd_norm


def names_score(kw: np.ndarray, sem: np.ndarray, rule: FusionRule) -> np.ndarray:
    """What the names and tags say about N candidates, 0..1 (N,): the keyword strength (0..1) and the MiniLM
    cosine mapped from [floor, ceil] (absolute: names that say nothing score 0, however the others score)."""
    sem_map = np.clip((sem - rule.sem_floor) / (rule.sem_ceil - rule.sem_floor), 0.0, 1.0)
    return rule.keyword_share * np.clip(kw, 0.0, 1.0) + (1 - rule.keyword_share) * sem_map


def ranks(x: np.ndarray) -> np.ndarray:
    """1-based rank of each value, highest first; equal values share the best rank (so the fusion does not
    depend on the order in which the channels listed their candidates). (N,)"""
    return np.searchsorted(np.sort(-x), -x, side="left") + 1.0
