"""Training and evaluation of multi-view acoustic word embeddings (models/awe.py) on spoken-word folders.

Data: one or more folders with `words.csv` (`path,word,speaker[,split][,synthetic][,phonemes]`); the FSDD
`metadata.csv` has the same columns plus more and is accepted too. Each file is decoded to 16 kHz mono,
trimmed of leading/trailing silence and turned into MFCC+Δ+ΔΔ frames once; features are cached in memory
and on disk (`<out>.cache/`, one .npy per file keyed by a hash of its bytes and the feature settings).
Bad input is reported and skipped: unreadable, empty or silent files, words missing from CMUdict (unless a
`phonemes` column gives ARPAbet), rows without a path or word. Recordings longer than `max_frames` after
trimming are truncated and counted.

Training follows Rhodes & Bains: batch 256, Adam at 5e-4; when the dev AP has not improved for `patience`
(4) epochs the learning rate is divided by 10 and the weights reset to the best ones; training stops when
the learning rate falls below 1e-7 (or at `max_epochs` / `max_minutes`). Batches group tokens of similar
length and hold several tokens per word, since the multi-view loss needs same-word positives and
different-word negatives. Split: the `split` column (train / dev|val|valid / test...); a folder without a
dev split gives a deterministic 10% of its training rows to dev.

Resume: after every epoch `<out>.resume.safetensors` holds the model, the best weights, the optimiser
moments (flattened tensors) and, as JSON metadata, the epoch, step, learning rate, patience counter,
history and the torch RNG state — no pickle. It is written atomically, so a job closed mid-epoch leaves
the state of the last finished epoch; `--resume` continues from it.
"""

from __future__ import annotations

import argparse
import copy
import csv
import dataclasses
import hashlib
import json
import math
import os
import shlex
import string
import time
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from models.awe import AWEConfig, EncoderConfig, MultiViewAWE
from models.frontends import MFCC, MFCCConfig, frontend_from_dict, frontend_to_dict
from models.phonemes import (
    DIGIT_WORDS,
    PAD_ID,
    WordNotInDictionaryError,
    default_lexicon,
    encode,
    normalise_word,
    parse_phoneme_string,
)
from training import audio as audio_path
from training import distributed as ddp
from training.audio import TrimConfig
from training.checkpoints import (
    CheckpointError,
    load_model,
    safetensors_metadata,
    save_checkpoint,
    write_safetensors,
)
from training.device import resolve_device
from training.metrics import cross_view_ap, dtw_pairwise_ap, word_discrimination_ap

Job = Generator[dict[str, Any], None, Any]

SAMPLE_RATE = 16000
DEV_SPLITS = ("dev", "val", "valid", "validation")
PRESETS = ("paper", "small", "tiny")
_EXAMPLES = 5  # names listed per problem in reports


@dataclass
class WordsTrainConfig:
    data: list[str] = field(default_factory=list)
    out: str = "words.safetensors"
    preset: str = "small"  # paper (AWEConfig defaults) | small | tiny
    batch_size: int = 256
    lr: float = 5e-4
    warmup_steps: int = 300  # linear learning-rate warm-up; without it the post-norm encoders can collapse
    clip_norm: float = 1.0  # gradient-norm clipping (0: off)
    lr_decay: float = 10.0  # divide the learning rate by this ...
    patience: int = 4  # ... after this many epochs without a better dev AP, and reset to the best weights
    min_lr: float = 1e-7  # stop when the learning rate falls below this
    max_epochs: int = 100
    max_minutes: float | None = None
    tokens_per_word: int = 4  # tokens of one word kept together in a batch (positives for the loss)
    max_frames: int = 300  # 3 s after trimming; longer recordings are truncated
    dev_fraction: float = 0.1  # of train, for folders without a dev split
    seed: int = 0
    device: str = "auto"
    num_threads: int = 0  # 0: all cores but one
    cache: bool = True
    cache_dir: str | None = None  # None: <out>.cache next to the checkpoint
    resume: bool = False
    trim: TrimConfig = field(default_factory=TrimConfig)

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; choose one of {', '.join(PRESETS)}")
        if self.batch_size < 2:
            raise ValueError("batch_size must be at least 2 (the loss needs negatives)")
        if self.lr <= 0 or self.max_epochs < 1 or self.tokens_per_word < 1 or self.max_frames < 10:
            raise ValueError("lr must be > 0, max_epochs and tokens_per_word >= 1, max_frames >= 10")


