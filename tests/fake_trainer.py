"""A trainer module with the core/kinds.py interface and no torch, for fast tests of the run plumbing.

It "trains" for `--steps` steps of `--step-seconds` each, writes a real (tiny) words checkpoint with
safetensors after every `--save-every` steps and a resume state, honours `--resume`, and can crash; with
`--prep-items` a data pass comes first (progress without a loss).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file, save_file

from core.config import add_arguments, config_from_args, setting


@dataclass
class FakeTrainConfig:
    steps: int = setting(20, help="steps to run", low=1)
    step_seconds: float = setting(0.05, help="sleep per step", low=0)
    lr: float = setting(0.1, help="shown in the form", low=0, low_exclusive=True)
    batch_size: int = setting(4, help="items per step", low=2, high=64)
    save_every: int = setting(5, help="steps between checkpoints", low=1)
    optimizer: str = setting("adam", help="optimizer", choices=("adam", "sgd"))
    fail_at: int = setting(0, help="raise an error at this step (0: never)", low=0)
    max_minutes: float | None = setting(None, help="wall-clock budget", low=0, low_exclusive=True)
    prep_items: int = setting(0, help="items of a data pass before the steps (progress without a loss)", low=0)
    prep_seconds: float = setting(0.0, help="sleep per item of that pass", low=0)
    device: str = setting("auto", help="auto, cpu, cuda, mps")
    hidden: float = 1.0  # a plain field: not a setting, no flag

    def __post_init__(self) -> None:
        if self.step_seconds > 10:
            raise ValueError("step_seconds above 10 would make the tests crawl")


TRAIN_SETTINGS = (FakeTrainConfig,)  # a replacement trainer names the dataclasses that hold its settings
TRAIN_PRESETS = {  # and may list the Train tab's presets; the first is its default choice
    "Fake recipe": {"steps": 20, "optimizer": "adam"},
    "Quick test (tiny)": {"steps": 3, "step_seconds": 0.01, "batch_size": 2, "max_minutes": 1.0},
}


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", action="append", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--resume", action="store_true")
    add_arguments(p, FakeTrainConfig)


def save(out: Path, step: int) -> None:
    meta = {"kind": "words", "config": "{}", "features": "{}", "earshot_version": "0.1.0",
            "training": json.dumps({"steps": step, "metrics": {"dev_ap": step / 100}})}
    tmp = out.with_suffix(".tmp")
    save_file({"w": np.full(3, step, dtype=np.float32)}, str(tmp), metadata=meta)
    os.replace(tmp, out)


def prepare(items: int, seconds: float) -> Any:  # noqa: ANN401 - a job
    """A data pass that says where it is after its first item, then every 500 (as words' augmenting did)."""
    for i in range(items):
        time.sleep(seconds)
        if i % 500 == 0 or i + 1 == items:
            yield {"step": i + 1, "total": items, "message": "augmenting 1 copies of the tokens"}


def train(args: argparse.Namespace) -> Any:  # noqa: ANN401 - a job
    args = argparse.Namespace(**{**vars(args), **vars(config_from_args(FakeTrainConfig, args))})
    out = Path(args.out)
    start = 0
    if args.resume and out.is_file():
        start = int(load_file(str(out))["w"][0])
        yield {"step": start, "total": args.steps, "message": f"resumed at step {start}"}
    loss = 1.0
    yield from prepare(args.prep_items, args.prep_seconds)
    try:
        for step in range(start + 1, args.steps + 1):
            time.sleep(args.step_seconds)
            if step == args.fail_at:
                raise ValueError(f"fake failure at step {step}")
            loss = 1.0 / step
            yield {"step": step, "total": args.steps, "loss": loss, "dev_ap": step / args.steps,
                   "message": f"step {step}"}
            if step % args.save_every == 0:
                save(out, step)
    finally:
        with open(out.parent / "closed.txt", "a") as f:  # the generator was closed (cancel) or ended
            f.write("closed\n")
    if not out.is_file():
        save(out, args.steps)
    return {"checkpoint": str(out), "steps": args.steps, "dev_ap": 1.0, "final_loss": loss,
            "history": [{"step": args.steps}]}
