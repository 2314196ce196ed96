"""Fast inference for the frozen aiSFX tower: what the indexer runs (the network itself is models/aisfx.py).

The conv trunk dominates, and ONNX Runtime beats torch on it on the CPUs this runs on (int8 doubles that again
at a measured, small cost in quality; bench/bench_aisfx_backends.py). `fold_batchnorm` folds BN into the convs;
`OnnxTrunk` runs that trunk as four ONNX sessions (`padded`: a short clip only as far as its real frames reach);
`Int8Trunk` is the same quantised; `accelerate(encoder, backend, threads)` sets the runner used without
autograd ("auto": int8, then float ONNX, then torch; EARSHOT_AISFX_BACKEND overrides). The measurements and
each runner in detail: docs/runtime.md.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import importlib.util
import io
import itertools
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.fusion import fuse_conv_bn_eval

from core.checkpoints import weights_digest
from core.files import cache_root
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
    """The folded trunk run by ONNX Runtime on the CPU; exported on first use (a few seconds). Its graph runs as
    its four conv blocks (`split_blocks`), one session each (as fast as the whole graph in one), so `padded` can
    stop each block where the real frames of a short clip stop reaching."""

    name = "onnx"

    def __init__(self, net: EmbeddingNet, threads: int | None = None) -> None:
        require("onnx", "onnxruntime")  # fail here, at set-up, when either is missing (torch's exporter needs onnx)

        self.trunk = fold_batchnorm(net, channels_last=False)
        self.threads = threads
        self._sessions: list[Any] | None = None  # one per conv block
        self._zero: dict[int, list[np.ndarray]] = {}  # block outputs of an all-zero input, per input length
        self._lock = threading.Lock()

    def sessions(self) -> list[Any]:  # [onnxruntime.InferenceSession] x 4, one per conv block
        with self._lock:
            if self._sessions is None:
                threads = self.threads or torch.get_num_threads()
                self._sessions = [session_from_bytes(m, threads) for m in split_blocks(self.model_bytes())]
            return self._sessions

    def model_bytes(self) -> bytes:
        """The ONNX model the sessions run: the exported float trunk."""
        return export_onnx(self.trunk)

    def __call__(self, frames: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(self._run_whole(frames.detach().to("cpu", torch.float32).contiguous().numpy())
                                ).to(frames.device)  # (n, 512, T/8)

    def _run_whole(self, x: np.ndarray) -> np.ndarray:
        """(n, T, 96) -> (n, 512, T/8) through the four blocks."""
        for session in self.sessions():
            x = _run(session, x)
        return x

    def padded(self, frames: torch.Tensor, counts: Sequence[int]) -> torch.Tensor:
        """(n, W, 96) frames, each row zero after its real frame count -> (n, 512, W/8): what `__call__` gives,
        with less work. A pair of 3x3 convs changes its output only within 2 columns of where its input changes,
        so past the real frames' reach every block's output equals that of an all-zero input (computed once per
        W): each block runs only as far as that reach (+ what its 2x2 pooling needs). Each short row runs alone,
        cut at its own length (the trunk's speed per frame does not depend on the batch). Exact: the same kernels
        on the same numbers (tests/test_aisfx.py)."""
        x = frames.detach().to("cpu", torch.float32).contiguous().numpy()
        zero = self.zero_outputs(x.shape[1])
        out = np.empty((len(x), *zero[-1].shape[1:]), dtype=np.float32)
        full = [r for r, n in enumerate(counts) if n + REACH >= x.shape[1]]  # nothing to skip
        if full:
            out[full] = self._run_whole(x[full])
        for r, n in enumerate(counts):
            if n + REACH < x.shape[1]:
                out[r] = self._run_truncated(x[r : r + 1], int(n), zero)[0]
        return torch.from_numpy(out).to(frames.device)

    def _run_truncated(self, x: np.ndarray, real: int, zero: list[np.ndarray]) -> np.ndarray:
        """(n, W, 96) frames, zero from column `real` on -> (n, 512, W/8). Invariant: each block's input equals
        the all-zero input's from column `real` on."""
        sessions = self.sessions()
        for k, (session, z) in enumerate(zip(sessions, zero, strict=True)):
            width = x.shape[1 if k == 0 else 2]  # (n, T, 96) into the first block, (n, C, T, F) after
            cut = min(width, real + REACH)  # output columns < real + 3 are exact; pooled: < ceil((real + 2) / 2)
            y = _run(session, np.ascontiguousarray(x[:, :cut] if k == 0 else x[:, :, :cut]))
            if cut == width:  # the whole input was run: its output is exact, and so is everything after it
                x, real = y, y.shape[2]
                continue
            real = real + 2 if k == len(sessions) - 1 else (real + 3) // 2  # where this output starts to equal z
            x = np.concatenate([y[:, :, :real], np.repeat(z[:, :, real:], len(y), axis=0)], axis=2)
        return x

    def zero_outputs(self, width: int) -> list[np.ndarray]:
        """Every block's output for one all-zero input of `width` frames: [(1, C, T_k, F_k)] x 3, (1, 512, T/8)."""
        with self._lock:
            cached = self._zero.get(width)
        if cached is None:
            x, cached = np.zeros((1, width, 96), dtype=np.float32), []
            for session in self.sessions():
                x = _run(session, x)
                cached.append(x)
            with self._lock:
                self._zero[width] = cached
        return cached


def require(*modules: str) -> None:
    """ImportError unless every module can be imported; found without importing them (onnx and the quantisation
    tools are needed only to build the int8 graph, not to run a cached one)."""
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # a missing parent package
            found = False
        if not found:
            raise ImportError(f"No module named {name!r}")


REACH = 5  # input columns a conv block runs past the last one that differs from an all-zero input


ROWS_PER_RUN = 1  # rows per session call: the trunk's speed per frame does not depend on the batch, its
# activations' memory does (the first block's output is ~25 MB per 10-s window)


def _run(session: Any, x: np.ndarray) -> np.ndarray:
    name = session.get_inputs()[0].name
    if len(x) <= ROWS_PER_RUN:
        return session.run(None, {name: x})[0]
    return np.concatenate([session.run(None, {name: x[i:i + ROWS_PER_RUN]})[0]
                           for i in range(0, len(x), ROWS_PER_RUN)])


def split_blocks(model: bytes) -> list[bytes]:
    """The trunk's ONNX graph cut into its four conv blocks, at the tensors between them: each max pooling's
    output, or in an int8 graph its quantised form (so blocks pass uint8 and keep their fused int8 pooling).
    The pieces are the graph's own nodes, so they compute exactly what the whole graph does."""
    import onnx

    m = onnx.load_from_string(model)
    nodes = list(m.graph.node)
    producer = {name: node for node in nodes for name in node.output}
    consumer = {name: node for node in nodes for name in node.input}
    cuts = []
    for node in nodes:
        if node.op_type == "MaxPool":
            after = consumer.get(node.output[0])
            cuts.append(after.output[0] if after is not None and after.op_type == "QuantizeLinear" else node.output[0])
    names = [m.graph.input[0].name, *cuts, m.graph.output[0].name]
    return [_subgraph(m, producer, a, b).SerializeToString() for a, b in itertools.pairwise(names)]


def _subgraph(m: Any, producer: dict[str, Any], source: str, target: str) -> Any:  # onnx.ModelProto
    """The nodes that compute tensor `target` from tensor `source` (and initializers), as a model of its own."""
    import onnx
    from onnx import helper

    keep, stack = set(), [target]
    while stack:  # walk back from the target; stop at the source and at initializers (no producer)
        node = producer.get(stack.pop())
        if node is not None and id(node) not in keep and source not in node.output:
            keep.add(id(node))
            stack.extend(node.input)
    nodes = [n for n in m.graph.node if id(n) in keep]  # in the graph's (topological) order
    used = {name for n in nodes for name in n.input}
    inits = {t.name: t for t in m.graph.initializer}

    def value(name: str) -> Any:  # uint8 after a QuantizeLinear (its zero point's type), else float
        node = producer.get(name)
        if node is not None and node.op_type == "QuantizeLinear":
            return helper.make_tensor_value_info(name, inits[node.input[2]].data_type, None)
        return helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)

    inner = {name for n in nodes for name in n.output} - {target}
    graph = helper.make_graph(nodes, f"{source}->{target}", [value(source)], [value(target)],
                              [inits[name] for name in sorted(used & inits.keys())],
                              value_info=[v for v in m.graph.value_info if v.name in inner])  # shapes: ORT needs them
    # to fuse and to change layout as in the whole graph
    return helper.make_model(graph, opset_imports=m.opset_import, ir_version=m.ir_version)


