"""Acoustic word embeddings vs the MFCC+DTW baseline on the same FSDD test tokens: pairs compared per second,
total time and AP for both.

Both methods start from the same trimmed tokens; the model reads its own front end's features (the pretrained
speech_embedding frames for today's default), DTW reads MFCC+Δ+ΔΔ (feature extraction is not timed). The embedding
time covers the acoustic encoder over every token plus the full cosine-similarity matrix; the DTW time
covers one DTW alignment per pair (training/metrics.py). The model is the default checkpoint
(resources/models/words-default.safetensors) when present, else a freshly initialised 'small' model (its
AP is then that of random weights); the result says which.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from app.services.jobs import drain
from core.audio import SOXR, resampler_from_training
from core.checkpoints import load_model
from core.frontend_builder import words_frontend
from models.awe import MultiViewAWE
from training.metrics import dtw_pairwise_ap, word_discrimination_ap
from training.words_data import load_words
from training.words_train import (
    MFCC,
    TrimConfig,
    dtw_features,
    embed_tokens,
    model_config,
)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = ROOT / "resources" / "models" / "words-default.safetensors"
FSDD = ROOT.parent / "shared" / "data" / "fsdd"


def run(max_items: int = 150, data: Path = FSDD, seed: int = 0) -> dict:
    torch.manual_seed(seed)
    frontend = MFCC()
    if DEFAULT_MODEL.is_file():
        model, ckpt = load_model(DEFAULT_MODEL, kind="words")
        frontend = words_frontend(ckpt.features)  # the model's features (speech_embedding for words-default)
        which = f"default checkpoint {DEFAULT_MODEL.name} (preset {ckpt.training.get('preset', '?')})"
        pre = ckpt.training.get("preprocessing", {})
        trim, max_frames = TrimConfig(**pre.get("trim", {})), int(pre.get("max_frames", 300))
        resampler = resampler_from_training(ckpt.training)  # the model's: torchaudio's for words-default
    else:
        model = MultiViewAWE(model_config("small")).eval()
        which, trim, max_frames = "freshly initialised 'small' model (no default checkpoint)", TrimConfig(), 300
        resampler = SOXR
    words = drain(load_words([data], frontend, ("test",), trim, max_frames, max_items=max_items, seed=seed,
                             resampler=resampler))
    feats, labels = [t.feats for t in words.tokens], [t.word for t in words.tokens]
    mfcc = words if isinstance(frontend, MFCC) else drain(load_words(
        [data], MFCC(), ("test",), trim, 300, max_items=max_items, seed=seed, resampler=resampler))
    by_path = {t.path: t.feats for t in mfcc.tokens}
    mfcc_feats = [by_path[t.path] for t in words.tokens]  # the DTW baseline stays MFCC+DTW
    n = len(feats)
    pairs = n * (n - 1) // 2
    embed_tokens(model, feats[:8])  # warm-up
    t0 = time.perf_counter()
    emb = embed_tokens(model, feats)
    _ = emb @ emb.T  # (N, N) every pair's cosine
    embed_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    dtw_ap = dtw_pairwise_ap([dtw_features(f) for f in mfcc_feats], labels)
    dtw_s = time.perf_counter() - t0
    return {
        "data": f"{data.name} test split, {n} tokens (seeded subset), {len(set(labels))} words",
        "model": which, "threads": torch.get_num_threads(), "pairs": pairs,
        "mean_frames": round(float(np.mean([len(f) for f in feats])), 1),
        "embedding": {"total_s": round(embed_s, 4), "pairs_per_s": round(pairs / embed_s),
                      "ap": round(word_discrimination_ap(emb, labels), 4)},
        "dtw": {"total_s": round(dtw_s, 2), "pairs_per_s": round(pairs / dtw_s, 1), "ap": round(dtw_ap, 4)},
        "speedup": round(dtw_s / embed_s, 1),
    }  # fmt: skip
