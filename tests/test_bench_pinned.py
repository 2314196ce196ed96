"""Issue 42 item 6: benchmarks measure the shipped models unless given `--model`, and their JSON says which.

The sweep: after a quick training run whose model was chosen with "Use this model" (a user model is the app's
default from then on), `python -m bench.fused_latency` measured that model, not the shipped default, and said so
only in a progress line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "resources" / "models" / "retrieval-default.safetensors"


@pytest.fixture
def user_default(tmp_path: Path, monkeypatch) -> Path:
    """A user model in the user models folder: the app's default retrieval model from now on."""
    from app.services.registry import ModelRegistry
    from tests.test_search_service import write_tiny_checkpoint

    folder = tmp_path / "user-models"
    path = write_tiny_checkpoint(folder, "my-quick-run")
    monkeypatch.setattr("app.services.registry.user_models_dir", lambda: folder)
    registry = ModelRegistry()
    registry.scan()
    assert registry.default_for("retrieval").name == "my-quick-run"
    return path


class Loaded(Exception):
    """Raised by a stand-in loader: which model a benchmark asked for, before any work."""


def refuse_to_load(spec, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN201
    raise Loaded(str(spec))


@pytest.mark.slow
def test_fused_latency_measures_the_shipped_model_and_says_so(user_default: Path, tmp_path: Path,
                                                             monkeypatch) -> None:
    from app.services.search.embedder import load_query_embedder
    from bench import fused_latency

    asked = []

    def tiny_tower(spec):  # noqa: ANN001, ANN202 - the shipped model asked for, a tiny one measured (cheap)
        asked.append(spec)
        return load_query_embedder(str(user_default))

    monkeypatch.setattr(fused_latency, "load_query_embedder", tiny_tower)
    out = fused_latency.main(30, tmp_path / "lib")
    assert asked == [str(SHIPPED)]
    assert out["model"] == {"name": "retrieval-default", "file": SHIPPED.name, "path": str(SHIPPED),
                            "chosen": "shipped default"}
    assert json.loads(json.dumps(out))["both"]["n"] > 0


def test_fused_latency_measures_the_model_given(user_default: Path, tmp_path: Path, monkeypatch) -> None:
    from bench import fused_latency

    monkeypatch.setattr(fused_latency, "load_query_embedder", refuse_to_load)
    with pytest.raises(Loaded, match="retrieval-passt-small.safetensors"):
        fused_latency.main(30, tmp_path / "lib", model="retrieval-passt-small")


@pytest.mark.parametrize("bench", ["index_process", "bench_names_first", "bench_search", "search_quality"])
def test_every_benchmark_that_loads_the_default_model_loads_the_shipped_one(user_default: Path, tmp_path: Path,
                                                                            monkeypatch, bench: str) -> None:
    import importlib

    module = importlib.import_module(f"bench.{bench}")
    if bench == "index_process":
        monkeypatch.setattr("app.services.search.embedder.load_embedder", refuse_to_load)
        call = lambda: module.main([str(tmp_path / "empty")])  # noqa: E731
        (tmp_path / "empty").mkdir()
    elif bench == "search_quality":
        monkeypatch.setattr("app.services.search.embedder.load_embedder", refuse_to_load)
        call = module.run
    else:
        monkeypatch.setattr(module.RetrievalEmbedder, "from_checkpoint", refuse_to_load)
        call = module.load_model if bench == "bench_search" else module.run
    with pytest.raises(Loaded) as loaded:
        call()
    assert Path(str(loaded.value)) == SHIPPED


def test_processes_a_benchmark_starts_see_no_user_models(tmp_path: Path) -> None:
    """bench_startup times `python -m app ...` as a user runs it: with the user's models hidden, the shipped one."""
    from bench import pinned
    from tests.test_search_service import write_tiny_checkpoint

    write_tiny_checkpoint(tmp_path / "home" / "earshot" / "models", "my-quick-run")
    code = "from app.services.search.embedder import resolve_model; print(resolve_model(None)[0])"
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "home")}
    which = [subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=e, capture_output=True, text=True,
                            check=True).stdout.strip()
             for e in (env, pinned.without_user_models(env, tmp_path / "bench-data"))]
    assert which == ["my-quick-run", "retrieval-default"]
