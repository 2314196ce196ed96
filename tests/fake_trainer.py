"""A trainer module with the TASKS interface and no torch, for fast tests of the run plumbing.

It "trains" for `--steps` steps of `--step-seconds` each, writes a real (tiny) words checkpoint with
safetensors after every `--save-every` steps and a resume state, honours `--resume`, and can crash.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file, save_file


@dataclass
class FakeTrainConfig:
    steps: int = 20  # steps to run
    step_seconds: float = 0.05  # sleep per step
    lr: float = 0.1  # shown in the form
    batch_size: int = field(default=4, metadata={"min": 2, "max": 64})
    save_every: int = 5
    optimizer: str = "adam"
    fail_at: int = 0  # raise an error at this step (0: never)
    hidden: float = 1.0  # a field with no flag

    def __post_init__(self) -> None:
        if self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"optimizer must be adam or sgd, got {self.optimizer!r}")


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    d = FakeTrainConfig()
    p.add_argument("--data", action="append", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=d.steps, help="number of steps")
    p.add_argument("--step-seconds", type=float, default=d.step_seconds)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--save-every", type=int, default=d.save_every)
    p.add_argument("--optimizer", choices=("adam", "sgd"), default=d.optimizer)
    p.add_argument("--fail-at", type=int, default=0)
    p.add_argument("--max-minutes", type=float, default=None)
    p.add_argument("--device", default="auto")
    p.add_argument("--resume", action="store_true")


def save(out: Path, step: int) -> None:
    meta = {"kind": "words", "config": "{}", "features": "{}", "earshot_version": "0.1.0",
            "training": json.dumps({"steps": step, "metrics": {"dev_ap": step / 100}})}
    tmp = out.with_suffix(".tmp")
    save_file({"w": np.full(3, step, dtype=np.float32)}, str(tmp), metadata=meta)
    os.replace(tmp, out)


def train(args: argparse.Namespace) -> Any:  # noqa: ANN401 - a job
    out = Path(args.out)
    start = 0
    if args.resume and out.is_file():
        start = int(load_file(str(out))["w"][0])
        yield {"step": start, "total": args.steps, "message": f"resumed at step {start}"}
    loss = 1.0
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
