"""Issue 42 item 3: hostile or huge model files are refused cheaply, by name, and never become a default.

Every safetensors error (an overflowing shape, a negative offset, an unknown dtype, a cut file) is the project's
`CheckpointError` naming the file, from `read_header` before safetensors' own reader sees the file; a header over
`MAX_HEADER_BYTES` is refused from its 8-byte length; a bad file or an unreadable folder in the user models folder
is listed as a problem by `models`, `info` and the window's status bar, and the shipped default is used.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.cli.main import main
from app.services.registry import ModelRegistry, default_models_dir
from core.checkpoints import MAX_HEADER_BYTES, CheckpointError, read_header, read_metadata
from tests.test_cli import tagged_library

SHIPPED = default_models_dir() / "retrieval-default.safetensors"
PROJ = "text_proj.0.bias"  # a tensor of the shipped retrieval model that the NumPy text tower reads


def rewritten(src: Path, dst: Path, edit: Callable[[dict[str, Any]], Any], cut: int = 0) -> Path:
    """`src` with its header edited by `edit(header)` (tensor bytes kept), `cut` bytes short."""
    raw = src.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    edit(header)
    text = json.dumps(header).encode()
    dst.parent.mkdir(parents=True, exist_ok=True)
    data = struct.pack("<Q", len(text)) + text + raw[8 + n:]
    dst.write_bytes(data[:len(data) - cut])
    return dst


HOSTILE: dict[str, tuple[Callable[[dict[str, Any]], Any], int, str]] = {
    "f128": (lambda h: h[PROJ].update(dtype="F128"), 0, "unknown dtype 'F128'"),
    "negative_offset": (lambda h: h[PROJ].update(data_offsets=[-8, h[PROJ]["data_offsets"][1]]), 0,
                        "data_offsets are not two byte offsets"),
    "overflowing_shape": (lambda h: h[PROJ].update(shape=[2 ** 62, 2 ** 62]), 0, "shape overflows"),
    "float_shape": (lambda h: h[PROJ].update(shape=[512.0]), 0, "shape is not a list of sizes"),
    "wrong_size": (lambda h: h[PROJ].update(shape=[511]), 0, "is not its 2048 bytes"),
    "overlap": (lambda h: h[PROJ].update(data_offsets=[0, 2048]), 0, "damaged entry"),
    "truncated": (lambda h: None, 1000, "truncated checkpoint"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_every_safetensors_error_is_a_checkpoint_error_naming_the_file(tmp_path: Path, case: str) -> None:
    """Each of these passed the header check and made safetensors raise SafetensorError inside the text tower's
    `safe_open`: a traceback from `search` and `index`."""
    from app.services.search.embedder import load_query_embedder

    edit, cut, said = HOSTILE[case]
    path = rewritten(SHIPPED, tmp_path / f"{case}.safetensors", edit, cut)
    with pytest.raises(CheckpointError, match=f"^{case}.safetensors: .*{said}"):
        read_metadata(path)
    with pytest.raises(CheckpointError, match=f"^{case}.safetensors: "):
        load_query_embedder(str(path))


def test_stray_bytes_after_the_last_tensor_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "tail.safetensors"
    shutil.copyfile(SHIPPED, path)
    with open(path, "ab") as fh:
        fh.write(b"\0" * 16)
    with pytest.raises(CheckpointError, match="16 stray bytes after the last tensor"):
        read_header(path)


@pytest.mark.parametrize("command", ["search", "index"])
def test_search_and_index_refuse_a_hostile_model_with_a_message(tmp_path: Path, capsys, command: str) -> None:
    root = tagged_library(tmp_path / "lib")
    bad = str(rewritten(SHIPPED, tmp_path / "x.safetensors", HOSTILE["f128"][0]))
    argv = ["search", "door", "--library", str(root)] if command == "search" else ["index", str(root)]
    assert main([*argv, "--model", bad]) == 2
    err = capsys.readouterr().err
    assert "earshot: error: x.safetensors: damaged entry for tensor 'text_proj.0.bias' (unknown dtype 'F128')" \
        in err and "Traceback" not in err


def test_the_shipped_headers_fit_far_under_the_cap() -> None:
    """The cap is set by what a real checkpoint needs: the shipped ones' headers are 7-19 kB."""
    sizes = [struct.unpack("<Q", p.read_bytes()[:8])[0] for p in default_models_dir().glob("*.safetensors")]
    assert sizes and max(sizes) < 64 << 10 and MAX_HEADER_BYTES <= 8 << 20
    for p in default_models_dir().glob("*.safetensors"):
        read_header(p)  # the full entry check passes on every shipped file


