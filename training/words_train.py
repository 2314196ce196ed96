"""Training and evaluation of multi-view acoustic word embeddings (models/awe.py) on spoken-word folders.

Data (training/words_data.py): folders with `words.csv` or FSDD's `metadata.csv`, decoded to 16 kHz mono,
trimmed, featurised once and cached; bad input is reported and skipped. Training follows Rhodes & Bains
(batch 256, Adam at 5e-4, divide the rate by 10 on a dev-AP plateau and go back to the best weights, stop below
1e-7), with batches that hold several tokens per word, since the loss needs same-word positives. The loop,
schedule, resume state and result are `training.trainer`'s; this module supplies `WordsHooks`. Data, splits
and the schedule in detail: docs/training.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import shlex
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core import audio as audio_path
from core import distributed as ddp
from core.audio import TrimConfig as TrimConfig  # tests read it here
from core.checkpoints import load_model, save_checkpoint
from core.config import add_arguments, argv_for, settings_of
from core.config import config_from_args as settings_from_args
from core.frontend_builder import speech_frames, words_frontend_dict
from models.awe import AWEConfig, EncoderConfig, MultiViewAWE
from models.frontends import MFCC, MFCCConfig
from models.speech_embedding import SpeechFramesConfig
from training.augment import AugmentConfig, augment, noise_bank
from training.trainer import Hooks, Stage, Trainer
from training.words_data import SAMPLE_RATE, WordSet, load_words
from training.words_embedding import dtw_features as dtw_features  # bench/, tests/test_speech_eval.py read it here
from training.words_embedding import embed_tokens as embed_tokens  # bench/bench_words.py reads it here
from training.words_embedding import evaluate_embeddings, pad_features, pad_phonemes
from training.words_settings import PRESETS, WordsTrainConfig

Job = Generator[dict[str, Any], None, Any]
PROGRESS_EVERY_S = 1.0  # the augmenting pass says where it is this often (every 500 tokens left 70 s without a word)


def model_config(preset: str) -> AWEConfig:
    """AWEConfig for a preset: 'paper' is the paper's model (6 + 4 layers, d 256)."""
    if preset == "paper":
        return AWEConfig()
    if preset == "small":  # a laptop-CPU model: 2 + 2 pre-norm layers, d 128 (about 0.7 M parameters)
        return AWEConfig(d_model=128, d_ff=512, acoustic=EncoderConfig(2, 4), phoneme=EncoderConfig(2, 4),
                         norm_first=True)
    if preset == "speech":  # over speech_embedding frames (~25 per second): BiGRU 2 x 128 per direction
        return AWEConfig(input_dim=96, d_model=256, d_ff=512, acoustic=EncoderConfig(2, 4),
                         phoneme=EncoderConfig(2, 4), norm_first=True, acoustic_encoder="gru", gru_layers=2)
    if preset == "tiny":
        return AWEConfig.tiny()
    raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")


# ------------------------------------------------------------------------------------------ front ends


def make_frontend(config: WordsTrainConfig) -> torch.nn.Module:
    """The front end a training run asks for (`frontend`, `normalize_features`, `speech_weights`)."""
    if config.frontend == "speech_embedding":
        return speech_frames(SpeechFramesConfig(cmvn=config.normalize_features), config.speech_weights or None)
    return MFCC(MFCCConfig(cmn=config.normalize_features, cvn=config.normalize_features))


# --------------------------------------------------------------------------------------------- batches


