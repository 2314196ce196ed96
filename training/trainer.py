"""One training loop for every model kind: a generator job with per-model hooks.

    trainer = Trainer(hooks, config, out)          # hooks: data, model, step/loss, evaluate, save
    result = yield from trainer                     # progress dicts while it runs, a TrainResult dict at the end

The Trainer owns everything that is the same for all models: device and thread set-up, DDP (torchrun; the
losses that compare across the batch gather rows themselves through `trainer.gather`), AMP on CUDA (bf16 or
fp16 autocast, a GradScaler for fp16), gradient accumulation and clipping, warm-up + cosine or
step-decay-on-plateau learning rates, stages (each with its own parameters and optimizer), the wall-clock
budget (shared between the stages by their step counts, agreed across ranks), evaluation after every epoch
with best-model keeping, ONE resume format and ONE result schema. Its settings, `TrainerConfig`, are in
training/trainer_settings.py (torch-free, for the app's forms).

The resume state (its one format: a resumed run takes the same steps as one never stopped) is written and read by
training/resume_format.py.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import random
import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import torch
from torch import nn

from core import distributed as ddp
from core.checkpoints import CheckpointError, config_to_dict
from core.device import autocast_dtype, limit_threads, resolve_device
from training.resume_format import (
    RngState,
    config_differences,
    cpu_copy,
    join_optimizer,
    read_resume,
    resume_path,
    rng_state,
    set_rng_state,
    split_optimizer,
    write_resume,
)
from training.trainer_settings import TrainerConfig

Progress = dict[str, Any]
STOP_REASONS = ("finished", "time_limit", "cancelled", "early_stopping")


# ------------------------------------------------------------------------------------------------ schedules


def warmup_factor(step: int, warmup: int) -> float:
    """Linear ramp over the first `warmup` optimizer steps (0-based `step`): 1/warmup ... 1."""
    return min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0


def cosine_lr(step: int, total: int, base: float, floor: float, warmup: int = 0) -> float:
    """Warm-up, then cosine decay base -> floor over the remaining steps of a stage."""
    if step < warmup:
        return base * warmup_factor(step, warmup)
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + (base - floor) * 0.5 * (1 + math.cos(math.pi * t))


def plateau_lr(step: int, base: float, scale: float, warmup: int = 0) -> float:
    """Warm-up, then the base rate divided by every decay so far (`scale`: the product of 1/decay)."""
    return base * scale * warmup_factor(step, warmup)


@dataclass
class Stage:
    """One phase of training with its own parameters, optimizer and schedule."""

    name: str
    epochs: int
    steps_per_epoch: int  # optimizer steps of a full epoch
    lr: float
    min_lr: float = 0.0  # end of the cosine decay; the plateau schedule stops below it
    warmup_steps: int = 0
    schedule: str = "cosine"  # cosine | plateau
    steps: int | None = None  # total optimizer steps when the last epoch is cut short (step-based stages)
    patience: int = 4  # plateau: epochs without a better metric before the rate is divided ...
    decay: float = 10.0  # ... by this, and the weights go back to the best ones
    start_from_best: bool = False  # begin from the best weights so far (a fine-tuning stage)

    @property
    def total_steps(self) -> int:
        return self.steps if self.steps is not None else self.epochs * self.steps_per_epoch

    def epoch_steps(self, epoch: int) -> int:
        return max(0, min(self.steps_per_epoch, self.total_steps - epoch * self.steps_per_epoch))


# ------------------------------------------------------------------------------------------------ result


class TrainResult(TypedDict):
    """What every trainer returns (and `--json` prints): the same keys for every kind."""

    kind: str
    checkpoint: str
    resume_state: str
    stages: list[dict[str, Any]]  # [{name, epochs, steps}] done per stage
    steps: int
    epochs: int
    wall_time_s: float
    stopped: str  # one of STOP_REASONS
    best_metric: str | None  # e.g. "dev_ap", "val_map10"; None: the last model is kept
    best_value: float | None
    best_epoch: int
    metrics: dict[str, float]  # of the saved model: its evaluation + what the kind adds (losses, ...)
    history: list[dict[str, Any]]  # one entry per epoch
    details: dict[str, Any]  # data counts, problems, device: kind-specific facts, not metrics


def precision_name(amp: torch.dtype | None) -> str:
    """What a run computed in, for its result: "bf16" or "fp16" under autocast, else "fp32"."""
    return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(amp, "fp32")


# ------------------------------------------------------------------------------------------------ hooks


class Hooks:
    """What a model kind supplies. Everything else is the Trainer's."""

    kind = "model"
    metric: str | None = None  # the evaluate() key that picks the best model (higher is better)
    find_unused = False  # DDP: some trainable parameters take no part in the loss

    def prepare(self, trainer: Trainer) -> Generator[Progress, None, None]:
        """Read the data and build `self.model` (on trainer.device); may yield progress."""
        raise NotImplementedError
        yield {}

    model: nn.Module

    def stages(self) -> list[Stage]:
        raise NotImplementedError

    def begin_stage(self, stage: Stage) -> tuple[nn.Module, torch.optim.Optimizer]:
        """-> (the module the steps run through, DDP-wrapped by the Trainer; the stage's optimizer)."""
        raise NotImplementedError

    def begin_epoch(self, stage: Stage) -> None:
        """Put the model in training mode (evaluation may have changed it)."""

    def batches(self, stage: Stage, index: int, epoch: int) -> Sequence[Any]:
        """The micro-batches of one epoch: a function of (seed, stage, epoch) only."""
        raise NotImplementedError

    def step(self, module: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:  # noqa: ANN401
        """One micro-batch: (loss, extra numbers for the progress)."""
        raise NotImplementedError

    def evaluate(self, stage: Stage) -> dict[str, float]:
        """Metrics after an epoch ({}: none, the latest model counts as the best)."""
        return {}

    def save(self, path: Path, model: nn.Module, record: dict[str, Any]) -> None:
        """Write the checkpoint of `model` (the best weights) with `record` (steps, epochs, metrics...)."""
        raise NotImplementedError

    def frozen_prefixes(self) -> tuple[str, ...]:
        """State-dict prefixes that are not trained and not saved (loaded from elsewhere)."""
        return ()

    def frozen_sources(self) -> dict[str, str]:
        """What weights that are not trained and not in the resume state come from, by content (e.g. a tower
        file's hash), read before `prepare`: a resumed run must load the same ones."""
        return {}

    def final_metrics(self) -> dict[str, float]:
        """Numbers the kind adds to the result's metrics (e.g. training losses, codebook use)."""
        return {}

    def details(self) -> dict[str, Any]:
        return {}


# ------------------------------------------------------------------------------------------------ trainer


@dataclass
class _State:
    """Where the loop is: what a resume state stores (as JSON) besides tensors, so a resumed run goes on from it."""

    stage: int = 0
    epoch: int = 0  # within the stage
    step_in_epoch: int = 0
    step: int = 0  # optimizer steps over all stages
    epochs_done: int = 0  # over all stages
    best_value: float | None = None
    best_epoch: int = 0
    best_metrics: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    epoch_losses: list[float] = field(default_factory=list)
    lr_scale: float = 1.0  # plateau decays so far
    bad_epochs: int = 0
    elapsed_s: float = 0.0
    stage_steps: dict[str, int] = field(default_factory=dict)


@dataclass
class _Run:
    """One run of the loop in this process: the position `s` (saved) and what lives only here (not saved)."""

    s: _State
    stages: list[Stage]
    scaler: torch.amp.GradScaler
    budget_s: float | None  # the wall-clock budget, shared by the stages by their step counts
    started: float  # time.monotonic() when this process began
    elapsed_before: float = 0.0  # seconds spent by the runs this one resumes
    opt: torch.optim.Optimizer | None = None  # the current stage's optimizer
    rng: RngState | None = None  # the RNG states a resume from the current position starts with
    safe: bool = True  # weights and optimizer agree with the position (False inside optimizer.step)
    stopped: str = "finished"  # one of STOP_REASONS
    saved_opt: tuple[dict[str, torch.Tensor], dict[str, Any]] | None = None  # for the first stage's optimizer
    saved_rng: RngState | None = None  # set when that stage begins
    total: int = field(init=False)  # optimizer steps of all stages

    def __post_init__(self) -> None:
        self.total = sum(st.total_steps for st in self.stages)

    def elapsed(self) -> float:
        return self.elapsed_before + time.monotonic() - self.started

    def stage_end(self) -> float | None:
        """When the current stage's share of the budget is spent (seconds since the first run began)."""
        if self.budget_s is None:
            return None
        done = sum(st.total_steps for st in self.stages[: self.s.stage + 1])
        return self.budget_s * (done / max(1, self.total))

    def series(self, stage: Stage) -> dict[str, str]:
        return {"stage": stage.name} if len(self.stages) > 1 else {}  # plots: one loss series per stage


class Trainer(Generator[Progress, None, TrainResult]):
    """The loop. Iterate it (or `yield from` it) as a job; close() between steps keeps a consistent resume state."""

    def __init__(self, hooks: Hooks, config: TrainerConfig, out: str | Path, resume: bool = False) -> None:
        self.hooks, self.config, self.out, self.resume = hooks, config, Path(out), resume
        self.resume_file = resume_path(self.out)
        self.ctx, self.device = ddp.SINGLE, torch.device("cpu")
        self.amp: torch.dtype | None = None
        self.best: dict[str, torch.Tensor] | None = None  # the best weights so far (CPU copies)
        self._gen = self._run()

    # the generator protocol, delegated to the loop
    def send(self, value: None) -> Progress:
        return self._gen.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Progress:  # noqa: ANN401
        return self._gen.throw(typ, val, tb) if val is not None else self._gen.throw(typ)

    def close(self) -> None:
        self._gen.close()

    def __iter__(self) -> Iterator[Progress]:
        return self

    def __next__(self) -> Progress:
        return self._gen.send(None)

    # --------------------------------------------------------------------------------- helpers for hooks

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """(n_local, ...) -> (n_global, ...): every rank's rows, for losses with cross-batch negatives."""
        return ddp.gather_rows(x, self.ctx)

    def local(self, items: Sequence[Any]) -> list[Any]:
        """This rank's contiguous share of a global batch."""
        return ddp.select(items, ddp.local_rows(len(items), self.ctx))

    # --------------------------------------------------------------------------------- set-up

    def _setup(self) -> None:
        c = self.config
        if c.threads and c.threads > 0:
            torch.set_num_threads(c.threads)
        else:
            limit_threads(1)
        self.ctx, self.device = ddp.setup(resolve_device(c.device))
        dtype = autocast_dtype(self.device)
        if self.device.type != "cuda" or c.amp == "off":
            dtype = None
        elif c.amp in ("bf16", "fp16"):
            dtype = torch.bfloat16 if c.amp == "bf16" else torch.float16
        self.amp = dtype
        random.seed(c.seed)
        np.random.seed(c.seed)
        torch.manual_seed(c.seed)

    def _config_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(config_to_dict(self.config), default=str))

    # --------------------------------------------------------------------------------- resume

    def _model_tensors(self, state_dict: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
        skip = self.hooks.frozen_prefixes()
        return {f"{prefix}.{k}": cpu_copy(v) for k, v in state_dict.items() if not (skip and k.startswith(skip))}

    def _save_resume(self, run: _Run) -> None:
        """The resume state of the current position: weights, best weights, optimizer (none between stages), RNG."""
        if not self.ctx.is_main:
            return
        assert run.rng is not None
        tensors = self._model_tensors(self.hooks.model.state_dict(), "model")
        if self.best is not None:
            tensors |= self._model_tensors(self.best, "best")
        opt_meta = None
        if run.opt is not None:
            opt_t, opt_meta = split_optimizer(run.opt)
            tensors |= opt_t
        tensors |= run.rng[0]
        scaler = run.scaler.state_dict() if run.scaler.is_enabled() else None
        state = {"kind": self.hooks.kind, **dataclasses.asdict(run.s), "optimizer": opt_meta, "rng": run.rng[1],
                 "scaler": scaler, "config": self._config_dict(), "frozen": self.frozen}
        write_resume(self.resume_file, tensors, state)

    def _read_saved(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]] | None:
        """The resume state, checked before any data is read: format, kind and settings."""
        if not self.resume or not self.resume_file.is_file():
            return None
        tensors, state = read_resume(self.resume_file)
        name = self.resume_file.name
        if state.get("kind") != self.hooks.kind:
            raise CheckpointError(f"{name} holds a {state.get('kind')!r} run, not {self.hooks.kind!r}")
        diff = config_differences(state.get("config", {}), self._config_dict())
        if diff:
            raise ValueError(f"{name} was saved by a different model or training config ({', '.join(diff)}); "
                             f"resume with the same settings, or start afresh without --resume")
        saved = state.get("frozen")  # absent in states written before it was kept
        if saved is not None and saved != self.frozen:
            keys = sorted(k for k in set(saved) | set(self.frozen) if saved.get(k) != self.frozen.get(k))
            raise ValueError(f"{name} was trained over other frozen weights ({', '.join(keys)} differ); resume "
                             f"with the same ones, or start afresh without --resume")
        return tensors, state

    def _resume(self, run: _Run, tensors: dict[str, torch.Tensor], state: dict[str, Any]) -> None:
        """Weights (and the best weights) into the built model; the position, the time spent, the GradScaler
        back; the optimizer and RNG states kept for when the saved stage begins."""
        name, skip = self.resume_file.name, self.hooks.frozen_prefixes()
        model = {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}
        missing = [k for k in self.hooks.model.state_dict() if k not in model and not (skip and k.startswith(skip))]
        if missing:
            raise CheckpointError(f"{name}: does not fit this model (missing {', '.join(missing[:3])})")
        try:
            self.hooks.model.load_state_dict(model, strict=False)
        except RuntimeError as e:  # shapes differ: other data (e.g. speakers) or another model size
            raise CheckpointError(f"{name}: does not fit this model ({str(e).splitlines()[-1].strip()}); "
                                  f"resume with the same data and settings, or start afresh") from e
        best = {k[5:]: v for k, v in tensors.items() if k.startswith("best.")}
        if best:
            self.best = {**self.hooks.model.state_dict(), **best}
        fields = {f.name for f in dataclasses.fields(_State)}
        run.s = _State(**{k: v for k, v in state.items() if k in fields})
        run.elapsed_before = run.s.elapsed_s
        run.saved_opt = (tensors, state["optimizer"]) if state.get("optimizer") else None
        run.saved_rng = ({k: v for k, v in tensors.items() if k.startswith("rng.")}, state["rng"])
        if state.get("scaler") and run.scaler.is_enabled():
            run.scaler.load_state_dict(state["scaler"])

    # --------------------------------------------------------------------------------- the loop

    def _run(self) -> Generator[Progress, None, TrainResult]:
        run = yield from self._start()
        try:
            while run.s.stage < len(run.stages):
                out_of_time = yield from self._run_stage(run)
                if not self._end_stage(run, out_of_time):
                    break
        except BaseException:  # cancel (GeneratorExit), Ctrl-C, errors: keep a consistent resume state
            if run.safe:
                run.s.elapsed_s = run.elapsed()
                self._save_resume(run)
            raise
        return self._finish(run)

    def _start(self) -> Generator[Progress, None, _Run]:
        """Devices, the data and the model (the hooks' `prepare`), and the position: the start, or the resume
        state's (read and checked before the data, so a wrong one fails fast)."""
        started = time.monotonic()
        self._setup()
        self.frozen = self.hooks.frozen_sources()
        saved = self._read_saved()
        yield from self.hooks.prepare(self)
        self.hooks.model.to(self.device)
        self.best = None
        c = self.config
        scaler = torch.amp.GradScaler(self.device.type, enabled=self.amp == torch.float16)
        run = _Run(_State(), self.hooks.stages(), scaler, c.max_minutes * 60 if c.max_minutes else None, started)
        if self.resume and saved is None:
            yield {"step": 0, "total": 0, "message": f"no resume state ({self.resume_file.name}): starting afresh"}
        if saved is not None:
            self._resume(run, *saved)
            s, stages = run.s, run.stages
            where = f"{stages[s.stage].name}, epoch {s.epoch + 1}" if s.stage < len(stages) else "already finished"
            yield {"step": s.step, "total": 0, "message": f"resumed at step {s.step} ({where})"}
        run.rng = rng_state()
        return run

    def _run_stage(self, run: _Run) -> Generator[Progress, None, bool]:
        """The current stage's epochs from the current position; returns whether its share of the time ran out."""
        s, stage, hooks = run.s, run.stages[run.s.stage], self.hooks
        if stage.start_from_best and s.epoch == 0 and s.step_in_epoch == 0 and self.best is not None:
            hooks.model.load_state_dict(self.best)
        module, run.opt = hooks.begin_stage(stage)
        if run.saved_opt is not None:  # a resumed run: the stage it stopped in
            run.opt.load_state_dict(join_optimizer(*run.saved_opt))
            run.saved_opt = None
        if run.saved_rng is not None:
            set_rng_state(*run.saved_rng)
            run.saved_rng = None
        run.rng = rng_state()
        step_module = ddp.wrap(module, self.ctx, self.device, find_unused=hooks.find_unused)
        while s.epoch < stage.epochs and stage.epoch_steps(s.epoch) > 0:
            if (yield from self._run_epoch(run, stage, step_module)):
                return True
            yield self._end_epoch(run, stage)
            if run.stopped == "early_stopping":
                break
        return False

    def _run_epoch(self, run: _Run, stage: Stage, step_module: nn.Module) -> Generator[Progress, None, bool]:
        """The optimizer steps left in the current epoch; returns whether the stage's time ran out first."""
        s, grad_accum = run.s, self.config.grad_accum
        self.hooks.begin_epoch(stage)
        micro = self.hooks.batches(stage, s.stage, s.epoch)
        n_steps = -(-len(micro) // grad_accum)  # an epoch-based stage: all its batches
        if stage.steps is not None:
            n_steps = min(n_steps, stage.epoch_steps(s.epoch))
        stage_end = run.stage_end()
        while s.step_in_epoch < n_steps:
            if ddp.agree(stage_end is not None and run.elapsed() > stage_end, self.ctx, self.device):
                return True
            first = s.step_in_epoch * grad_accum
            yield self._optimizer_step(run, stage, step_module, micro[first : first + grad_accum])
        return False

    def _optimizer_step(self, run: _Run, stage: Stage, step_module: nn.Module, parts: Sequence[Any]) -> Progress:
        """One optimizer step over `parts` (gradient accumulation), at the schedule's rate; its progress."""
        s, c, opt, scaler, hooks = run.s, self.config, run.opt, run.scaler, self.hooks
        assert opt is not None
        losses, stats = [], {}
        for batch in parts:
            with torch.autocast(self.device.type, dtype=self.amp, enabled=self.amp is not None):
                loss, stats = hooks.step(step_module, batch)
            scaler.scale(loss / len(parts)).backward()
            losses.append(float(loss.detach()))
        stage_step = s.stage_steps.get(stage.name, 0)
        lr = self._lr(stage, stage_step, s)
        for g in opt.param_groups:
            g["lr"] = lr
        if c.grad_clip > 0:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_([p for g in opt.param_groups for p in g["params"]], c.grad_clip)
        run.safe = False
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        s.step += 1
        s.step_in_epoch += 1
        s.stage_steps[stage.name] = stage_step + 1
        run.safe = True
        run.rng = rng_state()  # what a resume after this step starts from
        loss_value = float(np.mean(losses))
        s.epoch_losses.append(loss_value)
        return {"step": s.step, "total": run.total, "loss": loss_value, **run.series(stage), "epoch": s.epochs_done + 1,
                "lr": lr, **stats, **self._last_metrics(s, hooks.metric),
                "message": f"{stage.name} epoch {s.epoch + 1}/{stage.epochs}"}

    def _end_epoch(self, run: _Run, stage: Stage) -> Progress:
        """Evaluate, keep the best weights (and save them) or decay on a plateau, save the resume state; the
        epoch's progress."""
        s, hooks = run.s, self.hooks
        assert run.opt is not None
        metrics = hooks.evaluate(stage)
        s.epochs_done += 1
        entry = {"stage": stage.name, "epoch": s.epochs_done, "step": s.step,
                 "loss": float(np.mean(s.epoch_losses)) if s.epoch_losses else float("nan"),
                 "lr": run.opt.param_groups[0]["lr"], **metrics}
        s.history.append(entry)
        s.epoch, s.step_in_epoch, s.epoch_losses = s.epoch + 1, 0, []
        value = metrics.get(hooks.metric) if hooks.metric else None
        message = f"{stage.name} epoch {s.epoch}: loss {entry['loss']:.4f}"
        if value is not None:
            message += f", {hooks.metric} {value:.4f}"
        message += self._keep_best(run, stage, value, metrics)
        s.elapsed_s = run.elapsed()
        run.rng = rng_state()  # after evaluation: a cancel at the next yield saves this
        self._save_resume(run)
        ddp.barrier(self.ctx)
        return {"step": s.step, "total": run.total, "loss": entry["loss"], **run.series(stage),
                "epoch": s.epochs_done, "lr": entry["lr"], **metrics, "epoch_end": True, "message": message}

    def _keep_best(self, run: _Run, stage: Stage, value: float | None, metrics: dict[str, float]) -> str:
        """A better epoch (or one without a metric) becomes the best and is saved; on a plateau schedule enough
        worse ones divide the rate and go back to the best weights. Returns what to add to the epoch's message."""
        s = run.s
        if value is None or s.best_value is None or value > s.best_value:
            s.best_value, s.best_epoch, s.best_metrics = value, s.epochs_done, metrics
            self.best = {k: cpu_copy(v) for k, v in self.hooks.model.state_dict().items()}
            self._save_model(run)
            return " (best)" if value is not None else ""
        if stage.schedule != "plateau":
            return ""
        s.bad_epochs += 1
        if s.bad_epochs < stage.patience:
            return ""
        s.lr_scale /= stage.decay
        s.bad_epochs = 0
        assert self.best is not None
        self.hooks.model.load_state_dict(self.best)  # the best weights at the lower rate
        if stage.lr * s.lr_scale < stage.min_lr:
            run.stopped = "early_stopping"
        return f"; lr -> {stage.lr * s.lr_scale:.3g}, back to epoch {s.best_epoch}"

    def _end_stage(self, run: _Run, out_of_time: bool) -> bool:
        """After a stage's epochs: False to stop (early stopping; out of time in the last stage), else the next
        stage's position, saved (its optimizer starts afresh)."""
        if run.stopped == "early_stopping":
            return False
        if out_of_time:
            run.stopped = "time_limit"
            if run.s.stage == len(run.stages) - 1:
                return False
        s = run.s
        s.stage, s.epoch, s.step_in_epoch, s.epoch_losses = s.stage + 1, 0, 0, []
        run.opt = None
        s.elapsed_s = run.elapsed()
        run.rng = rng_state()
        self._save_resume(run)
        return True

    def _save_model(self, run: _Run) -> None:
        """The checkpoint: the best weights (the latest without any) and the run's record."""
        if not self.ctx.is_main:
            return
        s, model = run.s, self.hooks.model
        if self.best is not None:
            model = copy.deepcopy(self.hooks.model)
            model.load_state_dict(self.best)
        record = {"steps": s.step, "epochs": s.epochs_done, "best_epoch": s.best_epoch,
                  "metrics": s.best_metrics | self.hooks.final_metrics(), "wall_time_s": round(run.elapsed(), 1),
                  "train_config": self._config_dict(), "stage_steps": dict(s.stage_steps)}
        self.hooks.save(self.out, model, record)

    def _finish(self, run: _Run) -> TrainResult:
        """The last resume state and checkpoint (the latest model when no metric picks one, or when time ran out
        before any was written); the result."""
        run.s.elapsed_s = run.elapsed()
        run.rng = rng_state()
        self._save_resume(run)
        if self.best is None or run.stopped == "time_limit" and not self.out.is_file():
            self.best = self.best or {k: cpu_copy(v) for k, v in self.hooks.model.state_dict().items()}
            self._save_model(run)
        elif not self.hooks.metric:  # no metric: the checkpoint is the latest model (with the final numbers)
            self.best = {k: cpu_copy(v) for k, v in self.hooks.model.state_dict().items()}
            self._save_model(run)
        ddp.teardown(self.ctx)
        return self._result(run)

    def _result(self, run: _Run) -> TrainResult:
        s, hooks = run.s, self.hooks
        epochs: dict[str, int] = {}
        for h in s.history:
            epochs[h["stage"]] = epochs.get(h["stage"], 0) + 1
        stage_list = [{"name": st.name, "epochs": epochs.get(st.name, 0), "steps": s.stage_steps.get(st.name, 0)}
                      for st in run.stages]
        return TrainResult(
            kind=hooks.kind, checkpoint=str(self.out), resume_state=str(self.resume_file), stages=stage_list,
            steps=s.step, epochs=s.epochs_done, wall_time_s=round(run.elapsed(), 1), stopped=run.stopped,
            best_metric=hooks.metric, best_value=s.best_value, best_epoch=s.best_epoch,
            metrics=s.best_metrics | hooks.final_metrics(), history=s.history,
            details={"device": str(self.device), "threads": torch.get_num_threads(),
                     "processes": self.ctx.world_size, "precision": precision_name(self.amp), **hooks.details()},
        )

    def _lr(self, stage: Stage, stage_step: int, s: _State) -> float:
        if stage.schedule == "plateau":
            return plateau_lr(stage_step, stage.lr, s.lr_scale, stage.warmup_steps)
        return cosine_lr(stage_step, stage.total_steps, stage.lr, stage.min_lr, stage.warmup_steps)

    @staticmethod
    def _last_metrics(s: _State, metric: str | None) -> dict[str, float]:
        if not s.history:
            return {metric: float("nan")} if metric else {}
        return {k: v for k, v in s.history[-1].items() if k not in ("stage", "epoch", "step", "loss", "lr")}
