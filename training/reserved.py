"""The Debian packages held out to measure Earshot on unseen sources: never used to build training data."""

from __future__ import annotations

RESERVED_PREFIXES = ("tuxpaint-stamps", "ktuberling", "klettres", "asterisk-core-sounds-en", "triplea")
# Earshot's own held-out speech (training/speech_corpus.py, the splits "heldout-NAME" of its HELDOUT_SETS): real
# voices the speech models are measured on, so they must not reach a speech model as training data or noise either
SPEECH_EVAL_PACKAGES = ("kajongg", "gentle", "qabcs-data", "scid-data", "csmash-data", "saytime", "gcin-voice")
# the packages of the search libraries (bench/data/search_libraries/*/library.json): unseen by every model so far,
# some only because the corpus's download limit kept them out; never corpus material (a test keeps this in step)
SEARCH_BENCH_PACKAGES = ("berusky2-data", "crossfire-client", "flare-game", "flightgear-data-base", "micropolis-data",
                         "minuet-data", "overgod-data", "torcs-data", "tuxpaint-plugins-default")


def is_reserved(package: str) -> bool:
    """True for the evaluation-only packages (any case), which must never enter a corpus."""
    return package.lower().startswith(RESERVED_PREFIXES)


def is_speech_eval(package: str) -> bool:
    """True for the packages whose voices evaluate the speech models (and so are never their noise)."""
    return package.lower() in SPEECH_EVAL_PACKAGES


def is_search_bench(package: str) -> bool:
    """True for a package a search library is made of (bench/data/search_libraries)."""
    return package.lower() in SEARCH_BENCH_PACKAGES


def is_held_out(package: str) -> bool:
    """True for every package no training may read: reserved for evaluation, or Earshot's held-out speech."""
    return is_reserved(package) or is_speech_eval(package)


def names_held_out_package(parts: tuple[str, ...]) -> bool:
    """True when one of a path's folders is named after a held-out package (corpora laid out by package, like
    the sfx corpus's audio/<package>/)."""
    return any(is_held_out(p) for p in parts)


def check_not_reserved(package: str) -> str:
    """`package` unless it is reserved for evaluation (ValueError)."""
    if is_reserved(package):
        raise ValueError(f"package {package!r} is reserved for evaluation and is never used to build training data")
    return package
