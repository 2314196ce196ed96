"""Evaluation of speech units and acoustic word embeddings: `earshot eval units|words` (their arguments and
per-speaker table: training/speech_eval_cli.py).

Both read FSDD, a words folder or the speech corpus (training/speech_corpus.py), one split and chosen speakers.
Units, on the checkpoint's own front end and resampler: word-level ABX (`training.abx`) within and across
speakers against the same ABX on raw MFCC+Δ+ΔΔ, bitrate, resynthesis log-spectral distance. Words: same-different
AP, cross-view AP and the MFCC+DTW baseline on the same pairs (`training.metrics`). Every score also per
speaker; a score that cannot be formed is null and `notes` says why. What each number means and where every
model stands: docs/speech-eval.md.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core import audio as audio_path
from core import loudness
from core.frontend_builder import units_frontend, words_frontend
from core.voices import fitting_voice, log_spectral_distance, lsd_bins, magnitude_floor
from training import abx
from training.speech_eval_cli import per_speaker_table as per_speaker_table  # tests/test_speech_eval.py reads it here

Job = Generator[dict[str, Any], None, Any]

WORD_TABLES = ("words.csv", "metadata.csv")
UTTERANCE_TABLE = "utterances.csv"


# ---------------------------------------------------------------------------------------------- data


@dataclass
class EvalClip:
    path: Path
    speaker: str
    word: str | None = None  # None: a whole utterance (bitrate and resynthesis only)
    split: str | None = None
    synthetic: bool = False


@dataclass
class Selection:
    """Which rows of the data tables are evaluated."""

    split: str | None = "test"  # None or "all": every row; "a,b": the rows of either split
    speakers: Sequence[str] = ()  # empty: every speaker
    exclude_speakers: Sequence[str] = ()

    @property
    def splits(self) -> tuple[str, ...]:
        """The splits named ("a, b" -> ("a", "b")); empty for every row."""
        return () if self.split in (None, "all") else split_parts(self.split)

    def keeps(self, speaker: str, split: str | None) -> bool:
        if self.splits and split is not None and split not in self.splits:
            return False
        if self.speakers and speaker not in self.speakers:
            return False
        return speaker not in self.exclude_speakers

    def keeps_row(self, row: dict[str, str]) -> bool:
        """For training.words_train.load_words: speakers only (it applies the split itself)."""
        return Selection(None, self.speakers, self.exclude_speakers).keeps(row.get("speaker") or "?", None)


def split_parts(split: str) -> tuple[str, ...]:
    """`--split a,b` -> ("a", "b"): spaces around a name and empty names dropped."""
    return tuple(p.strip() for p in split.split(",") if p.strip())


def check_splits_found(named: Sequence[str], found: set[str | None], data: Sequence[str | os.PathLike[str]]) -> None:
    """A split named in a list that matched no row is a typo, not an empty part of the set: say so."""
    missing = [p for p in named if p not in found]
    if len(named) > 1 and missing and None not in found:
        raise ValueError(f"no rows in split(s) {', '.join(missing)}; {available_splits(data)}")


def _synthetic(row: dict[str, str]) -> bool:
    if (row.get("synthetic") or "").strip():
        return row["synthetic"].strip().lower() in ("1", "true", "yes")
    real = (row.get("real") or "").strip().lower()
    return real in ("0", "false", "no")


def _read_rows(table: Path, word_column: bool, sel: Selection) -> tuple[list[EvalClip], bool]:
    """Rows of one CSV table kept by `sel`, and whether the table has a split column. Words are grouped as the
    words model groups them (`word_key`: "Seven!", "seven" and "7" are one word)."""
    from training.words_data import word_key

    clips: list[EvalClip] = []
    with open(table, newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.DictReader(f)
        columns = set(reader.fieldnames or [])
        need = {"path", "word"} if word_column else {"path"}
        if need - columns:
            raise ValueError(f"{table}: missing column(s) {', '.join(sorted(need - columns))} "
                             f"(columns: {', '.join(sorted(columns)) or 'none'})")
        for row in reader:
            path = (row.get("path") or "").strip()
            word = ((row.get("word") or "").strip() or None) if word_column else None
            if not path or (word_column and word is None):
                continue
            speaker = (row.get("speaker") or "").strip() or "unknown"
            split = (row.get("split") or "").strip() or None
            if sel.keeps(speaker, split):
                p = Path(path)
                clips.append(EvalClip(p if p.is_absolute() else table.parent / p, speaker,
                                      word_key(word) if word else None, split, _synthetic(row)))
    return clips, "split" in columns


def list_eval_clips(data_dirs: Sequence[str | os.PathLike[str]], sel: Selection
                    ) -> tuple[list[EvalClip], list[EvalClip], bool]:
    """(word tokens, utterances without a word label, whether any table has a split column) of the folders.

    Word tokens come from words.csv or metadata.csv; utterances from utterances.csv (rows whose file is also
    a word token are not repeated); a folder without tables gives every audio file as an utterance."""

    words: list[EvalClip] = []
    utterances: list[EvalClip] = []
    has_split = False
    for d in data_dirs:
        root = Path(d)
        if not root.is_dir():
            raise FileNotFoundError(f"{root}: no such data folder")
        word_table = next((root / n for n in WORD_TABLES if (root / n).is_file()), None)
        utt_table = root / UTTERANCE_TABLE if (root / UTTERANCE_TABLE).is_file() else None
        if word_table is None and utt_table is None:
            found = sorted(p for p in root.rglob("*")
                           if p.suffix.lower() in audio_path.SUPPORTED_EXTENSIONS and p.is_file())
            utterances += [EvalClip(p, "unknown") for p in found if sel.keeps("unknown", None)]
            continue
        if word_table is not None:
            rows, split_col = _read_rows(word_table, True, sel)
            words += rows
            has_split |= split_col
        if utt_table is not None:
            rows, split_col = _read_rows(utt_table, False, sel)
            utterances += rows
            has_split |= split_col
    seen = {c.path for c in words}
    utterances = [c for c in utterances if c.path not in seen]
    return words, utterances, has_split


# ---------------------------------------------------------------------------------------------- units


def envelope_correlation(pred: torch.Tensor, target: torch.Tensor, max_bin: int, dynamic_range_db: float = 60.0
                         ) -> float:
    """Pearson correlation over frames of the two energy envelopes (dB over bins 0..max_bin, floored as in
    `log_spectral_distance`): near 1 when the resynthesis rises and falls with the recording's syllables, near 0
    or below for a featureless smear, which the LSD (an average spectral shape) barely sees. A flat envelope
    follows nothing: 0."""
    floor = magnitude_floor(target, max_bin, dynamic_range_db) ** 2  # on energies (magnitude squared)
    p = 10 * torch.log10(pred[:, :max_bin].float().square().sum(dim=1).clamp(min=floor))  # (T,)
    t = 10 * torch.log10(target[:, :max_bin].float().square().sum(dim=1).clamp(min=floor))  # (T,)
    if len(p) < 2 or float(p.std()) < 1e-3 or float(t.std()) < 1e-3:  # flat to a thousandth of a dB
        return 0.0
    p, t = p.double() - p.double().mean(), t.double() - t.double().mean()
    return float((p * t).sum() / (p.norm() * t.norm()))


def _abx_block(result: dict[str, Any], per_speaker: dict[str, dict[str, Any]], notes: list[str], prefix: str,
               items: list[np.ndarray], words: list[str], speakers: list[str], max_per_cell: int | None,
               seed: int) -> None:
    """ABX within and across of one representation into `result` (`{prefix}abx_{mode}`) and per speaker."""
    for mode in ("within", "across"):
        score = abx.abx_scores(items, words, speakers, mode, max_per_cell, seed)
        result[f"{prefix}abx_{mode}"] = score.error
        result[f"{prefix}abx_{mode}_triplets"] = score.triplets
        for s, row in per_speaker.items():  # a speaker without word tokens: no score (NaN), same columns
            row[f"{prefix}abx_{mode}"] = score.per_speaker.get(s, float("nan"))
        if score.reason and not prefix:  # the units' and the baseline's reasons are the same
            notes.append(f"abx_{mode}: {score.reason}")


@dataclass
class _UnitsPass:
    """What one pass over the clips gathers: ABX items (clips with a word), unit sequences and durations per
    speaker (bitrate), a few (units, magnitude) pairs per speaker (resynthesis), what could not be read."""

    unit_items: list[np.ndarray] = field(default_factory=list)
    mfcc_items: list[np.ndarray] = field(default_factory=list)
    words: list[str] = field(default_factory=list)
    speakers: list[str] = field(default_factory=list)
    seqs: dict[str, list[np.ndarray]] = field(default_factory=dict)  # speaker -> unit sequences
    secs: dict[str, list[float]] = field(default_factory=dict)
    by_speaker: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = field(default_factory=dict)  # [(codes, mag)]
    skipped: dict[str, str] = field(default_factory=dict)
    synthetic: int = 0


def _encode_clips(model: Any, clips: Sequence[EvalClip], representation: str, resynth_items: int,  # noqa: ANN401
                  resampler: str, features: dict[str, Any] | None) -> Generator[dict[str, Any], None, _UnitsPass]:
    """Job: every clip's units on the model's front end, and its MFCCs for the baseline."""
    from models.frontends import MFCC, LinearSpectrogram
    from training.units_data import (
        SAMPLE_RATE,
        AudioProblem,
        pad_for_frontend,
        read_audio,
        wave_features,
    )

    mfcc, spec = MFCC(), LinearSpectrogram()  # the baseline's features: the same whatever the model
    frontend = units_frontend(features) if features and features.get("kind") else mfcc  # MFCC or + speech_embedding
    same_frontend = getattr(frontend, "config", None) == mfcc.config and type(frontend) is type(mfcc)
    codebook = model.vqvae.codebook.embedding.detach().cpu().numpy()
    K = model.config.vqvae.codebook_size
    got = _UnitsPass()
    for i, clip in enumerate(clips):
        try:
            wave, _ = read_audio(clip.path, resampler)
        except AudioProblem as e:
            got.skipped[str(clip.path)] = str(e)
            continue
        with torch.inference_mode():
            feats = wave_features(wave, mfcc)  # (T, 39)
            model_feats = feats if same_frontend else wave_features(wave, frontend)
            codes = model.vqvae.encode(model_feats)  # (U,)
        got.seqs.setdefault(clip.speaker, []).append(codes.numpy())
        got.secs.setdefault(clip.speaker, []).append(len(wave) / SAMPLE_RATE)
        got.synthetic += clip.synthetic
        if clip.word is not None:
            got.unit_items.append(abx.units_to_items(codes.numpy(), codebook if representation == "codebook"
                                                     else None, K))
            got.mfcc_items.append(feats.double().numpy())
            got.words.append(clip.word)
            got.speakers.append(clip.speaker)
        group = got.by_speaker.setdefault(clip.speaker, [])
        if len(group) < resynth_items:
            with torch.inference_mode():
                group.append((codes, spec(pad_for_frontend(wave))))
        if (i + 1) % 100 == 0 or i + 1 == len(clips):
            yield {"step": i + 1, "total": len(clips), "message": f"encoding {i + 1}/{len(clips)}"}
    return got


def evaluate_units(
    model: Any,  # noqa: ANN401 - models.units.UnitsModel
    clips: Sequence[EvalClip],
    max_per_cell: int | None = None,
    representation: str = "codebook",
    resynth_items: int = 20,
    baseline: bool = True,
    seed: int = 0,
    resampler: str = audio_path.SOXR,
    features: dict[str, Any] | None = None,
) -> Job:
    """Job: ABX (within / across speakers) of the model's units and of raw MFCCs, bitrate, resynthesis
    distance, overall and per speaker. Clips with a word are ABX items; all clips count for bitrate and
    resynthesis. `resampler`: the model's (`audio_path.resampler_from_training`); `features`: its front end
    (checkpoint metadata; default MFCC)."""
    if representation not in ("codebook", "onehot"):
        raise ValueError(f"representation must be 'codebook' or 'onehot', got {representation!r}")
    model.eval()
    got = yield from _encode_clips(model, clips, representation, resynth_items, resampler, features)
    seqs, secs, words, speakers = got.seqs, got.secs, got.words, got.speakers
    if not seqs:
        raise ValueError(f"none of the {len(clips)} recordings could be read; e.g. {next(iter(got.skipped.items()))}")
    all_seqs = [s for v in seqs.values() for s in v]
    all_secs = [d for v in secs.values() for d in v]
    notes: list[str] = []
    per_speaker: dict[str, dict[str, Any]] = {s: {"items": speakers.count(s), "utterances": len(seqs[s])}
                                              for s in sorted(seqs)}
    result: dict[str, Any] = {
        "items": len(got.unit_items), "words": len(set(words)), "utterances": len(all_seqs),
        "synthetic_utterances": got.synthetic, "skipped": len(got.skipped),
        "skipped_examples": [f"{p}: {why}" for p, why in list(got.skipped.items())[:5]],
        "speakers": sorted(set(speakers) or seqs),
        "representation": "codebook vectors of the units (angular distance)" if representation == "codebook"
        else "one-hot units (angular distance)",
    }  # fmt: skip
    yield {"step": len(clips), "total": len(clips), "message": "ABX"}
    _abx_block(result, per_speaker, notes, "", got.unit_items, words, speakers, max_per_cell, seed)
    if baseline:
        yield {"step": len(clips), "total": len(clips), "message": "ABX of the MFCC baseline"}
        _abx_block(result, per_speaker, notes, "mfcc_", got.mfcc_items, words, speakers, max_per_cell, seed)
    result["bitrate_bps"] = abx.bitrate(all_seqs, all_secs)
    result["units_per_second"] = sum(len(s) for s in all_seqs) / max(sum(all_secs), 1e-9)
    for s in seqs:
        per_speaker[s]["bitrate_bps"] = abx.bitrate(seqs[s], secs[s])
    yield {"step": len(clips), "total": len(clips), "message": "resynthesis distance"}
    lsd = resynthesis_distance(model, got.by_speaker)
    result["resynthesis_lsd_db"] = lsd
    for s, v in lsd["per_speaker"].items():
        per_speaker[s]["lsd_db"] = v["lsd_db"]
        per_speaker[s]["envelope_corr"] = v["envelope_corr"]  # per voice: a smear shows here, not in the LSD
        per_speaker[s]["envelope_corr_loudness"] = v["envelope_corr_loudness"]
        per_speaker[s]["seen"] = v["seen"]
        per_speaker[s]["voice"] = v["voice"]  # the training voice it was resynthesised with
    result["per_speaker"] = per_speaker
    result["notes"] = notes
    return result


@torch.no_grad()
def resynthesis_distance(model: Any, by_speaker: dict[str, list[tuple[torch.Tensor, torch.Tensor]]]  # noqa: ANN401
                         ) -> dict[str, Any]:
    """Log-spectral distance (dB, 0-4 kHz, 60-dB range) between the inverter's magnitudes and the recordings',
    and the envelope correlation, from the units alone and with the loudness stream beside them
    (core/loudness.py; its cost in bit/s). An unseen voice has no speaker embedding: it is resynthesised with the
    table voice that fits its first five items best (`core.voices.fitting_voice`, the rule the Units tab picks
    its voice by)."""
    max_bin = lsd_bins(model.config.inverter)
    known = model.config.speakers
    levels_seen: list[torch.Tensor] = []
    seconds = 0.0

    def scores(items: list[tuple[torch.Tensor, torch.Tensor]], spk: int) -> tuple[float, float, float]:
        """(mean LSD, mean envelope correlation, the same with the loudness stream) of these items in voice spk."""
        nonlocal seconds
        pairs = [(model.units_to_magnitude(codes, spk, len(mag)), mag) for codes, mag in items if len(codes)]
        if not pairs:
            return float("nan"), float("nan"), float("nan")
        levels = [loudness.unit_levels(m, max_bin) for _, m in pairs]
        levels_seen.extend(levels)
        seconds += sum(len(m) for _, m in pairs) * model.config.inverter.hop_length / model.config.inverter.sample_rate
        return (float(np.mean([log_spectral_distance(p, m, max_bin) for p, m in pairs])),
                float(np.mean([envelope_correlation(p, m, max_bin) for p, m in pairs])),
                float(np.mean([envelope_correlation(loudness.apply_levels(p, lv, max_bin), m, max_bin)
                               for (p, m), lv in zip(pairs, levels, strict=True)])))

    per_speaker: dict[str, dict[str, Any]] = {}
    for s, items in sorted(by_speaker.items()):
        seen = s in known
        voice = known.index(s) if seen else fitting_voice(model, items[:5])
        lsd, corr, corr_loud = scores(items, voice)
        per_speaker[s] = {"lsd_db": lsd, "envelope_corr": corr, "envelope_corr_loudness": corr_loud,
                          "voice": known[voice] if known else voice, "seen": seen}

    def mean(key: str, seen: bool) -> float:
        vals = [v[key] for v in per_speaker.values() if v["seen"] is seen]
        return float(np.mean(vals)) if vals else float("nan")

    return {"seen": mean("lsd_db", True), "unseen": mean("lsd_db", False),
            "envelope_corr_seen": mean("envelope_corr", True), "envelope_corr_unseen": mean("envelope_corr", False),
            "envelope_corr_loudness_seen": mean("envelope_corr_loudness", True),
            "envelope_corr_loudness_unseen": mean("envelope_corr_loudness", False),
            "loudness_stream_bps": loudness.stream_bits_per_second(levels_seen, seconds),
            "per_speaker": per_speaker}


def _selection(args: argparse.Namespace) -> Selection:
    return Selection(getattr(args, "split", "test"), tuple(getattr(args, "speaker", None) or ()),
                     tuple(getattr(args, "exclude_speaker", None) or ()))


def evaluate_units_command(args: argparse.Namespace) -> Job:
    """`earshot eval units`."""
    from core.checkpoints import load_model

    model, ckpt = load_model(args.model, kind="units")  # another kind: CheckpointError with its message
    if args.threads:
        torch.set_num_threads(args.threads)
    sel = _selection(args)
    words, utterances, has_split = list_eval_clips(args.data, sel)
    clips = words + utterances
    if not clips:
        raise ValueError(f"no audio found in {', '.join(map(str, args.data))} ({_describe(sel)}); "
                         f"{available_splits(args.data)}")
    check_splits_found(sel.splits, {c.split for c in clips}, args.data)
    resampler = audio_path.resampler_from_training(ckpt.training)  # a missing field: torchaudio (old checkpoints)
    result = yield from evaluate_units(model, clips, args.max_per_cell, args.representation, args.resynth_items,
                                       baseline=not args.no_baseline, resampler=resampler, features=ckpt.features)
    split = sel.split
    if split not in ("all", None) and not has_split:
        split = "all (no split column: every recording evaluated)"
    return nan_to_none({"model": str(args.model), "data": [str(d) for d in args.data], "split": split,
                        "resampler": resampler, **result})


def available_splits(data_dirs: Sequence[str | os.PathLike[str]]) -> str:
    """What the folders hold, for an error message: "splits here: dev (12 rows), heldout (72 rows)"."""
    try:
        words, utts, _ = list_eval_clips(data_dirs, Selection("all"))
    except (OSError, ValueError) as e:
        return f"(could not list the data: {e})"
    counts: dict[str, int] = {}
    for c in words + utts:
        counts[c.split or "none"] = counts.get(c.split or "none", 0) + 1
    if not counts:
        return "the folders hold no audio"
    return "splits here: " + ", ".join(f"{k} ({n} rows)" for k, n in sorted(counts.items()))


def _describe(sel: Selection) -> str:
    parts = [f"split {sel.split!r}"]
    if sel.speakers:
        parts.append(f"speaker(s) {', '.join(sel.speakers)}")
    if sel.exclude_speakers:
        parts.append(f"without {', '.join(sel.exclude_speakers)}")
    return ", ".join(parts)


def nan_to_none(x: Any) -> Any:  # noqa: ANN401 - JSON-like values
    """NaN (a score that cannot be formed) -> None, so --json is valid JSON."""
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {k: nan_to_none(v) for k, v in x.items()}
    if isinstance(x, list):
        return [nan_to_none(v) for v in x]
    return x


# ---------------------------------------------------------------------------------------------- words


def _pair_ap(scores: np.ndarray, same: np.ndarray, mask: np.ndarray) -> float:
    from training.metrics import average_precision

    return average_precision(scores[mask], same[mask]) if mask.any() else float("nan")


@dataclass
class _WordsSet:
    """A words checkpoint and the tokens it is scored on, read the way it was trained (front end, trimming,
    resampler)."""

    model: Any  # models.awe.MultiViewAWE
    frontend: Any  # its front end: MFCC, or the pretrained speech_embedding frames
    data: Any  # training.words_data.WordSet
    split: str  # as asked, or why every row was read
    splits: tuple[str, ...] | None
    trim: Any  # core.audio.TrimConfig
    resampler: str
    sel: Selection


def _read_words_set(model_path: str | os.PathLike[str], folders: Sequence[str | os.PathLike[str]], split: str,
                    max_items: int | None, device: str, seed: int, sel: Selection
                    ) -> Generator[dict[str, Any], None, _WordsSet]:
    """Job: the checkpoint and the tokens of `split` (every row of folders without a split column)."""
    from core.audio import TrimConfig
    from core.checkpoints import load_model
    from core.device import resolve_device
    from training.words_data import DEV_SPLITS, has_split_column, load_words

    model, ckpt = load_model(model_path, kind="words", device=resolve_device(device))
    frontend = words_frontend(ckpt.features)  # MFCC, or the pretrained speech_embedding frames
    pre = ckpt.training.get("preprocessing", {})
    trim = TrimConfig(**pre["trim"]) if isinstance(pre.get("trim"), dict) else TrimConfig()
    max_frames = int(pre.get("max_frames", model.config.max_len))
    resampler = audio_path.resampler_from_training(ckpt.training)  # a missing field: torchaudio (old checkpoints)
    named = Selection(split).splits
    splits = None if not named else tuple(DEV_SPLITS[0] if p in DEV_SPLITS else p for p in named)
    if splits is not None and not any(has_split_column(Path(f)) for f in folders):
        splits, split = None, "all (no split column: every row evaluated)"
    try:
        data = yield from load_words(folders, frontend, splits, trim, max_frames, None, max_items=max_items,
                                     seed=seed, resampler=resampler, keep_row=sel.keeps_row, unspelled=True)
    except ValueError as e:  # "no rows in split ...": say which speakers were asked for and what is there
        if not str(e).startswith("no rows"):
            raise
        raise ValueError(f"{e} ({_describe(Selection(split, sel.speakers, sel.exclude_speakers))}); "
                         f"{available_splits(folders)}") from None
    tokens = data.tokens
    if not tokens:
        where = _describe(Selection(split, sel.speakers, sel.exclude_speakers))
        raise ValueError(f"no word tokens in {', '.join(map(str, folders))} ({where})")
    check_splits_found(splits or (), {t.split for t in tokens}, folders)
    if len({t.word for t in tokens}) < 2:
        raise ValueError(f"split {split!r} has fewer than two different words to discriminate "
                         f"({len(tokens)} token(s) of {tokens[0].word!r})")
    return _WordsSet(model, frontend, data, split, splits, trim, resampler, sel)


def _dtw_scores(ws: _WordsSet, folders: Sequence[str | os.PathLike[str]], max_items: int | None, seed: int,
                i: np.ndarray, j: np.ndarray) -> Generator[dict[str, Any], None, tuple[np.ndarray, float]]:
    """Job: the MFCC+DTW baseline's score of every pair (i, j) of tokens, and the seconds it took."""
    from models.frontends import MFCC
    from training.metrics import dtw_distance
    from training.words_data import load_words
    from training.words_embedding import dtw_features

    baseline = ws.data.tokens
    if not isinstance(ws.frontend, MFCC):  # the baseline is MFCC+DTW whatever the model's features are
        mfcc = yield from load_words(folders, MFCC(), ws.splits, ws.trim, 300, None, max_items=max_items, seed=seed,
                                     resampler=ws.resampler, keep_row=ws.sel.keeps_row, unspelled=True)
        by_path = {t.path: t for t in mfcc.tokens}
        baseline = [by_path[t.path] for t in ws.data.tokens]
    t0 = time.perf_counter()
    feats = [dtw_features(t.feats) for t in baseline]
    scores = np.array([-dtw_distance(feats[p], feats[q]) for p, q in zip(i, j, strict=True)])
    return scores, time.perf_counter() - t0


