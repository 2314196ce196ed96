"""The settings of `earshot train retrieval` (`RetrievalRunOptions`, `RetrievalSettings`), its presets' names and
the arguments of `earshot eval retrieval`, torch-free: the Train tab, the run service and the `earshot` parser read
them without importing the trainer (training/retrieval_train.py: each preset's recipe, model and front end
included) or the evaluation (training/retrieval_eval.py)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from core.config import setting
from training.trainer_settings import TrainerConfig

PRESET_NAMES = ("cpu-small", "paper", "aisfx", "aisfx-student")  # the recipes of retrieval_train.PRESETS


@dataclass
class RetrievalRunOptions:
    """The recipe a run starts from; flags not given keep the preset's values (kept out of the config)."""

    preset: str = setting("cpu-small", choices=PRESET_NAMES,
                          help="the recipe: cpu-small (PaSST from scratch, the command line's default), paper (CP-JKU, "
                               "needs a GPU), aisfx (projections on the frozen aiSFX sound-effects encoder: the "
                               "shipped retrieval-default) or aisfx-student (the same on a distilled student tower, "
                               "taken from the retrieval checkpoint given as --audio-weights)")


@dataclass
class RetrievalSettings(TrainerConfig):
    """Settings of `earshot train retrieval`; the common ones (seed, device, threads, grad_accum, amp, ...) come
    from TrainerConfig. The model and front end a preset chooses are the trainer's (RetrievalTrainConfig)."""

    SETTINGS_FROM_PRESET: ClassVar[bool] = True  # flags not given keep the preset's values

    batch_size: int = setting(64, help="(clip, caption) pairs per contrastive batch; clips are deduped inside it",
                              low=2, high=65536)
    optimizer: str = setting("adam", help="optimizer", choices=("adam", "adamw"))
    weight_decay: float = setting(0.0, help="weight decay", low=0.0)
    epochs: int = setting(15, help="epochs of the first (pre-training) stage", low=1)
    warmup_epochs: float = setting(1.0, help="epochs of linear learning-rate warm-up", low=0.0)
    lr: float = setting(2e-5, help="peak learning rate of the first stage", low=0, low_exclusive=True, high=1.0)
    min_lr: float = setting(1e-7, help="end of the cosine decay", low=0.0)
    finetune_epochs: int = setting(5, help="a second stage after `epochs`, from the best model, with caption swaps",
                                   low=0)
    finetune_lr: float = setting(8e-6, help="peak learning rate of the fine-tuning stage", low=0, low_exclusive=True,
                                 high=1.0)
    swap_p: float = setting(0.3, help="caption -> paraphrase swap probability while fine-tuning", low=0.0, high=1.0)
    paraphrases: str | None = setting(None, help="CSV/JSON caption -> paraphrases; no file: no swaps")
    crop_seconds: float = setting(30.0, help="random crop of each training clip, seconds", low=0.1)
    freeze_audio: bool = setting(False, help="train only the projections on precomputed PaSST features")
    grad_clip: float = setting(0.0, help="clip the gradient norm to this (0: off)", low=0.0)
    eval_batch: int = setting(32, help="clips per batch when evaluating", low=1)
    same_text_positives: bool = setting(False, help="clips whose captions have the same text are positives of "
                                                    "each other (corpora of repeated captions), not negatives")
    schedule: str = setting("cosine", help="learning rate: cosine decay over `epochs`, or plateau (divide by 10 "
                                           "after `patience` epochs without a better val mAP@10, back to the best "
                                           "weights; stop early once below min_lr)", choices=("cosine", "plateau"))
    patience: int = setting(3, help="plateau schedule: epochs without a better val mAP@10 before a decay", low=1)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.optimizer not in ("adam", "adamw"):
            raise ValueError(f"optimizer must be 'adam' or 'adamw', got {self.optimizer!r}")
        if self.batch_size < 2:
            raise ValueError("batch_size must be at least 2 for a contrastive loss")
        if self.schedule not in ("cosine", "plateau"):
            raise ValueError(f"schedule must be 'cosine' or 'plateau', got {self.schedule!r}")


def add_eval_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="checkpoint path(s), comma-separated: an ensemble")
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--split", default="val", help="split to score ('all': every clip)")
    p.add_argument("--baseline", choices=("random", "untrained"), action="append", default=[],
                   help="also score a baseline (repeatable)")
    p.add_argument("--baselines", action="store_true", help="score both baselines")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--cache-dir", type=Path)
    p.add_argument("--json", action="store_true")
