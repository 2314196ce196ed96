"""How the app says a length of time: a sound's length (the Search tab) and how long a run took (the Train tab)."""

from __future__ import annotations


def format_duration(seconds: float, rough: bool = False) -> str:
    """A sound's length to a tenth of a second ("26 ms", "2.4 s", "1:15", "1:02:03"); `rough`: how long work
    took, in the one unit that matters ("40 s", "27 min", "1.5 h")."""
    if rough:
        if seconds < 90:
            return f"{seconds:.0f} s"
        return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"
    if seconds < 0.1:  # a click or a blip: "0.0 s" would say it has no length
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def part_ends(a: float, b: float) -> tuple[str, str, str]:
    """The two ends of a selected part as the preview says them, both to the tenth and in one style, and their
    unit: ("1.0", "3.0", " s") below a minute, ("2:23.8", "2:27.8", "") past it (format_duration's whole seconds
    past a minute hid a 4-s part's edges)."""
    if b < 60:
        return f"{a:.1f}", f"{b:.1f}", " s"
    return clock(a), clock(b), ""


def part_text(a: float, b: float) -> str:
    """A selected part's span and length: "1.0 – 3.0 s (2.0 s)", "2:23.8 – 2:27.8 (4.0 s)"."""
    x, y, unit = part_ends(a, b)
    return f"{x} – {y}{unit} ({format_duration(b - a)})"


def part_file_label(a: float, b: float) -> str:
    """The span of `part_text` as a file name may hold it (no ':', which Windows, macOS and FAT drives refuse):
    "1.0-3.0 s", "2m23.8s-2m27.8s", "1h02m03.4s-1h02m07.0s": the same times, to the tenth."""
    x, y, unit = part_ends(a, b)
    if unit:
        return f"{x}-{y}{unit}"

    def safe(time: str) -> str:
        *hm, s = time.split(":")
        return "".join(f"{v}{u}" for v, u in zip(hm, ("h", "m")[-len(hm):], strict=True)) + f"{s}s"

    return f"{safe(x)}-{safe(y)}"


def clock(seconds: float) -> str:
    """A time in the file to the tenth: "0:59.1", "10:05.0", "1:02:03.4"."""
    tenths = int(round(seconds * 10))
    m, s = divmod(tenths / 10, 60)
    h, m = divmod(int(m), 60)
    return f"{h}:{m:02d}:{s:04.1f}" if h else f"{m}:{s:04.1f}"
