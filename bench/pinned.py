"""Which model a benchmark measures: the shipped one unless it is given `--model`, and its JSON says which.

The app's default is the user's choice (a user model first: app/services/registry.py): a benchmark that followed
it measured whatever a quick training run's "Use this model" picked last, and named it only in a progress line.
Here the default is the shipped checkpoint of resources/models/ (`retrieval`), every benchmark's JSON carries
`model_fields` (name, file, how it was chosen), and a process a benchmark starts sees no user models
(`without_user_models`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

SHIPPED, GIVEN = "shipped default", "--model"


def shipped(kind: str = "retrieval") -> tuple[str, Path]:
    """(name, path) of the shipped default model of `kind`, whatever the user's models folder holds."""
    from app.services.registry import ModelRegistry, default_models_dir

    registry = ModelRegistry([(default_models_dir(), "default")])
    registry.scan()
    entry = registry.default_for(kind)
    if entry is None:
        raise LookupError(f"no shipped {kind} model in {default_models_dir()}")
    return entry.name, entry.path


def retrieval(spec: str | None = None) -> tuple[str, Path, str]:
    """(name, path, how chosen) of the retrieval model to measure: `spec` (a registry name or a path, as
    `--model` takes it) when given, else the shipped default."""
    if spec is None:
        return (*shipped("retrieval"), SHIPPED)
    from app.services.search.embedder import resolve_model

    return (*resolve_model(spec), GIVEN)


def model_fields(name: str, path: Path, chosen: str) -> dict[str, Any]:
    """What a benchmark's JSON says of the model it measured."""
    return {"model": {"name": name, "file": path.name, "path": str(path), "chosen": chosen}}


def without_user_models(env: dict[str, str], data_home: Path) -> dict[str, str]:
    """`env` for a process a benchmark starts: its user data folder (where user models live) is `data_home`, an
    empty folder of the benchmark's, so the process's default model is the shipped one, as for a new user."""
    data_home.mkdir(parents=True, exist_ok=True)
    return {**env, "XDG_DATA_HOME": os.fspath(data_home)}
