"""Indexing and find similar load a retrieval model's sound half (issue 25 item 3): the audio tower in torch and
the text tower in NumPy, without transformers; the vectors are those of the whole model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from app.services.search.embedder import RetrievalEmbedder
from tests.test_library import write_retrieval_checkpoint

ROOT = Path(__file__).resolve().parents[1]


def test_the_sound_half_embeds_audio_and_text_as_the_whole_model(tmp_path: Path) -> None:
    path = write_retrieval_checkpoint(tmp_path / "m.safetensors")
    whole = RetrievalEmbedder.from_checkpoint(path)
    half = RetrievalEmbedder.from_checkpoint(path, sound_half=True)
    assert whole.model.text_encoder is not None and half.model.text_encoder is None and half.text_tower is not None
    assert sum(p.numel() for p in half.model.parameters()) < sum(p.numel() for p in whole.model.parameters())
    rng = np.random.default_rng(0)
    windows = (0.1 * rng.standard_normal((3, whole.window_samples))).astype(np.float32)
    np.testing.assert_allclose(half.embed_windows(windows), whole.embed_windows(windows), atol=1e-6)
    texts = ["a door creaks open", "rain on a tin roof"]
    np.testing.assert_allclose(half.embed_text(texts), whole.embed_text(texts), atol=1e-4)


def test_loading_the_sound_half_never_imports_transformers(tmp_path: Path) -> None:
    path = write_retrieval_checkpoint(tmp_path / "m.safetensors")
    code = ("import sys; from app.services.search.embedder import load_embedder; "
            f"e = load_embedder({path!r}); e.embed_text(['a dog barks']); print('transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"
