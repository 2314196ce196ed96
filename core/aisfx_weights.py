"""Where the aiSFX weights come from and how they are read safely (the network is models/aisfx.py).

The weights are the authors' checkpoint inside the PyPI wheel `aisfx` 0.1.2 (A. B. Ma and A. Lerch, ISMIR 2022,
CC BY 4.0), installed with `pip install --no-deps aisfx==0.1.2` (the Makefile's install steps do this: the
package's pins conflict with ours and only its data file is used). The file is found WITHOUT importing the
package, and read with `torch.load(weights_only=True)`: only tensors, plain containers and numpy's scalar type
(allow-listed under the old module name the file uses) are rebuilt, so a tampered pickle is refused before any
of its code runs. A user may also give a path: the wheel's checkpoint.pth or a `.safetensors` file made once
with `convert_to_safetensors`.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from core.checkpoints import read_header
from models.aisfx import (
    CHECKPOINT_IN_WHEEL,
    HOW_TO_GET_WEIGHTS,
    AisfxConfig,
    AisfxEncoder,
    AisfxWeightsError,
    encoder_state,
    load_encoder_state,
)


def find_checkpoint() -> Path | None:
    """The checkpoint inside an installed `aisfx` wheel, located without importing the package (its `__init__`
    would import librosa 0.9 and friends)."""
    try:
        spec = importlib.util.find_spec("aisfx")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        path = Path(spec.origin).parent / "models" / "checkpoint.pth"
        if path.is_file():
            return path
    try:
        for f in importlib.metadata.files("aisfx") or []:
            if str(f).replace("\\", "/") == CHECKPOINT_IN_WHEEL:
                path = Path(str(f.locate()))
                return path if path.is_file() else None
    except importlib.metadata.PackageNotFoundError:
        pass
    return None


def _numpy_globals() -> list[Any]:
    """What the checkpoint's dataset table pickles besides tensors: numpy int64 scalars. numpy 2 moved
    `numpy.core` to `numpy._core`; the file names the old module, so the allow-list maps that name."""
    core = getattr(np, "_core", None) or np.core
    allowed: list[Any] = [(core.multiarray.scalar, "numpy.core.multiarray.scalar"), np.dtype]
    dtypes = getattr(np, "dtypes", None)
    allowed += [getattr(dtypes, n) for n in ("Int64DType", "Int32DType", "Float64DType", "Float32DType")
                if dtypes is not None and hasattr(dtypes, n)]
    return allowed


def read_checkpoint(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(state_dict, dataset table) from the wheel's checkpoint.pth, or (tensors, {}) from a .safetensors file."""
    path = Path(path)
    if not path.is_file():
        raise AisfxWeightsError(f"{path}: no such file. {HOW_TO_GET_WEIGHTS}")
    if path.suffix == ".safetensors":
        try:
            read_header(path)  # bounded checks first (a huge or hostile header costs nothing): the reader is not ours
            return load_file(str(path)), {}
        except Exception as e:  # safetensors raises its own error types for damaged headers
            raise AisfxWeightsError(f"{path}: not a readable .safetensors file ({e})") from None
    try:
        with torch.serialization.safe_globals(_numpy_globals()):
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # UnpicklingError for forbidden globals, RuntimeError/EOFError for damaged files
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise AisfxWeightsError(f"{path}: refused, not a plain aiSFX weights file ({first[:200]})") from None
    if isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[0], dict):
        state, table = obj
    elif isinstance(obj, dict):
        state, table = obj, {}
    else:
        raise AisfxWeightsError(f"{path}: expected (state_dict, dataset table), got {type(obj).__name__}")
    if not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise AisfxWeightsError(f"{path}: the state dict holds non-tensor values")
    return dict(state), {str(k): v for k, v in dict(table).items()}


def load_weights(encoder: AisfxEncoder, path: str | Path | None = None) -> Path:
    """Fill `encoder` from `path` (default: the installed wheel's checkpoint); returns the file used."""
    path = Path(path) if path is not None else find_checkpoint()
    if path is None:
        raise AisfxWeightsError(HOW_TO_GET_WEIGHTS)
    load_encoder_state(encoder, read_checkpoint(path)[0], source=str(path))
    return path


def pretrained(path: str | Path | None = None, config: AisfxConfig | None = None) -> AisfxEncoder:
    """An AisfxEncoder with the published weights, in eval mode."""
    encoder = AisfxEncoder(config)
    load_weights(encoder, path)
    return encoder.eval()


def convert_to_safetensors(src: str | Path, dst: str | Path) -> Path:
    """One-time conversion of the wheel's checkpoint to a .safetensors file of the encoder's tensors."""
    state, table = read_checkpoint(src)
    meta = {"source": "aisfx 0.1.2 checkpoint.pth (Ma & Lerch, ISMIR 2022, CC BY 4.0)",
            "datasets": ",".join(sorted(table))}
    save_file({k: v.contiguous() for k, v in encoder_state(state).items()}, str(dst), metadata=meta)
    return Path(dst)