def model_config(preset: str) -> AWEConfig:
    """AWEConfig for a preset: 'paper' is the paper's model (6 + 4 layers, d 256)."""
    if preset == "paper":
        return AWEConfig()
    if preset == "small":  # a laptop-CPU model: 2 + 2 pre-norm layers, d 128 (about 0.7 M parameters)
        return AWEConfig(d_model=128, d_ff=512, acoustic=EncoderConfig(2, 4), phoneme=EncoderConfig(2, 4),
                         norm_first=True)
    if preset == "tiny":
        return AWEConfig.tiny()
    raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")


# ------------------------------------------------------------------------------------------------ data


@dataclass
class WordToken:
    feats: np.ndarray  # (T, 39) float32
    word: str  # normalised spelling: the identity for metrics and the loss
    speaker: str
    split: str  # train | dev | test... (after the dev hold-out)
    path: str
    synthetic: bool = False


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


def decode_16k(data: bytes) -> np.ndarray:
    """Audio file bytes -> float32 mono at 16 kHz (the one audio path, `training.audio`)."""
    return audio_path.decode_bytes(data, SAMPLE_RATE).audio


def trim_silence(wave: np.ndarray, trim: TrimConfig | None = None) -> np.ndarray | None:
    """Cut leading/trailing silence of a 16-kHz wave; None if it is all silence (`training.audio`)."""
    return audio_path.trim_silence(wave, trim, SAMPLE_RATE)


class FeatureCache:
    """MFCC features keyed by a hash of the file bytes and the feature settings; memory + optional disk."""

    def __init__(self, frontend: MFCC, trim: TrimConfig, folder: Path | None) -> None:
        self.frontend, self.trim, self.folder = frontend, trim, folder
        settings = json.dumps([frontend_to_dict(frontend), dataclasses.asdict(trim), 1], sort_keys=True)
        self.salt = hashlib.sha1(settings.encode()).hexdigest()[:12]
        self.memory: dict[str, np.ndarray] = {}

    def features(self, path: Path) -> np.ndarray | None:
        """(T, 39) features of a file, or None if it is silent. Raises for unreadable files."""
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
        wave = trim_silence(decode_16k(data), self.trim)
        if wave is None:
            return None
        with torch.no_grad():
            feats = self.frontend(torch.from_numpy(wave)).numpy().astype(np.float32)  # (T, 39)
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
    frontend: MFCC,
    splits: Iterable[str] | None = None,
    trim: TrimConfig | None = None,
    max_frames: int = 300,
    cache_dir: Path | None = None,
    dev_fraction: float = 0.1,
    max_items: int | None = None,
    seed: int = 0,
) -> Job:
    """Job: read, trim, featurise and check the spoken words of `folders`; returns a `WordSet`.

    `splits` keeps only rows of those splits (after the dev hold-out); `max_items` keeps a seeded random
    subset of the rows before decoding.
    """
    if not folders:
        raise ValueError("no data folder given")
    problems = ProblemLog()
    lexicon = default_lexicon()
    cache = FeatureCache(frontend, trim or TrimConfig(), cache_dir)
    keep = set(splits) if splits is not None else None
    rows: list[tuple[Path, dict[str, str]]] = []
    for folder in map(Path, folders):
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder}: no such data folder")
        table = read_table(folder, problems)
        has_dev = any(r.get("split", "").lower() in DEV_SPLITS for r in table)
        for r in table:
            r["split"] = _split_of(r, has_dev, dev_fraction)
            if keep is None or r["split"] in keep:
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
        yield from _featurise(rows, cache, lexicon, max_frames, problems, tokens, phonemes, unknown)
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
    return WordSet([t for t in tokens if t.word in phonemes], phonemes, report)


