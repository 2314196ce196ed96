"""The Train tab's state without Qt: when Start is allowed (settings in, the folder checked and usable, nothing
running), stale answers dropped, a run shown and polled to its end, runs listed, picked and ticked to compare,
job progress in the status line; plus the proof that it imports no Qt or torch."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from app.services.training import estimate as te
from app.ui.train_state import TrainState, is_score
from tests.heard import Heard

ROOT = Path(__file__).resolve().parents[1]


class FakeRun:
    """What the state reads of a `training_runs.Run`: a status the test moves, events read by `poll`."""

    def __init__(self, name: str, status: str = "running", total: int = 10) -> None:
        self.name, self.status, self.total = name, status, total
        self.step, self.active, self.new = 0, status == "running", 0
        self.info: dict = {}
        self.result: dict | None = None
        self.error = ""
        self.latest: dict = {"loss": 1.0}  # the last progress event: a training step's
        self.kept = False  # a stopped run's best checkpoint is there

    def curves(self) -> dict:
        return {"loss": ([1.0], [1.0])} if "loss" in self.latest else {}

    def can_use(self) -> bool:
        return self.status == "finished" or self.kept and self.status in ("cancelled", "interrupted")

    def poll(self) -> list[dict]:
        new, self.new = [{"step": self.step}] * self.new, 0
        return new

    def progress(self) -> tuple[int, int, float | None]:
        return self.step, self.total, 75.0

    def log_tail(self, chars: int) -> str:
        return f"step {self.step}"

    def is_active(self) -> bool:
        return self.active

    def can_resume(self) -> bool:
        return self.status in ("interrupted", "cancelled", "failed") and not self.active

    def metrics(self) -> dict:
        return {"metrics.ap": 0.5, "wall_time_s": 40.0}


def ok_report(ok: bool = True) -> SimpleNamespace:
    return SimpleNamespace(ok=ok, counts={"rows": 1403, "splits": {"train": 1300, "dev": 103}})


@pytest.fixture
def state() -> TrainState:
    """The words kind, its settings in, /data checked and usable."""
    s = TrainState()
    s.set_kind("words")
    s.settings_loaded("words")
    key = s.check_folder("/data")
    s.validated(key, ok_report())
    return s


def test_start_waits_for_the_settings_and_a_usable_checked_folder() -> None:
    state = TrainState()
    state.set_kind("words")
    assert not state.can_start()
    assert state.check_folder("  ") is None  # no folder: nothing to check
    key = state.check_folder(" /data ")
    assert key == ("words", "/data") and state.report is None
    assert state.validated(key, ok_report()) and not state.can_start()  # the settings are not in yet
    assert not state.settings_loaded("units")  # the answer for a kind no longer chosen
    assert state.settings_loaded("words") and state.can_start() and state.buttons().start
    assert state.check_folder("/data") is None  # checked already: not again
    state.set_folder("/data/other")  # typed, not checked yet
    assert not state.can_start()


def test_a_stale_report_is_dropped_and_a_bad_one_forbids_start(state: TrainState) -> None:
    old = state.check_folder("/old")
    new = state.check_folder("/new")
    assert not state.validated(old, ok_report()) and state.report is None  # the answer for /old came late
    assert state.validated(new, ok_report(False)) and not state.can_start()
    state.set_kind("units")  # another kind: the folder is checked again for it
    assert state.check_folder("/new") == ("units", "/new")


def test_a_run_is_shown_polled_and_ends_with_its_message(state: TrainState) -> None:
    run = FakeRun("first")
    heard = Heard(state)
    state.show_run(run)
    assert heard.names()[:3] == ["run", "curves", "progress"] and state.log_text == "step 0"
    assert state.running() and not state.can_start() and state.buttons().stop
    assert state.progress().text == "first: 0/10 (running)" and state.progress().eta == "1:15 left"
    run.step, run.new = 4, 1
    assert state.poll() and heard.names()[-2:] == ["curves", "progress"]
    run.status, run.result = "finished", {"best_metric": "ap"}
    assert state.poll()  # finished, but the process is still exiting: polled on
    assert heard.events[-1] == ("status", "finished")
    assert ("message", "first finished in 40 s: ap 0.5 — Use this model to keep it", False) in heard.events
    run.active = False
    assert not state.poll() and state.progress().eta == ""  # gone: the polling ends
    assert [e for e in heard.events if e[0] == "status"] == [("status", "running"), ("status", "finished")]
    buttons = state.buttons()
    assert buttons.use and buttons.start and not buttons.stop and not buttons.resume


def test_a_failed_run_says_why_and_can_be_resumed(state: TrainState) -> None:
    run = FakeRun("bad")
    state.show_run(run)
    run.status, run.active, run.error = "failed", False, "fake failure"
    heard = Heard(state)
    assert not state.poll()
    assert ("message", "bad failed: fake failure", True) in heard.events and state.buttons().resume


def test_a_stop_asked_for_disables_stop(state: TrainState) -> None:
    run = FakeRun("long")
    state.show_run(run)
    run.info["cancel_requested"] = True
    state.stopping()
    assert state.message.startswith("Stopping long") and not state.buttons().stop


def test_listed_runs_keep_the_live_run_and_the_ticks(state: TrainState) -> None:
    live = FakeRun("a")
    state.show_run(live)
    state.set_runs([FakeRun("a", "running"), FakeRun("b", "finished"), FakeRun("c", "finished")])
    assert state.runs["a"] is live  # the object polled, with its process handle
    state.tick("b", True)
    state.tick("zzz", True)  # not listed: not ticked
    state.tick("a", True)
    assert [r.name for r, _ in state.shown()] == ["a", "b"] and [main for _, main in state.shown()] == [True, False]
    state.set_runs([FakeRun("a"), FakeRun("b", "finished")])
    assert set(state.compare) == {"a", "b"}
    state.tick("b", False)
    assert [r.name for r, _ in state.shown()] == ["a"]
    heard = Heard(state)
    state.pick("a")  # on show already: nothing happens
    assert heard.events == []
    state.pick("b")
    assert state.run.name == "b" and heard.names()[0] == "run"


def test_a_jobs_last_progress_line_is_cleared_when_it_ends(state: TrainState) -> None:
    state.job_progress({"step": 3})  # no message: the line stays
    assert state.message == ""
    state.job_progress({"message": "checking audio 90/90"})
    assert state.message == "checking audio 90/90"
    state.progress_done()
    assert state.message == ""
    state.job_progress({"message": "checking audio 1/2"})
    state.error("a problem")  # said since: kept
    state.progress_done()
    assert state.message == "a problem"


def test_a_stopped_run_with_its_best_checkpoint_can_be_used(state: TrainState) -> None:
    run = FakeRun("stopped")
    state.show_run(run)
    run.status, run.active = "cancelled", False
    state.poll()
    assert not state.buttons().use and "Use this model" not in state.message  # no checkpoint kept yet
    run.kept = True
    state.pick("other")  # (not listed: nothing changes)
    state.show_run(run)
    assert state.buttons().use and state.buttons().resume
    assert state.message == "stopped cancelled; Resume continues from its last save or Use this model keeps its " \
        "best checkpoint"


def test_a_run_preparing_its_data_says_what_it_does(state: TrainState) -> None:
    run = FakeRun("prep", total=2021)
    run.latest = {"step": 1, "total": 2021, "message": "augmenting 1 copies of the tokens"}
    run.step = 1
    state.show_run(run)
    progress = state.progress()
    assert progress.preparing == "augmenting 1 copies of the tokens 1/2021"
    assert progress.text == "prep: augmenting 1 copies of the tokens 1/2021" and progress.eta == "1:15 left"
    run.latest = {"step": 1, "total": 2021, "loss": 0.9}
    assert state.progress().preparing == "" and state.progress().text == "prep: 1/2021 (running)"


def measurement(**kw: object) -> te.Measurement:
    return te.Measurement(**{"step_s": 0.28, "prepare_s": 40.0, "total_steps": 1000, "counts": 20, **kw})


def test_the_estimate_follows_the_plan_and_its_measurement(state: TrainState) -> None:
    heard = Heard(state)
    key = state.set_plan({"max_epochs": 20, "lr": 0.1}, "cpu", ["cpu"])
    assert key and state.plan.status == "measuring" and heard.names() == ["estimate"]
    assert state.estimate_line() == "Estimating the time: measuring a training step on this CPU…"
    state.measure_progress(key, {"message": "reading data 3/9"})
    assert state.estimate_line().endswith("on this CPU… (reading data 3/9)")
    assert not state.measured("another key", measurement())  # a measurement the plan has moved on from
    assert state.measured(key, measurement())
    assert state.estimate_line() == ("About 5 min on this CPU (1,300 clips × 20 epochs: 1,000 steps at 0.28 s a "
                                     "step, measured, after 40 s starting and reading the data)")
    assert state.set_plan({"max_epochs": 40, "lr": 0.1, "max_minutes": 5.0}, "cpu", ["cpu"]) is None  # the same
    assert state.estimate_line().startswith("About 5 min on this CPU: it stops at its 5 min budget, keeping its "
                                            "best model (the whole plan would take about 10 min: 1,300 clips × "
                                            "40 epochs: 2,000 steps")
    other = state.set_plan({"max_epochs": 40, "lr": 0.2}, "auto", ["cpu", "cuda"])  # another step: measured anew
    assert other not in (None, key) and state.estimate_line().startswith("Estimating") and "on this GPU" in \
        state.estimate_line()
    state.measure_failed(other, "the trainer exited with code 1")
    assert state.estimate_line().startswith("No time estimate: measuring a training step failed (the trainer")
    state.set_folder("/elsewhere")  # not checked: nothing to start, nothing to estimate
    assert state.set_plan({"max_epochs": 40}, "cpu", ["cpu"]) is None and state.plan is None
    assert state.estimate_line() == ""


def test_a_run_that_ends_while_measured_is_its_own_estimate() -> None:
    m = measurement(whole_s=9.0, total_steps=12, counts=3)
    assert te.estimate(m, {"max_epochs": 3}).seconds == 9.0
    assert te.estimate(m, {"max_epochs": 6}).steps == 24  # more epochs: the arithmetic again
    evals = measurement(eval_s=5.0, epoch_steps=50)
    assert te.estimate(evals, {"max_epochs": 20}).seconds == pytest.approx(40 + 1000 * 0.28 + 20 * 5.0)


@pytest.mark.parametrize(("name", "values", "score"), [
    ("val_map10", [0.02, 0.078], True), ("dev_ap", [0.5, 0.994], True), ("val_R@10", [0.1, 0.3], True),
    ("abx_error", [0.12], True), ("val_n_captions", [210.0], False), ("val_mean_rank", [56.0, 40.0], False),
    ("val_median_rank", [1.0], False), ("perplexity", [0.9], False), ("codes_used", [14.0], False),
    ("recon", [1.05, 0.9], True), ("inv_loss_scale", [23.0], False),  # a name it does not know: by its values
])  # fmt: skip
def test_scores_are_told_apart_from_counts_and_ranks(name: str, values: list[float], score: bool) -> None:
    assert is_score(name, values) is score
