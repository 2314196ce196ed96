"""The VQ-VAE's encoder fed a block of frames at a time: unit ids as soon as they are final, equal to the
whole-file `VQVAE.encode` (`StreamingEncoder(model)` makes one).

Every attention layer of the encoder sees a bounded window (models/vqvae.py), so unit u depends on frames
4u − left .. 4u + right only; the stream keeps per-layer caches of past keys/values and emits a unit once its
last needed frame has arrived. On a CPU each tensor op costs several µs of dispatch, so the weights are
packed once per stream and a block is one pass of few ops.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn as nn
import torch.nn.functional as F

if TYPE_CHECKING:
    from models.vqvae import VQVAE, Downsample, EncoderLayer


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
        self.stride = 2 ** len(enc.down)  # input frames per unit (models.vqvae.STRIDE): each Downsample halves
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
        return self.right - (self.stride - 1)

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
