"""Layer rules from DESIGN.md: models/ and training/ never import Qt or app/; models/ stays pure PyTorch."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STDLIB_OK = {"__future__", "dataclasses", "math", "typing", "collections", "functools", "itertools", "pathlib",
             "importlib", "json", "os", "re", "string", "unicodedata", "warnings", "logging", "contextlib",
             "enum", "abc", "types", "copy", "random", "struct", "tempfile", "threading", "time", "csv",
             "hashlib", "sys", "shutil", "subprocess", "signal", "datetime", "platform", "io", "bisect",
             "heapq", "statistics", "argparse", "socket", "traceback", "weakref", "queue", "glob", "uuid"}
MODELS_OK = {"torch", "torchaudio", "transformers", "numpy", "models"} | STDLIB_OK
FORBIDDEN_EVERYWHERE_BELOW_APP = {"PySide6", "PyQt5", "PyQt6", "pyqtgraph", "app", "sounddevice"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def python_files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("path", python_files("models") + python_files("training"), ids=lambda p: p.name)
def test_models_and_training_never_import_qt_or_app(path: Path) -> None:
    bad = imported_modules(path) & FORBIDDEN_EVERYWHERE_BELOW_APP
    assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


@pytest.mark.parametrize("path", python_files("models"), ids=lambda p: p.name)
def test_models_import_only_torch_family(path: Path) -> None:
    extra = imported_modules(path) - MODELS_OK
    assert not extra, f"{path.relative_to(ROOT)} imports {sorted(extra)}; models/ may use only {sorted(MODELS_OK)}"


def test_services_have_no_widgets() -> None:
    for path in python_files("app/services"):
        bad = imported_modules(path) & {"PySide6", "pyqtgraph"}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}: services must not use Qt"


@pytest.mark.parametrize("path", python_files("app/ui"), ids=lambda p: p.name)
def test_widgets_never_call_torch_faiss_or_sounddevice(path: Path) -> None:
    bad = imported_modules(path) & {"torch", "faiss", "sounddevice", "torchaudio", "models", "training"}
    assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}: go through services and workers"


def test_the_checker_catches_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from PySide6.QtCore import QObject\nimport app.workers\nfrom . import sibling\n")
    assert imported_modules(bad) == {"PySide6", "app"}
