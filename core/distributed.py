"""Data-parallel training under `torchrun` (DistributedDataParallel), shared by the three trainers.

The same trainer runs in one process or under `torchrun`: `setup` joins the process group torchrun describes
(NCCL on CUDA, gloo otherwise) or returns a single-process context; `local_rows` keeps this rank's share of
the one global batch every rank builds; `wrap` puts the model in DDP; `gather_rows` gives contrastive and
triplet losses the global batch with gradients scaled so N processes follow one process's trajectory; only
rank 0 writes (`is_main`), and `agree` makes a per-rank decision collective. Why each choice: docs/training.md.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


SINGLE = DistContext()


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and "RANK" in os.environ


def setup(device: torch.device) -> tuple[DistContext, torch.device]:
    """Join torchrun's process group (if any) -> (context, this rank's device)."""
    if not launched_by_torchrun():
        return SINGLE, device
    ctx = DistContext(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0)))
    if device.type == "cuda":
        device = torch.device("cuda", ctx.local_rank)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        # long enough for rank 0 to fill a feature cache while the others wait at a barrier
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=timedelta(hours=2))
    return ctx, device


def teardown(ctx: DistContext) -> None:
    if ctx.enabled and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def wrap(model: nn.Module, ctx: DistContext, device: torch.device, find_unused: bool = False) -> nn.Module:
    """DistributedDataParallel around `model` when distributed; the model itself otherwise.

    `find_unused`: some trainable parameters take no part in the loss (e.g. PaSST's classifier heads in
    retrieval training), so DDP must look for them after each forward pass.
    """
    if not ctx.enabled:
        return model
    ids = [device.index] if device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=ids, find_unused_parameters=find_unused)


def local_rows(n: int, ctx: DistContext) -> range:
    """This rank's contiguous share of n items (sizes differ by at most one)."""
    base, extra = divmod(n, ctx.world_size)
    start = ctx.rank * base + min(ctx.rank, extra)
    return range(start, start + base + (ctx.rank < extra))


def scale_grad(x: torch.Tensor, factor: float) -> torch.Tensor:
    """x unchanged in the forward pass; its gradient multiplied by `factor` in the backward pass."""
    return x.detach() + factor * (x - x.detach())


def gather_rows(x: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    """(n_local, ...) on every rank -> (n_global, ...) in rank order; gradient flows to this rank's rows.

    Ranks may hold different numbers of rows (padded for the collective, trimmed after).
    """
    if not ctx.enabled:
        return x
    count = torch.tensor([x.shape[0]], device=x.device)
    counts = [torch.zeros_like(count) for _ in range(ctx.world_size)]
    dist.all_gather(counts, count)
    sizes = [int(c.item()) for c in counts]
    padded = x.new_zeros((max(sizes), *x.shape[1:]))
    padded[: x.shape[0]] = x.detach()
    parts = [torch.empty_like(padded) for _ in range(ctx.world_size)]
    dist.all_gather(parts, padded)
    rows = [p[:s] for p, s in zip(parts, sizes, strict=True)]
    rows[ctx.rank] = scale_grad(x, ctx.world_size)  # DDP divides by N: the sum over ranks is the global gradient
    return torch.cat(rows)


def agree(flag: bool, ctx: DistContext, device: torch.device | None = None) -> bool:
    """True on every rank if it is True on any rank (e.g. one rank ran out of time)."""
    if not ctx.enabled:
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


def barrier(ctx: DistContext) -> None:
    if ctx.enabled:
        dist.barrier()


def require_rows(n: int, ctx: DistContext, what: str) -> None:
    """A global batch must give every rank at least one item."""
    if n < ctx.world_size:
        raise ValueError(f"a batch of {n} {what} cannot be split over {ctx.world_size} processes; "
                         f"raise the batch size or use fewer processes")


def select(items: Sequence, rows: range) -> list:
    return [items[i] for i in rows]
