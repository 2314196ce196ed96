"""The one table of model kinds, settings generated from dataclass metadata, and the progress-event format."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from core import kinds
from core.config import (
    SettingError,
    add_arguments,
    argv_for,
    check_settings,
    config_from_args,
    setting,
    settings_of,
)
from core.events import EventReader, EventWriter, append_event, terminal_status

# ------------------------------------------------------------------------------------------------ the table


@pytest.mark.parametrize("name", kinds.NAMES)
def test_every_row_resolves_to_real_code(name: str) -> None:
    kind = kinds.get(name)
    module = kind.trainer_module()
    for function in ("add_train_arguments", "train"):
        assert callable(getattr(module, function)), f"{kind.trainer} lacks {function}"
    assert all(map(callable, kind.eval_functions()))  # the trainer's, or the kind's evaluator's
    classes = kind.settings_classes()
    assert classes and all(settings_of(cls) for cls in classes)
    assert callable(kind.build()) and callable(kind.validate())
    # the CLI's flags are exactly the settings' flags plus the run's paths (nothing hand-written twice)
    parser = argparse.ArgumentParser()
    module.add_train_arguments(parser)
    flags = {s for a in parser._actions for s in a.option_strings}
    assert {spec.flag for cls in classes for spec in settings_of(cls)} <= flags


def test_the_settings_copies_of_torch_side_constants_agree() -> None:
    """The torch-free settings modules copy a few constants of torch modules (choices, help texts): the same."""
    from core import device, frontend_builder
    from models import speech_embedding, units_frontend, vqvae
    from training import trainer_settings, units_settings, words_settings

    assert trainer_settings.DEVICE_CHOICES == device.DEVICE_CHOICES
    assert words_settings.SPEECH_EMBEDDING_WHEEL == speech_embedding.SPEECH_EMBEDDING_WHEEL
    assert units_settings.STRIDE == vqvae.STRIDE
    assert units_settings.SPEECH_FRONTEND_KIND == units_frontend.SPEECH_FRONTEND_KIND
    assert units_settings.FRONTEND_CHOICES == frontend_builder.UNITS_FRONTENDS


def test_the_table_is_the_one_list() -> None:
    from app.services.training import runs as training_runs
    from core import checkpoints
    from training import validate

    assert kinds.NAMES == ("words", "units", "retrieval")
    assert checkpoints.KINDS == validate.KINDS == kinds.NAMES and list(training_runs.KINDS) == list(kinds.NAMES)
    assert checkpoints.builder_for("units") is kinds.get("units").build()


def test_unknown_and_missing_kinds_are_messages(tmp_path: Path) -> None:
    with pytest.raises(kinds.KindError, match="unknown model kind 'nope'; choose one of words, units, retrieval"):
        kinds.get("nope")
    with pytest.raises(kinds.KindError, match="not available in this version"):
        kinds.get("words", "no_such_module").trainer_module()
    from training.validate import validate_data

    with pytest.raises(ValueError, match="unknown model kind 'sounds'"):
        validate_data("sounds", tmp_path)
    from app.services.registry import ModelRegistry

    with pytest.raises(kinds.KindError, match="unknown model kind"):
        ModelRegistry(folders=[]).entries("wordz")


def test_cli_lists_kinds_from_the_table(capsys) -> None:
    from app.cli.main import main

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    for kind in kinds.KINDS.values():
        assert kind.name in out and kind.label in out


# ------------------------------------------------------------------------------------------------ settings


@dataclass
class Inner:
    depth: int = 2


@dataclass
class Demo:
    steps: int = setting(10, low=1, high=100, help="steps")
    lr: float = setting(0.1, low=0, low_exclusive=True, help="learning rate")
    mode: str = setting("fast", choices=("fast", "slow"), help="how")
    cache: bool = setting(True, help="cache features")
    budget: float | None = setting(None, low=0, help="minutes")
    skip: tuple[str, ...] = setting((), flag="--skip-speaker", help="leave out")
    epochs_max: int = setting(3, low=1, flag="--epochs", help="epochs")
    secret: int = setting(1, hidden=True, help="internal")
    inner: Inner = field(default_factory=Inner)  # nested: chosen by a preset, never a flag
    plain: str = "x"

    def __post_init__(self) -> None:
        if self.mode == "slow" and self.steps > 50:
            raise ValueError("slow mode takes at most 50 steps")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="demo", exit_on_error=False)
    add_arguments(parser, Demo)
    return parser.parse_args(argv)


def test_schema_comes_from_the_metadata() -> None:
    specs = {s.name: s for s in settings_of(Demo)}
    assert list(specs) == ["steps", "lr", "mode", "cache", "budget", "skip", "epochs_max"]  # hidden/nested/plain out
    assert (specs["steps"].type, specs["steps"].minimum, specs["steps"].maximum) == ("int", 1, 100)
    assert specs["mode"].type == "choice" and specs["mode"].choices == ["fast", "slow"]
    assert specs["budget"].optional and specs["budget"].type == "float" and specs["budget"].default is None
    assert specs["skip"].type == "list" and specs["skip"].flag == "--skip-speaker"
    assert specs["epochs_max"].flag == "--epochs" and specs["lr"].minimum_exclusive


def test_flags_round_trip_into_the_config() -> None:
    args = parse(["--steps", "20", "--no-cache", "--skip-speaker", "a", "--skip-speaker", "b", "--epochs", "5"])
    config = config_from_args(Demo, args)
    assert (config.steps, config.cache, config.skip, config.epochs_max) == (20, False, ("a", "b"), 5)
    assert config.lr == 0.1 and config.mode == "fast"  # not given: the default
    over = config_from_args(Demo, parse(["--lr", "0.5"]), base=Demo(steps=7))  # a preset as the base
    assert (over.steps, over.lr) == (7, 0.5)
    specs = settings_of(Demo)
    assert argv_for(specs, {"steps": 3, "cache": False, "skip": ["x"], "budget": None}) == \
        ["--steps", "3", "--no-cache", "--skip-speaker", "x"]


@pytest.mark.parametrize("argv, message", [
    (["--steps", "0"], "argument --steps: 0 is below the minimum 1"),
    (["--steps", "101"], "101 is above the maximum 100"),
    (["--steps", "2.5"], "expected an integer, got '2.5'"),
    (["--lr", "0"], "0.0 must be greater than 0"),
    (["--lr", "nan"], "nan is not a finite number"),
    (["--mode", "warp"], "invalid choice: 'warp'"),
])
def test_bad_flags_are_specific_argparse_errors(argv: list[str], message: str) -> None:
    with pytest.raises(argparse.ArgumentError, match=message):
        parse(argv)


def test_the_config_checks_run_after_the_flags() -> None:
    with pytest.raises(SettingError, match="slow mode takes at most 50 steps"):
        config_from_args(Demo, parse(["--mode", "slow", "--steps", "60"]))
    problems = check_settings([Demo], {"steps": 0, "plain": "y", "nope": 1, "skip": "a"})
    assert problems == [
        "steps: 0 is below the minimum 1",
        "plain: a field of Demo that is not a setting (no command-line flag), so it cannot be set for a run",
        "nope: not a setting (known: budget, cache, epochs_max, lr, mode, skip, steps)",
        "skip: expected a list of strings, got 'a'",
    ]
    assert check_settings([Demo], {"mode": "slow", "steps": 60}) == ["slow mode takes at most 50 steps"]
    assert check_settings([Demo], {"steps": 5, "skip": ["a"], "lr": 1}) == []


def test_unsupported_setting_types_are_refused_by_name() -> None:
    @dataclass
    class Bad:
        shape: dict = setting(None, help="no flag can say this")

    with pytest.raises(TypeError, match="Bad.shape: a setting must be"):
        settings_of(Bad)


# ------------------------------------------------------------------------------------------------ events


def job(fail: bool = False, closed: list[str] | None = None):  # noqa: ANN201 - a job
    try:
        for i in range(3):
            yield {"step": i + 1, "total": 3, "loss": 1.0 / (i + 1), "message": f"step {i + 1}"}
        if fail:
            raise ValueError("no words.csv")
        return {"dev_ap": 0.5}
    finally:
        if closed is not None:
            closed.append("closed")


def drive(gen):  # noqa: ANN001, ANN201 - a job
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return stop.value


def test_writer_and_reader_agree(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    append_event(path, {"event": "started", "attempt": 1})
    reader = EventReader(path)
    assert [e["event"] for e in reader.read()] == ["started"]
    writer = EventWriter(path)
    assert drive(writer.tee(job())) == {"dev_ap": 0.5}
    writer.close()
    events = reader.read()  # only what is new
    assert [e["event"] for e in events] == ["progress"] * 3 + ["result"]
    assert events[1]["step"] == 2 and events[-1]["result"] == {"dev_ap": 0.5} and "time" in events[0]
    assert terminal_status(events) == "finished"
    rows = (tmp_path / "metrics.csv").read_text().splitlines()
    assert rows[0] == "time,step,name,value" and [r.split(",")[1:3] for r in rows[1:]] == \
        [["1", "loss"], ["2", "loss"], ["3", "loss"]]


def test_a_torn_line_waits_and_garbage_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"event": "progress", "step": 1}\nnot json\n[1, 2]\n{"event": "res')
    reader = EventReader(path)
    assert reader.read() == [{"event": "progress", "step": 1}]
    with open(path, "a") as f:
        f.write('ult", "result": {}}\n')
    assert reader.read() == [{"event": "result", "result": {}}]
    assert EventReader(tmp_path / "missing.jsonl").read() == []


def test_errors_and_cancels_are_last_words(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    writer = EventWriter(path)
    with pytest.raises(ValueError, match="no words.csv") as e:
        drive(writer.tee(job(fail=True)))
    writer.error(e.value)
    closed: list[str] = []
    tee = writer.tee(job(closed=closed))
    next(tee)
    tee.close()  # a cancel closes the tee, and the tee closes the job
    writer.cancelled()
    writer.close()
    events = [json.loads(line) for line in path.read_text().splitlines()]
    errors = [e for e in events if e["event"] == "error"]
    assert errors == [{"time": errors[0]["time"], "event": "error", "message": "no words.csv", "type": "ValueError"}]
    assert closed == ["closed"] and terminal_status(events) == "cancelled"
    assert terminal_status(events[:3]) is None and terminal_status(events[:4]) == "failed"


def test_a_models_own_settings_come_before_the_inherited_ones() -> None:
    @dataclass
    class Base:
        seed: int = setting(0, help="seed")
        clip: float = setting(1.0, help="clip")

    @dataclass
    class Model(Base):
        width: int = setting(8, help="width")
        clip: float = setting(0.5, help="clip, re-declared")  # a re-declared field is the model's own
        depth: int = setting(2, help="depth")

    assert [s.name for s in settings_of(Model)] == ["width", "clip", "depth", "seed"]
