"""The aiSFX trunk's inference backends side by side: speed and what int8 costs in quality.
`python -m bench aisfx_backends` prints JSON (bench/out/).

Backends (core/aisfx_runtime.py): `int8` (the default: ONNX Runtime static QDQ quantisation, calibrated on the
demo library), `onnx` (fp32 ONNX Runtime), `torch` (folded BatchNorm, channels-last). For each:
- speed: trunk only, on (1, 432, 96) frames (a 10-s window) and on a batch of eight 100-frame blocks (short clips
  padded to one block), 1 and 2 threads, best of 5; x real time = seconds of audio / seconds;
- quality of int8 against fp32 (onnx; torch gives the same vectors to float precision): on the
  package-held-out TEST split of the caption corpus (training/sfx_corpus.py: sound packages never trained on,
  never used to choose anything: UNSEEN) the clip embeddings' cosine to fp32 and the default retrieval model's
  text-to-audio mAP@10 / R@10 (each clip's caption is a query, same-caption clips are correct); on the sfx val
  split (a held-out split of the training distribution, NOT unseen) find-similar mAP@10 (same-caption clips,
  bench/bench_sfx.find_similar_metrics). Each clip's first 10 s, the indexer's fully convolutional path.
  `EARSHOT_BENCH_CLIPS` caps the test clips (default: all).
"""

from __future__ import annotations

import csv
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bench.bench_sfx import SFX, find_similar_metrics, val_clips
from bench.bench_sfx_heldout import CORPUS, MAX_SECONDS, metrics, random_metrics
from core.aisfx_runtime import Int8Trunk, OnnxTrunk, TorchTrunk
from core.audio import decode
from core.checkpoints import load_model
from models.frontends import AisfxMel

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "resources" / "models" / "retrieval-default.safetensors"


def trunk_speed(make: Any, threads: int) -> dict[str, float]:
    torch.set_num_threads(threads)
    runner = make(threads)
    out = {}
    for name, shape in (("10s_window", (1, 432, 96)), ("8_short_clips", (8, 100, 96))):
        x = torch.rand(shape)
        with torch.inference_mode():
            runner(x)
            best = min(_timed(runner, x) for _ in range(5))
        out[name] = round(shape[0] * shape[1] * 1024 / 44100 / best, 1)
    return out


def _timed(runner: Any, x: torch.Tensor) -> float:
    t0 = time.perf_counter()
    runner(x)
    return time.perf_counter() - t0


@torch.inference_mode()
def clip_features(model: Any, paths: list[Path], runners: dict[str, Any]) -> dict[str, torch.Tensor]:
    """(N, 1024) tower features of each clip's first 10 s, through each runner."""
    mel, enc = AisfxMel(), model.audio_encoder
    feats: dict[str, list[torch.Tensor]] = {k: [] for k in runners}
    for p in paths:
        a = decode(p, mel.config.sample_rate).audio[: int(MAX_SECONDS * mel.config.sample_rate)]
        frames = mel(torch.from_numpy(np.ascontiguousarray(a)))[None]
        for k, r in runners.items():
            enc.runner = r
            feats[k].append(enc(frames))
    enc.runner = None
    return {k: torch.cat(v) for k, v in feats.items()}


def quality(model: Any, runners: dict[str, Any]) -> dict[str, Any]:
    with open(CORPUS / "captions.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["split"] == "test"]
    cap = int(os.environ.get("EARSHOT_BENCH_CLIPS", "0") or 0)
    if cap:
        rows = rows[:: max(1, len(rows) // cap)][:cap]
    caps = [r["caption"] for r in rows]
    feats = clip_features(model, [CORPUS / r["path"] for r in rows], runners)
    with torch.inference_mode():
        text = torch.cat([model.embed_text(caps[i : i + 256]) for i in range(0, len(caps), 256)])
        test: dict[str, Any] = {"clips": len(rows), "packages": len({r["path"].split("/")[1] for r in rows}),
                                "random": random_metrics(caps)}
        ref = feats["onnx"]
        for k, f in feats.items():
            cos = F.cosine_similarity(f, ref)
            test[k] = {**metrics(model.embed_audio_features(f), text, caps),
                       "cosine_to_fp32_mean": round(cos.mean().item(), 5),
                       "cosine_to_fp32_min": round(cos.min().item(), 5)}
        paths, captions = val_clips(SFX)
        val = clip_features(model, paths, runners)
        similar = {"clips": len(paths)}
        for k, f in val.items():
            similar[k] = find_similar_metrics(model.embed_audio_features(f), captions)
    return {"heldout_test_unseen": test, "find_similar_sfx_val": similar}


def run() -> dict[str, Any]:
    model, _ = load_model(MODEL, kind="retrieval")
    model.eval()
    net = model.audio_encoder.embedding_net
    backends = {"int8": lambda th: Int8Trunk(net, th), "onnx": lambda th: OnnxTrunk(net, th),
                "torch": lambda th: TorchTrunk(net)}  # torch's threads: torch.set_num_threads in trunk_speed
    speed = {k: {f"{t}_threads": trunk_speed(make, t) for t in (1, 2)} for k, make in backends.items()}
    torch.set_num_threads(1)
    runners = {"onnx": OnnxTrunk(net, 1), "int8": Int8Trunk(net, 1)}  # torch = onnx to float precision
    if (CORPUS / "captions.csv").is_file():
        measured = quality(model, runners)
    else:  # the corpus is built by `python -m training.sfx_corpus`; without it only the speed is measured
        measured = {"quality": f"skipped: no caption corpus at {CORPUS} (python -m training.sfx_corpus {CORPUS})"}
    return {"model": MODEL.name, "load_average": os.getloadavg(), "trunk_x_realtime": speed, **measured,
            "notes": __doc__.split("\n\n", 1)[1].strip()}


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=1))
