"""`app.services.search.browse`: an empty query's list of the library's sounds, with the search filters, sorted
and paged (no Qt, no model: the tone embedder of test_library)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_library import ToneEmbedder, tone, write

from app.services.jobs import drain
from app.services.library.indexer import index_library
from app.services.library.library import Library
from app.services.library.records import SearchFilters
from app.services.search.browse import browse

FILES = {  # relative path -> seconds; listed oldest first
    "zeta/very_long_folder_name_for_browsing/alpha_bell_long_name_take_01.wav": 0.7,
    "zeta/very_long_folder_name_for_browsing/Beta_knock.wav": 0.3,
    "alpha/gamma_whoosh.wav": 1.2,
    "delta_click.wav": 0.2,
}
MODEL = ToneEmbedder().model_id


@pytest.fixture
def library(tmp_path: Path) -> Iterator[Library]:
    for i, (rel, seconds) in enumerate(FILES.items()):
        write(tmp_path / rel, tone(300 + 100 * i, seconds))
        stamp = time.time() - 100 * (len(FILES) - i)
        os.utime(tmp_path / rel, (stamp, stamp))
    lib = Library.open(tmp_path)
    drain(index_library(lib, ToneEmbedder()))
    yield lib
    lib.close()


def names(lib: Library, **kw) -> list[str]:  # noqa: ANN003
    return [h.rel_path.rpartition("/")[2] for h in browse(lib, MODEL, **kw).hits]


def test_sorts_by_name_folder_duration_and_date(library: Library) -> None:
    assert names(library) == ["alpha_bell_long_name_take_01.wav", "Beta_knock.wav", "delta_click.wav",
                              "gamma_whoosh.wav"]  # case-insensitive
    assert names(library, sort="folder") == ["delta_click.wav", "gamma_whoosh.wav",
                                             "alpha_bell_long_name_take_01.wav", "Beta_knock.wav"]
    assert names(library, sort="duration") == ["delta_click.wav", "Beta_knock.wav",
                                               "alpha_bell_long_name_take_01.wav", "gamma_whoosh.wav"]
    assert names(library, sort="modified", descending=True)[0] == "delta_click.wav"
    with pytest.raises(ValueError, match="sort must be one of"):
        browse(library, MODEL, sort="loudness")


def test_pages_filters_and_favourites(library: Library) -> None:
    page = browse(library, MODEL, offset=1, limit=2)
    assert page.total == 4 and [h.name.rpartition("/")[2] for h in page.hits] == ["Beta_knock.wav", "delta_click.wav"]
    assert names(library, filters=SearchFilters(folder="zeta")) == ["alpha_bell_long_name_take_01.wav",
                                                                      "Beta_knock.wav"]
    assert names(library, filters=SearchFilters(min_duration=1.0)) == ["gamma_whoosh.wav"]
    assert names(library, filters=SearchFilters(favourites_only=True)) == []
    fid = library.files.id_of("delta_click.wav")
    library.user_tags.set_favourite([fid], True)
    hits = browse(library, MODEL, SearchFilters(favourites_only=True)).hits
    assert [h.file_id for h in hits] == [fid] and hits[0].favourite and hits[0].duration == pytest.approx(0.2)


def test_numbered_names_and_folders_sort_as_people_count(tmp_path: Path) -> None:
    """Issue 40: 1.ogg, 10.ogg ... 19.ogg, 2.ogg; Kit 10 before Kit 9."""
    for rel in ("Kit 10/kick.wav", "Kit 9/kick.wav", "Kit 9/10.wav", "Kit 9/2.wav", "Kit 9/1.wav"):
        write(tmp_path / rel, tone(300, 0.2))
    with Library.open(tmp_path) as lib:
        drain(index_library(lib, ToneEmbedder()))
        assert [h.rel_path for h in browse(lib, MODEL, filters=SearchFilters(folder="Kit 9")).hits] == [
            "Kit 9/1.wav", "Kit 9/2.wav", "Kit 9/10.wav", "Kit 9/kick.wav"]
        assert [h.rel_path for h in browse(lib, MODEL, sort="folder").hits][-1] == "Kit 10/kick.wav"
        assert lib.files.folders() == ["Kit 9", "Kit 10"]
