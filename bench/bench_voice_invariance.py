"""Voice invariance of the words model (issue 41): is the same word in another voice closer than another word in
the same voice?

For every token a (word w, voice v) of a set, every pair (p, n) with p a token of w in another voice and n a
token of another word in v counts once; the rate is the share of pairs with cos(a, p) > cos(a, n) (ties count
half). Tokens are embedded as the Words tab embeds a spoken word (`WordSpace.embed_audio`: resampled with the
model's resampler, trimmed as in training). Sets:

- held-out real: kajongg, letters, numbers, numbers with saytime's telephone voice, and Mandarin syllables
  (`words.csv` under EARSHOT_HELDOUT_SETS, default /work/data/heldout-sets; built as docs/speech-eval.md says)
  — the sets `earshot eval words` reports; Mandarin is outside an English words model's domain, shown apart;
- held-out synthetic: espeak-ng's held-out voices of training/espeak_corpus.py (`DEFAULT_HELDOUT_VOICES`), none
  in words-default's training data, saying WORDS;
- development (to choose a fix on, never the held-out ones): FSDD's test split without theo (seen voices, other
  recordings) and four espeak-ng voices words-default never heard (`DEV_VOICES`) saying WORDS.

`voice_mean`: each voice's mean embedding removed and the development sets' mean over all voices put back
(then unit length again), the per-recording-session normalisation the issue suggests; AP (same-different over
all pairs) is given beside the rate for both.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "resources" / "models" / "words-default.safetensors"
HELDOUT = Path(os.environ.get("EARSHOT_HELDOUT_SETS", "/work/data/heldout-sets"))
FSDD = ROOT.parent / "shared" / "data" / "fsdd"
# set name -> its folders under HELDOUT (saytime's one voice is scored with the numbers set's two)
REAL_SETS = {"kajongg": ("kajongg",), "letters": ("letters",), "numbers": ("numbers",),
             "numbers + saytime": ("numbers", "saytime"), "mandarin (another language)": ("mandarin",)}
DEV_VOICES = ("en-us+f3", "en-gb-scotland+m1", "en-gb-x-rp+f5", "en-us-nyc+m4")
WORDS = tuple("seven heaven eleven even never seventy level oven given raven people morning window garden yellow "
              "table river music number paper coffee doctor market summer winter chicken pocket silver monkey "
              "button rabbit castle letter finger".split())

Tokens = tuple[np.ndarray, list[str], list[str]]  # (N, D) unit vectors, words, voices


def invariance_rate(emb: np.ndarray, words: list[str], voices: list[str]) -> tuple[float, int]:
    """(share of (same word, other voice) vs (other word, same voice) comparisons won, comparisons)."""
    w, v = np.array(words), np.array(voices)
    sims = emb @ emb.T
    won = total = 0.0
    for a in range(len(emb)):
        pos = sims[a][(w == w[a]) & (v != v[a])]
        neg = sims[a][(w != w[a]) & (v == v[a])]
        if len(pos) and len(neg):
            diff = pos[:, None] - neg[None, :]
            won += float((diff > 0).sum() + 0.5 * (diff == 0).sum())
            total += diff.size
    return (won / total if total else float("nan")), int(total)


def voice_mean_removed(emb: np.ndarray, voices: list[str], centre: np.ndarray) -> np.ndarray:
    """Each voice's mean replaced by `centre` (the development mean), rows back to unit length."""
    out = emb.copy()
    v = np.array(voices)
    for voice in set(voices):
        out[v == voice] += centre - emb[v == voice].mean(axis=0)
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def embed(space, items: list[tuple[np.ndarray, int, str, str]]) -> Tokens:  # noqa: ANN001
    """(audio, rate, word, voice) items -> unit vectors (items that are no word, e.g. silent, are left out)."""
    from app.services.words.word_space import WordAudioError

    vecs, words, voices = [], [], []
    for audio, sr, word, voice in items:
        try:
            vecs.append(space.embed_audio(audio, sr))
        except WordAudioError:
            continue
        words.append(word)
        voices.append(voice)
    return np.stack(vecs), words, voices


def table_items(folders: Sequence[Path], sel: Any) -> list[tuple[np.ndarray, int, str, str]]:  # noqa: ANN401
    """(audio, rate, word, voice) of the word tokens `earshot eval words` reads from `folders` with `sel`
    (a training.speech_eval.Selection): the same tables, rows and word grouping."""
    from core.audio import decode
    from training.speech_eval import list_eval_clips

    out = []
    for clip in list_eval_clips(folders, sel)[0]:
        d = decode(clip.path, sample_rate=16000)
        out.append((d.audio, d.sample_rate, clip.word, clip.speaker))
    return out


def espeak_items(voices: tuple[str, ...]) -> list[tuple[np.ndarray, int, str, str]]:
    from training.espeak_corpus import synthesise

    return [(synthesise(w, v, 160, 50), 16000, w, f"espeak-{v}") for v in voices for w in WORDS]


def sets() -> dict[str, Callable[[], list[tuple[np.ndarray, int, str, str]]]]:
    from training.espeak_corpus import DEFAULT_HELDOUT_VOICES, espeak_available
    from training.speech_eval import Selection

    out: dict[str, Callable[[], list[tuple[np.ndarray, int, str, str]]]] = {}
    if FSDD.is_dir():
        out["dev: FSDD test without theo"] = lambda: table_items([FSDD], Selection("test", exclude_speakers=("theo",)))
    if espeak_available():
        out["dev: espeak-ng dev voices"] = lambda: espeak_items(DEV_VOICES)
        out["held-out: espeak-ng held-out voices"] = lambda: espeak_items(DEFAULT_HELDOUT_VOICES)
    for name, folders in REAL_SETS.items():
        if all((HELDOUT / f / "words.csv").is_file() for f in folders):
            out[f"held-out: {name}"] = lambda folders=folders: table_items([HELDOUT / f for f in folders],
                                                                           Selection("all"))
    return out


def run() -> dict:
    import torch

    from app.services.words.word_space import WordSpace
    from bench.machine import describe
    from training.metrics import word_discrimination_ap

    space = WordSpace.from_checkpoint(MODEL)
    tokens = {name: embed(space, make()) for name, make in sets().items()}
    dev = [e for name, (e, _, _) in tokens.items() if name.startswith("dev")]
    centre = np.concatenate(dev).mean(axis=0) if dev else np.zeros(space.dim)
    result: dict = {"machine": describe(peak=False), "threads": torch.get_num_threads(), "model": MODEL.name}
    for name, (emb, words, voices) in tokens.items():
        row: dict = {"tokens": len(words), "words": len(set(words)), "voices": len(set(voices))}
        for how, e in (("as_is", emb), ("voice_mean", voice_mean_removed(emb, voices, centre))):
            rate, pairs = invariance_rate(e, words, voices)
            row[how] = {"rate": round(rate, 4), "ap": round(word_discrimination_ap(e, words), 4)}
            row["comparisons"] = pairs
        result[name] = row
    return result
