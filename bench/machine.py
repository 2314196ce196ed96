"""What machine a benchmark ran on: the CPU model and the flags that decide its speed, the load, and the
measured float32 matmul peak (GFLOP/s), so that numbers from different boxes can be read side by side."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")


def cpu() -> dict:
    """Model name, logical cores and which of FLAGS the CPU has (Linux /proc/cpuinfo; the platform otherwise)."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    return {"model": model, "cores": os.cpu_count(), "flags": [f for f in FLAGS if f in flags],
            "load_1min": round(os.getloadavg()[0], 2)}


def matmul_gflops(threads: int, n: int = 1024, seconds: float = 1.0) -> float:
    """Sustained float32 GFLOP/s of an n x n matmul on `threads` torch threads (best of the repeats)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(n, n), torch.randn(n, n)
        torch.mm(a, b)  # warm up
        best, end = 0.0, time.perf_counter() + seconds
        while time.perf_counter() < end:
            t = time.perf_counter()
            torch.mm(a, b)
            best = max(best, 2 * n**3 / (time.perf_counter() - t) / 1e9)
        return round(best, 1)
    finally:
        torch.set_num_threads(before)


def describe(peak: bool = True) -> dict:
    out = cpu()
    if peak:
        out["matmul_gflops"] = {"1_thread": matmul_gflops(1), f"{os.cpu_count()}_threads": matmul_gflops(
            os.cpu_count() or 1)}
    return out
