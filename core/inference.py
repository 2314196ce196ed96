"""`load_for_inference(path)`: a checkpoint as the app runs it -- the model, its front end and its preprocessing.

The model is rebuilt from the checkpoint alone (core/checkpoints.py); the front end from its `features` entry
(core/frontend_builder.py); the preprocessing (resampler, silence trim) from its `training["preprocessing"]` entry, so
audio reaches the model exactly as it did in training. Services never read a trainer module to run a model.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.audio import TrimConfig, resampler_from_training

if TYPE_CHECKING:
    import torch


@dataclass
class Inference:
    """A loaded checkpoint, ready to run."""

    kind: str  # retrieval | units | words (core/kinds.py)
    model: torch.nn.Module  # in eval mode, on the requested device
    frontend: torch.nn.Module | None  # audio -> the model's input features; None: the model's own (retrieval)
    resampler: str  # how audio is brought to the front end's rate (core.audio.RESAMPLERS)
    trim: TrimConfig  # the silence trim of words tokens (defaults for other kinds)
    metadata: dict[str, Any]  # the checkpoint's `features` and `training` entries


def load_for_inference(path: str | os.PathLike[str], kind: str | None = None, device: str | torch.device = "cpu",
                       builder: Callable[[dict[str, Any]], torch.nn.Module] | None = None) -> Inference:
    """Load a checkpoint (of `kind`, when given) with everything needed to run it on audio; `builder`: another
    way to build the model from its config (e.g. only a part of it)."""
    from core.checkpoints import load_model

    model, ckpt = load_model(path, kind=kind, device=device, builder=builder)
    return inference_for(model, ckpt.kind, {"features": ckpt.features, "training": ckpt.training})


def inference_for(model: torch.nn.Module, kind: str, metadata: dict[str, Any]) -> Inference:
    """The same for a model already loaded (a registry's cache): `metadata` is the checkpoint's (read_metadata)."""
    features = metadata.get("features") or {}
    training = metadata.get("training")
    return Inference(kind=kind, model=model, frontend=frontend_for(kind, features),
                     resampler=resampler_from_training(training), trim=trim_from_training(training),
                     metadata={"features": features, "training": training})


def frontend_for(kind: str, features: dict[str, Any]) -> torch.nn.Module | None:
    """The front end a checkpoint of `kind` recorded (MFCC for speech checkpoints that predate the entry)."""
    from core.frontend_builder import units_frontend, words_frontend
    from models.frontends import frontend_from_dict

    if kind == "units":
        return units_frontend(features or None)
    if kind == "words":
        return words_frontend(features)
    return frontend_from_dict(features) if features else None


def trim_from_training(training: Any) -> TrimConfig:  # noqa: ANN401 - checkpoint JSON
    """The trim settings a words checkpoint was trained with (`training["preprocessing"]["trim"]`), else defaults."""
    pre = training.get("preprocessing") if isinstance(training, dict) else None
    return TrimConfig.from_dict(pre.get("trim") if isinstance(pre, dict) else None)
