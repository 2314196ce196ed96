"""Issue 27 items 10-12: the tags CSV (app/services/search/tags_csv.py).

The CSV is how users back up and move their tags: it is read with explicit limits and strict quoting (a bad
row is listed by its line, every other row applied) and written so a spreadsheet never evaluates a cell.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from app.cli.main import main
from tests.test_cli import tagged_library

HEADER = "path,tags,favourite\n"


def library_tags(root: Path) -> dict[str, tuple[list[str], bool]]:
    from app.services.library.library import Library

    with Library.open(root) as lib:
        return {path: (tags, fav) for path, tags, fav in lib.user_tags.table()}


def test_a_field_over_the_csv_limit_is_one_bad_row_and_the_rest_is_applied(tmp_path: Path, capsys) -> None:
    """`path,tags,favourite\\nx.wav,<10 MB of x>,1` crashed the import (csv field limit, 128 KiB) and nothing was
    applied."""
    root = tagged_library(tmp_path / "lib")
    big = tmp_path / "big.csv"
    big.write_text(HEADER + "animals/dog_bark.wav,keeper,\n" + "doors/door_creak.wav," + "x" * 10_000_000 + ",1\n"
                   + "odd name;1.wav,other,1\n", encoding="utf-8")
    assert main(["tags", "import", str(big), "--library", str(root), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [e["line"] for e in report["errors"]] == [3] and report["files_changed"] == 2
    assert library_tags(root) == {"animals/dog_bark.wav": (["keeper"], False), "odd name;1.wav": (["other"], True)}


FORMULAS = ["=cmd|' /C calc'!A0", "+SUM(1+1)*cmd|calc", "@HYPERLINK(\"http://x\")", "-2+3", "\tdata"]


def test_exported_cells_are_never_formulas_and_import_back_unchanged(tmp_path: Path) -> None:
    """Tags imported as `=cmd|' /C calc'!A0`, `+SUM(1+1)*cmd|calc`, `@HYPERLINK(…)` were exported raw into cells a
    spreadsheet evaluates (OWASP CSV injection: a cell starting with = + - @ tab or CR)."""
    from tests.test_library import tone, write

    write(tmp_path / "lib" / "=1+1.wav", tone(300, 0.6))  # a file name is a cell too
    root = tagged_library(tmp_path / "lib")
    source = tmp_path / "in.csv"
    with source.open("w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["path", "tags", "favourite"])
        for formula in FORMULAS:
            w.writerow(["animals/dog_bark.wav", formula, ""])
        w.writerow(["=1+1.wav", "", "1"])
    assert main(["tags", "import", str(source), "--library", str(root)]) == 0
    out = tmp_path / "out.csv"
    assert main(["tags", "export", "--library", str(root), "-o", str(out)]) == 0
    cells = [cell for row in csv.reader(out.open(encoding="utf-8", newline="")) for cell in row]
    assert not [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r")], cells
    write(tmp_path / "other" / "=1+1.wav", tone(300, 0.6))
    other = tagged_library(tmp_path / "other")
    assert main(["tags", "import", str(out), "--library", str(other)]) == 0
    assert sorted(library_tags(other)["animals/dog_bark.wav"][0]) == sorted(" ".join(f.split()) for f in FORMULAS)
    assert library_tags(other) == library_tags(root)


def test_an_unterminated_quote_is_one_bad_row_not_the_rest_of_the_file(tmp_path: Path, capsys) -> None:
    """An unterminated quote silently merged the following rows into one garbage tag (rc 0, "1 rows: 1 files
    changed")."""
    root = tagged_library(tmp_path / "lib")
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + 'doors/door_creak.wav,"spooky,\n' + "animals/dog_bark.wav,keeper,\n"
                   + "odd name;1.wav,other,1\n", encoding="utf-8")
    assert main(["tags", "import", str(bad), "--library", str(root), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [e["line"] for e in report["errors"]] == [2] and "quote" in report["errors"][0]["error"]
    assert library_tags(root) == {"animals/dog_bark.wav": (["keeper"], False), "odd name;1.wav": (["other"], True)}


@pytest.mark.parametrize("cell", ["=1+1", "'=1+1", "''@x", "-", "\r", "plain", "'quoted", "a=b", ""])
def test_neutralise_then_restore_gives_the_cell_back(cell: str) -> None:
    from app.services.search.tags_csv import neutralise, restore

    written = neutralise(cell)
    assert written[:1] not in ("=", "+", "-", "@", "\t", "\r") and restore(written) == cell


def test_records_keep_line_breaks_in_quotes_and_skip_an_over_long_line_unread() -> None:
    import io

    from app.services.search.tags_csv import MAX_LINE_CHARS, read_records

    text = ('path,tags\n"two\nlines.wav",a\n' + "y" * (3 * MAX_LINE_CHARS) + '\nlast.wav,"b"c\nok.wav,d')
    records = list(read_records(io.StringIO(text, newline="")))
    assert [(r.line, r.cells) for r in records if r.cells] == [(1, ["path", "tags"]), (2, ["two\nlines.wav", "a"]),
                                                               (6, ["ok.wav", "d"])]
    assert [(r.line, r.error[:8]) for r in records if r.error] == [(4, "line is "), (5, "bad quot")]
