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
