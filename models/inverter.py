"""Codebook inverter: VQ-VAE codebook vectors -> linear magnitude spectrogram -> Griffin-Lim waveform.

After Tjandra et al. (ZeroSpeech 2020): the units (one codebook vector per 40 ms) are repeated to the 10-ms
frame rate, passed through multi-scale 1-D convolutions and a small Transformer, with a learned speaker
embedding added so resynthesis can speak with another voice, and projected to the spectrogram of
`models.frontends.LinearSpectrogram` (the shared 16 kHz framing, `models.framing`), its training target. The
loss is L2 on log-magnitudes (`log_magnitude_loss`), which weights quiet and loud bins alike. Why, and the
layers in detail: docs/models.md.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchaudio

from models import framing
from models.configs import check_fields

T = TypeVar("T")


@dataclass
class InverterConfig:
    code_dim: int = 64  # size of a codebook vector (VQVAEConfig.code_dim)
    upsample: int = 4  # r = frame rate / unit rate (VQ-VAE total stride)
    d_model: int = 256
    kernel_sizes: tuple[int, ...] = (3, 5, 7)  # parallel convolutions of one multi-scale block
    n_conv_blocks: int = 2
    n_layers: int = 3  # Transformer layers
    n_heads: int = 4
    d_ff: int = 1024
    dropout: float = 0.1
    n_speakers: int = 1
    sample_rate: int = framing.SAMPLE_RATE
    n_fft: int = framing.N_FFT
    win_length: int = framing.WIN_LENGTH
    hop_length: int = framing.HOP_LENGTH
    log_floor: float = 1e-4  # magnitudes below this are clipped before the log in the loss

    def __post_init__(self) -> None:
        if any(k % 2 == 0 for k in self.kernel_sizes):
            raise ValueError(f"kernel sizes must be odd (same-length convolutions), got {self.kernel_sizes}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        if self.n_speakers < 1:
            raise ValueError("n_speakers must be at least 1")

    @property
    def n_bins(self) -> int:
        return self.n_fft // 2 + 1


def dataclass_from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """Build dataclass `cls` from a plain (JSON) dict: nested dataclasses recurse, lists become tuples where
    the field is a tuple, unknown keys are refused and missing keys take their defaults."""
    if not isinstance(data, dict):
        raise TypeError(f"{cls.__name__}: expected a dict, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    check_fields(cls, data)
    kwargs = {}
    for name, value in data.items():
        hint = hints.get(name)
        if dataclasses.is_dataclass(hint) and isinstance(value, dict):
            value = dataclass_from_dict(hint, value)
        elif typing.get_origin(hint) is tuple and isinstance(value, list):
            value = tuple(value)
        kwargs[name] = value
    return cls(**kwargs)


# ---------------------------------------------------------------------------------------------- pieces


def sinusoidal_positions(length: int, dim: int, device: torch.device | None = None) -> torch.Tensor:
    """(length, dim) sine/cosine position table of "Attention is all you need"."""
    pos = torch.arange(length, device=device, dtype=torch.float32)[:, None]  # (T, 1)
    freq = torch.exp(torch.arange(0, dim, 2, device=device, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim, device=device)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq[: dim // 2])
    return table


class MultiScaleConvBlock(nn.Module):
    """Parallel same-length 1-D convolutions (kernel 3/5/7), summed, GELU, projection, residual."""

    def __init__(self, d_model: int, kernel_sizes: tuple[int, ...], dropout: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.convs = nn.ModuleList(nn.Conv1d(d_model, d_model, k, padding=k // 2) for k in kernel_sizes)
        self.proj = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # x (B, T, C), mask (B, T, 1): padding is zeroed so it never leaks into real frames
        h = self.norm(x).transpose(1, 2)  # (B, C, T)
        h = sum(conv(h) for conv in self.convs).transpose(1, 2)  # (B, T, C)
        h = self.proj(F.gelu(h))
        return (x + self.dropout(h)) * mask


# ---------------------------------------------------------------------------------------------- model


class CodebookInverter(nn.Module):
    """Codebook vectors (B, T_u, code_dim) + speaker ids (B,) -> linear magnitudes (B, T, n_fft // 2 + 1)."""

    def __init__(self, config: InverterConfig) -> None:
        super().__init__()
        self.config = c = config
        self.in_proj = nn.Linear(c.code_dim, c.d_model)
        self.speaker = nn.Embedding(c.n_speakers, c.d_model)
        self.convs = nn.ModuleList(
            MultiScaleConvBlock(c.d_model, c.kernel_sizes, c.dropout) for _ in range(c.n_conv_blocks)
        )
        layer = nn.TransformerEncoderLayer(
            c.d_model, c.n_heads, c.d_ff, c.dropout, activation="gelu", batch_first=True, norm_first=True
        )
        # enable_nested_tensor is a fast path for post-norm layers only; turn it off to avoid its warning
        self.transformer = nn.TransformerEncoder(layer, c.n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(c.d_model)
        self.out = nn.Linear(c.d_model, c.n_bins)

    def forward(
        self,
        vectors: torch.Tensor,
        speaker_ids: torch.Tensor,
        lengths: torch.Tensor | None = None,
        target: torch.Tensor | None = None,
        num_frames: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """vectors (B, T_u, C); lengths (B,) valid *frames* (10 ms); target (B, T, F) linear magnitudes.

        The output has T = target.shape[1], else `num_frames`, else T_u * upsample frames. Returns
        (magnitudes (B, T, F), loss or None); padded frames of the output are zero.
        """
        B, U, _ = vectors.shape
        T = target.shape[1] if target is not None else (num_frames or U * self.config.upsample)
        log_mag, mask = self._log_magnitude(vectors, speaker_ids, lengths, T)
        mag = torch.exp(log_mag) * mask
        loss = None
        if target is not None:
            loss = log_magnitude_loss(log_mag, target, mask, self.config.log_floor)
        return mag, loss

    def _log_magnitude(
        self, vectors: torch.Tensor, speaker_ids: torch.Tensor, lengths: torch.Tensor | None, T: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        B = vectors.shape[0]
        x = vectors.repeat_interleave(c.upsample, dim=1)  # (B, U * r, C): unit rate -> frame rate
        if x.shape[1] < T:  # a target one frame longer than U * r: hold the last unit
            x = F.pad(x.transpose(1, 2), (0, T - x.shape[1]), mode="replicate").transpose(1, 2)
        x = x[:, :T]  # (B, T, C)
        if lengths is None:
            lengths = torch.full((B,), T, device=x.device)
        valid = torch.arange(T, device=x.device)[None, :] < lengths.to(x.device)[:, None]  # (B, T)
        mask = valid.unsqueeze(-1).to(x.dtype)  # (B, T, 1)
        h = (self.in_proj(x) + self.speaker(speaker_ids.to(x.device))[:, None, :]) * mask  # (B, T, D)
        for block in self.convs:
            h = block(h, mask)
        h = h + sinusoidal_positions(T, c.d_model, x.device).to(h.dtype)
        h = self.transformer(h, src_key_padding_mask=~valid)
        return self.out(self.norm(h)), mask  # (B, T, F) log-magnitudes

    @torch.no_grad()
    def griffin_lim(self, mag: torch.Tensor, n_iter: int = 32, length: int | None = None) -> torch.Tensor:
        return griffin_lim(mag, self.config, n_iter=n_iter, length=length)


def log_magnitude_loss(
    log_mag: torch.Tensor, target: torch.Tensor, mask: torch.Tensor, floor: float
) -> torch.Tensor:
    """Masked MSE between predicted log-magnitudes (B, T, F) and log(max(target, floor)); mask (B, T, 1)."""
    err = (log_mag - torch.log(target.clamp(min=floor))).square() * mask
    return err.sum() / (mask.sum() * log_mag.shape[-1]).clamp(min=1)


def griffin_lim(
    mag: torch.Tensor, config: InverterConfig | None = None, n_iter: int = 32, length: int | None = None
) -> torch.Tensor:
    """Linear magnitudes (T, F) / (B, T, F) -> waveform (N,) / (B, N); N = (T - 1) * hop, or `length`
    (zero-padded or cut: torchaudio's own `length` fails when it implies more frames than T).

    The random phase initialisation draws from torch's global generator (seed it for reproducible audio).
    """
    c = config or InverterConfig()
    transform = torchaudio.transforms.GriffinLim(
        n_fft=c.n_fft, n_iter=n_iter, win_length=c.win_length, hop_length=c.hop_length, power=1.0
    ).to(mag.device)
    T = mag.shape[-2]
    # GriffinLim's STFT reflect-pads n_fft/2 samples, which needs a signal longer than that: pad very short
    # inputs with silent frames and cut the result back to the frames asked for.
    min_frames = c.n_fft // (2 * c.hop_length) + 2
    mag = F.pad(mag.float().clamp(min=0), (0, 0, 0, max(0, min_frames - T)))
    wave = transform(mag.transpose(-1, -2))[..., : max(0, T - 1) * c.hop_length]  # GriffinLim wants (..., F, T)
    if length is not None:
        wave = F.pad(wave, (0, max(0, length - wave.shape[-1])))[..., :length]
    return wave


def from_config_dict(d: dict[str, Any]) -> CodebookInverter:
    return CodebookInverter(dataclass_from_dict(InverterConfig, d))
