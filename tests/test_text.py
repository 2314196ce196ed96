from __future__ import annotations

import json
import os

import pytest
import torch

from models.text import (
    TextConfig,
    TextEncoder,
    default_model_dir,
    from_config_dict,
    parse_freeze,
    preprocess_caption,
    text_tiny,
)


@pytest.fixture(scope="module")
def minilm() -> TextEncoder:
    assert os.environ.get("HF_HUB_OFFLINE") == "1"  # set by conftest: any download attempt would fail
    torch.manual_seed(0)
    return TextEncoder(TextConfig()).eval()


def test_preprocessing() -> None:
    text = "  A Dog's BARK,  then high-pitched   whines!\n"
    assert preprocess_caption(text) == "a dogs bark then high pitched whines"
    assert preprocess_caption("Rain... on (a) tin_roof") == "rain on a tin roof"
    assert preprocess_caption("") == ""


def test_real_minilm_loads_offline_from_the_wheel(minilm: TextEncoder) -> None:
    assert (default_model_dir() / "model.safetensors").is_file()
    assert minilm.dim == 384 and minilm.model.config.num_hidden_layers == 6
    n_params = sum(p.numel() for p in minilm.parameters())
    assert 21_000_000 < n_params < 23_500_000  # all-MiniLM-L6-v2 without the pooler
    with torch.no_grad():
        out = minilm(["A dog barks!", "rain falls on a tin roof"])
    assert out.shape == (2, 384) and torch.isfinite(out).all()
    # same captions up to case and punctuation -> same embedding (preprocessing happens inside)
    with torch.no_grad():
        again = minilm(["a dog barks", "Rain falls on a tin roof."])
    torch.testing.assert_close(out, again)


def sentence_transformers_reference(captions: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """What sentence-transformers computes for the shipped model, from the model folder's own
    sentence-transformers config, with `transformers` alone: its Transformer module (tokenizer, max_seq_length,
    AutoModel) -> token embeddings (B, L, H) -> its Pooling module (mean over real tokens) -> (B, H)."""
    from transformers import AutoModel, AutoTokenizer

    folder = default_model_dir()
    modules = [m["type"].rsplit(".", 1)[-1] for m in json.loads((folder / "modules.json").read_text())]
    assert modules == ["Transformer", "Pooling", "Normalize"]
    pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode_mean_tokens"] and not pooling["pooling_mode_cls_token"]
    max_length = json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"]
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = AutoModel.from_pretrained(folder, local_files_only=True).eval()
    batch = tokenizer(captions, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        tokens = model(**batch).last_hidden_state  # (B, L, H)
    mask = batch["attention_mask"].unsqueeze(-1).float()  # (B, L, 1)
    return tokens, (tokens * mask).sum(1) / mask.sum(1).clamp(min=1e-9)


def test_first_token_and_mean_pooling_match_sentence_transformers(minilm: TextEncoder, monkeypatch) -> None:
    import tqdm

    monkeypatch.setattr(tqdm.tqdm, "monitor_interval", 0)  # no tqdm monitor thread left behind (weights loading)
    captions = ["a car engine starts and idles", "rain"]  # different lengths: padding must not count
    tokens, mean = sentence_transformers_reference(captions)
    with torch.no_grad():
        first = minilm(captions)
    torch.testing.assert_close(first, tokens[:, 0], rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(minilm.config, "pooling", "mean")  # how all-MiniLM-L6-v2 was trained
    with torch.no_grad():
        pooled = minilm(captions)
    torch.testing.assert_close(pooled, mean, rtol=1e-4, atol=1e-4)


def test_truncation_at_32_tokens_and_padding_to_batch_max(minilm: TextEncoder) -> None:
    long = "the quick brown fox jumps over the lazy dog " * 10
    batch = minilm.tokenize([long, "a bird"])
    assert batch["input_ids"].shape == (2, 32)
    assert batch["attention_mask"][1].sum() == 4  # [CLS] a bird [SEP]
    assert batch["input_ids"][0, -1] == minilm.tokenizer.sep_token_id
    short = minilm.tokenize(["a bird", "a cat purrs"])
    assert short["input_ids"].shape[1] == int(short["attention_mask"].sum(1).max()) < 32


def test_freeze_options_set_requires_grad() -> None:
    def frozen(enc: TextEncoder) -> set[str]:
        return {n for n, p in enc.model.named_parameters() if not p.requires_grad}

    names = {n for n, _ in TextEncoder(text_tiny(tiny_layers=3)).model.named_parameters()}
    emb = {n for n in names if n.startswith("embeddings.")}
    layer = {i: {n for n in names if n.startswith(f"encoder.layer.{i}.")} for i in range(3)}
    assert emb and all(layer.values())
    assert frozen(TextEncoder(text_tiny(tiny_layers=3))) == set()
    assert frozen(TextEncoder(text_tiny(tiny_layers=3, freeze="all"))) == names
    assert frozen(TextEncoder(text_tiny(tiny_layers=3, freeze="embeddings"))) == emb
    assert frozen(TextEncoder(text_tiny(tiny_layers=3, freeze="bottom:2"))) == emb | layer[0] | layer[1]
    with pytest.raises(ValueError, match="only 3 layers"):
        TextEncoder(text_tiny(tiny_layers=3, freeze="bottom:4"))
    with pytest.raises(ValueError, match="freeze must be"):
        parse_freeze("top:2")
    enc = TextEncoder(text_tiny(freeze="all"))
    enc.train()
    assert not enc.model.training  # a fully frozen encoder keeps dropout off


def test_tiny_encoder_shapes_and_gradients() -> None:
    torch.manual_seed(0)
    enc = TextEncoder(text_tiny())
    out = enc(["a dog barks", "water runs from a tap into a sink"])
    assert out.shape == (2, 32)
    out.sum().backward()
    assert enc.model.embeddings.word_embeddings.weight.grad is not None


def test_from_config_dict_round_trips_through_json() -> None:
    cfg = text_tiny(max_tokens=16, freeze="bottom:1")
    enc = from_config_dict(json.loads(json.dumps(cfg.__dict__)))
    assert enc.config == cfg
    with pytest.raises(ValueError, match="unknown"):
        from_config_dict({"bogus": 1})
    with pytest.raises(ValueError, match="name_or_path"):
        TextConfig(name_or_path=None)
