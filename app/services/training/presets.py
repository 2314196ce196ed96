"""Presets of the Train tab: whole recipes that fill its settings form. No Qt here.

Per kind the tab offers, in this order:

- the shipped model's recipe (the default choice): read from `resources/models/<kind>-default.safetensors`, whose
  `training` metadata stores the run's whole config (`train_config`), so the preset is what actually made the
  file, not numbers copied by hand. The trainer's own `preset` (model size / architecture) comes from that
  metadata too, or, for a checkpoint older than that record (retrieval-default), from the training command in
  its model card (`<name>.md`, "earshot train KIND ... --preset NAME").
- "Quick test (tiny)": the smallest model for a few minutes at most, to try a data folder end to end.

A shipped recipe without a time budget (retrieval-default's) gets its run's own wall time with room to spare
(`BUDGET_ROOM`), and its note says so. What says where a recipe ran rather than how it trains is left out
(`MACHINE_LOCAL`): the form keeps its own values there. A trainer swapped in for tests or plug-ins
(`--trainer-module`) has no shipped model; its module may list presets as `TRAIN_PRESETS = {name: {setting: value}}`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.services.registry import default_models_dir
from app.services.training import runs as tr
from core import kinds
from core.config import SettingSpec

CUSTOM = "Custom"  # what the preset box shows once a field no longer matches any preset
QUICK = "Quick test (tiny)"
# the machine the shipped run had (its cores), its scratch folders and the file it was fine-tuned from: facts of
# that run, meaningless or missing on another machine; a preset leaves these fields at the form's defaults
MACHINE_LOCAL = frozenset({"device", "threads", "cache_dir", "init_from", "speech_weights", "data", "out",
                           "resume"})
BUDGET_ROOM = 1.25  # a shipped run's wall time times this, in whole 5 minutes, is its recipe's budget if it had none
QUICK_VALUES: dict[str, dict[str, Any]] = {
    "words": {"preset": "tiny", "frontend": "mfcc", "max_epochs": 3, "batch_size": 32, "warmup_steps": 0,
              "max_minutes": 5.0},
    "units": {"preset": "tiny", "max_minutes": 5.0, "checkpoint_every": 20},
    "retrieval": {"preset": "cpu-small", "epochs": 2, "batch_size": 16, "crop_seconds": 2.0, "finetune_epochs": 0,
                  "max_minutes": 5.0},
}  # fmt: skip


@dataclass(frozen=True)
class Preset:
    """A named recipe: setting name -> value. Settings it does not name take their defaults when it is chosen."""

    name: str
    values: dict[str, Any] = field(default_factory=dict)
    note: str = ""  # one or two lines for the tab: where it comes from, what to check
    source: Path | None = None  # the checkpoint it was read from


def form_values(preset: Preset, specs: list[SettingSpec]) -> dict[str, Any]:
    """Every setting's value once `preset` is chosen: its own values over the settings' defaults."""
    return {s.name: preset.values.get(s.name, s.default) for s in specs if s.name not in MACHINE_LOCAL
            or s.name in preset.values}


def same_value(a: Any, b: Any) -> bool:  # noqa: ANN401 - setting values
    """Equal as settings: numbers within float rounding (a spin box keeps 10 decimals), lists as lists, an empty
    path as none (a run records an unset folder as '', the form shows it as not set)."""
    if a in (None, "") and b in (None, ""):
        return True
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return list(a) == list(b)
    return a == b


def matching(presets: list[Preset], values: dict[str, Any], specs: list[SettingSpec]) -> Preset | None:
    """The first preset the form's `values` (None: left to the trainer) equal, or None: custom."""
    for preset in presets:
        wanted = form_values(preset, specs)
        if all(same_value(values.get(name), value) for name, value in wanted.items()):
            return preset
    return None


# ------------------------------------------------------------------------------------------------ shipped


