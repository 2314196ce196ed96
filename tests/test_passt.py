from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from models.passt import (
    Attention,
    PaSST,
    from_config_dict,
    load_official_weights,
    passt_n,
    passt_s,
    passt_s15,
    passt_tiny,
    window_spans,
)


def official_layout(depth: int = 12, D: int = 768, grid: tuple[int, int] = (12, 99), classes: int = 527,
                    patch: int = 16) -> dict[str, tuple[int, ...]]:
    """Names and shapes of an official PaSST checkpoint (kkoutini/PaSST, e.g. passt-s-f128-p16-s10-ap.476)."""
    F_, T_ = grid
    shapes: dict[str, tuple[int, ...]] = {
        "cls_token": (1, 1, D),
        "dist_token": (1, 1, D),
        "new_pos_embed": (1, 2, D),
        "freq_new_pos_embed": (1, D, F_, 1),
        "time_new_pos_embed": (1, D, 1, T_),
        "patch_embed.proj.weight": (D, 1, patch, patch),
        "patch_embed.proj.bias": (D,),
    }
    for i in range(depth):
        b = f"blocks.{i}."
        shapes.update({
            b + "norm1.weight": (D,), b + "norm1.bias": (D,),
            b + "attn.qkv.weight": (3 * D, D), b + "attn.qkv.bias": (3 * D,),
            b + "attn.proj.weight": (D, D), b + "attn.proj.bias": (D,),
            b + "norm2.weight": (D,), b + "norm2.bias": (D,),
            b + "mlp.fc1.weight": (4 * D, D), b + "mlp.fc1.bias": (4 * D,),
            b + "mlp.fc2.weight": (D, 4 * D), b + "mlp.fc2.bias": (D,),
        })
    shapes.update({
        "norm.weight": (D,), "norm.bias": (D,),
        "head.0.weight": (D,), "head.0.bias": (D,),
        "head.1.weight": (classes, D), "head.1.bias": (classes,),
        "head_dist.weight": (classes, D), "head_dist.bias": (classes,),
    })
    return shapes


def random_state(layout: dict[str, tuple[int, ...]], seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: torch.randn(shape, generator=g) * 0.02 for k, shape in layout.items()}


# ------------------------------------------------------------------------------------------ full size


@pytest.mark.slow
def test_official_layout_loads_into_passt_s_without_missing_or_unexpected_keys() -> None:
    torch.manual_seed(0)
    model = PaSST(passt_s())
    layout = official_layout(grid=(12, 99))
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == layout
    sd = random_state(layout)
    missing, unexpected = load_official_weights(model, sd)
    assert missing == [] and unexpected == []
    own = model.state_dict()
    for k in ("blocks.7.attn.qkv.weight", "time_new_pos_embed", "head.1.bias", "patch_embed.proj.weight"):
        assert torch.equal(own[k], sd[k])
    # the one full-size forward: short input (1 s), eval -> (1, 768) features, 527 logits
    model.eval()
    with torch.no_grad():
        feats = model(torch.randn(1, 128, 100))
        logits = model.logits(feats)
    assert feats.shape == (1, 768) and logits.shape == (1, 527)
    assert torch.isfinite(feats).all()


@pytest.mark.slow
def test_official_layout_loads_into_passt_n_and_tolerates_wrapper_prefix_and_extra_keys() -> None:
    model = PaSST(passt_n())
    layout = official_layout(grid=(8, 62))
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == layout
    sd = {"net." + k: v for k, v in random_state(layout, seed=1).items()}
    sd["mel.0.weight"] = torch.zeros(3)  # hear21passt-style wrappers also store their front end
    missing, unexpected = load_official_weights(model, sd)
    assert missing == [] and unexpected == ["mel.0.weight"]
    assert torch.equal(model.state_dict()["blocks.11.mlp.fc2.weight"], sd["net.blocks.11.mlp.fc2.weight"])


