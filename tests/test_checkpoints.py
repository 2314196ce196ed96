"""Checkpoint round trip and refusal of wrong, damaged and foreign files."""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from core.checkpoints import (
    CheckpointError,
    config_from_dict,
    load_foreign_state_dict,
    load_model,
    read_checkpoint,
    read_metadata,
    save_checkpoint,
)


@dataclass
class InnerConfig:
    width: int = 8


@dataclass
class TinyConfig:
    n_in: int = 4
    n_out: int = 3
    scale: float = 1.0
    inner: InnerConfig = field(default_factory=InnerConfig)
    names: tuple[str, ...] = ("a", "b")


class Tiny(torch.nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.config = config
        self.proj = torch.nn.Linear(config.n_in, config.inner.width)
        self.out = torch.nn.Linear(config.inner.width, config.n_out)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.proj(x))) * self.config.scale


def build(d: dict) -> Tiny:
    return Tiny(config_from_dict(TinyConfig, d))


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Path, Tiny]:
    torch.manual_seed(0)
    model = Tiny(TinyConfig(n_in=5, scale=2.0, inner=InnerConfig(width=6)))
    path = save_checkpoint(tmp_path / "m.safetensors", "words", model, model.config,
                           features={"kind": "mfcc", "sample_rate": 16000},
                           training={"steps": 12, "metrics": {"ap": 0.5}})
    return path, model


def test_round_trip_rebuilds_model_from_file_alone(saved: tuple[Path, Tiny]) -> None:
    path, model = saved
    loaded, ckpt = load_model(path, kind="words", builder=build)
    assert isinstance(loaded, Tiny) and loaded.config == model.config
    assert loaded.config.inner.width == 6 and loaded.config.names == ("a", "b")
    x = torch.randn(2, 5)
    torch.testing.assert_close(loaded(x), model.eval()(x))
    assert ckpt.features == {"kind": "mfcc", "sample_rate": 16000}
    assert ckpt.training["metrics"] == {"ap": 0.5}
    meta = read_metadata(path)
    assert meta["kind"] == "words" and meta["earshot_version"]


def test_wrong_kind_is_refused_by_name(saved: tuple[Path, Tiny]) -> None:
    path, _ = saved
    with pytest.raises(CheckpointError, match="'words' checkpoint, but a 'units' model"):
        read_checkpoint(path, kind="units")


def test_truncated_file_is_refused(saved: tuple[Path, Tiny], tmp_path: Path) -> None:
    path, _ = saved
    data = path.read_bytes()
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(data[: len(data) - 40])
    with pytest.raises(CheckpointError, match="truncated"):
        read_checkpoint(cut)
    cut.write_bytes(data[:5])
    with pytest.raises(CheckpointError, match="too short"):
        read_checkpoint(cut)


@pytest.mark.parametrize("content", [b"", b"RIFF0000WAVEfmt " + bytes(200), b"\x00" * 8 + b"{}"])
def test_foreign_or_empty_files_are_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.safetensors"
    path.write_bytes(content)
    with pytest.raises(CheckpointError):
        read_checkpoint(path)


def test_pickle_file_is_refused_without_unpickling(tmp_path: Path) -> None:
    path = tmp_path / "evil.safetensors"
    path.write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(CheckpointError, match="not a safetensors checkpoint"):
        read_checkpoint(path)


def test_plain_safetensors_without_metadata_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "plain.safetensors"
    save_file({"w": torch.zeros(2)}, str(path))
    with pytest.raises(CheckpointError, match="without Earshot metadata"):
        read_metadata(path)


def test_shape_mismatch_missing_and_unexpected_are_named(saved: tuple[Path, Tiny], tmp_path: Path) -> None:
    path, model = saved
    ckpt = read_checkpoint(path)
    tensors = dict(ckpt.tensors)
    tensors["out.weight"] = torch.zeros(7, 6)
    del tensors["proj.bias"]
    tensors["extra.weight"] = torch.zeros(1)
    bad = tmp_path / "bad.safetensors"
    save_file(tensors, str(bad), metadata={"kind": "words", "config": json.dumps(ckpt.config)})
    with pytest.raises(CheckpointError) as err:
        load_model(bad, builder=build)
    message = str(err.value)
    assert "proj.bias" in message and "extra.weight" in message and "out.weight (7, 6) != (3, 6)" in message


def test_bad_config_is_refused(tmp_path: Path) -> None:
    model = Tiny(TinyConfig())
    path = tmp_path / "c.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path),
              metadata={"kind": "words", "config": json.dumps({"n_in": 4, "colour": "red"})})
    with pytest.raises(CheckpointError, match="unknown config field.*colour"):
        load_model(path, builder=build)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path),
              metadata={"kind": "words", "config": "{not json"})
    with pytest.raises(CheckpointError, match="not valid JSON"):
        read_metadata(path)
    save_file({"w": torch.zeros(1)}, str(path), metadata={"kind": "spaceship", "config": "{}"})
    with pytest.raises(CheckpointError, match="unknown checkpoint kind"):
        read_metadata(path)


