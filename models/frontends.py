"""Feature front ends: waveform -> features, with torchaudio; each a `@dataclass` config plus an `nn.Module`.

    PasstMel           32 kHz, PaSST/CP-JKU `AugmentMelSTFT` (eval mode) -> (B, 128, frames)
    AisfxMel           44.1 kHz, aiSFX (Ma & Lerch, ISMIR 2022) mel     -> (B, T, 96)
    MFCC               16 kHz, 13 MFCC + delta + delta-delta          -> (B, T, 39)
    LogMel             16 kHz, 80-bin log-mel                         -> (B, T, 80)
    LinearSpectrogram  16 kHz, linear magnitude, Griffin-Lim inverse  -> (B, T, 257)

All take (N,) or (B, N) audio and expose `num_frames` and `dim`; their buffers are non-persistent, so a front
end never changes a checkpoint. The 16 kHz ones share one framing (`models.framing`: 25-ms window, 10-ms hop),
so frame t of each covers the same audio.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchaudio
from torchaudio.compliance import kaldi

from models import framing
from models.configs import check_fields

# ---------------------------------------------------------------------------------------------- helpers


def centered_num_frames(num_samples: int | torch.Tensor, hop_length: int) -> int | torch.Tensor:
    """Frames of an STFT with center=True: one per hop, plus the frame centred on sample 0."""
    return 1 + num_samples // hop_length


def frame_mask(num_frames: torch.Tensor, max_frames: int) -> torch.Tensor:
    """(B,) valid frame counts -> (B, max_frames) bool mask, True on real (non-padding) frames."""
    return torch.arange(max_frames, device=num_frames.device)[None, :] < num_frames[:, None]


def _as_batch(wave: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, bool]:
    """(N,) or (B, N) -> (B, N) in the front end's dtype, and whether the input was unbatched."""
    if wave.dim() not in (1, 2):
        raise ValueError(f"expected a waveform of shape (N,) or (B, N), got {tuple(wave.shape)}")
    unbatched = wave.dim() == 1
    wave = wave.unsqueeze(0) if unbatched else wave
    return wave.to(dtype), unbatched


def _check_length(num_samples: int, pad: int, name: str) -> None:
    # reflect padding needs more samples than it pads; say so instead of torch's opaque padding error
    if num_samples <= pad:
        raise ValueError(f"{name}: waveform too short ({num_samples} samples); need more than {pad}")


def _non_persistent(module: nn.Module) -> nn.Module:
    """Re-register every buffer of `module` (recursively) as non-persistent: derived, not learned."""
    for sub in module.modules():
        for name, buf in list(sub.named_buffers(recurse=False)):
            sub.register_buffer(name, buf, persistent=False)
    return module


# ---------------------------------------------------------------------------------------------- PaSST mel


@dataclass
class PasstMelConfig:
    """PaSST preprocessing (`AugmentMelSTFT` of github.com/kkoutini/PaSST/models/preprocess.py), evaluation mode.

    The released PaSST checkpoints (and hear21passt / the CP-JKU DCASE2023 task 6b retrieval system) build
    `AugmentMelSTFT(n_mels=128, sr=32000, win_length=800, hopsize=320, n_fft=1024, fmin=0.0, fmax=None,
    fmin_aug_range=10, fmax_aug_range=2000)`; with fmax=None the class sets
    fmax = sr // 2 - fmax_aug_range // 2 = 15000 Hz, which is what the eval-mode (no augmentation) transform
    uses. fmax=None here means the same. (The class's own default fmax_aug_range=1000 would give 15500 Hz;
    the training configs and hear21passt override it with 2000.)
    """

    sample_rate: int = 32000
    n_fft: int = 1024
    win_length: int = 800
    hop_length: int = 320
    n_mels: int = 128
    fmin: float = 0.0
    fmax: float | None = None  # None -> sample_rate // 2 - fmax_aug_range // 2, as in the official code
    fmax_aug_range: int = 2000
    preemphasis: float = 0.97