class Int8Trunk(OnnxTrunk):
    """The folded trunk quantised to 8 bits (ONNX Runtime static QDQ: per-channel int8 weights, uint8
    activations), built on first use: export, then calibrate activation ranges (min/max) on the frames of the
    calibration clips (default: the demo library shipped in resources/demo), then quantise. About 2x the fp32
    trunk's speed on AVX2; the embeddings it gives are measured against fp32 in bench/bench_aisfx_backends.py."""

    name = "int8"

    def __init__(self, net: EmbeddingNet, threads: int | None = None,
                 calibration: list[torch.Tensor] | None = None) -> None:
        require("onnxruntime.quantization")
        super().__init__(net, threads)
        self.calibration = calibration

    def model_bytes(self) -> bytes:
        """The exported float trunk quantised (from the user's cache after the first time: then nothing is
        exported, so torch's ONNX exporter is never imported and start-up is a second sooner)."""
        return cached_int8(self.trunk, self.calibration)


DEMO = Path(__file__).resolve().parents[1] / "resources" / "demo"
CALIBRATION_SECONDS = 10.0  # the indexer's window


def int8_cache_dir() -> Path:
    return cache_root() / "aisfx-int8"


def trunk_key(trunk: nn.Module) -> hashlib._Hash:
    """What the exported graph is a function of: the folded trunk's tensors, the export settings and the
    exporter's version (torch). Hashing 20 MB of weights takes ~10 ms; exporting them, ~1 s and ~90 MB."""
    return weights_digest(trunk, f"{EXPORT_SETTINGS} torch {torch.__version__}")