def test_config_type_errors_are_named() -> None:
    with pytest.raises(CheckpointError, match="TinyConfig.n_in: expected int"):
        config_from_dict(TinyConfig, {"n_in": "four"})
    assert config_from_dict(TinyConfig, {"scale": 3}).scale == 3.0  # JSON ints are fine for floats


def test_save_is_atomic_and_keeps_previous_file_on_failure(saved: tuple[Path, Tiny], monkeypatch) -> None:
    path, model = saved
    before = path.read_bytes()

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("core.checkpoints.save_file", fail)
    with pytest.raises(OSError, match="No space"):
        save_checkpoint(path, "words", model, model.config)
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_unknown_kind_cannot_be_saved(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown checkpoint kind"):
        save_checkpoint(tmp_path / "x.safetensors", "pizza", Tiny(TinyConfig()), TinyConfig())


def test_foreign_pt_loads_with_weights_only_and_refuses_code(tmp_path: Path) -> None:
    good = tmp_path / "official.pt"
    torch.save({"model": {"cls_token": torch.zeros(1, 1, 4)}}, good)
    assert set(load_foreign_state_dict(good)) == {"cls_token"}

    class Evil:
        def __reduce__(self):
            return (print, ("owned",))

    evil = tmp_path / "evil.pt"
    with open(evil, "wb") as f:
        pickle.dump({"x": Evil()}, f)
    with pytest.raises(CheckpointError, match="refused"):
        load_foreign_state_dict(evil)


def test_external_prefixes_are_left_out_and_rebuilt(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Tiny(TinyConfig())
    path = save_checkpoint(tmp_path / "x.safetensors", "words", model, model.config, exclude_prefixes=["proj."])
    ckpt = read_checkpoint(path)
    assert ckpt.external == ["proj."] and not any(k.startswith("proj.") for k in ckpt.tensors)
    torch.manual_seed(0)  # the builder makes the same `proj` again, as a model does from its shipped weights
    loaded, _ = load_model(path, kind="words", builder=build)
    x = torch.randn(2, 4)
    torch.testing.assert_close(loaded(x), model.eval()(x))
    torch.manual_seed(1)  # a different `proj`: kept from the builder, not refused, not overwritten
    other, _ = load_model(path, kind="words", builder=build)
    assert not torch.equal(other.proj.weight, model.proj.weight)
    torch.testing.assert_close(other.out.weight, model.out.weight)


def _raw_safetensors(path: Path, header: bytes) -> Path:
    import struct

    path.write_bytes(struct.pack("<Q", len(header)) + header)
    return path


@pytest.mark.parametrize("header", [b"[" * 20_000, b'{"a":' * 20_000, b'{"__metadata__": ' + b"[" * 5000 + b"]" * 5000
                                    + b"}"])
def test_deeply_nested_header_is_refused_not_a_recursion_error(tmp_path: Path, header: bytes) -> None:
    """Issue 27 item 3: `struct.pack('<Q', 20000) + b'[' * 20000` crashed search, index, eval and train --resume."""
    from core.checkpoints import safetensors_metadata

    path = _raw_safetensors(tmp_path / "x.safetensors", header)
    for read in (read_metadata, safetensors_metadata, read_checkpoint, load_foreign_state_dict):
        with pytest.raises(CheckpointError, match="nested"):
            read(path)


def test_nested_metadata_string_is_refused_by_name(tmp_path: Path) -> None:
    meta = {"kind": "words", "config": "[" * 100_000 + "]" * 100_000}
    path = _raw_safetensors(tmp_path / "m.safetensors", json.dumps({"__metadata__": meta}).encode())
    with pytest.raises(CheckpointError, match="'config'.*nested"):
        read_metadata(path)


@pytest.mark.parametrize("metadata", ['["kind", "words"]', '{"kind": 3}', '"words"'])
def test_metadata_that_is_not_an_object_of_strings_is_refused(tmp_path: Path, metadata: str) -> None:
    path = _raw_safetensors(tmp_path / "m.safetensors", f'{{"__metadata__": {metadata}}}'.encode())
    with pytest.raises(CheckpointError, match="__metadata__"):
        read_metadata(path)


def test_unreadable_checkpoint_is_a_checkpoint_error(saved: tuple[Path, Tiny], monkeypatch) -> None:
    path, _ = saved
    real_open = open

    def deny(file, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202 - the open() signature
        if str(file) == str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(file, *a, **kw)

    monkeypatch.setattr("builtins.open", deny)
    with pytest.raises(CheckpointError, match="cannot read"):
        read_metadata(path)
