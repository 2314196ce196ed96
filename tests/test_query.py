"""Search query syntax: words, "phrases", prefix*, -exclusions, and FTS5 expressions that can never fail."""

from __future__ import annotations

import sqlite3

import pytest

from app.services.search.query import parse, quote


def test_parts_of_a_query():
    q = parse('creak -metal "wooden door" foot* -"sliding glass"')
    assert q.words == ["creak"]
    assert q.phrases == ["wooden door"]
    assert q.prefixes == ["foot"]
    assert q.excluded == ["metal", "sliding glass"]
    assert q.free_text == "creak wooden door foot"  # what the encoders read: positive words in order
    assert q.fts_match() == '"creak" OR "wooden door" OR "foot"*'
    assert q.fts_exclude() == '"metal" OR "sliding glass"'
    assert q.terms == ["creak", "wooden", "door", "foot"]


def test_nothing_to_search_for():
    for text in ["", "   ", "-", "*", '"', '""', "-dog", "(((", "---", "- * \""]:
        q = parse(text)
        assert q.empty and q.fts_match() is None, text
    assert parse("-dog").fts_exclude() == '"dog"'


def test_quotes_inside_words_are_doubled():
    assert quote('say "hi"') == '"say ""hi"""'
    assert parse('o"clock').fts_match() == '"o""clock"'  # inside a word: one FTS5 string (a phrase o clock)
    assert parse('door "creak').phrases == ["creak"]  # an unclosed quote runs to the end


@pytest.fixture(scope="module")
def fts() -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(name, tags, tokenize = 'porter unicode61 remove_diacritics 2',"
               " prefix = '2 3')")
    for row in [("wooden door creak slow", ""), ("metal door slam", "heavy"), ("footsteps on gravel", "walking"),
                ("日本語 雨の音", ""), ("Дождь по стеклу", "rain window")]:
        db.execute("INSERT INTO t VALUES (?, ?)", row)
    return db


@pytest.mark.parametrize("text", [
    'NEAR(a b)', 'name:door', 'door^', 'AND', 'OR NOT', '"unterminated', 'a*b', '*door', 'door**', '(door)',
    'door AND -', '{name tags}: door', "'single'", 'ü*', '日本語*', 'x' * 2000, '\x00\x01', '-"', 'NOT door',
    'door OR', '"door" "', '\\', '+door', '#$%&', 'door-*', '--door', '"-door"',
    'door\x00', 'do\x00or', '"door\x00creak"', '-door\x00', 'door\x00*', '\x1b[31mdoor', 'door\udcff', '\ud800*',
])
def test_no_query_is_an_fts5_syntax_error(fts: sqlite3.Connection, text: str):
    q = parse(text)
    for expr in (q.fts_match(), q.fts_exclude()):
        if expr:
            fts.execute("SELECT rowid FROM t WHERE t MATCH ?", (expr,)).fetchall()  # must not raise


def test_matching_semantics(fts: sqlite3.Connection):
    def rows(text: str) -> set[int]:
        match = parse(text).fts_match()  # None: only intent words ("and", "the"), nothing to look for
        return {r[0] for r in fts.execute("SELECT rowid FROM t WHERE t MATCH ?", (match,))} if match else set()

    assert rows("door") == {1, 2}
    assert rows("creaking doors") == {1, 2}  # porter stemming on both sides; words are OR-ed (BM25 ranks)
    assert rows('"door creak"') == {1} and rows('"creak door"') == set()  # an exact phrase keeps its order
    assert rows("foot*") == {3} and rows("foo") == set()  # prefix
    assert rows("AND") == set() and rows("NEAR(door slam)") == {2}  # operators are plain words
    assert rows("日本語") == {4} and rows("дождь") == {5}  # any script, case-folded
    assert rows("window") == {5}  # every column


def test_control_characters_are_spaces():
    """Issue 27 item 9: `printf 'door\\x00\\n' | earshot search` was "unterminated string" from FTS5."""
    q = parse('door\x00creak\x07 "wooden\x00door" -metal\x1b slam\x7f')
    assert q.words == ["door", "creak", "slam"] and q.phrases == ["wooden door"] and q.excluded == ["metal"]
    assert q.free_text == "door creak wooden door slam"
    assert parse("door\udcff").words == ["door"]  # an undecodable byte of the command line (surrogateescape)


def test_quoted_phrases_are_required_together() -> None:
    assert parse('door "wooden door" "creak" "creak"').fts_require() == '"wooden door" AND "creak"'
    assert parse("door creak -metal foot*").fts_require() is None
    assert parse('"say ""hi"""').fts_require() == '"say" AND "hi"'  # quotes end phrases: two of them
    # the Search tab, while a phrase is being typed: its last word may be cut short, until the quote closes it
    assert parse('door "gate sl').fts_require(prefix_last=True) == '"gate sl"*'
    assert parse('door "gate sl').fts_require() == '"gate sl"'
    assert parse('door "gate sl').fts_parts(prefix_last=True)[-1] == '"gate sl"*'  # BM25 ranks the holders too
    assert parse('"gate sl" door').fts_require(prefix_last=True) == '"gate sl"'
