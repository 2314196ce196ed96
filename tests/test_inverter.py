from __future__ import annotations

import csv
import dataclasses
from collections.abc import Iterator

import pytest
import soundfile as sf
import torch
import torchaudio

from models.inverter import (
    CodebookInverter,
    InverterConfig,
    from_config_dict,
    griffin_lim,
    log_magnitude_loss,
    sinusoidal_positions,
)


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """One intra-op thread: tiny models gain nothing from more, and OpenMP threads spin badly when the
    machine is busy (other tests, training runs)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def tiny(**overrides: object) -> InverterConfig:
    base = dict(code_dim=8, d_model=32, n_heads=2, d_ff=64, n_layers=1, n_speakers=2, dropout=0.0)
    base.update(overrides)
    return InverterConfig(**base)


def test_shapes_and_padding():
    torch.manual_seed(0)
    model = CodebookInverter(tiny()).eval()
    vectors = torch.randn(2, 6, 8)
    spk = torch.tensor([0, 1])
    mag, loss = model(vectors, spk)
    assert mag.shape == (2, 24, 257) and loss is None  # 6 units x 4 frames
    assert (mag > 0).all()
    mag, _ = model(vectors, spk, num_frames=22)
    assert mag.shape == (2, 22, 257)
    target = torch.rand(2, 25, 257)  # one frame more than 6 x 4: the last unit is held
    mag, loss = model(vectors, spk, lengths=torch.tensor([25, 13]), target=target)
    assert mag.shape == (2, 25, 257) and loss.ndim == 0 and torch.isfinite(loss)
    assert (mag[1, 13:] == 0).all()
    # padding never changes the real frames: the padded item equals the item on its own
    alone, _ = model(vectors[1:, :4], spk[1:], num_frames=13)
    torch.testing.assert_close(mag[1, :13], alone[0], atol=1e-5, rtol=1e-4)


def test_log_magnitude_loss_hand_values():
    target = torch.tensor([[[1.0, 2.0], [3.0, 1e-9]]])  # (1, 2, 2); the tiny bin is floored at 1e-4
    mask = torch.tensor([[[1.0], [1.0]]])
    exact = torch.log(target.clamp(min=1e-4))
    assert log_magnitude_loss(exact, target, mask, 1e-4).item() == pytest.approx(0.0, abs=1e-12)
    off = exact + torch.tensor([[[1.0, 1.0], [3.0, 3.0]]])
    assert log_magnitude_loss(off, target, mask, 1e-4).item() == pytest.approx((1 + 1 + 9 + 9) / 4)
    half = torch.tensor([[[1.0], [0.0]]])  # the second frame is padding: only (1 + 1) / 2 counts
    assert log_magnitude_loss(off, target, half, 1e-4).item() == pytest.approx(1.0)


def test_sinusoidal_positions_reference():
    table = sinusoidal_positions(5, 6)
    pos, i = 3, 2  # dims 2i and 2i + 1 use frequency 10000^(-2i/d)
    freq = 10000 ** (-2 * i / 6)
    assert table[pos, 2 * i].item() == pytest.approx(torch.sin(torch.tensor(pos * freq)).item(), abs=1e-6)
    assert table[pos, 2 * i + 1].item() == pytest.approx(torch.cos(torch.tensor(pos * freq)).item(), abs=1e-6)


def test_speaker_embedding_changes_output():
    torch.manual_seed(1)
    model = CodebookInverter(tiny()).eval()
    vectors = torch.randn(1, 5, 8).expand(2, 5, 8)
    mag, _ = model(vectors, torch.tensor([0, 1]))
    assert (mag[0] - mag[1]).abs().max() > 1e-3
    same, _ = model(vectors, torch.tensor([1, 1]))
    torch.testing.assert_close(same[0], same[1])


def test_overfits_a_real_utterance(fsdd):
    from models.frontends import LinearSpectrogram

    torch.manual_seed(2)
    with open(fsdd / "metadata.csv", newline="") as f:
        row = next(csv.DictReader(f))
    wave, sr = sf.read(fsdd / row["path"], dtype="float32")
    wave16 = torchaudio.functional.resample(torch.from_numpy(wave), sr, 16000)
    target = LinearSpectrogram()(wave16).unsqueeze(0)  # (1, T, 257)
    T = target.shape[1]
    vectors = torch.randn(1, -(-T // 4), 8)  # a fixed "unit sequence"
    model = CodebookInverter(tiny())
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(60):
        _, loss = model(vectors, torch.tensor([0]), target=target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], (losses[0], losses[-1])


def test_griffin_lim_length():
    torch.manual_seed(3)
    mag = torch.rand(30, 257)
    wave = griffin_lim(mag, n_iter=4)
    assert wave.shape == (29 * 160,)  # (T - 1) x hop: about frames x hop
    assert abs(wave.shape[0] - 30 * 160) <= 160
    assert torch.isfinite(wave).all() and wave.abs().max() > 0
    batch = CodebookInverter(tiny()).griffin_lim(torch.rand(2, 30, 257), n_iter=2, length=4800)
    assert batch.shape == (2, 4800)


def test_griffin_lim_recovers_a_tone():
    from models.frontends import LinearSpectrogram

    torch.manual_seed(4)
    t = torch.arange(16000) / 16000
    tone = 0.5 * torch.sin(2 * torch.pi * 440 * t)
    spec = LinearSpectrogram()
    wave = griffin_lim(spec(tone), n_iter=16, length=16000)
    # the resynthesis has the tone's spectrum (phase may differ): compare magnitudes
    rel = (spec(wave) - spec(tone)).norm() / spec(tone).norm()
    assert rel < 0.3, rel


def test_from_config_dict_round_trip():
    config = tiny(kernel_sizes=(3, 5))
    d = dataclasses.asdict(config)
    d["kernel_sizes"] = list(d["kernel_sizes"])  # as JSON gives it back
    model = from_config_dict(d)
    assert model.config == config and len(model.convs[0].convs) == 2
    with pytest.raises(ValueError):
        from_config_dict({**d, "bogus": 1})
    with pytest.raises(ValueError):
        InverterConfig(kernel_sizes=(3, 4))
