"""Multi-view acoustic word embeddings with transformers (Rhodes & Bains; loss from He, Wang & Livescu 2017).

Two encoders map into one L2-normalised space (cosine = dot product): the acoustic view (frames -> a
transformer on MFCC+Δ+ΔΔ, or a bidirectional GRU on the speech_embedding frames of models/speech_embedding.py
-> mean over valid frames) and the phoneme view (ARPAbet ids from models/phonemes.py -> transformer -> mean, or
a learned first token). The loss is the multi-view margin loss (default objectives obj0 + obj2, He et al.'s
best), over the k most offending negatives in the batch; tokens of the same word are never each other's
negatives. The four objectives written out and the negative mining: docs/models.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from models.configs import check_fields
from models.phonemes import PAD_ID, VOCAB_SIZE

OBJECTIVES = ("obj0", "obj1", "obj2", "obj3")


@dataclass
class EncoderConfig:
    n_layers: int
    n_heads: int


@dataclass
class AWEConfig:
    input_dim: int = 39  # MFCC + Δ + ΔΔ
    d_model: int = 256
    d_ff: int = 1024
    dropout: float = 0.1
    acoustic: EncoderConfig = dataclasses.field(default_factory=lambda: EncoderConfig(n_layers=6, n_heads=4))
    phoneme: EncoderConfig = dataclasses.field(default_factory=lambda: EncoderConfig(n_layers=4, n_heads=16))
    norm_first: bool = False  # post-norm as in Vaswani et al.; True trains more easily when deep
    pos_base: float = 5000.0  # sinusoid base (the paper's choice; Vaswani uses 10000)
    max_len: int = 1024  # frames (10.24 s at a 10 ms hop) or phonemes
    vocab_size: int = VOCAB_SIZE
    phoneme_pooling: str = "mean"  # "mean" over valid tokens | "first": a learned token at position 0
    margin: float = 0.4
    k_negatives: int = 5  # most offending negatives averaged per positive pair
    objectives: tuple[str, ...] = ("obj0", "obj2")
    acoustic_encoder: str = "transformer"  # "transformer" (acoustic.n_layers layers) | "gru" (gru_layers)
    gru_layers: int = 2  # bidirectional GRU layers, D/2 units per direction (acoustic_encoder="gru")

    def __post_init__(self) -> None:
        if self.acoustic_encoder not in ("transformer", "gru"):
            raise ValueError(f"acoustic_encoder must be 'transformer' or 'gru', not {self.acoustic_encoder!r}")
        if self.acoustic_encoder == "gru" and (self.gru_layers < 1 or self.d_model % 2):
            raise ValueError("the GRU encoder needs gru_layers >= 1 and an even d_model")
        if self.phoneme_pooling not in ("mean", "first"):
            raise ValueError(f"phoneme_pooling must be 'mean' or 'first', not {self.phoneme_pooling!r}")
        bad = [o for o in self.objectives if o not in OBJECTIVES]
        if bad or not self.objectives:
            raise ValueError(f"objectives must be a non-empty subset of {OBJECTIVES}, got {self.objectives}")
        for view in (self.acoustic, self.phoneme):
            if self.d_model % view.n_heads:
                raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {view.n_heads}")
        if self.k_negatives < 1:
            raise ValueError("k_negatives must be at least 1")

    @classmethod
    def tiny(cls, **overrides: Any) -> AWEConfig:
        """A small config for tests and quick experiments."""
        base: dict[str, Any] = dict(
            d_model=32, d_ff=64, dropout=0.0,
            acoustic=EncoderConfig(n_layers=2, n_heads=2), phoneme=EncoderConfig(n_layers=1, n_heads=4),
        )  # fmt: skip
        base.update(overrides)
        return cls(**base)


# --------------------------------------------------------------------------------------------- layers


def sinusoidal_positions(max_len: int, dim: int, base: float = 5000.0) -> torch.Tensor:
    """(max_len, dim) table: sin on even, cos on odd channels, wavelengths up to 2π·base."""
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]  # (L, 1)
    inv_freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(base) / dim))  # (dim/2,)
    table = torch.zeros(max_len, dim)
    table[:, 0::2] = torch.sin(pos * inv_freq)
    table[:, 1::2] = torch.cos(pos * inv_freq[: dim // 2])
    return table


def padding_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """(B,) lengths -> (B, max_len) bool, True at padding (the convention of nn.TransformerEncoder)."""
    return torch.arange(max_len, device=lengths.device)[None, :] >= lengths[:, None]


def masked_mean(x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
    """Mean of (B, T, D) over the valid (non-pad) steps -> (B, D)."""
    keep = (~pad).unsqueeze(-1).to(x.dtype)  # (B, T, 1)
    return (x * keep).sum(1) / keep.sum(1).clamp_min(1.0)


class SequenceEncoder(nn.Module):
    """Positions + transformer encoder over already-embedded inputs (B, T, D)."""

    def __init__(self, config: AWEConfig, view: EncoderConfig, positions: torch.Tensor) -> None:
        super().__init__()
        self.max_len = config.max_len
        self.register_buffer("positions", positions, persistent=False)  # rebuilt from config, not saved
        self.drop = nn.Dropout(config.dropout)
        layer = nn.TransformerEncoderLayer(
            config.d_model, view.n_heads, config.d_ff, config.dropout,
            activation="relu", batch_first=True, norm_first=config.norm_first,
        )  # fmt: skip
        final_norm = nn.LayerNorm(config.d_model) if config.norm_first else None
        self.encoder = nn.TransformerEncoder(layer, view.n_layers, norm=final_norm, enable_nested_tensor=False)

    def forward(self, h: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        T = h.shape[1]
        if T > self.max_len:
            raise ValueError(f"sequence of {T} steps is longer than max_len {self.max_len}")
        h = self.drop(h + self.positions[:T])  # (B, T, D)
        return self.encoder(h, src_key_padding_mask=pad)  # (B, T, D)


def _check_lengths(lengths: torch.Tensor, batch: int, T: int) -> torch.Tensor:
    lengths = torch.as_tensor(lengths).long()
    if lengths.shape != (batch,):
        raise ValueError(f"lengths must have shape ({batch},), got {tuple(lengths.shape)}")
    if (lengths < 1).any() or (lengths > T).any():
        raise ValueError(f"lengths must lie in 1..{T}, got {lengths.tolist()}")
    return lengths


# ------------------------------------------------------------------------------------------------ loss


def cosine_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(N, D), (M, D) -> (N, M) 1 - cos."""
    return 1.0 - F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T


