"""The terminal job runner: tqdm progress, result, Ctrl-C closes the job."""

from __future__ import annotations

import pytest

from app.services import jobs
from app.services.jobs import Job, JobCancelled, drain, format_progress, run_in_terminal


def job(n: int, closed: list[str]) -> Job[str]:
    try:
        for i in range(n):
            yield {"step": i + 1, "total": n, "loss": 0.5, "message": f"item {i}"}
    finally:
        closed.append("closed")
    return "done"


def test_run_in_terminal_returns_the_result(capsys) -> None:
    closed: list[str] = []
    assert run_in_terminal(job(3, closed), desc="test", disable=False) == "done"
    assert closed == ["closed"]
    assert "3/3" in capsys.readouterr().err


def test_ctrl_c_closes_the_job_and_raises_cancelled() -> None:
    closed: list[str] = []

    def interrupted() -> Job[None]:
        try:
            yield {"step": 1}
            raise KeyboardInterrupt
        finally:
            closed.append("closed")

    with pytest.raises(JobCancelled):
        run_in_terminal(interrupted(), disable=True)
    assert closed == ["closed"]


def test_ctrl_c_between_steps_closes_the_suspended_job(monkeypatch) -> None:
    """Ctrl-C usually lands in the runner (drawing the bar) while the job waits at its `yield`: the runner
    itself must close the job so its `finally` runs now, not whenever the generator is garbage-collected."""
    closed: list[str] = []

    def bar_interrupted(bar: object, progress: dict, desc: str) -> None:
        if progress["step"] == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(jobs, "_update_bar", bar_interrupted)
    suspended = job(5, closed)  # held here, so garbage collection cannot close it behind the runner's back
    with pytest.raises(JobCancelled):
        run_in_terminal(suspended, disable=True)
    assert closed == ["closed"]
    assert suspended.gi_frame is None  # finished, not waiting at step 2


def test_drain_and_format() -> None:
    assert drain(job(2, [])) == "done"
    assert format_progress({"step": 2, "total": 5, "loss": 0.12345, "message": "x"}) == "2/5 · loss 0.1235 · x"
    assert format_progress({"message": "loading"}) == "loading"


def test_without_a_terminal_progress_goes_to_log_lines(capsys) -> None:
    def steps() -> Job[int]:
        yield {"step": 1, "total": 2, "message": "first", "loss": 0.5, "val_map10": float("nan")}  # not yet known
        yield {"step": 2, "total": 2, "message": "first"}  # same message within a second: no line
        return 7

    assert run_in_terminal(steps(), desc="train") == 7  # pytest's stderr is not a terminal
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["[train] 1/2 first loss=0.5"]


def test_a_described_job_shows_its_words_on_the_bar_not_its_fields(capsys) -> None:
    """Issue 40: `earshot index`'s bar showed every field the job yields (files_done=0, files_total=304,
    eta_s=None, phase=names, part=headers…) past 160 columns; `describe` puts them in words instead."""
    def steps() -> Job[int]:
        yield {"step": 1, "total": 2, "files_done": 1, "files_total": 2, "eta_s": None, "phase": "names",
               "message": "looking at files (1/2)"}
        return 2

    def describe(p: dict) -> str:
        return f"{p['message']} · in words"

    assert run_in_terminal(steps(), desc="index", disable=False, describe=describe) == 2
    err = capsys.readouterr().err
    assert "index: looking at files (1/2) · in words" in err and "1/2" in err
    assert "files_done" not in err and "phase" not in err and "eta_s" not in err