def test_presets_have_the_official_grids() -> None:
    assert passt_s().grid == (12, 99) and passt_n().grid == (8, 62) and passt_s15().grid == (12, 149)
    assert passt_s().patchout == (4, 50) and passt_n().patchout == (2, 15) and passt_s15().patchout == (4, 80)
    # a 10-s window (1000 frames at 100 frames/s) fills the time grid exactly
    for cfg in (passt_s(), passt_n(), passt_s15()):
        assert (cfg.window_frames - cfg.patch_size) // cfg.stride[1] + 1 == cfg.grid[1]


# ------------------------------------------------------------------------------------------ tiny


def tiny_model(**overrides: object) -> PaSST:
    torch.manual_seed(0)
    return PaSST(passt_tiny(**overrides))


def test_loading_adapts_positional_embeddings_and_skips_a_foreign_head() -> None:
    model = tiny_model()
    cfg = model.config
    layout = official_layout(depth=cfg.depth, D=cfg.embed_dim, grid=(8, 80), classes=50)  # longer time grid
    sd = random_state(layout)
    missing, unexpected = load_official_weights(model, sd)
    assert set(missing) == {"head.1.weight", "head.1.bias", "head_dist.weight", "head_dist.bias"}
    assert set(unexpected) == {"head.1.weight", "head.1.bias", "head_dist.weight", "head_dist.bias"}
    assert torch.equal(model.time_new_pos_embed, sd["time_new_pos_embed"][..., : cfg.grid[1]])
    bad = random_state(official_layout(depth=cfg.depth, D=cfg.embed_dim * 2, grid=cfg.grid))
    with pytest.raises(ValueError, match="do not fit"):
        load_official_weights(model, bad)


