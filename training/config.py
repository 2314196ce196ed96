"""Settings as dataclass fields: one definition gives the CLI flag, the Train tab's form row and the check.

A config field declared with `setting(...)` carries its help text, range and choices in `field.metadata`;
everything that shows or parses settings reads them from there (`training.kinds` / `app.cli` /
`app.services.training_runs`), so nothing guesses from names or source text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import MISSING, field
from typing import Any

META_KEY = "earshot"


def setting(
    default: Any = MISSING,  # noqa: ANN401 - any field value
    *,
    help: str,  # noqa: A002 - the argparse word
    low: float | None = None,  # inclusive bounds for numbers
    high: float | None = None,
    choices: Sequence[Any] | None = None,
    flag: str | None = None,  # CLI flag when it differs from --field-name (e.g. "--epochs")
    hidden: bool = False,  # internal: no flag, not in the form
    default_factory: Callable[[], Any] | None = None,
) -> Any:  # noqa: ANN401 - a dataclasses.Field posing as the value, as dataclasses.field does
    """A dataclass field with the metadata that generates its flag and form row."""
    meta = {META_KEY: {"help": help, "low": low, "high": high, "choices": None if choices is None else list(choices),
                       "flag": flag, "hidden": hidden}}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


def setting_meta(f: Any) -> dict[str, Any] | None:  # noqa: ANN401 - a dataclasses.Field
    """The `setting(...)` metadata of a dataclass field, or None for a plain field."""
    return f.metadata.get(META_KEY)
