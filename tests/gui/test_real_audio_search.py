"""Search by recording in the Search tab, through the real audio stack (real_audio_stack.py): a demo clip is
played into a PulseAudio null sink while the tab's Record button records the sink's monitor; the results
are the sounds like it. The tab's own device check and Recorder are used unchanged."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from real_audio_stack import PulseStack, running_stack
from test_search_tab import NO_AUDIO, open_and_index, tiny_registry

from app.services.devices import device_status
from app.services.registry import ModelRegistry
from app.ui.search_tab import SearchTab
from core.audio import decode, trim_silence

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo"
CLIPS = ["Animals/sheep-bleat.wav", "Animals/bees-buzzing.wav", "Machines/fan-whir.wav",
         "Phones/telephone-ringing-tone.wav", "Water/bubbles-rising-underwater.wav", "Weapons/sword-hit.wav"]


@pytest.fixture
def pulse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PulseStack]:
    yield from running_stack(tmp_path_factory)


@pytest.fixture
def registry(tmp_path: Path) -> ModelRegistry:
    return tiny_registry(tmp_path / "models")  # untrained, but the same sound still gives the same vector


@pytest.fixture
def tab(qtbot, registry: ModelRegistry) -> Iterator[SearchTab]:
    widget = SearchTab()
    qtbot.addWidget(widget)
    widget.resize(1100, 700)
    widget.set_registry(registry)
    widget.show()
    yield widget
    widget.shutdown()


def library(tmp_path: Path) -> Path:
    lib = tmp_path / "library"
    for clip in CLIPS:
        (lib / clip).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DEMO / clip, lib / clip)
    return lib


def test_record_button_finds_the_sound_that_was_made(qtbot, pulse: PulseStack, tab: SearchTab,
                                                    registry: ModelRegistry, tmp_path: Path) -> None:
    pulse.add_sink("speakers", rate=32000)
    tab.set_audio_status(device_status())
    open_and_index(qtbot, tab, registry, library(tmp_path))
    rq = tab.record_query
    assert rq.record_button.isEnabled() and not rq.save_button.isEnabled()
    messages: list[str] = []
    tab.status_changed.connect(messages.append)
    rq.seconds_spin.setValue(2.5)
    rq.record_button.click()
    assert rq.record_button.text() == "■ Stop"
    qtbot.waitUntil(lambda: any("make the sound now" in m for m in messages), timeout=10_000)
    clip = decode(DEMO / "Animals" / "sheep-bleat.wav")
    pulse.play("speakers", clip.audio, clip.sample_rate)
    qtbot.waitUntil(lambda: tab.state.results is not None and tab.state.results.mode == "similar", timeout=30_000)

    results = tab.state.results
    assert results.hits[0].path.relative_to(tab.state.library).as_posix() == "Animals/sheep-bleat.wav"
    assert results.hits[0].score > 0.9
    assert tab.lists.results_header.text().startswith(f"{len(results.hits)} results for sounds like recording-")
    trimmed = len(trim_silence(clip.audio, sample_rate=clip.sample_rate)) / clip.sample_rate  # the sound in it
    said = [m for m in messages if m.startswith("Recorded ")]
    assert said == [f"Recorded {trimmed:.1f} s of sound; finding sounds like it…"] or abs(
        float(said[0].split()[1]) - trimmed) <= 0.1, said
    # issue 40: "finding sounds like it…" stayed long after the results
    assert tab.status_label.text().startswith(f"{len(results.hits)} sounds like your "), tab.status_label.text()
    assert rq.record_button.text() == "● Record" and rq.save_button.isEnabled()
    kept = rq.save(tmp_path / "kept.wav")  # "Save recording…" with the file dialog answered
    assert kept is not None and decode(kept).duration == pytest.approx(trimmed, abs=0.1)
    assert not list(tab.state.library.rglob("recording-*.wav"))  # the query never lands in the library


def test_stop_searches_with_what_came_so_far(qtbot, pulse: PulseStack, tab: SearchTab, registry: ModelRegistry,
                                            tmp_path: Path) -> None:
    pulse.add_sink("speakers", rate=32000)
    tab.set_audio_status(device_status())
    open_and_index(qtbot, tab, registry, library(tmp_path))
    rq = tab.record_query
    rq.seconds_spin.setValue(30.0)
    messages: list[str] = []
    tab.status_changed.connect(messages.append)
    rq.record_button.click()
    qtbot.waitUntil(lambda: any("make the sound now" in m for m in messages), timeout=10_000)
    clip = decode(DEMO / "Machines" / "fan-whir.wav")
    pulse.play("speakers", clip.audio, clip.sample_rate)
    qtbot.wait(round(1000 * clip.duration) + 500)
    rq.record_button.click()  # Stop: no need to wait 30 s
    qtbot.waitUntil(lambda: tab.state.results is not None and tab.state.results.mode == "similar", timeout=30_000)
    assert tab.state.results.hits[0].path.name == "fan-whir.wav"


def test_record_is_disabled_with_a_reason_without_a_microphone(tab: SearchTab) -> None:
    tab.set_audio_status(NO_AUDIO)
    rq = tab.record_query
    assert not rq.record_button.isEnabled()
    assert rq.record_button.toolTip().startswith("Recording unavailable: no audio input device (microphone)")
