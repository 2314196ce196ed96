"""The Debian packages held out to measure Earshot on unseen sources: never used to build training data."""

from __future__ import annotations

RESERVED_PREFIXES = ("tuxpaint-stamps", "ktuberling", "klettres", "asterisk-core-sounds-en")


def is_reserved(package: str) -> bool:
    """True for the evaluation-only packages (any case), which must never enter a corpus."""
    return package.lower().startswith(RESERVED_PREFIXES)


def check_not_reserved(package: str) -> str:
    """`package` unless it is reserved for evaluation (ValueError)."""
    if is_reserved(package):
        raise ValueError(f"package {package!r} is reserved for evaluation and is never used to build training data")
    return package
