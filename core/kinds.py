"""The one table of model kinds: everything Earshot lists per kind (retrieval | units | words) lives here.

Read by the CLI (`earshot train|eval KIND`), the checkpoint loader (`kind` -> how to rebuild the model), the
model registry, the data validator, the run service and the Train tab. Adding a kind is adding a row.

The table names code by "module" / "module:attribute" strings and imports it only when asked, so reading it
costs nothing (the CLI lists the kinds without importing torch) and introduces no import cycle. What the app
reads (settings, eval arguments) lives in torch-free modules; a trainer is imported only by `trainer_module()`,
which `earshot train` calls in the run's own process (tests/test_boundaries.py follows these strings).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class KindError(ValueError):
    """An unknown kind, or a kind whose code is not available in this version of Earshot."""


@dataclass(frozen=True)
class Kind:
    name: str  # the checkpoint's `kind` metadata and the CLI's KIND
    label: str  # one line: what the model is (CLI help, model lists)
    tab_label: str  # the Train tab's choice: tab, model, expected data
    trainer: str  # module with add_train_arguments(p) and train(args) -> Job (the training run's process)
    settings: tuple[str, ...]  # "module:Class" (torch-free): config dataclasses whose setting(...) fields are a run's
    builder: str  # "module:function": model config dict -> nn.Module (checkpoint loading)
    validator: str  # "module:function": (folder, DataReport, max_checked) -> Job checking training data
    # `earshot eval KIND`: ("module:add_arguments" (torch-free), "module:evaluate" -> Job), neither in a trainer
    evaluator: tuple[str, str]
    trainer_override: bool = False  # `trainer` was replaced (tests, plug-ins): its module lists its settings

    def trainer_module(self) -> Any:  # noqa: ANN401 - a module
        """The trainer module (imported now), or a KindError saying it is not available."""
        try:
            missing = importlib.util.find_spec(self.trainer) is None
        except (ImportError, ValueError):
            missing = True
        if missing:
            raise KindError(f"training and evaluation of {self.name} models are not available in this version "
                            f"of Earshot (no module {self.trainer})")
        return importlib.import_module(self.trainer)

    def eval_functions(self) -> tuple[Callable[..., Any], Callable[..., Any]]:
        """(add_eval_arguments(parser), evaluate(args) -> Job) of this kind (imports them)."""
        if self.trainer_override:  # a replacement trainer evaluates too
            module = self.trainer_module()
            return module.add_eval_arguments, module.evaluate
        return self.eval_arguments(), _resolve(self.evaluator[1])

    def eval_arguments(self) -> Callable[..., Any]:
        """add_eval_arguments(parser) alone: torch-free for the table's kinds (`earshot eval KIND --help`)."""
        if self.trainer_override:
            return self.trainer_module().add_eval_arguments
        return _resolve(self.evaluator[0])

    def settings_classes(self) -> list[type]:
        """The config dataclasses that declare this kind's settings (torch-free; a replacement trainer's module)."""
        if self.trainer_override:  # a replacement trainer says which dataclasses hold its settings
            classes = getattr(self.trainer_module(), "TRAIN_SETTINGS", None)
            if not classes:
                raise KindError(f"trainer module {self.trainer} has no TRAIN_SETTINGS (its config dataclasses)")
            return list(classes)
        return [_resolve(path) for path in self.settings]

    def listed_presets(self) -> dict[str, dict[str, Any]]:
        """The presets a replacement trainer lists as TRAIN_PRESETS = {name: {setting: value}}; {} for the table's
        own trainers (the Train tab reads theirs from the shipped checkpoints: app/services/training/presets.py)."""
        if not self.trainer_override:
            return {}
        return dict(getattr(self.trainer_module(), "TRAIN_PRESETS", None) or {})

    def build(self) -> Callable[[dict[str, Any]], Any]:
        """The function that rebuilds this kind's model from its config dict."""
        return _resolve(self.builder)

    def validate(self) -> Callable[..., Any]:
        """The data checker for this kind (see training.validate)."""
        return _resolve(self.validator)

    def with_trainer(self, module: str) -> Kind:
        """This kind trained by another module (tests, plug-ins); it must define TRAIN_SETTINGS."""
        return dataclasses.replace(self, trainer=module, trainer_override=True)


def _resolve(path: str) -> Any:  # noqa: ANN401 - a class or function
    module, _, attr = path.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise KindError(f"this version of Earshot lacks {path} ({e})") from e


KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        Kind(
            name="words",
            label="multi-view acoustic word embeddings",
            tab_label="Words — multi-view acoustic word embeddings (words.csv)",
            trainer="training.words_train",
            settings=("training.words_settings:WordsTrainConfig",),
            builder="models.awe:from_config_dict",
            validator="training.validate:check_words",
            evaluator=("training.speech_eval_cli:add_words_eval_arguments",
                       "training.speech_eval:evaluate_words_command"),
        ),
        Kind(
            name="units",
            label="speech units (Transformer VQ-VAE + codebook inverter)",
            tab_label="Units — speech units, Transformer VQ-VAE (folder of speech)",
            trainer="training.units_train",
            settings=("training.units_settings:UnitsTrainConfig",),
            builder="models.units:from_config_dict",
            validator="training.validate:check_units",
            evaluator=("training.speech_eval_cli:add_units_eval_arguments",
                       "training.speech_eval:evaluate_units_command"),
        ),
        Kind(
            name="retrieval",
            label="text-to-audio retrieval (PaSST + text encoder)",
            tab_label="Search — text-to-audio retrieval (captions.csv, Clotho, AudioCaps, WavCaps)",
            trainer="training.retrieval_train",
            settings=("training.retrieval_settings:RetrievalRunOptions",
                      "training.retrieval_settings:RetrievalSettings"),
            builder="models.retrieval:from_config_dict",
            validator="training.validate:check_retrieval",
            evaluator=("training.retrieval_settings:add_eval_arguments", "training.retrieval_eval:evaluate"),
        ),
    )
}
NAMES: tuple[str, ...] = tuple(KINDS)


def get(name: str, trainer: str | None = None) -> Kind:
    """The kind called `name` (optionally trained by module `trainer` instead); KindError if unknown."""
    kind = KINDS.get(name)
    if kind is None:
        raise KindError(f"unknown model kind {name!r}; choose one of {', '.join(NAMES)}")
    return kind.with_trainer(trainer) if trainer else kind
