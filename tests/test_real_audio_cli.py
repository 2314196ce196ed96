"""`earshot similar --record`: search a library by a sound made into the microphone.

With the real audio stack (real_audio_stack.py) a demo clip is played into a null sink while the command
records its monitor: the command is a separate process that finds the microphone the way any program does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from real_audio_stack import PulseStack, running_stack

from app.cli.main import main
from app.services import devices
from app.services.library.library import Library
from core.audio import decode, trim_silence

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "resources" / "demo"
CLIPS = ["Animals/sheep-bleat.wav", "Animals/bees-buzzing.wav", "Machines/fan-whir.wav",
         "Phones/telephone-ringing-tone.wav", "Water/bubbles-rising-underwater.wav", "Weapons/sword-hit.wav"]


@pytest.fixture
def pulse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PulseStack]:
    yield from running_stack(tmp_path_factory)


def earshot(*args: str) -> subprocess.Popen[str]:
    env = os.environ | {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "app.cli", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def indexed_library(tmp_path: Path) -> Path:
    lib = tmp_path / "library"
    for clip in CLIPS:
        (lib / clip).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DEMO / clip, lib / clip)
    index = earshot("index", str(lib), "--json")
    out, err = index.communicate(timeout=300)
    assert index.returncode == 0, err
    assert json.loads(out)["embedded"] == len(CLIPS)
    return lib


@pytest.mark.slow
def test_similar_to_a_recorded_sound_finds_that_sound(pulse: PulseStack, tmp_path: Path) -> None:
    pulse.add_sink("speakers", rate=32000)
    lib = indexed_library(tmp_path)
    saved = tmp_path / "my sound.wav"
    run = earshot("similar", "--record", "3", "--save", str(saved), "--library", str(lib), "--json", "-k", "3")
    assert run.stderr is not None
    said = []
    for line in run.stderr:  # play the sound when the command says so, as a person would
        said.append(line)
        if "make the sound now" in line:
            break
    clip = decode(DEMO / "Animals" / "sheep-bleat.wav")
    pulse.play("speakers", clip.audio, clip.sample_rate)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0, "".join(said) + err
    hits = json.loads(out)
    assert [Path(h["path"]).relative_to(lib).as_posix() for h in hits][0] == "Animals/sheep-bleat.wav"
    assert hits[0]["score"] > 0.9 > hits[1]["score"]  # the recording is that clip, trimmed: nearly its vector
    rec = decode(saved)  # kept, and trimmed to the sound
    assert rec.duration == pytest.approx(len(trim_silence(clip.audio, sample_rate=32000)) / 32000, abs=0.1)
    assert f"saved to {saved}" in err and "s before trimming the silence" in err


def test_similar_record_without_a_microphone_says_so(monkeypatch, tmp_path: Path, capsys) -> None:
    none = devices.DeviceStatus(False, True, "no audio input device (microphone) found")
    monkeypatch.setattr(devices, "device_status", lambda: none)
    Library.open(tmp_path).close()  # an (empty) indexed library: a folder never indexed is refused before recording
    before = sorted(tmp_path.rglob("*"))
    assert main(["similar", "--record", "2", "--library", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "similar --record: no audio input device (microphone) found" in err and "Traceback" not in err
    assert sorted(tmp_path.rglob("*")) == before  # nothing written
    (tmp_path / "never").mkdir()
    assert main(["similar", "--record", "2", "--library", str(tmp_path / "never")]) == 2
    assert "has not been indexed yet" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "message"), [
    (["--record", "0.1"], "a recording lasts from 0.2 to 30 seconds, not 0.1"),
    (["x.wav", "--record", "2"], "give an audio file or --record, not both"),
    (["x.wav", "--save", "y.wav"], "--save keeps a recording: use it with --record"),
    ([], "give an audio file, or --record SECONDS to record one"),
])
def test_similar_record_arguments_are_checked(args: list[str], message: str, tmp_path: Path, capsys) -> None:
    assert main(["similar", *args, "--library", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
