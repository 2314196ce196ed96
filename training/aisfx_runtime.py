"""Fast inference for the frozen aiSFX tower: what the indexer runs (the network itself is models/aisfx.py).

Measured on the 2-core CPU this project runs on (bench/bench_sfx.py `speed`, every variant reported): the conv
trunk dominates (the front end is ~20x faster than it), and of the ways to run the trunk the fastest is ONNX
Runtime's CPU kernels on a copy of the trunk with each BatchNorm folded into its convolution; the torch trunk
with folded BatchNorm and channels-last weights comes next. So:

- `fold_batchnorm(net)`: the eval-mode trunk with BN folded into the convs (same numbers, fewer passes);
- `OnnxTrunk`: that trunk exported once to ONNX (in memory, dynamic batch and length) and run by onnxruntime;
  built lazily on the first call, so loading a model costs nothing until it embeds audio;
- `accelerate(encoder, backend)`: sets `encoder.runner`, which the encoder uses only without autograd
  (indexing, search); training never sees it. "auto" takes ONNX Runtime when it is installed and exports,
  else the folded torch trunk. EARSHOT_AISFX_BACKEND=torch|onnx|auto overrides the default.
"""

from __future__ import annotations

import copy
import io
import logging
import os
import threading
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.fusion import fuse_conv_bn_eval

from models.aisfx import AisfxEncoder, EmbeddingNet

BACKENDS = ("auto", "onnx", "torch")
ENV_BACKEND = "EARSHOT_AISFX_BACKEND"
log = logging.getLogger(__name__)


class FoldedTrunk(nn.Module):
    """EmbeddingNet.feature_map with BatchNorm folded into each conv: (n, T, 96) -> (n, 512, T/8)."""

    def __init__(self, net: EmbeddingNet) -> None:
        super().__init__()
        blocks = (net.conv_block1, net.conv_block2, net.conv_block3, net.conv_block4)
        self.convs = nn.ModuleList(
            fuse_conv_bn_eval(conv, bn) for b in blocks for conv, bn in ((b.conv1, b.bn1), (b.conv2, b.bn2))
        )

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        x = frames.unsqueeze(1)  # (n, 1, T, F)
        for i, conv in enumerate(self.convs):
            x = F.relu(conv(x))
            if i in (1, 3, 5):  # end of conv blocks 1-3: 2x2 max pooling
                x = F.max_pool2d(x, 2)
        return x.mean(dim=3)  # (n, 512, T/8)


def fold_batchnorm(net: EmbeddingNet, channels_last: bool = True) -> FoldedTrunk:
    trunk = FoldedTrunk(copy.deepcopy(net).eval()).eval()
    for p in trunk.parameters():
        p.requires_grad_(False)
    return trunk.to(memory_format=torch.channels_last) if channels_last else trunk


class TorchTrunk:
    """The folded trunk in torch (channels-last input when its weights are)."""

    name = "torch"

    def __init__(self, net: EmbeddingNet) -> None:
        self.trunk = fold_batchnorm(net)

    def __call__(self, frames: torch.Tensor) -> torch.Tensor:
        return self.trunk(frames.float())


class OnnxTrunk:
    """The folded trunk run by ONNX Runtime on the CPU; exported on first use (a few seconds)."""

    name = "onnx"

    def __init__(self, net: EmbeddingNet, threads: int | None = None) -> None:
        import onnx  # noqa: F401  (fail here, at set-up, when either is not installed; torch's exporter needs onnx)
        import onnxruntime  # noqa: F401

        self.trunk = fold_batchnorm(net, channels_last=False)
        self.threads = threads
        self._session = None
        self._lock = threading.Lock()

    def session(self) -> Any:  # onnxruntime.InferenceSession
        with self._lock:
            if self._session is None:
                self._session = make_session(self.trunk, self.threads or torch.get_num_threads())
            return self._session

    def __call__(self, frames: torch.Tensor) -> torch.Tensor:
        x = frames.detach().to("cpu", torch.float32).contiguous().numpy()  # (n, T, 96)
        return torch.from_numpy(self.session().run(None, {"frames": x})[0]).to(frames.device)


def export_onnx(trunk: nn.Module) -> bytes:
    """The trunk as an ONNX model (opset 17; batch and length dynamic)."""
    buf = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(trunk, (torch.zeros(1, 100, 96),), buf, input_names=["frames"], output_names=["map"],
                          dynamic_axes={"frames": {0: "n", 1: "t"}, "map": {0: "n", 2: "t8"}}, opset_version=17,
                          dynamo=False)
    return buf.getvalue()


def make_session(trunk: nn.Module, threads: int) -> Any:  # onnxruntime.InferenceSession
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(1, threads)
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    return ort.InferenceSession(export_onnx(trunk), opts, providers=["CPUExecutionProvider"])


def accelerate(encoder: AisfxEncoder, backend: str | None = None, threads: int | None = None) -> str:
    """Give a frozen encoder its fastest inference runner; returns the backend used ("onnx" or "torch").

    Only for a frozen tower in eval mode (the runner holds a copy of the weights as they are now)."""
    backend = backend or os.environ.get(ENV_BACKEND, "auto")
    if backend not in BACKENDS:
        raise ValueError(f"aiSFX backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend in ("auto", "onnx"):
        try:
            runner = OnnxTrunk(encoder.embedding_net, threads)
            if backend == "onnx":
                runner.session()  # asked for by name: fail now, clearly
            encoder.runner = _with_fallback(runner, encoder.embedding_net) if backend == "auto" else runner
            return "onnx"
        except ImportError as e:
            if backend == "onnx":
                raise RuntimeError(f"aiSFX backend 'onnx' needs onnxruntime and onnx ({e}); "
                                   "pip install onnxruntime onnx") from None
    encoder.runner = TorchTrunk(encoder.embedding_net)
    return "torch"


def _with_fallback(runner: OnnxTrunk, net: EmbeddingNet) -> Any:
    """ONNX Runtime, and the torch trunk for good if the export or the session ever fails."""
    state: dict[str, object] = {"run": runner}

    def run(frames: torch.Tensor) -> torch.Tensor:
        try:
            return state["run"](frames)  # type: ignore[operator]
        except Exception as e:  # export or runtime failure: the torch path gives the same numbers
            if isinstance(state["run"], TorchTrunk):
                raise
            log.warning("aiSFX: ONNX Runtime failed (%s); using the torch trunk", e)
            state["run"] = TorchTrunk(net)
            return state["run"](frames)  # type: ignore[operator]

    run.name = "onnx"  # type: ignore[attr-defined]
    return run
