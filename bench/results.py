"""Where a benchmark run from its own module (`python -m bench.NAME`) leaves its JSON: printed, and written to
bench/out/FILE.json (`python -m bench NAME` writes its record there itself, with the machine)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "out"


def write_result(file: str, result: Any, indent: int = 2) -> str:  # noqa: ANN401 - any JSON-able result
    """Print `result` as JSON and write it to bench/out/`file`.json; returns the text."""
    text = json.dumps(result, indent=indent)
    print(text)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{file}.json").write_text(text)
    return text
