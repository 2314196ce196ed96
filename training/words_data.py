"""The words trainer's data: spoken-word folders -> checked, trimmed, featurised word tokens (`load_words`).

A folder holds `words.csv` (`path,word,speaker[,split][,synthetic][,phonemes]`) or FSDD's `metadata.csv`. Each
file is decoded to 16 kHz mono, trimmed of leading/trailing silence and featurised once; features are cached in
memory and on disk, keyed by a hash of the file's bytes and the feature settings. Bad input is reported and
skipped (`ProblemLog`), never fatal. A folder without a dev split gives a deterministic 10% of its training
rows to dev.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import os
import string
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core import audio as audio_path
from core.audio import TrimConfig
from core.frontend_builder import words_frontend_dict
from models.framing import SAMPLE_RATE
from models.phonemes import (
    DIGIT_WORDS,
    WordNotInDictionaryError,
    default_lexicon,
    encode,
    normalise_word,
    parse_phoneme_string,
)
from training.reserved import is_reserved

Job = Generator[dict[str, Any], None, Any]

DEV_SPLITS = ("dev", "val", "valid", "validation")
_EXAMPLES = 5  # names listed per problem in reports



@dataclass
class WordToken:
    feats: np.ndarray  # (T, 39) float32
    word: str  # normalised spelling: the identity for metrics and the loss
    speaker: str
    split: str  # train | dev | test... (after the dev hold-out)
    path: str
    synthetic: bool = False
    wave: np.ndarray | None = None  # (N,) int16 trimmed 16-kHz audio, kept only for augmentation


@dataclass
class WordSet:
    tokens: list[WordToken]
    phonemes: dict[str, list[int]]  # word -> phoneme ids
    report: dict[str, Any]

    def subset(self, splits: Iterable[str]) -> list[WordToken]:
        keep = set(splits)
        return [t for t in self.tokens if t.split in keep]


class ProblemLog:
    """Counts and first few examples of each kind of skipped or altered input."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.examples: dict[str, list[str]] = {}

    def add(self, kind: str, example: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if len(self.examples.setdefault(kind, [])) < _EXAMPLES:
            self.examples[kind].append(example)

    def summary(self) -> dict[str, Any]:
        return {k: {"count": n, "examples": self.examples.get(k, [])} for k, n in sorted(self.counts.items())}

    def message(self) -> str:
        return "; ".join(f"{n} {k.replace('_', ' ')} (e.g. {', '.join(self.examples[k][:3])})"
                         for k, n in sorted(self.counts.items()))


def find_table(folder: Path) -> Path:
    for name in ("words.csv", "metadata.csv"):
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(f"{folder}: no words.csv (columns path,word,speaker[,split]) or metadata.csv")


def has_split_column(folder: Path) -> bool:
    with open(find_table(folder), newline="", encoding="utf-8", errors="replace") as f:
        return "split" in (csv.DictReader(f).fieldnames or [])


def read_table(folder: Path, problems: ProblemLog) -> list[dict[str, str]]:
    """Rows of a folder's words.csv with at least a path and a word; others are reported."""
    table = find_table(folder)
    with open(table, newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.DictReader(f)
        missing = {"path", "word"} - set(reader.fieldnames or [])
        if missing:
            raise ValueError(f"{table}: missing column(s) {', '.join(sorted(missing))}; "
                             "expected path,word,speaker[,split]")
        rows = []
        for i, row in enumerate(reader, start=2):
            path, word = (row.get("path") or "").strip(), (row.get("word") or "").strip()
            if not path or not word:
                problems.add("bad_rows", f"{table.name}:{i}")
                continue
            rows.append({k: (v or "").strip() for k, v in row.items() if k is not None})
    return rows


def decode_16k(data: bytes, resampler: str = audio_path.SOXR) -> np.ndarray:
    """Audio file bytes -> float32 mono at 16 kHz (the one audio path, `core.audio`).

    `resampler` is the model's (`audio_path.resampler_from_training`): soxr for new training.
    """
    return audio_path.decode_bytes(data, SAMPLE_RATE, resampler=resampler).audio


def trim_silence(wave: np.ndarray, trim: TrimConfig | None = None) -> np.ndarray | None:
    """Cut leading/trailing silence of a 16-kHz wave; None if it is all silence (`core.audio`)."""
    return audio_path.trim_silence(wave, trim, SAMPLE_RATE)


class FeatureCache:
    """MFCC features keyed by a hash of the file bytes and the feature settings; memory + optional disk."""

    def __init__(self, frontend: torch.nn.Module, trim: TrimConfig, folder: Path | None,
                 resampler: str = audio_path.SOXR) -> None:
        self.frontend, self.trim, self.folder, self.resampler = frontend, trim, folder, resampler
        # everything that changes the features is in the key; the trailing 2 is the key's version
        settings = json.dumps([words_frontend_dict(frontend), dataclasses.asdict(trim), resampler, 2], sort_keys=True)
        self.salt = hashlib.sha1(settings.encode()).hexdigest()[:12]
        self.memory: dict[str, np.ndarray] = {}

    def wave(self, path: Path) -> np.ndarray | None:
        """The trimmed 16-kHz wave (N,) float32 the features are computed from, or None if it is silent."""
        data = path.read_bytes()
        if not data:
            raise ValueError("empty file")
        return trim_silence(decode_16k(data, self.resampler), self.trim)

    def features(self, path: Path) -> np.ndarray | None:
        """(T, D) features of a file, or None if it is silent. Raises for unreadable files."""
        data = path.read_bytes()
        if not data:
            raise ValueError("empty file")
        key = hashlib.sha1(data + self.salt.encode()).hexdigest()
        if key in self.memory:
            return self.memory[key]
        disk = self.folder / key[:2] / f"{key}.npy" if self.folder else None
        if disk is not None and disk.is_file():
            try:
                feats = np.load(disk, allow_pickle=False)
                self.memory[key] = feats
                return feats
            except (OSError, ValueError):
                pass  # damaged cache entry: recompute
        wave = trim_silence(decode_16k(data, self.resampler), self.trim)
        if wave is None:
            return None
        with torch.no_grad():
            feats = self.frontend(torch.from_numpy(wave)).numpy().astype(np.float32)  # (T, D)
        self.memory[key] = feats
        if disk is not None:
            disk.parent.mkdir(parents=True, exist_ok=True)
            tmp = disk.with_suffix(f".{os.getpid()}.tmp.npy")
            np.save(tmp, feats, allow_pickle=False)
            os.replace(tmp, disk)
        return feats


def word_key(word: str) -> str:
    """The identity of a written word for grouping and metrics: "Seven!", "seven" and "7" are one word."""
    w = normalise_word(word)
    w = DIGIT_WORDS.get(w, w)
    return w.strip(string.punctuation + "\u00bf\u00a1\u2026\u201c\u201d\u00ab\u00bb") or w


def _split_of(row: dict[str, str], has_dev: bool, dev_fraction: float) -> str:
    split = row.get("split", "").lower() or "train"
    if split in DEV_SPLITS:
        return "dev"
    if split == "train" and not has_dev:
        # deterministic hold-out: the same rows go to dev on every run and machine
        h = int(hashlib.sha1(row["path"].encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        return "dev" if h < dev_fraction else "train"
    return split


def load_words(
    folders: Sequence[str | os.PathLike[str]],
    frontend: torch.nn.Module,
    splits: Iterable[str] | None = None,
    trim: TrimConfig | None = None,
    max_frames: int = 300,
    cache_dir: Path | None = None,
    dev_fraction: float = 0.1,
    max_items: int | None = None,
    seed: int = 0,
    resampler: str = audio_path.SOXR,
    keep_row: Callable[[dict[str, str]], bool] | None = None,
    exclude_speakers: Sequence[str] = (),
    keep_waves: Iterable[str] = (),
    unspelled: bool = False,
) -> Job:
    """Job: read, trim, featurise and check the spoken words of `folders`; returns a `WordSet`.

    `splits` keeps only rows of those splits (after the dev hold-out); `keep_row` (a CSV row -> keep?) more
    filtering, e.g. by speaker; `max_items` keeps a seeded random subset of the rows before decoding;
    `resampler` is the model's (soxr for new training); rows of `exclude_speakers` and rows whose `source`
    package is reserved for evaluation are left out; tokens of the splits in `keep_waves` also hold their
    trimmed audio (for augmentation). A word without a pronunciation (not in CMUdict, no `phonemes` column) is
    left out, unless `unspelled`: then its tokens are kept without one (another language's words, for the
    acoustic view alone), and `WordSet.phonemes` lacks it.
    """
    if not folders:
        raise ValueError("no data folder given")
    problems = ProblemLog()
    lexicon = default_lexicon()
    cache = FeatureCache(frontend, trim or TrimConfig(), cache_dir, resampler)
    keep = set(splits) if splits is not None else None
    excluded = set(exclude_speakers)
    rows: list[tuple[Path, dict[str, str]]] = []
    for folder in map(Path, folders):
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder}: no such data folder")
        table = read_table(folder, problems)
        has_dev = any(r.get("split", "").lower() in DEV_SPLITS for r in table)
        for r in table:
            r["split"] = _split_of(r, has_dev, dev_fraction)
            if r.get("speaker", "") in excluded or is_reserved(r.get("source", "")):
                continue
            if (keep is None or r["split"] in keep) and (keep_row is None or keep_row(r)):
                rows.append((folder, r))
    if keep is not None and not rows:
        raise ValueError(f"no rows in split(s) {', '.join(sorted(keep))} in {', '.join(map(str, folders))}")
    if max_items is not None and len(rows) > max_items:
        pick = np.random.default_rng(seed).choice(len(rows), max_items, replace=False)
        rows = [rows[i] for i in sorted(pick)]
    tokens: list[WordToken] = []
    phonemes: dict[str, list[int]] = {}
    unknown: set[str] = set()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one short file at a time: extra threads only spin
    try:
        yield from _featurise(rows, cache, lexicon, max_frames, problems, tokens, phonemes, unknown, set(keep_waves),
                              unspelled)
    finally:
        torch.set_num_threads(threads)
    report = {
        "rows": len(rows), "tokens": len(tokens), "words": len({t.word for t in tokens}),
        "speakers": len({t.speaker for t in tokens}), "synthetic": sum(t.synthetic for t in tokens),
        "splits": {s: sum(t.split == s for t in tokens) for s in sorted({t.split for t in tokens})},
        "problems": problems.summary(),
    }  # fmt: skip
    if problems.counts:
        yield {"step": len(rows), "total": len(rows), "message": f"skipped/altered: {problems.message()}"}
    return WordSet([t for t in tokens if unspelled or t.word in phonemes], phonemes, report)


def _featurise(
    rows: Sequence[tuple[Path, dict[str, str]]], cache: FeatureCache, lexicon: Any, max_frames: int,  # noqa: ANN401
    problems: ProblemLog, tokens: list[WordToken], phonemes: dict[str, list[int]], unknown: set[str],
    wave_splits: frozenset[str] | set[str] = frozenset(), unspelled: bool = False,
) -> Generator[dict[str, Any], None, None]:  # fmt: skip
    """Look up, read and featurise `rows` into `tokens` (appending), reporting problems."""
    for i, (folder, row) in enumerate(rows):
        if i % 500 == 0:
            yield {"step": i, "total": len(rows), "message": f"reading {folder.name}"}
        word = word_key(row["word"])
        if word not in phonemes and word not in unknown:
            try:
                phones = parse_phoneme_string(row["phonemes"]) if row.get("phonemes") else \
                    lexicon.phonemes(row["word"])
                phonemes[word] = encode(phones)
            except (WordNotInDictionaryError, ValueError):
                unknown.add(word)
        if word in unknown and not unspelled:
            problems.add("not_in_dictionary", repr(row["word"]))
            continue
        path = folder / row["path"]
        try:
            feats = cache.features(path)
        except (OSError, RuntimeError, ValueError) as e:  # AudioError is a ValueError
            problems.add("unreadable", f"{row['path']} ({str(e)[:60]})")
            continue
        if feats is None:
            problems.add("silent", row["path"])
            continue
        if len(feats) > max_frames:
            problems.add("truncated", f"{row['path']} ({len(feats)} frames)")
            feats = feats[:max_frames]
        synthetic = row.get("synthetic", "").lower() in ("1", "true", "yes")
        wave = None
        if row["split"] in wave_splits:
            trimmed = cache.wave(path)  # not silent: its features exist
            wave = None if trimmed is None else np.round(np.clip(trimmed, -1, 1) * 32767).astype(np.int16)
        tokens.append(WordToken(feats, word, row.get("speaker") or "?", row["split"], row["path"], synthetic, wave))
