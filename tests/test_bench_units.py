"""`python -m bench units`' streaming pass: the blocks' units are the whole file's (a run of the benchmark's own
loop on a tiny untrained model, so a renamed model API breaks a test, not only the benchmark)."""

from __future__ import annotations

import torch

from bench import bench_units as bench
from models.frontends import MFCC
from models.units import UnitsModel
from training.units_train import units_config


def test_the_streaming_pass_gives_the_whole_files_units() -> None:
    torch.manual_seed(0)
    model, frontend = UnitsModel(units_config("tiny", ["a"])).eval(), MFCC()
    wave = 0.1 * torch.randn(16000, generator=torch.Generator().manual_seed(1))  # 1 s, ten 100-ms blocks
    times, cpu, streamed = bench.stream_pass(model, frontend, wave)
    with torch.inference_mode():
        whole = model.vqvae.encode(frontend(wave))
    n = min(len(streamed), len(whole))
    assert len(times) == 10 and cpu >= 0 and n >= len(whole) - 1
    assert float((streamed[:n] == whole[:n]).float().mean()) >= 0.9  # MFCC edges differ slightly at block borders
    wall, _, units = bench.session_pass(model, frontend, wave)
    assert wall > 0 and len(units) >= n - 1
