"""One training loop for every model kind: a generator job with per-model hooks.

    trainer = Trainer(hooks, config, out)          # hooks: data, model, step/loss, evaluate, save
    result = yield from trainer                     # progress dicts while it runs, a TrainResult dict at the end

The Trainer owns everything that is the same for all models: device and thread set-up, DDP (torchrun; the
losses that compare across the batch gather rows themselves through `trainer.gather`), AMP on CUDA (bf16 or
fp16 autocast, a GradScaler for fp16), gradient accumulation and clipping, warm-up + cosine or
step-decay-on-plateau learning rates, stages (each with its own parameters and optimizer), the wall-clock
budget (shared between the stages by their step counts, agreed across ranks), evaluation after every epoch
with best-model keeping, ONE resume format and ONE result schema.

Resume state: `<out stem>.resume.safetensors`, written atomically at the end of every epoch and when the job
stops between steps (cancel, Ctrl-C, time limit). Tensors: `model.*`, `best.*`, `optim.<param>.<name>`,
`rng.torch`, `rng.cuda.<i>`, `rng.numpy`; metadata `format` / `version` and `state` (JSON: stage, epoch, step
in epoch, global step, best metric, history, losses of the unfinished epoch, non-tensor optimizer state,
GradScaler, Python and NumPy RNG, train config). Batches must be a function of (seed, stage, epoch) and the
step inside the epoch, so a run resumed mid-epoch takes the same steps as one that was never stopped.
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
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from core import distributed as ddp
from core.checkpoints import CheckpointError, config_to_dict, safetensors_metadata, write_safetensors
from core.device import autocast_dtype, limit_threads, resolve_device
from training.trainer_settings import TrainerConfig

Progress = dict[str, Any]
RESUME_FORMAT = "earshot-resume"
RESUME_VERSION = 2
STOP_REASONS = ("finished", "time_limit", "cancelled", "early_stopping")
# settings that may change between a run and its resumption (where it runs, not what it learns)
RESUMABLE = {"device", "threads", "max_minutes", "resume", "cache", "cache_dir", "checkpoint_every", "out", "data"}


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


# ------------------------------------------------------------------------------------------------ resume


def precision_name(amp: torch.dtype | None) -> str:
    """What a run computed in, for its result: "bf16" or "fp16" under autocast, else "fp32"."""
    return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(amp, "fp32")


def resume_path(out: str | Path) -> Path:
    out = Path(out)
    return out.with_name(out.stem + ".resume.safetensors")


def _cpu(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().contiguous().clone()


def split_optimizer(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Optimizer state -> (tensors named optim.<param>.<name>, the JSON-able rest)."""
    state = opt.state_dict()
    tensors, scalars = {}, {}
    for pid, s in state["state"].items():
        for name, value in s.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optim.{pid}.{name}"] = _cpu(value)
            else:
                scalars[f"{pid}.{name}"] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def join_optimizer(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        if key.startswith("optim."):
            _, pid, name = key.split(".", 2)
            state.setdefault(int(pid), {})[name] = value
    for key, value in meta["scalars"].items():
        pid, name = key.split(".", 1)
        state.setdefault(int(pid), {})[name] = value
    return {"state": state, "param_groups": meta["param_groups"]}


def rng_state() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Python, NumPy, torch (and CUDA) generator states -> (tensors, JSON)."""
    tensors = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{i}"] = s
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    tensors["rng.numpy"] = torch.from_numpy(np.asarray(keys, dtype=np.int64))
    py = random.getstate()
    return tensors, {"python": [py[0], list(py[1]), py[2]], "numpy": [kind, int(pos), int(has_gauss), float(gauss)]}


def set_rng_state(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    torch.set_rng_state(tensors["rng.torch"])
    cuda = [tensors[k] for k in sorted(k for k in tensors if k.startswith("rng.cuda."))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda[: torch.cuda.device_count()])
    kind, pos, has_gauss, gauss = meta["numpy"]
    np.random.set_state((kind, tensors["rng.numpy"].numpy().astype(np.uint32), pos, has_gauss, gauss))
    py = meta["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))


def write_resume(path: Path, tensors: dict[str, torch.Tensor], state: dict[str, Any]) -> None:
    write_safetensors(path, tensors, {"format": RESUME_FORMAT, "version": str(RESUME_VERSION),
                                      "state": json.dumps(state)})


def legacy_format(meta: dict[str, str]) -> str | None:
    """Name the resume formats of Earshot before the one loop (none of them can be continued)."""
    if "earshot_resume" in meta:
        return "the units trainer's resume format 1 (no RNG state)"
    if "scalars" in meta and "param_groups" in meta:
        return "the words trainer's resume format 1 (optimizer step counts not saved)"
    if "state" in meta and "python_rng" in meta.get("state", ""):
        return "the retrieval trainer's resume format 1"
    return None


def read_resume(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """-> (tensors, state); a file of another format or version is refused with a message that names it."""
    try:
        meta = safetensors_metadata(path)
    except CheckpointError as e:
        raise CheckpointError(f"{path.name}: not a readable resume state ({e})") from e
    if meta.get("format") != RESUME_FORMAT:
        old = legacy_format(meta)
        if old is None:
            raise CheckpointError(f"{path.name}: not an Earshot resume state")
        raise CheckpointError(f"{path.name} was written in {old}, which this version cannot continue "
                              f"(it reads resume format {RESUME_VERSION}); start afresh without --resume")
    version = meta.get("version", "?")
    if version != str(RESUME_VERSION):
        raise CheckpointError(f"{path.name}: resume format version {version}, this Earshot reads version "
                              f"{RESUME_VERSION}; start afresh without --resume")
    try:
        return load_file(str(path)), json.loads(meta["state"])
    except (SafetensorError, OSError, KeyError, ValueError) as e:
        raise CheckpointError(f"{path.name}: damaged resume state ({e})") from e


def config_differences(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Top-level settings that differ, apart from those a resumed run may change."""
    keys = (set(saved) | set(current)) - RESUMABLE
    return sorted(k for k in keys if saved.get(k) != current.get(k))


# ------------------------------------------------------------------------------------------------ trainer


@dataclass
class _State:
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


class Trainer(Generator[Progress, None, TrainResult]):
    """The loop. Iterate it (or `yield from` it) as a job; close() between steps keeps a consistent resume state."""

    def __init__(self, hooks: Hooks, config: TrainerConfig, out: str | Path, resume: bool = False) -> None:
        self.hooks, self.config, self.out, self.resume = hooks, config, Path(out), resume
        self.resume_file = resume_path(self.out)
        self.ctx, self.device = ddp.SINGLE, torch.device("cpu")
        self.amp: torch.dtype | None = None
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
        return {f"{prefix}.{k}": _cpu(v) for k, v in state_dict.items() if not (skip and k.startswith(skip))}

    def _save_resume(self, s: _State, opt: torch.optim.Optimizer | None, scaler: torch.amp.GradScaler,
                     rng: tuple[dict[str, torch.Tensor], dict[str, Any]]) -> None:
        if not self.ctx.is_main:
            return
        tensors = self._model_tensors(self.hooks.model.state_dict(), "model")
        if self.best is not None:
            tensors |= self._model_tensors(self.best, "best")
        opt_meta = None
        if opt is not None:
            opt_t, opt_meta = split_optimizer(opt)
            tensors |= opt_t
        tensors |= rng[0]
        state = {"kind": self.hooks.kind, **dataclasses.asdict(s), "optimizer": opt_meta, "rng": rng[1],
                 "scaler": scaler.state_dict() if scaler.is_enabled() else None, "config": self._config_dict(),
                 "frozen": self.frozen}
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

    def _apply_saved(self, tensors: dict[str, torch.Tensor], state: dict[str, Any]) -> _State:
        """Weights (and the best weights) into the built model; the loop position back."""
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
        return _State(**{k: v for k, v in state.items() if k in fields})

    # --------------------------------------------------------------------------------- the loop

    def _run(self) -> Generator[Progress, None, TrainResult]:
        t0 = time.monotonic()
        c, hooks = self.config, self.hooks
        self._setup()
        self.frozen = self.hooks.frozen_sources()
        saved = self._read_saved()
        yield from hooks.prepare(self)
        hooks.model.to(self.device)
        stages = hooks.stages()
        self.best: dict[str, torch.Tensor] | None = None
        s = _State()
        saved_opt = saved_rng = saved_scaler = None
        if self.resume and saved is None:
            yield {"step": 0, "total": 0, "message": f"no resume state ({self.resume_file.name}): starting afresh"}
        if saved is not None:
            tensors, meta = saved
            s = self._apply_saved(tensors, meta)
            saved_opt = (tensors, meta["optimizer"]) if meta.get("optimizer") else None
            saved_rng = ({k: v for k, v in tensors.items() if k.startswith("rng.")}, meta["rng"])
            saved_scaler = meta.get("scaler")
            where = f"{stages[s.stage].name}, epoch {s.epoch + 1}" if s.stage < len(stages) else "already finished"
            yield {"step": s.step, "total": 0, "message": f"resumed at step {s.step} ({where})"}
        total = sum(st.total_steps for st in stages)
        budget = c.max_minutes * 60 if c.max_minutes else None
        shares = np.cumsum([st.total_steps for st in stages]) / max(1, total)  # time of each stage's end
        elapsed_before = s.elapsed_s
        scaler = torch.amp.GradScaler(self.device.type, enabled=self.amp == torch.float16)
        if saved_scaler and scaler.is_enabled():
            scaler.load_state_dict(saved_scaler)
        stopped = "finished"
        opt: torch.optim.Optimizer | None = None
        rng_snapshot = rng_state()

        def elapsed() -> float:
            return elapsed_before + time.monotonic() - t0

        def save_model() -> None:
            if not self.ctx.is_main:
                return
            model = hooks.model
            if self.best is not None:
                model = copy.deepcopy(hooks.model)
                model.load_state_dict(self.best)
            record = {"steps": s.step, "epochs": s.epochs_done, "best_epoch": s.best_epoch,
                      "metrics": s.best_metrics | hooks.final_metrics(), "wall_time_s": round(elapsed(), 1),
                      "train_config": self._config_dict(), "stage_steps": dict(s.stage_steps)}
            hooks.save(self.out, model, record)

        safe = True  # weights and optimizer agree with the position (False inside optimizer.step)
        try:
            while s.stage < len(stages):
                stage = stages[s.stage]
                if stage.start_from_best and s.epoch == 0 and s.step_in_epoch == 0 and self.best is not None:
                    hooks.model.load_state_dict(self.best)
                module, opt = hooks.begin_stage(stage)
                if saved_opt is not None:
                    opt.load_state_dict(join_optimizer(*saved_opt))
                    saved_opt = None
                if saved_rng is not None:
                    set_rng_state(*saved_rng)
                    saved_rng = None
                rng_snapshot = rng_state()
                step_module = ddp.wrap(module, self.ctx, self.device, find_unused=hooks.find_unused)
                named = {"stage": stage.name} if len(stages) > 1 else {}  # plots: one loss series per stage
                stage_end = None if budget is None else budget * float(shares[s.stage])
                out_of_time = False
                while s.epoch < stage.epochs and not out_of_time:
                    if stage.epoch_steps(s.epoch) == 0:
                        break
                    hooks.begin_epoch(stage)
                    micro = hooks.batches(stage, s.stage, s.epoch)
                    n_steps = -(-len(micro) // c.grad_accum)  # an epoch-based stage: all its batches
                    if stage.steps is not None:
                        n_steps = min(n_steps, stage.epoch_steps(s.epoch))
                    while s.step_in_epoch < n_steps:
                        if ddp.agree(stage_end is not None and elapsed() > stage_end, self.ctx, self.device):
                            out_of_time = True
                            break
                        first = s.step_in_epoch * c.grad_accum
                        parts = micro[first : first + c.grad_accum]
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
                            params = [p for g in opt.param_groups for p in g["params"]]
                            torch.nn.utils.clip_grad_norm_(params, c.grad_clip)
                        safe = False
                        scaler.step(opt)
                        scaler.update()
                        opt.zero_grad(set_to_none=True)
                        s.step += 1
                        s.step_in_epoch += 1
                        s.stage_steps[stage.name] = stage_step + 1
                        safe = True
                        rng_snapshot = rng_state()  # what a resume after this step starts from
                        loss_value = float(np.mean(losses))
                        s.epoch_losses.append(loss_value)
                        yield {"step": s.step, "total": total, "loss": loss_value, **named,
                               "epoch": s.epochs_done + 1, "lr": lr, **stats, **self._last_metrics(s, hooks.metric),
                               "message": f"{stage.name} epoch {s.epoch + 1}/{stage.epochs}"}
                    if out_of_time:
                        break
                    # ---- end of an epoch: evaluate, keep the best, save
                    metrics = hooks.evaluate(stage)
                    s.epochs_done += 1
                    entry = {"stage": stage.name, "epoch": s.epochs_done, "step": s.step,
                             "loss": float(np.mean(s.epoch_losses)) if s.epoch_losses else float("nan"),
                             "lr": opt.param_groups[0]["lr"], **metrics}
                    s.history.append(entry)
                    s.epoch, s.step_in_epoch, s.epoch_losses = s.epoch + 1, 0, []
                    value = metrics.get(hooks.metric) if hooks.metric else None
                    improved = value is None or s.best_value is None or value > s.best_value
                    message = f"{stage.name} epoch {s.epoch}: loss {entry['loss']:.4f}"
                    if value is not None:
                        message += f", {hooks.metric} {value:.4f}"
                    if improved:
                        s.best_value, s.best_epoch, s.best_metrics = value, s.epochs_done, metrics
                        self.best = {k: _cpu(v) for k, v in hooks.model.state_dict().items()}
                        save_model()
                        message += " (best)" if value is not None else ""
                    elif stage.schedule == "plateau":
                        s.bad_epochs += 1
                        if s.bad_epochs >= stage.patience:
                            s.lr_scale /= stage.decay
                            s.bad_epochs = 0
                            assert self.best is not None
                            hooks.model.load_state_dict(self.best)  # the best weights at the lower rate
                            message += f"; lr -> {stage.lr * s.lr_scale:.3g}, back to epoch {s.best_epoch}"
                            if stage.lr * s.lr_scale < stage.min_lr:
                                stopped = "early_stopping"
                    s.elapsed_s = elapsed()
                    rng_snapshot = rng_state()  # after evaluation: a cancel at the next yield saves this
                    self._save_resume(s, opt, scaler, rng_snapshot)
                    ddp.barrier(self.ctx)
                    yield {"step": s.step, "total": total, "loss": entry["loss"], **named,
                           "epoch": s.epochs_done, "lr": entry["lr"], **metrics, "epoch_end": True,
                           "message": message}
                    if stopped == "early_stopping":
                        break
                if stopped == "early_stopping":
                    break
                if out_of_time:
                    stopped = "time_limit"
                    if s.stage == len(stages) - 1:
                        break
                s.stage, s.epoch, s.step_in_epoch, s.epoch_losses = s.stage + 1, 0, 0, []
                opt = None
                s.elapsed_s = elapsed()
                rng_snapshot = rng_state()
                self._save_resume(s, None, scaler, rng_snapshot)  # the next stage starts afresh
        except BaseException:  # cancel (GeneratorExit), Ctrl-C, errors: keep a consistent resume state
            if safe:
                s.elapsed_s = elapsed()
                self._save_resume(s, opt, scaler, rng_snapshot)
            raise
        s.elapsed_s = elapsed()
        self._save_resume(s, opt, scaler, rng_state())
        if self.best is None or stopped == "time_limit" and not self.out.is_file():
            self.best = self.best or {k: _cpu(v) for k, v in hooks.model.state_dict().items()}
            save_model()
        elif not hooks.metric:  # no metric: the checkpoint is the latest model (with the final numbers)
            self.best = {k: _cpu(v) for k, v in hooks.model.state_dict().items()}
            save_model()
        ddp.teardown(self.ctx)
        done: dict[str, dict[str, Any]] = {}
        for h in s.history:
            d = done.setdefault(h["stage"], {"name": h["stage"], "epochs": 0})
            d["epochs"] += 1
        stage_list = [{"name": st.name, "epochs": done.get(st.name, {}).get("epochs", 0),
                       "steps": s.stage_steps.get(st.name, 0)} for st in stages]
        return TrainResult(
            kind=hooks.kind, checkpoint=str(self.out), resume_state=str(self.resume_file), stages=stage_list,
            steps=s.step, epochs=s.epochs_done, wall_time_s=round(elapsed(), 1), stopped=stopped,
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