def topk_hinge(pos: torch.Tensor, neg: torch.Tensor, valid: torch.Tensor, margin: float, k: int) -> torch.Tensor:
    """Mean over anchors of the mean hinge over each anchor's k most offending valid negatives.

    pos (N,) positive distances, neg (N, M) negative distances, valid (N, M) bool. Anchors without any
    valid negative are left out; with fewer than k, their valid ones are averaged.
    """
    k = min(k, neg.shape[1])
    if k == 0:
        return pos.sum() * 0.0
    closest = neg.masked_fill(~valid, float("inf")).topk(k, dim=1, largest=False).indices  # (N, k)
    chosen_valid = valid.gather(1, closest).to(pos.dtype)  # (N, k)
    hinge = F.relu(margin + pos[:, None] - neg.gather(1, closest)) * chosen_valid  # (N, k)
    count = chosen_valid.sum(1)  # (N,)
    has = count > 0
    if not has.any():
        return pos.sum() * 0.0  # keeps the graph: every item is the same word
    return (hinge.sum(1)[has] / count[has]).mean()


def obj0(x: torch.Tensor, c: torch.Tensor, inv: torch.Tensor, margin: float, k: int) -> torch.Tensor:
    """Acoustic anchor x, its written word c+, other written words as negatives."""
    d_xc = cosine_distance(x, c)  # (B, M)
    pos = d_xc.gather(1, inv[:, None]).squeeze(1)  # (B,)
    other = inv[:, None] != torch.arange(c.shape[0], device=c.device)[None, :]  # (B, M)
    return topk_hinge(pos, d_xc, other, margin, k)


