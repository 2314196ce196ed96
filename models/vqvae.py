"""Transformer VQ-VAE for unsupervised speech unit discovery.

After Tjandra, Sakti & Nakamura, "Transformer VQ-VAE for unsupervised unit discovery and speech synthesis:
ZeroSpeech 2020 challenge" (Interspeech 2020), with the regularisers of Chorowski et al. (2019):

    feats (B, T, D) -> normalise -> Encoder: pre-norm Transformer layers at 10 ms, strided conv, layers at
    20 ms, strided conv, layers at 40 ms -> z (B, T/4, C) -> EMACodebook (nearest code, straight-through,
    EMA updates, dead-code restarts) -> time jitter (training only) -> Decoder: residual convs conditioned
    on a speaker embedding, x2 upsampling twice -> reconstruction (B, T, D)

Loss = reconstruction + commitment γ·‖z − sg(q)‖² + smoothing λ·Σ_t‖z_t − z_{t+1}‖² (per utterance, mean
over the batch). The reconstruction loss is the masked MSE (or L1, `recon_loss="l1"`) between the decoder
output and the *normalised* input features (`feat_mean`/`feat_std` buffers, set from training data with
`set_feature_stats`), mean over real frames and feature dims; `forward` returns the reconstruction in the
original feature scale.

Streaming. Every attention layer sees only `attn_left` steps back and `attn_right` steps ahead (a banded
mask at the layer's own rate) and positions carry only a learned relative bias, so each unit depends on a
bounded span of input frames: frames 4u − left .. 4u + right, `Encoder.receptive_field()`. `StreamingEncoder`
runs each pushed block through the encoder once, with a per-layer cache of past keys/values (and the strided
convs' one shared input), and emits a unit as soon as its last needed frame has arrived, which gives exactly
the codes of a whole-file `encode`. With the defaults (2 layers per stage, 16 left / 1 right)
the look-ahead past a unit's own four frames is 14 frames (140 ms at a 10-ms hop), plus the front end's own
delay (STFT half-window and the ±4-frame Δ/ΔΔ regression).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from models.inverter import CodebookInverter, InverterConfig, dataclass_from_dict

STRIDE = 4  # two stride-2 convolutions: one unit per 40 ms at 10-ms frames


@dataclass
class VQVAEConfig:
    input_dim: int = 39  # MFCC + Δ + ΔΔ; 80 for log-mel; 39 + 96 for MFCC + speech_embedding (SpeechUnitsFrontend)
    encoder_dims: tuple[int, int] = (0, 0)  # input dims [a, b) the encoder reads; (0, 0): all of them
    recon_dims: tuple[int, int] = (0, 0)  # input dims [a, b) the decoder rebuilds; (0, 0): all of them
    d_model: int = 256
    n_heads: int = 4
    d_ff: int = 1024
    layers_per_stage: tuple[int, int, int] = (2, 2, 2)  # Transformer layers at 10, 20 and 40 ms
    attn_left: int = 16  # steps each attention layer looks back, at its own rate
    attn_right: int = 1  # steps each attention layer looks ahead (sets the streaming look-ahead)
    dropout: float = 0.1
    codebook_size: int = 128  # K; 64-512 for real models
    code_dim: int = 64
    ema_decay: float = 0.99
    ema_epsilon: float = 1e-5  # Laplace smoothing of the EMA cluster sizes
    restart_threshold: float = 1.0  # restart a code whose EMA count (uses per batch) falls below this
    commitment_cost: float = 0.25  # γ
    smoothing_weight: float = 1e-3  # λ
    jitter_p: float = 0.05
    n_speakers: int = 1
    speaker_dim: int = 64
    decoder_channels: int = 256
    decoder_kernel: int = 5
    decoder_blocks: int = 2  # residual conv blocks at each of the 40, 20 and 10 ms rates
    recon_loss: str = "mse"  # "mse" or "l1"

    def __post_init__(self) -> None:
        if len(self.layers_per_stage) != 3:
            raise ValueError(f"layers_per_stage needs 3 entries (10/20/40 ms), got {self.layers_per_stage}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        if self.codebook_size < 2:
            raise ValueError("codebook_size must be at least 2")
        if self.recon_loss not in ("mse", "l1"):
            raise ValueError(f"recon_loss must be 'mse' or 'l1', got {self.recon_loss!r}")
        if self.decoder_kernel % 2 == 0:
            raise ValueError("decoder_kernel must be odd")
        if not 0.0 <= self.jitter_p <= 1.0:
            raise ValueError("jitter_p must lie in [0, 1]")
        for name in ("encoder_dims", "recon_dims"):
            a, b = getattr(self, name)
            if (a, b) != (0, 0) and not 0 <= a < b <= self.input_dim:
                raise ValueError(f"{name} must be (0, 0) or a range a < b within 0..input_dim ({self.input_dim}), "
                                 f"got {(a, b)}")

    @property
    def encoder_slice(self) -> slice:
        """The input dims the encoder reads."""
        return slice(*self.encoder_dims) if tuple(self.encoder_dims) != (0, 0) else slice(0, self.input_dim)

    @property
    def recon_slice(self) -> slice:
        """The input dims the decoder rebuilds."""
        return slice(*self.recon_dims) if tuple(self.recon_dims) != (0, 0) else slice(0, self.input_dim)

    @property
    def encoder_input_dim(self) -> int:
        return self.encoder_slice.stop - self.encoder_slice.start

    @property
    def output_dim(self) -> int:
        return self.recon_slice.stop - self.recon_slice.start


def lengths_mask(lengths: torch.Tensor, T: int) -> torch.Tensor:
    """(B,) lengths -> (B, T) bool, True on real positions."""
    return torch.arange(T, device=lengths.device)[None, :] < lengths[:, None]


def halve(lengths: torch.Tensor) -> torch.Tensor:
    """Valid length after a stride-2, kernel-3, padding-1 convolution: ceil(n / 2)."""
    return torch.div(lengths + 1, 2, rounding_mode="floor")


# ---------------------------------------------------------------------------------------------- encoder


class WindowedSelfAttention(nn.Module):
    """Multi-head self-attention where position t sees only t − left .. t + right (a band), with a learned
    per-head bias for each relative offset. Every query computes over exactly the same W = left + 1 + right
    keys wherever it sits, which makes streaming and whole-file outputs agree."""

    def __init__(self, d_model: int, n_heads: int, left: int, right: int, dropout: float) -> None:
        super().__init__()
        self.n_heads, self.left, self.right, self.dropout = n_heads, left, right, dropout
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.rel_bias = nn.Parameter(torch.zeros(n_heads, left + 1 + right))  # (H, W)

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        H, L, R = self.n_heads, self.left, self.right
        W = L + 1 + R
        q, k, v = self.qkv(x).split(C, dim=-1)  # 3 x (B, T, C)
        q = q.view(B, T, H, C // H).transpose(1, 2).unsqueeze(3)  # (B, H, T, 1, hs)
        k, v = (self._windows(t.view(B, T, H, C // H).transpose(1, 2)) for t in (k, v))  # (B, H, T, W, hs)
        key_valid = F.pad(valid, (L, R), value=False).unfold(1, W, 1)  # (B, T, W)
        return self.attend(q, k, v, key_valid)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_valid: torch.Tensor) -> torch.Tensor:
        """q (B, H, T, 1, hs), key/value windows (B, H, T, W, hs), key_valid (B, T, W) -> (B, T, C).
        Shared by the whole-file pass and the cached streaming pass, so both compute the same thing."""
        W = k.shape[3]
        # a query always sees itself, so padded queries (zeroed later) never get an all-masked row
        is_self = torch.arange(W, device=q.device) == self.left
        key_valid = key_valid | is_self
        bias = self.rel_bias[None, :, None, :].masked_fill(~key_valid[:, None], float("-inf"))  # (B, H, T, W)
        return self.attend_biased(q, k, v, bias.unsqueeze(3).to(q.dtype))

    def attend_biased(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """As `attend`, with the additive mask (B or 1, H, T or 1, 1, W) already made."""
        B, H, T, W, hs = k.shape
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=bias, dropout_p=self.dropout if self.training else 0.0
        )  # (B, H, T, 1, hs)
        return self.proj(y.squeeze(3).transpose(1, 2).reshape(B, T, H * hs))

    def _windows(self, t: torch.Tensor) -> torch.Tensor:
        # (B, H, T, hs) -> (B, H, T, W, hs): the W keys around each position, zero beyond the ends
        t = F.pad(t, (0, 0, self.left, self.right))
        return t.unfold(2, self.left + 1 + self.right, 1).transpose(-1, -2)


class EncoderLayer(nn.Module):
    """Pre-norm Transformer layer with windowed attention; padding positions are kept at zero."""

    def __init__(self, config: VQVAEConfig) -> None:
        super().__init__()
        c = config
        self.ln1 = nn.LayerNorm(c.d_model)
        self.attn = WindowedSelfAttention(c.d_model, c.n_heads, c.attn_left, c.attn_right, c.dropout)
        self.ln2 = nn.LayerNorm(c.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(c.d_model, c.d_ff), nn.GELU(), nn.Dropout(c.dropout), nn.Linear(c.d_ff, c.d_model)
        )
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        x = x + self.dropout(self.attn(self.ln1(x), valid))
        x = x + self.dropout(self.mlp(self.ln2(x)))
        return x * valid.unsqueeze(-1)


class Downsample(nn.Module):
    """LayerNorm + Conv1d(kernel 3, stride 2, padding 1): (B, T, C) -> (B, ceil(T / 2), C)."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.conv = nn.Conv1d(d_model, d_model, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        h = self.norm(x) * valid.unsqueeze(-1)  # padding must be zero, as the conv's own zero padding is
        return self.conv(h.transpose(1, 2)).transpose(1, 2)


