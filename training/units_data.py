"""The units trainer's data: audio folders -> checked 16-kHz recordings -> features, spectrogram targets and
speaker ids held in memory (`Corpus`), with an on-disk feature cache and the random, optionally augmented,
training crops. Evaluation (training/speech_eval.py) reads its audio through the same `read_audio`."""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from core import audio as audio_path
from core.frontend_builder import units_frontend_dict
from models.framing import SAMPLE_RATE
from models.frontends import MFCC, LinearSpectrogram
from models.speech_embedding import WINDOW_SAMPLES
from models.units_frontend import SpeechUnitsFrontend
from models.vqvae import STRIDE
from training.augment import AugmentConfig, augment_channel, augment_source, noise_bank
from training.reserved import is_held_out

CSV_NAMES = ("words.csv", "metadata.csv", "utterances.csv")  # evaluation: word labels first (ABX)
TRAIN_CSV_NAMES = ("utterances.csv", "words.csv", "metadata.csv")  # training: every utterance of a corpus
CROP_MARGIN = 8  # frames of audio kept each side of an augmented crop: covers the STFT window and Δ/ΔΔ context
MIN_TRAIN_FRAMES = 2 * STRIDE  # shorter recordings (< 2 units) are skipped in training, not at inference
SILENCE_PEAK = 1e-4  # peak amplitude below which a recording counts as silent
CLIP_LEVEL = 0.999
CLIP_FRACTION = 0.01  # more than this share of samples at full scale: reported as clipped


# ---------------------------------------------------------------------------------------------- audio


class AudioProblem(ValueError):
    """A recording that cannot be used: unreadable, empty, silent, non-finite throughout."""


def read_audio(path: str | os.PathLike[str], resampler: str = audio_path.SOXR) -> tuple[torch.Tensor, list[str]]:
    """Any audio file -> (16-kHz mono float32 waveform (N,), notes on what was repaired).

    Channels are averaged, other rates resampled (with the model's `resampler`; soxr for new training),
    NaN/inf samples set to zero. Raises AudioProblem for an unreadable, empty, all-non-finite or silent file.
    """
    try:  # the one audio path; NaN/inf are kept here so that prepare_wave can report them
        d = audio_path.decode(path, mono=False, max_seconds=None, keep_nonfinite=True)  # (N, channels)
    except audio_path.EmptyAudioError as e:
        raise AudioProblem(f"empty (no samples): {e}") from e
    except audio_path.AudioError as e:
        raise AudioProblem(f"unreadable ({str(e).strip()[:120]})") from e
    return prepare_wave(torch.from_numpy(np.ascontiguousarray(d.audio.T)), d.sample_rate, resampler)


def prepare_wave(wave: torch.Tensor, sample_rate: int, resampler: str = audio_path.SOXR
                 ) -> tuple[torch.Tensor, list[str]]:
    """(N,) or (channels, N) at `sample_rate` -> (16-kHz mono (N',), notes); see `read_audio`."""
    notes: list[str] = []
    wave = wave.float()
    if wave.dim() == 2:
        if wave.shape[0] > 1:
            notes.append(f"{wave.shape[0]} channels mixed to mono")
        wave = wave.mean(dim=0)
    finite = torch.isfinite(wave)
    if not finite.any():
        raise AudioProblem("no finite samples (all NaN/inf)")
    if not finite.all():
        notes.append(f"{int((~finite).sum())} NaN/inf samples set to zero")
        wave = torch.where(finite, wave, torch.zeros_like(wave))
    peak = float(wave.abs().max())
    if peak < SILENCE_PEAK:
        raise AudioProblem(f"silent (peak {peak:.1e})")
    clipped = float((wave.abs() >= CLIP_LEVEL * max(1.0, peak)).float().mean())
    if clipped > CLIP_FRACTION:
        notes.append(f"clipped ({100 * clipped:.1f}% of samples at full scale)")
    if sample_rate != SAMPLE_RATE:
        x = wave.detach().cpu().numpy()
        wave = torch.from_numpy(audio_path.resample(x, sample_rate, SAMPLE_RATE, resampler))
    return wave.contiguous(), notes


def pad_for_frontend(wave: torch.Tensor, n_fft: int = 512) -> torch.Tensor:
    """Zero-pad a very short waveform so the centred STFT (reflect padding) accepts it."""
    need = n_fft // 2 + 1
    return torch.nn.functional.pad(wave, (0, need - wave.shape[-1])) if wave.shape[-1] < need else wave


