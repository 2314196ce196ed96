"""`JobTab.run_job`, the one way every tab runs background work: it names, tracks and forgets its runners, hands
results to the tab and errors to `job_failed`, and `stop_jobs` cancels them all when the tab closes."""

from __future__ import annotations

from collections.abc import Iterator

from app.services.jobs import Job
from app.ui.tab_base import JobTab


class Probe(JobTab):
    job_prefix = "probe"

    def __init__(self) -> None:
        super().__init__()
        self.errors: list[str] = []
        self.progress: list[dict] = []
        self.ended: list[object] = []

    def error(self, message: str) -> None:
        self.errors.append(message)

    def job_progress(self, progress: dict) -> None:
        self.progress.append(progress)

    def job_ended(self, runner: object) -> None:
        self.ended.append(runner)


def answer() -> Job[int]:
    yield {"message": "half way"}
    return 42


def failure() -> Job[int]:
    yield {"message": "reading"}
    raise ValueError("no such file: a.wav")


def test_run_job_tracks_the_runner_and_hands_over_result_and_progress(qtbot) -> None:
    tab = Probe()
    qtbot.addWidget(tab)
    results: list[int] = []
    runner = tab.run_job(answer, "answer", results.append)
    assert runner.name == "probe-answer" and tab.runners == [runner] and tab.busy()
    qtbot.waitUntil(lambda: not tab.runners, timeout=10_000)
    assert results == [42] and tab.progress == [{"message": "half way"}]
    assert tab.ended == [runner] and not tab.busy() and tab.errors == []


def test_errors_go_to_job_failed_unless_the_caller_says_otherwise(qtbot) -> None:
    tab = Probe()
    qtbot.addWidget(tab)
    tab.run_job(failure, "default", lambda _: None)
    mine: list[str] = []
    quiet: list[dict] = []
    tab.run_job(failure, "own", lambda _: None, on_error=mine.append, on_progress=quiet.append)
    qtbot.waitUntil(lambda: not tab.runners, timeout=10_000)
    assert tab.errors == ["no such file: a.wav"] and mine == ["no such file: a.wav"]
    assert quiet == [{"message": "reading"}] and tab.progress == [{"message": "reading"}]


def test_stop_jobs_cancels_every_job_and_waits_for_it(qtbot) -> None:
    tab = Probe()
    qtbot.addWidget(tab)
    started: list[str] = []
    closed: list[str] = []

    def endless(name: str) -> Iterator[dict]:
        started.append(name)
        try:
            while True:
                yield {}
        finally:
            closed.append(name)

    runners = [tab.run_job(lambda n=n: endless(n), n, lambda _: None, on_progress=lambda _: None)
               for n in ("a", "b")]
    qtbot.waitUntil(lambda: bool(started), timeout=10_000)
    tab.stop_jobs(200)  # (a JobRunner's thread ends once the GUI thread runs again: `wait` cannot see it end)
    qtbot.waitUntil(lambda: not tab.runners, timeout=10_000)
    assert not any(r.is_running() for r in runners)
    assert sorted(closed) == sorted(started)  # a job that had started was closed: its `finally` ran


def test_the_model_box_names_the_whole_model_on_hover(qtbot) -> None:
    """A narrow window cuts the model's name in its box ("retrieval-defau"): the tooltip holds all of it, and
    follows the choice."""
    from types import SimpleNamespace

    from PySide6.QtWidgets import QComboBox, QLabel

    from app.ui.tab_base import ModelTab

    tab = ModelTab()
    qtbot.addWidget(tab)
    tab.models = [SimpleNamespace(name=n, source="shipped") for n in ("retrieval-default", "retrieval-passt-small")]
    combo, label = QComboBox(), QLabel()
    qtbot.addWidget(combo)
    assert tab.fill_model_combo(combo, label) == "retrieval-default" and combo.toolTip() == "retrieval-default"
    combo.setCurrentIndex(1)
    assert combo.toolTip() == "retrieval-passt-small"
    tab.fill_model_combo(combo, label)  # filled again: still one connection, still right
    assert combo.toolTip() == "retrieval-passt-small"
