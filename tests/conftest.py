"""Shared fixtures. Qt runs offscreen; a test that leaves a thread running fails."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread() -> Iterator[None]:
    """Tests use tiny models: one intra-op thread avoids oversubscribing 2 cores (up to 100x slower when busy)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True, scope="session")
def private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Built artefacts (the int8 aiSFX trunk) go to a folder of the test run, never the user's cache."""
    before = os.environ.get("EARSHOT_CACHE_DIR")
    os.environ["EARSHOT_CACHE_DIR"] = str(tmp_path_factory.mktemp("earshot-cache"))
    yield
    if before is None:
        os.environ.pop("EARSHOT_CACHE_DIR", None)
    else:
        os.environ["EARSHOT_CACHE_DIR"] = before


@pytest.fixture(autouse=True)
def private_locations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's list of library locations starts empty, in its own folder, never the user's."""
    monkeypatch.setenv("EARSHOT_LOCATIONS", str(tmp_path / "earshot-config" / "locations.json"))


@pytest.fixture(autouse=True)
def no_leftover_threads() -> Iterator[None]:
    """Fail any test that leaves a Python thread or an Earshot worker running (napari/superqt style)."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 5.0
    while True:
        left = [
            t for t in threading.enumerate()
            if t not in before and t.is_alive() and not isinstance(t, threading._DummyThread)
        ]
        runners = _active_runners()
        if not left and not runners:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"test left threads running: {[t.name for t in left]} workers: {runners}")
        _process_qt_events()
        time.sleep(0.02)


def _active_runners() -> list[str]:
    import sys

    workers = sys.modules.get("app.workers")
    return [repr(r) for r in workers.active_runners()] if workers else []


def _process_qt_events() -> None:
    import sys

    if "PySide6.QtCore" in sys.modules:
        from PySide6.QtCore import QCoreApplication

        if QCoreApplication.instance() is not None:
            QCoreApplication.processEvents()


# The data at ../shared/data is reached ONLY through these fixtures (session-scoped, so module-scoped fixtures
# can use them too); without it the tests that need it skip with the path they looked at.


@pytest.fixture(scope="session")
def fsdd() -> Path:
    """The Free Spoken Digit Dataset (metadata.csv: path, word, speaker, split, index)."""
    path = SHARED_DATA / "fsdd"
    if not (path / "metadata.csv").is_file():
        pytest.skip(f"FSDD not found at {path}")
    return path


@pytest.fixture(scope="session")
def sfx() -> Path:
    """1,403 sound effects with captions.csv (path, caption, split, source_file)."""
    path = SHARED_DATA / "sfx"
    if not (path / "captions.csv").is_file():
        pytest.skip(f"sfx corpus not found at {path}")
    return path
