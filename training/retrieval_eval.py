"""Scoring the text-to-audio retrieval model: `earshot eval retrieval` (mAP@10, R@1/5/10 of one checkpoint or an
ensemble, beside random and untrained baselines) and the embeddings and similarities that the trainer's
validation (training/retrieval_train.py) shares. Its arguments: training/retrieval_settings.py."""

from __future__ import annotations

import argparse
import copy
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from core.checkpoints import load_model
from core.device import limit_threads, resolve_device
from models.frontends import PasstMelConfig
from models.retrieval import AISFX_TOWERS, RetrievalModel
from training.caption_data import CaptionItem, SkipReport, load_caption_dataset, pad_batch
from training.ranking import correct_from_captions, ensemble_similarity, require_finite, retrieval_metrics
from training.retrieval_features import (
    MelSet,
    load_aisfx_features,
    load_mels,
    load_text_features,
    read_precomputed_aisfx,
)

Job = Generator[dict[str, Any], None, Any]



def text_is_frozen(model: RetrievalModel) -> bool:
    return model.config.text.freeze == "all"


def embed_captions(
    model: RetrievalModel, captions: Sequence[str], text_features: dict[str, torch.Tensor] | None
) -> torch.Tensor:
    """(B, E) unit caption vectors; from cached features when the text encoder is frozen."""
    if text_features is None:
        return model.embed_text(list(captions))
    device = model.log_tau.device
    feats = torch.stack([text_features[c] for c in captions]).to(device)  # (B, H)
    return F.normalize(model.text_proj(feats), dim=-1)


def embed_clips(
    model: RetrievalModel, mels: Sequence[torch.Tensor], batch: int = 32,
    audio_features: torch.Tensor | None = None,
) -> torch.Tensor:
    """(N, E) unit clip vectors of whole clips (eval), shortest first so padding stays small."""
    device = model.log_tau.device
    if audio_features is not None:
        return model.embed_audio_features(audio_features.to(device)).float().cpu()
    order = sorted(range(len(mels)), key=lambda i: mels[i].shape[-1])
    out = torch.empty(len(mels), model.config.embed_dim)
    for i in range(0, len(order), batch):
        idx = order[i : i + batch]
        x, lengths = pad_batch([mels[j].float() for j in idx])
        out[idx] = model.embed_audio(x.to(device), lengths).float().cpu()
    return out


def similarity_matrix(
    model: RetrievalModel, data: MelSet, text_features: dict[str, torch.Tensor] | None,
    audio_features: torch.Tensor | None = None, batch: int = 32,
) -> tuple[torch.Tensor, list[str], list[int]]:
    """(n_captions, n_clips) cosine similarities, caption texts, and each caption's clip."""
    texts = [c for caps in data.captions for c in caps]
    clip_of = [i for i, caps in enumerate(data.captions) for _ in caps]
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        audio = embed_clips(model, data.mels, batch, audio_features)
        text = torch.cat([embed_captions(model, texts[i : i + 256], text_features).float().cpu()
                          for i in range(0, len(texts), 256)])
    model.train(was_training)
    require_finite(audio, "audio embeddings of the clips")  # a broken model gets a message, never a score
    require_finite(text, "text embeddings of the captions")
    return text @ audio.t(), texts, clip_of


def score(sim: torch.Tensor, texts: list[str], clip_of: list[int]) -> dict[str, float]:
    """Metrics where a clip with the same caption text as the query counts as correct."""
    return retrieval_metrics(sim, correct_from_captions(texts, clip_of, sim.shape[1]))


# ------------------------------------------------------------------------------------------------ evaluation


def _setup_threads(n: int) -> None:
    if n and n > 0:
        torch.set_num_threads(n)
    else:
        limit_threads(1)



def random_baseline(n_captions: int, n_clips: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n_captions, n_clips, generator=torch.Generator().manual_seed(seed))


def untrained_copy(model: RetrievalModel, seed: int = 0) -> RetrievalModel:
    """The same pipeline with a freshly initialised audio side (PaSST + audio projection); text side kept."""
    torch.manual_seed(seed)
    fresh = copy.deepcopy(model)
    device = next(model.parameters()).device
    fresh.audio_encoder = type(model.audio_encoder)(model.config.audio).to(device)
    for layer in fresh.audio_proj.modules():  # one Linear, or Linear -> ReLU -> Linear
        if isinstance(layer, nn.Linear):
            layer.reset_parameters()
    return fresh.eval()


