"""Model registry: which checkpoints exist, what they are, and loading them lazily on the chosen device.

Default checkpoints ship in `resources/models/`; the user's own (trained in the Train tab or copied
there) live in `<user data dir>/models/`. Listing reads only the safetensors headers, so it is cheap;
a damaged file (every entry safetensors would refuse: core/checkpoints.py) or a folder that cannot be read is
listed as a problem with its message instead of breaking the list, and never becomes a default.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from platformdirs import user_data_dir

from core import kinds

APP_NAME = "earshot"


def default_models_dir() -> Path:
    return Path(str(resources.files("resources") / "models"))


def user_models_dir() -> Path:
    return Path(user_data_dir(APP_NAME, appauthor=False)) / "models"


@dataclass(frozen=True)
class ModelEntry:
    name: str  # file stem, unique within the registry (user models shadow defaults of the same name)
    kind: str  # one of core.kinds.NAMES
    path: Path
    source: str  # "default" | "user"
    version: str = "?"
    training: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def card(self) -> Path | None:
        """The model card (`<name>.md` beside the checkpoint), when there is one."""
        md = self.path.with_suffix(".md")
        return md if md.is_file() else None


@dataclass(frozen=True)
class RegistryProblem:
    path: Path
    message: str


class ModelRegistry:
    """Lists checkpoints from the model folders and loads them on demand, one copy per device."""

    def __init__(self, folders: list[tuple[Path, str]] | None = None, device: str = "auto") -> None:
        self.folders = folders if folders is not None else [
            (default_models_dir(), "default"),
            (user_models_dir(), "user"),
        ]
        self.device_preference = device
        self._entries: dict[str, ModelEntry] = {}
        self.problems: list[RegistryProblem] = []
        self._loaded: dict[tuple[Path, str], Any] = {}
        self._lock = threading.Lock()

    def scan(self) -> list[ModelEntry]:
        from core.checkpoints import CheckpointError, read_metadata

        entries: dict[str, ModelEntry] = {}
        problems = []
        for folder, source in self.folders:
            try:  # listed here, not by glob: glob says nothing of a folder it cannot read
                names = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
            except (FileNotFoundError, NotADirectoryError):
                continue  # no models folder yet: nothing to say
            except OSError as e:
                whose = "your" if source == "user" else "the shipped"
                problems.append(RegistryProblem(folder, f"{whose} models folder {folder} cannot be read "
                                                        f"({e.strerror or e}); its models are not listed"))
                continue
            for path in (folder / n for n in names):
                try:
                    meta = read_metadata(path)
                except (CheckpointError, OSError) as e:  # one bad file is listed, never breaks the others
                    problems.append(RegistryProblem(path, str(e)))
                    continue
                entries[path.stem] = ModelEntry(
                    name=path.stem,
                    kind=meta["kind"],
                    path=path,
                    source=source,
                    version=meta["earshot_version"],
                    training=meta["training"],
                )
        with self._lock:
            self._entries = entries
            self.problems = problems
        return self.entries()

    def entries(self, kind: str | None = None) -> list[ModelEntry]:
        """The listed models, or those of one kind (an unknown kind is a KindError, not an empty list)."""
        if kind is not None:
            kinds.get(kind)
        return [e for e in self._entries.values() if kind is None or e.kind == kind]

    def get(self, name: str) -> ModelEntry:
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(sorted(self._entries)) or "none"
            raise KeyError(f"no model named {name!r} (known: {known})") from None

    def default_for(self, kind: str) -> ModelEntry | None:
        """The model a tab uses unless the user picks another: a user model first, else the shipped one."""
        found = self.entries(kind)
        found.sort(key=lambda e: (e.source != "user", e.name))
        return found[0] if found else None

    def set_device(self, preference: str) -> None:
        """Switch device; models load again on the new device when next asked for. The same preference again
        (Preferences closed with OK, nothing changed) keeps the loaded models."""
        with self._lock:
            if preference == self.device_preference:
                return
            self.device_preference = preference
            self._loaded.clear()

    def load(self, name: str) -> Any:
        """The model `name` on the current device, loaded on first use (call from a worker)."""
        from core.checkpoints import load_model
        from core.device import resolve_device

        entry = self.get(name)
        device = resolve_device(self.device_preference)
        key = (entry.path, str(device))
        with self._lock:
            if key in self._loaded:
                return self._loaded[key]
        model, _ = load_model(entry.path, kind=entry.kind, device=device)
        with self._lock:
            self._loaded[key] = model
        return model

    def inference(self, name: str) -> Any:  # noqa: ANN401 (core.inference.Inference)
        """Model `name` (loaded on first use) with its front end and preprocessing (call from a worker)."""
        from core.checkpoints import read_metadata
        from core.inference import inference_for

        return inference_for(self.load(name), self.get(name).kind, read_metadata(self.get(name).path))

    def loaded(self) -> list[str]:
        """Names of models currently in memory, for the status bar."""
        with self._lock:
            paths = {p for p, _ in self._loaded}
        return sorted(e.name for e in self._entries.values() if e.path in paths)
