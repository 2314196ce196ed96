"""The one training loop (training.trainer) on a toy regression: resume round trip with RNG states, cancel-safe
saving, legacy resume formats, the result schema, gradient accumulation, clipping, schedules, AMP guard."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from app.services.jobs import drain
from core.checkpoints import CheckpointError, write_safetensors
from training.resume_format import RESUME_VERSION, read_resume, resume_path
from training.trainer import STOP_REASONS, Hooks, Stage, Trainer, TrainResult, cosine_lr
from training.trainer_settings import TrainerConfig


class Toy(Hooks):
    """y = X w + noise with a small MLP; draws from the Python, NumPy and torch RNGs inside every step."""

    kind = "toy"
    metric = "neg_mse"

    def __init__(self, micro: int = 8, epochs: int = 3, dropout: float = 0.2, noisy: bool = True,
                 finetune: int = 1, optimizer: str = "adam", lr: float = 0.05, evaluate: Any = None) -> None:  # noqa: ANN401
        self.micro, self.epochs, self.dropout, self.noisy = micro, epochs, dropout, noisy
        self.finetune, self.optimizer, self.lr, self.eval_fn = finetune, optimizer, lr, evaluate
        self.saved: list[dict[str, Any]] = []

    def prepare(self, trainer: Trainer) -> Any:  # noqa: ANN401 - a job
        self.trainer = trainer
        g = torch.Generator().manual_seed(0)
        self.X = torch.randn(64, 4, generator=g)
        self.y = self.X @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.1 * torch.randn(64, generator=g)
        self.model = nn.Sequential(nn.Linear(4, 16), nn.Dropout(self.dropout), nn.Tanh(), nn.Linear(16, 1))
        yield {"step": 0, "total": 0, "message": "toy data"}

    def stages(self) -> list[Stage]:
        per = 64 // self.micro // self.trainer.config.grad_accum
        out = [Stage("main", self.epochs, per, self.lr, self.lr / 10, warmup_steps=2)]
        if self.finetune:
            out.append(Stage("tune", self.finetune, per, self.lr / 5, self.lr / 250, schedule="plateau",
                             patience=1, start_from_best=True))
        return out

    def begin_stage(self, stage: Stage) -> tuple[nn.Module, torch.optim.Optimizer]:
        self.model.train()
        if self.optimizer == "sgd":
            return self.model, torch.optim.SGD(self.model.parameters(), lr=self.lr)
        return self.model, torch.optim.Adam(self.model.parameters(), lr=self.lr)

    def batches(self, stage: Stage, index: int, epoch: int) -> list[np.ndarray]:
        order = np.random.default_rng([7, index, epoch]).permutation(64)
        return [order[i : i + self.micro] for i in range(0, 64, self.micro)]

    def step(self, module: nn.Module, idx: np.ndarray) -> tuple[torch.Tensor, dict[str, float]]:
        device = next(module.parameters()).device  # the trainer moved the model (CUDA on a GPU machine)
        x, y = self.X[idx].to(device), self.y[idx].to(device)
        loss = (module(x).squeeze(-1) - y).square().mean()
        if self.noisy:  # every global generator takes part, so a resume must restore all of them
            loss = loss * (1 + 0.01 * random.random() + 0.01 * float(np.random.rand()))
        return loss, {"extra": 1.0}

    def evaluate(self, stage: Stage) -> dict[str, float]:
        if self.eval_fn is not None:
            return self.eval_fn(self)
        self.model.eval()
        with torch.no_grad():
            device = next(self.model.parameters()).device
            mse = float((self.model(self.X.to(device)).squeeze(-1) - self.y.to(device)).square().mean())
        self.model.train()
        return {"neg_mse": -mse}

    def save(self, path: Path, model: nn.Module, record: dict[str, Any]) -> None:
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path),
                  metadata={"record": json.dumps(record)})
        self.saved.append(record)


def config(**kw: Any) -> TrainerConfig:  # noqa: ANN401
    return TrainerConfig(**{"device": "cpu", "threads": 1, "grad_clip": 0.0, **kw})


def run(hooks: Toy, out: Path, resume: bool = False, **kw: Any) -> tuple[list[dict], TrainResult]:  # noqa: ANN401
    job = Trainer(hooks, config(**kw), out, resume=resume)
    progress = []
    while True:
        try:
            progress.append(next(job))
        except StopIteration as stop:
            return progress, stop.value


def step_losses(progress: list[dict]) -> list[tuple[int, float]]:
    return [(p["step"], p["loss"]) for p in progress if "extra" in p]


def test_resume_round_trip_restores_weights_optimizer_and_every_rng(tmp_path: Path) -> None:
    full, reference = run(Toy(), tmp_path / "full.safetensors")
    out = tmp_path / "cut.safetensors"
    job = Trainer(Toy(), config(), out)
    for p in job:
        if p.get("step") == 13 and "extra" in p:  # 8 steps an epoch: in the middle of epoch 2
            break
    job.close()  # cancel between steps
    tensors, state = read_resume(resume_path(out))
    assert (state["stage"], state["epoch"], state["step_in_epoch"], state["step"]) == (0, 1, 5, 13)
    assert {"rng.torch", "rng.numpy"} <= set(tensors) and any(k.startswith("optim.") for k in tensors)
    assert state["rng"]["python"] and state["optimizer"]["param_groups"] and state["kind"] == "toy"
    assert len(state["epoch_losses"]) == 5  # the unfinished epoch's losses, for its mean
    progress, resumed = run(Toy(), out, resume=True)
    assert progress[1]["message"].startswith("resumed at step 13")
    assert step_losses(progress) == step_losses(full)[13:]  # exactly the steps of the uninterrupted run
    assert resumed["history"] == reference["history"]
    a, b = load_file(str(tmp_path / "full.safetensors")), load_file(str(out))
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)


def test_resume_refuses_other_settings_and_starts_afresh_without_state(tmp_path: Path) -> None:
    out = tmp_path / "m.safetensors"
    progress, _ = run(Toy(epochs=1, finetune=0), out, resume=True)
    assert any("no resume state" in p.get("message", "") for p in progress)
    with pytest.raises(ValueError, match=r"different model or training config \(seed\)"):
        run(Toy(epochs=1, finetune=0), out, resume=True, seed=3)
    run(Toy(epochs=1, finetune=0), out, resume=True, threads=2)  # where it runs may change


class FrozenToy(Toy):
    """A toy whose untrained part comes from a file (as the student tower under the retrieval projections)."""

    def __init__(self, tower: str, **kwargs: Any) -> None:  # noqa: ANN401
        super().__init__(**kwargs)
        self.tower = tower

    def frozen_sources(self) -> dict[str, str]:
        return {"tower": self.tower}


def test_resume_refuses_a_run_over_other_frozen_weights(tmp_path: Path) -> None:
    out = tmp_path / "m.safetensors"
    run(FrozenToy("a", epochs=1, finetune=0), out)
    with pytest.raises(ValueError, match=r"other frozen weights \(tower differ\)"):
        run(FrozenToy("b", epochs=1, finetune=0), out, resume=True)
    run(FrozenToy("a", epochs=1, finetune=0), out, resume=True)


def test_cancel_inside_the_optimizer_step_keeps_the_last_consistent_state(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "m.safetensors"
    calls = {"n": 0}
    real = torch.optim.Adam.step

    def interrupted(self: torch.optim.Optimizer, *a: Any, **k: Any) -> Any:  # noqa: ANN401
        calls["n"] += 1
        if calls["n"] == 11:
            raise KeyboardInterrupt  # Ctrl-C while the weights are half updated
        return real(self, *a, **k)

    monkeypatch.setattr(torch.optim.Adam, "step", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(Toy(), out)
    _, state = read_resume(resume_path(out))
    assert state["step"] == 8 and state["epoch"] == 1 and out.is_file()  # the end of epoch 1, not step 10
    monkeypatch.setattr(torch.optim.Adam, "step", real)
    full, _ = run(Toy(), tmp_path / "full.safetensors")
    progress, _ = run(Toy(), out, resume=True)
    assert step_losses(progress) == step_losses(full)[8:]


def write_legacy(path: Path, metadata: dict[str, str]) -> Path:
    write_safetensors(path, {"model.w": torch.zeros(2)}, metadata)
    return path


@pytest.mark.parametrize(("metadata", "named"), [
    ({"earshot_resume": json.dumps({"stage": "vqvae", "step": 3})}, "units trainer's resume format 1"),
    ({"scalars": json.dumps({"epoch": 1}), "param_groups": "[]"}, "words trainer's resume format 1"),
    ({"state": json.dumps({"epoch": 1, "python_rng": [3, [1], None]})}, "retrieval trainer's resume format 1"),
    ({"format": "earshot-resume", "version": str(RESUME_VERSION + 1), "state": "{}"}, "version 3"),
    ({"kind": "words"}, "not an Earshot resume state"),
])
def test_legacy_resume_formats_are_refused_by_name(tmp_path: Path, metadata: dict[str, str], named: str) -> None:
    out = tmp_path / "m.safetensors"
    write_legacy(resume_path(out), metadata)
    with pytest.raises(CheckpointError, match=named):
        run(Toy(), out, resume=True)


def test_damaged_resume_file_is_refused_with_a_message(tmp_path: Path) -> None:
    out = tmp_path / "m.safetensors"
    resume_path(out).write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    with pytest.raises(CheckpointError, match="not a readable resume state"):
        run(Toy(), out, resume=True)


def test_the_real_trainers_refuse_their_old_resume_files(tmp_path: Path) -> None:
    from training.words_settings import WordsTrainConfig
    from training.words_train import train_job

    out = tmp_path / "w.safetensors"
    write_legacy(resume_path(out), {"scalars": "{}", "param_groups": "[]"})
    job = train_job(WordsTrainConfig(data=[str(tmp_path)], out=str(out), resume=True, device="cpu", threads=1))
    with pytest.raises(CheckpointError, match="words trainer's resume format 1"):
        drain(job)  # checked before any data is read (this folder has none)


def test_result_schema_and_stop_reasons(tmp_path: Path) -> None:
    _, result = run(Toy(), tmp_path / "m.safetensors")
    assert set(result) == set(TrainResult.__annotations__)
    assert result["stopped"] == "finished" and result["stopped"] in STOP_REASONS
    assert result["stages"] == [{"name": "main", "epochs": 3, "steps": 24}, {"name": "tune", "epochs": 1, "steps": 8}]
    assert result["steps"] == 32 and result["epochs"] == 4 and result["kind"] == "toy"
    assert result["best_metric"] == "neg_mse" and result["best_value"] == max(h["neg_mse"] for h in result["history"])
    json.dumps(result)  # printable as --json


def test_time_budget_stops_between_steps_and_is_resumable(tmp_path: Path) -> None:
    class Slow(Toy):
        def step(self, module: nn.Module, idx: np.ndarray) -> tuple[torch.Tensor, dict[str, float]]:
            import time

            time.sleep(0.05)
            return super().step(module, idx)

    out = tmp_path / "m.safetensors"
    _, result = run(Slow(finetune=0), out, max_minutes=0.3 / 60)  # 0.3 s: a few steps
    assert result["stopped"] == "time_limit" and 0 < result["steps"] < 24
    assert out.is_file() and resume_path(out).is_file()
    _, done = run(Slow(finetune=0), out, resume=True)
    assert done["stopped"] == "finished" and done["steps"] == 24


def test_plateau_schedule_decays_resets_to_the_best_and_stops_early(tmp_path: Path) -> None:
    scores = iter([0.5, 0.4, 0.3, 0.2, 0.1, 0.0])
    hooks = Toy(epochs=1, finetune=6, evaluate=lambda h: {"neg_mse": next(scores)})
    progress, result = run(hooks, tmp_path / "m.safetensors")
    assert result["stopped"] == "early_stopping" and result["best_epoch"] == 1 and result["best_value"] == 0.5
    lrs = [p["lr"] for p in progress if "extra" in p and p["stage"] == "tune"]
    assert lrs[0] == pytest.approx(0.01) and lrs[-1] == pytest.approx(0.01 / 10)
    assert result["epochs"] == 3  # 0.01 -> 1e-3 -> 1e-4, below the stage's min_lr 2e-4: stop


def test_gradient_accumulation_equals_one_big_batch(tmp_path: Path) -> None:
    _, big = run(Toy(micro=16, dropout=0.0, noisy=False, optimizer="sgd", finetune=0), tmp_path / "a.safetensors")
    _, small = run(Toy(micro=4, dropout=0.0, noisy=False, optimizer="sgd", finetune=0), tmp_path / "b.safetensors",
                   grad_accum=4)
    assert big["steps"] == small["steps"] == 12
    a, b = load_file(str(tmp_path / "a.safetensors")), load_file(str(tmp_path / "b.safetensors"))
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6)
    assert [h["loss"] for h in big["history"]] == pytest.approx([h["loss"] for h in small["history"]], rel=1e-5)


def test_gradient_clipping_bounds_each_update(tmp_path: Path) -> None:
    def first_update(clip: float) -> float:
        hooks = Toy(epochs=1, finetune=0, dropout=0.0, noisy=False, optimizer="sgd", lr=1.0)
        job = Trainer(hooks, config(grad_clip=clip), tmp_path / f"{clip}.safetensors")
        next(job)  # data read, model built
        before = torch.cat([p.detach().flatten().clone() for p in hooks.model.parameters()])
        next(job)  # the first step (its lr: 1.0 / warm-up 2)
        after = torch.cat([p.detach().flatten() for p in hooks.model.parameters()])
        job.close()
        return float((after - before).norm())

    assert first_update(0.01) == pytest.approx(0.5 * 0.01, rel=1e-4)
    assert first_update(0.0) > 0.1


def test_cosine_schedule_warms_up_then_decays_to_the_floor() -> None:
    lrs = [cosine_lr(s, 100, 1.0, 0.1, 10) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:], strict=False)) and lrs[-1] == pytest.approx(0.1, abs=1e-3)


def test_amp_is_only_used_on_cuda(tmp_path: Path) -> None:
    job = Trainer(Toy(epochs=1, finetune=0), config(amp="fp16"), tmp_path / "m.safetensors")
    next(job)
    assert job.amp is None and job.device.type == "cpu"  # full precision off CUDA, whatever was asked
    job.close()
    assert drain(Trainer(Toy(epochs=1, finetune=0), config(amp="fp16"), tmp_path / "n.safetensors")
                 )["details"]["precision"] == "fp32"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("amp", ["fp16", "bf16"])
def test_amp_on_cuda_trains_with_autocast_and_scaler(tmp_path: Path, amp: str) -> None:
    job = Trainer(Toy(epochs=2, finetune=0), config(amp=amp, device="cuda"), tmp_path / "m.safetensors")
    result = drain(job)
    assert job.amp == (torch.float16 if amp == "fp16" else torch.bfloat16)
    assert result["details"]["precision"] == amp
    assert np.isfinite([h["loss"] for h in result["history"]]).all()
    assert result["history"][-1]["loss"] < result["history"][0]["loss"]
    _, state = read_resume(resume_path(tmp_path / "m.safetensors"))
    assert (state["scaler"] is not None) == (amp == "fp16")  # fp16 needs loss scaling, bf16 not