def _featurise(
    rows: Sequence[tuple[Path, dict[str, str]]], cache: FeatureCache, lexicon: Any, max_frames: int,  # noqa: ANN401
    problems: ProblemLog, tokens: list[WordToken], phonemes: dict[str, list[int]], unknown: set[str],
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
        if word in unknown:
            problems.add("not_in_dictionary", repr(row["word"]))
            continue
        path = folder / row["path"]
        try:
            feats = cache.features(path)
        except (OSError, RuntimeError, ValueError, sf.LibsndfileError) as e:
            problems.add("unreadable", f"{row['path']} ({str(e)[:60]})")
            continue
        if feats is None:
            problems.add("silent", row["path"])
            continue
        if len(feats) > max_frames:
            problems.add("truncated", f"{row['path']} ({len(feats)} frames)")
            feats = feats[:max_frames]
        synthetic = row.get("synthetic", "").lower() in ("1", "true", "yes")
        tokens.append(WordToken(feats, word, row.get("speaker") or "?", row["split"], row["path"], synthetic))


# --------------------------------------------------------------------------------------------- batches


def make_batches(
    lengths: np.ndarray, word_ids: np.ndarray, batch_size: int, tokens_per_word: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Token indices in batches of at most `batch_size`, similar lengths together, words kept in groups.

    Each word's tokens are shuffled and cut into groups of about `tokens_per_word`; groups are sorted by
    mean length (with ±20% noise so batches differ between epochs), packed into batches, and the batch
    order shuffled.
    """
    groups: list[np.ndarray] = []
    for w in np.unique(word_ids):
        idx = rng.permutation(np.flatnonzero(word_ids == w))
        groups += np.array_split(idx, math.ceil(len(idx) / tokens_per_word))
    keys = np.array([lengths[g].mean() for g in groups]) * rng.uniform(0.8, 1.2, len(groups))
    batches, current = [], []
    for g in np.argsort(keys, kind="stable"):
        if current and len(current) + len(groups[g]) > batch_size:
            batches.append(np.array(current))
            current = []
        current.extend(groups[g].tolist())
    if current:
        batches.append(np.array(current))
    return [batches[i] for i in rng.permutation(len(batches))]


def pad_features(feats: Sequence[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """List of (T_i, D) -> (B, T_max, D) zero-padded, (B,) lengths."""
    lengths = torch.tensor([len(f) for f in feats])
    out = torch.zeros(len(feats), int(lengths.max()), feats[0].shape[1])
    for i, f in enumerate(feats):
        out[i, : len(f)] = torch.from_numpy(f)
    return out, lengths


def pad_phonemes(seqs: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([len(s) for s in seqs])
    out = torch.full((len(seqs), int(lengths.max())), PAD_ID, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s)
    return out, lengths


@torch.no_grad()
def embed_tokens(model: MultiViewAWE, feats: Sequence[np.ndarray], batch_size: int = 128) -> np.ndarray:
    """(N, D) acoustic embeddings, batched by length."""
    device = next(model.parameters()).device
    order = np.argsort([len(f) for f in feats], kind="stable")
    out = np.zeros((len(feats), model.config.d_model), dtype=np.float32)
    for s in range(0, len(order), batch_size):
        idx = order[s : s + batch_size]
        x, lengths = pad_features([feats[i] for i in idx])
        out[idx] = model.embed_acoustic(x.to(device), lengths.to(device)).float().cpu().numpy()
    return out


@torch.no_grad()
def embed_words(model: MultiViewAWE, phonemes: Sequence[Sequence[int]], batch_size: int = 256) -> np.ndarray:
    """(M, D) written-view embeddings of phoneme id sequences."""
    device = next(model.parameters()).device
    out = []
    for s in range(0, len(phonemes), batch_size):
        ids, lengths = pad_phonemes(phonemes[s : s + batch_size])
        out.append(model.embed_phonemes(ids.to(device), lengths.to(device)).float().cpu().numpy())
    return np.concatenate(out) if out else np.zeros((0, model.config.d_model), dtype=np.float32)


def evaluate_embeddings(model: MultiViewAWE, tokens: Sequence[WordToken], phonemes: dict[str, list[int]]) -> dict:
    """Acoustic word-discrimination AP and cross-view AP of `model` on `tokens`."""
    was_training = model.training
    model.eval()
    try:
        acoustic = embed_tokens(model, [t.feats for t in tokens])
        words = sorted({t.word for t in tokens})
        written = embed_words(model, [phonemes[w] for w in words])
    finally:
        model.train(was_training)
    labels = [t.word for t in tokens]
    return {"ap": word_discrimination_ap(acoustic, labels),
            "cross_view_ap": cross_view_ap(acoustic, labels, written, words)}


# -------------------------------------------------------------------------------------- resume state


def _resume_path(out: Path) -> Path:
    return out.with_name(out.stem + ".resume.safetensors")


def save_resume_state(
    path: Path, model: torch.nn.Module, best: dict[str, torch.Tensor], optimizer: torch.optim.Optimizer,
    scalars: dict[str, Any],
) -> None:  # fmt: skip
    """Model, best weights and optimiser tensors as safetensors; everything else as JSON metadata."""
    tensors = {f"model.{k}": v.detach().cpu().contiguous().clone() for k, v in model.state_dict().items()}
    tensors |= {f"best.{k}": v.detach().cpu().contiguous().clone() for k, v in best.items()}
    opt = optimizer.state_dict()
    for pid, state in opt["state"].items():
        for name, value in state.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optim.{pid}.{name}"] = value.detach().cpu().contiguous().clone()
    tensors["rng.torch"] = torch.get_rng_state()
    meta = {"scalars": json.dumps(scalars), "param_groups": json.dumps(opt["param_groups"])}
    write_safetensors(path, tensors, meta)


def _read_metadata(path: Path) -> dict[str, str]:
    """The `__metadata__` strings of a resume state."""
    try:
        return safetensors_metadata(path)
    except CheckpointError as e:
        raise CheckpointError(f"{path.name}: not a readable resume state ({e})") from e


def load_resume_state(
    path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Restore model, optimiser and torch RNG from `path`; returns (best weights, scalars)."""
    try:
        tensors = load_file(str(path))
        meta = _read_metadata(path)
        scalars = json.loads(meta["scalars"])
        groups = json.loads(meta["param_groups"])
    except (SafetensorError, OSError, KeyError, ValueError) as e:
        raise CheckpointError(f"{path.name}: cannot read the resume state ({e})") from e
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    best = {k[5:]: v for k, v in tensors.items() if k.startswith("best.")}
    state: dict[int, dict[str, torch.Tensor]] = {}
    for k, v in tensors.items():
        if k.startswith("optim."):
            _, pid, name = k.split(".", 2)
            state.setdefault(int(pid), {})[name] = v
    optimizer.load_state_dict({"state": state, "param_groups": groups})
    torch.set_rng_state(tensors["rng.torch"])
    return best, scalars


# --------------------------------------------------------------------------------------------- training


def warmup_lr(lr: float, step: int, warmup_steps: int) -> float:
    """The learning rate of optimiser step `step` (0-based): linear ramp to `lr` over `warmup_steps`."""
    return lr * min(1.0, (step + 1) / warmup_steps) if warmup_steps > 0 else lr


def command_line(config: WordsTrainConfig) -> str:
    """The `earshot train words` command that reproduces `config`."""
    parts = ["earshot", "train", "words"]
    for d in config.data:
        parts += ["--data", d]
    parts += ["--out", config.out, "--preset", config.preset, "--epochs", str(config.max_epochs),
              "--batch-size", str(config.batch_size), "--lr", str(config.lr), "--seed", str(config.seed),
              "--max-frames", str(config.max_frames), "--tokens-per-word", str(config.tokens_per_word),
              "--warmup-steps", str(config.warmup_steps), "--clip-norm", str(config.clip_norm)]
    if config.max_minutes is not None:
        parts += ["--max-minutes", str(config.max_minutes)]
    return shlex.join(parts)


def train_job(config: WordsTrainConfig) -> Job:
    """Job: train a MultiViewAWE on `config.data`; returns a summary dict (see module docstring)."""
    t_start = time.monotonic()
    threads = config.num_threads or max(1, (os.cpu_count() or 1) - 1)
    torch.set_num_threads(threads)
    ctx, device = ddp.setup(resolve_device(config.device))
    out = Path(config.out)
    frontend = MFCC(MFCCConfig())
    cache_dir = Path(config.cache_dir or out.with_name(out.stem + ".cache")) if config.cache else None
    if not ctx.is_main:
        ddp.barrier(ctx)  # rank 0 fills the feature cache first; the others then read it
    data: WordSet = yield from load_words(config.data, frontend, ("train", "dev"), config.trim, config.max_frames,
                                          cache_dir, config.dev_fraction, seed=config.seed)
    if ctx.is_main:
        ddp.barrier(ctx)
    train_tokens, dev_tokens = data.subset(["train"]), data.subset(["dev"])
    if len({t.word for t in train_tokens}) < 2:
        raise ValueError("training needs at least two different words in the train split")
    if len({t.word for t in dev_tokens}) < 2:
        raise ValueError("the dev split needs at least two different words (add rows or a dev split)")
    word_index = {w: i for i, w in enumerate(sorted(data.phonemes))}
    lengths = np.array([len(t.feats) for t in train_tokens])
    word_ids = np.array([word_index[t.word] for t in train_tokens])

    torch.manual_seed(config.seed)
    mcfg = model_config(config.preset)
    if config.max_frames > mcfg.max_len:
        raise ValueError(f"max_frames {config.max_frames} exceeds the model's max_len {mcfg.max_len}")
    model = MultiViewAWE(mcfg).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    gather = (lambda x: ddp.gather_rows(x, ctx)) if ctx.enabled else None  # noqa: E731
    s: dict[str, Any] = {"epoch": 0, "step": 0, "lr": config.lr, "best_ap": -1.0, "best_epoch": 0,
                         "best_metrics": {}, "bad_epochs": 0, "history": [], "wall_time_s": 0.0, "done": False,
                         "model_config": dataclasses.asdict(mcfg)}
    best = copy.deepcopy(model.state_dict())
    resume_file = _resume_path(out)
    if config.resume and not resume_file.is_file():  # stopped before its first epoch ended: nothing saved yet
        yield {"step": 0, "message": f"no resume state ({resume_file.name}): starting from the beginning"}
    elif config.resume:
        saved = json.loads(_read_metadata(resume_file).get("scalars", "{}")).get("model_config")
        if saved is not None and saved != json.loads(json.dumps(dataclasses.asdict(mcfg))):
            raise ValueError(f"{resume_file.name} was saved by a different model (preset); "
                             f"resume with the same --preset, or start afresh without --resume")
        best, s = load_resume_state(resume_file, model, optimizer)
        yield {"step": s["step"], "message": f"resumed after epoch {s['epoch']} (lr {s['lr']:.3g})",
               "epoch": s["epoch"], "lr": s["lr"]}
    wall_before = s["wall_time_s"]
    t_train = time.monotonic()
    step_model = ddp.wrap(model, ctx, device)  # the forward (and backward) of the training steps
    steps_per_epoch = len(make_batches(lengths, word_ids, config.batch_size, config.tokens_per_word,
                                       np.random.default_rng(0)))
    total = steps_per_epoch * config.max_epochs
    summary_training = {
        "data": [str(d) for d in config.data], "command": command_line(config), "preset": config.preset,
        "train_config": dataclasses.asdict(config), "dataset": data.report,
        "preprocessing": {"sample_rate": SAMPLE_RATE, "trim": dataclasses.asdict(config.trim),
                          "max_frames": config.max_frames},
    }  # fmt: skip

    def save_best() -> None:
        if not ctx.is_main:
            return
        training = summary_training | {"steps": s["step"], "epochs": s["epoch"], "best_epoch": s["best_epoch"],
                                       "metrics": {f"dev_{k}": v for k, v in s["best_metrics"].items()},
                                       "wall_time_s": round(wall_before + time.monotonic() - t_train, 1)}
        best_model = copy.deepcopy(model)
        best_model.load_state_dict(best)
        save_checkpoint(out, "words", best_model, model.config, features=frontend_to_dict(frontend),
                        training=training)

    out_of_time = False
    model.train()
    while not s["done"] and s["epoch"] < config.max_epochs and not out_of_time:
        epoch = s["epoch"] + 1
        rng = np.random.default_rng([config.seed, epoch])  # the epoch's order needs no saved state
        batches = make_batches(lengths, word_ids, config.batch_size, config.tokens_per_word, rng)
        losses = []
        for b in batches:
            if len(b) < ctx.world_size:
                continue  # a last batch too small to give every process a token
            mine = [b[i] for i in ddp.local_rows(len(b), ctx)]  # this process's acoustic tokens
            feats, flen = pad_features([train_tokens[i].feats for i in mine])
            pids, plen = pad_phonemes([data.phonemes[train_tokens[i].word] for i in b])
            loss, _ = step_model(feats.to(device), flen.to(device), pids.to(device), plen.to(device),
                                 torch.from_numpy(word_ids[b]).to(device), gather)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.clip_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
            for g in optimizer.param_groups:
                g["lr"] = warmup_lr(s["lr"], s["step"], config.warmup_steps)
            optimizer.step()
            s["step"] += 1
            losses.append(loss.item())
            yield {"step": s["step"], "total": total, "loss": losses[-1], "epoch": epoch, "lr": s["lr"],
                   "dev_ap": s["best_metrics"].get("ap", float("nan")), "message": f"epoch {epoch}"}
            late = config.max_minutes is not None and time.monotonic() - t_start > 60 * config.max_minutes
            if ddp.agree(late, ctx, device):  # every process stops at the same step
                out_of_time = True
                break
        metrics = evaluate_embeddings(model, dev_tokens, data.phonemes)
        s["epoch"] = epoch
        s["history"].append({"epoch": epoch, "loss": float(np.mean(losses)), "lr": s["lr"],
                             "dev_ap": metrics["ap"], "dev_cross_view_ap": metrics["cross_view_ap"]})
        message = f"epoch {epoch}: loss {np.mean(losses):.4f}, dev AP {metrics['ap']:.4f}"
        if metrics["ap"] > s["best_ap"]:
            s.update(best_ap=metrics["ap"], best_epoch=epoch, best_metrics=metrics, bad_epochs=0)
            best = copy.deepcopy(model.state_dict())
            save_best()
            message += " (best)"
        else:
            s["bad_epochs"] += 1
            if s["bad_epochs"] >= config.patience:
                s["lr"] /= config.lr_decay
                s["bad_epochs"] = 0
                model.load_state_dict(best)  # reset to the best weights at the lower learning rate
                for g in optimizer.param_groups:
                    g["lr"] = s["lr"]
                message += f"; lr -> {s['lr']:.3g}, back to epoch {s['best_epoch']}'s weights"
                if s["lr"] < config.min_lr:
                    s["done"] = True
        s["wall_time_s"] = wall_before + time.monotonic() - t_train
        if ctx.is_main:
            save_resume_state(resume_file, model, best, optimizer, s)
        yield {"step": s["step"], "total": total, "loss": float(np.mean(losses)), "epoch": epoch, "lr": s["lr"],
               "dev_ap": metrics["ap"], "dev_cross_view_ap": metrics["cross_view_ap"], "message": message}
    if not out.is_file():
        save_best()
    ddp.teardown(ctx)
    stop = ("learning rate below min_lr" if s["done"] else "time limit" if out_of_time
            else "max_epochs reached")  # fmt: skip
    return {
        "checkpoint": str(out), "resume_state": str(resume_file), "preset": config.preset,
        "epochs": s["epoch"], "steps": s["step"], "best_epoch": s["best_epoch"],
        "dev_ap": s["best_metrics"].get("ap"), "dev_cross_view_ap": s["best_metrics"].get("cross_view_ap"),
        "final_lr": s["lr"], "stopped": stop, "history": s["history"],
        "train_tokens": len(train_tokens), "dev_tokens": len(dev_tokens), "words": len(data.phonemes),
        "problems": data.report["problems"], "device": str(device), "threads": threads,
        "wall_time_s": round(s["wall_time_s"], 1), "command": command_line(config),
    }  # fmt: skip


# ------------------------------------------------------------------------------------------ evaluation


def dtw_features(feats: np.ndarray) -> np.ndarray:
    """Per-utterance mean and variance normalised MFCC+Δ+ΔΔ, the usual input of the DTW baseline."""
    return (feats - feats.mean(0)) / (feats.std(0) + 1e-5)


def evaluate_job(
    model_path: str | os.PathLike[str], folders: Sequence[str | os.PathLike[str]], split: str = "test",
    max_items: int | None = None, device: str = "auto", dtw: bool = True, seed: int = 0,
) -> Job:  # fmt: skip
    """Job: AP, cross-view AP, and the MFCC+DTW baseline AP on the same pairs, with wall times."""
    model, ckpt = load_model(model_path, kind="words", device=resolve_device(device))
    frontend = frontend_from_dict(ckpt.features) if ckpt.features.get("kind") else MFCC()
    pre = ckpt.training.get("preprocessing", {})
    trim = TrimConfig(**pre["trim"]) if isinstance(pre.get("trim"), dict) else TrimConfig()
    max_frames = int(pre.get("max_frames", model.config.max_len))
    splits = DEV_SPLITS[:1] if split in DEV_SPLITS else None if split == "all" else (split,)
    data: WordSet = yield from load_words(folders, frontend, splits, trim, max_frames, None, max_items=max_items,
                                          seed=seed)
    tokens = data.tokens
    if len({t.word for t in tokens}) < 2:
        raise ValueError(f"split {split!r} has fewer than two different words to discriminate")
    labels = [t.word for t in tokens]
    yield {"step": 0, "total": 2, "message": f"embedding {len(tokens)} tokens"}
    t0 = time.perf_counter()
    acoustic = embed_tokens(model, [t.feats for t in tokens])
    sims = acoustic @ acoustic.T  # (N, N) the cosine matrix, timed as part of the embedding method
    embed_s = time.perf_counter() - t0
    words = sorted(set(labels))
    written = embed_words(model, [data.phonemes[w] for w in words])
    n = len(tokens)
    pairs = n * (n - 1) // 2
    positives = int(sum(c * (c - 1) // 2 for c in np.unique(labels, return_counts=True)[1]))
    result: dict[str, Any] = {
        "model": str(model_path), "data": [str(f) for f in folders], "split": split,
        "tokens": n, "words": len(words), "speakers": len({t.speaker for t in tokens}),
        "synthetic_tokens": sum(t.synthetic for t in tokens), "pairs": pairs, "positive_pairs": positives,
        "ap": word_discrimination_ap(acoustic, labels),
        "cross_view_ap": cross_view_ap(acoustic, labels, written, words),
        "embedding_time_s": round(embed_s, 3), "embedding_pairs_per_s": round(pairs / max(embed_s, 1e-9)),
        "problems": data.report["problems"],
    }  # fmt: skip
    del sims
    if dtw:
        yield {"step": 1, "total": 2, "message": f"DTW baseline on {pairs} pairs"}
        t0 = time.perf_counter()
        result["dtw_ap"] = dtw_pairwise_ap([dtw_features(t.feats) for t in tokens], labels)
        result["dtw_time_s"] = round(time.perf_counter() - t0, 2)
        result["dtw_pairs_per_s"] = round(pairs / max(result["dtw_time_s"], 1e-9), 1)
    yield {"step": 2, "total": 2, "message": "done"}
    return result


# --------------------------------------------------------------------------------------------- the CLI


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    d = WordsTrainConfig()
    parser.add_argument("--data", action="append", required=True, metavar="DIR",
                        help="folder with words.csv (path,word,speaker[,split]); repeat for several")
    parser.add_argument("--out", required=True, help="checkpoint to write (.safetensors)")
    parser.add_argument("--preset", choices=PRESETS, default=d.preset, help="model size")
    parser.add_argument("--epochs", type=int, default=d.max_epochs, help="maximum number of epochs")
    parser.add_argument("--batch-size", type=int, default=d.batch_size)
    parser.add_argument("--lr", type=float, default=d.lr)
    parser.add_argument("--patience", type=int, default=d.patience, help="epochs without dev improvement")
    parser.add_argument("--warmup-steps", type=int, default=d.warmup_steps, help="linear lr warm-up steps")
    parser.add_argument("--clip-norm", type=float, default=d.clip_norm, help="gradient-norm clipping (0: off)")
    parser.add_argument("--tokens-per-word", type=int, default=d.tokens_per_word)
    parser.add_argument("--max-frames", type=int, default=d.max_frames)
    parser.add_argument("--max-minutes", type=float, default=None, help="stop after this much wall time")
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--device", default=d.device, help="auto, cpu, cuda, mps")
    parser.add_argument("--threads", type=int, default=d.num_threads, help="torch threads (0: cores - 1)")
    parser.add_argument("--no-cache", action="store_true", help="do not cache features on disk")
    parser.add_argument("--resume", action="store_true", help="continue from <out>.resume.safetensors")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def config_from_args(args: argparse.Namespace) -> WordsTrainConfig:
    g = lambda name, default: getattr(args, name, default)  # noqa: E731 - the GUI may pass fewer fields
    d = WordsTrainConfig()
    return WordsTrainConfig(
        data=[str(p) for p in args.data], out=str(args.out), preset=g("preset", d.preset),
        max_epochs=g("epochs", d.max_epochs), batch_size=g("batch_size", d.batch_size), lr=g("lr", d.lr),
        patience=g("patience", d.patience), warmup_steps=g("warmup_steps", d.warmup_steps),
        clip_norm=g("clip_norm", d.clip_norm), tokens_per_word=g("tokens_per_word", d.tokens_per_word),
        max_frames=g("max_frames", d.max_frames), max_minutes=g("max_minutes", None), seed=g("seed", d.seed),
        device=g("device", d.device), num_threads=g("threads", d.num_threads), cache=not g("no_cache", False),
        resume=g("resume", False),
    )  # fmt: skip


def train(args: argparse.Namespace) -> Job:
    return train_job(config_from_args(args))


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="a words checkpoint (.safetensors)")
    parser.add_argument("--data", action="append", required=True, metavar="DIR", help="folder with words.csv")
    parser.add_argument("--split", default="test", help="split to evaluate: test, test_heldout, dev, train, all")
    parser.add_argument("--max-items", type=int, default=None, help="evaluate a seeded random subset")
    parser.add_argument("--no-dtw", action="store_true", help="skip the MFCC+DTW baseline")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", action="store_true", help="print JSON")


def evaluate(args: argparse.Namespace) -> Job:
    return evaluate_job(args.model, [str(p) for p in args.data], getattr(args, "split", "test"),
                        getattr(args, "max_items", None), getattr(args, "device", "auto"),
                        not getattr(args, "no_dtw", False), getattr(args, "seed", 0))
