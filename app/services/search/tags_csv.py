"""The tags CSV (`path,tags,favourite`): read with explicit limits and strict quoting, written formula-safe.

Reading: a physical line longer than MAX_LINE_CHARS, a record whose quote does not close within
MAX_RECORD_LINES lines, and any other quoting error is one bad record, reported by its first line; reading
goes on at the next line, so one bad row never takes the rest of the file along. Memory stays bounded whatever
the file holds (an over-long line is skipped, never read whole).

Writing: a cell that a spreadsheet would evaluate (OWASP's CSV-injection rule: it begins with = + - @ tab or CR)
gets a single quote in front; so does a cell that already begins with quotes before such a character, so that
reading removes exactly one quote from every such cell and export -> import gives back the same text.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TextIO

MAX_LINE_CHARS = 64 * 1024  # a path is at most a few KiB; 1000 tags of 64 characters fit
MAX_RECORD_LINES = 8  # a quoted field may hold line breaks (a file name with one), not a whole file
_FORMULA = re.compile(r"'*[=+\-@\t\r]")  # a formula start, or an escaped one (more quotes in front)


def neutralise(cell: str) -> str:
    """The cell as written: one quote in front when a spreadsheet would evaluate it (or it looks escaped)."""
    return "'" + cell if _FORMULA.match(cell) else cell


def restore(cell: str) -> str:
    """The cell as read: undoes `neutralise` exactly (one leading quote before an escaped formula start)."""
    return cell[1:] if cell.startswith("'") and _FORMULA.match(cell, 1) else cell


def write_rows(fh: TextIO, header: Sequence[str], rows: Iterator[Sequence[str]]) -> int:
    """Write the header and rows, every cell neutralised; returns the number of rows."""
    w = csv.writer(fh, lineterminator="\n")
    w.writerow(header)
    n = 0
    for row in rows:
        w.writerow([neutralise(c) for c in row])
        n += 1
    return n


@dataclass
class Record:
    """One record of the file: its first line, and its cells (restored) or what is wrong with it."""

    line: int
    cells: list[str] | None
    error: str | None = None


def read_records(fh: TextIO) -> Iterator[Record]:
    """Every record of a CSV opened with newline='', bad ones included (cells None, error set)."""
    lines = _Lines(fh)
    line = 1
    while (first := lines.get(line)) is not None:
        lines.forget_before(line)
        if isinstance(first, int):
            yield Record(line, None, f"line is {first:,} characters long (at most {MAX_LINE_CHARS:,})")
            line += 1
            continue
        window = lines.window(line, MAX_RECORD_LINES)
        reader = csv.reader(iter(window), strict=True)
        try:
            cells = next(reader, None)
        except csv.Error as e:
            yield Record(line, None, _quoting_error(e))
            line += 1  # the next line may start a good record: one bad quote never takes the rest along
            continue
        if cells is not None:
            yield Record(line, [restore(c) for c in cells])
        line += max(1, reader.line_num)


def _quoting_error(e: csv.Error) -> str:
    if "unexpected end of data" in str(e):
        return f"unterminated quote (a quoted field must close within {MAX_RECORD_LINES} lines)"
    return f"bad quote ({e})"


class _Lines:
    """The file's physical lines by number, read ahead as far as a record may reach; an over-long line is held
    as its length (an int), never whole."""

    def __init__(self, fh: TextIO) -> None:
        self.fh = fh
        self.buffer: dict[int, str | int] = {}
        self.read = 0  # lines read so far
        self.eof = False

    def get(self, n: int) -> str | int | None:
        while self.read < n and not self.eof:
            self._read_one()
        return self.buffer.get(n)

    def forget_before(self, n: int) -> None:
        for old in [k for k in self.buffer if k < n]:
            del self.buffer[old]

    def window(self, n: int, count: int) -> list[str]:
        """Lines n, n+1, ... (at most `count`), stopping before an over-long line or the end of the file."""
        out = []
        for k in range(n, n + count):
            line = self.get(k)
            if not isinstance(line, str):
                break
            out.append(line)
        return out

    def _read_one(self) -> None:
        line = self.fh.readline(MAX_LINE_CHARS + 1)
        if not line:
            self.eof = True
            return
        self.read += 1
        if len(line) <= MAX_LINE_CHARS or line.endswith("\n"):
            self.buffer[self.read] = line
            return
        length = len(line)
        while more := self.fh.readline(MAX_LINE_CHARS):  # the rest of the over-long line, counted, dropped
            length += len(more)
            if more.endswith("\n"):
                break
        self.buffer[self.read] = length
