"""How long a run will take, before Start: its trainer measured on its data, then the plan's arithmetic. No Qt.

`measure_job` (a job: the Train tab runs it in a worker) starts the real trainer with the run's settings on the
run's data in a scratch folder, follows its events until it has timed a few training steps, then kills it and
removes the folder: the `Measurement` says how long it took to start and read the data, one step, an epoch's
evaluation when one came, and the trainer's own step count. Measurements are kept per kind, data, device and
settings (`MeasurementCache`, a JSON file beside the runs) so the same choice is not measured twice.
`estimate` turns a measurement into the plan's time for the settings now: the step count scales with the
epoch and step settings (a measurement holds for any of them), and the time budget caps it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import statistics
import time
import uuid
from collections.abc import Generator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app.services.training import runs as tr
from core.files import atomic_path

COUNT_SETTINGS = ("max_epochs", "epochs", "finetune_epochs", "vq_steps", "inv_steps", "steps")  # steps scale with
BUDGET = "max_minutes"
PROBES = ".measuring"  # the scratch runs' folder inside the runs folder (no run.json of its own: never listed)
CACHE_FILE = "step-times.json"
STEPS_TIMED = 5  # training steps to see: the first (warm-up) and four more
TIMING_LIMIT_S = 20.0  # slow steps: measuring stops this long after the first, with what it has
POLL_S = 0.2


@dataclass(frozen=True)
class Measurement:
    """What the trainer took on this data and machine, for one choice of settings."""

    step_s: float  # one training step (the median of those timed)
    prepare_s: float  # from launch to the first step: start-up, reading the data, building the model
    total_steps: int  # the trainer's own step count for the settings measured
    counts: int  # the sum of their epoch and step settings (COUNT_SETTINGS): the step count scales with it
    eval_s: float | None = None  # an epoch's evaluation, when an epoch ended while measuring
    epoch_steps: int | None = None  # steps of that epoch
    whole_s: float | None = None  # the whole run, when it finished while measured


@dataclass(frozen=True)
class Estimate:
    seconds: float  # the whole plan, unbounded
    steps: int
    budget_s: float | None  # the time budget, when it stops the run before the plan's end
    measurement: Measurement


def count_sum(settings: dict[str, Any]) -> int:
    return sum(int(v) for k, v in settings.items() if k in COUNT_SETTINGS and isinstance(v, int | float))


def estimate(m: Measurement, settings: dict[str, Any]) -> Estimate:
    """The plan's time for `settings` from a measurement of the same choice (its counts and budget aside)."""
    counts = count_sum(settings)
    scale = counts / m.counts if m.counts and counts else 1.0
    steps = max(1, round(m.total_steps * scale))
    if m.whole_s is not None and scale == 1.0:
        seconds = m.whole_s  # it ran to its end while measured
    else:
        evals = steps / m.epoch_steps if m.epoch_steps else 0.0
        seconds = m.prepare_s + steps * m.step_s + evals * (m.eval_s or 0.0)
    budget = settings.get(BUDGET)
    budget_s = float(budget) * 60 if isinstance(budget, int | float) and budget > 0 else None
    return Estimate(seconds, steps, budget_s if budget_s is not None and seconds > budget_s else None, m)


# ------------------------------------------------------------------------------------------------ the cache


def measurement_key(kind: str, folder: str | Path, device: str, settings: dict[str, Any], counts: dict[str, Any],
                    module: str | None = None) -> str:
    """What a measurement depends on: kind, data (and what its check counted), device, trainer and the
    settings but the budget and the epoch and step counts."""
    fixed = {k: v for k, v in settings.items() if k not in COUNT_SETTINGS and k != BUDGET}
    data = {k: v for k, v in counts.items() if isinstance(v, int | float | str)}
    text = json.dumps([kind, str(Path(folder).expanduser().resolve()), device, module, fixed, data],
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


class MeasurementCache:
    """Measurements by key in one JSON file; an unreadable file is an empty cache, never an error."""

    def __init__(self, base: Path | None = None) -> None:
        self.path = (Path(base) if base is not None else tr.runs_dir()) / CACHE_FILE

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, key: str) -> Measurement | None:
        entry = self._read().get(key)
        try:
            return Measurement(**entry["measurement"]) if isinstance(entry, dict) else None
        except (TypeError, KeyError):
            return None

    def put(self, key: str, m: Measurement, kind: str, device: str) -> None:
        data = self._read()
        data[key] = {"kind": kind, "device": device, "when": time.time(), "measurement": asdict(m)}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(self.path, fsync=False) as tmp:
                tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        except OSError:
            pass  # no cache: the next estimate measures again


