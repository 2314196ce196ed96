"""aiSFX: the sound-effects encoder of Ma & Lerch (ISMIR 2022), re-implemented in plain PyTorch.

The DCASE "Cnn_9layers" CNN (four ConvBlocks, 64 -> 512 channels; mean over frequency, max over time) gives
a 512-d embedding per 100-frame (~2.3 s) block; a clip is [mean ; max] over blocks (1024-d). `AisfxEncoder`
computes it block-wise (the package's way) or fully convolutionally (default, ~2x less work; differs only at
block edges, tests/test_aisfx.py states the tolerance). The weights are the authors' checkpoint from the `aisfx`
wheel (CC BY 4.0), read as data by `core.aisfx_weights.load_weights`, never unpickled as code; its classifier
heads are dropped. Credit, blocking and the two computations in detail: docs/models.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from models.configs import check_fields

AISFX_WHEEL = "aisfx==0.1.2"
CHECKPOINT_IN_WHEEL = "aisfx/models/checkpoint.pth"
HOW_TO_GET_WEIGHTS = (
    "aiSFX weights not found. Install the wheel that ships them, without its pinned dependencies "
    f"(they conflict with Earshot's; only the checkpoint file is used): pip install --no-deps {AISFX_WHEEL} "
    "(`make run`/`make test` do this), or give the path of its checkpoint.pth or of a converted .safetensors "
    "file. PaSST models keep working without it."
)


class AisfxWeightsError(RuntimeError):
    """The aiSFX weights are missing, refused (not plain tensors) or do not fit the network."""


@dataclass
class AisfxConfig:
    base_channels: int = 64  # 64 -> 128 -> 256 -> 512
    block_frames: int = 100  # frames per block (~2.3 s at hop 1024 / 44.1 kHz)
    block_hop: int = 50  # the package's emb_hop_size 0.5
    train_top_block: bool = False  # fine-tune conv_block4 (and its BN statistics); the rest stays frozen
    frozen: bool = True  # False: every layer trains (from the checkpoint or from scratch)
    window_seconds: float = 10.0  # the search library cuts long files into windows of this length
    fully_convolutional: bool = True  # one CNN pass per clip, blocks pooled from the shared feature map

    @property
    def embed_dim(self) -> int:
        return self.base_channels * 8

    @property
    def dim(self) -> int:
        return 2 * self.embed_dim  # [mean ; max] over blocks


class ConvBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.bn2 = nn.BatchNorm2d(c_out)

    def forward(self, x: torch.Tensor, pool: bool) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        return F.max_pool2d(x, 2) if pool else x


class EmbeddingNet(nn.Module):
    """(n, 100, 96) blocks -> (n, 512)."""

    def __init__(self, base: int) -> None:
        super().__init__()
        self.conv_block1 = ConvBlock(1, base)
        self.conv_block2 = ConvBlock(base, base * 2)
        self.conv_block3 = ConvBlock(base * 2, base * 4)
        self.conv_block4 = ConvBlock(base * 4, base * 8)

    def forward(self, blocks: torch.Tensor) -> torch.Tensor:
        return self.feature_map(blocks).amax(dim=2)  # max over time -> (n, 512)

    def feature_map(self, frames: torch.Tensor) -> torch.Tensor:
        """(n, T, 96) frames -> (n, 512, T/8): the conv trunk, mean over frequency, time kept."""
        x = frames.unsqueeze(1)  # (n, 1, T, F)
        if self.conv_block1.conv1.weight.is_contiguous(memory_format=torch.channels_last):
            x = x.contiguous(memory_format=torch.channels_last)  # faster convs on CPU (bench/bench_sfx.py)
        x = self.conv_block1(x, pool=True)  # (n, 64, T/2, F/2)
        x = self.conv_block2(x, pool=True)  # (n, 128, T/4, F/4)
        x = self.conv_block3(x, pool=True)  # (n, 256, T/8, F/8)
        x = self.conv_block4(x, pool=False)  # (n, 512, T/8, F/8)
        return x.mean(dim=3)  # mean over frequency -> (n, 512, T/8)


def block_starts(num_frames: int, block: int, hop: int) -> list[int]:
    """Start frames of the package's blocks: full blocks every `hop` frames, the partial last one dropped;
    a clip shorter than one block gives one block (zero-padded)."""
    if num_frames <= block:
        return [0]
    return [i * hop for i in range((num_frames - block) // hop + 1)]


TIME_STRIDE = 8  # three 2x2 max poolings


def short_clips_padded(feats: torch.Tensor, rows: list[int], counts: list[int], n: int) -> torch.Tensor:
    """(B, T, 96) frames -> (len(rows), n, 96): those rows' first n frames, each zero after its real count (a clip
    shorter than n = one block is zero-padded to it, as the package pads it; longer rows have exactly n)."""
    x = feats[rows, : min(n, feats.shape[1])]
    if x.shape[1] < n:
        x = F.pad(x, (0, 0, 0, n - x.shape[1]))
    real = torch.tensor([counts[r] for r in rows], device=feats.device)  # (b,)
    if bool((real < n).any()):
        keep = torch.arange(n, device=feats.device)[None, :] < real[:, None]  # (b, n)
        x = x * keep[..., None].to(x.dtype)
    return x


def map_starts(starts: list[int]) -> list[int]:
    """Block start frames -> the nearest step of the (T/8) feature map (50 frames = 6.25 steps)."""
    return [int(s / TIME_STRIDE + 0.5) for s in starts]


def block_embeddings(fmap: torch.Tensor, num_frames: int, config: AisfxConfig) -> torch.Tensor:
    """(b, C, T/8) feature maps of clips of `num_frames` (>= one block) frames -> (b, C, n_blocks): the max over
    each block's 12 map steps, blocks every `block_hop` frames (the fully convolutional pooling)."""
    width = config.block_frames // TIME_STRIDE  # 12 map steps per block
    steps = map_starts(block_starts(num_frames, config.block_frames, config.block_hop))
    return fmap.unfold(2, width, 1).amax(dim=-1)[:, :, steps]


