"""Model registry: lists checkpoints from header metadata, reports damaged files, loads lazily per device."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from app.services.registry import ModelRegistry
from core.checkpoints import save_checkpoint


class Lin(torch.nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.config = {"n": n}
        self.lin = torch.nn.Linear(n, 2)


def build(d: dict) -> Lin:
    return Lin(int(d["n"]))


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    shipped, user = tmp_path / "shipped", tmp_path / "user"
    shipped.mkdir()
    user.mkdir()
    save_checkpoint(shipped / "words-default.safetensors", "words", Lin(3), {"n": 3},
                    training={"metrics": {"ap": 0.9}})
    save_checkpoint(user / "my-words.safetensors", "words", Lin(4), {"n": 4})
    save_checkpoint(user / "units-a.safetensors", "units", Lin(2), {"n": 2})
    (user / "broken.safetensors").write_bytes(b"garbage!" * 3)
    (shipped / "words-default.md").write_text("# card")
    return shipped, user


def test_scan_lists_models_and_problems(folders: tuple[Path, Path]) -> None:
    shipped, user = folders
    reg = ModelRegistry(folders=[(shipped, "default"), (user, "user"), (user / "missing", "user")])
    names = {e.name: e for e in reg.scan()}
    assert set(names) == {"words-default", "my-words", "units-a"}
    assert names["words-default"].source == "default" and names["words-default"].card is not None
    assert names["words-default"].training["metrics"] == {"ap": 0.9}
    assert [e.name for e in reg.entries("units")] == ["units-a"]
    assert len(reg.problems) == 1 and reg.problems[0].path.name == "broken.safetensors"
    assert reg.default_for("words").name == "my-words"  # the user's own model wins
    assert reg.default_for("retrieval") is None
    with pytest.raises(KeyError, match="no model named 'nope'"):
        reg.get("nope")


def test_load_is_lazy_cached_and_per_device(folders: tuple[Path, Path], monkeypatch) -> None:
    shipped, user = folders
    from core import kinds

    words = kinds.KINDS["words"]
    monkeypatch.setitem(kinds.KINDS, "words", dataclasses.replace(words, builder=f"{__name__}:build"))
    reg = ModelRegistry(folders=[(shipped, "default"), (user, "user")], device="cpu")
    reg.scan()
    assert reg.loaded() == []
    model = reg.load("my-words")
    assert isinstance(model, Lin) and model.lin.in_features == 4 and not model.training
    assert reg.load("my-words") is model
    assert reg.loaded() == ["my-words"]
    reg.set_device("cpu")  # Preferences closed with nothing changed: the models stay loaded
    assert reg.loaded() == ["my-words"] and reg.load("my-words") is model
    reg.set_device("auto")
    assert reg.loaded() == [] and reg.load("my-words") is not model


def test_unavailable_device_is_refused_by_name(folders: tuple[Path, Path]) -> None:
    shipped, user = folders
    reg = ModelRegistry(folders=[(shipped, "default")], device="mps")
    reg.scan()
    if torch.backends.mps.is_available():
        pytest.skip("this machine has MPS")
    with pytest.raises(ValueError, match="'mps' is not available"):
        reg.load("words-default")


def test_a_hostile_or_unreadable_file_is_a_problem_and_the_others_are_listed(folders: tuple[Path, Path],
                                                                             monkeypatch) -> None:
    """Issue 27 item 4: one nested-JSON header in the user's folder broke the whole list (RecursionError)."""
    import struct

    shipped, user = folders
    (user / "nested.safetensors").write_bytes(struct.pack("<Q", 20000) + b"[" * 20000)
    locked = user / "locked.safetensors"
    locked.write_bytes((shipped / "words-default.safetensors").read_bytes())
    real_open = open

    def deny(file, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202 - the open() signature
        if str(file) == str(locked):
            raise PermissionError(13, "Permission denied", str(locked))
        return real_open(file, *a, **kw)

    monkeypatch.setattr("builtins.open", deny)
    reg = ModelRegistry(folders=[(shipped, "default"), (user, "user")])
    assert {e.name for e in reg.scan()} == {"words-default", "my-words", "units-a"}
    problems = {p.path.name: p.message for p in reg.problems}
    assert set(problems) == {"broken.safetensors", "nested.safetensors", "locked.safetensors"}
    assert "nested 20000 levels deep" in problems["nested.safetensors"]
    assert "Permission denied" in problems["locked.safetensors"]
