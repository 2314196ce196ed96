"""Distil the aiSFX sound tower of a retrieval model into a small student (issue 25; models/aisfx_student.py).

    python -m training.student_train --cache DIR --out STUDENT.safetensors [--teacher CKPT] [--max-minutes 45]

It reads the teacher-output cache of training/student_data.py and trains the student to give the teacher's
feature map, block embeddings and retrieval vector (`map_weight`, `block_weight`, `proj_weight`) on one
Trainer loop (training/trainer.py). The checkpoint is the LAST model (no selection on val): a retrieval
checkpoint whose audio tower is the student and whose projections and text tower are the teacher's, so it
loads like any other retrieval model. The three losses in detail: docs/training.md.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Generator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn

from core.checkpoints import load_model, save_checkpoint
from core.config import add_arguments, config_from_args, setting
from models.aisfx import TIME_STRIDE, block_embeddings
from models.aisfx_student import AisfxStudent, StudentConfig, map_loss_mask
from models.frontends import AisfxMel, frontend_to_dict
from models.retrieval import RetrievalConfig, RetrievalModel
from training.trainer import Hooks, Stage, Trainer, TrainerConfig

ROOT = Path(__file__).resolve().parents[1]
TEACHER = ROOT / "resources" / "models" / "retrieval-default.safetensors"


@dataclass
class StudentTrainConfig(TrainerConfig):
    epochs: int = setting(4, help="passes over the cache", low=1, high=10_000)
    lr: float = setting(2e-3, help="peak learning rate (AdamW, cosine decay)", low=0.0, low_exclusive=True)
    min_lr: float = setting(2e-5, help="end of the cosine decay", low=0.0)
    weight_decay: float = setting(1e-4, help="AdamW weight decay", low=0.0)
    frames_per_batch: int = setting(4096, help="mel frames per batch, padding included (~23 ms each)", low=100)
    map_weight: float = setting(1.0, help="weight of the feature-map MSE", low=0.0)
    block_weight: float = setting(1.0, help="weight of the block-embedding cosine loss", low=0.0)
    proj_weight: float = setting(1.0, help="weight of the retrieval-vector cosine loss", low=0.0)
    widths: str = setting("24,48,96,192", help="the student's four conv blocks' channels")

    def student_config(self) -> StudentConfig:
        return StudentConfig(widths=[int(w) for w in self.widths.split(",")], frozen=False)


# ------------------------------------------------------------------------------------------------ data


@dataclass
class Cache:
    """Entries of a teacher-output cache: frames (sum T, 96), maps (512, sum T/8), index rows."""

    mel: torch.Tensor
    map: torch.Tensor
    index: torch.Tensor  # (n, 4): frame start, frames, map start, source id

    def __len__(self) -> int:
        return len(self.index)

    def frames(self, i: int) -> int:
        return int(self.index[i, 1])

    def get(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        f0, n, m0, _ = self.index[i].tolist()
        return self.mel[f0 : f0 + n], self.map[:, m0 : m0 + n // TIME_STRIDE]


def read_cache(folder: Path, split: str) -> Cache:
    parts = sorted(folder.glob(f"{split}-*.safetensors"))
    if not parts:
        raise SystemExit(f"{folder}: no {split}-*.safetensors; build it with python -m training.student_data")
    mels, maps, index, frames, steps = [], [], [], 0, 0
    for p in parts:
        d = load_file(str(p))
        idx = d["index"].clone()
        idx[:, 0] += frames
        idx[:, 2] += steps
        frames, steps = frames + len(d["mel"]), steps + d["map"].shape[1]
        mels.append(d["mel"])
        maps.append(d["map"])
        index.append(idx)
    return Cache(torch.cat(mels), torch.cat(maps, dim=1), torch.cat(index))


def length_batches(lengths: Sequence[int], frames_per_batch: int, seed: int) -> list[list[int]]:
    """Entries grouped with others of similar length (little padding), at most `frames_per_batch` padded frames
    a batch, in a seeded random order; the same seed gives the same batches."""
    rng = random.Random(seed)
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], rng.random()))
    batches, cur = [], []
    for i in order:
        if cur and (len(cur) + 1) * lengths[i] > frames_per_batch:  # sorted: i is the longest so far
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    rng.shuffle(batches)
    return batches


def collate(cache: Cache, ids: Sequence[int]) -> dict[str, torch.Tensor]:
    """-> frames (B, T, 96) float, maps (B, 512, T/8) float, lengths (B,), zero-padded."""
    items = [cache.get(i) for i in ids]
    T = max(len(m) for m, _ in items)
    mel = torch.zeros(len(items), T, items[0][0].shape[1])
    fmap = torch.zeros(len(items), items[0][1].shape[0], T // TIME_STRIDE)
    for j, (m, t) in enumerate(items):
        mel[j, : len(m)] = m.float()
        fmap[j, :, : t.shape[1]] = t.float()
    return {"mel": mel, "map": fmap, "lengths": torch.tensor([len(m) for m, _ in items])}


# ------------------------------------------------------------------------------------------------ losses


def distill_losses(student_map: torch.Tensor, teacher_map: torch.Tensor, lengths: torch.Tensor,
                   projection: nn.Module, map_scale: float, config: StudentConfig) -> dict[str, torch.Tensor]:
    """(B, 512, S) maps of both, (B,) real frames -> {"map", "block", "proj"} losses (scalars)."""
    mask = map_loss_mask(lengths, student_map.shape[2])  # (B, S)
    sq = (student_map - teacher_map).pow(2).mean(dim=1)  # (B, S)
    map_loss = (sq * mask).sum() / mask.sum().clamp(min=1) / map_scale
    block_losses, s_clips, t_clips = [], [], []
    for j, n in enumerate(lengths.tolist()):
        steps = n // TIME_STRIDE
        s_e = block_embeddings(student_map[j : j + 1, :, :steps], n, config)[0]  # (512, n_blocks)
        t_e = block_embeddings(teacher_map[j : j + 1, :, :steps], n, config)[0]
        block_losses.append(1 - F.cosine_similarity(s_e, t_e, dim=0).mean())
        s_clips.append(torch.cat([s_e.mean(dim=1), s_e.amax(dim=1)]))  # (1024,)
        t_clips.append(torch.cat([t_e.mean(dim=1), t_e.amax(dim=1)]))
    s_vec, t_vec = projection(torch.stack(s_clips)), projection(torch.stack(t_clips))  # (B, 512)
    proj_loss = 1 - F.cosine_similarity(s_vec, t_vec, dim=1).mean()
    return {"map": map_loss, "block": torch.stack(block_losses).mean(), "proj": proj_loss}


# ------------------------------------------------------------------------------------------------ hooks


class StudentHooks(Hooks):
    kind = "retrieval"
    metric = None  # no selection: the last model is the checkpoint

    def __init__(self, config: StudentTrainConfig, cache_dir: Path, teacher: Path) -> None:
        self.config, self.cache_dir, self.teacher_path = config, cache_dir, teacher
        self.student_config = config.student_config()
        self.last_losses: dict[str, float] = {}

    def prepare(self, trainer: Trainer) -> Generator[dict[str, Any], None, None]:
        yield {"step": 0, "total": 0, "message": f"reading the cache {self.cache_dir}"}
        self.train, self.val = read_cache(self.cache_dir, "train"), read_cache(self.cache_dir, "val")
        teacher, _ = load_model(self.teacher_path, kind="retrieval")
        assert isinstance(teacher, RetrievalModel)
        self.teacher = teacher
        # the student's map is as wide as the teacher's, so the teacher's projection reads it
        self.student_config = replace(self.student_config, out_channels=teacher.audio_encoder.config.embed_dim)
        self.projection = teacher.audio_proj.eval()
        for p in self.projection.parameters():
            p.requires_grad_(False)
        sample = self.train.map[:, :: max(1, self.train.map.shape[1] // 20000)].float()
        self.map_scale = float(sample.pow(2).mean())  # the teacher map's mean square: map loss ~ relative error
        torch.manual_seed(self.config.seed)
        self.model = AisfxStudent(self.student_config)
        self.lengths = [self.train.frames(i) for i in range(len(self.train))]
        yield {"step": 0, "total": 0, "message": f"{len(self.train)} train / {len(self.val)} val entries, "
                                                 f"{sum(self.lengths) / 43.07 / 3600:.2f} h"}

    def stages(self) -> list[Stage]:
        c = self.config
        n = len(length_batches(self.lengths, c.frames_per_batch, c.seed))
        return [Stage("distil", c.epochs, n, c.lr, c.min_lr, warmup_steps=min(200, n // 10))]

    def begin_stage(self, stage: Stage) -> tuple[nn.Module, torch.optim.Optimizer]:
        opt = torch.optim.AdamW(self.model.parameters(), lr=stage.lr, weight_decay=self.config.weight_decay)
        return self.model, opt

    def begin_epoch(self, stage: Stage) -> None:
        self.model.train()

    def batches(self, stage: Stage, index: int, epoch: int) -> Sequence[Any]:
        return length_batches(self.lengths, self.config.frames_per_batch, self.config.seed * 1000 + epoch)

    def losses(self, module: nn.Module, cache: Cache, ids: Sequence[int]) -> dict[str, torch.Tensor]:
        b = collate(cache, ids)
        student_map = module.embedding_net.feature_map(b["mel"], b["lengths"])  # (B, 512, T/8)
        return distill_losses(student_map, b["map"], b["lengths"], self.projection, self.map_scale,
                              self.student_config)

    def total(self, parts: dict[str, torch.Tensor]) -> torch.Tensor:
        c = self.config
        return c.map_weight * parts["map"] + c.block_weight * parts["block"] + c.proj_weight * parts["proj"]

    def step(self, module: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:  # noqa: ANN401
        parts = self.losses(module, self.train, batch)
        self.last_losses = {f"train_{k}": float(v.detach()) for k, v in parts.items()}
        return self.total(parts), self.last_losses

    @torch.no_grad()
    def evaluate(self, stage: Stage) -> dict[str, float]:
        self.model.eval()
        lengths = [self.val.frames(i) for i in range(len(self.val))]
        sums: dict[str, float] = {}
        count = 0
        for ids in length_batches(lengths, self.config.frames_per_batch, 0):
            parts = self.losses(self.model, self.val, ids)
            parts["loss"] = self.total(parts)
            for k, v in parts.items():
                sums[f"val_{k}"] = sums.get(f"val_{k}", 0.0) + float(v) * len(ids)
            count += len(ids)
        return {k: v / max(1, count) for k, v in sums.items()}

    def final_metrics(self) -> dict[str, float]:
        return self.last_losses

    def save(self, path: Path, model: nn.Module, record: dict[str, Any]) -> None:
        save_student(path, model, self.teacher, record | {"cache": str(self.cache_dir),
                                                          "teacher": str(self.teacher_path)})

    def details(self) -> dict[str, Any]:
        return {"train_entries": len(self.train), "val_entries": len(self.val),
                "train_hours": round(sum(self.lengths) / 43.07 / 3600, 3), "map_scale": self.map_scale}


def student_retrieval(teacher: RetrievalModel, student: AisfxStudent) -> RetrievalModel:
    """A retrieval model whose audio tower is `student`, with the teacher's projections and text tower."""
    cfg = teacher.config
    config = RetrievalConfig(audio=StudentConfig(**{**asdict(student.config), "frozen": True}),
                             text=cfg.text, embed_dim=cfg.embed_dim, tau=cfg.tau, learn_tau=cfg.learn_tau,
                             audio_tower="aisfx-student", proj_layers=cfg.proj_layers)
    model = RetrievalModel(config, with_text=False)
    model.audio_encoder.load_state_dict(student.state_dict())
    model.audio_proj.load_state_dict(teacher.audio_proj.state_dict())
    model.text_encoder, model.skipped_prefixes = teacher.text_encoder, ()
    model.text_proj = teacher.text_proj
    model.log_tau = teacher.log_tau
    return model.eval()


