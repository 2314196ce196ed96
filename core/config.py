"""Settings as dataclass fields: one definition gives the CLI flag, the Train tab's form row and the check.

A config field declared with `setting(...)` carries its help text, range and choices in `field.metadata`;
`settings_of` gives the form's schema, `add_arguments` the flags (each defaulting to None, "not given"),
`config_from_args` the config over a base, `check_value` / `check_settings` the messages, `number` and
`bound_numbers` the same checks for hand-written flags. Every integer is bounded to 64 bits and every float
must be finite. Nested configs (an architecture, a front end) are not flags: a model's shape is a recipe
chosen whole through a preset. The rules in full (`SETTINGS_FROM_PRESET`, hidden fields): docs/training.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import MISSING, dataclass, field
from typing import Any

META_KEY = "earshot"
TYPES = ("int", "float", "bool", "str", "choice", "list")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # SQLite's INTEGER, NumPy's int64, torch's seeds


def setting(
    default: Any = MISSING,  # noqa: ANN401 - any field value
    *,
    help: str,  # noqa: A002 - the argparse word
    low: float | None = None,  # inclusive bounds for numbers
    high: float | None = None,
    low_exclusive: bool = False,  # `low` itself is not allowed (a learning rate must be > 0)
    choices: Sequence[Any] | None = None,
    flag: str | None = None,  # CLI flag when it differs from --field-name (e.g. "--epochs")
    hidden: bool = False,  # internal: no flag, not in the form
    default_factory: Callable[[], Any] | None = None,
) -> Any:  # noqa: ANN401 - a dataclasses.Field posing as the value, as dataclasses.field does
    """A dataclass field with the metadata that generates its flag and form row."""
    meta = {META_KEY: {"help": help, "low": low, "high": high, "low_exclusive": low_exclusive,
                       "choices": None if choices is None else list(choices), "flag": flag, "hidden": hidden}}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


def setting_meta(f: Any) -> dict[str, Any] | None:  # noqa: ANN401 - a dataclasses.Field
    """The `setting(...)` metadata of a dataclass field, or None for a plain field."""
    return f.metadata.get(META_KEY)


class SettingError(ValueError):
    """Settings that cannot be used; the message names each one and what is wrong with it."""


@dataclass
class SettingSpec:
    """One setting: a config dataclass field declared with `setting(...)`, and its command-line flag."""

    name: str  # the config field name (also the argparse dest)
    flag: str  # "--batch-size"
    type: str  # one of TYPES
    default: Any = None  # None with optional=True: the trainer (its preset) decides
    optional: bool = False  # None is a valid value
    choices: list[str] = field(default_factory=list)
    minimum: float | None = None
    maximum: float | None = None
    minimum_exclusive: bool = False
    help: str = ""
    owner: str = ""  # the dataclass that declares it
    sequence: str = ""  # "tuple" | "list" for list settings: the field's container
    from_preset: bool = False  # the owner's SETTINGS_FROM_PRESET: not given means the preset's value


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:  # noqa: ANN401 - a typing object
    """`X | None` -> (X, True); anything else -> (tp, False)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(args) < len(typing.get_args(tp)):
            return args[0], True
    return tp, False


def _kind_of(tp: Any, meta: dict[str, Any], where: str) -> tuple[str, str]:  # noqa: ANN401 - a typing object
    """(setting type, sequence container) of a field's annotation."""
    if meta.get("choices"):
        return "choice", ""
    origin = typing.get_origin(tp)
    if origin in (list, tuple) and all(a in (str, Ellipsis) for a in typing.get_args(tp)):
        return "list", origin.__name__
    if tp in (bool, int, float, str):
        return tp.__name__, ""
    raise TypeError(f"{where}: a setting must be bool, int, float, str, or a list/tuple of str, not {tp!r}")


def _declared_at(cls: type, name: str) -> tuple[int, int]:
    """(MRO position of the class that declares or re-declares field `name`, its place in that class's body)."""
    for depth, c in enumerate(cls.__mro__):
        names = list(c.__dict__.get("__annotations__", {}))
        if name in names:
            return depth, names.index(name)
    return len(cls.__mro__), 0


