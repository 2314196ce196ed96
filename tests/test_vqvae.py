from __future__ import annotations

import csv
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
import soundfile as sf
import torch
import torchaudio

import models.vqvae as vqvae_module
import models.vqvae_stream as stream_module
from models.inverter import InverterConfig
from models.units import UnitsConfig, UnitsModel, from_config_dict
from models.vqvae import VQVAE, EMACodebook, VQVAEConfig, time_jitter
from models.vqvae_stream import StreamingEncoder


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """One intra-op thread: tiny models gain nothing from more, and OpenMP threads spin badly when the
    machine is busy (other tests, training runs)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def tiny(**overrides: object) -> VQVAEConfig:
    base = dict(
        d_model=32, n_heads=2, d_ff=64, layers_per_stage=(1, 1, 1), attn_left=4, attn_right=1, dropout=0.0,
        codebook_size=16, code_dim=8, decoder_channels=32, decoder_blocks=1, speaker_dim=8, n_speakers=3,
    )
    base.update(overrides)
    return VQVAEConfig(**base)


def fsdd_mfcc(root: Path, speakers: tuple[str, ...], per_speaker: int, max_s: float = 0.6
              ) -> tuple[list[torch.Tensor], list[int]]:
    """16-kHz MFCC+Δ+ΔΔ (T, 39) of the first `per_speaker` training files (at most `max_s` long) of each
    speaker."""
    from models.frontends import MFCC

    mfcc = MFCC()
    feats, spk = [], []
    counts = dict.fromkeys(speakers, 0)
    with open(root / "metadata.csv", newline="") as f:
        for row in csv.DictReader(f):
            s = row["speaker"]
            if s not in counts or counts[s] >= per_speaker or row["split"] != "train":
                continue
            if float(row["duration_s"]) > max_s:
                continue
            counts[s] += 1
            wave, sr = sf.read(root / row["path"], dtype="float32")
            wave16 = torchaudio.functional.resample(torch.from_numpy(wave), sr, 16000)
            feats.append(mfcc(wave16))
            spk.append(speakers.index(s))
    return feats, spk


def pad_batch(feats: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([len(f) for f in feats])
    return torch.nn.utils.rnn.pad_sequence(feats, batch_first=True), lengths


# ---------------------------------------------------------------------------------------------- shapes


def test_forward_shapes_padding_and_stride():
    torch.manual_seed(0)
    model = VQVAE(tiny())
    feats = torch.randn(3, 37, 39)
    lengths = torch.tensor([37, 30, 5])
    recon, loss, stats = model(feats, lengths, torch.tensor([0, 1, 2]))
    assert recon.shape == (3, 37, 39)
    assert loss.ndim == 0 and torch.isfinite(loss)
    assert stats["codes"].shape == (3, 10)  # ceil(37 / 4)
    assert stats["code_lengths"].tolist() == [10, 8, 2]  # ceil(len / 4)
    assert (stats["codes"][1, 8:] == -1).all() and (stats["codes"][2, 2:] == -1).all()
    assert (stats["codes"][0] >= 0).all()
    assert (recon[1, 30:] == 0).all()
    for key in ("recon", "commit", "smooth", "perplexity"):
        assert stats[key].ndim == 0
    # stride 4: one unit per four frames, a partial last unit counts
    model.eval()
    assert model.encode(torch.randn(40, 39)).shape == (10,)
    assert model.encode(torch.randn(41, 39)).shape == (11,)


def test_padding_does_not_change_codes():
    torch.manual_seed(1)
    model = VQVAE(tiny()).eval()
    a, b = torch.randn(29, 39), torch.randn(50, 39)
    batch, lengths = pad_batch([a, b])
    codes = model.encode(batch, lengths)
    assert torch.equal(codes[0, :8], model.encode(a))
    assert (codes[0, 8:] == -1).all()
    assert torch.equal(codes[1], model.encode(b))


def test_receptive_field_is_bounded():
    torch.manual_seed(2)
    model = VQVAE(tiny(layers_per_stage=(1, 2, 1))).eval()
    left, right = model.encoder.receptive_field()
    x = torch.randn(1, 120, 39)
    lengths = torch.tensor([120])
    u = 15

    def change_at_unit(frames: slice) -> float:
        bumped = x.clone()
        bumped[0, frames] += 5.0
        with torch.no_grad():
            return (model.encoder(bumped, lengths)[0][0, u] - model.encoder(x, lengths)[0][0, u]).abs().max().item()

    assert change_at_unit(slice(0, 4 * u - left)) == 0.0  # frames before the window: exactly no effect
    assert change_at_unit(slice(4 * u + right + 1, None)) == 0.0  # frames after the look-ahead: none either
    assert change_at_unit(slice(4 * u - left, 4 * u - left + 1)) > 1e-6  # the window's first frame matters
    assert change_at_unit(slice(4 * u + right, 4 * u + right + 1)) > 1e-6  # ... and its last


# ---------------------------------------------------------------------------------------------- streaming


@pytest.mark.parametrize("block", [1, 3, 4, 7, 16, 300])
def test_streaming_equals_whole_file(block):
    torch.manual_seed(3)
    model = VQVAE(tiny(layers_per_stage=(2, 1, 1), attn_left=6, attn_right=2, codebook_size=32)).eval()
    model.set_feature_stats(torch.zeros(39), torch.full((39,), 0.5))
    feats = torch.randn(203, 39).cumsum(0) * 0.1  # smooth-ish, like real features
    whole = model.encode(feats)
    stream = StreamingEncoder(model)
    left, right = model.encoder.receptive_field()
    got, max_buffer = [], 0
    for start in range(0, len(feats), block):
        got.append(stream.push(feats[start : start + block]))
        max_buffer = max(max_buffer, len(stream._buffer))
        # a unit comes out once the look-ahead has arrived, never later
        n_frames = min(start + block, len(feats))
        assert stream.n_emitted == max(0, (n_frames - 1 - right) // 4 + 1)
    got.append(stream.flush())
    assert torch.equal(torch.cat(got), whole)
    assert len(set(whole.tolist())) > 3  # a non-trivial sequence of codes
    assert max_buffer <= left + right + block + 8  # memory stays bounded
    assert stream.lookahead_frames == right - 3 and stream.lookahead_ms == 10.0 * (right - 3)


@pytest.mark.parametrize("right", [0, 1])
@pytest.mark.parametrize("n_frames", [1, 2, 3, 5, 9, 97, 250])
def test_cached_streaming_with_odd_blocks_equals_whole_file(n_frames, right):
    """The key/value-cached path: odd, uneven blocks (and empty pushes) give exactly the whole file's codes,
    each unit as soon as its look-ahead has arrived, and the caches stay bounded by the attention window."""
    torch.manual_seed(5)
    config = tiny(layers_per_stage=(2, 2, 2), attn_left=5, attn_right=right, codebook_size=32, dropout=0.3)
    model = VQVAE(config)  # left in training mode: streaming must still switch dropout off, as encode does
    model.set_feature_stats(torch.zeros(39), torch.full((39,), 0.5))
    feats = torch.randn(n_frames, 39).cumsum(0) * 0.1
    whole = model.encode(feats)
    stream = StreamingEncoder(model)
    _, rf_right = model.encoder.receptive_field()
    rng = torch.Generator().manual_seed(n_frames)
    got, start = [], 0
    while start < n_frames:
        block = int(torch.randint(0, 6, (1,), generator=rng)) * 2 + 1  # 1, 3, 5, ... 11
        got.append(stream.push(feats[start : start + block]))
        start = min(n_frames, start + block)
        got.append(stream.push(feats[:0]))  # an empty push emits nothing new
        assert stream.n_emitted == max(0, (start - 1 - rf_right) // 4 + 1)
        for stage in stream._stages:
            if isinstance(stage, stream_module._LayerStream) and stage.kv is not None:
                assert stage.kv.shape[2] <= config.attn_left + config.attn_right + 11  # the window + one block
    got.append(stream.flush())
    assert torch.equal(torch.cat(got), whole)
    assert stream.n_emitted == 0 and stream.n_frames == 0  # flushed streams start over
    assert torch.equal(torch.cat([stream.push(feats), stream.flush()]), whole)  # ... and give the same again


def test_default_config_lookahead_is_documented():
    model = VQVAE(VQVAEConfig())
    assert model.encoder.receptive_field() == (227, 17)
    assert StreamingEncoder(model).lookahead_ms == 140.0


# ---------------------------------------------------------------------------------------------- codebook


def test_ema_update_pulls_code_toward_inputs():
    cb = EMACodebook(size=2, dim=2, decay=0.9, epsilon=1e-5, restart_threshold=0.0)
    cb.embedding.copy_(torch.tensor([[0.0, 0.0], [10.0, 10.0]]))
    cb.ema_count.fill_(1.0)
    cb.ema_weight.copy_(cb.embedding * 1.0)
    p = torch.tensor([1.0, 2.0])
    z = p.expand(1, 6, 2).clone()  # six vectors, all equal to p: all nearest to code 0
    valid = torch.ones(1, 6, dtype=torch.bool)
    cb.train()
    _, codes, perplexity = cb(z, valid)
    assert (codes == 0).all() and perplexity.item() == pytest.approx(1.0)
    # reference: count = 0.9 * 1 + 0.1 * 6, weight = 0.9 * [0, 0] + 0.1 * 6 * p, Laplace-smoothed sizes
    count = torch.tensor([0.9 + 0.6, 0.9])
    weight = torch.stack([0.6 * p, 0.9 * torch.tensor([10.0, 10.0])])
    n = count.sum()
    size = (count + 1e-5) / (n + 2 * 1e-5) * n
    torch.testing.assert_close(cb.ema_count, count)
    torch.testing.assert_close(cb.embedding, weight / size[:, None])
    for _ in range(200):
        cb(z, valid)
    torch.testing.assert_close(cb.embedding[0], p, atol=1e-3, rtol=0)  # converges to the inputs' mean
    # eval mode leaves the codebook alone
    cb.eval()
    before = cb.embedding.clone()
    cb(z + 1.0, valid)
    assert torch.equal(cb.embedding, before)


def test_dead_code_restart_moves_unused_code_onto_data():
    torch.manual_seed(4)
    cb = EMACodebook(size=4, dim=3, decay=0.99, epsilon=1e-5, restart_threshold=0.05)
    cb.embedding.copy_(torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [100, 100, 100]]))
    cb.ema_count.copy_(torch.tensor([5.0, 5.0, 5.0, 0.01]))  # code 3 is dead
    cb.ema_weight.copy_(cb.embedding * cb.ema_count[:, None])
    z = torch.tensor([[[0.1, 0, 0], [0.9, 0, 0], [0, 1.1, 0], [0.5, 0.5, 0]]])
    valid = torch.tensor([[True, True, True, False]])  # padding is never picked
    cb.train()
    cb(z, valid)
    new = cb.embedding[3]
    assert any(torch.equal(new, v) for v in z[0, :3])
    assert cb.ema_count[3] == 1.0
    assert (cb.ema_count[:3] > 1.0).all()  # live codes are not restarted


def test_fresh_codebook_is_initialised_from_the_first_batch():
    torch.manual_seed(5)
    cb = EMACodebook(size=8, dim=4, decay=0.99, epsilon=1e-5, restart_threshold=0.01).train()
    z = torch.randn(2, 50, 4) + 20.0  # far from the random initial codebook
    cb(z, torch.ones(2, 50, dtype=torch.bool))
    dist = torch.cdist(cb.embedding, z.reshape(-1, 4)).min(dim=1).values
    assert (dist < 1.0).all()


def test_straight_through_gradient_reaches_encoder():
    torch.manual_seed(6)
    cb = EMACodebook(size=4, dim=3, decay=0.99, epsilon=1e-5, restart_threshold=0.0).eval()
    z = torch.randn(1, 5, 3, requires_grad=True)
    q, _, _ = cb(z, torch.ones(1, 5, dtype=torch.bool))
    (q * torch.arange(3.0)).sum().backward()
    torch.testing.assert_close(z.grad, torch.arange(3.0).expand(1, 5, 3))  # identity through quantisation
    # in the model, with commitment and smoothing off, only the straight-through path reaches the encoder
    model = VQVAE(tiny(commitment_cost=0.0, smoothing_weight=0.0))
    _, loss, _ = model(torch.randn(2, 24, 39))
    loss.backward()
    assert model.encoder.in_proj.weight.grad.abs().sum() > 0
    assert model.encoder.stages[0][0].attn.rel_bias.grad.abs().sum() > 0


# ---------------------------------------------------------------------------------------------- jitter


def test_time_jitter_replaces_with_neighbours_inside_utterance():
    torch.manual_seed(7)
    q = torch.arange(10.0).view(1, 10, 1).expand(2, 10, 1).clone()
    lengths = torch.tensor([10, 6])
    out = time_jitter(q, lengths, p=1.0)[..., 0]
    shift = out - q[..., 0]
    assert (shift[0].abs() == 1).sum() >= 8  # p = 1: (almost) every vector moved (ends may clamp)
    assert (shift.abs() <= 1).all()
    assert (out[1, :6] <= 5).all()  # never borrowed from the padding
    assert torch.equal(out[1, 6:], q[1, 6:, 0])
    assert torch.equal(time_jitter(q, lengths, p=0.0), q)
    frac = (time_jitter(q.expand(2, 10, 1).repeat(50, 1, 1), lengths.repeat(50), p=0.2)[..., 0] != q[0, :, 0]).float()
    assert 0.1 < frac.mean() < 0.3


def test_jitter_only_in_training(monkeypatch):
    calls = []
    real = vqvae_module.time_jitter

    def spy(q: torch.Tensor, lengths: torch.Tensor, p: float) -> torch.Tensor:
        calls.append(p)
        return real(q, lengths, p)

    monkeypatch.setattr(vqvae_module, "time_jitter", spy)
    torch.manual_seed(8)
    model = VQVAE(tiny(jitter_p=0.3))
    feats = torch.randn(2, 20, 39)
    model.train()
    model(feats)
    assert calls == [0.3]
    model.eval()
    r1, _, _ = model(feats)
    r2, _, _ = model(feats)
    assert calls == [0.3]
    assert torch.equal(r1, r2)  # inference is deterministic


# ---------------------------------------------------------------------------------------------- training


@pytest.mark.slow
def test_training_on_fsdd_lowers_loss_and_uses_codebook(fsdd):
    torch.manual_seed(0)
    speakers = ("george", "jackson", "lucas")
    feats, spk = fsdd_mfcc(fsdd, speakers, per_speaker=6)
    batch, lengths = pad_batch(feats)
    spk_ids = torch.tensor(spk)
    frames = torch.cat(feats)
    model = VQVAE(tiny(n_speakers=3, codebook_size=16))
    model.set_feature_stats(frames.mean(0), frames.std(0))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses, recons = [], []
    model.train()
    for _ in range(100):
        _, loss, stats = model(batch, lengths, spk_ids)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        recons.append(stats["recon"].item())
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.7 * first, (first, last)
    assert sum(recons[-5:]) / 5 < 0.7 * sum(recons[:5]) / 5
    model.eval()
    codes = model.encode(batch, lengths)
    used = codes[codes >= 0]
    probs = torch.bincount(used, minlength=16).float() / used.numel()
    perplexity = torch.exp(-(probs * torch.log(probs + 1e-10)).sum())
    assert perplexity > 4, perplexity


def test_encoder_and_decoder_read_and_rebuild_only_their_input_dims():
    """encoder_dims / recon_dims: with MFCC + speech_embedding input (39 + 96) the encoder reads and the decoder
    rebuilds the embedding part only; the MFCC part then changes neither the codes nor the loss."""
    torch.manual_seed(0)
    emb = (39, 135)
    model = VQVAE(tiny(input_dim=135, encoder_dims=emb, recon_dims=emb)).eval()
    assert model.encoder.in_proj.in_features == 96 and model.decoder.out.out_channels == 96
    x = torch.randn(2, 24, 135)
    recon, _, _ = model(x)
    assert recon.shape == (2, 24, 96) and model.encode(x).shape == (2, 6)
    other = x.clone()
    other[..., :39] += 5.0  # a different MFCC part only
    assert torch.equal(model.encode(x), model.encode(other))
    stream = StreamingEncoder(model)
    assert torch.equal(torch.cat([stream.push(other[0]), stream.flush()]), model.encode(x[0]))
    torch.manual_seed(1)
    _, loss_a, _ = model(x, target=x)
    torch.manual_seed(1)
    _, loss_b, _ = model(other, target=other)
    assert torch.equal(loss_a, loss_b)
    other[..., 39:] += 1.0  # the embedding part is both the input and the target
    torch.manual_seed(1)
    _, loss_c, _ = model(x, target=other)
    assert loss_c > loss_a
    assert VQVAE(tiny()).config.output_dim == 39 == VQVAE(tiny()).config.encoder_input_dim  # default: all
    with pytest.raises(ValueError, match="recon_dims"):
        tiny(input_dim=39, recon_dims=(0, 40))


# ---------------------------------------------------------------------------------------------- units checkpoint


def units_config() -> UnitsConfig:
    return UnitsConfig(
        vqvae=tiny(n_speakers=2),
        inverter=InverterConfig(code_dim=8, d_model=32, n_heads=2, d_ff=64, n_layers=1, n_speakers=2),
        speakers=["ann", "bob"],
    )


def test_from_config_dict_round_trip(tmp_path):
    from core.checkpoints import load_model, save_checkpoint

    torch.manual_seed(9)
    config = units_config()
    d = dataclasses.asdict(config)
    model = from_config_dict(d)
    assert isinstance(model, UnitsModel) and model.config == config
    assert model.vqvae.config.layers_per_stage == (1, 1, 1)  # JSON lists come back as tuples
    model.vqvae.train()
    model.vqvae(torch.randn(2, 30, 39))  # moves the codebook buffers away from their init
    model.eval()
    path = save_checkpoint(tmp_path / "units.safetensors", "units", model, config)
    loaded, ckpt = load_model(path, kind="units")
    assert isinstance(loaded, UnitsModel) and loaded.config == config
    feats = torch.randn(45, 39)
    assert torch.equal(loaded.vqvae.encode(feats), model.vqvae.encode(feats))
    torch.testing.assert_close(loaded.vqvae.codebook.embedding, model.vqvae.codebook.embedding)
    with pytest.raises(ValueError):
        from_config_dict({**d, "bogus": 1})


def test_units_config_checks_consistency():
    with pytest.raises(ValueError, match="code_dim"):
        UnitsConfig(vqvae=tiny(), inverter=InverterConfig(code_dim=9))
    with pytest.raises(ValueError, match="speakers"):
        UnitsConfig(vqvae=tiny(n_speakers=2), inverter=InverterConfig(code_dim=8, n_speakers=2), speakers=["a"])


def test_resynthesis_shapes_and_speaker_lookup():
    torch.manual_seed(10)
    model = UnitsModel(units_config()).eval()
    feats = torch.randn(33, 39)
    mag = model.units_to_magnitude(model.vqvae.encode(feats), "bob", num_frames=33)
    assert mag.shape == (33, 257) and (mag >= 0).all()
    wave = model.resynthesize(feats, "ann", n_iter=2)
    assert wave.shape == (32 * 160,)
    assert model.speaker_id("bob") == 1 and model.speaker_id(0) == 0
    with pytest.raises(ValueError):
        model.speaker_id("carol")