def huge_header(path: Path, n: int = 95_000_000) -> Path:
    """A file whose header says it is `n` bytes of JSON, and is (the rest sparse: no disk used)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", n) + b'{"__metadata__": {"kind": "retrieval", "config": "')
        fh.truncate(8 + n + 8)
    return path


def test_a_95_mb_header_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """Under the old 100 MB cap such a header cost 11-12 GB and up to 53 s in every `search`, `index`, `similar`,
    `models` and `info`; now its 8-byte length refuses it and nothing of it is read."""
    path = huge_header(tmp_path / "huge.safetensors")
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match=r"huge.safetensors: .*a 95.0 MB header, more than the 4 MiB"):
            read_metadata(path)
        reg = ModelRegistry(folders=[(default_models_dir(), "default"), (path.parent, "user")])
        reg.scan()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak / 1e6:.1f} MB allocated to refuse it"
    assert [p.path.name for p in reg.problems] == ["huge.safetensors"]
    assert reg.default_for("retrieval").name == "retrieval-default"


def test_a_bad_user_model_is_listed_with_its_problem_and_the_shipped_default_is_used(tmp_path: Path, capsys,
                                                                                   monkeypatch) -> None:
    """An F128 file in the user models folder was listed as the user's default retrieval model and broke every
    plain search."""
    user = tmp_path / "user-models"
    rewritten(SHIPPED, user / "mine.safetensors", HOSTILE["f128"][0])
    huge_header(user / "huge.safetensors")
    monkeypatch.setattr("app.services.registry.user_models_dir", lambda: user)
    assert main(["models", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    default = [m["name"] for m in listed["models"] if m["default"] and m["kind"] == "retrieval"]
    assert default == ["retrieval-default"] and "mine" not in {m["name"] for m in listed["models"]}
    problems = {Path(p["path"]).name: p["message"] for p in listed["problems"]}
    assert set(problems) == {"mine.safetensors", "huge.safetensors"} and "F128" in problems["mine.safetensors"]
    root = tagged_library(tmp_path / "lib")
    assert main(["search", "dog bark", "--library", str(root), "--json"]) == 0  # the shipped default answers
    out = capsys.readouterr()
    assert json.loads(out.out)[0]["name"] == "animals/dog_bark.wav" and "Traceback" not in out.err


@pytest.fixture
def unreadable_user_folder(tmp_path: Path, monkeypatch) -> Path:
    """A user models folder that cannot be listed (as chmod 000 makes it for anyone but root, who runs CI)."""
    user = tmp_path / "user-models"
    user.mkdir()
    shutil.copyfile(default_models_dir() / "words-default.safetensors", user / "my-words.safetensors")
    listdir = os.listdir

    def denied(path: Any = ".") -> list[str]:  # noqa: ANN401 - os.listdir's argument
        if Path(path) == user:
            raise PermissionError(13, "Permission denied", str(path))
        return listdir(path)

    monkeypatch.setattr("app.services.registry.os.listdir", denied)
    monkeypatch.setattr("app.services.registry.user_models_dir", lambda: user)
    return user


def test_an_unreadable_user_models_folder_is_said_by_models_and_info(unreadable_user_folder: Path,
                                                                     capsys) -> None:
    """The user's models vanished without a word."""
    assert main(["models"]) == 0
    out = capsys.readouterr()
    said = f"your models folder {unreadable_user_folder} cannot be read (Permission denied); its models are not listed"
    assert f"problem: {unreadable_user_folder}: {said}" in out.err
    assert "retrieval-default" in out.out
    assert main(["info", "--json"]) == 0
    problems = json.loads(capsys.readouterr().out)["model_problems"]
    assert [Path(p["path"]) for p in problems] == [unreadable_user_folder]
    assert "cannot be read (Permission denied)" in problems[0]["message"]
