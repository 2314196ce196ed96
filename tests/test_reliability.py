"""Issue 27 (a hostile sweep): bad input anywhere gives a clear message and breaks nothing else."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from app.cli import main
from tests.test_cli import tagged_library


def nested_checkpoint(path: Path, depth: int = 20_000) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", depth) + b"[" * depth)
    return path


# ------------------------------------------------------------------------ items 3 and 4: hostile checkpoints


@pytest.mark.parametrize("command", [["search", "door"], ["similar", "doors/door_creak.wav"], ["index"]])
def test_a_nested_header_checkpoint_is_refused_with_a_message(tmp_path: Path, capsys, command: list[str]) -> None:
    """Item 3: `earshot search door --library LIB --model x.safetensors` ended in a RecursionError traceback."""
    root = tagged_library(tmp_path / "lib")
    bad = str(nested_checkpoint(tmp_path / "x.safetensors"))
    if command == ["index"]:
        argv = ["index", str(root), "--model", bad]
    else:
        target = [str(root / command[1])] if command[0] == "similar" else [command[1]]
        argv = [command[0], *target, "--library", str(root), "--model", bad]
    assert main(argv) == 2
    assert "x.safetensors: the checkpoint header is nested 20000 levels deep" in capsys.readouterr().err


def test_a_bad_user_model_is_listed_by_models_and_info_and_search_still_works(tmp_path: Path, capsys,
                                                                              monkeypatch) -> None:
    """Item 4: one such file in the user models folder broke `earshot models`, `earshot info` and every search."""
    user = tmp_path / "user-models"
    nested_checkpoint(user / "x.safetensors")
    monkeypatch.setattr("app.services.registry.user_models_dir", lambda: user)
    assert main(["models", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert "retrieval-default" in {m["name"] for m in listed["models"]}
    assert [Path(p["path"]).name for p in listed["problems"]] == ["x.safetensors"]
    assert main(["models"]) == 0
    assert "problem: " in capsys.readouterr().err
    assert main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert "retrieval-default" in info["models"]
    assert [Path(p["path"]).name for p in info["model_problems"]] == ["x.safetensors"]
    root = tagged_library(tmp_path / "lib")
    assert main(["search", "dog bark", "--library", str(root), "--json"]) == 0  # the default model, listed
    assert json.loads(capsys.readouterr().out) == []  # indexed with another model: no results, no traceback