def settings_of(cls: type) -> list[SettingSpec]:
    """The settings a config dataclass declares, in field order, its own before those it inherits (a model's
    settings before the training loop's common ones); hidden and plain fields are left out."""
    hints = typing.get_type_hints(cls)
    from_preset = bool(getattr(cls, "SETTINGS_FROM_PRESET", False))
    specs = []
    for f in sorted(dataclasses.fields(cls), key=lambda f: _declared_at(cls, f.name)):
        meta = setting_meta(f)
        if meta is None or meta["hidden"]:
            continue
        tp, optional = _unwrap_optional(hints[f.name])
        kind, sequence = _kind_of(tp, meta, f"{cls.__name__}.{f.name}")
        default = f.default if f.default is not MISSING else (
            f.default_factory() if f.default_factory is not MISSING else None)
        if kind == "list":
            default = list(default or [])
        if from_preset:
            default, optional = None, True
        specs.append(SettingSpec(
            name=f.name, flag=meta["flag"] or "--" + f.name.replace("_", "-"), type=kind, default=default,
            optional=optional or default is None and kind != "list",
            choices=[str(c) for c in meta["choices"] or []], minimum=meta["low"], maximum=meta["high"],
            minimum_exclusive=bool(meta.get("low_exclusive")), help=meta["help"], owner=cls.__name__,
            sequence=sequence, from_preset=from_preset,
        ))  # fmt: skip
    return specs


# ------------------------------------------------------------------------------------------------ checks


def _number(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def check_value(spec: SettingSpec, value: Any) -> str | None:  # noqa: ANN401 - any setting value
    """What is wrong with `value` for `spec` (type, choice, range), or None when it is fine."""
    if value is None:
        return None if spec.optional else "a value is required"
    if spec.type == "bool":
        return None if isinstance(value, bool) else f"expected true/false, got {value!r}"
    if spec.type == "list":
        ok = isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
        return None if ok else f"expected a list of strings, got {value!r}"
    if spec.type == "choice":
        return None if str(value) in spec.choices else f"{value!r} is not one of {', '.join(spec.choices)}"
    if spec.type in ("int", "float"):
        numeric = (int,) if spec.type == "int" else (int, float)
        if isinstance(value, bool) or not isinstance(value, numeric):
            return f"expected {'an integer' if spec.type == 'int' else 'a number'}, got {value!r}"
        if not math.isfinite(value if spec.type == "int" else _as_float(value)):
            return f"{value} is not a finite number"
        low, high = spec.minimum, spec.maximum
        if spec.type == "int":
            low = INT64_MIN if low is None else max(low, INT64_MIN)
            high = INT64_MAX if high is None else min(high, INT64_MAX)
        if low is not None and spec.minimum_exclusive and value <= low:
            return f"{value} must be greater than {_number(low)}"
        if low is not None and value < low:
            return f"{value} is below the minimum {_number(low)}"
        if high is not None and value > high:
            return f"{value} is above the maximum {_number(high)}"
        return None
    return None if isinstance(value, str) else f"expected text, got {value!r}"


def _as_float(value: float) -> float:
    try:
        return float(value)
    except OverflowError:  # an integer beyond the float range
        return math.inf


def check_settings(classes: Iterable[type], settings: dict[str, Any]) -> list[str]:
    """Every problem with `settings` (name -> value) for the settings of `classes`, one message each."""
    classes = list(classes)
    specs = {s.name: s for cls in classes for s in settings_of(cls)}
    plain = {f.name: cls.__name__ for cls in classes for f in dataclasses.fields(cls) if f.name not in specs}
    problems = []
    for key, value in settings.items():
        spec = specs.get(key)
        if spec is None:
            if key in plain:
                problems.append(f"{key}: a field of {plain[key]} that is not a setting (no command-line flag), "
                                "so it cannot be set for a run")
            else:
                problems.append(f"{key}: not a setting (known: {', '.join(sorted(specs))})")
            continue
        problem = check_value(spec, value)
        if problem:
            problems.append(f"{key}: {problem}")
    if problems:
        return problems
    for cls in classes:  # the config's own checks (__post_init__) on what it was given
        mine = {s.name: s for s in settings_of(cls)}
        kwargs = {k: _as_field_value(mine[k], v) for k, v in settings.items() if k in mine and v is not None}
        try:
            cls(**kwargs)
        except (ValueError, TypeError) as e:
            problems.append(str(e))
    return problems


def _as_field_value(spec: SettingSpec, value: Any) -> Any:  # noqa: ANN401 - any setting value
    if spec.type == "list" and value is not None:
        return tuple(value) if spec.sequence == "tuple" else list(value)
    if spec.type == "float" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


# ------------------------------------------------------------------------------------------------ argparse


def _parser_for(spec: SettingSpec) -> Callable[[str], Any]:
    """An argparse `type` that converts and range-checks, so a bad flag is an argparse error with the reason."""

    def parse(text: str) -> Any:  # noqa: ANN401 - the converted value
        try:
            value = int(text) if spec.type == "int" else float(text) if spec.type == "float" else text
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if spec.type == 'int' else 'a number'}, got {text!r}") from None
        problem = check_value(spec, value)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value

    parse.__name__ = spec.type  # argparse names the type in some messages
    return parse


