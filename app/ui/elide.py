"""Long file and folder names cut to a column's width so that what tells them apart stays in view.

A real library's names are long and alike: `DOORWood_Creaky Old Barn Door Open Slow_JOHNDOE_Recording01.wav` sits
beside `..._Open Fast_JOHNDOE_Recording01.wav` and `..._Close Slow_JOHNDOE_Recording02.wav`. Cut at one place
(the end, the middle) they all read `DOORWood_…ing01.wav`. So a name first loses the words that its look-alikes
share (the other names shown that start with its first word: `Creaky Old Barn Door`, `JOHNDOE`, `Recording`),
keeping its first word (what kind of sound) and what differs: `DOORWood…Open Fast…01.wav`. Only when that is still
too wide is it cut by characters: its end from its last separator (`_03.wav`) and as much of its start as fits.

Everything is in spans of the original text, so the query's highlighted words stay marked in what shows. Widths
come from a `measure` function (a QFontMetrics' horizontalAdvance): no widget here.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence

from app.ui.search_text import highlight

Span = tuple[int, int]
Measure = Callable[[str], int]
ELLIPSIS = "…"
WORD = re.compile(r"[^\W\d_]+|\d+")  # runs of letters, runs of digits: `Recording01` is two words, `DOORWood` one


def words(name: str) -> list[Span]:
    """Where the words of a file name's stem are (the extension is no word)."""
    dot = name.rfind(".")
    stem = name[:dot] if dot > 0 else name
    return [m.span() for m in WORD.finditer(stem)]


def shared_words(names: Sequence[str]) -> list[list[Span]]:
    """For each name, its words that every one of its look-alikes has too (look-alikes: the other names that start
    with its first word; a name without any is compared with all the others), in the order they give way: those
    every name in the list has (a creator's ID), then the rest from the right, then the first word, where the
    look-alikes share more than it and such words (a family of names, `DOORWood_Creaky Old Barn Door ...`)."""
    spans = [words(n) for n in names]
    folded = [[n[a:b].casefold() for a, b in s] for n, s in zip(names, spans, strict=True)]
    groups: dict[str, list[int]] = defaultdict(list)
    for i, w in enumerate(folded):
        if w:
            groups[w[0]].append(i)
    in_all = Counter(word for w in folded for word in set(w))
    in_group = {first: Counter(word for i in members for word in set(folded[i])) for first, members in groups.items()}
    out: list[list[Span]] = []
    for i, w in enumerate(folded):
        family = len(groups[w[0]]) if w else 0
        counts, size = (in_group[w[0]], family) if family > 1 else (in_all, len(names))
        shared = [k for k, word in enumerate(w) if size > 1 and counts[word] == size]
        whole_list = size == len(names)  # one family, or no families: what all share is all there is
        everywhere = [] if whole_list else [k for k in shared if k and in_all[w[k]] == len(names)]
        rest = [k for k in reversed(shared) if k and k not in everywhere]
        first = [0] if family > 1 and rest and 0 in shared else []  # what kind of sound: a family's, and last
        out.append([spans[i][k] for k in everywhere + rest + first])
    return out


def pieces_without(name: str, dropped: Sequence[Span]) -> list[Span]:
    """The parts of `name` left when the `dropped` words go, with the separators next to them; a dropped last
    word leaves the extension on its own."""
    spans = words(name)
    if not spans or not dropped:
        return [(0, len(name))]
    gone = set(dropped)
    keep = [s not in gone for s in spans]
    pieces: list[Span] = []
    for k, (a, b) in enumerate(spans):
        if not keep[k]:
            continue
        start = a if k > 0 else 0
        end = b if k < len(spans) - 1 else len(name)
        if pieces and keep[k - 1]:
            pieces[-1] = (pieces[-1][0], end)  # the same run of kept words
        else:
            pieces.append((start, end))
    if not keep[-1] and spans[-1][1] < len(name):
        pieces.append((spans[-1][1], len(name)))  # the extension
    return pieces


def gaps(name: str, pieces: Sequence[Span]) -> list[bool]:
    """Whether text was left out before the first piece, then after each piece."""
    ends = [p[0] for p in pieces[1:]] + [len(name)]
    return [bool(pieces) and pieces[0][0] > 0] + [b < e for (_, b), e in zip(pieces, ends, strict=True)]


def shown_text(name: str, pieces: Sequence[Span]) -> str:
    """The pieces with '…' wherever text was left out."""
    cut = gaps(name, pieces)
    return (ELLIPSIS if cut[0] else "") + "".join(name[a:b] + (ELLIPSIS if gap else "")
                                                  for (a, b), gap in zip(pieces, cut[1:], strict=True))


