"""The search-quality development benchmark's data: library layout, queries and their relevant clips, metrics."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from bench.search_quality import (
    ap_at_k,
    hashed_path,
    load_clips,
    load_queries,
    named_path,
    rank_matrix,
    relevance,
    scores,
    write_library,
)


@pytest.mark.parametrize(("source", "package", "expected"), [
    ("usr/share/scratch/Media/Sounds/Animal/Bird.wav", "scratch", "scratch/Animal/Bird.wav"),
    ("usr/share/games/wesnoth/1.16/data/core/sounds/horn-signals/horn-1.ogg", "wesnoth-1.16-data",
     "wesnoth/horn-signals/horn-1.ogg"),
    ("usr/share/games/0ad/mods/public/public.zip!/audio/attack/impact/arrow_dirt_01.ogg", "0ad-data",
     "0ad/attack/impact/arrow_dirt_01.ogg"),
    ("usr/share/games/teeworlds/data/audio/wp_laser_fire-03.wv", "teeworlds-data", "teeworlds/wp_laser_fire-03.wav"),
    ("usr/share/scratch/Media/Sounds/Effects/SewingMachine.mp3", "scratch", "scratch/Effects/SewingMachine.wav"),
    ("usr/share/sounds/freedesktop/stereo/phone-outgoing-calling.oga", "sound-theme-freedesktop",
     "sound-theme-freedesktop/freedesktop/phone-outgoing-calling.ogg"),
])
def test_named_path_keeps_meaningful_folders_and_name(source: str, package: str, expected: str) -> None:
    assert named_path(source, package) == expected


def test_hashed_path_says_nothing() -> None:
    h = hashed_path("scratch/Animal/Bird.wav")
    assert len(h) == len("a3f9c1e2.wav") and h.endswith(".wav") and "/" not in h and "bird" not in h.lower()


def test_every_query_has_relevant_clips_in_the_held_out_library(sfx: Path) -> None:
    clips = load_clips(sfx)
    queries = load_queries()
    assert len(queries) >= 40
    assert len({q for q, _ in queries}) == len(queries), "duplicate queries"
    assert len(clips) >= 150
    assert len({c.named.lower() for c in clips}) == len(clips) and len({c.hashed for c in clips}) == len(clips)
    rel = relevance(queries, clips)
    counts = rel.sum(axis=1)
    assert counts.min() >= 1, [q for (q, _), n in zip(queries, counts, strict=True) if n == 0]
    # a regex that matches most of the library is no relevance judgement
    assert counts.max() <= len(clips) // 8


def test_write_library_converts_by_source_extension(sfx: Path, tmp_path: Path) -> None:
    clips = load_clips(sfx)
    some = [next(c for c in clips if c.named.endswith(".ogg")), next(c for c in clips if c.named.endswith(".wav"))]
    assert write_library(some, tmp_path, "named") == 2
    assert write_library(some, tmp_path, "named") == 0  # already there: kept
    for c in some:
        info = sf.info(tmp_path / c.named)
        assert info.format == ("OGG" if c.named.endswith(".ogg") else "WAV")
        assert abs(info.duration - sf.info(c.audio).duration) < 0.05
    write_library(some, tmp_path / "h", "hashed")
    assert sorted(p.name for p in (tmp_path / "h").iterdir()) == sorted(c.hashed for c in some)


def test_metrics_perfect_reversed_and_all_relevant() -> None:
    rel = np.array([[True, True, False, False], [False, False, False, True]])
    perfect = np.array([[4.0, 3, 2, 1], [1, 2, 3, 4]])
    worst = -perfect
    assert scores(perfect, rel)["mAP@10"] == 1.0 and ap_at_k(perfect, rel) == 1.0
    assert scores(worst, rel)["mAP@10"] == pytest.approx((1 / 3 + 1 / 4) / 2, abs=1e-4)
    # one of two relevant files on top, the other at rank 3: AP = (1 + 2/3) / 2
    half = np.array([[4.0, 2, 3, 1], [1, 2, 3, 4]])
    assert ap_at_k(half, rel) == pytest.approx(((1 + 2 / 3) / 2 + 1) / 2)


@dataclass
class FakeHit:
    rel_path: str


class FakeSession:
    def search(self, text: str, k: int, mode: str = "both") -> list[FakeHit]:
        order = ["b.wav", "x/a.ogg"] if mode == "names" else ["x/a.ogg"]  # a mode may return fewer files
        return [FakeHit(p) for p in order[:k]]


def test_rank_matrix_maps_hits_back_to_clips_and_ranks_missing_last() -> None:
    index_of = {"x/a.ogg": 0, "b.wav": 1, "c.wav": 2}
    sim = rank_matrix(FakeSession(), ["q"], index_of, 3, "names")
    assert sim[0, 1] > sim[0, 0] > sim[0, 2] == -np.inf
    sim = rank_matrix(FakeSession(), ["q"], index_of, 3, "sound")
    assert sim[0, 0] == 3 and np.isinf(sim[0, 1:]).all()


def synthetic_channels(seed: int = 0, q: int = 20, n: int = 30, names: bool = True):  # noqa: ANN201
    from bench.search_quality import Channels

    rng = np.random.default_rng(seed)
    kw = np.where(rng.random((q, n)) < 0.2, rng.random((q, n)) * 10, 0.0) if names else np.zeros((q, n))
    sem = rng.uniform(-0.1, 0.8, (q, n)) if names else np.zeros((q, n))
    snd = rng.uniform(-0.2, 0.5, (q, n))
    return Channels(kw, sem, snd, rng.random((q, n)) < 0.8)


def test_replayed_rules_rank_like_the_service() -> None:
    """The offline replay that the cross-validation scores ranks each query's candidates exactly as
    `fused_ranking` does (the service's code path)."""
    from app.services.search.fusion import FusionRule, fused_ranking
    from bench.search_quality import fused_sim

    ch = synthetic_channels()
    for rule in [("sum", 0.7, "cosine"), ("sum", 0.4, "cosine"), ("sum", 0.8, "minmax"), ("rrf", 0.7, 5),
                 ("rrf", 0.3, 60)]:
        sim = fused_sim(ch, rule)
        for i in range(len(sim)):
            c = np.flatnonzero(ch.candidate[i])
            keyword = {int(j): ch.keyword[i, j] for j in c if ch.keyword[i, j] > 0}
            semantic = {int(j): ch.semantic[i, j] for j in c}
            sound = {int(j): ch.sound[i, j] for j in c}
            how = FusionRule(kind="sum", sound_scale=rule[2]) if rule[0] == "sum" else FusionRule(kind="rrf",
                                                                                                 rrf_k=rule[2])
            want = [f for f, _ in fused_ranking(keyword, semantic, sound, rule[1], how)]
            got = [int(j) for j in np.argsort(-sim[i], kind="stable")[: len(c)]]
            assert got == want
            assert np.isneginf(sim[i, ~ch.candidate[i]]).all()


def test_every_rule_ranks_a_library_whose_names_say_nothing_like_sound() -> None:
    from bench.search_quality import fused_sim, rules

    ch = synthetic_channels(names=False)
    sound = fused_sim(ch, ("sum", 0.0, "cosine"))
    for family in rules().values():
        for rule in family[::3]:
            np.testing.assert_array_equal(fused_sim(ch, rule), sound)


def test_cross_validation_scores_each_query_only_by_rules_chosen_without_it() -> None:
    """A rule that wins on every query but one: CV picks it on the folds, and the fold holding the exception
    is scored with it (held out), so the CV score is below the best-on-all score when the choice flips."""
    from bench import search_quality as sq

    ch = synthetic_channels(q=25)
    rel = np.zeros((25, 30), bool)
    rel[np.arange(25), np.random.default_rng(1).integers(0, 30, 25)] = True
    cv = sq.cross_validate(ch, rel, 0.0)
    for family in ("sum_cosine", "sum_minmax", "rrf", "any"):
        assert cv[family]["cv_mAP@10"] <= cv[family]["best_on_all_queries_mAP@10_not_held_out"] + 1e-9
        assert len(cv[family]["chosen_per_fold"]) == sq.FOLDS
    # on random relevance the best-on-all score is optimistic: held-out scoring takes the optimism away
    assert cv["any"]["cv_mAP@10"] < cv["any"]["best_on_all_queries_mAP@10_not_held_out"]
    # against a baseline that finds nothing, a held-out query can only tie or win
    vs = sq.cross_validate(ch, rel, 0.0, names_rr=np.zeros(25))["any"]["held_out_vs_names_only"]
    assert vs["worse"] == 0 and 0 < vs["better"] <= vs["of"] == 25 * sq.REPEATS


def test_versus_lists_the_queries_where_two_rankings_differ_worst_first() -> None:
    from bench.search_quality import versus

    rows = versus(np.array([1.0, 0.5, 0.0, 0.25]), np.array([1.0, 1.0, 0.0, 0.2]), ["a", "b", "c", "d"])
    assert [r["query"] for r in rows] == ["b", "d"] and rows[0]["a"] == 0.5 and rows[0]["b"] == 1.0


def test_a_relevance_rule_matches_words_not_letters_inside_other_words(sfx: Path) -> None:
    """'orc' once matched "a burning TORCH swings and misses" (o-r-c inside 'torch'): a torch is no orc."""
    clips = load_clips(sfx)
    queries = load_queries()
    rel = relevance(queries, clips)[[q for q, _ in queries].index("orc")]
    found = [cap for clip, r in zip(clips, rel, strict=True) if r for cap in clip.captions]
    assert found and not any("torch" in c for c in found)
    assert all(any(w in c for w in ("orc", "ogre", "troll", "goblin")) for c in found)