def cached_int8(trunk: nn.Module, calibration: list[torch.Tensor] | None = None) -> bytes:
    """The int8 graph of this folded trunk: from the user's cache when it was built before (export and
    calibration take a few seconds), else exported, quantised and cached. The key covers the trunk's weights and
    how they are exported (`trunk_key`), the calibration set (the demo clips' bytes and how their frames are made,
    so a cache hit decodes nothing) and the onnxruntime version; a cached file whose checksum does not match is
    rebuilt, never used."""
    import onnxruntime

    from models.frontends import AisfxMelConfig

    h = trunk_key(trunk)
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
    model = quantize_int8(export_onnx(trunk), calibration if calibration is not None else demo_calibration_frames())
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
    from core.audio import decode
    from models.frontends import AisfxMel

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
        with _no_quantiser_advice():
            quantize_static(str(src), str(dst), Frames(), quant_format=QuantFormat.QDQ, per_channel=True,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                            nodes_to_exclude=[first_conv])
        return dst.read_bytes()


class _QuantiserAdvice(logging.Filter):
    """Drops the records onnxruntime's quantiser logs through the root logger itself ("Please consider to run
    pre-processing before quantization ..."): advice to whoever calls it, not news for the user."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not ("onnxruntime" in record.pathname and "quantization" in record.pathname)


@contextlib.contextmanager
def _no_quantiser_advice() -> Iterator[None]:
    """Keep the quantiser's advice off standard error, and the root logger as it was: its `logging.warning` calls
    also install a stderr handler on an unconfigured root logger (basicConfig), through which every later warning
    of any library would print as "WARNING:root:..."."""
    root = logging.getLogger()
    handlers, advice = list(root.handlers), _QuantiserAdvice()
    root.addFilter(advice)
    try:
        yield
    finally:
        root.removeFilter(advice)
        for h in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(h)


EXPORT_SETTINGS = "opset 17, dynamic n/t, TorchScript exporter, v1"  # change with export_onnx: the int8 cache key


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
    opts.enable_cpu_mem_arena = False
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")  # idle threads sleep: the GUI needs a core
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def accelerate(encoder: AisfxEncoder, backend: str | None = None, threads: int | None = None) -> str:
    """Give a frozen encoder its fastest inference runner; returns the backend used ("int8", "onnx" or "torch").

    "auto" (the default) takes the int8 trunk, falling back to the fp32 ONNX trunk and then to torch if a step
    fails (a missing package, a failed export or calibration); a backend asked for by name fails at once, clearly.
    Only for a frozen tower in eval mode (the runner holds a copy of the weights as they are now). The ONNX
    runners are CPU runners: a tower on a GPU (or any device but the CPU) keeps torch under "auto", and asking
    for one of them by name there is an error, not a silent move of the work to the CPU."""
    backend = backend or os.environ.get(ENV_BACKEND, "auto")
    if backend not in BACKENDS:
        raise ValueError(f"aiSFX backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
    net = encoder.embedding_net
    device = next(net.parameters()).device
    if device.type != "cpu" and backend not in ("auto", "torch"):
        raise ValueError(f"aiSFX backend {backend!r} runs on the CPU; this tower is on {device} (use torch or auto)")
    if backend == "torch" or device.type != "cpu":
        encoder.runner = TorchTrunk(net)
        return "torch"
    if backend != "auto":
        try:
            runner = Int8Trunk(net, threads) if backend == "int8" else OnnxTrunk(net, threads)
            runner.sessions()  # asked for by name: fail now, clearly (an install found but broken fails here)
        except ImportError as e:
            raise RuntimeError(f"aiSFX backend {backend!r} needs onnxruntime and onnx ({e}); "
                               "pip install onnxruntime onnx") from None
        encoder.runner = runner
        return backend
    chain: list[Callable[[], Any]] = [lambda: Int8Trunk(net, threads), lambda: OnnxTrunk(net, threads),
                                      lambda: TorchTrunk(net)]
    for i, make in enumerate(chain):
        try:
            first = make()
        except ImportError:
            continue
        encoder.runner = Fallback(first, chain[i + 1 :])
        return first.name
    raise AssertionError("unreachable: the torch trunk needs nothing more")


class Fallback:
    """Runs `runner`; if it ever fails (export, calibration, session), the next fallback for good. The fallbacks
    give the same embedding up to int8 rounding (fp32 ONNX and torch agree to float precision). Thread-safe: the
    embedder runs the tower on several threads at once, and a failure seen by two of them moves on once."""

    def __init__(self, runner: Any, fallbacks: list[Callable[[], Any]]) -> None:
        self.runner, self.left, self.name = runner, list(fallbacks), runner.name
        self._lock = threading.Lock()

    def __call__(self, frames: torch.Tensor) -> torch.Tensor:
        return self._first_working(lambda r: r(frames))

    def padded(self, frames: torch.Tensor, counts: Sequence[int]) -> torch.Tensor:
        return self._first_working(lambda r: r.padded(frames, counts) if hasattr(r, "padded") else r(frames))

    def _first_working(self, call: Callable[[Any], torch.Tensor]) -> torch.Tensor:
        while True:
            runner = self.runner
            try:
                return call(runner)
            except Exception as e:
                with self._lock:
                    if self.runner is not runner:  # another thread moved on meanwhile: try its choice
                        continue
                    if not self.left:
                        raise
                    try:
                        self.runner = self.left.pop(0)()
                    except ImportError:
                        continue
                    log.warning("aiSFX: the %s trunk failed (%s); using the %s trunk", getattr(runner, "name", "?"),
                                e, self.runner.name)
