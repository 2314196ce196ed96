"""`--model X` where X exists but is no retrieval checkpoint: every library command says what is wrong with the
file (not "no model named X"), exits 2, and prints no traceback."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from app.cli.main import main
from core.checkpoints import write_safetensors
from tests.test_search_service import indexed_one_tone

ROOT = Path(__file__).resolve().parents[1]
UNITS = ROOT / "resources" / "models" / "units-mfcc.safetensors"


def _text(folder: Path) -> Path:
    path = folder / "notes.txt"
    path.write_text("these are my notes about door sounds, not a model\n" * 20)
    return path


def _empty(folder: Path) -> Path:
    path = folder / "empty.safetensors"
    path.write_bytes(b"")
    return path


def _folder(folder: Path) -> Path:
    path = folder / "models-folder"
    path.mkdir()
    return path


def _units(folder: Path) -> Path:
    return Path(shutil.copy(UNITS, folder / "my-units.safetensors"))


def _foreign(folder: Path) -> Path:  # third-party weights: a safetensors file without Earshot's metadata
    path = folder / "weights.safetensors"
    save_file({"w": np.zeros(4, np.float32)}, str(path))
    return path


def _zip(folder: Path) -> Path:  # what torch.save writes
    path = folder / "model.pt"
    path.write_bytes(b"PK\x03\x04" + bytes(200))
    return path


def _resume(folder: Path) -> Path:
    import torch

    path = folder / "run.resume.safetensors"
    write_safetensors(path, {"w": torch.zeros(2)}, {"format": "earshot-resume", "version": "2", "state": "{}"})
    return path


BAD = {  # maker -> what the message must say
    _text: "notes.txt: not a safetensors checkpoint (it is a text file)",
    _empty: "empty.safetensors: not a checkpoint (file is 0 bytes, too short)",
    _folder: "models-folder: a folder, not a checkpoint file",
    _units: "my-units.safetensors: a units model, not a retrieval model",
    _foreign: "weights.safetensors: a safetensors file without Earshot metadata",
    _zip: "model.pt: not a safetensors checkpoint (it is a zip archive: a PyTorch .pt file?)",
    _resume: "run.resume.safetensors: a training run's resume state",
}


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A one-file library indexed with a tiny model, so search and similar get as far as the model."""
    root, _ = indexed_one_tone(tmp_path_factory.mktemp("lib"))
    return root, root / "tone.wav"


def _command(name: str, root: Path, wav: Path) -> list[str]:
    return {"search": ["search", "door", "--library", str(root)],
            "similar": ["similar", str(wav), "--library", str(root)],
            "index": ["index", str(root)]}[name]


@pytest.mark.parametrize("command", ["search", "similar", "index"])
@pytest.mark.parametrize("make", list(BAD), ids=[m.__name__.strip("_") for m in BAD])
@pytest.mark.parametrize("spelled", ["bare", "path"])
def test_model_that_is_not_a_retrieval_checkpoint(indexed, tmp_path: Path, monkeypatch, capsys, command: str,
                                                  make, spelled: str) -> None:
    root, wav = indexed
    bad = make(tmp_path)
    monkeypatch.chdir(tmp_path)  # a bare name (`--model notes.txt`) is a file here, not a registry name
    spec = bad.name if spelled == "bare" else str(bad)
    capsys.readouterr()
    assert main([*_command(command, root, wav), "--model", spec]) == 2
    err = capsys.readouterr().err
    assert BAD[make] in err
    assert "no model named" not in err and "Traceback" not in err


def test_unknown_name_still_lists_the_known_models(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["index", str(tmp_path), "--model", "no-such-model"]) == 2
    assert "no model named 'no-such-model' (known: " in capsys.readouterr().err
