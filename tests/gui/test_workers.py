"""The Qt job runner: progress, result, errors as messages, cancel and pause between yields."""

from __future__ import annotations

import threading
import time

import pytest

from app.services.jobs import Job
from app.workers import JobRunner, active_runners, describe_error


def counting_job(n: int, delay: float = 0.0, seen: list | None = None) -> Job[int]:
    total = 0
    try:
        for i in range(n):
            time.sleep(delay)
            total += i
            yield {"step": i + 1, "total": n, "loss": 1.0 / (i + 1)}
    finally:
        if seen is not None:
            seen.append("closed")
    return total


def failing_job() -> Job[None]:
    yield {"step": 1}
    raise ValueError("the file foo.wav is empty")


def test_progress_and_result_arrive_on_gui_thread(qtbot) -> None:
    runner = JobRunner(lambda: counting_job(5), name="count")
    steps, threads = [], []
    runner.progress.connect(lambda p: (steps.append(p["step"]), threads.append(threading.current_thread())))
    with qtbot.waitSignal(runner.result, timeout=5000) as result, qtbot.waitSignal(runner.finished):
        runner.start()
    assert result.args == [0 + 1 + 2 + 3 + 4]
    qtbot.waitUntil(lambda: steps == [1, 2, 3, 4, 5])
    assert all(t is threading.main_thread() for t in threads)
    assert not runner.is_running() and runner not in active_runners()


def test_error_becomes_a_message_not_a_crash(qtbot) -> None:
    runner = JobRunner(failing_job, name="fail")
    with qtbot.waitSignal(runner.error, timeout=5000) as err, qtbot.waitSignal(runner.finished):
        runner.start()
    assert err.args == ["the file foo.wav is empty"]


def test_a_bad_file_is_logged_in_a_line_and_a_bug_with_its_traceback(qtbot, caplog) -> None:
    """An unreadable audio file is the user's file, not a crash: no traceback in the terminal for it."""
    from core.audio import AudioError

    def job(exc: Exception) -> Job[None]:
        raise exc
        yield {}

    for exc in (AudioError("quiet.wav: not an audio file"), RuntimeError("index out of range")):
        caplog.clear()
        runner = JobRunner(lambda exc=exc: job(exc), name="load")
        with qtbot.waitSignal(runner.finished, timeout=5000):
            runner.start()
        (record,) = [r for r in caplog.records if r.name == "app.workers"]
        assert (record.exc_info is None) == isinstance(exc, AudioError), record
        assert str(exc) in record.getMessage() or record.exc_info


def test_error_in_job_creation_is_reported(qtbot) -> None:
    def factory() -> Job[None]:
        raise RuntimeError("no model")

    runner = JobRunner(factory, name="broken")
    with qtbot.waitSignal(runner.error, timeout=5000) as err, qtbot.waitSignal(runner.finished):
        runner.start()
    assert err.args == ["RuntimeError: no model"]


def test_cancel_stops_between_yields_and_closes_the_job(qtbot) -> None:
    seen: list[str] = []
    runner = JobRunner(lambda: counting_job(1000, delay=0.005, seen=seen), name="long")
    results: list[int] = []
    runner.result.connect(results.append)
    with qtbot.waitSignal(runner.cancelled, timeout=5000), qtbot.waitSignal(runner.finished):
        runner.start()
        qtbot.waitSignal(runner.progress, timeout=5000).wait()
        runner.cancel()
    assert results == [] and seen == ["closed"]


def test_pause_holds_the_job_and_resume_continues(qtbot) -> None:
    runner = JobRunner(lambda: counting_job(200, delay=0.002), name="pausable")
    steps: list[int] = []
    runner.progress.connect(lambda p: steps.append(p["step"]))
    runner.start()
    qtbot.waitUntil(lambda: len(steps) >= 3, timeout=5000)
    runner.pause()
    assert runner.is_paused()
    time.sleep(0.1)
    qtbot.wait(50)
    frozen = len(steps)
    time.sleep(0.2)
    qtbot.wait(50)
    assert len(steps) <= frozen + 1  # at most the step already in flight
    with qtbot.waitSignal(runner.result, timeout=10000):
        runner.resume()
    qtbot.waitSignal(runner.finished, timeout=5000, raising=False).wait() if runner.is_running() else None
    assert steps[-1] == 200


def test_cancel_while_paused_ends_the_job(qtbot) -> None:
    runner = JobRunner(lambda: counting_job(1000, delay=0.002), name="paused-cancel")
    runner.start()
    qtbot.waitSignal(runner.progress, timeout=5000).wait()
    runner.pause()
    with qtbot.waitSignal(runner.cancelled, timeout=5000), qtbot.waitSignal(runner.finished):
        runner.cancel()


def test_a_runner_starts_once(qtbot) -> None:
    runner = JobRunner(lambda: counting_job(1), name="once")
    with qtbot.waitSignal(runner.finished, timeout=5000):
        runner.start()
    with pytest.raises(RuntimeError, match="already started"):
        runner.start()


def test_describe_error_keeps_user_messages_plain() -> None:
    assert describe_error(ValueError("bad rate")) == "bad rate"
    assert describe_error(ZeroDivisionError("division by zero")) == "ZeroDivisionError: division by zero"
    assert describe_error(KeyError("x")) == "'x'"


def test_wait_from_the_gui_thread_returns_when_the_job_ends(qtbot) -> None:
    """Closing a tab waits for its jobs on the GUI thread: the thread must quit without the GUI's event loop."""
    def quick() -> Job[int]:
        yield {"message": "one step"}
        return 1

    runner = JobRunner(quick, name="quick")
    runner.start()
    # True once the thread has ended; with quit queued behind the blocked GUI thread it ran out the timeout (False)
    assert runner.wait(30_000)
    qtbot.waitUntil(lambda: not runner.is_running())
