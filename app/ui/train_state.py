"""The Train tab's state without Qt: the model kind and data folder with its validation report, whether the
kind's settings are in, the time the run would take (measured before Start), the run on show (its progress, log
and status as last polled), the past runs and the ones ticked to compare, and the status line.

`TrainState` holds them; its methods are the tab's transitions and tell the listeners of `events`. The tab runs
the jobs (settings, validation), starts and lists the runs (separate processes) and polls on a timer; its panels
draw the events. No Qt, no torch: tests/test_train_state.py drives it directly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.services.training import estimate as te
from app.ui.state_events import Event
from app.ui.train_text import (
    device_words,
    estimate_text,
    finished_summary,
    format_eta,
    measuring_text,
    no_estimate_text,
)

if TYPE_CHECKING:
    from app.services.training import runs as tr


class TrainEvents:
    """What changed in a `TrainState`; listeners run after the change."""

    def __init__(self) -> None:
        self.buttons = Event()  # what can be started, stopped, resumed or kept changed
        self.report = Event()  # the data folder's report (None: being checked)
        self.run = Event()  # another run on show: its name, an empty log
        self.curves = Event()  # the curves to draw changed (new points, other runs ticked)
        self.progress = Event()  # the run on show was polled: its progress and log
        self.status = Event()  # (status: str) the run on show reached another status
        self.message = Event()  # (text: str, error: bool) the status line
        self.estimate = Event()  # the estimate's line changed (measuring, measured, failed, other settings)


@dataclass(frozen=True)
class TrainButtons:
    start: bool
    stop: bool
    resume: bool
    use: bool


@dataclass(frozen=True)
class RunProgress:
    """The progress bar and time left of the run on show."""

    step: int
    total: int
    text: str
    eta: str
    preparing: str = ""  # what a running trainer does before its first step ("augmenting … 501/2021"), else ""


@dataclass
class Plan:
    """The run Start would launch, and what is known of its time: `key` names the measurement it needs."""

    settings: dict[str, Any]
    device: str
    where: str  # "on this CPU"
    key: str
    status: str = "measuring"  # measuring | measured | failed
    doing: str = ""  # the measuring run's progress, or why it failed
    measurement: te.Measurement | None = None


COUNT_WORDS = re.compile(r"(^|_)n_|rank|count|perplexity|used|size|steps|frames|tokens", re.IGNORECASE)


def is_score(name: str, values: list[float]) -> bool:
    """Whether a metric belongs on the scores' axis (0..1: AP, mAP, recall, accuracy, error rates) rather than
    beside the counts and ranks (n_captions 210, mean rank 56), whose scale would flatten the scores' curves:
    by its name, and whatever its name, only if its values stay within 0..1 or so."""
    if COUNT_WORDS.search(name):
        return False
    return all(-0.05 <= v <= 1.5 for v in values)


class TrainState:
    def __init__(self, kind: str = "") -> None:
        self.events = TrainEvents()
        self.kind = kind
        self.folder = ""
        self.settings_ready = False  # the kind's settings form is built
        self.report: Any = None  # DataReport of `report_key`; None while it is checked
        self.report_key: tuple[str, str] | None = None  # (kind, folder) checked last
        self.run: tr.Run | None = None  # the run on show (started here or picked from the list)
        self.last_status = ""
        self.log_text = ""
        self.runs: dict[str, tr.Run] = {}  # the runs listed, by name
        self.compare: dict[str, tr.Run] = {}  # the runs ticked to compare
        self.message = ""
        self.progress_text = ""  # the last job progress line shown in the status line
        self.plan: Plan | None = None  # what Start would run and its estimate; None: nothing to start
        self.module: str | None = None  # a trainer swapped in (tests, plug-ins): part of what a measurement is of

    # ------------------------------------------------------------------------------------------ messages

    def say(self, text: str) -> None:
        self.message = text
        self.events.message.emit(text, False)

    def error(self, text: str) -> None:
        self.message = text
        self.events.message.emit(text, True)

    def job_progress(self, progress: dict) -> None:
        if progress.get("message"):
            self.progress_text = str(progress["message"])
            self.say(self.progress_text)

    def progress_done(self) -> None:
        """A finished job's last progress line ("checking audio 90/90") is not news any more: clear it."""
        if self.progress_text and self.message == self.progress_text:
            self.say("")
        self.progress_text = ""

    # ------------------------------------------------------------------------------------------ kind, data

    def set_kind(self, kind: str) -> None:
        """Another kind: its settings are loading."""
        self.kind, self.settings_ready = kind, False
        self.events.buttons.emit()

    def settings_loaded(self, kind: str, ready: bool = True) -> bool:
        """The settings form of `kind` is built; False (and nothing changes) for a kind no longer chosen."""
        if kind != self.kind:
            return False
        self.settings_ready = ready
        self.progress_done()
        self.events.buttons.emit()
        return True

    def set_folder(self, folder: str) -> None:
        """The data folder as typed (checked once the typing is done: `check_folder`)."""
        self.folder = folder.strip()

    def check_folder(self, folder: str) -> tuple[str, str] | None:
        """The (kind, folder) to validate now; None when there is no folder or it has its report already."""
        self.folder = folder.strip()
        if not self.folder:
            return None
        key = (self.kind, self.folder)
        if key == self.report_key and self.report is not None:
            return None
        self.report, self.report_key = None, key
        self.events.report.emit()
        self.events.buttons.emit()
        return key

    def validated(self, key: tuple[str, str], report: Any) -> bool:  # noqa: ANN401 - a DataReport
        """The report of `key`; False (and nothing changes) for a stale answer of another folder or kind."""
        if key != (self.kind, self.folder):
            return False
        self.report = report
        self.events.report.emit()
        self.progress_done()
        self.events.buttons.emit()
        return True

    # ------------------------------------------------------------------------------------------ buttons

    def running(self) -> bool:
        return self.run is not None and self.run.status == "running"

    def can_start(self) -> bool:
        key_ok = self.report_key == (self.kind, self.folder)
        return self.settings_ready and self.report is not None and self.report.ok and key_ok and not self.running()

    def buttons(self) -> TrainButtons:
        run = self.run
        return TrainButtons(
            start=self.can_start(),
            stop=self.running() and not run.info.get("cancel_requested"),
            resume=run is not None and run.can_resume(),
            use=run is not None and run.can_use(),
        )

    # ------------------------------------------------------------------------------------------ runs

    def stopping(self) -> None:
        """The run on show was asked to stop."""
        self.say(f"Stopping {self.run.name}: the trainer keeps its last good checkpoint…")
        self.events.buttons.emit()

    def show_run(self, run: tr.Run) -> None:
        """Show `run`: its curves, an empty log until its own arrives; then poll it."""
        self.run, self.last_status, self.log_text = run, "", ""
        self.events.run.emit()
        self.events.curves.emit()
        self.poll()

    def poll(self) -> bool:
        """Read what the run on show wrote since; False when there is nothing more to poll."""
        run = self.run
        if run is None:
            return False
        if run.poll():
            self.events.curves.emit()
        self.log_text = run.log_tail(6000)
        self.events.progress.emit()
        if run.status != self.last_status:
            self.last_status = run.status
            self._status_reached(run)
        if run.status != "running" and not run.is_active():
            self.events.buttons.emit()  # Resume waits for the process to be gone, which can come after its last word
            return False
        return True

    def progress(self) -> RunProgress | None:
        run = self.run
        if run is None:
            return None
        step, total, eta = run.progress()
        text = f"{run.name}: {step}/{total} ({run.status})" if total else run.status
        latest = run.latest
        preparing = ""
        if run.status == "running" and "loss" not in latest and not run.curves():
            preparing = f"{latest.get('message') or 'starting'}" + (f" {step}/{total}" if total else "")
            text = f"{run.name}: {preparing}"
        return RunProgress(step, total, text, format_eta(eta) if run.status == "running" else "", preparing)

    def _status_reached(self, run: tr.Run) -> None:
        if run.status == "finished":
            self.say(f"{finished_summary(run)} — Use this model to keep it")
        elif run.status == "failed":
            self.error(f"{run.name} failed: {run.error or 'see the log'}")
        elif run.status == "interrupted":
            self.error(f"{run.name} was interrupted (the process is gone); Resume continues from its last save")
        elif run.status == "cancelled":
            kept = " or Use this model keeps its best checkpoint" if run.can_use() else ""
            self.say(f"{run.name} cancelled; Resume continues from its last save{kept}")
        self.events.buttons.emit()
        self.events.status.emit(run.status)

    def set_runs(self, runs: list[tr.Run]) -> None:
        """The runs listed now; the one on show stays the live object (its process handle and offsets), the
        ticked ones stay ticked."""
        current = self.run.name if self.run is not None else None
        self.runs = {r.name: (self.run if r.name == current else r) for r in runs}
        self.compare = {name: self.runs[name] for name in self.compare if name in self.runs}

    def pick(self, name: str) -> None:
        """A run picked in the list: shown, unless it is on show already."""
        if self.run is not None and self.run.name == name:
            return
        run = self.runs.get(name)
        if run is not None:
            self.show_run(run)
            self.events.buttons.emit()

    def tick(self, name: str, on: bool) -> None:
        """A run ticked (its curves drawn thin beside the one on show) or unticked."""
        if on and name in self.runs:
            self.compare[name] = self.runs[name]
        else:
            self.compare.pop(name, None)
        self.events.curves.emit()

    def shown(self) -> list[tuple[tr.Run, bool]]:
        """The runs whose curves are drawn: (run, on show) with the one on show first."""
        out = [(self.run, True)] if self.run is not None else []
        return out + [(r, False) for n, r in self.compare.items() if self.run is None or n != self.run.name]

    # ------------------------------------------------------------------------------------------ the estimate

    def set_plan(self, settings: dict[str, Any], device: str, devices: list[str]) -> str | None:
        """The settings and device Start would use now: the key of the measurement their estimate needs when
        it is not the one had or being taken (None otherwise, and with nothing to start)."""
        report = self.report
        if not self.can_start() or report is None:
            if self.plan is not None:
                self.plan = None
                self.events.estimate.emit()
            return None
        key = te.measurement_key(self.kind, self.folder, device, settings, report.counts, self.module)
        old = self.plan
        self.plan = Plan(settings, device, device_words(device, devices), key)
        if old is not None and old.key == key:  # the same measurement holds (other epochs or budget)
            self.plan.status, self.plan.doing, self.plan.measurement = old.status, old.doing, old.measurement
        self.events.estimate.emit()
        return None if old is not None and old.key == key else key

    def _plan_for(self, key: str) -> Plan | None:
        return self.plan if self.plan is not None and self.plan.key == key else None

    def measure_progress(self, key: str, progress: dict) -> None:
        plan = self._plan_for(key)
        if plan is not None and plan.status == "measuring":
            plan.doing = str(progress.get("message") or "")
            self.events.estimate.emit()

    def measured(self, key: str, measurement: te.Measurement) -> bool:
        """A measurement for `key`; False (nothing changes) when the plan has moved on."""
        plan = self._plan_for(key)
        if plan is None:
            return False
        plan.status, plan.measurement, plan.doing = "measured", measurement, ""
        self.events.estimate.emit()
        return True

    def measure_failed(self, key: str, why: str) -> None:
        plan = self._plan_for(key)
        if plan is not None:
            plan.status, plan.doing = "failed", why
            self.events.estimate.emit()

    def estimate(self) -> te.Estimate | None:
        plan = self.plan
        return te.estimate(plan.measurement, plan.settings) if plan is not None and plan.measurement else None

    def estimate_line(self) -> str:
        """What the estimate's line says: measuring, the time, or why there is none; "" with nothing to start."""
        plan = self.plan
        if plan is None:
            return ""
        if plan.status == "failed":
            return no_estimate_text(plan.doing)
        est = self.estimate()
        if est is None:
            return measuring_text(plan.where, plan.doing)
        return estimate_text(est, self.report.counts, plan.settings, plan.where)
