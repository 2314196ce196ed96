"""Front ends against independent numpy computations (framing, windows, filter banks and DCT written here)."""

from __future__ import annotations

import csv
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
import torchaudio

from models.frontends import (
    MFCC,
    LinearSpecConfig,
    LinearSpectrogram,
    LogMel,
    LogMelConfig,
    MFCCConfig,
    PasstMel,
    PasstMelConfig,
    cmvn,
    frame_mask,
    frontend_from_dict,
    frontend_to_dict,
)

# ---------------------------------------------------------------------------------------------- numpy refs


def np_frames(x: np.ndarray, n_fft: int, hop: int) -> np.ndarray:
    """center=True framing: reflect-pad n_fft // 2 on both sides (edge sample not repeated), then slice."""
    pad = n_fft // 2
    xp = np.concatenate([x[1 : pad + 1][::-1], x, x[-pad - 1 : -1][::-1]])
    n = 1 + (len(xp) - n_fft) // hop
    return np.stack([xp[t * hop : t * hop + n_fft] for t in range(n)])  # (T, n_fft)


def np_hann(n: int, periodic: bool) -> np.ndarray:
    m = n if periodic else n - 1
    return 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / m)


def np_padded_window(win: np.ndarray, n_fft: int) -> np.ndarray:
    """A window shorter than n_fft sits in the middle of the frame, zeros around it."""
    out = np.zeros(n_fft)
    left = (n_fft - len(win)) // 2
    out[left : left + len(win)] = win
    return out


def np_power_spec(x: np.ndarray, n_fft: int, win_length: int, hop: int, periodic: bool) -> np.ndarray:
    frames = np_frames(x, n_fft, hop) * np_padded_window(np_hann(win_length, periodic), n_fft)
    return np.abs(np.fft.rfft(frames, axis=-1)) ** 2  # (T, n_fft // 2 + 1)


def htk_mel(f: np.ndarray | float) -> np.ndarray:
    return 2595.0 * np.log10(1.0 + np.asarray(f) / 700.0)


def htk_mel_inv(m: np.ndarray) -> np.ndarray:
    return 700.0 * (10.0 ** (m / 2595.0) - 1.0)