def make_batches(
    lengths: np.ndarray, word_ids: np.ndarray, batch_size: int, tokens_per_word: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Token indices in batches of at most `batch_size`, similar lengths together, words kept in groups.

    Each word's tokens are shuffled and cut into groups of about `tokens_per_word`; groups are sorted by
    mean length (with ±20% noise so batches differ between epochs), packed into batches, and the batch
    order shuffled. A batch of a single word is given a group of another from the nearest batch in length
    (`_mix_lone_words`): it has no negatives, so its loss is exactly 0 and its step learns nothing.
    """
    groups: list[np.ndarray] = []
    for w in np.unique(word_ids):
        idx = rng.permutation(np.flatnonzero(word_ids == w))
        groups += np.array_split(idx, math.ceil(len(idx) / tokens_per_word))
    keys = np.array([lengths[g].mean() for g in groups]) * rng.uniform(0.8, 1.2, len(groups))
    packed: list[list[int]] = []  # group numbers per batch
    current: list[int] = []
    for g in np.argsort(keys, kind="stable"):
        if current and sum(len(groups[k]) for k in current) + len(groups[g]) > batch_size:
            packed.append(current)
            current = []
        current.append(int(g))
    if current:
        packed.append(current)
    _mix_lone_words(packed, [int(word_ids[g[0]]) for g in groups], [len(g) for g in groups], batch_size)
    batches = [np.concatenate([groups[k] for k in b]) for b in packed]
    return [batches[i] for i in rng.permutation(len(batches))]


def _mix_lone_words(packed: list[list[int]], word: list[int], size: list[int], batch_size: int) -> None:
    """Give every batch of a single word (`packed`: group numbers; `word`, `size`: of each group) a group of
    another word from the nearest batch that keeps two words without it, moved or swapped for one of its own
    so that both stay within `batch_size`. A batch nothing fits is left as it is."""
    for i, lone in enumerate(packed):
        if len({word[g] for g in lone}) > 1:  # read afresh: an earlier batch's loan may have changed this one
            continue
        for j in sorted(range(len(packed)), key=lambda j: abs(j - i)):
            if j != i and _lend(lone, packed[j], word, size, batch_size):
                break


def _lend(lone: list[int], other: list[int], word: list[int], size: list[int], batch_size: int) -> bool:
    """Move a group of another word from `other` into `lone` (a single word's batch), or swap it for one of
    `lone`'s groups; True if done. `other` must keep two words and both batches `batch_size` at most."""
    w, used = word[lone[0]], sum(size[g] for g in lone)
    others_used = sum(size[g] for g in other)
    for g in sorted((g for g in other if word[g] != w), key=lambda g: size[g]):
        rest = [k for k in other if k != g]
        if used + size[g] <= batch_size and len({word[k] for k in rest}) > 1:
            other.remove(g)
            lone.append(g)
            return True
        for h in (h for h in lone if len(lone) > 1):  # a swap: `other` gets a group of `w`, so one more word
            fits = used - size[h] + size[g] <= batch_size and others_used - size[g] + size[h] <= batch_size
            if fits and len({word[k] for k in rest} | {w}) > 1:
                other[other.index(g)] = h
                lone[lone.index(h)] = g
                return True
    return False


# --------------------------------------------------------------------------------------------- training


def command_line(config: WordsTrainConfig) -> str:
    """The `earshot train words` command that reproduces `config`."""
    parts = ["earshot", "train", "words"]
    for d in config.data:
        parts += ["--data", d]
    parts += ["--out", config.out, "--preset", config.preset] + (["--frontend", config.frontend]
                                                                 if config.frontend != "mfcc" else [])
    parts += ["--epochs", str(config.max_epochs),
              "--batch-size", str(config.batch_size), "--lr", str(config.lr), "--seed", str(config.seed),
              "--max-frames", str(config.max_frames), "--tokens-per-word", str(config.tokens_per_word),
              "--warmup-steps", str(config.warmup_steps), "--grad-clip", str(config.grad_clip)]
    if config.max_minutes is not None:
        parts += ["--max-minutes", str(config.max_minutes)]
    for speaker in config.exclude_speakers:
        parts += ["--exclude-speaker", speaker]
    if config.augment_copies:
        parts += ["--augment-copies", str(config.augment_copies)]
    if config.init_from:
        parts += ["--init-from", config.init_from]
    augment = settings_of(AugmentConfig)  # the augmentation settings that differ from their defaults
    parts += argv_for(augment, {s.name: getattr(config, s.name) for s in augment
                                if getattr(config, s.name) != s.default})
    return shlex.join(parts)


class WordsHooks(Hooks):
    """The words model's part of the one training loop (training.trainer)."""

    kind = "words"
    metric = "dev_ap"

    def __init__(self, config: WordsTrainConfig) -> None:
        self.config = config

    def prepare(self, trainer: Trainer) -> Job:
        config, ctx = self.config, trainer.ctx
        self.trainer = trainer
        out = Path(config.out)
        self.frontend = make_frontend(config)
        cache_dir = Path(config.cache_dir or out.with_name(out.stem + ".cache")) if config.cache else None
        if not ctx.is_main:
            ddp.barrier(ctx)  # rank 0 fills the feature cache first; the others then read it
        if config.noise_prob > 0:
            noise_bank(config.noise_dir, SAMPLE_RATE)  # a missing or empty noise folder fails now, not at step 1
        data: WordSet = yield from load_words(config.data, self.frontend, ("train", "dev"), config.trim,
                                              config.max_frames, cache_dir, config.dev_fraction, seed=config.seed,
                                              exclude_speakers=config.exclude_speakers,
                                              keep_waves=("train",) if config.active else ())
        if ctx.is_main:
            ddp.barrier(ctx)
        self.data = data
        self.train_tokens, self.dev_tokens = data.subset(["train"]), data.subset(["dev"])
        if len({t.word for t in self.train_tokens}) < 2:
            raise ValueError("training needs at least two different words in the train split")
        if len({t.word for t in self.dev_tokens}) < 2:
            raise ValueError("the dev split needs at least two different words (add rows or a dev split)")
        word_index = {w: i for i, w in enumerate(sorted(data.phonemes))}
        self.lengths = np.array([len(t.feats) for t in self.train_tokens])
        self.word_ids = np.array([word_index[t.word] for t in self.train_tokens])
        mcfg = dataclasses.replace(model_config(config.preset), input_dim=self.frontend.dim)
        if config.max_frames > mcfg.max_len:
            raise ValueError(f"max_frames {config.max_frames} exceeds the model's max_len {mcfg.max_len}")
        self.model = MultiViewAWE(mcfg)
        if config.init_from and not config.resume:  # a resumed run has its own weights
            self.model.load_state_dict(initial_weights(config.init_from, mcfg))
        if config.active and config.augment_copies:
            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # one short token at a time: extra threads only spin
            try:
                yield from self.make_copies()
            finally:
                torch.set_num_threads(threads)

    def _batches(self, epoch: int) -> list[np.ndarray]:
        c = self.config
        rng = np.random.default_rng([c.seed, epoch + 1])  # the epoch's order needs no saved state
        batches = make_batches(self.lengths, self.word_ids, c.batch_size, c.tokens_per_word, rng)
        return [b for b in batches if len(b) >= self.trainer.ctx.world_size]  # every process gets a token

    def stages(self) -> list[Stage]:
        c = self.config
        per_epoch = -(-len(self._batches(0)) // c.grad_accum)
        return [Stage("words", c.max_epochs, per_epoch, c.lr, c.min_lr, c.warmup_steps, schedule="plateau",
                      patience=c.patience, decay=c.lr_decay)]

    def begin_stage(self, stage: Stage) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        self.model.train()
        return self.model, torch.optim.Adam(self.model.parameters(), lr=self.config.lr)

    def batches(self, stage: Stage, index: int, epoch: int) -> list[np.ndarray]:
        self.epoch = epoch  # seeds the epoch's augmentation
        return self._batches(epoch)

    def make_copies(self) -> Job:
        """Job: `augment_copies` augmented feature versions of every training token (seeded by copy and token)."""
        c, n = self.config, len(self.train_tokens)
        self.copies: list[list[np.ndarray]] = []
        said = 0.0
        for i in range(n):
            self.copies.append([self.augmented_features(i, np.random.default_rng([c.seed, 29, k, i]))
                                for k in range(c.augment_copies)])
            if time.monotonic() - said >= PROGRESS_EVERY_S or i + 1 == n:  # often enough for a time left
                said = time.monotonic()
                yield {"step": i + 1, "total": n, "message": f"augmenting {c.augment_copies} copies of the tokens"}

    def token_features(self, i: int) -> np.ndarray:
        """Features (T, 39) of training token `i` this epoch: the cached clean ones without augmentation; else
        one of its precomputed augmented copies, or (augment_copies 0) its audio augmented afresh; every draw
        seeded by (seed, epoch, token), so a resumed run sees the same."""
        c, token = self.config, self.train_tokens[i]
        if not c.active or token.wave is None:
            return token.feats
        rng = np.random.default_rng([c.seed, 23, getattr(self, "epoch", 0), int(i)])
        if c.augment_copies:  # the clean features or one of the copies, equally likely
            k = int(rng.integers(c.augment_copies + 1))
            return token.feats if k == c.augment_copies else self.copies[i][k]
        return self.augmented_features(i, rng)

    def augmented_features(self, i: int, rng: np.random.Generator) -> np.ndarray:
        """Features (T', 39) of training token `i`'s audio through the augmentation chain."""
        c, token = self.config, self.train_tokens[i]
        if token.wave is None:
            return token.feats
        noise = noise_bank(c.noise_dir, SAMPLE_RATE) if c.noise_prob > 0 else None
        wave = augment(token.wave.astype(np.float32) / 32767, SAMPLE_RATE, c, rng, noise)  # (N',)
        if len(wave) <= self.frontend.config.n_fft // 2:
            return token.feats
        with torch.no_grad():
            return self.frontend(torch.from_numpy(wave)).numpy()[: c.max_frames]  # (T', 39)

    def step(self, module: torch.nn.Module, b: np.ndarray) -> tuple[torch.Tensor, dict[str, float]]:
        t, device = self.trainer, self.trainer.device
        mine = t.local(list(b))  # this process's acoustic tokens; the written view sees the whole batch
        feats, flen = pad_features([self.token_features(i) for i in mine])
        pids, plen = pad_phonemes([self.data.phonemes[self.train_tokens[i].word] for i in b])
        loss, _ = module(feats.to(device), flen.to(device), pids.to(device), plen.to(device),
                         torch.from_numpy(self.word_ids[b]).to(device), t.gather if t.ctx.enabled else None)
        return loss, {}

    def evaluate(self, stage: Stage) -> dict[str, float]:
        m = evaluate_embeddings(self.model, self.dev_tokens, self.data.phonemes)
        return {"dev_ap": m["ap"], "dev_cross_view_ap": m["cross_view_ap"]}

    def save(self, path: Path, model: torch.nn.Module, record: dict[str, Any]) -> None:
        c = self.config
        training = {
            "data": [str(d) for d in c.data], "command": command_line(c), "preset": c.preset,
            "train_config": record["train_config"], "dataset": self.data.report,
            "preprocessing": {"sample_rate": SAMPLE_RATE, "trim": dataclasses.asdict(c.trim),
                              "max_frames": c.max_frames, "resampler": audio_path.SOXR,
                              "normalize_features": c.normalize_features},  # also in `features` (cmn, cvn)
            "augmentation": {"active": c.active, **{f.name: getattr(c, f.name)
                                                     for f in dataclasses.fields(AugmentConfig)}},
            "exclude_speakers": list(c.exclude_speakers),
            **{k: record[k] for k in ("steps", "epochs", "best_epoch", "metrics", "wall_time_s")},
        }  # fmt: skip
        save_checkpoint(path, "words", model, model.config, features=words_frontend_dict(self.frontend),
                        training=training)

    def details(self) -> dict[str, Any]:
        return {"preset": self.config.preset, "train_tokens": len(self.train_tokens),
                "dev_tokens": len(self.dev_tokens), "words": len(self.data.phonemes),
                "problems": self.data.report["problems"], "command": command_line(self.config)}


def initial_weights(path: str | os.PathLike[str], config: AWEConfig) -> dict[str, torch.Tensor]:
    """The weights of a words checkpoint to fine-tune from; a model of another shape is refused by name."""
    model, _ = load_model(path, kind="words")
    if model.config != config:
        raise ValueError(f"init_from {path}: a model of another shape than the preset's "
                         f"({model.config} vs {config})")
    return model.state_dict()


def train_job(config: WordsTrainConfig) -> Trainer:
    """Job: train a MultiViewAWE on `config.data` through the one loop; returns a TrainResult."""
    return Trainer(WordsHooks(config), config, config.out, resume=config.resume)

# --------------------------------------------------------------------------------------------- the CLI


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", action="append", required=True, metavar="DIR",
                        help="folder with words.csv (path,word,speaker[,split]); repeat for several")
    parser.add_argument("--out", required=True, help="checkpoint to write (.safetensors)")
    parser.add_argument("--resume", action="store_true", help="continue from <out>.resume.safetensors")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_arguments(parser, WordsTrainConfig)  # every setting(...) field of the config: --epochs, --lr, --no-cache, ...


def config_from_args(args: argparse.Namespace) -> WordsTrainConfig:
    return settings_from_args(WordsTrainConfig, args, data=[str(p) for p in args.data], out=str(args.out),
                              resume=bool(getattr(args, "resume", False)))


def train(args: argparse.Namespace) -> Job:
    return train_job(config_from_args(args))


