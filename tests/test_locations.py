"""Issue 40, item 1: several library locations, each with its own catalog, searched, browsed and tagged as one;
the list of locations kept by name; `earshot search --library A --library B` answers from both."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import soundfile as sf

from app.cli.main import main
from app.services.jobs import drain
from app.services.library.locations import Location, Locations
from app.services.library.records import SearchFilters
from app.services.search.library_set import LibrarySet
from app.services.search.session import SearchSession
from tests.test_search_service import SR, embedder, make_library, sound, write_tiny_checkpoint  # noqa: F401

# ------------------------------------------------------------------------------------------- the list


def test_locations_are_kept_by_name(tmp_path: Path) -> None:
    a, b = tmp_path / "Sound Effects", tmp_path / "Drums"
    a.mkdir(), b.mkdir()
    file = tmp_path / "conf" / "locations.json"
    saved = Locations.load(file)
    assert saved.locations == [] and saved.problem == ""
    assert saved.add(a) == Location("Sound Effects", a)
    assert saved.add(a).name == "Sound Effects"  # a folder listed once
    other = tmp_path / "x" / "Drums"
    other.mkdir(parents=True)
    saved.add(b), saved.add(other)
    assert [loc.name for loc in saved.locations] == ["Sound Effects", "Drums", "Drums (2)"]
    saved.rename("Drums (2)", "Kits")
    saved.choose(["Kits", "Drums"])
    saved.save_set("music", ["Drums", "Kits"])
    saved.opened(b), saved.opened(a)
    saved.save()

    again = Locations.load(file)
    assert [loc.name for loc in again.chosen()] == ["Drums", "Kits"]  # in the list's order
    assert [loc.path for loc in again.of_set("music")] == [b, other]
    assert again.recent == [a, b]
    again.remove("Kits")
    assert again.sets == {"music": ["Drums"]} and again.active == ["Drums"]


def test_bad_names_and_a_damaged_file_are_said(tmp_path: Path) -> None:
    saved = Locations.load(tmp_path / "locations.json")
    folder = tmp_path / "lib"
    folder.mkdir()
    saved.add(folder)
    for bad, said in (("", "empty"), ("a/b", "'/'"), ("x" * 200, "at most")):
        with pytest.raises(ValueError, match=said):
            saved.rename("lib", bad)
    with pytest.raises(ValueError, match="no library location called 'nope'"):
        saved.remove("nope")
    with pytest.raises(ValueError, match="not a folder"):
        saved.add(tmp_path / "missing")
    with pytest.raises(ValueError, match="no set of locations called 'x'"):
        saved.of_set("x")

    (tmp_path / "locations.json").write_text("{not json")
    damaged = Locations.load(tmp_path / "locations.json")
    assert damaged.locations == [] and "could not be read" in damaged.problem
    assert (tmp_path / "locations.json.damaged").read_text() == "{not json"  # set aside, not lost


# ------------------------------------------------------------------------------------------ the set


def two_libraries(tmp_path: Path) -> tuple[Path, Path]:
    """A: make_library's birds, engines and long file; B: drums-like clicks and noise, a copy of A's chirp."""
    a = make_library(tmp_path / "A")
    b = tmp_path / "B"
    for rel, kind, seconds, seed in (("kits/click_kit.wav", "clicks", 0.5, 7), ("kits/noise_kit.wav", "noise", 1.0, 8),
                                     ("loops/tone_loop.wav", "tone", 1.5, 9)):
        (b / rel).parent.mkdir(parents=True, exist_ok=True)
        sf.write(b / rel, sound(kind, seconds, seed), SR, subtype="PCM_16")
    shutil.copy(a / "birds/chirp_b.wav", b / "loops/chirp_again.wav")
    return a, b


def index(root: Path, emb: object) -> None:
    session = SearchSession.open(root, emb)
    try:
        drain(session.index_job())
    finally:
        session.close()


@pytest.fixture
def library_set(tmp_path: Path, embedder) -> LibrarySet:  # noqa: F811, ANN001 - the module's fixture
    a, b = two_libraries(tmp_path)
    index(a, embedder), index(b, embedder)
    found = LibrarySet.open([Location("SFX", a), Location("Drums", b)], embedder)
    yield found
    found.close()


def test_a_search_answers_the_best_of_both_each_hit_saying_where(library_set: LibrarySet) -> None:
    alone = [s.search("a chirping bird", 20) for s in library_set.sessions]
    both = library_set.search("a chirping bird", 20)
    assert len(both) == sum(len(a) for a in alone)  # every file of both (k above both libraries' sizes)
    assert [h.score for h in both] == sorted((h.score for a in alone for h in a), reverse=True)
    assert {h.location for h in both} == {"SFX", "Drums"}
    for h in both:
        root = library_set.sessions[library_set.names.index(h.location)].root
        assert h.path.is_relative_to(root) and h.rel_path.startswith(h.location + "/")
        assert library_set.path_of(h.file_id) == h.path
    top3 = library_set.search("a chirping bird", 3)
    assert [h.rel_path for h in top3] == [h.rel_path for h in both[:3]]


def test_a_folder_of_one_location_and_the_tree_top_level(library_set: LibrarySet) -> None:
    folders = library_set.folders()
    assert folders[:1] == ["SFX"] and "Drums" in folders and "Drums/kits" in folders and "SFX/birds" in folders
    hits = library_set.search("noise", 20, SearchFilters(folder="Drums/kits"))
    assert {h.rel_path for h in hits} == {"Drums/kits/click_kit.wav", "Drums/kits/noise_kit.wav"}
    assert {h.location for h in library_set.search("noise", 20, SearchFilters(folder="Drums"))} == {"Drums"}
    assert len(library_set.search("noise", 20, SearchFilters(folder="Elsewhere"))) == 0


def test_browse_similar_and_tags_across_locations(library_set: LibrarySet) -> None:
    page = library_set.browse(sort="name", limit=4)
    assert page.total == 7 + 4 and len(page) == 4
    names = [Path(h.rel_path).name for h in library_set.browse(sort="name", limit=100)]
    assert names == sorted(names, key=str.lower) and len(names) == 11  # one list, both locations' files
    chirp = next(h for h in page.hits + library_set.browse(limit=100).hits if h.rel_path == "SFX/birds/chirp_b.wav")
    like = library_set.similar(chirp.file_id, 3)
    assert {h.rel_path for h in like[:2]} == {"SFX/engines/chirp_copy.wav", "Drums/loops/chirp_again.wav"}
    assert like[0].score > 0.999 and like[1].score > 0.999  # the same sound in both locations

    kit = next(h for h in library_set.browse(limit=100) if h.location == "Drums")
    library_set.add_tags([kit.file_id, chirp.file_id], ["keep"])
    assert library_set.tags_of(kit.file_id) == ["keep"] and library_set.tags_of(chirp.file_id) == ["keep"]
    assert "keep" in library_set.all_tags()
    assert all(s.all_tags() == ["keep"] for s in library_set.sessions)  # each location's own catalog holds them


# ------------------------------------------------------------------------------------------ the CLI


def test_cli_searches_every_library_given_and_a_saved_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    a, b = two_libraries(tmp_path)
    ckpt = str(write_tiny_checkpoint(tmp_path / "models"))
    for root in (a, b):
        assert main(["index", str(root), "--model", ckpt, "--json"]) == 0
    capsys.readouterr()
    assert main(["search", "chirp", "--library", str(a), "--library", str(b), "--model", ckpt, "-k", "20",
                 "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert {h["location"] for h in hits} == {"A", "B"} and len(hits) == 11
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)

    assert main(["locations", "add", str(b), "--name", "Drums"]) == 0
    assert main(["locations", "add", str(a), "--name", "SFX"]) == 0
    assert main(["locations", "save-set", "all", "SFX", "Drums"]) == 0
    capsys.readouterr()
    assert main(["search", "chirp", "--set", "all", "--model", ckpt, "-k", "3", "--folder", "Drums/loops"]) == 0
    out = capsys.readouterr().out
    assert "Drums: " in out and "chirp_again.wav" in out and "SFX: " not in out
    assert main(["search", "chirp", "--library", "Drums", "--model", ckpt, "--json"]) == 0  # a location's name
    assert all("location" not in h for h in json.loads(capsys.readouterr().out))  # one library: as before
    assert main(["search", "chirp", "--library", "nowhere", "--model", ckpt]) == 2
    assert "no such folder, nor a library location" in capsys.readouterr().err
    assert main(["search", "chirp", "--set", "all", "--model", ckpt, "--folder", "kits"]) == 2
    assert "start it with a location's name (SFX, Drums)" in capsys.readouterr().err
    assert main(["duplicates", "--set", "all", "--model", ckpt, "--json"]) == 0  # copies across locations too
    listed = [[f["path"] for f in g["files"]] for g in json.loads(capsys.readouterr().out)]
    assert ["Drums/loops/chirp_again.wav", "SFX/birds/chirp_b.wav", "SFX/engines/chirp_copy.wav"] in listed


def test_numbered_takes_of_one_score_come_in_natural_order() -> None:
    """A folder's numbered takes found by its name alone score the same: 1, 2, … 10, not 1, 10, 11, 2."""
    from app.services.library.records import Hit
    from app.services.search.session import natural_ties

    def hit(rel: str, score: float) -> Hit:
        return Hit(Path("/lib") / rel, score, 1.0, "", 0.0, [], rel_path=rel)

    ranked = [hit("best.wav", 0.9), *(hit(f"Engine Variations/{i}.wav", 0.1) for i in (1, 10, 11, 2, 3)),
              hit("z.wav", 0.05), hit("a.wav", 0.05)]
    assert [h.rel_path.rpartition("/")[2] for h in natural_ties(ranked)] == [
        "best.wav", "1.wav", "2.wav", "3.wav", "10.wav", "11.wav", "a.wav", "z.wav"]


def test_duplicates_across_locations(tmp_path: Path, embedder) -> None:  # noqa: F811, ANN001
    from core.audio import decode, resample, write_audio

    a, b = two_libraries(tmp_path)
    chirp = decode(a / "birds/chirp_b.wav", None)
    write_audio(b / "loops/chirp_22k.flac", resample(chirp.audio, chirp.sample_rate, 22_050), 22_050)
    index(a, embedder), index(b, embedder)
    found = LibrarySet.open([Location("SFX", a), Location("Drums", b)], embedder)
    try:
        groups = drain(found.duplicates_job())
        one = [g for g in groups if "SFX/birds/chirp_b.wav" in [f.rel_path for f in g.files]]
        assert len(one) == 1 and [f.rel_path for f in one[0].files] == [
            "Drums/loops/chirp_22k.flac", "Drums/loops/chirp_again.wav", "SFX/birds/chirp_b.wav",
            "SFX/engines/chirp_copy.wav"]  # the same bytes in both, and another rate in the other location
        assert not one[0].identical
        assert drain(found.duplicates_job(b / "loops/chirp_22k.flac")) == one
        assert found.file_path("Drums/loops/chirp_again.wav") == b / "loops/chirp_again.wav"  # what trash moves
    finally:
        found.close()
