"""The `earshot` command line works headless."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import soundfile as sf

from app.cli import main


def test_help_lists_subcommands() -> None:
    proc = subprocess.run([sys.executable, "-m", "app", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    for sub in ("gui", "info", "models", "probe"):
        assert sub in proc.stdout


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "earshot"
    assert script.exists(), "run `pip install -e .` (make test does)"
    proc = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("earshot ")


def test_info_json(capsys) -> None:
    assert main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert "cpu" in info["devices"] and info["device"] in info["devices"]
    assert isinstance(info["audio_input"], bool) and info["audio"]


def test_probe_reports_good_and_bad_files(tmp_path: Path, capsys) -> None:
    good = tmp_path / "tone.wav"
    sf.write(good, 0.1 * np.sin(np.arange(8000) / 8000 * 2 * np.pi * 440), 8000)
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not audio at all" * 10)
    assert main(["probe", str(good), str(bad), "--sample-rate", "16000", "--json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["ok"] and rows[0]["sample_rate"] == 16000 and abs(rows[0]["duration"] - 1.0) < 1e-3
    assert not rows[1]["ok"] and "bad.wav" in rows[1]["error"]


def test_models_lists_nothing_gracefully(capsys, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr("app.services.registry.default_models_dir", lambda: tmp_path / "a")
    monkeypatch.setattr("app.services.registry.user_models_dir", lambda: tmp_path / "b")
    assert main(["models", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"models": [], "problems": []}
