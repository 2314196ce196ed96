"""PaSST: Patchout faSt Spectrogram Transformer (Koutini et al., 2021), the audio encoder of the CP-JKU
DCASE2023 task 6b retrieval system.

A ViT over the (B, 1, 128, T) log-mel image: 16x16 patches with overlap (stride 10) or without (stride 16),
separate frequency and time positional embeddings added on the patch grid, structured patchout (whole
frequency rows / time columns dropped, training only), class + distillation tokens, pre-norm blocks.
The output feature is the mean of the two token outputs (B, D), as in the official `forward`.

Parameter names and shapes are those of the official checkpoints (kkoutini/PaSST, e.g.
`passt-s-f128-p16-s10-ap.476.pt`), so their state dicts load with `load_official_weights`.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from models.configs import check_fields


@dataclass
class PasstConfig:
    embed_dim: int = 768
    depth: int = 12
    num_heads: int = 12
    mlp_ratio: float = 4.0
    qkv_bias: bool = True
    patch_size: int = 16
    stride: tuple[int, int] = (10, 10)  # (fstride, tstride)
    n_mels: int = 128
    input_tdim: int = 998  # mel frames the time positional embedding was built for (10 s)
    num_classes: int = 527  # AudioSet; the head is kept for key compatibility
    patchout: tuple[int, int] = (4, 50)  # structured patchout in training: (freq rows, time columns) dropped
    window_seconds: float = 10.0  # long audio is cut into windows of this length, embedded separately
    frames_per_second: float = 100.0  # mel frame rate (PaSST: 32 kHz, hop 320)
    drop_rate: float = 0.0
    attn_drop_rate: float = 0.0
    drop_path_rate: float = 0.0

    @property
    def grid(self) -> tuple[int, int]:
        """(F, T) patch grid of the positional embeddings; the official code uses img_size // stride."""
        return self.n_mels // self.stride[0], self.input_tdim // self.stride[1]

    @property
    def window_frames(self) -> int:
        return int(round(self.window_seconds * self.frames_per_second))


def passt_s() -> PasstConfig:
    """PaSST-S, stride 10: 12x99 grid for 10 s, patchout 4 freq / 50 time."""
    return PasstConfig()


def passt_n() -> PasstConfig:
    """PaSST-N, no patch overlap (stride 16): 8x62 grid, patchout 2 freq / 15 time."""
    return PasstConfig(stride=(16, 16), patchout=(2, 15))


def passt_s15() -> PasstConfig:
    """PaSST-S trained on 15-s inputs (1498 frames, 12x149 grid), patchout 4 freq / 80 time."""
    return PasstConfig(input_tdim=1498, window_seconds=15.0, patchout=(4, 80))


def passt_tiny(**overrides: Any) -> PasstConfig:
    """A few-hundred-k-parameter PaSST for tests and CPU experiments (same layout, smaller numbers)."""
    kwargs: dict[str, Any] = dict(
        embed_dim=64, depth=2, num_heads=2, stride=(16, 16), patchout=(1, 2), num_classes=10
    )
    kwargs.update(overrides)
    return PasstConfig(**kwargs)


PRESETS = {"passt_s": passt_s, "passt_n": passt_n, "passt_s15": passt_s15, "passt_tiny": passt_tiny}


# ---------------------------------------------------------------------------------------------- blocks