def evaluate(args: argparse.Namespace) -> Any:  # noqa: ANN401 - Job[dict] (a generator)
    """`earshot eval retrieval`: mAP@10, R@1/5/10 of one checkpoint or an ensemble (+ baselines)."""
    _setup_threads(getattr(args, "threads", 0))
    device = resolve_device(getattr(args, "device", "auto"))
    paths = [Path(p) for p in str(args.model).split(",") if p]
    cache = Path(args.cache_dir) if getattr(args, "cache_dir", None) else None
    yield {"step": 0, "total": len(paths), "message": "reading data"}
    split = None if args.split in ("", "all") else args.split
    items = load_caption_dataset(args.data, split)
    if split and not items:
        every = load_caption_dataset(args.data, None)
        if every and all(it.split is None for it in every):  # no split column: nothing to choose from
            items, args.split = every, "all (no split column: every clip evaluated)"
    if not items:
        raise ValueError(f"{args.data}: no clips in split {args.split!r}")
    sims, model = [], None
    data, audio = None, None
    for i, path in enumerate(paths):
        model, ckpt = load_model(path, kind="retrieval", device=device)
        if model.config.audio_tower in AISFX_TOWERS:
            data, audio = eval_aisfx_set(model, items, Path(args.data), cache)
        else:
            frontend = PasstMelConfig(**{k: v for k, v in ckpt.features.items() if k != "kind"})
            data, audio = load_mels(items, frontend, cache), None
        if sims and len(data.items) != sims[0].shape[1]:
            raise ValueError(f"{path.name}: scores {len(data.items)} clips, the ensemble's first model "
                             f"{sims[0].shape[1]}: models of one ensemble need the same clips")
        text_features = load_text_features(model, [c for caps in data.captions for c in caps], cache) \
            if text_is_frozen(model) else None
        sim, texts, clip_of = similarity_matrix(model, data, text_features, audio)
        sims.append(sim)
        yield {"step": i + 1, "total": len(paths), "message": path.name}
    assert data is not None and model is not None
    result: dict[str, Any] = {"model": [str(p) for p in paths], "data": str(args.data), "split": args.split,
                              "clips": len(data.items), "captions": len(texts)}
    if data.skipped.count:
        result["skipped"] = data.skipped.message()
    result["metrics"] = _short(score(ensemble_similarity(sims), texts, clip_of))
    baselines = set(getattr(args, "baseline", None) or [])
    if getattr(args, "baselines", False):
        baselines |= {"random", "untrained"}
    if "random" in baselines:
        runs = [score(random_baseline(len(texts), len(data.items), s), texts, clip_of) for s in range(10)]
        result["random"] = _short({k: float(np.mean([r[k] for r in runs])) for k in runs[0]})
    if "untrained" in baselines:
        fresh = untrained_copy(model)  # aiSFX: the frozen tower's features through a fresh projection
        sim, _, _ = similarity_matrix(fresh, data, text_features, audio)
        result["untrained"] = _short(score(sim, texts, clip_of))
    return result


def eval_aisfx_set(model: RetrievalModel, items: Sequence[CaptionItem], data: Path,
                   cache_dir: Path | None = None) -> tuple[MelSet, torch.Tensor]:
    """The items' frozen aiSFX features (each clip's first AISFX_SECONDS) for scoring an aiSFX or student
    checkpoint. A corpus's precomputed features (DATA/aisfx/, made with the published weights) are used only when
    the checkpoint's tower is those weights unchanged (the aiSFX tower, frozen, no trained top block); other clips
    are computed (and kept in `cache_dir` when given)."""
    c = model.config.audio
    published = model.config.audio_tower == "aisfx" and c.frozen and not c.train_top_block
    precomputed = read_precomputed_aisfx(data) if published else {}
    skipped = SkipReport()
    kept, feats = load_aisfx_features(model, items, skipped, precomputed, cache_dir)
    return MelSet([items[i] for i in kept], [], skipped), feats


def _short(metrics: dict[str, float]) -> dict[str, float]:
    keys = ("mAP@10", "R@1", "R@5", "R@10", "mean_rank", "median_rank")
    return {k: round(metrics[k], 4) for k in keys if k in metrics}