@torch.no_grad()
def wave_features(wave: torch.Tensor, mfcc: nn.Module) -> torch.Tensor:
    """16-kHz waveform (N,) of any length -> MFCC+Δ+ΔΔ (T, 39) (or the front end's (T, D)); a few-ms
    recording still gives frames."""
    return mfcc(pad_for_frontend(wave, mfcc.config.n_fft))


# ---------------------------------------------------------------------------------------------- data


@dataclass
class Clip:
    path: Path
    speaker: str
    word: str | None = None
    split: str | None = None


def list_clips(
    data_dirs: Sequence[str | os.PathLike[str]],
    split: str | None = "train",
    speakers: Sequence[str] | None = None,
    exclude_speakers: Sequence[str] = (),
    tables: Sequence[str] = CSV_NAMES,
) -> list[Clip]:
    """Every clip of the data folders, with speaker (and word) labels, filtered by split and speaker. A folder
    with several tables is read through the first of `tables` it has; rows whose `source` package is reserved
    for evaluation or holds the speech models' held-out voices (training/reserved.py) are never listed."""
    clips: list[Clip] = []
    for d in data_dirs:
        root = Path(d)
        if not root.is_dir():
            raise FileNotFoundError(f"{root}: no such data folder")
        table = next((root / n for n in tables if (root / n).is_file()), None)
        if table is None:
            found = sorted(p for p in root.rglob("*")
                           if p.suffix.lower() in audio_path.SUPPORTED_EXTENSIONS and p.is_file())
            clips.extend(Clip(p, "unknown") for p in found)
            continue
        with open(table, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            if not reader.fieldnames or "path" not in reader.fieldnames:
                raise ValueError(f"{table}: needs a 'path' column (columns: {reader.fieldnames})")
            for row in reader:
                row_split = (row.get("split") or "").strip() or None
                if split not in (None, "all") and row_split is not None and row_split != split:
                    continue
                if is_held_out((row.get("source") or "").strip()):  # never trained on, whatever the split
                    continue
                word = (row.get("word") or "").strip() or None
                clips.append(Clip(root / row["path"], (row.get("speaker") or "").strip() or "unknown",
                                  word, row_split))
    if speakers:
        clips = [c for c in clips if c.speaker in set(speakers)]
    return [c for c in clips if c.speaker not in set(exclude_speakers)]


@dataclass
class Corpus:
    """Training utterances held in memory: features, spectrogram targets and speaker ids, index-aligned."""

    feats: list[torch.Tensor] = field(default_factory=list)  # (T, D) float32 (float16 when read from a cache)
    specs: list[torch.Tensor] = field(default_factory=list)  # (T, 257) float16 linear magnitudes
    speaker_ids: list[int] = field(default_factory=list)
    speakers: list[str] = field(default_factory=list)
    waves: list[np.ndarray] = field(default_factory=list)  # (N,) int16 at 16 kHz, kept only for augmentation
    seconds: float = 0.0
    skipped: dict[str, str] = field(default_factory=dict)  # path -> why
    repaired: dict[str, list[str]] = field(default_factory=dict)  # path -> what was done

    @property
    def lengths(self) -> np.ndarray:
        return np.array([len(f) for f in self.feats])

    def report(self) -> dict[str, Any]:
        return {
            "utterances": len(self.feats), "hours": round(self.seconds / 3600, 3), "speakers": len(self.speakers),
            "skipped": len(self.skipped), "repaired": len(self.repaired),
            "skipped_examples": [f"{p}: {w}" for p, w in list(self.skipped.items())[:5]],
            "repaired_examples": [f"{p}: {'; '.join(n)}" for p, n in list(self.repaired.items())[:5]],
        }  # fmt: skip


def load_corpus(clips: Sequence[Clip], speakers: Sequence[str] | None = None, min_frames: int = MIN_TRAIN_FRAMES,
                keep_waves: bool = False, frontend: nn.Module | None = None,
                cache_dir: str | os.PathLike[str] | None = None) -> Generator[dict[str, Any], None, Corpus]:
    """Job: decode, check and featurise every clip once. `speakers` fixes the speaker table (resume); clips
    of other speakers are then skipped. Unusable recordings are skipped and reported, never fatal.
    `keep_waves`: also hold the waveforms (16-bit) for augmenting crops on the fly. `frontend`: the encoder's
    features (default MFCC+Δ+ΔΔ). `cache_dir`: features and spectrogram targets of each recording are kept
    there (float16, keyed by the file's path, size and mtime and the front end) and read back by later runs."""
    frontend = frontend if frontend is not None else MFCC()
    spec = LinearSpectrogram()
    cache = FeatureCache(cache_dir, units_frontend_dict(frontend)) if cache_dir else None
    table = list(speakers) if speakers is not None else sorted({c.speaker for c in clips})
    index = {s: i for i, s in enumerate(table)}
    corpus = Corpus(speakers=table)
    for i, clip in enumerate(clips):
        key = str(clip.path)
        if clip.speaker not in index:
            corpus.skipped[key] = f"speaker {clip.speaker!r} is not in the model's speaker table"
            continue
        cached = cache.get(clip.path) if cache is not None and not keep_waves else None
        if cached is not None:
            feats, mag, seconds, notes = cached
        else:
            try:
                wave, notes = read_audio(clip.path)
            except AudioProblem as e:
                corpus.skipped[key] = str(e)
                continue
            if keep_waves:  # held as 16-bit: featurise exactly what augmentation will later read back
                wave = torch.from_numpy(to_int16(wave.numpy()).astype(np.float32) / 32767)
            feats = wave_features(wave, frontend)
            seconds = len(wave) / SAMPLE_RATE
            if len(feats) >= min_frames:
                with torch.no_grad():
                    mag = spec(pad_for_frontend(wave)).to(torch.float16)
                if cache is not None:
                    feats = cache.put(clip.path, feats, mag, seconds, notes)
        if len(feats) < min_frames:
            corpus.skipped[key] = f"too short for training ({seconds * 1000:.0f} ms)"
            continue
        if notes:
            corpus.repaired[key] = notes
        corpus.feats.append(feats)
        corpus.specs.append(mag)
        corpus.speaker_ids.append(index[clip.speaker])
        if keep_waves:
            corpus.waves.append(to_int16(wave.numpy()))
        corpus.seconds += seconds
        if (i + 1) % 200 == 0 or i + 1 == len(clips):
            yield {"step": i + 1, "total": len(clips), "stage": "features", "message": f"features {i + 1}"}
    if not corpus.feats:
        raise ValueError(f"no usable training audio among {len(clips)} file(s)"
                         + (f"; e.g. {next(iter(corpus.skipped.items()))}" if corpus.skipped else ""))
    return corpus


class FeatureCache:
    """Features (T, D) and spectrogram targets (T, 257) of each recording on disk, float16, one .safetensors
    file per recording named by a hash of its path, size, mtime and the front end's settings: a changed file or
    front end misses and is recomputed, a damaged entry is recomputed and rewritten."""

    def __init__(self, folder: str | os.PathLike[str], features: dict[str, Any]) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.features = json.dumps({**features, "resampler": audio_path.SOXR, "spec": "linear_spec"}, sort_keys=True)

    def path(self, audio: Path) -> Path:
        import hashlib

        st = Path(audio).stat()
        key = f"{Path(audio).resolve()}|{st.st_size}|{st.st_mtime_ns}|{self.features}"
        return self.folder / (hashlib.sha1(key.encode()).hexdigest()[:24] + ".safetensors")

    def get(self, audio: Path) -> tuple[torch.Tensor, torch.Tensor, float, list[str]] | None:
        from safetensors import safe_open

        try:
            p = self.path(audio)
            if not p.is_file():
                return None
            with safe_open(str(p), framework="pt") as f:
                meta = f.metadata() or {}
                return f.get_tensor("feats"), f.get_tensor("spec"), float(meta["seconds"]), json.loads(meta["notes"])
        except (OSError, KeyError, ValueError, RuntimeError):  # unreadable or damaged: recompute
            return None

    def put(self, audio: Path, feats: torch.Tensor, spec: torch.Tensor, seconds: float, notes: list[str]
            ) -> torch.Tensor:
        """Store one recording (atomically); returns the features as stored (float16), so a first run trains
        on the same numbers as a run that reads the cache."""
        from safetensors.torch import save_file

        feats = feats.to(torch.float16).contiguous()
        p = self.path(audio)
        tmp = p.with_name(p.name + f".{os.getpid()}.tmp")
        save_file({"feats": feats, "spec": spec.to(torch.float16).contiguous()}, str(tmp),
                  metadata={"seconds": repr(seconds), "notes": json.dumps(notes)})
        os.replace(tmp, p)
        return feats


def feature_stats(feats: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-dimension mean and std over all frames (float64 sums, so long corpora stay exact)."""
    n, s, s2 = 0, 0.0, 0.0
    for f in feats:
        f64 = f.double()
        n, s, s2 = n + len(f), s + f64.sum(0), s2 + f64.square().sum(0)
    mean = s / n
    std = (s2 / n - mean.square()).clamp(min=0).sqrt()
    return mean.float(), std.float()


def sample_crops(lengths: np.ndarray, batch: int, crop: int, rng: np.random.Generator, align: int = 1
                 ) -> list[tuple[int, int, int]]:
    """(utterance, start, length) for a batch of random crops; utterances drawn in proportion to the frames
    they can give (min(length, crop)), starts on multiples of `align`."""
    w = np.minimum(lengths, crop).astype(np.float64)
    idx = rng.choice(len(lengths), size=batch, p=w / w.sum())
    out = []
    for i in idx:
        n = int(lengths[i])
        max_start = max(0, n - crop) // align
        start = int(rng.integers(0, max_start + 1)) * align
        out.append((int(i), start, min(crop, n - start)))
    return out


def pad_stack(seqs: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.nn.utils.rnn.pad_sequence(list(seqs), batch_first=True)


def to_int16(wave: np.ndarray) -> np.ndarray:
    """float (N,) in [-1, 1] -> int16 (N,): half the memory of float32, the precision of the source files."""
    return np.round(np.clip(wave, -1.0, 1.0) * 32767).astype(np.int16)


def context_frames(frontend: nn.Module) -> int:
    """Frames of audio an augmented crop keeps before its start so that, with no effect firing, its features
    equal the whole utterance's: the STFT window and Δ/ΔΔ context (CROP_MARGIN), and with the speech_embedding
    front end also one embedding window (0.78 s) in whole units, so that the segment starts on the utterance's
    unit grid."""
    if not isinstance(frontend, SpeechUnitsFrontend):
        return CROP_MARGIN
    hop = int(frontend.config.hop_length)
    window = -(-WINDOW_SAMPLES // hop)  # 79 frames
    return -(-(window + CROP_MARGIN) // STRIDE) * STRIDE  # 88 frames


def augmented_crop(corpus: Corpus, i: int, start: int, n: int, cfg: AugmentConfig, rng: np.random.Generator,
                   frontend: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """One training crop through the augmentation: (input (n', D), target (n', D)), n' <= n; `frontend`: the
    units front end whose features the corpus holds (MFCC (D = 39) or mfcc+speech_embedding (D = 135)).

    The crop's audio plus its context (`context_frames` before, CROP_MARGIN after, both lengthened by the fastest
    speed-up, so that its frames equal the whole utterance's) goes through the talker effects (speed, pitch: input
    and target) and then the channel effects (input only). Without talker effects the target is the cached clean
    crop itself. With the speech front end the segment starts on a unit boundary and the crop keeps its place
    within its unit after a speed change, so the embedding frames line up with the MFCC frames as in the cached
    features."""
    hop, on_grid = frontend.config.hop_length, isinstance(frontend, SpeechUnitsFrontend)  # one embedding per unit
    wave = corpus.waves[i].astype(np.float32) / 32767  # (N,)
    stretch = max(1.0, cfg.speed_high) if cfg.speed_prob > 0 else 1.0  # a speed-up shortens the context
    first = max(0, start - math.ceil(context_frames(frontend) * stretch))
    first -= first % STRIDE if on_grid else 0
    a = first * hop
    b = min(len(wave), (start + math.ceil((n + CROP_MARGIN) * stretch)) * hop)
    segment = wave[a:b]
    source = augment_source(segment, cfg, rng)  # (M,), M ≈ (b - a) / speed
    changed = source is not segment and not np.array_equal(source, segment)
    offset = round((start * hop - a) * len(source) / len(segment) / hop)  # the crop's first frame in `source`
    if on_grid:  # keep the crop's place within its unit
        offset += ((start - first) - offset) % STRIDE
    noise = noise_bank(cfg.noise_dir, SAMPLE_RATE) if cfg.noise_prob > 0 else None
    heard = augment_channel(source, SAMPLE_RATE, cfg, rng, noise)  # (M,)
    x = wave_features(torch.from_numpy(heard), frontend)[offset : offset + n]  # (n', D)
    y = wave_features(torch.from_numpy(source), frontend)[offset : offset + n] if changed else \
        corpus.feats[i][start : start + n]
    m = min(len(x), len(y))
    return x[:m], y[:m]
