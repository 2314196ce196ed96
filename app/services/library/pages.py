"""Reading catalog rows off the SQLite pages themselves, for salvage when SQL cannot reach them.

When a table's root or interior page is damaged, SQL cannot reach its intact leaf pages. SQLite's file format
is documented (https://www.sqlite.org/fileformat2.html) and stable: walk every page, parse the live cells of
table-leaf pages (skipping the freelist, which holds deleted rows), and recognise our rows by their shape.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    """(value, next offset) of the SQLite varint at buf[i]."""
    v = 0
    for k in range(8):
        b = buf[i + k]
        v = (v << 7) | (b & 0x7F)
        if b < 0x80:
            return v, i + k + 1
    return (v << 8) | buf[i + 8], i + 9


def _decode_record(payload: bytes) -> tuple:
    header_size, i = _varint(payload, 0)
    types = []
    while i < header_size:
        t, i = _varint(payload, i)
        types.append(t)
    out, pos = [], header_size
    for t in types:
        if t == 0:
            out.append(None)
        elif 1 <= t <= 6:
            n = (1, 2, 3, 4, 6, 8)[t - 1]
            out.append(int.from_bytes(payload[pos:pos + n], "big", signed=True))
            pos += n
        elif t == 7:
            out.append(struct.unpack(">d", payload[pos:pos + 8])[0])
            pos += 8
        elif t in (8, 9):
            out.append(t - 8)
        elif t >= 12:
            n = (t - 12) // 2
            raw = payload[pos:pos + n]
            out.append(raw if t % 2 == 0 else raw.decode("utf-8"))
            pos += n
        else:
            raise ValueError("reserved serial type")
    if pos > len(payload):
        raise ValueError("record runs past its payload")
    return tuple(out)


def page_records(path: Path) -> Iterator[tuple[int, tuple]]:
    """(rowid, record) of every live cell on every table-leaf page that parses; damaged ones are skipped."""
    data = path.read_bytes()
    if len(data) < 100:
        return
    trunk = 0
    if data.startswith(b"SQLite format 3\0"):
        ps = int.from_bytes(data[16:18], "big")
        ps = 65536 if ps == 1 else ps
        usable, trunk = ps - data[20], int.from_bytes(data[32:36], "big")
    else:  # the header page itself is damaged: the page size we create catalogs with, freelist unknown
        ps = usable = 4096
    n_pages = len(data) // ps
    page = lambda n: data[(n - 1) * ps:n * ps]  # noqa: E731 - 1-based page numbers, as in the format
    free: set[int] = set()
    budget = n_pages
    while 0 < trunk <= n_pages and trunk not in free and budget > 0:  # the freelist: deleted rows live there
        free.add(trunk)
        t = page(trunk)
        count = min(int.from_bytes(t[4:8], "big"), (usable - 8) // 4)
        free.update(int.from_bytes(t[8 + 4 * k:12 + 4 * k], "big") for k in range(count))
        trunk, budget = int.from_bytes(t[0:4], "big"), budget - 1
    max_local = usable - 35
    min_local = (usable - 12) * 32 // 255 - 23
    for n in range(1, n_pages + 1):
        if n in free:
            continue
        p = page(n)
        base = 100 if n == 1 else 0
        if p[base] != 0x0D:  # table leaf
            continue
        n_cells = int.from_bytes(p[base + 3:base + 5], "big")
        for c in range(n_cells):
            try:
                off = int.from_bytes(p[base + 8 + 2 * c:base + 10 + 2 * c], "big")
                size, i = _varint(p, off)
                rowid, i = _varint(p, i)
                if size <= max_local:
                    payload = p[i:i + size]
                else:
                    k = min_local + (size - min_local) % (usable - 4)
                    local = k if k <= max_local else min_local
                    chunks, nxt = [p[i:i + local]], int.from_bytes(p[i + local:i + local + 4], "big")
                    got, seen = local, set()
                    while got < size and 0 < nxt <= n_pages and nxt not in seen:
                        seen.add(nxt)
                        o = page(nxt)
                        chunks.append(o[4:usable][:size - got])
                        got += len(chunks[-1])
                        nxt = int.from_bytes(o[0:4], "big")
                    payload = b"".join(chunks)
                if len(payload) != size:
                    continue
                yield rowid, _decode_record(payload)
            except (IndexError, ValueError, struct.error, UnicodeDecodeError):
                continue


def recognise(record: tuple) -> str | None:
    """Which of our tables a raw record belongs to, by its shape (None: another table, or garbage)."""
    n = len(record)
    if n in (11, 12, 13) and isinstance(record[1], bytes) and record[8] in ("ok", "error") and all(
            isinstance(record[k], int) for k in (2, 3)):
        return "files"
    if n in (6, 7) and isinstance(record[1], str) and isinstance(record[2], int) and isinstance(record[3], bytes) \
            and isinstance(record[4], int) and isinstance(record[5], bytes) and (n == 6 or record[6] is None
                                                                                 or isinstance(record[6], str)):
        return "vectors"
    if n in (4, 5) and isinstance(record[0], str) and isinstance(record[1], int) and isinstance(record[2], int) \
            and isinstance(record[3], float | int):
        return "models"
    if n == 2 and record[0] is None and isinstance(record[1], float):  # file_id is the rowid
        return "favourites"
    return None


def raw_rows(path: Path) -> dict[str, list[tuple]]:
    """Rows of files, vectors, models and favourites found on the pages, in the catalog's salvage column order."""
    found: dict[str, list[tuple]] = {"files": [], "vectors": [], "models": [], "favourites": []}
    try:
        records = list(page_records(path))
    except OSError:
        return found
    for rowid, rec in sorted(records, key=lambda r: -r[0]):  # newest first: it wins any UNIQUE conflict
        kind = recognise(rec)
        if kind == "files":
            found["files"].append((rowid, *rec[1:11]))
        elif kind == "vectors":
            found["vectors"].append((rowid, *rec[1:6]))
        elif kind == "models":
            found["models"].append(rec[:4])
        elif kind == "favourites":
            found["favourites"].append((rowid, rec[1]))
    return found
