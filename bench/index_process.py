"""Index a folder from scratch in a process of its own and print what it cost as JSON: the first indexing of a
process (imports, model loading, the graph cache), its peak RSS, wall and CPU seconds. Used by bench_indexing's
real-library-shaped set; `python -m bench.index_process FOLDER [--fresh] [--max-windows N] [--backend B]
[--zero-tower] [--model M]` (the ONNX trunk's output replaced by zeros of its shape: what indexing costs without
the sound tower, the floor no smaller tower can go below). The model: the shipped one unless `--model` (the JSON
says which; bench/pinned.py)."""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import time
from pathlib import Path


def peak_rss_mb() -> float:
    """This process's peak resident memory since it started: Linux's VmHWM (ru_maxrss would also count the pages
    of the parent it was forked from, a benchmark holding models in memory), else ru_maxrss."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def zero_tower() -> None:
    """Make every ONNX trunk (int8 or float) answer zeros of its output's shape (n, 512, T/8) at no cost."""
    import torch

    from core import aisfx_runtime

    def zeros(self: object, frames: torch.Tensor, counts: object = None) -> torch.Tensor:
        return torch.zeros(frames.shape[0], 512, frames.shape[1] // 8)

    aisfx_runtime.OnnxTrunk.__call__ = zeros  # type: ignore[method-assign]
    aisfx_runtime.OnnxTrunk.padded = zeros  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("folder", type=Path)
    p.add_argument("--max-windows", type=int, default=None)
    p.add_argument("--backend", default=None)
    p.add_argument("--fresh", action="store_true", help="delete FOLDER/.earshot first (else a folder indexed "
                   "before is refused: re-indexing it would measure nothing)")
    p.add_argument("--zero-tower", action="store_true", help="replace the ONNX trunk's output by zeros (a floor)")
    p.add_argument("--model", default=None, help="the retrieval model (default: the shipped one)")
    args = p.parse_args(argv)
    if args.zero_tower:
        zero_tower()
    if (args.folder / ".earshot").exists():
        if not args.fresh:
            print(f"{args.folder} has a catalog already: pass --fresh to delete it first", file=sys.stderr)
            return 2
        shutil.rmtree(args.folder / ".earshot")
    t0, cpu0 = time.perf_counter(), time.process_time()
    from core import memory

    memory.limit_arenas()  # as `earshot` does at start
    memory.map_large_blocks()
    from app.services.jobs import drain
    from app.services.search.embedder import load_embedder
    from app.services.search.search_jobs import summarize
    from app.services.search.session import SearchSession
    from bench import pinned

    name, path, chosen = pinned.retrieval(args.model)
    embedder = load_embedder(str(path))
    if args.backend:
        embedder.set_backend(args.backend)
    embedder.warm_up()
    loaded = time.perf_counter() - t0
    session = SearchSession.open(args.folder, embedder)
    kwargs = {} if args.max_windows is None else {"max_windows": args.max_windows}
    try:
        s = summarize(drain(session.index_job(**kwargs)))
    finally:
        session.close()
    wall = time.perf_counter() - t0
    out = {k: s[k] for k in ("files", "embedded", "failed", "windows", "audio_seconds", "elapsed_s", "x_realtime")}
    out.update({**pinned.model_fields(name, path, chosen), "backend": embedder.backend, "load_s": round(loaded, 2),
                "process_wall_s": round(wall, 2),
                "cpu_s": round(time.process_time() - cpu0, 2),
                "peak_rss_mb": peak_rss_mb()})
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