def obj1(x: torch.Tensor, c: torch.Tensor, inv: torch.Tensor, margin: float, k: int) -> torch.Tensor:
    """Written anchor c+, its acoustic token x, other written words as negatives."""
    pos = cosine_distance(x, c).gather(1, inv[:, None]).squeeze(1)  # (B,)
    d_cc = cosine_distance(c, c)[inv]  # (B, M)
    other = inv[:, None] != torch.arange(c.shape[0], device=c.device)[None, :]
    return topk_hinge(pos, d_cc, other, margin, k)


def obj2(x: torch.Tensor, c: torch.Tensor, inv: torch.Tensor, margin: float, k: int) -> torch.Tensor:
    """Written anchor c+, its acoustic token x, acoustic tokens of other words as negatives."""
    d_cx = cosine_distance(c, x)  # (M, B)
    pos = d_cx[inv, torch.arange(x.shape[0], device=x.device)]  # (B,)
    other = inv[:, None] != inv[None, :]  # (B, B)
    return topk_hinge(pos, d_cx[inv], other, margin, k)


def obj3(x: torch.Tensor, c: torch.Tensor, inv: torch.Tensor, margin: float, k: int) -> torch.Tensor:
    """Acoustic anchor x, its written word c+, acoustic tokens of other words as negatives."""
    pos = cosine_distance(x, c).gather(1, inv[:, None]).squeeze(1)  # (B,)
    other = inv[:, None] != inv[None, :]  # (B, B)
    return topk_hinge(pos, cosine_distance(x, x), other, margin, k)


_OBJECTIVE_FNS = {"obj0": obj0, "obj1": obj1, "obj2": obj2, "obj3": obj3}


