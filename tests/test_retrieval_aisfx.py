"""The retrieval model with the aiSFX audio tower (models/retrieval.py) and mean-pooled text (models/text.py)."""

import dataclasses

import pytest
import torch

from models import retrieval
from models.aisfx import AisfxConfig, AisfxEncoder
from models.frontends import AisfxMel, PasstMel
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
