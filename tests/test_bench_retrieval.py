"""`python -m bench retrieval`'s towers: the shipped default's (an aiSFX tower since it replaced PaSST) and a PaSST
one, each timed on its own front end's 10-s clips, give what RetrievalModel.embed_audio gives."""

from __future__ import annotations

import torch

from bench import bench_retrieval as bench
from core.checkpoints import load_model
from models.passt import passt_tiny


def test_the_default_tower_is_the_shipped_models_audio_half_on_its_own_frames() -> None:
    tower, name = bench.default_tower()
    assert name == bench.DEFAULT.name  # the shipped checkpoint is in the repository
    model, _ = load_model(bench.DEFAULT, kind="retrieval")
    assert tower.clip_shape == ((431, 96) if model.config.audio_tower != "passt" else (128, 1000))
    x = torch.randn(2, *tower.clip_shape)
    with torch.inference_mode():
        assert torch.allclose(tower(x), model.embed_audio(x), atol=1e-5)
    for timed in (bench.case(tower, 1, reps=1), bench.case(tower, 1, reps=1, bf16=True),
                  bench.case(bench.quantized(tower), 1, reps=1, mode="no_grad")):
        assert timed["audio_s_per_s"] > 0 and timed["ms_per_batch"] > 0


def test_a_passt_tower_reads_passt_log_mels() -> None:
    torch.manual_seed(0)
    tower = bench.AudioTower.passt(passt_tiny(), embed_dim=32).eval()
    assert tower.clip_shape == (128, 1000)
    with torch.inference_mode():
        v = tower(torch.randn(2, *tower.clip_shape))
    assert v.shape == (2, 32) and torch.allclose(v.norm(dim=-1), torch.ones(2))
    assert bench.case(tower, 1, reps=1)["audio_s_per_s"] > 0
