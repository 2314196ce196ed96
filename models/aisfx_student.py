"""A distilled aiSFX sound tower (issue 25): a narrow CNN on the teacher's 44.1-kHz `AisfxMel` front end.

`AisfxStudent` (four narrow conv blocks, a 1x1 conv to 512 channels, mean over frequency) is trained by
training/student_train.py to reproduce the teacher's (n, 512, T/8) feature map. Why this shape: everything on
top of the trunk (block pooling, library windows, the retrieval projection) reads only that map, so a student
with the same stride and output slots into `AisfxEncoder` unchanged. `StudentConfig` is an `AisfxConfig`, so
`RetrievalConfig(audio_tower="aisfx-student")` builds it where it would build the teacher. Its cost is counted
by bench/bench_student.py; the architecture's reasons: docs/models.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from models.aisfx import TIME_STRIDE, AisfxConfig, AisfxEncoder
from models.configs import check_fields


@dataclass
class StudentConfig(AisfxConfig):
    widths: list[int] = field(default_factory=lambda: [24, 48, 96, 192])  # the four conv blocks' channels
    out_channels: int = 512  # the teacher's map width (AisfxEncoder.dim = 2 * this)
    n_mels: int = 96

    def __post_init__(self) -> None:
        if len(self.widths) != 4 or min(self.widths) < 1:
            raise ValueError(f"StudentConfig.widths: four positive channel counts, got {self.widths}")

    @property
    def embed_dim(self) -> int:
        return self.out_channels


class StudentBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)

    def forward(self, x: torch.Tensor, pool: bool, keep: torch.Tensor | None) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = x if keep is None else x * keep
        x = F.relu(self.bn2(self.conv2(x)))
        x = x if keep is None else x * keep
        return F.max_pool2d(x, 2) if pool else x


def time_mask(lengths: torch.Tensor, steps: int, stride: int) -> torch.Tensor:
    """(n,) real frame counts -> (n, 1, steps, 1) float: 1 where a step at this stride covers real frames."""
    real = (lengths.to(torch.long) + stride - 1) // stride  # (n,)
    return (torch.arange(steps, device=lengths.device)[None, :] < real[:, None]).float()[:, None, :, None]


class StudentNet(nn.Module):
    """(n, T, 96) frames -> (n, 512, T/8) map (the teacher's EmbeddingNet.feature_map contract)."""

    def __init__(self, config: StudentConfig) -> None:
        super().__init__()
        w = config.widths
        self.conv_block1 = StudentBlock(1, w[0])
        self.conv_block2 = StudentBlock(w[0], w[1])
        self.conv_block3 = StudentBlock(w[1], w[2])
        self.conv_block4 = StudentBlock(w[2], w[3])
        self.expand = nn.Conv2d(w[3], config.out_channels, 1, bias=False)
        self.bn_expand = nn.BatchNorm2d(config.out_channels)

    def forward(self, blocks: torch.Tensor) -> torch.Tensor:
        return self.feature_map(blocks).amax(dim=2)  # (n, 512): max over time, as EmbeddingNet

    def feature_map(self, frames: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """(n, T, 96) frames -> (n, 512, T/8). `lengths` (n,): real frames per row; the padding after them is
        zeroed after every conv, so a padded row gives (up to the pooling's rounding at its end) the map of the
        row alone (training batches rows of different lengths; inference groups equal lengths instead)."""
        x = frames.unsqueeze(1)  # (n, 1, T, F)
        T = x.shape[2]
        keep = [None] * 4 if lengths is None else [time_mask(lengths, T // s, s) for s in (1, 2, 4, 8)]
        x = self.conv_block1(x, pool=True, keep=keep[0])  # (n, w0, T/2, F/2)
        x = self.conv_block2(x, pool=True, keep=keep[1])  # (n, w1, T/4, F/4)
        x = self.conv_block3(x, pool=True, keep=keep[2])  # (n, w2, T/8, F/8)
        x = self.conv_block4(x, pool=False, keep=keep[3])  # (n, w3, T/8, F/8)
        x = F.relu(self.bn_expand(self.expand(x)))  # (n, 512, T/8, F/8): per-bin 1x1, non-negative like the teacher
        return x.mean(dim=3)  # mean over frequency -> (n, 512, T/8)


class AisfxStudent(AisfxEncoder):
    """`AisfxEncoder` with the student's trunk: same blocks, pooling and (B, 1024) clip vectors."""

    def __init__(self, config: StudentConfig | None = None) -> None:
        super().__init__(config or StudentConfig())

    def build_net(self) -> nn.Module:
        assert isinstance(self.config, StudentConfig)
        return StudentNet(self.config)


def config_from_dict(d: dict[str, Any]) -> StudentConfig:
    check_fields(StudentConfig, d)
    return StudentConfig(**d)


def map_loss_mask(lengths: torch.Tensor, steps: int) -> torch.Tensor:
    """(n,) real frame counts -> (n, steps) bool: the map steps that lie on real frames."""
    real = lengths.to(torch.long) // TIME_STRIDE
    return torch.arange(steps, device=lengths.device)[None, :] < real.clamp(min=1)[:, None]
