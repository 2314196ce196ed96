"""`Heard`: what a Qt-free tab state told its listeners, for the state tests (tests/test_*_state.py)."""

from __future__ import annotations

from app.ui.state_events import Event


class Heard:
    """Every event a state emits, in order, with what it carried: each `Event` of `state.events` is listened to."""

    def __init__(self, state: object) -> None:
        self.events: list[tuple] = []
        for name, event in vars(state.events).items():
            if isinstance(event, Event):
                event.connect(lambda *args, name=name: self.events.append((name, *args)))

    def names(self) -> list[str]:
        return [e[0] for e in self.events]

    def clear(self) -> None:
        self.events.clear()
