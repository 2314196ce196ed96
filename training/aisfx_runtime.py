"""Fast inference for the frozen aiSFX tower: what the indexer runs (the network itself is models/aisfx.py).

Measured on the 2-core CPU this project runs on (bench/bench_aisfx_backends.py, bench/bench_sfx.py `speed`):
the conv trunk dominates (the front end is ~20x faster than it); ONNX Runtime's CPU kernels on a copy of the
trunk with each BatchNorm folded into its convolution beat torch, and its int8 kernels double that again at a
measured, small cost in quality. So:

- `fold_batchnorm(net)`: the eval-mode trunk with BN folded into the convs (same numbers, fewer passes);
- `OnnxTrunk`: that trunk exported to ONNX (in memory, dynamic batch and length) and run by onnxruntime; the
  session is built on the first call (RetrievalEmbedder.warm_up makes that part of loading the model);
- `Int8Trunk`: the same, quantised (static QDQ, calibrated on the demo library, cached per weights);
- `accelerate(encoder, backend, threads)`: sets `encoder.runner`, which the encoder uses only without autograd
  (indexing, search); training never sees it. "auto" takes int8, falling back to the float ONNX trunk, then
  to torch. EARSHOT_AISFX_BACKEND=int8|onnx|torch|auto overrides the default.
"""

from __future__ import annotations

import copy
import hashlib
import io
import logging
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.fusion import fuse_conv_bn_eval

from models.aisfx import AisfxEncoder, EmbeddingNet

BACKENDS = ("auto", "int8", "onnx", "torch")
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
                self._session = session_from_bytes(self.model_bytes(), self.threads or torch.get_num_threads())
            return self._session

    def model_bytes(self) -> bytes:
        """The ONNX model the session runs: the exported float trunk."""
        return export_onnx(self.trunk)

    def __call__(self, frames: torch.Tensor) -> torch.Tensor:
        x = frames.detach().to("cpu", torch.float32).contiguous().numpy()  # (n, T, 96)
        return torch.from_numpy(self.session().run(None, {"frames": x})[0]).to(frames.device)


class Int8Trunk(OnnxTrunk):
    """The folded trunk quantised to 8 bits (ONNX Runtime static QDQ: per-channel int8 weights, uint8
    activations), built on first use: export, then calibrate activation ranges (min/max) on the frames of the
    calibration clips (default: the demo library shipped in resources/demo), then quantise. About 2x the fp32
    trunk's speed on AVX2; the embeddings it gives are measured against fp32 in bench/bench_aisfx_backends.py."""

    name = "int8"

    def __init__(self, net: EmbeddingNet, threads: int | None = None,
                 calibration: list[torch.Tensor] | None = None) -> None:
        from onnxruntime import quantization  # noqa: F401  (fail at set-up when it is missing)

        super().__init__(net, threads)
        self.calibration = calibration

    def model_bytes(self) -> bytes:
        """The exported float trunk quantised (from the user's cache after the first time)."""
        return cached_int8(export_onnx(self.trunk), self.calibration)


DEMO = Path(__file__).resolve().parents[1] / "resources" / "demo"
CALIBRATION_SECONDS = 10.0  # the indexer's window


def int8_cache_dir() -> Path:
    from platformdirs import user_cache_dir

    return Path(os.environ.get("EARSHOT_CACHE_DIR") or user_cache_dir("earshot")) / "aisfx-int8"


def cached_int8(fp32: bytes, calibration: list[torch.Tensor] | None = None) -> bytes:
    """The int8 trunk for these fp32 weights: from the user's cache when it was built before (calibration takes a
    few seconds), else built and cached. The key covers the exported weights, the calibration set (the demo
    clips' bytes and how their frames are made, so a cache hit decodes nothing) and the onnxruntime version; a
    cached file whose checksum does not match is rebuilt, never used."""
    import onnxruntime

    from models.frontends import AisfxMelConfig

    h = hashlib.sha256(fp32)
    if calibration is None:
        h.update(f"{AisfxMelConfig()} {CALIBRATION_SECONDS}".encode())
        for clip in demo_clips():
            h.update(clip.name.encode() + clip.read_bytes())
    else:
        for f in calibration:
            h.update(f.detach().to(torch.float32).contiguous().numpy().tobytes())
    h.update(onnxruntime.__version__.encode())
    path = int8_cache_dir() / f"{h.hexdigest()[:32]}.onnx"
    check = path.with_suffix(".sha256")
    try:
        model = path.read_bytes()
        if check.read_text().strip() == hashlib.sha256(model).hexdigest():
            return model
    except OSError:
        pass
    model = quantize_int8(fp32, calibration if calibration is not None else demo_calibration_frames())
    try:  # best effort: a read-only cache only costs the calibration next time
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(model)
        os.replace(tmp, path)
        check.write_text(hashlib.sha256(model).hexdigest())
    except OSError as e:
        log.info("aiSFX: int8 trunk not cached (%s)", e)
    return model


