"""What the Search tab writes, without Qt: indexing progress and summaries, the results header and
what an empty list means, and why a result matched, with the query's words highlighted.

Which words matched, and where, is the search service's answer (`hit.match.spans`, found with
`app.services.library.names.word_spans`); this module only moves those spans to where the list shows the
field's text, and never looks for words itself.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from app.services.library.embedding import LONG_FILE_WINDOWS
from app.services.search.query import MAX_QUERY_CHARS
from app.services.search.search_jobs import summarize
from app.ui.durations import format_duration
from core.display import display_name

QUERY_SHOWN_CHARS = 120  # of a query quoted in the results line and the empty list
CLOSE_NAMES = 0.25  # a names score without a word matched that the why line calls "close in meaning"

if TYPE_CHECKING:
    from app.services.library.records import Hit, SearchFilters
    from app.services.search.search_jobs import IndexOutcome, Results

HIGHLIGHT_STYLE = "background-color:#ffe38a; color:#1a1a1a;"
# in a selected row: the words in the highlight's yellow on the selection, underlined. A yellow box there ended
# where the next glyph begins and read as covering it ("explosion6": the 6 half yellow, half white on blue)
SELECTED_HIGHLIGHT_STYLE = "color:#ffe38a; text-decoration:underline;"
STAR_ON, STAR_OFF = "★", "☆"
Span = tuple[int, int]


NAMES_PASS_STEPS = {"headers": "files looked at", "listing": "files listed", "reading": "files read",
                    "embedding": "names embedded"}


def format_progress(p: dict[str, Any]) -> str:
    """'Indexing 12/40 files · 35.2 s of audio · about 12 s left' (the time left at the rate measured so far;
    'estimating time left…' until a few files have been embedded); the first pass: 'Reading names and tags'."""
    if p.get("phase") == "names":  # the indexer's own words would repeat the phase's: show only its count
        head = "Reading names and tags (name search works when this is done)"
        if isinstance(p.get("part_done"), int) and isinstance(p.get("part_total"), int):
            what = NAMES_PASS_STEPS.get(str(p.get("part")), "files")
            return f"{head} · {what} {p['part_done']}/{p['part_total']}"
        return head + (f" · {p['message']}" if p.get("message") else "")
    parts = [f"Indexing {p.get('files_done', p.get('step', 0))}/{p.get('files_total', p.get('total', 0))} files"]
    if p.get("audio_seconds"):
        parts.append(f"{format_duration(float(p['audio_seconds']))} of audio")
    eta = p.get("eta_s")
    if isinstance(eta, int | float):
        parts.append(f"about {format_duration(max(0.0, float(eta)))} left")
    elif p.get("phase") == "audio":
        parts.append("estimating time left…")
    elif p.get("message"):
        parts.append(str(p["message"]))
    return " · ".join(parts)


def index_summary(outcome: IndexOutcome) -> tuple[str, int]:
    """(the line under the query after indexing, how many files this run added, moved, copied or removed)."""
    s = summarize(outcome.report)
    changed = s["embedded"] + s["moved"] + s["copied"] + s["removed"]
    text = f"{outcome.indexed} sounds indexed"
    if changed or s["failed"]:
        n = s["copied"]
        copies = ("1 copy of a known sound, " if n == 1 else f"{n} copies of known sounds, ") if n else ""
        text += (f" · this run: {s['embedded']} new, {copies}{s['moved']} moved, {s['removed']} removed, "
                 f"{s['failed']} failed")
    if s["audio_seconds"]:
        text += f" · {format_duration(s['audio_seconds'])} of audio at {s['x_realtime']:.0f}× real time"
    if s["long_files_spread"]:
        n = s["long_files_spread"]
        text += (f" · {n} long file{'s' if n != 1 else ''} heard in {LONG_FILE_WINDOWS} spread windows "
                 "(Preferences: every window)")
    return text, changed


# ------------------------------------------------------------------------------------------ the results list


def results_header(results: Results | None, shown_mode: str, folder: str | None = None,
                   favourites: bool = False, category: str | None = None) -> str:
    if results is None:
        return "Type a description to search the library."
    if results.mode == "browse":
        return browse_header(len(results.hits), results.answer.total or 0, folder, favourites, category)
    shortened = shortened_note(results)  # first: the label elides its end, and the query may be long
    if not results.hits:
        return shortened + "No results" + phrase_condition(results.answer.required_phrases)
    what = quoted(results.query) if results.mode == "text" else f"sounds like {results.query}"
    if results.mode == "similar" and shown_mode == "both":
        what += " by sound and name"
    if results.mode == "similar":  # the whole library unless asked: say which, the folder browsed may differ
        what += f" in {results.folder}" if results.folder else " in the whole library"
    n = len(results.hits)
    text = f"{n} result{'' if n == 1 else 's'} for {what}" + (" (filtered)" if results.filtered else "")
    if results.answer.no_good_match:
        text = "No good match · " + text
    fixed = results.answer.did_you_mean
    return shortened + text + (f" · did you mean “{fixed}”?" if fixed else "")


def sound_format(sample_rate: int, channels: int) -> str:
    """'44.1 kHz stereo', '48 kHz mono', '96 kHz 6 ch'; '' when the catalog does not know."""
    if sample_rate <= 0:
        return ""
    khz = f"{sample_rate / 1000:.3f}".rstrip("0").rstrip(".")
    layout = {1: "mono", 2: "stereo"}.get(channels, f"{channels} ch" if channels > 0 else "")
    return f"{khz} kHz {layout}".strip()


def phrase_condition(phrases: list[str]) -> str:
    """' · only files whose name, folder or tags hold “wooden door” can match' for a query's exact phrases
    (they are conditions: query.py), '' without any."""
    return f" · only files whose name, folder or tags hold {' and '.join(f'“{p}”' for p in phrases)} can match" \
        if phrases else ""


def shortened_note(results: Results) -> str:
    """'Query too long: searched its first 1,000 of 5,210 characters · ' when the query was cut, else ''."""
    length = results.answer.shortened_from
    return f"Query too long: searched its first {MAX_QUERY_CHARS:,} of {length:,} characters · " if length else ""


def browse_header(shown: int, total: int, folder: str | None, favourites: bool, category: str | None = None
                  ) -> str:
    """'50 of 173 sounds in warmux/sound', '12 sounds heard as Doors in the library': what an empty query
    lists."""
    what = "favourite" if favourites else "sound"
    count = f"{shown} of {total} {what}s" if shown < total else f"{total} {what}{'' if total == 1 else 's'}"
    heard = f" heard as {category.title()}" if category else ""
    where = f" in {display_name(folder)}" if folder else " in the library"
    return f"{count}{heard}{where}"


def no_results_message(results: Results | None, indexing: bool, favourites_only: bool,
                       filters: SearchFilters | None = None) -> str:
    """What the list says instead of rows: how to start, or why nothing came back (`filters`: those searched
    with, when one of their ranges is backwards no sound can pass)."""
    if results is None:
        return "Type what you want to hear, e.g. “rain on a window” or “a dog barks”."
    if backwards := backwards_range(filters):
        return f"No sound can pass these filters: {backwards}. Swap them, or set one to any."
    if results.mode == "browse":
        if favourites_only:
            return f"No favourites here yet: mark sounds with {STAR_OFF} in the list, or show all sounds."
        return ("No sounds are catalogued yet" + (" — indexing is running." if indexing else ".")) \
            if not results.filtered else "No sounds here pass these filters."
    if results.indexed == 0:
        return "No sounds are indexed yet" + (" — indexing is running." if indexing else ".")
    if results.filtered:
        return (f"No sounds match {quoted(results.query)} with these filters. Loosen the duration, folder, "
                "format, sample rate or channels filter"
                + (", or show all sounds, not only favourites." if favourites_only else "."))
    return f"No sounds match {quoted(results.query)}."


def backwards_range(filters: SearchFilters | None) -> str:
    """What is backwards in `filters` ('the shortest duration is above the longest'), or '' when nothing is."""
    if filters is None:
        return ""
    if None not in (filters.min_duration, filters.max_duration) and filters.min_duration > filters.max_duration:
        return "the shortest duration is above the longest"
    if None not in (filters.min_sample_rate, filters.max_sample_rate) and \
            filters.min_sample_rate > filters.max_sample_rate:
        return "the lowest sample rate is above the highest"
    return ""


def quoted(query: str) -> str:
    """The query in curly quotes, as messages show it; an "exact phrase" query keeps its meaning without its
    own straight quotes (a trial read “"open fire"”)."""
    text = shown_query(query)
    if len(text) > 1 and text[0] == text[-1] == '"' and '"' not in text[1:-1]:
        text = text[1:-1]
    return f"“{text}”"


def shown_query(query: str, limit: int = QUERY_SHOWN_CHARS) -> str:
    """The query as messages quote it: one line, cut to `limit` characters (a pasted page of text would fill
    the results line's tooltip and the empty list)."""
    one_line = " ".join(query.split())
    return one_line if len(one_line) <= limit else one_line[: limit - 1].rstrip() + "…"


# ------------------------------------------------------------------------------------------ why it matched


def highlight(text: str, spans: Iterable[Span]) -> str:
    """`text` as rich text with the spans marked; everything else escaped (names may hold '<' or '&')."""
    merged: list[list[int]] = []
    for a, b in sorted((max(0, int(a)), min(len(text), int(b))) for a, b in spans):
        if a >= b:
            continue
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    out, pos = [], 0
    for a, b in merged:
        out.append(html.escape(text[pos:a]))
        out.append(f'<span style="{HIGHLIGHT_STYLE}">{html.escape(text[a:b])}</span>')
        pos = b
    out.append(html.escape(text[pos:]))
    return "".join(out)


def selected_markup(rich: str) -> str:
    """A cell's highlighted rich text as a selected row shows it."""
    return rich.replace(HIGHLIGHT_STYLE, SELECTED_HIGHLIGHT_STYLE)


def matched_terms(hit: Hit) -> list[str]:
    return list(hit.match.matched_terms) if hit.match is not None else []


def field_spans(hit: Hit, field: str, shown: str) -> list[Span]:
    """Where the query matched `shown`, the text the list shows for the hit's `field` (name, folder, tags): the
    service's spans, moved when `shown` holds the field's text at another place (a file name in a path) or is
    its end; none where the service gave none."""
    m = hit.match
    source, given = (m.fields.get(field), m.spans.get(field)) if m is not None else (None, None)
    if not source or not given:
        return []
    offset = 0 if source == shown else shown.rfind(source)
    if offset >= 0:
        return [(a + offset, b + offset) for a, b in given]
    tail = len(source) - len(shown)  # `shown` is the end of the source (a file name of a path)
    if tail > 0 and source.endswith(shown):
        return [(a - tail, b - tail) for a, b in given if a >= tail]
    return []


def tag_spans(hit: Hit, separator: str = ", ") -> list[Span]:
    """The service's spans in the hit's user tags, moved to `separator.join(hit.user_tags)`, the way the list
    shows them (the service joins them its own way). A tag edited away since the search keeps no span."""
    m = hit.match
    source, given = (m.fields.get("user_tags"), m.spans.get("user_tags")) if m is not None else (None, None)
    if not source or not given:
        return []
    moved: list[Span] = []
    src = dst = 0
    for tag in hit.user_tags:
        found = source.find(tag, src)
        if found >= 0:
            moved += [(a - found + dst, b - found + dst) for a, b in given if found <= a and b <= found + len(tag)]
            src = found + len(tag)
        dst += len(tag) + len(separator)
    return moved


def channel_scores(hit: Hit) -> tuple[float | None, float | None]:
    """(names score, sound score) of a hit; None where that channel did not score it ("find similar", or audio
    that indexing has not reached yet)."""
    if hit.match is None:
        return None, hit.score
    return hit.match.name_score, hit.match.sound_score if hit.match.heard else None


def why_html(hit: Hit, channels: Sequence[str] = ("names", "sound")) -> str:
    """One line saying why a result matched: the matched words and where, and the score of each channel that
    scored it (`channels`)."""
    names, sound = channel_scores(hit)
    names = names if "names" in channels else None
    sound = sound if "sound" in channels else None
    terms = matched_terms(hit)
    spans = hit.match.spans if hit.match is not None else {}
    where = [label for field, label in (("name", "name"), ("folder", "folder"), ("tags", "embedded tags"),
                                        ("user_tags", "tags"))
             if spans.get(field)]
    parts = []
    if hit.match is not None and hit.match.found_by == "like":
        parts.append(f"its name says nothing; it sounds like {html.escape(display_name(hit.match.like_path))}")
    elif hit.match is not None and hit.match.found_by == "category":
        parts.append(f"its name says nothing; its sound was heard as {html.escape(hit.match.category)}")
    elif terms:
        words = ", ".join(f'<span style="{HIGHLIGHT_STYLE}">{html.escape(t)}</span>' for t in terms)
        parts.append(f"matched {words}" + (f" in its {' and '.join(where)}" if where else ""))
    elif names and names >= CLOSE_NAMES:  # no word in common, but the sentence encoder finds the name close
        parts.append("no word matched; its name means something close")
    elif sound is not None:
        parts.append("its name says nothing; matched by its sound" if hit.match is not None
                     and hit.match.found_by == "sound" and names is not None and names <= 0 else "matched by its sound")
    elif names:
        parts.append("no word matched; its name is only loosely related")
    if names is not None:
        parts.append(f"names {names:.2f}")
    if sound is not None:
        parts.append(f"sound {sound:.2f}")
    elif "sound" in channels and hit.match is not None and not hit.match.heard:
        parts.append("sound not indexed yet")
    return "Why: " + " · ".join(parts) if parts else ""