# ------------------------------------------------------------------------------------------------ measuring


def _step_events(events: list[dict[str, Any]]) -> list[int]:
    """Indices of the training steps' events: progress with a loss, timed, not an epoch's end."""
    return [i for i, e in enumerate(events) if e.get("event") == "progress" and e.get("total")
            and isinstance(e.get("loss"), int | float) and isinstance(e.get("time"), int | float)
            and not e.get("epoch_end")]


def measurement_of(events: list[dict[str, Any]], counts: int, finished: bool) -> Measurement:
    """A `Measurement` from a scratch run's events (its "started" line first)."""
    steps = _step_events(events)
    if not steps:
        raise tr.RunError("the trainer reported no training step to time")
    time_of = [float(events[i]["time"]) for i in steps]
    plain, evals, epoch_steps = [], [], None  # times between two steps: with an epoch's end between them or not
    for n in range(1, len(steps)):
        ended = [e for e in events[steps[n - 1] + 1 : steps[n]] if e.get("epoch_end")]
        (evals if ended else plain).append(time_of[n] - time_of[n - 1])
        if ended and epoch_steps is None and isinstance(ended[0].get("step"), int):
            epoch_steps = int(ended[0]["step"])
    started = float(events[0].get("time", time_of[0]))
    if plain:
        step_s = statistics.median(plain)
    else:  # one step, or one step an epoch: a step with its evaluation
        step_s = statistics.median(evals) if evals else max(time_of[0] - started, 1e-3)
    eval_s = max(0.0, statistics.median(evals) - step_s) if evals and plain else None
    end = next((e.get("time") for e in reversed(events) if e.get("event") == "result"), None)
    whole = float(end) - started if finished and isinstance(end, int | float) else None
    return Measurement(step_s=step_s, prepare_s=max(0.0, time_of[0] - started - step_s),
                       total_steps=int(events[steps[0]]["total"]), counts=counts, eval_s=eval_s,
                       epoch_steps=epoch_steps if eval_s is not None else None, whole_s=whole)


def _timed_enough(events: list[dict[str, Any]]) -> bool:
    steps = _step_events(events)
    return len(steps) >= STEPS_TIMED or bool(steps) and time.time() - float(events[steps[0]]["time"]) > \
        TIMING_LIMIT_S


def _what_it_does(run: tr.Run) -> str:
    """The scratch run's latest progress, in words, for the estimate's line while it measures."""
    latest = run.latest
    if _step_events(run.events):
        return "timing its steps"
    message, step, total = str(latest.get("message") or "starting the trainer"), latest.get("step"), \
        latest.get("total")
    return f"{message} {step}/{total}" if total else message


def measure_job(kind: str, folder: str | Path, settings: dict[str, Any], device: str = "auto",
                base: Path | None = None, module: str | None = None,
                module_path: str | Path | None = None) -> Generator[dict[str, Any], None, Measurement]:
    """Job: the trainer's times on this data, from a scratch run stopped after a few steps (a cancelled job
    kills it as well); the scratch folder is removed either way."""
    scratch = (Path(base) if base is not None else tr.runs_dir()) / PROBES
    run = tr.start_run(kind, f"measure-{uuid.uuid4().hex[:12]}", folder, settings, device=device, base=scratch,
                       module=module, module_path=module_path)
    try:
        while True:
            run.poll()
            if run.status != "running" or _timed_enough(run.events):
                break
            yield {"message": _what_it_does(run), "step": run.latest.get("step"), "total": run.latest.get("total")}
            time.sleep(POLL_S)
        if run.status in ("failed", "interrupted"):
            raise tr.RunError(run.error or f"the trainer was {run.status}: {run.log_tail(300).strip()}")
        return measurement_of(run.events, count_sum(settings), run.status == "finished")
    finally:
        run.kill()
        shutil.rmtree(run.folder, ignore_errors=True)
