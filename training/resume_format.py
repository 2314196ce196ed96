"""The one resume format of the training loop (training/trainer.py): what a stopped run needs to go on.

Resume state: `<out stem>.resume.safetensors`, written atomically at the end of every epoch and when the job
stops between steps (cancel, Ctrl-C, time limit). Tensors: `model.*`, `best.*`, `optim.<param>.<name>`,
`rng.torch`, `rng.cuda.<i>`, `rng.numpy`; metadata `format` / `version` and `state` (JSON: stage, epoch, step
in epoch, global step, best metric, history, losses of the unfinished epoch, non-tensor optimizer state,
GradScaler, Python and NumPy RNG, train config). Batches must be a function of (seed, stage, epoch) and the
step inside the epoch, so a run resumed mid-epoch takes the same steps as one that was never stopped.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from core.checkpoints import CheckpointError, safetensors_metadata, write_safetensors
from training.legacy_resume import legacy_format

RESUME_FORMAT = "earshot-resume"
RESUME_VERSION = 2
# settings that may change between a run and its resumption (where it runs, not what it learns)
RESUMABLE = {"device", "threads", "max_minutes", "resume", "cache", "cache_dir", "checkpoint_every", "out", "data"}
RngState = tuple[dict[str, torch.Tensor], dict[str, Any]]  # (tensors, JSON): see rng_state


def resume_path(out: str | Path) -> Path:
    out = Path(out)
    return out.with_name(out.stem + ".resume.safetensors")


def cpu_copy(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().contiguous().clone()


def split_optimizer(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Optimizer state -> (tensors named optim.<param>.<name>, the JSON-able rest)."""
    state = opt.state_dict()
    tensors, scalars = {}, {}
    for pid, s in state["state"].items():
        for name, value in s.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optim.{pid}.{name}"] = cpu_copy(value)
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


def rng_state() -> RngState:
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
