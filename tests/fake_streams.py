"""Stand-ins for sounddevice's streams in tests: no device, the callback driven by the test when it wants to."""

from __future__ import annotations


class FakeStream:
    """start / stop / close flip `active` and `closed`, as a real stream's do."""

    active = False
    closed = False

    def start(self) -> None:
        self.active = True

    def stop(self) -> None:
        self.active = False

    def close(self) -> None:
        self.active, self.closed = False, True


class FakeSpeakers(FakeStream):
    """Stands in for sounddevice.OutputStream; nothing pulls audio, so playback stays 'playing'."""

    def __init__(self, **kwargs: object) -> None:
        pass