class Encoder(nn.Module):
    """Features (B, T, D) -> pre-quantisation vectors z (B, ceil(T / 4), code_dim) and their lengths."""

    def __init__(self, config: VQVAEConfig) -> None:
        super().__init__()
        self.config = c = config
        self.in_proj = nn.Linear(c.encoder_input_dim, c.d_model)
        self.stages = nn.ModuleList(
            nn.ModuleList(EncoderLayer(c) for _ in range(n)) for n in c.layers_per_stage
        )
        self.down = nn.ModuleList(Downsample(c.d_model) for _ in range(len(c.layers_per_stage) - 1))
        self.ln_f = nn.LayerNorm(c.d_model)
        self.out = nn.Linear(c.d_model, c.code_dim)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, T, _ = x.shape
        T4 = -(-T // STRIDE) * STRIDE
        x = F.pad(x, (0, 0, 0, T4 - T))  # (B, T4, D): whole units; the extra frames are padding
        valid = lengths_mask(lengths, T4)
        h = self.in_proj(x) * valid.unsqueeze(-1)  # (B, T4, d)
        for i, layers in enumerate(self.stages):
            if i > 0:
                h = self.down[i - 1](h, valid)  # (B, T4 / 2^i, d)
                lengths = halve(lengths)
                valid = lengths_mask(lengths, h.shape[1])
            for layer in layers:
                h = layer(h, valid)
        z = self.out(self.ln_f(h)) * valid.unsqueeze(-1)  # (B, U, code_dim)
        return z, lengths

    def receptive_field(self) -> tuple[int, int]:
        """(left, right): unit u depends on input frames 4u − left .. 4u + right and on nothing else."""
        c = self.config
        lo = hi = 0  # offsets at the current stage's rate, walking from the output back to the input
        for i in reversed(range(len(c.layers_per_stage))):
            lo -= c.layers_per_stage[i] * c.attn_left
            hi += c.layers_per_stage[i] * c.attn_right
            if i > 0:  # kernel 3, stride 2, padding 1: position j reads 2j − 1 .. 2j + 1
                lo, hi = 2 * lo - 1, 2 * hi + 1
        return -lo, hi


# ---------------------------------------------------------------------------------------------- codebook


class EMACodebook(nn.Module):
    """Vector quantiser with an EMA-updated codebook (van den Oord et al. 2017, appendix; Razavi et al. 2019).

    Codes are the nearest codebook vectors in L2; gradients pass straight through to the encoder. In training
    mode each call updates the EMA statistics (cluster sizes Laplace-smoothed) and restarts dead codes
    (EMA count below `restart_threshold`: used less than that many times per batch, as in Jukebox, so scale it
    with the batch size) at random encoder outputs of the batch. Counts start at zero, so the first training
    batch initialises the whole codebook from data. A restarted code gets an EMA count of 1; with the default
    threshold of 1 it is moved again at the next step unless it was chosen. Under torch.distributed the
    statistics are summed over processes (DDP's buffer broadcast then keeps the replicas' codebooks equal).
    """

    def __init__(self, size: int, dim: int, decay: float, epsilon: float, restart_threshold: float) -> None:
        super().__init__()
        self.size, self.dim = size, dim
        self.decay, self.epsilon, self.restart_threshold = decay, epsilon, restart_threshold
        self.register_buffer("embedding", torch.randn(size, dim))  # (K, C)
        self.register_buffer("ema_count", torch.zeros(size))  # (K,)
        self.register_buffer("ema_weight", torch.zeros(size, dim))  # (K, C): EMA of summed assigned vectors

    def nearest(self, z: torch.Tensor) -> torch.Tensor:
        """(..., C) -> (...) index of the nearest code in L2."""
        flat = z.reshape(-1, self.dim)
        dist = (
            flat.square().sum(1, keepdim=True) - 2 * flat @ self.embedding.t() + self.embedding.square().sum(1)
        )  # (N, K)
        return dist.argmin(dim=1).view(z.shape[:-1])

    @torch.autocast("cuda", enabled=False)  # distances and EMA sums in fp32: bf16/fp16 pick other codes
    def forward(
        self, z: torch.Tensor, valid: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """z (B, U, C), valid (B, U) -> (quantised z with straight-through gradient, codes (B, U), perplexity)."""
        z = z.float()  # (B, U, C): an autocast encoder hands over bf16/fp16
        codes = self.nearest(z.detach())  # (B, U)
        flat_z, flat_codes = z.detach()[valid], codes[valid]  # (N, C), (N,)
        counts = torch.bincount(flat_codes, minlength=self.size).to(z.dtype)  # (K,)
        if self.training:
            self._ema_update(flat_z, flat_codes, counts)
            self._restart_dead(flat_z)
        q = self.embedding[codes]  # (B, U, C), after the update, as in Razavi et al.
        q = z + (q - z).detach()  # straight-through: forward q, backward identity to z
        probs = counts / counts.sum().clamp(min=1)
        perplexity = torch.exp(-(probs * torch.log(probs + 1e-10)).sum())
        return q, codes, perplexity

    @torch.no_grad()
    def _ema_update(self, flat_z: torch.Tensor, flat_codes: torch.Tensor, counts: torch.Tensor) -> None:
        sums = torch.zeros_like(self.ema_weight).index_add_(0, flat_codes, flat_z)  # (K, C)
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(counts)
            dist.all_reduce(sums)
        d = self.decay
        self.ema_count.mul_(d).add_(counts, alpha=1 - d)
        self.ema_weight.mul_(d).add_(sums, alpha=1 - d)
        n = self.ema_count.sum()
        # Laplace smoothing keeps unused codes from dividing by zero while preserving the total count
        size = (self.ema_count + self.epsilon) / (n + self.size * self.epsilon) * n
        self.embedding.copy_(self.ema_weight / size.unsqueeze(1))

    @torch.no_grad()
    def _restart_dead(self, flat_z: torch.Tensor) -> None:
        dead = torch.nonzero(self.ema_count < self.restart_threshold).squeeze(1)  # (n_dead,)
        if dead.numel() == 0 or flat_z.shape[0] == 0:
            return
        pick = torch.randint(flat_z.shape[0], (dead.numel(),), device=flat_z.device)
        new = flat_z[pick]
        if dead.numel() > flat_z.shape[0]:  # more dead codes than vectors: jitter the repeats apart
            new = new + 0.01 * new.std() * torch.randn_like(new)
        self.embedding[dead] = new
        self.ema_weight[dead] = new
        self.ema_count[dead] = 1.0


# ---------------------------------------------------------------------------------------------- decoder


def time_jitter(q: torch.Tensor, lengths: torch.Tensor, p: float) -> torch.Tensor:
    """Replace each vector of q (B, U, C) by its left or right neighbour with probability p (p/2 each),
    staying inside the utterance (Chorowski et al. 2019)."""
    B, U, C = q.shape
    r = torch.rand(B, U, device=q.device)
    shift = (r < p / 2).long() * -1 + ((r >= p / 2) & (r < p)).long()  # (B, U) in {-1, 0, 1}
    idx = torch.arange(U, device=q.device)[None, :] + shift
    idx = torch.minimum(idx.clamp(min=0), (lengths - 1).clamp(min=0)[:, None])
    idx = torch.where(lengths_mask(lengths, U), idx, torch.arange(U, device=q.device)[None, :])
    return q.gather(1, idx.unsqueeze(-1).expand(B, U, C))


class SpeakerConvBlock(nn.Module):
    """Residual block: two same-length convolutions, the speaker embedding added between them."""

    def __init__(self, channels: int, kernel: int, speaker_dim: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(channels, channels, kernel, padding=kernel // 2)
        self.conv2 = nn.Conv1d(channels, channels, kernel, padding=kernel // 2)
        self.speaker = nn.Linear(speaker_dim, channels)

    def forward(self, x: torch.Tensor, spk: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # x (B, ch, T), spk (B, S), mask (B, 1, T)
        h = self.conv1(F.gelu(x)) + self.speaker(spk).unsqueeze(-1)
        h = self.conv2(F.gelu(h))
        return (x + h) * mask


class Decoder(nn.Module):
    """Quantised vectors (B, U, code_dim) + speaker ids (B,) -> features (B, 4U, output_dim), normalised."""

    def __init__(self, config: VQVAEConfig) -> None:
        super().__init__()
        c = config
        ch = c.decoder_channels
        self.speaker = nn.Embedding(c.n_speakers, c.speaker_dim)
        self.in_conv = nn.Conv1d(c.code_dim, ch, 3, padding=1)
        self.stages = nn.ModuleList(
            nn.ModuleList(SpeakerConvBlock(ch, c.decoder_kernel, c.speaker_dim) for _ in range(c.decoder_blocks))
            for _ in range(3)
        )  # at 40, 20, 10 ms
        self.up_convs = nn.ModuleList(nn.Conv1d(ch, ch, 3, padding=1) for _ in range(2))
        self.out = nn.Conv1d(ch, c.output_dim, 1)

    def forward(self, q: torch.Tensor, speaker_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        # lengths (B,) are frame lengths (10 ms); each rate masks its own padding
        rate_lengths = [torch.div(lengths + s - 1, s, rounding_mode="floor") for s in (4, 2, 1)]
        spk = self.speaker(speaker_ids)  # (B, S)
        h = self.in_conv(q.transpose(1, 2))  # (B, ch, U)
        for i, blocks in enumerate(self.stages):
            if i > 0:  # nearest-neighbour x2 then a conv: no checkerboard artefacts of transposed convs
                h = self.up_convs[i - 1](F.gelu(h.repeat_interleave(2, dim=2)))
            mask = lengths_mask(rate_lengths[i], h.shape[2]).unsqueeze(1).to(h.dtype)  # (B, 1, T_i)
            h = h * mask
            for block in blocks:
                h = block(h, spk, mask)
        return self.out(F.gelu(h)).transpose(1, 2)  # (B, 4U, D)


# ---------------------------------------------------------------------------------------------- model


class VQVAE(nn.Module):
    def __init__(self, config: VQVAEConfig) -> None:
        super().__init__()
        self.config = c = config
        self.register_buffer("feat_mean", torch.zeros(c.input_dim))
        self.register_buffer("feat_std", torch.ones(c.input_dim))
        self.encoder = Encoder(c)
        self.codebook = EMACodebook(c.codebook_size, c.code_dim, c.ema_decay, c.ema_epsilon, c.restart_threshold)
        self.decoder = Decoder(c)

    @torch.no_grad()
    def set_feature_stats(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """Per-dimension mean and standard deviation of the training features, used to normalise inputs."""
        self.feat_mean.copy_(mean)
        self.feat_std.copy_(std.clamp(min=1e-5))

    def forward(
        self,
        feats: torch.Tensor,
        lengths: torch.Tensor | None = None,
        speaker_ids: torch.Tensor | None = None,
        target: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """feats (B, T, D), lengths (B,) frames, speaker_ids (B,) -> (recon (B, T, R), loss, stats); R = D unless
        `recon_dims` says otherwise (then the decoder rebuilds those input dims only).

        target (B, T, D): the features to reconstruct when they differ from the input (denoising: noisy,
        reverberant or band-limited input, clean target); default the input itself.

        stats: recon / commit / smooth losses, perplexity, codes (B, ceil(T / 4)) with −1 on padding, and
        code_lengths (B,).
        """
        c = self.config
        B, T, _ = feats.shape
        if lengths is None:
            lengths = torch.full((B,), T, device=feats.device, dtype=torch.long)
        if speaker_ids is None:
            speaker_ids = torch.zeros(B, device=feats.device, dtype=torch.long)
        lengths = lengths.to(feats.device)
        x = (feats - self.feat_mean) / self.feat_std  # (B, T, D)
        z, code_lengths = self.encoder(x[..., c.encoder_slice], lengths)  # (B, U, C)
        valid_u = lengths_mask(code_lengths, z.shape[1])  # (B, U)
        q, codes, perplexity = self.codebook(z, valid_u)

        mask_u = valid_u.unsqueeze(-1).to(z.dtype)
        n_u = (mask_u.sum() * c.code_dim).clamp(min=1)
        commit = c.commitment_cost * ((z - q.detach()).square() * mask_u).sum() / n_u
        pair = (valid_u[:, 1:] & valid_u[:, :-1]).unsqueeze(-1).to(z.dtype)  # (B, U - 1, 1)
        smooth = c.smoothing_weight * ((z[:, 1:] - z[:, :-1]).square() * pair).sum() / B

        if self.training and c.jitter_p > 0:
            q = time_jitter(q, code_lengths, c.jitter_p)
        R = c.recon_slice  # the dims the decoder rebuilds (e.g. the speech_embedding part of its input)
        y = self.decoder(q, speaker_ids.to(feats.device), lengths)[:, :T]  # (B, T, r) normalised
        mask = lengths_mask(lengths, T).unsqueeze(-1).to(y.dtype)  # (B, T, 1)
        y_true = x if target is None else (target.to(feats.device) - self.feat_mean) / self.feat_std  # (B, T, D)
        y_true = y_true[..., R]  # (B, T, r)
        err = (y - y_true).square() if c.recon_loss == "mse" else (y - y_true).abs()
        recon_loss = (err * mask).sum() / (mask.sum() * c.output_dim).clamp(min=1)

        loss = recon_loss + commit + smooth
        recon = (y * self.feat_std[R] + self.feat_mean[R]) * mask
        stats = {
            "recon": recon_loss.detach(),
            "commit": commit.detach(),
            "smooth": smooth.detach(),
            "perplexity": perplexity.detach(),
            "codes": codes.masked_fill(~valid_u, -1),
            "code_lengths": code_lengths,
        }
        return recon, loss, stats

    @torch.no_grad()
    def encode(self, feats: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """Inference: feats (T, D) / (B, T, D) -> unit ids (U,) / (B, U), −1 on padding; no jitter, no
        dropout and no codebook update, whatever mode the module is in."""
        unbatched = feats.dim() == 2
        feats = feats.unsqueeze(0) if unbatched else feats
        B, T, _ = feats.shape
        if lengths is None:
            lengths = torch.full((B,), T, device=feats.device, dtype=torch.long)
        was_training = self.encoder.training
        self.encoder.eval()
        try:
            x = ((feats - self.feat_mean) / self.feat_std)[..., self.config.encoder_slice]
            z, code_lengths = self.encoder(x, lengths.to(feats.device))
        finally:
            self.encoder.train(was_training)
        codes = self.codebook.nearest(z).masked_fill(~lengths_mask(code_lengths, z.shape[1]), -1)
        return codes[0] if unbatched else codes

    def code_vectors(self, codes: torch.Tensor) -> torch.Tensor:
        """Unit ids (...) -> codebook vectors (..., code_dim); padding ids (−1) give zero vectors."""
        vectors = self.codebook.embedding[codes.clamp(min=0)]
        return vectors * (codes >= 0).unsqueeze(-1).to(vectors.dtype)

    def stream(self) -> StreamingEncoder:
        return StreamingEncoder(self)


def _packed(linear: nn.Linear | nn.Conv1d) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(weight as a contiguous (in, out) matrix, bias) for `torch.addmm(bias, x, w)`: a snapshot, so a stream
    made before the weights change keeps the old ones. A conv (out, in, k) becomes (k·in, out), its input
    window flattened position-major. On a CPU a GEMM with this layout costs ~25 % less than nn.Linear's
    transposed view at the few rows a streaming step has."""
    w = linear.weight.detach()
    if w.dim() == 3:  # (out, in, k) -> (k, in, out)
        return w.permute(2, 1, 0).reshape(-1, w.shape[0]).contiguous(), linear.bias.detach()
    return w.t().contiguous(), None if linear.bias is None else linear.bias.detach()


def _affine(x: torch.Tensor, wb: tuple[torch.Tensor, torch.Tensor | None]) -> torch.Tensor:
    w, b = wb
    return x @ w if b is None else torch.addmm(b, x, w)


class _LayerStream:
    """One EncoderLayer fed a position at a time: a cache of past keys/values (the last `left` positions
    any later query needs) and the pending inputs whose `right` look-ahead has not arrived yet.

    Positions n_out .. n_in − 1 are pending (their inputs in `x`); `kv` covers k_start .. n_in − 1 with
    k_start = max(0, n_out − left). Speed: on a CPU each tensor op costs several µs of dispatch whatever its
    size, so a block is one pass of few ops, the layer's weights are read once here (no nn.Module calls per
    step) and the steady-state bias is made once; the arithmetic is the whole-file layer's, op for op, so
    the outputs are the same numbers.
    """

    def __init__(self, layer: EncoderLayer) -> None:
        a = layer.attn
        self.attn = a
        self.H, self.L, self.R = a.n_heads, a.left, a.right
        self.W = a.left + 1 + a.right
        self.ln1 = (layer.ln1.normalized_shape, layer.ln1.weight, layer.ln1.bias, layer.ln1.eps)
        self.ln2 = (layer.ln2.normalized_shape, layer.ln2.weight, layer.ln2.bias, layer.ln2.eps)
        self.w_qkv, self.w_proj = _packed(a.qkv), _packed(a.proj)
        self.w_fc1, self.w_fc2 = _packed(layer.mlp[0]), _packed(layer.mlp[3])
        self.bias = a.rel_bias.detach()[None, :, None, None, :]  # (1, H, 1, 1, W): every key present
        self.reset()

    def reset(self) -> None:
        self.n_in = self.n_out = self.k_start = 0
        self.x: torch.Tensor | None = None  # (P, C)
        self.kv: torch.Tensor | None = None  # (2, H, M, hs)
        self.q: torch.Tensor | None = None  # (H, P, hs) queries of the pending positions

    def step(self, x: torch.Tensor, final: bool) -> torch.Tensor:
        """New input positions (N, C) -> newly final output positions (Q, C); `final`: the input has ended."""
        H, L, R, W = self.H, self.L, self.R, self.W
        N, C = x.shape
        if N:
            qkv = _affine(F.layer_norm(x, *self.ln1), self.w_qkv)  # (N, 3C)
            qkv = qkv.view(N, 3, H, C // H).permute(1, 2, 0, 3)  # (3, H, N, hs)
            if self.x is None:
                self.x, self.q, self.kv = x, qkv[0], qkv[1:]
            else:
                self.x = torch.cat([self.x, x])
                self.q = torch.cat([self.q, qkv[0]], 1)
                self.kv = torch.cat([self.kv, qkv[1:]], 2)
            self.n_in += N
        target = self.n_in if final else max(self.n_out, self.n_in - R)
        Q = target - self.n_out
        if Q <= 0 or self.kv is None:
            return x[:0]
        # keys of positions n_out − L .. target − 1 + R; before 0 and past the end they do not exist
        lo, hi = self.n_out - L, target + R
        pad_lo, pad_hi = self.k_start - lo, hi - self.n_in
        kv = self.kv
        if pad_lo or pad_hi:
            kv = F.pad(kv, (0, 0, pad_lo, pad_hi))
        kv = kv.unfold(2, W, 1).transpose(-1, -2)  # (2, H, Q, W, hs)
        q = self.q[:, :Q, None]  # (H, Q, 1, hs)
        if pad_lo or pad_hi:
            pos = torch.arange(lo, hi, device=x.device)
            key_valid = ((pos >= 0) & (pos < self.n_in)).unfold(0, W, 1)  # (Q, W)
            y = self.attn.attend(q[None], kv[0, None], kv[1, None], key_valid[None])[0]  # (Q, C)
        else:  # steady state: every key exists, the same bias for every query
            y = F.scaled_dot_product_attention(q, kv[0], kv[1], attn_mask=self.bias[0].to(q.dtype))  # (H, Q, 1, hs)
            y = _affine(y.squeeze(2).transpose(0, 1).reshape(Q, C), self.w_proj)  # (Q, C)
        h = self.x[:Q] + y
        h = h + _affine(F.gelu(_affine(F.layer_norm(h, *self.ln2), self.w_fc1)), self.w_fc2)
        self.n_out = target
        keep = max(0, target - L)
        self.x, self.q = self.x[Q:], self.q[:, Q:]
        self.kv = self.kv[:, :, keep - self.k_start :]
        self.k_start = keep
        return h


class _DownsampleStream:
    """A Downsample fed a position at a time: output j reads inputs 2j − 1 .. 2j + 1, so it keeps the
    normalised inputs from 2·n_out − 1 on (position −1 is the convolution's zero padding)."""

    def __init__(self, down: Downsample) -> None:
        self.down = down
        n = down.norm
        self.ln = (n.normalized_shape, n.weight, n.bias, n.eps)
        self.w_conv = _packed(down.conv)  # (3C, C): kernel 3 as one GEMM over flattened input windows
        self.reset()

    def reset(self) -> None:
        self.n_in = self.n_out = 0
        self.buf: torch.Tensor | None = None  # (M, C): normalised inputs 2·n_out − 1 .. n_in − 1

    def step(self, x: torch.Tensor, final: bool) -> torch.Tensor:
        h = F.layer_norm(x, *self.ln)  # (N, C)
        self.buf = torch.cat([h.new_zeros(1, h.shape[1]), h]) if self.buf is None else torch.cat([self.buf, h])
        self.n_in += x.shape[0]
        target = -(-self.n_in // 2) if final else self.n_in // 2  # at the end: halve(), as the whole file
        Q = target - self.n_out
        if Q <= 0:
            return x[:0]
        seg = F.pad(self.buf[: 2 * Q + 1], (0, 0, 0, 2 * Q + 1 - min(2 * Q + 1, self.buf.shape[0])))
        C = seg.shape[1]
        windows = seg.unfold(0, 3, 2).transpose(1, 2).reshape(Q, 3 * C)  # (Q, 3C): inputs 2j − 1 .. 2j + 1
        y = _affine(windows, self.w_conv)  # (Q, C), the stride-2 convolution
        self.buf = self.buf[2 * Q :]
        self.n_out = target
        return y


class StreamingEncoder:
    """Turns blocks of feature frames into unit ids as soon as they are final, equal to `VQVAE.encode` on
    the whole file.

    Unit u needs frames 4u − left .. 4u + right (`Encoder.receptive_field`). Each push runs only the new
    frames through the encoder: every attention layer keeps a cache of the keys/values of its last `attn_left`
    positions and holds back the positions whose `attn_right` look-ahead is still missing; each strided conv
    keeps the one input its next output shares with the last. A unit comes out as soon as its last needed
    frame has arrived. `flush` treats the input as ended (the whole file's masking) and emits the rest.
    Look-ahead: `lookahead_frames` past a unit's own four frames (times the hop, 10 ms, in ms).
    Speed: the weights (and the codebook) are packed once when the stream is made, so a stream reflects
    the model as it was then; make a new stream after changing the weights.
    """

    def __init__(self, model: VQVAE, hop_ms: float = 10.0) -> None:
        self.model = model
        self.left, self.right = model.encoder.receptive_field()
        self.hop_ms = hop_ms
        enc = model.encoder
        self._stages: list[_LayerStream | _DownsampleStream] = []  # weights packed once per stream
        for i, layers in enumerate(enc.stages):
            if i > 0:
                self._stages.append(_DownsampleStream(enc.down[i - 1]))
            self._stages += [_LayerStream(layer) for layer in layers]
        self._in = _packed(enc.in_proj)
        self._ln_f = (enc.ln_f.normalized_shape, enc.ln_f.weight, enc.ln_f.bias, enc.ln_f.eps)
        self._out = _packed(enc.out)
        cb = model.codebook.embedding.detach()  # (K, C)
        self._codes_t, self._codes_sq = cb.t().contiguous(), cb.square().sum(1)  # (C, K), (K,)
        self.reset()

    @property
    def lookahead_frames(self) -> int:
        return self.right - (STRIDE - 1)

    @property
    def lookahead_ms(self) -> float:
        return self.lookahead_frames * self.hop_ms

    @property
    def _buffer(self) -> torch.Tensor:
        """Input positions held back by the first layer (waiting for their look-ahead): (P, d_model)."""
        first = self._stages[0]
        return first.x if isinstance(first, _LayerStream) and first.x is not None else torch.zeros(0, 1)

    def reset(self) -> None:
        for stage in self._stages:
            stage.reset()
        self.n_frames = 0
        self.n_emitted = 0

    def push(self, frames: torch.Tensor) -> torch.Tensor:
        """frames (T, D) -> the newly final unit ids (n,) (possibly none)."""
        if frames.dim() != 2 or frames.shape[1] != self.model.config.input_dim:
            raise ValueError(f"expected frames (T, {self.model.config.input_dim}), got {tuple(frames.shape)}")
        self.n_frames += frames.shape[0]
        return self._run(frames, final=False)

    def flush(self) -> torch.Tensor:
        """End of input: the remaining unit ids; the stream is then reset for the next utterance."""
        codes = self._run(torch.zeros(0, self.model.config.input_dim), final=True)
        self.reset()
        return codes

    @torch.inference_mode()
    def _run(self, frames: torch.Tensor, final: bool) -> torch.Tensor:
        m, enc = self.model, self.model.encoder
        was_training = enc.training
        if was_training:  # no dropout, whatever mode the module is in (as `encode`); toggling costs ~1 ms
            enc.eval()
        try:
            x = ((frames.to(m.feat_mean) - m.feat_mean) / m.feat_std)[:, m.config.encoder_slice]
            h = _affine(x, self._in)  # (N, d)
            for stage in self._stages:
                h = stage.step(h, final)
            z = _affine(F.layer_norm(h, *self._ln_f), self._out)  # (n, code_dim)
        finally:
            if was_training:
                enc.train()
        self.n_emitted += z.shape[0]
        if not z.shape[0]:
            return torch.zeros(0, dtype=torch.long)
        # EMACodebook.nearest with the codebook's transpose and squared norms made once
        dist = z.square().sum(1, keepdim=True) - 2 * z @ self._codes_t + self._codes_sq  # (n, K)
        return dist.argmin(dim=1)


# ---------------------------------------------------------------------------------------------- front end

SPEECH_FRONTEND_KIND = "mfcc+speech_embedding"


class SpeechUnitsFrontend(nn.Module):
    """The units input with a frozen pretrained speech front end: MFCC+Δ+ΔΔ frames (T, 39), each with the
    speech_embedding frame (models/speech_embedding.py, 96-d) of its unit appended -> (T, 39 + 96).

    Unit u covers MFCC frames 4u .. 4u + 3; its embedding frame is the causal window (0.78 s) that ends at
    sample (u + 1)·640, the end of the unit's own 40-ms hop, which arrives before the Δ/ΔΔ context of the
    unit's MFCC frames does: the embedding adds no delay. The audio is zero-padded at its end to U whole hops
    (U = ceil(T / 4)) so that the last unit has a frame too; a stream pushes the same zeros when it ends.
    The embedding model is frozen: the VQ-VAE normalises its frames with the training corpus's mean/std like
    the MFCCs; `VQVAEConfig.encoder_dims` / `recon_dims` choose which part the encoder reads and the decoder
    rebuilds."""

    def __init__(self, mfcc: nn.Module, embedding: nn.Module) -> None:
        super().__init__()
        self.mfcc, self.embedding = mfcc, embedding.eval()
        hop = int(mfcc.config.hop_length)
        if embedding.hop_samples != STRIDE * hop:
            raise ValueError(f"the speech embedding's hop ({embedding.hop_samples} samples) is not one unit "
                             f"({STRIDE} x {hop} samples)")

    @property
    def config(self) -> Any:  # noqa: ANN401 - the MFCC config: the framing of the 10-ms frames
        return self.mfcc.config

    @property
    def dim(self) -> int:
        return int(self.mfcc.dim) + int(self.embedding.dim)

    @property
    def mfcc_dim(self) -> int:
        return int(self.mfcc.dim)

    def embedding_samples(self, num_frames: int) -> int:
        """Samples the embedding frames of `num_frames` MFCC frames cover: ceil(T / 4) whole hops."""
        return -(-num_frames // STRIDE) * self.embedding.hop_samples

    def combine(self, mfcc: torch.Tensor, emb: torch.Tensor, first: int = 0) -> torch.Tensor:
        """MFCC frames first .. first + t − 1 (t, 39) + embedding frames from unit first // 4 on (u, 96) ->
        (t, 135): each frame gets its unit's embedding."""
        unit = torch.arange(first, first + mfcc.shape[0]) // STRIDE - first // STRIDE  # (t,)
        return torch.cat([mfcc, emb[unit].to(mfcc.dtype)], dim=1)

    @torch.no_grad()
    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        """16-kHz wave (N,) -> (T, 39 + 96), T = the MFCC's frame count."""
        feats = self.mfcc(wave)  # (T, 39)
        need = self.embedding_samples(feats.shape[0])
        emb = self.embedding(F.pad(wave, (0, max(0, need - wave.shape[-1])))[:need], pad="causal")  # (U, 96)
        return self.combine(feats, emb)

    def to_dict(self) -> dict[str, Any]:
        """The checkpoint's `features`: {"kind": "mfcc+speech_embedding", "mfcc": ..., "speech_embedding": ...}."""
        from models.frontends import frontend_to_dict
        from models.speech_embedding import config_to_dict

        return {"kind": SPEECH_FRONTEND_KIND, "mfcc": frontend_to_dict(self.mfcc),
                "speech_embedding": config_to_dict(self.embedding.config)}


# ---------------------------------------------------------------------------------------------- units


@dataclass
class UnitsConfig:
    """A units checkpoint: VQ-VAE + codebook inverter + the speaker table both embed (index = speaker id)."""

    vqvae: VQVAEConfig = field(default_factory=VQVAEConfig)
    inverter: InverterConfig = field(default_factory=InverterConfig)
    speakers: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        v, inv = self.vqvae, self.inverter
        if inv.code_dim != v.code_dim:
            raise ValueError(f"inverter code_dim {inv.code_dim} != VQ-VAE code_dim {v.code_dim}")
        if inv.upsample != STRIDE:
            raise ValueError(f"inverter upsample {inv.upsample} != VQ-VAE stride {STRIDE}")
        if self.speakers and not len(self.speakers) == v.n_speakers == inv.n_speakers:
            raise ValueError(
                f"{len(self.speakers)} speakers named, but the VQ-VAE has {v.n_speakers} and the inverter"
                f" {inv.n_speakers} speaker embeddings"
            )


class UnitsModel(nn.Module):
    def __init__(self, config: UnitsConfig) -> None:
        super().__init__()
        self.config = config
        self.vqvae = VQVAE(config.vqvae)
        self.inverter = CodebookInverter(config.inverter)

    def speaker_id(self, speaker: str | int) -> int:
        if isinstance(speaker, int):
            if not 0 <= speaker < self.config.vqvae.n_speakers:
                raise ValueError(f"speaker id {speaker} out of range 0..{self.config.vqvae.n_speakers - 1}")
            return speaker
        try:
            return self.config.speakers.index(speaker)
        except ValueError:
            raise ValueError(f"unknown speaker {speaker!r}; known: {', '.join(self.config.speakers)}") from None

    @torch.no_grad()
    def units_to_magnitude(
        self, codes: torch.Tensor, speaker: str | int, num_frames: int | None = None
    ) -> torch.Tensor:
        """Unit ids (U,) -> linear magnitude spectrogram (T, n_fft // 2 + 1) in `speaker`'s voice."""
        vectors = self.vqvae.code_vectors(codes[codes >= 0]).unsqueeze(0)  # (1, U, C)
        spk = torch.tensor([self.speaker_id(speaker)], device=vectors.device)
        mag, _ = self.inverter(vectors, spk, num_frames=num_frames)
        return mag[0]

    @torch.no_grad()
    def resynthesize(self, feats: torch.Tensor, speaker: str | int, n_iter: int = 32) -> torch.Tensor:
        """Features (T, D) -> waveform (N,) at the inverter's sample rate, spoken by `speaker`."""
        mag = self.units_to_magnitude(self.vqvae.encode(feats), speaker, num_frames=feats.shape[0])
        return self.inverter.griffin_lim(mag, n_iter=n_iter)


def from_config_dict(d: dict[str, Any]) -> UnitsModel:
    return UnitsModel(dataclass_from_dict(UnitsConfig, d))