def np_htk_filters(n_mels: int, n_fft: int, sr: int, fmin: float, fmax: float) -> np.ndarray:
    """Triangles on the linear frequency axis between mel-spaced edge frequencies. -> (n_freqs, n_mels)."""
    freqs = np.linspace(0, sr / 2, n_fft // 2 + 1)
    edges = htk_mel_inv(np.linspace(htk_mel(fmin), htk_mel(fmax), n_mels + 2))
    fb = np.zeros((len(freqs), n_mels))
    for m in range(n_mels):
        lo, mid, hi = edges[m], edges[m + 1], edges[m + 2]
        up = (freqs - lo) / (mid - lo)
        down = (hi - freqs) / (hi - mid)
        fb[:, m] = np.maximum(0.0, np.minimum(up, down))
    return fb


def np_dct_ortho(n_out: int, n_in: int) -> np.ndarray:
    """Orthonormal DCT-II rows: C[k, n] = s_k cos(pi k (n + 1/2) / N). -> (n_out, n_in)."""
    k = np.arange(n_out)[:, None]
    n = np.arange(n_in)[None, :]
    c = np.cos(np.pi * k * (n + 0.5) / n_in) * np.sqrt(2.0 / n_in)
    c[0] *= np.sqrt(0.5)
    return c


def np_deltas(c: np.ndarray, N: int = 2) -> np.ndarray:
    """Regression deltas along axis 0 with edge frames repeated: sum_n n (c[t+n] - c[t-n]) / 2 sum_n n^2."""
    T = len(c)
    idx = lambda t: np.clip(t, 0, T - 1)  # noqa: E731
    t = np.arange(T)
    num = sum(n * (c[idx(t + n)] - c[idx(t - n)]) for n in range(1, N + 1))
    return num / (2 * sum(n * n for n in range(1, N + 1)))


def np_mfcc(x: np.ndarray) -> np.ndarray:
    """16 kHz: 25 ms periodic Hann in a 512-point FFT, 10 ms hop, 40 HTK mels, log, 13 DCT, +-2 deltas."""
    power = np_power_spec(x, 512, 400, 160, periodic=True)
    mel = power @ np_htk_filters(40, 512, 16000, 0.0, 8000.0)
    ceps = np.log(mel + 1e-6) @ np_dct_ortho(13, 40).T  # (T, 13)
    d1 = np_deltas(ceps)
    return np.concatenate([ceps, d1, np_deltas(d1)], axis=1)  # (T, 39)


def kaldi_mel(f: np.ndarray | float) -> np.ndarray:
    return 1127.0 * np.log(1.0 + np.asarray(f) / 700.0)


def np_kaldi_banks(n_mels: int, n_fft: int, sr: int, fmin: float, fmax: float) -> np.ndarray:
    """Kaldi mel banks (triangles on the mel axis, no VTLN) + a zero Nyquist column. -> (n_mels, n_fft/2+1)"""
    bin_mels = kaldi_mel(np.arange(n_fft // 2) * sr / n_fft)
    lo, hi = kaldi_mel(fmin), kaldi_mel(fmax)
    delta = (hi - lo) / (n_mels + 1)
    banks = np.zeros((n_mels, n_fft // 2 + 1))
    for m in range(n_mels):
        left, center, right = lo + m * delta, lo + (m + 1) * delta, lo + (m + 2) * delta
        up = (bin_mels - left) / (center - left)
        down = (right - bin_mels) / (right - center)
        banks[m, :-1] = np.maximum(0.0, np.minimum(up, down))
    return banks


def np_passt(x: np.ndarray) -> np.ndarray:
    """The official PaSST eval-mode steps, by hand: 32 kHz, n_fft 1024, win 800 (symmetric Hann), hop 320."""
    y = x[1:] - 0.97 * x[:-1]
    power = np_power_spec(y, 1024, 800, 320, periodic=False)  # (T, 513)
    mel = np_kaldi_banks(128, 1024, 32000, 0.0, 15000.0) @ power.T  # (128, T)
    return (np.log(mel + 1e-5) + 4.5) / 5.0


def harmonic_tone(sr: int, seconds: float, f0: float, n_harmonics: int = 4) -> np.ndarray:
    t = np.arange(int(sr * seconds)) / sr
    return sum(0.3 / k * np.sin(2 * np.pi * k * f0 * t + 0.5 * k) for k in range(1, n_harmonics + 1))


def fsdd_wave_16k(fsdd: Path) -> np.ndarray:
    with open(fsdd / "metadata.csv") as f:
        row = next(r for r in csv.DictReader(f) if r["split"] == "test")
    wave, sr = sf.read(fsdd / row["path"], dtype="float64")
    assert sr == 8000 and wave.ndim == 1
    # resampling is not under test: the reference and the front end both see this 16 kHz signal
    return torchaudio.functional.resample(torch.from_numpy(wave), 8000, 16000).numpy()


def build(make: Callable[[], torch.nn.Module], dtype: torch.dtype) -> torch.nn.Module:
    """Build a front end with its windows and filter banks computed in `dtype` (not float32 then cast)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        return make()
    finally:
        torch.set_default_dtype(old)


# ---------------------------------------------------------------------------------------------- MFCC


@pytest.mark.parametrize("dtype, atol", [(torch.float64, 1e-6), (torch.float32, 2e-2)])
def test_mfcc_matches_numpy_on_sine(dtype: torch.dtype, atol: float) -> None:
    cfg = MFCCConfig()
    x = harmonic_tone(16000, 0.5, 220.0) + 0.01 * np.random.default_rng(0).standard_normal(8000)
    ref = np_mfcc(x)
    out = build(lambda: MFCC(cfg), dtype)(torch.from_numpy(x).to(dtype))
    assert out.shape == (1 + 8000 // 160, 39) == ref.shape
    assert out.dtype == dtype
    np.testing.assert_allclose(out.double().numpy(), ref, atol=atol, rtol=1e-4)


def test_mfcc_matches_numpy_on_fsdd(fsdd: Path) -> None:
    x = fsdd_wave_16k(fsdd)
    ref = np_mfcc(x)
    out = build(MFCC, torch.float64)(torch.from_numpy(x))
    np.testing.assert_allclose(out.numpy(), ref, atol=1e-6, rtol=1e-6)
    out32 = MFCC()(torch.from_numpy(x).float())
    np.testing.assert_allclose(out32.double().numpy(), ref, atol=5e-2, rtol=1e-3)


def test_mfcc_reference_is_sensitive_to_framing() -> None:
    # the tolerances above must be able to fail: a wrong hop, mel count or window changes the values a lot
    x = harmonic_tone(16000, 0.5, 220.0)
    ref = np_mfcc(x)
    for cfg in (MFCCConfig(n_mels=26), MFCCConfig(win_length=512)):
        other = build(partial(MFCC, cfg), torch.float64)(torch.from_numpy(x)).numpy()
        assert np.abs(other - ref).max() > 0.1
    hop = MFCC(MFCCConfig(hop_length=128))(torch.from_numpy(x).float()).numpy()
    assert hop.shape != ref.shape


def test_mfcc_static_only_and_cmvn() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 4000)
    static = MFCC(MFCCConfig(deltas=False))
    assert static.dim == 13 and static(x).shape == (2, 26, 13)

    full = MFCC()(x)
    norm = MFCC(MFCCConfig(cmn=True, cvn=True))(x)
    expected = (full - full.mean(1, keepdim=True)) / full.std(1, unbiased=False, keepdim=True)
    torch.testing.assert_close(norm, expected, atol=1e-4, rtol=1e-4)

    # with lengths, statistics come from the valid frames only and padding frames are zero
    masked = MFCC(MFCCConfig(cmn=True))(x, torch.tensor([4000, 2400]))
    n = MFCC().num_frames(2400)
    valid = full[1, :n]
    torch.testing.assert_close(masked[1, :n], valid - valid.mean(0), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(masked[0], full[0] - full[0].mean(0), atol=1e-4, rtol=1e-4)
    assert masked[1, n:].abs().max() == 0


def test_cmvn_zero_mean_unit_variance() -> None:
    torch.manual_seed(0)
    feats = 3.0 + 2.0 * torch.randn(2, 50, 4)
    out = cmvn(feats, torch.tensor([50, 30]), variance=True)
    assert torch.allclose(out[:, :30].mean(1)[1], torch.zeros(4), atol=1e-5)
    assert torch.allclose(out[1, :30].std(0, unbiased=False), torch.ones(4), atol=1e-4)
    assert out[1, 30:].abs().max() == 0


# ---------------------------------------------------------------------------------------------- LogMel


def test_logmel_matches_numpy() -> None:
    x = harmonic_tone(16000, 0.4, 310.0)
    power = np_power_spec(x, 512, 400, 160, periodic=True)
    ref = np.log(power @ np_htk_filters(80, 512, 16000, 0.0, 8000.0) + 1e-6)  # (T, 80)
    out = build(LogMel, torch.float64)(torch.from_numpy(x))
    assert out.shape == ref.shape == (41, 80)
    np.testing.assert_allclose(out.numpy(), ref, atol=1e-6, rtol=1e-6)


# ---------------------------------------------------------------------------------------------- PaSST


@pytest.mark.parametrize("dtype, atol", [(torch.float64, 1e-8), (torch.float32, 1e-3)])
def test_passt_mel_matches_numpy_on_chirp(dtype: torch.dtype, atol: float) -> None:
    sr = 32000
    t = np.arange(sr // 2) / sr
    x = 0.5 * np.sin(2 * np.pi * (200.0 * t + 0.5 * 12000.0 * t**2))  # 200 Hz -> 12.2 kHz linear chirp
    ref = np_passt(x)
    out = build(PasstMel, dtype)(torch.from_numpy(x).to(dtype))
    assert out.shape == ref.shape == (128, 1 + (sr // 2 - 1) // 320)
    np.testing.assert_allclose(out.double().numpy(), ref, atol=atol, rtol=1e-5)


def test_passt_mel_on_real_sound(sfx: Path) -> None:
    with open(sfx / "captions.csv") as f:
        row = next(r for r in csv.DictReader(f) if 0.5 < float(r["duration_s"]) < 5)
    x, sr = sf.read(sfx / row["path"], dtype="float64", always_2d=True)
    assert sr == 32000
    x = x.mean(axis=1)
    out = build(PasstMel, torch.float64)(torch.from_numpy(x))
    np.testing.assert_allclose(out.numpy(), np_passt(x), atol=1e-8, rtol=1e-8)


def test_passt_mel_tone_peaks_at_formula_bin() -> None:
    # put a tone on the centre frequency of mel bin 60 (Kaldi mel = 1127 ln(1 + f / 700))
    lo, hi = kaldi_mel(0.0), kaldi_mel(15000.0)
    center_mel = lo + 61 * (hi - lo) / 129
    f0 = 700.0 * (np.exp(center_mel / 1127.0) - 1.0)
    x = 0.5 * np.sin(2 * np.pi * f0 * np.arange(32000) / 32000)
    mel = PasstMel()(torch.from_numpy(x).float())  # (128, frames)
    assert 1000 < f0 < 5000
    assert int(mel[:, 5:-5].mean(1).argmax()) == 60


def test_passt_mel_is_deterministic_float32_and_has_no_state() -> None:
    fe = PasstMel()
    assert fe.fmax == 15000.0
    assert fe.state_dict() == {}  # buffers are derived, so a model embedding it keeps its checkpoint
    x = torch.randn(2, 32000, dtype=torch.float64)
    fe.train()  # no random frequency augmentation even in training mode
    a, b = fe(x), fe(x)
    assert a.dtype == torch.float32
    assert torch.equal(a, b)


# ---------------------------------------------------------------------------------------------- linear


def test_linear_spectrogram_frame_matches_numpy() -> None:
    x = harmonic_tone(16000, 0.3, 180.0) + 0.05 * np.random.default_rng(1).standard_normal(4800)
    out = build(LinearSpectrogram, torch.float64)(torch.from_numpy(x))
    assert out.shape == (1 + 4800 // 160, 257)
    t = 10  # an interior frame: samples [t * 160 - 256, t * 160 + 256) under the window
    frame = x[t * 160 - 256 : t * 160 + 256] * np_padded_window(np_hann(400, periodic=True), 512)
    np.testing.assert_allclose(out[t].numpy(), np.abs(np.fft.rfft(frame)), atol=1e-8, rtol=1e-8)
    ref = np.sqrt(np_power_spec(x, 512, 400, 160, periodic=True))
    np.testing.assert_allclose(out.numpy(), ref, atol=1e-8, rtol=1e-8)


def test_linear_spectrogram_griffin_lim_round_trip() -> None:
    torch.manual_seed(0)
    fe = LinearSpectrogram()
    x = torch.from_numpy(harmonic_tone(16000, 0.5, 150.0, n_harmonics=6)).float()
    mag = fe(x)  # (T, 257)
    wave = fe.inverse(mag, n_iter=32, length=x.numel())
    assert wave.shape == x.shape
    rebuilt = fe(wave)
    spectral_convergence = torch.linalg.norm(rebuilt - mag) / torch.linalg.norm(mag)
    assert spectral_convergence < 0.15
    # and a random-phase start that is not iterated is far off, so the threshold means something
    noise = fe.inverse(mag, n_iter=0, length=x.numel())
    assert torch.linalg.norm(fe(noise) - mag) / torch.linalg.norm(mag) > 0.3
    # batched inverse
    assert fe.inverse(mag.unsqueeze(0).repeat(2, 1, 1), n_iter=2).shape == (2, (mag.shape[0] - 1) * 160)


# ---------------------------------------------------------------------------------------------- common


ALL = [
    (lambda: PasstMel(), 32000),
    (lambda: MFCC(), 16000),
    (lambda: LogMel(), 16000),
    (lambda: LinearSpectrogram(), 16000),
]


def _frames_axis(fe: torch.nn.Module) -> int:
    return -1 if isinstance(fe, PasstMel) else -2


@pytest.mark.parametrize("make, sr", ALL)
def test_num_frames_matches_output(make, sr: int) -> None:
    fe = make()
    torch.manual_seed(0)
    for n in (600, 1000, 1599, 1600, 1601, 3333, sr):
        out = fe(torch.randn(n))
        assert out.shape[_frames_axis(fe)] == fe.num_frames(n), n
        assert out.shape[-1 if _frames_axis(fe) == -2 else -2] == fe.dim
    lengths = torch.tensor([600, 1601, 3333])
    assert fe.num_frames(lengths).tolist() == [fe.num_frames(int(n)) for n in lengths]  # integer tensors too


@pytest.mark.parametrize("make, sr", ALL)
def test_batched_equals_stacked_unbatched(make, sr: int) -> None:
    fe = make()
    torch.manual_seed(0)
    x = torch.randn(3, 5000)
    batched = fe(x)
    stacked = torch.stack([fe(w) for w in x])
    assert batched.dim() == 3
    torch.testing.assert_close(batched, stacked, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("make, sr", ALL)
def test_config_round_trip_and_errors(make, sr: int) -> None:
    fe = make()
    d = frontend_to_dict(fe)
    again = frontend_from_dict(d)
    assert type(again) is type(fe) and again.config == fe.config
    with pytest.raises(ValueError, match="unknown field"):
        frontend_from_dict({**d, "bogus": 1})
    with pytest.raises(ValueError, match="too short"):
        fe(torch.randn(100))
    with pytest.raises(ValueError, match="shape"):
        fe(torch.randn(1, 2, 3000))


def test_frame_mask_and_config_overrides() -> None:
    mask = frame_mask(torch.tensor([3, 1]), 4)
    assert mask.tolist() == [[True, True, True, False], [True, False, False, False]]
    with pytest.raises(ValueError, match="unknown front end"):
        frontend_from_dict({"kind": "nope"})
    assert LogMel(LogMelConfig(n_mels=40)).dim == 40
    assert LinearSpectrogram(LinearSpecConfig(n_fft=1024, win_length=1024)).dim == 513
    assert PasstMel(PasstMelConfig(n_mels=64)).dim == 64


@pytest.mark.parametrize("win", [3, 5, 9])
@pytest.mark.parametrize("shape", [(13, 1), (13, 2), (1, 13, 22), (2, 13, 300)])
def test_deltas_equal_torchaudio_compute_deltas(win: int, shape: tuple[int, ...]) -> None:
    from models.frontends import deltas

    x = torch.randn(*shape, generator=torch.Generator().manual_seed(win))
    expected = torchaudio.functional.compute_deltas(x, win_length=win)
    torch.testing.assert_close(deltas(x, win), expected, atol=1e-6, rtol=1e-5)