def test_attention_matches_the_explicit_softmax_formula() -> None:
    torch.manual_seed(0)
    cfg = passt_tiny(embed_dim=16, num_heads=4)
    attn = Attention(cfg).eval()
    x = torch.randn(2, 7, 16)
    B, N, C, H = 2, 7, 16, 4
    qkv = attn.qkv(x)  # (B, N, 3C), timm layout [q | k | v] with heads inside each
    q, k, v = (qkv[..., i * C : (i + 1) * C].reshape(B, N, H, C // H).transpose(1, 2) for i in range(3))
    w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(C // H), dim=-1)
    ref = attn.proj((w @ v).transpose(1, 2).reshape(B, N, C))
    torch.testing.assert_close(attn(x), ref, rtol=1e-5, atol=1e-6)


def reference_forward(sd: dict[str, torch.Tensor], mel: torch.Tensor, cfg: object) -> torch.Tensor:
    """An independent eval-mode PaSST forward written from the paper/official code, on a state dict."""
    D, H = cfg.embed_dim, cfg.num_heads
    x = F.conv2d(mel[:, None], sd["patch_embed.proj.weight"], sd["patch_embed.proj.bias"], stride=cfg.stride)
    T = x.shape[-1]
    x = x + sd["time_new_pos_embed"][..., :T] + sd["freq_new_pos_embed"]
    x = x.flatten(2).transpose(1, 2)
    B = x.shape[0]
    toks = [sd["cls_token"] + sd["new_pos_embed"][:, :1], sd["dist_token"] + sd["new_pos_embed"][:, 1:]]
    x = torch.cat([t.expand(B, -1, -1) for t in toks] + [x], dim=1)
    for i in range(cfg.depth):
        p = f"blocks.{i}."
        h = F.layer_norm(x, (D,), sd[p + "norm1.weight"], sd[p + "norm1.bias"], eps=1e-6)
        q, k, v = F.linear(h, sd[p + "attn.qkv.weight"], sd[p + "attn.qkv.bias"]).chunk(3, dim=-1)
        q, k, v = (t.unflatten(-1, (H, D // H)).transpose(1, 2) for t in (q, k, v))
        a = torch.softmax(q @ k.transpose(-1, -2) * (D // H) ** -0.5, dim=-1) @ v
        x = x + F.linear(a.transpose(1, 2).flatten(2), sd[p + "attn.proj.weight"], sd[p + "attn.proj.bias"])
        h = F.layer_norm(x, (D,), sd[p + "norm2.weight"], sd[p + "norm2.bias"], eps=1e-6)
        h = F.linear(F.gelu(F.linear(h, sd[p + "mlp.fc1.weight"], sd[p + "mlp.fc1.bias"])),
                     sd[p + "mlp.fc2.weight"], sd[p + "mlp.fc2.bias"])
        x = x + h
    x = F.layer_norm(x, (D,), sd["norm.weight"], sd["norm.bias"], eps=1e-6)
    return (x[:, 0] + x[:, 1]) / 2


def test_forward_matches_an_independent_reference_and_crops_time_embedding_for_short_input() -> None:
    model = tiny_model().eval()
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    mel = torch.randn(2, 128, 300)  # 3 s: 18 of the 62 time positions
    with torch.no_grad():
        out = model(mel)
        torch.testing.assert_close(out, reference_forward(sd, mel, model.config), rtol=1e-4, atol=1e-5)
        # positions past the grid of a short input are unused; the first one is used
        model.time_new_pos_embed[..., 18:] = 5.0
        torch.testing.assert_close(model(mel), out)
        model.time_new_pos_embed[..., 0] += 1.0
        assert not torch.allclose(model(mel), out)


def test_tiny_shapes_and_patchout_only_in_training() -> None:
    model = tiny_model()
    mel = torch.randn(3, 128, 998)
    F_, T_ = model.config.grid  # 8 x 62
    model.eval()
    assert model.forward_tokens(mel).shape == (3, 2 + F_ * T_, 64)
    assert model(mel).shape == (3, 64)
    model.train()
    drop_f, drop_t = model.config.patchout
    assert model.forward_tokens(mel).shape == (3, 2 + (F_ - drop_f) * (T_ - drop_t), 64)
    assert model(mel).shape == (3, 64)


def test_eval_is_deterministic_and_training_is_not() -> None:
    model = tiny_model()
    mel = torch.randn(2, 128, 500)
    model.eval()
    with torch.no_grad():
        a, b = model(mel), model(mel)
    assert torch.equal(a, b)
    model.train()
    with torch.no_grad():
        c, d = model(mel), model(mel)
    assert not torch.allclose(c, d)


def test_window_spans() -> None:
    assert window_spans(50, 100) == [(0, 50)]
    assert window_spans(100, 100) == [(0, 100)]
    assert window_spans(250, 100) == [(0, 100), (100, 100), (150, 100)]


def test_embed_windows_ignores_padding_windows_and_batch_company() -> None:
    model = tiny_model(window_seconds=1.0, input_tdim=100).eval()  # 100-frame windows
    torch.manual_seed(1)
    long_clip = torch.randn(128, 250)  # 2.5 windows
    short_clip = torch.randn(128, 60)
    with torch.no_grad():
        alone = model.embed_windows(long_clip[None])
        # explicit: windows [0,100), [100,200), [150,250)
        wins = torch.stack([long_clip[:, 0:100], long_clip[:, 100:200], long_clip[:, 150:250]])
        torch.testing.assert_close(alone, model(wins).mean(0, keepdim=True), rtol=1e-5, atol=1e-6)
        # padded with two extra windows of garbage, in a batch with a short clip
        batch = torch.full((2, 128, 450), 3.0)
        batch[0, :, :250] = long_clip
        batch[1, :, :60] = short_clip
        both = model.embed_windows(batch, torch.tensor([250, 60]), max_batch=2)
        torch.testing.assert_close(both[0], alone[0], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(both[1], model(short_clip[None])[0], rtol=1e-5, atol=1e-6)
        # padding counts if the lengths say so
        assert not torch.allclose(model.embed_windows(batch[:1]), alone)


def test_from_config_dict_round_trips_through_json() -> None:
    cfg = passt_tiny(window_seconds=1.0)
    d = json.loads(json.dumps(cfg.__dict__))
    model = from_config_dict(d)
    assert model.config == cfg and isinstance(model.config.stride, tuple)
    with pytest.raises(ValueError, match="unknown"):
        from_config_dict({**d, "bogus": 1})
