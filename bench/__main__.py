"""`python -m bench [NAME ...]`: run the benchmarks (all by default) and print one JSON object each."""

from __future__ import annotations

import importlib
import json
import platform
import sys
import time
from pathlib import Path

import torch


def machine() -> dict:
    return {"python": platform.python_version(), "torch": torch.__version__, "cpu": platform.processor() or
            platform.machine(), "threads": torch.get_num_threads(), "cuda": torch.cuda.is_available()}


def main(names: list[str]) -> int:
    found = sorted(p.stem for p in Path(__file__).parent.glob("bench_*.py"))
    chosen = [n if n.startswith("bench_") else f"bench_{n}" for n in names] or found
    out_dir = Path("bench/out")
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in chosen:
        if name not in found:
            print(f"unknown benchmark {name}; available: {', '.join(found)}", file=sys.stderr)
            return 2
        start = time.perf_counter()
        result = importlib.import_module(f"bench.{name}").run()
        record = {"benchmark": name, "machine": machine(), "wall_s": round(time.perf_counter() - start, 2),
                  "result": result}
        text = json.dumps(record, indent=2)
        (out_dir / f"{name}.json").write_text(text)
        print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
