"""A words model's embeddings in batches (spoken tokens by length, written words as phoneme ids) and the
numbers of its dev evaluation: the trainer (training/words_train.py) and the held-out evaluation
(training/speech_eval.py) share them, so the evaluation needs no trainer."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from models.awe import MultiViewAWE
from models.phonemes import PAD_ID
from training.metrics import cross_view_ap, word_discrimination_ap
from training.words_data import WordToken


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


def dtw_features(feats: np.ndarray) -> np.ndarray:
    """Per-utterance mean and variance normalised MFCC+Δ+ΔΔ, the usual input of the DTW baseline."""
    return (feats - feats.mean(0)) / (feats.std(0) + 1e-5)
