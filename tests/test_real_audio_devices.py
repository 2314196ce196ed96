"""The sound server going away, through the real stack (sounddevice -> PortAudio -> ALSA -> PulseAudio): what
the user is told is in their words, and a fresh look at the devices says they are gone instead of "in+out"."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from real_audio_stack import PulseStack, running_stack

from app.services import devices
from app.services.devices import NoAudioDeviceError, Player, Recorder, device_status


@pytest.fixture
def pulse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PulseStack]:
    yield from running_stack(tmp_path_factory)


ISOLATED = "EARSHOT_TEST_ISOLATED"


def test_the_sound_server_going_away_in_a_process_of_its_own() -> None:
    """ALSA keeps what it learnt of earlier tests' sound servers for the life of the process: the check below runs
    in a fresh one, as the app does."""
    if os.environ.get(ISOLATED):
        pytest.skip("the inner run")
    here = Path(__file__)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"{here}::{INNER}"],
                         cwd=here.parents[1], env={**os.environ, ISOLATED: "1"}, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]


INNER = "test_the_sound_server_going_away_is_said_plainly_and_seen_by_a_fresh_look"


@pytest.mark.skipif(not os.environ.get(ISOLATED), reason="runs in a process of its own (the test above)")
def test_the_sound_server_going_away_is_said_plainly_and_seen_by_a_fresh_look(pulse: PulseStack) -> None:
    pulse.add_sink("speakers")
    before = device_status(rescan=True)
    assert before.input_ok and before.output_ok and "pulse" in before.outputs
    heard: list[str] = []
    devices.add_problem_listener(heard.append)
    try:
        pulse.stop()  # the sound server goes away; PortAudio still lists what it found at start
        assert device_status().output_ok  # the stale list: what the status bar used to keep saying
        problems = []
        for start in (lambda: Recorder().start(), lambda: Player().play(np.zeros(800, np.float32), 16000)):
            try:
                start()
            except NoAudioDeviceError as e:
                problems.append(str(e))
        assert [p.split(" is ")[0] for p in problems] == ["The input device", "The output device"], problems
        for text in problems:  # whatever PortAudio said, the user reads which device and what to do
            assert "PaErrorCode" not in text and "Illegal" not in text and "Preferences" in text, text
        after = device_status(rescan=True)  # what the window does when a stream fails
        assert not (after.input_ok and after.output_ok) and "pulse" not in after.outputs, after
        assert len(heard) == len(problems) == 2
    finally:
        devices.remove_problem_listener(heard.append)