def elide_name(name: str, shared: Sequence[Span], measure: Measure, width: int) -> list[Span]:
    """The pieces of a file name to show in `width` pixels: the whole name when it fits; else without as many of
    the words its look-alikes share (`shared`, in the order they give way) as it takes; else the shortest of these
    cut by characters."""
    pieces = [(0, len(name))]
    if measure(name) <= width:
        return pieces
    for k in range(1, len(shared) + 1):
        pieces = pieces_without(name, shared[:k])
        if measure(shown_text(name, pieces)) <= width:
            return pieces
    return cut_to_width(name, pieces, measure, width)


def cut_to_width(name: str, pieces: Sequence[Span], measure: Measure, width: int) -> list[Span]:
    """The pieces cut by characters: the last one's end from its last separator (a take number and the extension;
    at most half the width), and as much of the ones before as fits."""
    a, b = pieces[-1]
    tail = (tail_start(name, a, b), b)
    if measure(ELLIPSIS + name[tail[0]:b]) > width / 2:
        tail = (b - last_chars_fitting(name[a:b], measure, width / 2 - measure(ELLIPSIS)), b)
    head: list[Span] = []
    for start, end in pieces:
        end = min(end, tail[0])
        n = 0
        while start + n < end and measure(shown_text(name, [*head, (start, start + n + 1), tail])) <= width:
            n += 1
        if n:
            head.append((start, start + n))
        if start + n < end or start >= end:
            break
    return [*head, tail]


def tail_start(name: str, a: int, b: int) -> int:
    """Where the end of `name[a:b]` that says which take it is begins: its last separator before the extension."""
    dot = name.rfind(".", a, b)
    sep = max(name.rfind(c, a, dot if dot > a else b) for c in "_- ")
    return sep if sep > a else a


def last_chars_fitting(text: str, measure: Measure, width: float) -> int:
    n = 0
    while n < len(text) and measure(text[len(text) - n - 1:]) <= width:
        n += 1
    return n


HEAD_WHOLE, HEAD_CUT = 0.6, 0.4  # of a cut folder's width: its first folder (the pack) whole within the one, else
# its start within the other


def elide_folder(folder: str, measure: Measure, width: int) -> list[Span]:
    """A folder cut in the middle: its first folder (the pack: `FreedroidRPG 1.0`, or its start) and the deepest
    folders that fit after it (`FreedroidRPG 1.0…/weapons`); when not even the last one fits beside the pack, the
    deepest folders alone (`…/weapons`), or the last one's end."""
    if measure(folder) <= width:
        return [(0, len(folder))]
    room = width - measure(ELLIPSIS)
    first = folder.find("/")
    head = first if 0 < first and measure(folder[:first]) <= room * HEAD_WHOLE else \
        first_chars_fitting(folder, measure, room * HEAD_CUT)
    rest = room - measure(folder[:head])
    best = _deepest_boundary(folder, measure, rest, head)
    if best is None and "/" in folder[head:]:  # half a pack and half a folder say nothing: the deepest alone
        best = _deepest_boundary(folder, measure, room, 0)
        start = best if best is not None else len(folder) - last_chars_fitting(folder, measure, room)
        return [(start, len(folder))]
    start = best if best is not None else len(folder) - last_chars_fitting(folder[head:], measure, rest)
    return [(0, head), (start, len(folder))] if head else [(start, len(folder))]


def _deepest_boundary(folder: str, measure: Measure, room: float, after: int) -> int | None:
    """Where the deepest folders that fit in `room` start (a '/' after `after`), or None."""
    best = None
    for k in range(len(folder) - 1, after, -1):
        if folder[k] == "/":
            if measure(folder[k:]) > room:
                break
            best = k
    return best


def first_chars_fitting(text: str, measure: Measure, width: float) -> int:
    n = 0
    while n < len(text) and measure(text[:n + 1]) <= width:
        n += 1
    return n


def pieces_html(name: str, pieces: Sequence[Span], spans: Sequence[Span]) -> str:
    """Rich text of the pieces joined by '…', the query's matched spans still marked where their text shows."""
    cut = gaps(name, pieces)
    parts = [highlight(name[a:b], [(max(s, a) - a, min(e, b) - a) for s, e in spans if s < b and e > a])
             + (ELLIPSIS if gap else "") for (a, b), gap in zip(pieces, cut[1:], strict=True)]
    return (ELLIPSIS if cut[0] else "") + "".join(parts)
