"""Player volume and loop, the devices chosen in Preferences, and PortAudio's errors in the user's words
(`app/services/devices.py`), through fake streams: no sound card needed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from types import SimpleNamespace

import numpy as np
import pytest
import sounddevice as sd

from app.services import devices
from app.services.devices import NoAudioDeviceError, Player, Recorder, audio_error_message, choose_devices
from tests.fake_streams import FakeStream


class Stream(FakeStream):
    """Stands in for sounddevice.InputStream / OutputStream; the test pulls the callback itself."""

    opened: list[Stream] = []

    def __init__(self, samplerate, channels, blocksize, dtype, callback, device):
        self.samplerate, self.channels, self.blocksize = samplerate, channels, blocksize
        self.callback, self.device = callback, device
        self.active = self.closed = False
        Stream.opened.append(self)


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    Stream.opened = []
    choose_devices("", "")
    yield
    choose_devices("", "")


def pull(stream: Stream, blocks: int) -> np.ndarray:
    """PortAudio asking for `blocks` output blocks, from another thread, as it does."""
    out = np.full((blocks, stream.blocksize, stream.channels), 9.0, dtype=np.float32)

    def run() -> None:
        for i in range(blocks):
            stream.callback(out[i], stream.blocksize, None, sd.CallbackFlags())

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out.reshape(-1, stream.channels)


def test_volume_scales_the_samples_written_and_changes_while_playing() -> None:
    player = Player(stream_factory=Stream, block_size=100)
    x = np.linspace(-1, 1, 1000, dtype=np.float32)
    player.volume = 0.5
    player.play(x, 1000)
    np.testing.assert_allclose(pull(Stream.opened[-1], 2)[:, 0], 0.5 * x[:200])
    player.volume = 0.0
    assert not pull(Stream.opened[-1], 1).any()
    player.volume = 7  # clamped to 0..1
    assert player.volume == 1.0
    np.testing.assert_array_equal(pull(Stream.opened[-1], 1)[:, 0], x[300:400])
    player.stop()


def test_loop_goes_round_inside_a_block_and_stopping_the_loop_lets_it_end() -> None:
    player = Player(stream_factory=Stream, block_size=64)
    x = np.arange(100, dtype=np.float32)
    player.loop = True
    player.play(x, 1000, start_seconds=0.05)  # from frame 50
    out = pull(Stream.opened[-1], 4)[:, 0]  # 256 frames: 50..99, then 0..99, 0..99, 0..5
    np.testing.assert_array_equal(out, np.concatenate([x[50:], x, x, x[:6]]))
    assert player.playing
    player.loop = False
    out = pull(Stream.opened[-1], 2)[:, 0]  # the rest of this round, then silence
    np.testing.assert_array_equal(out[:94], x[6:])
    assert not out[94:].any() and not player.playing


def test_a_new_sound_in_the_same_format_replaces_the_playing_one_in_the_open_stream() -> None:
    player = Player(stream_factory=Stream, block_size=10)
    player.play(np.ones(100, np.float32), 1000)
    player.play(np.full(100, 2.0, np.float32), 1000, start_seconds=0.01)
    assert len(Stream.opened) == 1 and player.position == pytest.approx(0.01)
    np.testing.assert_array_equal(pull(Stream.opened[0], 1)[:, 0], np.full(10, 2.0))
    player.play(np.ones(100, np.float32), 2000)  # another rate: another stream, the first one closed
    assert len(Stream.opened) == 2 and Stream.opened[0].closed
    player.stop()


@pytest.mark.parametrize(("error", "direction", "says"), [
    (sd.PortAudioError("Error opening InputStream: Illegal combination of I/O devices [PaErrorCode -9993]"),
     "input", "The input device is no longer available — choose another in Edit → Preferences"),
    (sd.PortAudioError("Illegal combination of I/O devices", -9993), "input", "input device is no longer available"),
    (sd.PortAudioError("Error querying device -1"), "output", "The output device is no longer available"),
    (sd.PortAudioError("Device unavailable", -9985), "output", "output device is no longer available"),
    (ValueError("No input device matching 'USB mic'"), "input", "input device is no longer available"),
    (sd.PortAudioError("Invalid sample rate", -9997), "output", "cannot play or record at this sample rate"),
    (sd.PortAudioError("Invalid number of channels", -9998), "input", "does not have enough channels"),
    (sd.PortAudioError("Unanticipated host error", -9999, (0, -16, "Device or resource busy")), "output",
     "in use by another program"),
    (sd.PortAudioError("Unanticipated host error", -9999, (0, -5, "Input/output error")), "input",
     "The sound system stopped answering"),
    (sd.PortAudioError("Something new", -9970), "output", "The output device failed — try again"),
])
def test_portaudio_errors_are_said_in_the_users_words(error: Exception, direction: str, says: str) -> None:
    message = audio_error_message(error, direction)
    assert says in message
    assert "PaErrorCode" not in message and "Illegal" not in message and "-99" not in message


def test_recorder_and_player_say_what_failed_and_tell_the_listeners() -> None:
    heard: list[str] = []
    devices.add_problem_listener(heard.append)

    def refuses(**kw: object) -> object:
        raise sd.PortAudioError("Error opening InputStream: Illegal combination of I/O devices [PaErrorCode -9993]",
                                -9993)

    class WontStart(Stream):
        def start(self) -> None:
            raise sd.PortAudioError("Error starting stream: Device unavailable [PaErrorCode -9985]", -9985)

    try:
        with pytest.raises(NoAudioDeviceError) as caught:
            Recorder(stream_factory=refuses).start()
        assert str(caught.value).startswith("The input device is no longer available — choose another in")
        with pytest.raises(NoAudioDeviceError, match="The output device is no longer available"):
            Player(stream_factory=WontStart).play(np.zeros(10, np.float32), 8000)
        assert Stream.opened[-1].closed and len(heard) == 2 and "PaErrorCode" not in " ".join(heard)
    finally:
        devices.remove_problem_listener(heard.append)


MIC = {"name": "USB mic", "max_input_channels": 1, "max_output_channels": 0}
SPEAKERS = {"name": "Speakers", "max_input_channels": 0, "max_output_channels": 2}
HEADPHONES = {"name": "Headphones", "max_input_channels": 0, "max_output_channels": 2}


def fake_sd(devices: list[dict]) -> object:
    def query_devices(kind: str | None = None) -> object:
        return devices if kind is None else devices[0]

    return SimpleNamespace(query_devices=query_devices)


def test_the_chosen_devices_are_opened_by_index_and_a_vanished_one_falls_back(monkeypatch) -> None:
    plugged = [MIC, SPEAKERS, HEADPHONES]
    monkeypatch.setattr(devices, "_import_sounddevice", lambda: fake_sd(list(plugged)))
    choose_devices("USB mic", "Headphones")
    Recorder(stream_factory=Stream).start()
    player = Player(stream_factory=Stream)
    player.play(np.zeros(10, np.float32), 8000)
    assert [s.device for s in Stream.opened] == [0, 2] and player.notice == ""
    status = devices.device_status()
    assert status.inputs == ["USB mic"] and status.outputs == ["Speakers", "Headphones"] and status.notice == ""

    plugged.remove(HEADPHONES)  # unplugged: the next sound plays on the default, and says so
    player.stop()
    player.play(np.zeros(10, np.float32), 8000)
    assert Stream.opened[-1].device is None and "“Headphones” is no longer available" in player.notice
    assert "“Headphones” is no longer available" in devices.device_status().notice

    explicit = Player(stream_factory=Stream, device=1)  # an explicit device wins over the choice
    explicit.play(np.zeros(10, np.float32), 8000)
    assert Stream.opened[-1].device == 1