def number(kind: type[int] | type[float], low: float | None = None, high: float | None = None,
           low_exclusive: bool = False) -> Callable[[str], Any]:
    """An argparse `type` for a hand-written numeric flag: converts, then checks the range (and 64 bits, and
    finiteness) exactly as generated flags do, so a bad value is a usage error that says why."""
    return _parser_for(SettingSpec(name="", flag="", type=kind.__name__, minimum=low, maximum=high,
                                   minimum_exclusive=low_exclusive))


def bound_numbers(parser: argparse.ArgumentParser) -> None:
    """Give every plain `type=int` / `type=float` flag of `parser` (and of its sub-commands) the checks of
    `number` without a range of its own: flags written by hand in trainer modules are bounded too."""
    for action in parser._actions:  # noqa: SLF001 - argparse keeps its actions here, documented by use
        if action.type in (int, float):
            action.type = number(action.type)
        for sub in (action.choices or {}).values() if isinstance(action, argparse._SubParsersAction) else ():
            bound_numbers(sub)


def _help(spec: SettingSpec) -> str:
    parts = [spec.help]
    if spec.minimum is not None or spec.maximum is not None:
        low = "" if spec.minimum is None else ("> " if spec.minimum_exclusive else ">= ") + _number(spec.minimum)
        high = "" if spec.maximum is None else "<= " + _number(spec.maximum)
        parts.append(f"[{', '.join(p for p in (low, high) if p)}]")
    if spec.type == "list":
        parts.append("(repeatable)")
    elif spec.default is not None:
        parts.append(f"(default: {spec.default})")
    elif spec.from_preset:
        parts.append("(default: the preset's)")
    return " ".join(p for p in parts if p).replace("%", "%%")


def add_arguments(parser: argparse.ArgumentParser, cls: type) -> list[SettingSpec]:
    """One flag per setting of `cls` (dest = the field name, default None = not given); returns the specs."""
    specs = settings_of(cls)
    for spec in specs:
        common: dict[str, Any] = {"dest": spec.name, "default": None, "help": _help(spec)}
        if spec.type == "bool":
            parser.add_argument(spec.flag, action=argparse.BooleanOptionalAction, **common)
        elif spec.type == "list":
            parser.add_argument(spec.flag, action="append", metavar=spec.flag[2:].replace("-", "_").upper(),
                                **common)  # one value per use: --exclude-speaker A --exclude-speaker B
        elif spec.type == "choice":
            parser.add_argument(spec.flag, choices=spec.choices, **common)
        else:
            metavar = {"int": "INT", "float": "FLOAT"}.get(spec.type, "TEXT")
            parser.add_argument(spec.flag, type=_parser_for(spec), metavar=metavar, **common)
    return specs


def given(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The settings of `cls` that were given on the command line (not None), as field values."""
    out = {}
    for spec in settings_of(cls):
        value = getattr(args, spec.name, None)
        if value is not None:
            out[spec.name] = _as_field_value(spec, value)
    return out


def config_from_args(cls: type, args: argparse.Namespace, base: Any = None, **fixed: Any) -> Any:  # noqa: ANN401
    """`cls` from the flags that were given, over `base` (a preset) or the dataclass defaults, plus `fixed`
    (values that are not settings: data, output path). The dataclass's own checks run; a SettingError says why."""
    values = {**given(args, cls), **fixed}
    try:
        return dataclasses.replace(base, **values) if base is not None else cls(**values)
    except (ValueError, TypeError) as e:
        raise SettingError(str(e)) from e


def argv_for(specs: Iterable[SettingSpec], settings: dict[str, Any]) -> list[str]:
    """The flags that set `settings` (checked already), in the order given; None is left to the trainer."""
    by_name = {s.name: s for s in specs}
    argv: list[str] = []
    for key, value in settings.items():
        spec = by_name[key]
        if value is None:
            continue
        if spec.type == "bool":
            argv.append(spec.flag if value else "--no-" + spec.flag[2:])
        elif spec.type == "list":
            for v in value:
                argv += [spec.flag, str(v)]
        else:
            argv += [spec.flag, repr(value) if isinstance(value, float) else str(value)]
    return argv
