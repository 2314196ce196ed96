"""Transformer VQ-VAE for unsupervised speech unit discovery (Tjandra, Sakti & Nakamura, ZeroSpeech 2020).

feats (B, T, D) -> normalise -> `Encoder` (Transformer layers at 10, 20 and 40 ms, strided convs between) ->
z (B, T/4, C) -> `EMACodebook` (nearest code, straight-through, EMA updates, dead-code restarts) -> `Decoder`
(residual convs conditioned on a speaker embedding) -> reconstruction. Loss = reconstruction + commitment +
smoothing (Chorowski et al. 2019). Every attention layer sees a bounded band (`attn_left`, `attn_right`), so
each unit depends on a bounded span of frames (`Encoder.receptive_field`) and models/vqvae_stream.py streams
exactly the codes of a whole-file `encode`. The units checkpoint's whole model is models/units.py. The loss
terms, the streaming look-ahead and its numbers: docs/models.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

STRIDE = 4  # two stride-2 convolutions: one unit per 40 ms at 10-ms frames


@dataclass
class VQVAEConfig:
    input_dim: int = 39  # MFCC + Δ + ΔΔ; 80 for log-mel; 39 + 96 for MFCC + speech_embedding (SpeechUnitsFrontend)
    encoder_dims: tuple[int, int] = (0, 0)  # input dims [a, b) the encoder reads; (0, 0): all of them
    recon_dims: tuple[int, int] = (0, 0)  # input dims [a, b) the decoder rebuilds; (0, 0): all of them
    recon_extra: tuple[int, ...] = ()  # more input dims the decoder rebuilds after those (e.g. MFCC c0 and Δc0)
    recon_extra_weight: float = 1.0  # weight of each recon_extra dim in the reconstruction loss (1: like the others)
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
        if self.recon_extra_weight <= 0:
            raise ValueError(f"recon_extra_weight must be positive, got {self.recon_extra_weight}")
        if any(not 0 <= d < self.input_dim for d in self.recon_extra) or \
                len(set(self.recon_index)) != len(self.recon_index):
            raise ValueError(f"recon_extra must name input dims (0..{self.input_dim - 1}) outside recon_dims, once "
                             f"each; got {tuple(self.recon_extra)}")

    @property
    def encoder_slice(self) -> slice:
        """The input dims the encoder reads."""
        return slice(*self.encoder_dims) if tuple(self.encoder_dims) != (0, 0) else slice(0, self.input_dim)

    @property
    def recon_slice(self) -> slice:
        """The input dims the decoder rebuilds."""
        return slice(*self.recon_dims) if tuple(self.recon_dims) != (0, 0) else slice(0, self.input_dim)

    @property
    def recon_index(self) -> list[int]:
        """Every input dim the decoder rebuilds, in its output's order: recon_dims, then recon_extra."""
        return list(range(self.recon_slice.start, self.recon_slice.stop)) + [int(d) for d in self.recon_extra]

    @property
    def encoder_input_dim(self) -> int:
        return self.encoder_slice.stop - self.encoder_slice.start

    @property
    def output_dim(self) -> int:
        return len(self.recon_index)


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

    def recon_weights(self, like: torch.Tensor) -> torch.Tensor:
        """(r,) loss weight of each rebuilt dim: 1, and `recon_extra_weight` for the recon_extra dims."""
        c = self.config
        w = torch.ones(c.output_dim, device=like.device, dtype=like.dtype)
        if c.recon_extra:
            w[c.output_dim - len(c.recon_extra):] = c.recon_extra_weight
        return w

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
        R = c.recon_index  # the dims the decoder rebuilds (e.g. the embedding part of its input, and its energy)
        y = self.decoder(q, speaker_ids.to(feats.device), lengths)[:, :T]  # (B, T, r) normalised
        mask = lengths_mask(lengths, T).unsqueeze(-1).to(y.dtype)  # (B, T, 1)
        y_true = x if target is None else (target.to(feats.device) - self.feat_mean) / self.feat_std  # (B, T, D)
        y_true = y_true[..., R]  # (B, T, r)
        err = (y - y_true).square() if c.recon_loss == "mse" else (y - y_true).abs()
        weights = self.recon_weights(y)  # (r,)
        recon_loss = (err * mask * weights).sum() / (mask.sum() * weights.sum()).clamp(min=1)

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