def _cross_view(model: Any, e: np.ndarray, labels: np.ndarray, spelled: Sequence[str],  # noqa: ANN401
                phonemes: dict[str, list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(N, W) cosines of the tokens' unit vectors `e` to the written words `spelled`, and which are the token's."""
    from training.words_embedding import embed_words

    if not spelled:
        return np.zeros((len(labels), 0)), np.zeros((len(labels), 0), dtype=bool)
    written = embed_words(model, [phonemes[w] for w in spelled])
    w_unit = written / np.maximum(np.linalg.norm(written, axis=1, keepdims=True), 1e-12)
    return e @ w_unit.T, labels[:, None] == np.array(spelled)[None, :]


def _cross_ap(cross: np.ndarray, cross_pos: np.ndarray, rows: np.ndarray) -> float | None:
    """Cross-view AP over the tokens of the mask `rows` (N,) whose word is written (None when there are none)."""
    from training.metrics import average_precision

    keep = rows & cross_pos.any(axis=1)  # a token of an unspelled word has no written word to find
    return average_precision(cross[keep].ravel(), cross_pos[keep].ravel()) if keep.any() else None


def evaluate_words(
    model_path: str | os.PathLike[str], folders: Sequence[str | os.PathLike[str]], split: str = "test",
    max_items: int | None = None, device: str = "auto", dtw: bool = True, seed: int = 0,
    speakers: Sequence[str] = (), exclude_speakers: Sequence[str] = (),
) -> Job:  # fmt: skip
    """Job: AP, cross-view AP, and the MFCC+DTW baseline AP on the same pairs, with wall times, overall and
    per speaker."""
    from training.metrics import average_precision, word_discrimination_ap
    from training.words_embedding import embed_tokens

    ws = yield from _read_words_set(model_path, folders, split, max_items, device, seed,
                                    Selection(None, tuple(speakers), tuple(exclude_speakers)))
    model, tokens = ws.model, ws.data.tokens
    labels = np.array([t.word for t in tokens])
    spk = np.array([t.speaker for t in tokens])
    yield {"step": 0, "total": 2, "message": f"embedding {len(tokens)} tokens"}
    t0 = time.perf_counter()
    acoustic = embed_tokens(model, [t.feats for t in tokens])
    e = acoustic / np.maximum(np.linalg.norm(acoustic, axis=1, keepdims=True), 1e-12)
    sims = e @ e.T  # (N, N) the cosine matrix, timed as part of the embedding method
    embed_s = time.perf_counter() - t0
    words = sorted(set(labels.tolist()))
    spelled = [w for w in words if w in ws.data.phonemes]  # another language's words have no written view
    unspelled = [w for w in words if w not in ws.data.phonemes]
    cross, cross_pos = _cross_view(model, e, labels, spelled, ws.data.phonemes)
    n = len(tokens)
    i, j = np.triu_indices(n, k=1)
    same = labels[i] == labels[j]
    pair_sims = sims[i, j]
    result: dict[str, Any] = {
        "model": str(model_path), "data": [str(f) for f in folders], "split": ws.split, "resampler": ws.resampler,
        "tokens": n, "words": len(words), "speakers": len(set(spk.tolist())),
        "synthetic_tokens": sum(t.synthetic for t in tokens), "pairs": len(i), "positive_pairs": int(same.sum()),
        "ap": word_discrimination_ap(acoustic, labels.tolist()),
        "cross_view_ap": _cross_ap(cross, cross_pos, np.ones(len(labels), dtype=bool)),
        "unspelled_words": len(unspelled),
        "embedding_time_s": round(embed_s, 3), "embedding_pairs_per_s": round(len(i) / max(embed_s, 1e-9)),
        "problems": ws.data.report["problems"],
    }  # fmt: skip
    speaker_names = sorted(set(spk.tolist()))
    involves = {s: (spk[i] == s) | (spk[j] == s) for s in speaker_names}  # pairs with a token of s
    per_speaker: dict[str, dict[str, Any]] = {}
    for s in speaker_names:
        mine = spk == s
        per_speaker[s] = {"tokens": int(mine.sum()), "words": len(set(labels[mine].tolist())),
                          "positive_pairs": int((same & involves[s]).sum()),
                          "ap": _pair_ap(pair_sims, same, involves[s]),
                          "cross_view_ap": _cross_ap(cross, cross_pos, mine)}
    notes = [] if result["positive_pairs"] else ["ap: no two tokens share a word, so no pair is positive"]
    if not spelled:
        notes.append("cross_view_ap: no word of the set has a pronunciation (CMUdict or a phonemes column)")
    elif unspelled:
        notes.append(f"cross_view_ap: over the {len(spelled)} words with a pronunciation; {len(unspelled)} without "
                     f"(e.g. {', '.join(map(repr, unspelled[:3]))}) count in ap and dtw_ap only")
    if dtw:
        yield {"step": 1, "total": 2, "message": f"DTW baseline on {len(i)} pairs"}
        dtw_scores, dtw_s = yield from _dtw_scores(ws, folders, max_items, seed, i, j)
        result["dtw_ap"] = average_precision(dtw_scores, same)  # = training.metrics.dtw_pairwise_ap
        result["dtw_time_s"] = round(dtw_s, 2)
        result["dtw_pairs_per_s"] = round(len(i) / max(result["dtw_time_s"], 1e-9), 1)
        for s in speaker_names:
            per_speaker[s]["dtw_ap"] = _pair_ap(dtw_scores, same, involves[s])
    result["per_speaker"] = per_speaker
    result["notes"] = notes
    yield {"step": 2, "total": 2, "message": "done"}
    return nan_to_none(result)


def evaluate_words_command(args: argparse.Namespace) -> Job:
    """`earshot eval words`."""
    sel = _selection(args)
    return evaluate_words(args.model, [str(p) for p in args.data], sel.split or "test",
                          getattr(args, "max_items", None), getattr(args, "device", "auto"),
                          not getattr(args, "no_dtw", False), getattr(args, "seed", 0),
                          sel.speakers, sel.exclude_speakers)
