"""The samples the Search tab's preview plays for a sound or a part as the transport says (varispeed, Reverse;
app/services/search/audition.py): made at once for a short sound, in a worker for a long one (libsoxr takes a
third of a second for 10 min at 48 kHz here, more on a slow machine: the window would stall), and the last ones
kept, so that Play again, a loop or a seek makes nothing anew.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from PySide6.QtCore import QObject, Signal, Slot

from app.services.search.audition import Audition
from app.workers import JobRunner

SYNC_FRAMES = 2_000_000  # ~40 s at 48 kHz: tens of ms on the GUI thread; longer sounds are made in a worker


class AuditionSamples(QObject):
    """`get` gives the samples to play, or None while a worker makes them; `ready` then says to ask again."""

    ready = Signal()  # samples that were being made are there (ask again: the transport may have moved meanwhile)
    failed = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._kept: tuple[object, float, float, Audition, np.ndarray] | None = None
        self._runner: JobRunner | None = None
        self._failed = False

    def get(self, owner: object, audio: np.ndarray, start_s: float, end_s: float, how: Audition
            ) -> np.ndarray | None:
        """What plays for `audio` (the part [start_s, end_s) of `owner`, a preview) as `how` says; None while a
        worker makes it (a long sound), `ready` coming when it is done."""
        if how.plain:
            return audio
        kept = self._kept
        if kept is not None and kept[0] is owner and kept[1:4] == (start_s, end_s, how):
            return kept[4]
        if len(audio) <= SYNC_FRAMES or how.semitones == 0:  # backwards alone is a copy, quick at any length
            samples = how.samples(audio)
            self._kept = (owner, start_s, end_s, how, samples)
            return samples
        self._make(owner, audio, start_s, end_s, how)
        return None

    def busy(self) -> bool:
        return self._runner is not None

    def wait(self, timeout_ms: int = 5000) -> None:
        """Let a worker end (closing)."""
        if self._runner is not None:
            self._runner.wait(timeout_ms)

    def _make(self, owner: object, audio: np.ndarray, start_s: float, end_s: float, how: Audition) -> None:
        if self._runner is not None:  # one at a time: when it ends, `ready` asks for what is wanted then
            return

        def job() -> Any:  # noqa: ANN401 - a Job
            yield {"message": "making the sound to play"}
            return how.samples(audio)

        self._failed = False
        runner = JobRunner(job, "audition-samples", self)
        runner.result.connect(lambda samples: self._keep((owner, start_s, end_s, how, samples)))
        runner.error.connect(self._error)
        runner.finished.connect(self._finished)
        self._runner = runner
        runner.start()

    def _keep(self, kept: tuple[object, float, float, Audition, np.ndarray]) -> None:
        self._kept = kept

    @Slot(str)
    def _error(self, text: str) -> None:
        self._failed = True
        self.failed.emit(text)

    @Slot()
    def _finished(self) -> None:
        self._runner = None
        if not self._failed:
            self.ready.emit()
