"""`python -m bench [NAME ...]`: run the benchmarks (all by default) and print one JSON object each.

A benchmark is a module with a `run() -> dict`: every `bench_*.py` here, plus the ones named in OTHERS (modules
that are also scripts of their own, e.g. `python -m bench.search_quality --counts`)."""

from __future__ import annotations

import importlib
import json
import platform
import sys
import time
from pathlib import Path


def machine() -> dict:
    import torch

    from bench.machine import cpu

    return {"python": platform.python_version(), "torch": torch.__version__, "cpu": cpu(),
            "threads": torch.get_num_threads(), "cuda": torch.cuda.is_available()}


OTHERS = ("search_quality", "library_quality", "fused_latency")  # benchmarks without the bench_ prefix


def module_name(name: str) -> str:
    return name if name in OTHERS or name.startswith("bench_") else f"bench_{name}"


def main(names: list[str]) -> int:
    found = sorted([p.stem for p in Path(__file__).parent.glob("bench_*.py")] + list(OTHERS))
    chosen = [module_name(n) for n in names] or found
    out_dir = Path("bench/out")
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in chosen:
        if name not in found:
            print(f"unknown benchmark {name}; available: {', '.join(found)}", file=sys.stderr)
            return 2
        start = time.perf_counter()
        # machine() imports torch: after the run, so that a benchmark of processes it starts (startup) measures
        # their memory, not the pages they share with a large parent
        result = importlib.import_module(f"bench.{name}").run()
        record = {"benchmark": name, "machine": machine(), "wall_s": round(time.perf_counter() - start, 2),
                  "result": result}
        text = json.dumps(record, indent=2)
        (out_dir / f"{name}.json").write_text(text)
        print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