class PasstMel(nn.Module):
    """Waveform (N,) / (B, N) at 32 kHz -> normalised log-mel (n_mels, frames) / (B, n_mels, frames)."""

    def __init__(self, config: PasstMelConfig | None = None) -> None:
        super().__init__()
        self.config = config = config or PasstMelConfig()
        default_fmax = config.sample_rate // 2 - config.fmax_aug_range // 2
        self.fmax = float(config.fmax if config.fmax is not None else default_fmax)
        # conv1d is cross-correlation: y[n] = x[n + 1] - 0.97 x[n] (one sample shorter than x)
        self.register_buffer("preemphasis", torch.tensor([[[-config.preemphasis, 1.0]]]), persistent=False)
        self.register_buffer("window", torch.hann_window(config.win_length, periodic=False), persistent=False)
        banks, _ = kaldi.get_mel_banks(
            config.n_mels, config.n_fft, float(config.sample_rate), float(config.fmin), self.fmax,
            vtln_low=100.0, vtln_high=-500.0, vtln_warp_factor=1.0,
        )  # (n_mels, n_fft // 2): Kaldi leaves out the Nyquist bin
        self.register_buffer("mel_banks", F.pad(banks, (0, 1)), persistent=False)  # (n_mels, n_fft // 2 + 1)

    @property
    def dim(self) -> int:
        return self.config.n_mels

    def num_frames(self, num_samples: int | torch.Tensor) -> int | torch.Tensor:
        return centered_num_frames(num_samples - 1, self.config.hop_length)  # pre-emphasis drops a sample

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        c = self.config
        # the official transform runs in float32 even under autocast; keep that, whatever the caller does
        with torch.autocast(device_type=wave.device.type, enabled=False):
            x, unbatched = _as_batch(wave, self.window.dtype)  # (B, N)
            _check_length(x.shape[-1] - 1, c.n_fft // 2, "PasstMel")
            x = F.conv1d(x.unsqueeze(1), self.preemphasis).squeeze(1)  # (B, N - 1)
            spec = torch.stft(
                x, c.n_fft, hop_length=c.hop_length, win_length=c.win_length, window=self.window,
                center=True, pad_mode="reflect", normalized=False, return_complex=True,
            )  # (B, n_fft // 2 + 1, frames)
            power = spec.real**2 + spec.imag**2
            mel = torch.matmul(self.mel_banks, power)  # (B, n_mels, frames)
            mel = (torch.log(mel + 1e-5) + 4.5) / 5.0  # the official "fast normalisation"
        return mel[0] if unbatched else mel


# ---------------------------------------------------------------------------------------------- aiSFX mel


@dataclass
class AisfxMelConfig:
    """The aiSFX front end (the aisfx package's aisfx/spectrogram/spectrogram_librosa.py + `spectrogram_normalize`).

    Peak-normalised audio at 44.1 kHz, 2048-sample Hann frames every 1024 samples (centred, zero padding, as
    librosa >= 0.9 pads), power spectrum, 96 HTK mel bands over 0-22050 Hz with each filter normalised to unit
    sum (librosa `norm=1`, Essentia `unit_sum`), log10(1 + 10^4 * power), divided by 9.4578 (the maximum over
    the paper's training spectrograms: the package's 'original' min-max normalisation with min 0).
    """

    sample_rate: int = 44100
    n_fft: int = 2048
    hop_length: int = 1024
    n_mels: int = 96
    f_min: float = 0.0
    f_max: float = 22050.0
    log_scale: float = 1e4
    norm_max: float = 9.457798957824707
    peak_normalize: bool = True  # the package divides each file by its peak before the STFT


class AisfxMel(nn.Module):
    """Waveform (N,) / (B, N) at 44.1 kHz -> (T, 96) / (B, T, 96), frame-major as the CNN reads it.

    With `lengths` (B,) in samples, each row is peak-normalised over its real samples only, so padding a clip
    into a batch does not change its frames.
    """

    def __init__(self, config: AisfxMelConfig | None = None) -> None:
        super().__init__()
        self.config = c = config or AisfxMelConfig()
        self.register_buffer("window", torch.hann_window(c.n_fft, periodic=True), persistent=False)
        fb = torchaudio.functional.melscale_fbanks(
            c.n_fft // 2 + 1, c.f_min, c.f_max, c.n_mels, c.sample_rate, norm=None, mel_scale="htk"
        )  # (F, n_mels) triangles, peak 1
        fb = fb / fb.sum(dim=0, keepdim=True).clamp(min=1e-12)  # unit sum per band
        self.register_buffer("mel_banks", fb.t().contiguous(), persistent=False)  # (n_mels, F)

    @property
    def dim(self) -> int:
        return self.config.n_mels

    def num_frames(self, num_samples: int | torch.Tensor) -> int | torch.Tensor:
        return centered_num_frames(num_samples, self.config.hop_length)

    def forward(self, wave: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        c = self.config
        with torch.autocast(device_type=wave.device.type, enabled=False):
            x, unbatched = _as_batch(wave, self.window.dtype)  # (B, N)
            if c.peak_normalize:
                x = x / _peaks(x, lengths)[:, None]
            spec = torch.stft(
                x, c.n_fft, hop_length=c.hop_length, window=self.window, center=True, pad_mode="constant",
                return_complex=True,
            )  # (B, F, T)
            power = spec.real**2 + spec.imag**2
            mel = torch.matmul(self.mel_banks, power)  # (B, n_mels, T)
            feats = (torch.log10(1.0 + c.log_scale * mel) / c.norm_max).transpose(1, 2)  # (B, T, n_mels)
        return feats[0] if unbatched else feats


def _peaks(x: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
    """(B, N) -> (B,) peak |x| over each row's real samples; 1 for silent rows (as the package does)."""
    a = x.abs()
    if lengths is not None:
        a = a * (torch.arange(x.shape[-1], device=x.device)[None, :] < lengths.to(x.device)[:, None])
    peak = a.amax(dim=-1)
    return torch.where(peak > 0, peak, torch.ones_like(peak))


# ---------------------------------------------------------------------------------------------- 16 kHz


@dataclass
class MFCCConfig:
    """13 MFCC + delta + delta-delta at 16 kHz (HTK mel scale, log mel energies, orthonormal DCT-II).

    40 mel bands over 0-8 kHz is the common choice for 16 kHz MFCCs (Kaldi's "hires" and many ZeroSpeech
    baselines); deltas use the standard regression over +-2 frames (win_length 5).
    """

    sample_rate: int = framing.SAMPLE_RATE
    n_mfcc: int = 13
    n_mels: int = 40
    n_fft: int = framing.N_FFT
    win_length: int = framing.WIN_LENGTH  # 25 ms
    hop_length: int = framing.HOP_LENGTH  # 10 ms
    f_min: float = 0.0
    f_max: float | None = None  # None -> sample_rate / 2
    deltas: bool = True  # append delta and delta-delta (39-d) instead of the 13 static coefficients
    delta_win_length: int = 5
    cmn: bool = False  # per-utterance cepstral mean normalisation
    cvn: bool = False  # ... and variance normalisation (only with cmn)


class MFCC(nn.Module):
    """Waveform (N,) / (B, N) at 16 kHz -> (T, 39) / (B, T, 39), frame-major."""

    def __init__(self, config: MFCCConfig | None = None) -> None:
        super().__init__()
        self.config = c = config or MFCCConfig()
        melkwargs = dict(
            n_fft=c.n_fft, win_length=c.win_length, hop_length=c.hop_length, n_mels=c.n_mels,
            f_min=c.f_min, f_max=c.f_max, center=True, pad_mode="reflect", mel_scale="htk",
        )
        # log_mels=True: log(mel + 1e-6) rather than dB, as in HTK/Kaldi MFCCs
        self.mfcc = _non_persistent(torchaudio.transforms.MFCC(c.sample_rate, c.n_mfcc, log_mels=True,
                                                               melkwargs=melkwargs))

    @property
    def dim(self) -> int:
        return self.config.n_mfcc * (3 if self.config.deltas else 1)

    def num_frames(self, num_samples: int | torch.Tensor) -> int | torch.Tensor:
        return centered_num_frames(num_samples, self.config.hop_length)

    def forward(self, wave: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """`lengths` (B,) in samples only matters for CMVN: statistics then skip the padding frames."""
        c = self.config
        x, unbatched = _as_batch(wave, self.mfcc.dct_mat.dtype)  # (B, N)
        _check_length(x.shape[-1], c.n_fft // 2, "MFCC")
        ceps = self.mfcc(x)  # (B, n_mfcc, T)
        if c.deltas:
            d1 = deltas(ceps, c.delta_win_length)
            d2 = deltas(d1, c.delta_win_length)
            ceps = torch.cat([ceps, d1, d2], dim=1)  # (B, 3 * n_mfcc, T)
        feats = ceps.transpose(1, 2)  # (B, T, D)
        if c.cmn:
            frames = None if lengths is None else self.num_frames(lengths.to(feats.device).long())
            feats = cmvn(feats, frames, variance=c.cvn)
        return feats[0] if unbatched else feats


def deltas(x: torch.Tensor, win_length: int = 5) -> torch.Tensor:
    """(..., T) -> (..., T) regression deltas Σ_k k·(x[t+k] − x[t−k]) / (2·Σ_k k²), k = 1..(win_length−1)/2,
    ends repeated: torchaudio's `compute_deltas`, as shifted differences. Its depthwise convolution costs
    ~0.25 ms per call on a CPU even for a streaming block of 20 frames; this is a few µs."""
    n = (win_length - 1) // 2
    if n < 1:
        raise ValueError(f"delta win_length must be at least 3, got {win_length}")
    T = x.shape[-1]
    p = F.pad(x.unsqueeze(0) if x.dim() < 3 else x, (n, n), mode="replicate")  # replicate needs >= 2-D batch
    p = p.reshape(*x.shape[:-1], T + 2 * n)
    out = p[..., n + 1 : n + 1 + T] - p[..., n - 1 : n - 1 + T]
    for k in range(2, n + 1):
        out = out + k * (p[..., n + k : n + k + T] - p[..., n - k : n - k + T])
    return out / (n * (n + 1) * (2 * n + 1) / 3)


def cmvn(feats: torch.Tensor, num_frames: torch.Tensor | None = None, variance: bool = False) -> torch.Tensor:
    """Per-utterance mean (and variance) normalisation of (B, T, D) over valid frames; padding is zeroed."""
    B, T, _ = feats.shape
    if num_frames is None:
        num_frames = torch.full((B,), T, device=feats.device)
    mask = frame_mask(num_frames.clamp(min=1, max=T), T).unsqueeze(-1).to(feats.dtype)  # (B, T, 1)
    count = mask.sum(dim=1, keepdim=True)  # (B, 1, 1)
    mean = (feats * mask).sum(dim=1, keepdim=True) / count
    out = feats - mean
    if variance:
        var = (out.square() * mask).sum(dim=1, keepdim=True) / count
        out = out / torch.sqrt(var + 1e-8)
    return out * mask


@dataclass
class LogMelConfig:
    """80-bin log-mel at 16 kHz with the MFCC framing (HTK mel scale, power spectrum, log(x + 1e-6))."""

    sample_rate: int = framing.SAMPLE_RATE
    n_mels: int = 80
    n_fft: int = framing.N_FFT
    win_length: int = framing.WIN_LENGTH
    hop_length: int = framing.HOP_LENGTH
    f_min: float = 0.0
    f_max: float | None = None
    log_offset: float = 1e-6


class LogMel(nn.Module):
    """Waveform (N,) / (B, N) at 16 kHz -> (T, 80) / (B, T, 80)."""

    def __init__(self, config: LogMelConfig | None = None) -> None:
        super().__init__()
        self.config = c = config or LogMelConfig()
        self.melspec = _non_persistent(torchaudio.transforms.MelSpectrogram(
            c.sample_rate, n_fft=c.n_fft, win_length=c.win_length, hop_length=c.hop_length, f_min=c.f_min,
            f_max=c.f_max, n_mels=c.n_mels, power=2.0, center=True, pad_mode="reflect", mel_scale="htk",
        ))

    @property
    def dim(self) -> int:
        return self.config.n_mels

    def num_frames(self, num_samples: int | torch.Tensor) -> int | torch.Tensor:
        return centered_num_frames(num_samples, self.config.hop_length)

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        x, unbatched = _as_batch(wave, self.melspec.mel_scale.fb.dtype)  # (B, N)
        _check_length(x.shape[-1], self.config.n_fft // 2, "LogMel")
        mel = self.melspec(x)  # (B, n_mels, T)
        feats = torch.log(mel + self.config.log_offset).transpose(1, 2)  # (B, T, n_mels)
        return feats[0] if unbatched else feats


@dataclass
class LinearSpecConfig:
    """Linear magnitude spectrogram at 16 kHz, framed like MFCC (so frames align with MFCC frames)."""

    sample_rate: int = framing.SAMPLE_RATE
    n_fft: int = framing.N_FFT
    win_length: int = framing.WIN_LENGTH
    hop_length: int = framing.HOP_LENGTH
    griffin_lim_momentum: float = 0.99


class LinearSpectrogram(nn.Module):
    """Waveform (N,) / (B, N) at 16 kHz -> |STFT| (T, F) / (B, T, F), F = n_fft // 2 + 1; Griffin-Lim back."""

    def __init__(self, config: LinearSpecConfig | None = None) -> None:
        super().__init__()
        self.config = c = config or LinearSpecConfig()
        self.spec = _non_persistent(torchaudio.transforms.Spectrogram(
            n_fft=c.n_fft, win_length=c.win_length, hop_length=c.hop_length, power=1.0, center=True,
            pad_mode="reflect",
        ))

    @property
    def dim(self) -> int:
        return self.config.n_fft // 2 + 1

    def num_frames(self, num_samples: int | torch.Tensor) -> int | torch.Tensor:
        return centered_num_frames(num_samples, self.config.hop_length)

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        x, unbatched = _as_batch(wave, self.spec.window.dtype)  # (B, N)
        _check_length(x.shape[-1], self.config.n_fft // 2, "LinearSpectrogram")
        mag = self.spec(x).transpose(1, 2)  # (B, T, F)
        return mag[0] if unbatched else mag

    def inverse(
        self, mag: torch.Tensor, n_iter: int = 32, length: int | None = None, rand_init: bool = True
    ) -> torch.Tensor:
        """Magnitude (T, F) / (B, T, F) -> waveform (N,) / (B, N) by Griffin-Lim with the forward framing.

        Without `length`, N = (T - 1) * hop. Random phase init draws from torch's global generator: seed it
        (or pass rand_init=False) for reproducible output.
        """
        c = self.config
        if mag.dim() not in (2, 3) or mag.shape[-1] != self.dim:
            shape = tuple(mag.shape)
            raise ValueError(f"expected magnitudes (T, {self.dim}) or (B, T, {self.dim}), got {shape}")
        window = self.spec.window
        specgram = mag.to(window.dtype).transpose(-1, -2).clamp(min=0)  # (..., F, T)
        wave = torchaudio.functional.griffinlim(
            specgram, window, c.n_fft, c.hop_length, c.win_length, power=1.0, n_iter=n_iter,
            momentum=c.griffin_lim_momentum, length=length, rand_init=rand_init,
        )
        return wave


# ---------------------------------------------------------------------------------------------- registry

FRONTENDS: dict[str, tuple[type, type[nn.Module]]] = {
    "passt_mel": (PasstMelConfig, PasstMel),
    "aisfx_mel": (AisfxMelConfig, AisfxMel),
    "mfcc": (MFCCConfig, MFCC),
    "logmel": (LogMelConfig, LogMel),
    "linear_spec": (LinearSpecConfig, LinearSpectrogram),
}


def frontend_to_dict(frontend: nn.Module) -> dict[str, Any]:
    """Front end -> JSON-able dict {"kind": ..., **config}, for a checkpoint's `features` metadata."""
    for kind, (_, cls) in FRONTENDS.items():
        if type(frontend) is cls:
            return {"kind": kind, **dataclasses.asdict(frontend.config)}
    raise TypeError(f"not an Earshot front end: {type(frontend).__name__}")


def frontend_from_dict(d: dict[str, Any]) -> nn.Module:
    """Inverse of `frontend_to_dict`; refuses unknown kinds and fields."""
    d = dict(d)
    kind = d.pop("kind", None)
    if kind not in FRONTENDS:
        raise ValueError(f"unknown front end kind {kind!r}; expected one of {sorted(FRONTENDS)}")
    config_cls, cls = FRONTENDS[kind]
    check_fields(config_cls, d)
    return cls(config_cls(**d))
