"""What every model's @dataclass config shares: a saved config read back refuses the fields it does not have.

A checkpoint written by another version may carry keys this version's dataclass lacks; `check_fields` names
them in a ValueError instead of letting the constructor raise a bare TypeError.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


def check_fields(config_cls: type, d: Mapping[str, Any]) -> None:
    """Refuse the keys of a saved config that the dataclass `config_cls` does not have (a checkpoint written by
    another version): a ValueError naming them, not a TypeError from the constructor."""
    unknown = sorted(set(d) - {f.name for f in dataclasses.fields(config_cls)})
    if unknown:
        raise ValueError(f"{config_cls.__name__}: unknown field(s) {', '.join(unknown)}")
