"""Feature front ends: real-time factor (compute seconds per audio second) on 60 s of audio, batch 1 and 8."""

from __future__ import annotations

import time

import torch

from models.frontends import MFCC, LinearSpectrogram, LogMel, PasstMel


def time_it(fn, reps: int = 5) -> float:
    fn()  # warm-up
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - start) / reps


def run() -> dict:
    torch.manual_seed(0)
    results = {}
    for name, frontend, sr in (("passt_mel", PasstMel(), 32000), ("mfcc", MFCC(), 16000),
                               ("logmel", LogMel(), 16000), ("linear_spec", LinearSpectrogram(), 16000)):
        for batch in (1, 8):
            wave = torch.randn(batch, 60 * sr) * 0.1
            with torch.inference_mode():
                seconds = time_it(lambda fe=frontend, w=wave: fe(w))
            results[f"{name}_b{batch}_rtf"] = round(seconds / (60 * batch), 6)
    return results
