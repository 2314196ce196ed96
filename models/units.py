"""A units checkpoint's model: the VQ-VAE (speech features -> unit ids), the codebook inverter (unit ids ->
magnitude spectrogram in a speaker's voice) and the speaker table both embed. `from_config_dict` is the
"units" kind's builder (core/kinds.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from models.inverter import CodebookInverter, InverterConfig, dataclass_from_dict
from models.vqvae import STRIDE, VQVAE, VQVAEConfig


@dataclass
class UnitsConfig:
    """A units checkpoint: VQ-VAE + codebook inverter + the speaker table both embed (index = speaker id)."""

    vqvae: VQVAEConfig = field(default_factory=VQVAEConfig)
    inverter: InverterConfig = field(default_factory=InverterConfig)
    speakers: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        v, inv = self.vqvae, self.inverter
        if inv.code_dim != v.code_dim:
            raise ValueError(f"inverter code_dim {inv.code_dim} != VQ-VAE code_dim {v.code_dim}")
        if inv.upsample != STRIDE:
            raise ValueError(f"inverter upsample {inv.upsample} != VQ-VAE stride {STRIDE}")
        if self.speakers and not len(self.speakers) == v.n_speakers == inv.n_speakers:
            raise ValueError(
                f"{len(self.speakers)} speakers named, but the VQ-VAE has {v.n_speakers} and the inverter"
                f" {inv.n_speakers} speaker embeddings"
            )


class UnitsModel(nn.Module):
    def __init__(self, config: UnitsConfig) -> None:
        super().__init__()
        self.config = config
        self.vqvae = VQVAE(config.vqvae)
        self.inverter = CodebookInverter(config.inverter)

    def speaker_id(self, speaker: str | int) -> int:
        if isinstance(speaker, int):
            if not 0 <= speaker < self.config.vqvae.n_speakers:
                raise ValueError(f"speaker id {speaker} out of range 0..{self.config.vqvae.n_speakers - 1}")
            return speaker
        try:
            return self.config.speakers.index(speaker)
        except ValueError:
            raise ValueError(f"unknown speaker {speaker!r}; known: {', '.join(self.config.speakers)}") from None

    @torch.no_grad()
    def units_to_magnitude(
        self, codes: torch.Tensor, speaker: str | int, num_frames: int | None = None
    ) -> torch.Tensor:
        """Unit ids (U,) -> linear magnitude spectrogram (T, n_fft // 2 + 1) in `speaker`'s voice."""
        vectors = self.vqvae.code_vectors(codes[codes >= 0]).unsqueeze(0)  # (1, U, C)
        spk = torch.tensor([self.speaker_id(speaker)], device=vectors.device)
        mag, _ = self.inverter(vectors, spk, num_frames=num_frames)
        return mag[0]

    @torch.no_grad()
    def resynthesize(self, feats: torch.Tensor, speaker: str | int, n_iter: int = 32) -> torch.Tensor:
        """Features (T, D) -> waveform (N,) at the inverter's sample rate, spoken by `speaker`."""
        mag = self.units_to_magnitude(self.vqvae.encode(feats), speaker, num_frames=feats.shape[0])
        return self.inverter.griffin_lim(mag, n_iter=n_iter)


def from_config_dict(d: dict[str, Any]) -> UnitsModel:
    return UnitsModel(dataclass_from_dict(UnitsConfig, d))