def save_student(path: Path, student: nn.Module, teacher: RetrievalModel, training: dict[str, Any]) -> Path:
    assert isinstance(student, AisfxStudent)
    model = student_retrieval(teacher, student)
    return save_checkpoint(path, "retrieval", model, model.config, features=frontend_to_dict(AisfxMel()),
                           training=training, exclude_prefixes=("text_encoder.",))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.student_train", description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", required=True, help="folder of training/student_data.py")
    p.add_argument("--out", required=True, help="the student retrieval checkpoint (.safetensors)")
    p.add_argument("--teacher", default=str(TEACHER), help="the retrieval model whose aiSFX tower is distilled")
    p.add_argument("--resume", action="store_true", help="continue from OUT's resume state")
    add_arguments(p, StudentTrainConfig)
    a = p.parse_args(argv)
    config = config_from_args(StudentTrainConfig, a)
    hooks = StudentHooks(config, Path(a.cache), Path(a.teacher))
    trainer = Trainer(hooks, config, a.out, resume=a.resume)
    try:
        while True:
            ev = next(trainer)
            if ev.get("epoch_end") or ev["step"] % 25 == 0:
                print(json.dumps({k: round(v, 5) if isinstance(v, float) else v for k, v in ev.items()}), flush=True)
    except StopIteration as stop:
        result = stop.value
    print(json.dumps(result, indent=1), file=sys.stdout, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
