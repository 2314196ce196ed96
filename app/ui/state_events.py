"""`Event`: a Qt-free signal, so that the tabs' states (search_state, units_state, words_state, train_state) can
tell their widgets what changed and be tested without Qt."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Event:
    """A Qt-free signal: `emit` calls every connected listener, in the order they connected."""

    def __init__(self) -> None:
        self._listeners: list[Callable[..., Any]] = []

    def connect(self, listener: Callable[..., Any]) -> None:
        self._listeners.append(listener)

    def disconnect(self, listener: Callable[..., Any]) -> None:
        self._listeners.remove(listener)

    def emit(self, *args: Any) -> None:  # noqa: ANN401 - whatever the event carries
        for listener in list(self._listeners):
            listener(*args)