def demo_clips(folder: Path = DEMO) -> list[Path]:
    return sorted(folder.rglob("*.wav"))


def demo_calibration_frames(folder: Path = DEMO) -> list[torch.Tensor]:
    """(T, 96) AisfxMel frames of every clip of the demo library (its first 10 s), the int8 calibration set."""
    from models.frontends import AisfxMel
    from training.audio import decode

    mel = AisfxMel()
    out = []
    for path in demo_clips(folder):
        audio = decode(path, mel.config.sample_rate).audio[: int(CALIBRATION_SECONDS * mel.config.sample_rate)]
        out.append(mel(torch.from_numpy(audio)))
    if not out:
        raise FileNotFoundError(f"{folder}: no calibration clips for the int8 aiSFX trunk")
    return out


def quantize_int8(fp32: bytes, frames: list[torch.Tensor]) -> bytes:
    """Static QDQ quantisation of the exported trunk, activation ranges from `frames` ((T, 96) each; clips
    shorter than a block padded to one, as the encoder pads them). The first conv (one input channel, ~0.3 % of
    the work) stays in float: quantising the spectrogram itself costs the most accuracy for no speed."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Frames(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter([{"frames": F.pad(f, (0, 0, 0, max(0, 100 - len(f))))[None].numpy()} for f in frames])

        def get_next(self) -> dict[str, Any] | None:
            return next(self.items, None)

    with tempfile.TemporaryDirectory(prefix="earshot-aisfx-int8-") as tmp:
        src, dst = Path(tmp) / "fp32.onnx", Path(tmp) / "int8.onnx"
        src.write_bytes(fp32)
        first_conv = next(n.name for n in onnx.load_from_string(fp32).graph.node if n.op_type == "Conv")
        quantize_static(str(src), str(dst), Frames(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        nodes_to_exclude=[first_conv])
        return dst.read_bytes()


def export_onnx(trunk: nn.Module) -> bytes:
    """The trunk as an ONNX model (opset 17; batch and length dynamic)."""
    buf = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(trunk, (torch.zeros(1, 100, 96),), buf, input_names=["frames"], output_names=["map"],
                          dynamic_axes={"frames": {0: "n", 1: "t"}, "map": {0: "n", 2: "t8"}}, opset_version=17,
                          dynamo=False)
    return buf.getvalue()


def session_from_bytes(model: bytes, threads: int) -> Any:  # onnxruntime.InferenceSession
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(1, threads)
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")  # idle threads sleep: the GUI needs a core
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def accelerate(encoder: AisfxEncoder, backend: str | None = None, threads: int | None = None) -> str:
    """Give a frozen encoder its fastest inference runner; returns the backend used ("int8", "onnx" or "torch").

    "auto" (the default) takes the int8 trunk, falling back to the fp32 ONNX trunk and then to torch if a step
    fails (a missing package, a failed export or calibration); a backend asked for by name fails at once, clearly.
    Only for a frozen tower in eval mode (the runner holds a copy of the weights as they are now)."""
    backend = backend or os.environ.get(ENV_BACKEND, "auto")
    if backend not in BACKENDS:
        raise ValueError(f"aiSFX backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
    net = encoder.embedding_net
    if backend == "torch":
        encoder.runner = TorchTrunk(net)
        return "torch"
    if backend != "auto":
        try:
            runner = Int8Trunk(net, threads) if backend == "int8" else OnnxTrunk(net, threads)
        except ImportError as e:
            raise RuntimeError(f"aiSFX backend {backend!r} needs onnxruntime and onnx ({e}); "
                               "pip install onnxruntime onnx") from None
        runner.session()  # asked for by name: fail now, clearly
        encoder.runner = runner
        return backend
    chain: list[Callable[[], Any]] = [lambda: Int8Trunk(net, threads), lambda: OnnxTrunk(net, threads),
                                      lambda: TorchTrunk(net)]
    for i, make in enumerate(chain):
        try:
            first = make()
        except ImportError:
            continue
        encoder.runner = _with_fallback(first, chain[i + 1 :])
        return first.name
    raise AssertionError("unreachable: the torch trunk needs nothing more")


def _with_fallback(runner: Any, fallbacks: list[Callable[[], Any]]) -> Any:
    """Run `runner`; if it ever fails (export, calibration, session), the next fallback for good. The fallbacks
    give the same embedding up to int8 rounding (fp32 ONNX and torch agree to float precision)."""
    state: dict[str, Any] = {"run": runner, "left": list(fallbacks)}

    def run(frames: torch.Tensor) -> torch.Tensor:
        while True:
            try:
                return state["run"](frames)
            except Exception as e:
                if not state["left"]:
                    raise
                failed = getattr(state["run"], "name", "?")
                try:
                    state["run"] = state["left"].pop(0)()
                except ImportError:
                    continue
                log.warning("aiSFX: the %s trunk failed (%s); using the %s trunk", failed, e, state["run"].name)

    run.name = runner.name  # type: ignore[attr-defined]
    return run