def card_preset(card: Path, kind: str) -> str | None:
    """The `--preset NAME` of the first `earshot train KIND` command in a model card (lines joined at `\\`)."""
    try:
        text = card.read_text(encoding="utf-8").replace("\\\n", " ")
    except OSError:
        return None
    for line in text.splitlines():
        if f"earshot train {kind}" in line:
            found = re.search(r"--preset[ =](\S+)", line)
            if found:
                return found.group(1)
    return None


def shipped_preset(kind: str, specs: list[SettingSpec], models_dir: Path | None = None) -> Preset | None:
    """The recipe of the shipped `<kind>-default` model, read from its checkpoint; None without one."""
    from core.checkpoints import CheckpointError, read_metadata

    path = (models_dir or default_models_dir()) / f"{kind}-default.safetensors"
    try:
        training = read_metadata(path)["training"]
    except (CheckpointError, OSError):
        return None
    stored = training.get("train_config")
    if not isinstance(stored, dict):
        return None
    names = {s.name for s in specs}
    values = {k: v for k, v in stored.items() if k in names and k not in MACHINE_LOCAL}
    trainer_preset = training.get("preset") or stored.get("preset") or card_preset(path.with_suffix(".md"), kind)
    if trainer_preset and "preset" in names:
        values["preset"] = trainer_preset
    note = _shipped_note(path, training, values)
    budget = budget_from(training.get("wall_time_s"))
    if "max_minutes" in names and values.get("max_minutes") is None and budget is not None:
        values["max_minutes"] = budget
        note += (f" Its recipe had no time budget; {budget:g} min is its run's time "
                 f"({training['wall_time_s'] / 60:.0f} min on its machine) with room to spare.")
    return Preset(f"{path.stem} (shipped)", values, note, path)


def budget_from(wall_time_s: Any) -> float | None:  # noqa: ANN401 - a checkpoint's record
    """A time budget for a recipe from how long its run took: that with room to spare, in whole 5 minutes."""
    if not isinstance(wall_time_s, int | float) or wall_time_s <= 0:
        return None
    return float(5 * math.ceil(wall_time_s * BUDGET_ROOM / 60 / 5))


def _shipped_note(path: Path, training: dict[str, Any], values: dict[str, Any]) -> str:
    data = training.get("data")
    folders = [data] if isinstance(data, str) else list(data or [])
    parts = [f"How {path.stem} was trained, read from its checkpoint"]
    if folders:
        parts[0] += " (its data: " + ", ".join(Path(str(f)).name or str(f) for f in folders) + ")"
    parts[0] += "."
    if training.get("command") and "--init-from" in str(training["command"]):
        parts.append("It was fine-tuned from an earlier run; this starts from scratch.")
    missing = [str(v) for k, v in values.items() if k.endswith("_dir") and v and not Path(str(v)).is_dir()]
    if missing:
        parts.append("Not on this machine (Advanced): " + ", ".join(missing) + ".")
    return " ".join(parts)


# ------------------------------------------------------------------------------------------------ all


def presets_for(kind: str, specs: list[SettingSpec], module: str | None = None,
                models_dir: Path | None = None) -> list[Preset]:
    """The presets of a kind's form, the default first (the shipped recipe where there is one)."""
    names = {s.name for s in specs}
    if module is not None:  # a swapped-in trainer: its own presets, if it lists any
        listed = kinds.get(kind, module).listed_presets()
        return [Preset(name, {k: v for k, v in values.items() if k in names}) for name, values in listed.items()]
    out = []
    shipped = shipped_preset(kind, specs, models_dir)
    if shipped is not None:
        out.append(shipped)
    quick = {k: v for k, v in QUICK_VALUES.get(kind, {}).items() if k in names}
    if quick:
        out.append(Preset(QUICK, quick, "The smallest model for a few minutes: checks a data folder end to end; "
                                        "its numbers mean little."))
    return out


def form_job(kind: str, module: str | None = None) -> Generator[dict[str, Any], None, Any]:
    """Job: the settings of a kind (its torch-free settings module), the machine's devices and the kind's presets."""
    specs, devices = yield from tr.schema_job(kind, module)
    return specs, devices, presets_for(kind, specs, module)