@torch.autocast("cuda", enabled=False)
def multiview_loss(
    x: torch.Tensor,
    c: torch.Tensor,
    inv: torch.Tensor,
    margin: float = 0.4,
    k: int = 5,
    objectives: Sequence[str] = ("obj0", "obj2"),
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Sum of the chosen objectives. x (B, D) acoustic, c (M, D) distinct written words, inv (B,) x -> c."""
    x, c = x.float(), c.float()  # margins between cosines are finer than bf16 resolves
    parts = {name: _OBJECTIVE_FNS[name](x, c, inv, margin, k) for name in objectives}
    return torch.stack(list(parts.values())).sum(), parts


# ----------------------------------------------------------------------------------------------- model


class MultiViewAWE(nn.Module):
    def __init__(self, config: AWEConfig) -> None:
        super().__init__()
        self.config = config
        D = config.d_model
        positions = sinusoidal_positions(config.max_len, D, config.pos_base)
        # MFCC channels differ in scale by orders of magnitude (c0 is log energy); normalise per frame
        self.input_norm = nn.LayerNorm(config.input_dim)
        self.input_proj = nn.Linear(config.input_dim, D)
        if config.acoustic_encoder == "gru":  # (B, T, D) -> (B, T, D): D/2 per direction
            self.acoustic_rnn = nn.GRU(D, D // 2, config.gru_layers, batch_first=True, bidirectional=True,
                                       dropout=config.dropout if config.gru_layers > 1 else 0.0)
        else:
            self.acoustic = SequenceEncoder(config, config.acoustic, positions)
        self.phoneme_emb = nn.Embedding(config.vocab_size, D, padding_idx=PAD_ID)
        if config.phoneme_pooling == "first":
            self.first_token = nn.Parameter(torch.randn(D) * 0.02)
        self.phoneme = SequenceEncoder(config, config.phoneme, positions)

    def embed_acoustic(self, feats: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(B, T, input_dim) frames, (B,) valid lengths -> (B, D) unit vectors."""
        B, T, _ = feats.shape
        lengths = _check_lengths(lengths, B, T).to(feats.device)
        pad = padding_mask(lengths, T)  # (B, T)
        h = self.input_proj(self.input_norm(feats))  # (B, T, D)
        h = self.acoustic_gru(h, lengths) if self.config.acoustic_encoder == "gru" else self.acoustic(h, pad)
        return F.normalize(masked_mean(h, pad), dim=-1)

    def acoustic_gru(self, h: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, T, D) bidirectional GRU over each sequence's valid steps (padding stays out of
        the backward direction); padded steps come back as zeros."""
        T = h.shape[1]
        if T > self.config.max_len:
            raise ValueError(f"sequence of {T} steps is longer than max_len {self.config.max_len}")
        packed = nn.utils.rnn.pack_padded_sequence(h, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.acoustic_rnn(packed)
        return nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=T)[0]

    def embed_phonemes(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(B, L) phoneme ids (pad = 0), (B,) valid lengths -> (B, D) unit vectors."""
        B, L = ids.shape
        lengths = _check_lengths(lengths, B, L).to(ids.device)
        h = self.phoneme_emb(ids)  # (B, L, D)
        if self.config.phoneme_pooling == "first":
            h = torch.cat([self.first_token.expand(B, 1, -1), h], dim=1)  # (B, 1 + L, D)
            lengths = lengths + 1
        pad = padding_mask(lengths, h.shape[1])
        h = self.phoneme(h, pad)
        pooled = h[:, 0] if self.config.phoneme_pooling == "first" else masked_mean(h, pad)
        return F.normalize(pooled, dim=-1)

    def forward(
        self,
        feats: torch.Tensor,
        feat_lengths: torch.Tensor,
        phon_ids: torch.Tensor,
        phon_lengths: torch.Tensor,
        word_ids: torch.Tensor,
        gather: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Multi-view loss for a batch of B spoken tokens and their written words (one row per token).

        word_ids (B,) tells which tokens share a word; each distinct word is embedded once.
        Data-parallel: `feats` holds only this process's b tokens and `gather` (core/distributed.py)
        collects the (B, D) acoustic embeddings of all processes; the phoneme inputs cover the whole batch.
        """
        x = self.embed_acoustic(feats, feat_lengths)  # (b, D)
        if gather is not None:
            x = gather(x)  # (B, D)
        words, first, inv = unique_first(word_ids.to(feats.device))
        c = self.embed_phonemes(phon_ids[first], torch.as_tensor(phon_lengths)[first])  # (M, D)
        cfg = self.config
        return multiview_loss(x, c, inv, cfg.margin, cfg.k_negatives, cfg.objectives)


def unique_first(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Distinct values (M,), the index of each one's first occurrence (M,), and each item's slot (B,)."""
    words, inv = torch.unique(ids, return_inverse=True)
    B = ids.shape[0]
    first = torch.full((words.shape[0],), B, dtype=torch.long, device=ids.device)
    first = first.scatter_reduce(0, inv, torch.arange(B, device=ids.device), reduce="amin")
    return words, first, inv


def from_config_dict(d: Mapping[str, Any]) -> MultiViewAWE:
    """Rebuild the model from its config dict (as stored in a checkpoint)."""
    return MultiViewAWE(config_from_mapping(d))


def config_from_mapping(d: Mapping[str, Any]) -> AWEConfig:
    check_fields(AWEConfig, d)
    kwargs = dict(d)
    for view in ("acoustic", "phoneme"):
        if isinstance(kwargs.get(view), Mapping):
            kwargs[view] = EncoderConfig(**kwargs[view])
    if "objectives" in kwargs:
        kwargs["objectives"] = tuple(kwargs["objectives"])
    return AWEConfig(**kwargs)
