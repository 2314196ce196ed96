"""Frozen features of the retrieval trainer, computed once and cached in memory and on disk (`--cache-dir`):
log-mels per clip, a frozen PaSST's features per clip, frozen text-encoder outputs per caption and frozen
aiSFX features per clip. Keys are the audio files' content hashes (or paths and lengths) and the configs that
produced the features, so a changed file or setting misses and is recomputed."""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from core.checkpoints import safetensors_metadata, weights_digest, write_safetensors
from core.files import hash_file
from models.frontends import AisfxMel, PasstMel, PasstMelConfig
from models.retrieval import RetrievalModel
from training.caption_data import CaptionItem, SkipReport, load_items_audio, pad_batch

AISFX_SECONDS = 10.0  # aiSFX clip features read each clip's first 10 s (the corpus precompute's cap)
_MEMORY: dict[str, Any] = {}  # cache key -> computed features, for repeated runs in one process


def clear_memory_cache() -> None:
    _MEMORY.clear()


def file_hash(path: Path) -> str:
    """A feature cache's key for a file's bytes: the one file hasher."""
    return hash_file(path)


def _key(*parts: Any) -> str:
    return hashlib.sha1(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


@dataclass
class MelSet:
    """Log-mels of the readable clips of a data set, with their captions."""

    items: list[CaptionItem]  # readable items only
    mels: list[torch.Tensor]  # (n_mels, T_i) float16
    skipped: SkipReport

    @property
    def captions(self) -> list[list[str]]:
        return [it.captions for it in self.items]


def compute_mels(
    items: Sequence[CaptionItem], frontend: PasstMel, skipped: SkipReport
) -> tuple[list[int], list[torch.Tensor]]:
    """Decode, resample and turn each clip into a (n_mels, T) log-mel; returns (kept indices, mels)."""
    kept, mels = [], []
    with torch.inference_mode():
        for i, wave in load_items_audio(items, frontend.config.sample_rate, skipped):
            if wave.numel() <= frontend.config.n_fft // 2 + 1:  # too short for the reflect-padded STFT
                wave = F.pad(wave, (0, frontend.config.n_fft // 2 + 2 - wave.numel()))
            kept.append(i)
            mels.append(frontend(wave).to(torch.float16))
    return kept, mels


def load_mels(items: Sequence[CaptionItem], frontend_config: PasstMelConfig, cache_dir: Path | None) -> MelSet:
    """Log-mels for `items`, from the memory or disk cache when the same files were seen with the same front end."""
    hashes = [file_hash(it.path) if it.path.is_file() else f"missing:{it.path}" for it in items]
    key = "mels-" + _key(dataclasses.asdict(frontend_config), hashes)
    if key not in _MEMORY:
        path = cache_dir / f"{key}.safetensors" if cache_dir is not None else None
        if path is not None and path.is_file():
            t = load_file(str(path))
            offsets = t["offsets"].tolist()
            kept = t["index"].tolist()
            mels = [t["mel"][:, offsets[i] : offsets[i + 1]].clone() for i in range(len(kept))]
            report = SkipReport(**json.loads(safetensors_metadata(path)["skipped"]))
        else:
            report = SkipReport()
            kept, mels = compute_mels(items, PasstMel(frontend_config), report)
            if path is not None and mels:
                offsets = np.cumsum([0] + [m.shape[-1] for m in mels]).tolist()
                write_safetensors(path, {"mel": torch.cat(mels, dim=-1).contiguous(), "offsets": torch.tensor(offsets),
                                         "index": torch.tensor(kept)},
                                  {"skipped": json.dumps(dataclasses.asdict(report))})
        _MEMORY[key] = (kept, mels, report)
    kept, mels, report = _MEMORY[key]
    return MelSet([items[i] for i in kept], mels, report)


def compute_text_features(model: RetrievalModel, texts: Sequence[str], batch: int = 64) -> torch.Tensor:
    """(N, H) text-encoder outputs (before the projection) of a frozen text encoder."""
    enc = model.text_encoder
    was_training = enc.training
    enc.eval()
    with torch.inference_mode():
        out = torch.cat([enc(list(texts[i : i + batch])).float().cpu() for i in range(0, len(texts), batch)])
    enc.train(was_training)
    return out


def load_text_features(
    model: RetrievalModel, texts: Sequence[str], cache_dir: Path | None
) -> dict[str, torch.Tensor]:
    """caption -> (H,) frozen text features, cached by text config and the set of captions."""
    texts = sorted(set(texts))
    key = "text-" + _key(dataclasses.asdict(model.config.text), texts)
    if key not in _MEMORY:
        path = cache_dir / f"{key}.safetensors" if cache_dir is not None else None
        if path is not None and path.is_file():
            feats = load_file(str(path))["features"]
        else:
            feats = compute_text_features(model, texts)
            if path is not None:
                write_safetensors(path, {"features": feats.contiguous()}, {"n": str(len(texts))})
        _MEMORY[key] = dict(zip(texts, feats, strict=True))
    return _MEMORY[key]


def aisfx_features(model: RetrievalModel, items: Sequence[CaptionItem], skipped: SkipReport,
                   precomputed: dict[Path, torch.Tensor]) -> tuple[list[int], torch.Tensor]:
    """(kept indices, (n, 1024) frozen aiSFX features): precomputed ones where the data set has them (see
    training.sfx_corpus.embed_aisfx), the others computed here from each clip's first AISFX_SECONDS."""
    frontend, enc = AisfxMel(), model.audio_encoder.eval()
    sr = frontend.config.sample_rate
    kept, feats = [], []
    todo = [i for i, it in enumerate(items) if it.path.resolve() not in precomputed]
    computed = {}
    with torch.inference_mode():
        for i, wave in load_items_audio([items[i] for i in todo], sr, skipped):
            computed[todo[i]] = enc(frontend(wave[: int(AISFX_SECONDS * sr)])[None])[0].float()
    for i, it in enumerate(items):
        f = precomputed.get(it.path.resolve(), computed.get(i))
        if f is not None:
            kept.append(i)
            feats.append(f)
    return kept, torch.stack(feats) if feats else torch.zeros(0, model.audio_encoder.dim)


def load_aisfx_features(model: RetrievalModel, items: Sequence[CaptionItem], skipped: SkipReport,
                        precomputed: dict[Path, torch.Tensor], cache_dir: Path | None
                        ) -> tuple[list[int], torch.Tensor]:
    """`aisfx_features`, with the clips' computed features kept on disk (no precomputed ones: a tower other than
    the published aiSFX one, e.g. a distilled student, has none), keyed by the tower's config and weights and the
    files' bytes, so runs that fit different projections on one frozen tower pay for its forward passes once."""
    if precomputed or cache_dir is None:
        return aisfx_features(model, items, skipped, precomputed)
    hashes = [file_hash(it.path) if it.path.is_file() else f"missing:{it.path}" for it in items]
    key = "aisfx-" + _key(model.config.audio_tower, dataclasses.asdict(model.config.audio),
                          weights_digest(model.audio_encoder).hexdigest()[:20], AISFX_SECONDS, hashes)
    path = cache_dir / f"{key}.safetensors"
    if path.is_file():
        t = load_file(str(path))
        report = SkipReport(**json.loads(safetensors_metadata(path)["skipped"]))
        kept, feats = t["index"].tolist(), t["features"]
    else:
        report = SkipReport()
        kept, feats = aisfx_features(model, items, report, {})
        write_safetensors(path, {"features": feats.contiguous(), "index": torch.tensor(kept, dtype=torch.long)},
                          {"skipped": json.dumps(dataclasses.asdict(report))})
    skipped.count += report.count
    skipped.examples += report.examples[: max(0, 5 - len(skipped.examples))]
    return kept, feats


def read_precomputed_aisfx(data: Path) -> dict[Path, torch.Tensor]:
    """clip path -> (1024,) from DATA/aisfx/part-*.safetensors (rows index DATA/captions.csv); {} when absent.
    When the folder exists, only its clips are used (a stopped precompute is a random sample of every split)."""
    parts = sorted((data / "aisfx").glob("part-*.safetensors")) if data.is_dir() else []
    if not parts:
        return {}
    with open(data / "captions.csv", newline="") as f:
        paths = [(data / r["path"]).resolve() for r in csv.DictReader(f)]
    out = {}
    for part in parts:
        t = load_file(str(part))
        for row, feat in zip(t["rows"].tolist(), t["features"], strict=True):
            out[paths[row]] = feat
    return out


def compute_audio_features(model: RetrievalModel, mels: Sequence[torch.Tensor], batch: int = 16) -> torch.Tensor:
    """(N, D) features of a frozen PaSST: mean over each clip's windows."""
    enc = model.audio_encoder
    device = next(enc.parameters()).device
    enc.eval()
    out = []
    with torch.inference_mode():
        for i in range(0, len(mels), batch):
            x, lengths = pad_batch([m.float() for m in mels[i : i + batch]])
            out.append(enc.embed_windows(x.to(device), lengths).float().cpu())
    return torch.cat(out)


def load_audio_features(
    model: RetrievalModel, mels: MelSet, weights_id: str, cache_dir: Path | None
) -> torch.Tensor:
    key = "passt-" + _key(dataclasses.asdict(model.config.audio), weights_id, [it.path.name for it in mels.items],
                          [int(m.shape[-1]) for m in mels.mels])
    if key not in _MEMORY:
        path = cache_dir / f"{key}.safetensors" if cache_dir is not None else None
        if path is not None and path.is_file():
            feats = load_file(str(path))["features"]
        else:
            feats = compute_audio_features(model, mels.mels)
            if path is not None:
                write_safetensors(path, {"features": feats.contiguous()}, {})
        _MEMORY[key] = feats
    return _MEMORY[key]
