"""Issue 42 items 4 and 5: what `earshot search` reads as the query. One that starts with '-' (an exclusion first)
was read as the -k or -h option; `--queries` split lines at U+2028 and form feeds, so every later `line` was off;
a fullwidth query matched no names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli.main import main


@pytest.fixture
def library(tmp_path: Path) -> list[str]:
    """The CLI tests' library, tagged: the door 'keeper' and 'haunted', the dog 'haunted', the odd one 'keeper'."""
    from app.services.library.library import Library
    from tests.test_cli import tagged_library

    root = tagged_library(tmp_path / "lib")
    with Library.open(root) as lib:
        for rel, tags in {"doors/door_creak.wav": ["keeper", "haunted"], "animals/dog_bark.wav": ["haunted"],
                          "odd name;1.wav": ["keeper"]}.items():
            lib.user_tags.add([lib.files.id_of(rel)], tags)
    return ["--library", str(root), "--mode", "names", "--json"]


def found(capsys) -> list[str]:  # noqa: ANN001 - pytest's fixture
    return [h["path"].rpartition("/")[2] for h in json.loads(capsys.readouterr().out)]


@pytest.mark.parametrize(("argv", "names"), [
    (["-keeper haunted", "LIB"], ["dog_bark.wav"]),  # argparse read `-k eeper haunted`: "must be a whole number"
    (["-haunted keeper", "LIB"], ["odd name;1.wav"]),  # and `-h`: the help, exit 0, no search at all
    (["LIB", "-keeper haunted"], ["dog_bark.wav"]),  # after the options
    (["-k", "1", "-keeper haunted", "LIB"], ["dog_bark.wav"]),
    (["-k1", "-keeper haunted", "LIB"], ["dog_bark.wav"]),  # an option's value attached is still the option
    (["LIB", "--", "-keeper haunted"], ["dog_bark.wav"]),  # '--' works as before
], ids=["k", "h", "last", "after-k", "k-attached", "dashdash"])
def test_a_query_that_starts_with_a_dash_is_the_query(library: list[str], capsys, argv: list[str],
                                                       names: list[str]) -> None:
    i = argv.index("LIB")
    assert main(["search", *argv[:i], *library, *argv[i + 1:]]) == 0, capsys.readouterr().err
    assert found(capsys) == names


def test_many_queries_are_split_at_newlines_only(library: list[str], tmp_path: Path, capsys) -> None:
    """A U+2028, a form feed, a vertical tab or U+0085 inside a line is part of that line's query."""
    source = tmp_path / "queries.txt"
    source.write_text("dog\u2028bark\r\ndoor\x0ccreak\n\nkeeper\x0b\x85haunted\ndoor\n", encoding="utf-8")
    assert main(["search", "--queries", str(source), *library[:-1]]) == 0
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(a["line"], a["query"]) for a in answers] == [
        (1, "dog\u2028bark"), (2, "door\x0ccreak"), (4, "keeper\x0b\x85haunted"), (5, "door")]


def test_a_fullwidth_query_is_read_as_the_words_it_shows(library: list[str], capsys) -> None:
    """Issue 42 item 5: ｈａｕｎｔｅｄ (typed with an East Asian input method) matched no names; NFKC, as names."""
    from app.services.search.query import parse

    q = parse("ｈａｕｎｔｅｄ －ｋｅｅｐｅｒ ＂ｄｏｇ ｂａｒｋ＂")
    assert (q.words, q.excluded, q.phrases) == (["haunted"], ["keeper"], ["dog bark"])
    assert main(["search", "ｈａｕｎｔｅｄ", *library]) == 0
    assert sorted(found(capsys)) == ["dog_bark.wav", "door_creak.wav"]