def drop_path(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Stochastic depth: drop the whole residual branch per sample (timm's DropPath)."""
    if p == 0.0 or not training:
        return x
    keep = 1.0 - p
    mask = x.new_empty((x.shape[0],) + (1,) * (x.dim() - 1)).bernoulli_(keep)
    return x * mask / keep


class PatchEmbed(nn.Module):
    """(B, 1, F_mel, T_mel) -> (B, D, F, T) patch grid (official PatchEmbed with flatten=False, no norm)."""

    def __init__(self, config: PasstConfig) -> None:
        super().__init__()
        self.proj = nn.Conv2d(1, config.embed_dim, kernel_size=config.patch_size, stride=config.stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


class Attention(nn.Module):
    def __init__(self, config: PasstConfig) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.attn_drop = config.attn_drop_rate
        self.qkv = nn.Linear(config.embed_dim, 3 * config.embed_dim, bias=config.qkv_bias)
        self.proj = nn.Linear(config.embed_dim, config.embed_dim)
        self.proj_drop = nn.Dropout(config.drop_rate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        # timm layout of the fused projection: [q | k | v], each split into heads
        qkv = self.qkv(x).view(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # (B, H, N, hd)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_drop if self.training else 0.0)
        y = y.transpose(1, 2).reshape(B, N, C)  # (B, N, C)
        return self.proj_drop(self.proj(y))


class Mlp(nn.Module):
    def __init__(self, config: PasstConfig) -> None:
        super().__init__()
        hidden = int(config.embed_dim * config.mlp_ratio)
        self.fc1 = nn.Linear(config.embed_dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, config.embed_dim)
        self.drop = nn.Dropout(config.drop_rate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


class Block(nn.Module):
    def __init__(self, config: PasstConfig, drop_path_rate: float = 0.0) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(config.embed_dim, eps=1e-6)
        self.attn = Attention(config)
        self.norm2 = nn.LayerNorm(config.embed_dim, eps=1e-6)
        self.mlp = Mlp(config)
        self.drop_path_rate = drop_path_rate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + drop_path(self.attn(self.norm1(x)), self.drop_path_rate, self.training)
        x = x + drop_path(self.mlp(self.norm2(x)), self.drop_path_rate, self.training)
        return x


# ---------------------------------------------------------------------------------------------- model


class PaSST(nn.Module):
    def __init__(self, config: PasstConfig) -> None:
        super().__init__()
        self.config = config
        D = config.embed_dim
        F_grid, T_grid = config.grid
        self.patch_embed = PatchEmbed(config)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D))
        self.dist_token = nn.Parameter(torch.zeros(1, 1, D))
        self.new_pos_embed = nn.Parameter(torch.zeros(1, 2, D))  # for the class and distillation tokens
        self.freq_new_pos_embed = nn.Parameter(torch.zeros(1, D, F_grid, 1))  # broadcast over time
        self.time_new_pos_embed = nn.Parameter(torch.zeros(1, D, 1, T_grid))  # broadcast over frequency
        self.pos_drop = nn.Dropout(config.drop_rate)
        rates = torch.linspace(0, config.drop_path_rate, config.depth).tolist()  # stochastic depth decay rule
        self.blocks = nn.Sequential(*[Block(config, r) for r in rates])
        self.norm = nn.LayerNorm(D, eps=1e-6)
        self.head = nn.Sequential(nn.LayerNorm(D), nn.Linear(D, config.num_classes))
        self.head_dist = nn.Linear(D, config.num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        for p in (self.new_pos_embed, self.freq_new_pos_embed, self.time_new_pos_embed,
                  self.cls_token, self.dist_token):
            nn.init.trunc_normal_(p, std=0.02)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    @property
    def dim(self) -> int:
        return self.config.embed_dim

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        """(B, n_mels, T) or (B, 1, n_mels, T) log-mel -> (B, D) feature (mean of class and dist tokens).

        T may be shorter than the model's input (the time positional embedding is cropped) or longer (the
        patch grid is cut to the embedding, as in the official code); use `embed_windows` for long audio.
        """
        tokens = self.forward_tokens(mel)  # (B, 2 + F*T, D)
        return (tokens[:, 0] + tokens[:, 1]) / 2

    def forward_tokens(self, mel: torch.Tensor) -> torch.Tensor:
        x = mel.unsqueeze(1) if mel.dim() == 3 else mel  # (B, 1, n_mels, T)
        x = self.patch_embed(x)  # (B, D, F, T)
        x = self._add_pos_embed(x)
        x = self._patchout(x)
        B = x.shape[0]
        x = x.flatten(2).transpose(1, 2)  # (B, F*T, D)
        cls = self.cls_token.expand(B, -1, -1) + self.new_pos_embed[:, :1]
        dist = self.dist_token.expand(B, -1, -1) + self.new_pos_embed[:, 1:]
        x = self.pos_drop(torch.cat([cls, dist, x], dim=1))  # (B, 2 + F*T, D)
        x = self.blocks(x)
        return self.norm(x)

    def _add_pos_embed(self, x: torch.Tensor) -> torch.Tensor:
        T, T_pos = x.shape[-1], self.time_new_pos_embed.shape[-1]
        time_pos = self.time_new_pos_embed
        if T < T_pos:
            # official: a random crop of the time embedding in training, the first T positions in eval
            offset = int(torch.randint(T_pos - T + 1, (1,)).item()) if self.training else 0
            time_pos = time_pos[..., offset : offset + T]
        elif T > T_pos:
            x = x[..., :T_pos]
        return x + time_pos + self.freq_new_pos_embed  # (B, D, F, T)

    def _patchout(self, x: torch.Tensor) -> torch.Tensor:
        """Structured patchout: drop random whole frequency rows and time columns (training only)."""
        drop_f, drop_t = self.config.patchout
        if not self.training:
            return x
        F_dim, T_dim = x.shape[-2:]
        if drop_t and T_dim > drop_t:
            keep = torch.randperm(T_dim, device=x.device)[: T_dim - drop_t].sort().values
            x = x[..., keep]
        if drop_f and F_dim > drop_f:
            keep = torch.randperm(F_dim, device=x.device)[: F_dim - drop_f].sort().values
            x = x[:, :, keep, :]
        return x

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        """(B, D) -> (B, num_classes) AudioSet logits, as the official forward computes them."""
        return self.head(features)

    # ------------------------------------------------------------------------------------------ windows

    def embed_windows(
        self, mel: torch.Tensor, lengths: torch.Tensor | None = None, max_batch: int = 16
    ) -> torch.Tensor:
        """(B, n_mels, T) log-mel, (B,) real frame counts -> (B, D): mean over the windows of each clip.

        Only windows of real audio count: frames past `lengths[b]` are never looked at, so padding (even
        whole padding windows) does not change a clip's embedding, nor does the batch it is in.
        A clip up to one window long is one window of its own length (time embedding cropped); a longer
        clip is cut into full windows, the last one aligned to the clip's end (it overlaps the one before),
        so every window is real audio and full windows batch together.
        """
        B, _, T = mel.shape
        if lengths is None:
            lengths = torch.full((B,), T, dtype=torch.long)
        lengths = lengths.detach().to("cpu", torch.long).clamp(1, T).tolist()
        windows: list[tuple[int, int, int]] = []  # (clip, start, length)
        for b, n in enumerate(lengths):
            windows += [(b, s, w) for s, w in window_spans(n, self.config.window_frames)]
        sums = mel.new_zeros(B, self.dim)
        counts = [0] * B
        by_length: dict[int, list[tuple[int, int, int]]] = {}
        for item in windows:
            by_length.setdefault(item[2], []).append(item)
        for w, group in by_length.items():
            for i in range(0, len(group), max_batch):
                chunk = group[i : i + max_batch]
                x = torch.stack([mel[b, :, s : s + w] for b, s, _ in chunk])  # (n, n_mels, w)
                x = self._pad_to_patch(x)
                feats = self(x)  # (n, D)
                idx = torch.tensor([b for b, _, _ in chunk], device=mel.device)
                sums = sums.index_add(0, idx, feats.to(sums.dtype))
                for b, _, _ in chunk:
                    counts[b] += 1
        return sums / torch.tensor(counts, dtype=sums.dtype, device=sums.device)[:, None]

    def _pad_to_patch(self, x: torch.Tensor) -> torch.Tensor:
        """Clips shorter than one patch: repeat their edge frames so the patch grid has one column."""
        short = self.config.patch_size - x.shape[-1]
        if short <= 0:
            return x
        return F.pad(x, (0, short), mode="replicate")


def window_spans(num_frames: int, window: int) -> list[tuple[int, int]]:
    """(start, length) of the windows covering `num_frames` real frames; the last one ends at the end."""
    if num_frames <= window:
        return [(0, num_frames)]
    n = math.ceil(num_frames / window)
    starts = [i * window for i in range(n - 1)] + [num_frames - window]
    return [(s, window) for s in starts]


# ---------------------------------------------------------------------------------------------- weights

_FOREIGN_PREFIXES = ("module.", "net.", "model.", "encoder.", "audio_encoder.", "passt.")


def load_official_weights(
    model: PaSST, state_dict: dict[str, torch.Tensor]
) -> tuple[list[str], list[str]]:
    """Load a foreign PaSST state dict (official `.pt`, hear21passt / DCASE wrappers) into `model`.

    Wrapper prefixes (`net.`, `module.`, ...) are stripped; extra keys (the mel front end, other heads) are
    reported as unexpected, not an error. Positional embeddings of another grid are adapted: the time one
    is cropped to its first positions (what the official model does for shorter input) or interpolated,
    the frequency one interpolated. A classification head of another size is left out (reported as both
    missing and unexpected). Any other shape mismatch raises ValueError: that is a different model.
    Returns (missing, unexpected) key lists.
    """
    own = model.state_dict()
    loaded: dict[str, torch.Tensor] = {}
    unexpected: list[str] = []
    mismatched: list[str] = []
    for key, value in state_dict.items():
        name = _own_name(key, own)
        if name is None:
            unexpected.append(key)
            continue
        target = own[name].shape
        if value.shape != target:
            if name in ("time_new_pos_embed", "freq_new_pos_embed") and value.shape[:2] == target[:2]:
                value = _adapt_pos_embed(value, target)
            elif name.startswith("head"):
                unexpected.append(key)
                continue
            else:
                mismatched.append(f"{key} {tuple(value.shape)} != {tuple(target)}")
                continue
        loaded[name] = value
    if mismatched:
        raise ValueError(f"weights do not fit this PaSST ({len(mismatched)} mismatch(es)): {mismatched[:5]}")
    missing = sorted(set(own) - set(loaded))
    model.load_state_dict(loaded, strict=False)
    return missing, unexpected


def _own_name(key: str, own: dict[str, torch.Tensor]) -> str | None:
    name = key
    while name not in own:
        for prefix in _FOREIGN_PREFIXES:
            if name.startswith(prefix):
                name = name[len(prefix) :]
                break
        else:
            return None
    return name


def _adapt_pos_embed(value: torch.Tensor, target: torch.Size) -> torch.Tensor:
    """(1, D, F, T) -> target grid: crop time from the start if longer, else interpolate (as timm does)."""
    if value.shape[-2] == target[-2] and value.shape[-1] >= target[-1]:
        return value[..., : target[-1]]
    out = F.interpolate(value.float(), size=tuple(target[-2:]), mode="bilinear", align_corners=False)
    return out.to(value.dtype)


# ---------------------------------------------------------------------------------------------- config


def config_from_dict(d: dict[str, Any]) -> PasstConfig:
    """PasstConfig from a (JSON) dict: unknown keys refused, lists turned back into tuples."""
    check_fields(PasstConfig, d)
    hints = typing.get_type_hints(PasstConfig)
    kwargs = {k: tuple(v) if typing.get_origin(hints[k]) is tuple else v for k, v in d.items()}
    return PasstConfig(**kwargs)


def from_config_dict(d: dict[str, Any]) -> PaSST:
    return PaSST(config_from_dict(d))
