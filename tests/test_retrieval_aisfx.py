"""The retrieval model with the aiSFX audio tower (models/retrieval.py) and mean-pooled text (models/text.py)."""

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from models import retrieval
from models.aisfx import AisfxConfig, AisfxEncoder
from models.frontends import AisfxMel, PasstMel, frontend_to_dict
from models.passt import passt_tiny
from models.retrieval import RetrievalConfig, RetrievalModel, audio_frontend, config_from_dict
from models.text import TextConfig, TextEncoder, text_tiny


def _tiny(**kw) -> RetrievalConfig:
    return RetrievalConfig(audio=AisfxConfig(base_channels=4, **kw), audio_tower="aisfx", text=text_tiny(),
                           embed_dim=8, proj_layers=2)


def test_aisfx_tower_embeds_and_trains_only_what_it_should():
    torch.manual_seed(0)
    model = RetrievalModel(_tiny(train_top_block=True)).train()
    assert isinstance(model.audio_encoder, AisfxEncoder) and isinstance(audio_frontend(model.config), AisfxMel)
    feats = torch.rand(2, 160, 96)
    sim, loss = model(feats, ["a dog barks", "rain"], lengths=torch.tensor([160, 90]))
    assert sim.shape == (2, 2) and torch.isfinite(loss)
    loss.backward()
    audio_grads = {n for n, p in model.audio_encoder.named_parameters() if p.grad is not None}
    assert audio_grads and all(".conv_block4." in n for n in audio_grads)
    assert model.audio_proj[0].weight.grad is not None  # 2-layer projection trains


def test_frozen_features_path_equals_full_path():
    model = RetrievalModel(_tiny()).eval()
    feats, lengths = torch.rand(3, 130, 96), torch.tensor([130, 60, 101])
    with torch.no_grad():
        cached = model.audio_features(feats, lengths)  # what a trainer precomputes once
        torch.testing.assert_close(model.embed_audio_features(cached), model.embed_audio(feats, lengths))


def test_config_round_trip_and_old_configs_stay_passt():
    cfg = _tiny(train_top_block=True)
    back = config_from_dict(dataclasses.asdict(cfg))
    assert back == cfg
    old = dataclasses.asdict(RetrievalConfig(audio=passt_tiny(), text=text_tiny()))
    del old["audio_tower"], old["proj_layers"]  # a checkpoint written before the tower choice
    assert config_from_dict(old).audio_tower == "passt"
    assert isinstance(audio_frontend(config_from_dict(old)), PasstMel)


def test_mismatched_tower_config_is_refused():
    with pytest.raises(ValueError, match="needs audio=AisfxConfig"):
        RetrievalConfig(audio_tower="aisfx")
    with pytest.raises(ValueError, match="audio_tower"):
        RetrievalConfig(audio_tower="clap")


def test_aisfx_preset_uses_mean_pooled_frozen_text():
    cfg = retrieval.aisfx_retrieval()
    assert cfg.text.pooling == "mean" and cfg.text.freeze == "all" and cfg.audio_tower == "aisfx"


def test_mean_pooling_ignores_padding_tokens():
    torch.manual_seed(0)
    enc = TextEncoder(text_tiny(pooling="mean")).eval()
    with torch.no_grad():
        alone = enc(["a dog"])
        padded = enc(["a dog", "a very long caption about heavy rain on a tin roof"])
    torch.testing.assert_close(padded[0], alone[0], atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="pooling"):
        TextConfig(pooling="max")


# ------------------------------------------------------------------------------------------ in the app


def _sound(kind: str, seconds: float, sr: int) -> np.ndarray:
    t = np.arange(round(seconds * sr)) / sr
    rng = np.random.default_rng(len(kind))
    x = {"tone": np.sin(2 * np.pi * 440 * t), "chirp": np.sin(2 * np.pi * (200 + 3000 * t / seconds) * t),
         "noise": rng.standard_normal(len(t)) * np.exp(-3 * (t % 0.5))}[kind]
    return (0.3 * x / np.abs(x).max()).astype(np.float32)


def test_library_indexes_and_searches_with_an_aisfx_tower_checkpoint(tmp_path: Path):
    from app.services.jobs import drain
    from app.services.library import embed_file
    from app.services.search import RetrievalEmbedder, SearchSession
    from training.checkpoints import save_checkpoint

    torch.manual_seed(0)
    model = RetrievalModel(_tiny(window_seconds=3.0)).eval()
    ckpt = save_checkpoint(tmp_path / "tiny-aisfx.safetensors", "retrieval", model, model.config,
                           features=frontend_to_dict(AisfxMel()))
    embedder = RetrievalEmbedder.from_checkpoint(ckpt)
    assert isinstance(embedder.frontend, AisfxMel) and embedder.sample_rate == 44100
    assert embedder.window_seconds == 3.0 and embedder.dim == 8

    root = tmp_path / "lib"
    root.mkdir()
    sf.write(root / "tone.wav", _sound("tone", 1.0, 44100), 44100)
    sf.write(root / "chirp.wav", _sound("chirp", 2.0, 22050), 22050)  # resampled to 44.1 kHz by the library
    sf.write(root / "long.wav", np.concatenate([_sound("tone", 3.0, 44100), _sound("noise", 2.0, 44100)]), 44100)
    shutil.copy(root / "chirp.wav", root / "chirp_copy.wav")

    # one window = the model on that audio as a clip of its own (AisfxMel at 44.1 kHz, real frames only)
    wave = np.concatenate([_sound("chirp", 1.0, 44100), _sound("noise", 0.5, 44100)])  # changes over time
    with torch.no_grad():
        want = model.embed_audio(AisfxMel()(torch.from_numpy(wave))[None])[0].numpy()
    padded = np.pad(wave, (0, embedder.window_samples - len(wave)))[None]
    np.testing.assert_allclose(embedder.embed_windows(padded)[0], want, atol=1e-5)

    session = SearchSession.open(root, embedder)
    try:
        report = drain(session.index_job())
        assert len(report.embedded) == 4 and not report.failed
        hits = session.search("a bell rings", k=10)
        q = embedder.embed_text(["a bell rings"])[0]
        ranked = sorted(((float(embed_file(h.path, embedder)[0] @ q), h.rel_path) for h in hits), reverse=True)
        assert [h.rel_path for h in hits] == [r for _, r in ranked] and len(hits) == 4
        assert session.similar(root / "chirp.wav", k=1)[0].rel_path == "chirp_copy.wav"
        long_hit = next(h for h in hits if h.rel_path == "long.wav")
        assert session.window_scores(long_hit).starts.tolist() == [0.0, 3.0]  # two 3-s windows
    finally:
        session.close()


def test_aisfx_checkpoint_with_a_passt_front_end_is_refused(tmp_path: Path):
    from app.services.search import RetrievalEmbedder

    model = RetrievalModel(_tiny()).eval()
    with pytest.raises(ValueError, match="needs the AisfxMel front end"):
        RetrievalEmbedder(model, PasstMel())
