"""The units model's input with a frozen pretrained speech front end: MFCC+Δ+ΔΔ frames, each with the
speech_embedding frame of its unit appended (the "mfcc+speech_embedding" features of a units checkpoint)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from models.vqvae import STRIDE

SPEECH_FRONTEND_KIND = "mfcc+speech_embedding"


class SpeechUnitsFrontend(nn.Module):
    """The units input with a frozen pretrained speech front end: MFCC+Δ+ΔΔ frames (T, 39), each with the
    speech_embedding frame (models/speech_embedding.py, 96-d) of its unit appended -> (T, 39 + 96).

    Unit u covers MFCC frames 4u .. 4u + 3; its embedding frame is the causal window (0.78 s) that ends at
    sample (u + 1)·640, the end of the unit's own 40-ms hop, which arrives before the Δ/ΔΔ context of the
    unit's MFCC frames does: the embedding adds no delay. The audio is zero-padded at its end to U whole hops
    (U = ceil(T / 4)) so that the last unit has a frame too; a stream pushes the same zeros when it ends.
    The embedding model is frozen: the VQ-VAE normalises its frames with the training corpus's mean/std like
    the MFCCs; `VQVAEConfig.encoder_dims` / `recon_dims` choose which part the encoder reads and the decoder
    rebuilds."""

    def __init__(self, mfcc: nn.Module, embedding: nn.Module) -> None:
        super().__init__()
        self.mfcc, self.embedding = mfcc, embedding.eval()
        hop = int(mfcc.config.hop_length)
        if embedding.hop_samples != STRIDE * hop:
            raise ValueError(f"the speech embedding's hop ({embedding.hop_samples} samples) is not one unit "
                             f"({STRIDE} x {hop} samples)")

    @property
    def config(self) -> Any:  # noqa: ANN401 - the MFCC config: the framing of the 10-ms frames
        return self.mfcc.config

    @property
    def dim(self) -> int:
        return int(self.mfcc.dim) + int(self.embedding.dim)

    @property
    def mfcc_dim(self) -> int:
        return int(self.mfcc.dim)

    def embedding_samples(self, num_frames: int) -> int:
        """Samples the embedding frames of `num_frames` MFCC frames cover: ceil(T / 4) whole hops."""
        return -(-num_frames // STRIDE) * self.embedding.hop_samples

    def combine(self, mfcc: torch.Tensor, emb: torch.Tensor, first: int = 0) -> torch.Tensor:
        """MFCC frames first .. first + t − 1 (t, 39) + embedding frames from unit first // 4 on (u, 96) ->
        (t, 135): each frame gets its unit's embedding."""
        unit = torch.arange(first, first + mfcc.shape[0]) // STRIDE - first // STRIDE  # (t,)
        return torch.cat([mfcc, emb[unit].to(mfcc.dtype)], dim=1)

    @torch.no_grad()
    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        """16-kHz wave (N,) -> (T, 39 + 96), T = the MFCC's frame count."""
        feats = self.mfcc(wave)  # (T, 39)
        need = self.embedding_samples(feats.shape[0])
        emb = self.embedding(F.pad(wave, (0, max(0, need - wave.shape[-1])))[:need], pad="causal")  # (U, 96)
        return self.combine(feats, emb)

    def to_dict(self) -> dict[str, Any]:
        """The checkpoint's `features`: {"kind": "mfcc+speech_embedding", "mfcc": ..., "speech_embedding": ...}."""
        from models.frontends import frontend_to_dict
        from models.speech_embedding import config_to_dict

        return {"kind": SPEECH_FRONTEND_KIND, "mfcc": frontend_to_dict(self.mfcc),
                "speech_embedding": config_to_dict(self.embedding.config)}
