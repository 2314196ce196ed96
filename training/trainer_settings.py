"""The settings every trainer shares (`TrainerConfig`), torch-free: the Train tab and the run service read them
(through core/kinds.py) without importing a trainer; training/trainer.py runs them."""

from __future__ import annotations

from dataclasses import dataclass

from core.config import setting

# core.device.DEVICE_CHOICES, copied because core/device.py imports torch (tests/test_kinds.py checks they agree)
DEVICE_CHOICES = ("auto", "cpu", "cuda", "mps")
AMP_CHOICES = ("auto", "off", "bf16", "fp16")


@dataclass
class TrainerConfig:
    """Settings every trainer shares; each kind's config dataclass extends it."""

    seed: int = setting(0, help="random seed (weights, batches, crops)", low=0)
    device: str = setting("auto", help="compute device", choices=DEVICE_CHOICES)
    threads: int = setting(0, help="torch CPU threads (0: all cores but one)", low=0, high=256)
    max_minutes: float | None = setting(None, help="wall-clock budget in minutes, shared by the stages", low=0.01)
    grad_accum: int = setting(1, help="micro-batches per optimizer step (gradient accumulation)", low=1, high=1024)
    grad_clip: float = setting(1.0, help="clip the gradient norm to this (0: off)", low=0.0)
    warmup_steps: int = setting(0, help="optimizer steps of linear learning-rate warm-up", low=0)
    amp: str = setting("auto", help="mixed precision on CUDA: auto (bf16 where supported, else fp16), off, "
                                    "bf16, fp16; other devices always run in full precision", choices=AMP_CHOICES)

    def __post_init__(self) -> None:
        if self.grad_accum < 1:
            raise ValueError("grad_accum must be at least 1")
        if self.amp not in AMP_CHOICES:
            raise ValueError(f"amp must be one of {', '.join(AMP_CHOICES)}, got {self.amp!r}")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise ValueError("max_minutes must be positive")
