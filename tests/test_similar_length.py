"""Find similar respects what it started from (issue 24): a one-shot finds one-shots, not the music and ambiences
whose average sounds alike, unless any length is asked for (`earshot similar --any-length`, the Search tab's
"Similar length" box)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli.main import main
from app.services.jobs import drain
from app.services.library.library import Library
from app.services.library.records import SearchFilters
from app.services.search.session import SearchSession, similar_lengths
from app.ui.search_state import SearchState
from tests.test_library import ToneEmbedder, tone, write
from tests.test_search_service import write_tiny_checkpoint

ONE_SHOTS = [440, 455, 470, 490, 510, 530, 560, 600]


def make_mixed_library(root: Path) -> Path:
    """1-s one-shots around 440 Hz, and four 3-min tracks at 440 Hz (a drone, the same pitch as the query: their
    average sounds more like it than any other one-shot does)."""
    for f in ONE_SHOTS:
        write(root / "one-shots" / f"hit_{f}.wav", tone(f, seconds=1.0))
    for i in range(4):
        write(root / "music" / f"track_{i}.wav", tone(440 + i, seconds=180.0, amp=0.3))
    return root


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> SearchSession:
    root = make_mixed_library(tmp_path_factory.mktemp("mixed") / "lib")
    session = SearchSession(Library.open(root), ToneEmbedder(), text_encoder=None)
    drain(session.index_job())
    yield session
    session.close()


def test_a_one_shot_finds_one_shots_first_not_long_tracks(mixed: SearchSession):
    default = [h.rel_path for h in mixed.similar("one-shots/hit_440.wav", k=5)]
    assert default and all(p.startswith("one-shots/") for p in default), default
    assert default[0] == "one-shots/hit_455.wav"  # the nearest one-shot
    anything = [h.rel_path for h in mixed.similar("one-shots/hit_440.wav", k=5, any_length=True)]
    assert sum(p.startswith("music/") for p in anything[:4]) >= 3, anything  # what the default keeps out


def test_a_long_track_finds_long_tracks(mixed: SearchSession):
    hits = [h.rel_path for h in mixed.similar("music/track_0.wav", k=10)]
    assert hits and all(p.startswith("music/") for p in hits), hits


def test_a_sound_outside_the_library_is_measured_from_its_header(mixed: SearchSession, tmp_path: Path):
    outside = write(tmp_path / "query.wav", tone(440, seconds=1.0))
    hits = [h.rel_path for h in mixed.similar(outside, k=5)]
    assert hits and all(p.startswith("one-shots/") for p in hits), hits


def test_similar_lengths_narrows_within_the_users_own_duration_filters():
    f = similar_lengths(None, 1.0)
    assert (f.min_duration, f.max_duration) == (0.25, 5.0)
    f = similar_lengths(SearchFilters(min_duration=0.5, max_duration=3.0, folder="x"), 1.0)
    assert (f.min_duration, f.max_duration, f.folder) == (0.5, 3.0, "x")
    assert similar_lengths(SearchFilters(folder="x"), None) == SearchFilters(folder="x")  # length unknown: as is


def test_the_cli_keeps_long_files_out_unless_any_length(tmp_path: Path, capsys):
    root = make_mixed_library(tmp_path / "lib")
    ckpt = str(write_tiny_checkpoint(tmp_path / "models"))
    assert main(["index", str(root), "--model", ckpt, "--json"]) == 0
    capsys.readouterr()
    args = [str(root / "one-shots/hit_440.wav"), "--library", str(root), "--model", ckpt, "-k", "20", "--json"]
    assert main(["similar", *args]) == 0
    default = {Path(h["path"]).parent.name for h in json.loads(capsys.readouterr().out)}
    assert main(["similar", *args, "--any-length"]) == 0
    anything = [Path(h["path"]).parent.name for h in json.loads(capsys.readouterr().out)]
    assert default == {"one-shots"} and anything.count("music") == 4


def test_the_search_state_asks_for_similar_lengths_unless_told_otherwise():
    state = SearchState()
    asked: list[bool] = []
    state.events.search.connect(asked.append)
    state.set_similar_any_length(True)
    assert not asked  # no similar list shown: nothing to search again
    state.find_similar(Path("a.wav"))
    assert state.start_search().any_length
    state.set_similar_any_length(False)
    assert asked == [True, True] and not state.start_search().any_length


def test_find_similar_searches_the_whole_library_unless_asked_for_the_folder_browsed():
    """Issue 38.4: find similar from a result silently kept the folder last browsed ("25 results (filtered)", all
    from that folder; the exact copy elsewhere in the library missing). Now it searches the whole library (other
    filters kept) unless "Only this folder" is ticked, and the header says which."""
    from app.services.search.answer import SearchAnswer
    from app.services.search.search_jobs import Results
    from app.ui.search_text import results_header

    state = SearchState()
    state.set_filters(SearchFilters(folder="sound/weapons", formats=("ogg",)))
    state.find_similar(Path("sound/weapons/gun.ogg"))
    whole = state.start_search()
    assert whole.filters.folder is None and whole.filters.formats == ("ogg",)
    asked: list[bool] = []
    state.events.search.connect(asked.append)
    state.set_similar_in_folder(True)
    assert asked == [True] and state.start_search().filters.folder == "sound/weapons"
    hits = SearchAnswer("similar", [object()])  # type: ignore[list-item]
    assert results_header(Results(hits, "gun.ogg", 5), "sound") == "1 result for sounds like gun.ogg in the whole " \
        "library"
    assert results_header(Results(hits, "gun.ogg", 5, True, "sound/weapons"), "sound") == \
        "1 result for sounds like gun.ogg in sound/weapons (filtered)"