# (n, T, 96) frames -> (n, 512, T/8) feature map; set by an inference backend (core/aisfx_runtime.py)
TrunkRunner = Callable[[torch.Tensor], torch.Tensor]


class AisfxEncoder(nn.Module):
    def __init__(self, config: AisfxConfig | None = None) -> None:
        super().__init__()
        self.config = config or AisfxConfig()
        self.embedding_net = self.build_net()
        self.runner: TrunkRunner | None = None  # used only without autograd (indexing), never in training
        self.apply_freeze()

    def build_net(self) -> nn.Module:
        """The trunk: (n, T, 96) -> (n, 512, T/8) by `feature_map` (a distilled student replaces it)."""
        return EmbeddingNet(self.config.base_channels)

    @property
    def dim(self) -> int:
        return self.config.dim

    def apply_freeze(self) -> None:
        c = self.config
        for p in self.parameters():
            p.requires_grad_(not c.frozen)
        if c.frozen and c.train_top_block:
            for p in self.embedding_net.conv_block4.parameters():
                p.requires_grad_(True)

    def train(self, mode: bool = True) -> AisfxEncoder:
        super().train(mode)
        if self.config.frozen:  # frozen layers keep the checkpoint's BN statistics
            self.embedding_net.eval()
            if mode and self.config.train_top_block:
                self.embedding_net.conv_block4.train()
        return self

    def blocks(self, feats: torch.Tensor, num_frames: int) -> torch.Tensor:
        """(T, 96) frames of one clip, of which the first `num_frames` are real -> (n, 100, 96) blocks."""
        c = self.config
        real = feats[:num_frames]
        if num_frames < c.block_frames:
            real = F.pad(real, (0, 0, 0, c.block_frames - num_frames))
        return torch.stack([real[s : s + c.block_frames] for s in block_starts(num_frames, c.block_frames,
                                                                                 c.block_hop)])

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor | None = None, max_batch: int = 64) -> torch.Tensor:
        """(B, T, 96) AisfxMel frames (+ (B,) real frame counts) -> (B, 1024) [mean ; max] over each clip's blocks.

        Padding frames are never looked at (block-wise) or are zeroed (fully convolutional, where they stand
        in for the conv's own zero padding), so a clip's embedding does not depend on its batch.
        """
        B, T, _ = feats.shape
        counts = [T] * B if lengths is None else lengths.detach().to("cpu", torch.long).clamp(1, T).tolist()
        if self.config.fully_convolutional:
            return self.forward_fully_convolutional(feats, counts, max_batch)
        per_clip = [self.blocks(feats[b], n) for b, n in enumerate(counts)]
        sizes = [len(x) for x in per_clip]
        blocks = torch.cat(per_clip)  # (sum n_b, 100, 96)
        emb = torch.cat([self.embedding_net(blocks[i : i + max_batch]) for i in range(0, len(blocks), max_batch)])
        out = [torch.cat([e.mean(dim=0), e.amax(dim=0)]) for e in emb.split(sizes)]
        return torch.stack(out)  # (B, 1024)

    def forward_fully_convolutional(self, feats: torch.Tensor, counts: list[int], max_batch: int) -> torch.Tensor:
        """(B, T, 96) frames, real frame counts -> (B, 1024): one trunk pass per clip, blocks pooled from its map.

        Clips are grouped by real length and run without padding (a clip shorter than a block is zero-padded
        to one, as block-wise), so a clip's vector does not depend on the other clips of its batch."""
        c = self.config
        out: list[torch.Tensor] = [feats.new_empty(0)] * len(counts)
        groups: dict[int, list[int]] = {}
        for b, n in enumerate(counts):  # every clip shorter than a block is padded to one: they go together
            groups.setdefault(max(n, c.block_frames), []).append(b)
        for n, rows in groups.items():
            x = short_clips_padded(feats, rows, counts, n)  # (b, n, 96): real frames, zeros after them
            per_pass = max(1, max_batch * c.block_frames // x.shape[1])  # about as many frames as block-wise
            real = [counts[b] for b in rows] if n == c.block_frames else None  # short clips: zeros after these
            fmap = torch.cat([self.trunk(x[i : i + per_pass], None if real is None else real[i : i + per_pass])
                              for i in range(0, len(x), per_pass)])  # (b, 512, n/8)
            e = block_embeddings(fmap, n, c)  # (b, 512, n_blocks)
            for j, b in enumerate(rows):
                out[b] = torch.cat([e[j].mean(dim=1), e[j].amax(dim=1)])
        return torch.stack(out)  # (B, 1024)

    def trunk(self, frames: torch.Tensor, counts: list[int] | None = None) -> torch.Tensor:
        """(n, T, 96) -> (n, 512, T/8), through the inference backend when one is set and no gradient is wanted.
        `counts`: each row's real frames, zeros after them; a backend with `padded` skips work on the zeros."""
        if self.runner is not None and not torch.is_grad_enabled():
            padded = getattr(self.runner, "padded", None)
            return self.runner(frames) if counts is None or padded is None else padded(frames, counts)
        return self.embedding_net.feature_map(frames)


# ---------------------------------------------------------------------------------------------- weights
# Reading the weight files (the wheel's pickle-based .pth, or .safetensors) lives in core/aisfx_weights.py:
# models/ stays pure PyTorch.


def encoder_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The `embedding_net.*` tensors of a checkpoint (classifier heads `fc.*` dropped)."""
    return {k: v for k, v in state.items() if k.startswith("embedding_net.")}


def load_encoder_state(encoder: AisfxEncoder, state: dict[str, torch.Tensor], source: str = "weights") -> None:
    """Fill `encoder` from a checkpoint's tensors; a clear AisfxWeightsError when they do not fit."""
    state = encoder_state(state)
    own = encoder.state_dict()
    missing = sorted(set(own) - set(state))
    wrong = sorted(k for k in own if k in state and state[k].shape != own[k].shape)
    if missing or wrong:
        raise AisfxWeightsError(f"{source}: does not fit AisfxEncoder(base_channels={encoder.config.base_channels})"
                                f"; missing {missing[:3]}, wrong shapes {wrong[:3]}")
    encoder.load_state_dict(state)


def config_from_dict(d: dict[str, Any]) -> AisfxConfig:
    check_fields(AisfxConfig, d)
    return AisfxConfig(**d)
