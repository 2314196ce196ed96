"""A query over MAX_QUERY_CHARS is searched by its first characters, and the user is told: `earshot search` on
standard error (and in a field with --json / --queries), the Search tab in its results header."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli.main import main
from app.services.search.answer import SearchAnswer
from app.services.search.query import MAX_QUERY_CHARS, parse
from app.services.search.search_jobs import Results
from app.ui.search_text import results_header
from tests.test_search_service import indexed_one_tone

LONG = "door creak " + "slowly " * 300  # 2,111 characters
NOTE = f"the query is {len(LONG):,} characters long; only its first {MAX_QUERY_CHARS:,} were searched"


def test_parse_says_when_it_cut_the_query() -> None:
    assert parse(LONG).shortened_from == len(LONG) and len(parse(LONG).raw) == MAX_QUERY_CHARS
    assert parse("a" * MAX_QUERY_CHARS).shortened_from is None  # at the limit: nothing cut
    assert parse("door").shortened_from is None


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root, model = indexed_one_tone(tmp_path_factory.mktemp("long-query"), "door-creak.wav")
    return root, str(model)


def test_cli_says_on_stderr_that_the_query_was_shortened(library, capsys) -> None:
    root, model = library
    capsys.readouterr()
    assert main(["search", LONG, "--library", str(root), "--model", model]) == 0
    out, err = capsys.readouterr()
    assert f"earshot: {NOTE}" in err and NOTE not in out and "door-creak.wav" in out

    assert main(["search", "door", "--library", str(root), "--model", model]) == 0
    assert "only its first" not in capsys.readouterr().err  # a short query says nothing


def test_cli_json_carries_the_shortening_in_a_field(library, capsys) -> None:
    root, model = library
    capsys.readouterr()
    assert main(["search", LONG, "--library", str(root), "--model", model, "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)[0]["name"] == "door-creak.wav"  # the list of hits, as before
    fields = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert {"query_shortened": {"chars": len(LONG), "kept": MAX_QUERY_CHARS}} in fields


def test_cli_queries_lines_carry_the_shortening(library, tmp_path: Path, capsys) -> None:
    root, model = library
    queries = tmp_path / "queries.txt"
    queries.write_text(f"door\n{LONG}\n")
    capsys.readouterr()
    assert main(["search", "--queries", str(queries), "--library", str(root), "--model", model]) == 0
    out, err = capsys.readouterr()
    short, long = (json.loads(line) for line in out.splitlines())
    assert short["query_shortened"] is None
    assert long["query_shortened"] == {"chars": len(LONG.strip()), "kept": MAX_QUERY_CHARS}
    assert "earshot: line 2: the query is" in err and "line 1:" not in err


def test_cli_words_only_past_the_limit_are_named_as_such(library, capsys) -> None:
    root, model = library
    capsys.readouterr()
    assert main(["search", " " * MAX_QUERY_CHARS + "door", "--library", str(root), "--model", model]) == 2
    err = capsys.readouterr().err
    assert f"the first {MAX_QUERY_CHARS:,} characters of the query (of {MAX_QUERY_CHARS + 4:,}) hold no words" in err
    assert "Traceback" not in err


def test_search_tab_header_says_the_query_was_shortened() -> None:
    note = f"Query too long: searched its first {MAX_QUERY_CHARS:,} of 2,111 characters · "
    long = parse(LONG)
    assert long.shortened_from == 2111
    hits = SearchAnswer("text", [object()], query=long)  # type: ignore[list-item]
    assert results_header(Results(hits, LONG, 5), "both").startswith(note + "1 result for “door")
    assert results_header(Results(SearchAnswer("text", query=long), LONG, 5), "both") == note + "No results"
    one = SearchAnswer("text", [object()], query=parse("door"))  # type: ignore[list-item]
    assert not results_header(Results(one, "door", 5), "both").startswith("Query")
