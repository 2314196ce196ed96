"""Training runs: each one a separate process with its own folder, so a crash or OOM cannot take the GUI down.

A run lives in `<user data dir>/runs/<name>/`: `run.json` (kind, settings, argv, status, pid), `events.jsonl`
(core/events.py, from `earshot train KIND --events`), `metrics.csv`, `log.txt` and the checkpoint
`model.safetensors` with its resume state. `start_run` checks the settings against the kind's schema
(core/kinds.py, core/config.py) and launches the trainer in its own process group; `Run.poll()` reads new
events; `cancel()` sends SIGINT (the trainer keeps its last good checkpoint), then SIGTERM; a run that vanished
without a last event is `interrupted` and `resume()` relaunches it; `register_model` copies a finished
checkpoint and a model card into the user models folder atomically. No Qt here.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

from platformdirs import user_data_dir

from app.services.registry import APP_NAME, user_models_dir
from core import kinds
from core.config import SettingSpec, argv_for, settings_of
from core.config import check_settings as check_config
from core.events import EventReader, append_event, terminal_status
from core.files import atomic_path

__all__ = ["KINDS", "Run", "RunError", "SettingSpec", "build_argv", "check_settings", "list_runs", "open_run",
           "register_model", "settings_schema", "start_run"]

STATUSES = ("running", "finished", "failed", "cancelled", "interrupted")
KEPT_STATUSES = ("cancelled", "interrupted")  # stopped early by the user or the machine: the best so far is usable
DEVICES = ("auto", "cpu", "cuda", "mps")
CHECKPOINT = "model.safetensors"
KINDS = {name: kind.tab_label for name, kind in kinds.KINDS.items()}  # the Train tab's choices, in table order
RUN_OPTIONS = {"device"}  # settings the run service sets itself (the Train tab has its own device picker)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,79}")
_NOT_METRICS = {"step", "total", "loss", "epoch", "lr", "time", "event"}
CANCEL_TIMEOUT_S = 15.0  # SIGINT -> SIGTERM -> SIGKILL, this long apart


class RunError(ValueError):
    """A run cannot be started, resumed or registered; the message says why."""


def runs_dir() -> Path:
    return Path(user_data_dir(APP_NAME, appauthor=False)) / "runs"


def _now() -> str:
    return _dt.datetime.now().isoformat(timespec="seconds")


# ------------------------------------------------------------------------------------------------ settings


def kind_of(kind: str, module: str | None = None) -> kinds.Kind:
    """The kind's row of core/kinds.py (trained by `module` instead when given: tests, plug-ins)."""
    try:
        return kinds.get(kind, module)
    except kinds.KindError as e:
        raise RunError(str(e)) from None


def settings_classes(kind: str, module: str | None = None) -> list[type]:
    """The config dataclasses whose `setting(...)` fields are the settings of a `kind` run (training/<kind>_settings.py:
    no trainer, no torch; a replacement trainer's own module)."""
    try:
        return kind_of(kind, module).settings_classes()
    except kinds.KindError as e:
        raise RunError(f"training {kind} models is not available in this version of Earshot ({e})") from None


def _all_settings(kind: str, module: str | None) -> list[SettingSpec]:
    return [spec for cls in settings_classes(kind, module) for spec in settings_of(cls)]


def settings_schema(kind: str, module: str | None = None) -> list[SettingSpec]:
    """The settings a run of `kind` accepts, read from the config dataclasses' field metadata (cheap: no trainer is
    imported). The run options the service sets itself (RUN_OPTIONS) are left out."""
    return [spec for spec in _all_settings(kind, module) if spec.name not in RUN_OPTIONS]


def check_settings(kind: str, settings: dict[str, Any], module: str | None = None) -> list[SettingSpec]:
    """Refuse unknown, mistyped, out-of-range and inconsistent settings before launch; returns the schema."""
    specs = settings_schema(kind, module)
    problems = [f"{key}: set by the run itself, not a setting" for key in settings if key in RUN_OPTIONS]
    problems += check_config(settings_classes(kind, module),
                             {k: v for k, v in settings.items() if k not in RUN_OPTIONS})
    if problems:
        raise RunError(f"settings refused for {kind} training: " + "; ".join(problems))
    return specs


def build_argv(kind: str, data: str | Path, out: str | Path, settings: dict[str, Any], device: str = "auto",
               events: str | Path | None = None, module: str | None = None) -> list[str]:
    """The full command line of a run (checked first; raises RunError with every problem)."""
    if device not in DEVICES and not str(device).startswith("cuda:"):
        raise RunError(f"unknown device {device!r}; choose one of {', '.join(DEVICES)}")
    specs = check_settings(kind, settings, module)
    argv = [sys.executable, "-m", "app", "train", kind]
    if module is not None:
        argv += ["--trainer-module", module]
    argv += ["--data", str(data), "--out", str(out)]
    if any(spec.name == "device" for spec in _all_settings(kind, module)):
        argv += ["--device", device]
    argv += argv_for(specs, settings)
    if events is not None:
        argv += ["--events", str(events)]
    return argv


# ------------------------------------------------------------------------------------------------ runs

_PROCESSES: dict[str, subprocess.Popen] = {}  # run folder -> the process this GUI started (to reap it)


class Run:
    """One training run: its folder, its events so far and, while it runs, its process."""

    def __init__(self, folder: Path, info: dict[str, Any]) -> None:
        self.folder = Path(folder)
        self.info = info
        self.events: list[dict[str, Any]] = []
        self.result: dict[str, Any] | None = None
        self.error: str | None = None
        self.latest: dict[str, Any] = {}  # the last progress event
        self._reader = EventReader(self.events_path)
        self._attempt_start = 0  # index in events of this attempt's "started" line
        self._signal_at: float | None = None
        self._signals_sent = 0
        self._kept: tuple[tuple[int, int], dict[str, Any] | None] | None = None  # kept_checkpoint's last reading

    def __repr__(self) -> str:
        return f"<Run {self.name} {self.kind} {self.status}>"

    # ----------------------------------------------------------------- properties
    @property
    def name(self) -> str:
        return str(self.info["name"])

    @property
    def kind(self) -> str:
        return str(self.info["kind"])

    @property
    def status(self) -> str:
        return str(self.info.get("status", "interrupted"))

    @property
    def checkpoint(self) -> Path:
        return self.folder / CHECKPOINT

    @property
    def events_path(self) -> Path:
        return self.folder / "events.jsonl"

    @property
    def log_path(self) -> Path:
        return self.folder / "log.txt"

    @property
    def process(self) -> subprocess.Popen | None:
        return _PROCESSES.get(str(self.folder))

    def is_active(self) -> bool:
        """The trainer process is still there (even after its result, while it exits)."""
        proc = self.process
        if proc is not None:
            return proc.poll() is None
        return self.status == "running" and _pid_alive(self.info.get("pid"), self.folder)

    def can_resume(self) -> bool:
        return self.status in ("interrupted", "cancelled", "failed") and not self.is_active()

    def kept_checkpoint(self) -> dict[str, Any] | None:
        """The `training` record of the checkpoint a stopped run keeps (the trainer writes its best model so far
        at every better epoch), or None: no run that stopped early (cancelled, interrupted), no file yet, a
        file that is not a whole checkpoint of this kind, or a trainer still running. Read once per file
        version (size, mtime): the buttons ask often."""
        if self.status not in KEPT_STATUSES or self.is_active():
            return None
        try:
            stat = self.checkpoint.stat()
        except OSError:
            return None
        version = (stat.st_size, stat.st_mtime_ns)
        if self._kept is None or self._kept[0] != version:
            self._kept = (version, _checkpoint_record(self.checkpoint, self.kind))
        return self._kept[1]

    def can_use(self) -> bool:
        """Whether "Use this model" has a checkpoint to copy: a finished run's, or a stopped run's best so far."""
        return self.status == "finished" or self.kept_checkpoint() is not None

    def kill(self, timeout_s: float = 5.0) -> None:
        """End the trainer at once (SIGKILL to its process group) and reap it: for a scratch run nobody keeps
        (the estimate's measuring step), not for a user's run, whose Stop keeps its checkpoint."""
        if self.is_active():
            self._send(getattr(signal, "SIGKILL", signal.SIGTERM))
        proc = self.process
        if proc is not None:
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                return
            _PROCESSES.pop(str(self.folder), None)

    # ----------------------------------------------------------------- following
    def poll(self) -> list[dict[str, Any]]:
        """Read new events, update the status (and run.json); returns the new events."""
        new = self._read_events()
        if self.status == "running":
            self._settle(new)
        elif self.info.get("pid") and self.process is not None and self.process.poll() is not None:
            _PROCESSES.pop(str(self.folder), None)  # reaped
        return new

    def _read_events(self) -> list[dict[str, Any]]:
        new = self._reader.read()
        for event in new:
            self._apply(event)
        return new

    def _apply(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        self.events.append(event)
        if kind == "started":  # a new attempt: earlier terminal events no longer count
            self._attempt_start = len(self.events) - 1
            self.result, self.error = None, None
        elif kind == "progress":
            self.latest = event
        elif kind == "result":
            self.result = event.get("result") if isinstance(event.get("result"), dict) else {}
        elif kind == "error":
            self.error = str(event.get("message", "error"))

    def _terminal(self) -> str | None:
        return terminal_status(self.events[self._attempt_start:])

    def _settle(self, new: list[dict[str, Any]]) -> None:
        terminal = self._terminal()
        if terminal is not None:
            self._set_status(terminal)
            return
        proc = self.process
        code = proc.poll() if proc is not None else None
        alive = code is None and (proc is not None or _pid_alive(self.info.get("pid"), self.folder))
        if alive:
            self._escalate()
            return
        self._read_events()  # lines written just before it exited
        terminal = self._terminal()
        if terminal is None:
            if self.info.get("cancel_requested"):
                terminal = "cancelled"
            elif code is not None and code > 0:
                terminal = "failed"
                last = self.log_tail(2000).strip().splitlines()[-1:]
                self.error = f"the trainer exited with code {code}" + (f": {last[0]}" if last else "")
            else:
                terminal = "interrupted"  # killed (signal, OOM killer, power cut) with no last word
        self.info["exit_code"] = code
        self._set_status(terminal)

    def _set_status(self, status: str) -> None:
        if self.info.get("status") != status:
            self.info["status"] = status
            self.info["ended"] = _now()
            if self.result is not None:
                self.info["result"] = _scalars(self.result)
            if self.error:
                self.info["error"] = self.error
            _write_json(self.folder / "run.json", self.info)
        proc = self.process
        if proc is not None and proc.poll() is not None:
            _PROCESSES.pop(str(self.folder), None)

    def _escalate(self) -> None:
        """After a cancel: SIGTERM, then SIGKILL, if the trainer does not stop in time."""
        if self._signal_at is None or time.monotonic() - self._signal_at < CANCEL_TIMEOUT_S:
            return
        sig = signal.SIGTERM if self._signals_sent < 2 else getattr(signal, "SIGKILL", signal.SIGTERM)
        self._send(sig)

    def _send(self, sig: int) -> None:
        pid = self.info.get("pid")
        if not pid:
            return
        try:
            if os.name == "posix":
                os.killpg(int(pid), sig)
            elif sig == signal.SIGINT:
                os.kill(int(pid), signal.CTRL_BREAK_EVENT)  # type: ignore[attr-defined]
            else:
                os.kill(int(pid), sig)
        except (ProcessLookupError, PermissionError, OSError):
            pass
        self._signal_at = time.monotonic()
        self._signals_sent += 1

    # ----------------------------------------------------------------- control
    def cancel(self) -> None:
        """Ask the trainer to stop (SIGINT: it closes its job, keeping the last good checkpoint)."""
        if self.status != "running" or not self.is_active():
            return
        self.info["cancel_requested"] = _now()
        _write_json(self.folder / "run.json", self.info)
        self._send(signal.SIGINT)

    def wait(self, timeout_s: float = 30.0, interval_s: float = 0.05) -> bool:
        """Poll until the process has exited and the status settled (tests, shutdown); True if it did."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.poll()
            if self.status != "running" and not self.is_active():
                return True
            time.sleep(interval_s)
        return False

    def resume(self) -> Run:
        """Relaunch into the same folder with the trainer's `--resume`."""
        self.poll()
        if not self.can_resume():
            raise RunError(f"run {self.name!r} is {self.status}; only interrupted, cancelled or failed runs resume")
        argv = list(self.info["argv"])
        if "--resume" not in argv:
            argv.append("--resume")
        self.info.pop("cancel_requested", None)
        self.info.pop("error", None)
        self._signal_at, self._signals_sent = None, 0
        _launch(self, argv)
        return self

    # ----------------------------------------------------------------- reading
    def log_tail(self, chars: int = 4000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - chars))
                return f.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def curves(self) -> dict[str, tuple[list[float], list[float]]]:
        """Series to plot: the loss of each step and every numeric metric in the progress events, against the step.

        A trainer with stages (units: VQ-VAE, then inverter) gets one loss series per stage, 'loss (stage)':
        their losses are different quantities on different scales.
        """
        out: dict[str, tuple[list[float], list[float]]] = {}
        for e in self.events:
            if e.get("event") != "progress" or not isinstance(e.get("step"), int | float):
                continue
            stage = e.get("stage") if isinstance(e.get("stage"), str) else None
            for key, value in e.items():
                if key in _NOT_METRICS and key != "loss":
                    continue
                if key == "loss" and e.get("epoch_end"):
                    continue  # the epoch's mean, at its last step's x: a second point there, a jump no step made
                if key == "loss" and stage:
                    key = f"loss ({stage})"
                if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                    xs, ys = out.setdefault(key, ([], []))
                    xs.append(float(e["step"]))
                    ys.append(float(value))
        return out

    def metrics(self) -> dict[str, float]:
        """The last value of each metric (the result's scalars once finished)."""
        if self.result is not None:
            return {k: v for k, v in _scalars(self.result).items() if isinstance(v, float)}
        if "result" in self.info:
            return {k: v for k, v in self.info["result"].items() if isinstance(v, float)}
        return {k: ys[-1] for k, (_, ys) in self.curves().items()}

    def progress(self) -> tuple[int, int, float | None]:
        """(step, total, eta seconds) of the current attempt, from the progress events' times.

        The rate comes from the counter on show only (the latest event's stage and total): a data pass before
        the training steps counts other things at another pace. It is there from the counter's first event (the
        work it counts began with the event before it), so a long first item ("augmenting 1/2021") has its time
        left too. No ETA once that counter is full (what follows is not counted yet), and never beyond the time
        budget, where the trainer stops whatever is left."""
        latest = self.latest
        step, total = int(latest.get("step") or 0), int(latest.get("total") or 0)
        attempt = self.events[self._attempt_start:]
        counter = (latest.get("stage"), latest.get("total"))
        timed = [e for e in attempt if e.get("event") == "progress" and (e.get("stage"), e.get("total")) == counter
                 and isinstance(e.get("time"), int | float) and isinstance(e.get("step"), int | float)]
        eta = None
        origin = _counter_origin(attempt, timed)
        if total and step < total and origin is not None:
            last = timed[-1]
            rate = (last["step"] - origin[0]) / max(last["time"] - origin[1], 1e-6)
            if rate > 0:
                eta = max(0.0, (total - step) / rate)
        budget = (self.info.get("settings") or {}).get("max_minutes")
        started = attempt[0].get("time") if attempt and attempt[0].get("event") == "started" else None
        if eta is not None and isinstance(budget, int | float) and isinstance(started, int | float):
            # the trainer's clock starts with the attempt (a resumed one has spent some before: still a bound)
            eta = max(0.0, min(eta, budget * 60 - (time.time() - started)))
        return step, total, eta


def _counter_origin(attempt: list[dict[str, Any]], timed: list[dict[str, Any]]) -> tuple[float, float] | None:
    """(step, time) the rate of a counter is measured from: its first event once it has two; with one event
    that has counted something, the event before it, when the counter's work began (step one less)."""
    if len(timed) >= 2:
        return float(timed[0]["step"]), float(timed[0]["time"])
    if not timed or timed[0]["step"] < 1:
        return None
    at = next(i for i, e in enumerate(attempt) if e is timed[0])
    before = [e for e in attempt[:at] if isinstance(e.get("time"), int | float)]
    return (float(timed[0]["step"]) - 1, float(before[-1]["time"])) if before else None


def _checkpoint_record(path: Path, kind: str) -> dict[str, Any] | None:
    """The `training` record of a whole checkpoint of `kind` at `path` (its header and tensor table read and
    checked against the file's size, no weights), or None."""
    from core.checkpoints import CheckpointError, read_metadata

    try:
        meta = read_metadata(path)
    except (CheckpointError, OSError):
        return None
    return meta["training"] if meta["kind"] == kind else None


def _scalars(result: dict[str, Any]) -> dict[str, Any]:
    """The flat scalar part of a result (metrics, counts), for run.json and the model card."""
    out: dict[str, Any] = {}
    for key, value in result.items():
        if isinstance(value, bool | str) or value is None:
            out[key] = value
        elif isinstance(value, int | float):
            out[key] = float(value) if isinstance(value, float) else value
        elif isinstance(value, dict):
            for k, v in value.items():
                if isinstance(v, int | float) and not isinstance(v, bool):
                    out[f"{key}.{k}"] = float(v)
    return out


def _pid_alive(pid: Any, folder: Path) -> bool:  # noqa: ANN401 - pid from JSON
    """Is process `pid` alive and still our trainer (pids are reused)?"""
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return os.name != "posix"
    proc = Path(f"/proc/{int(pid)}")
    if proc.is_dir():
        try:
            if (proc / "stat").read_text().split(")")[-1].split()[0] == "Z":
                return False  # a zombie has finished
            return str(folder) in (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            return False
    return True


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomic: a crash mid-write leaves the old file."""
    with atomic_path(path, fsync=False) as tmp, tmp.open("w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, default=str)


def _launch(run: Run, argv: list[str]) -> None:
    attempt = int(run.info.get("attempts", 0)) + 1
    append_event(run.events_path, {"event": "started", "attempt": attempt, "resume": "--resume" in argv})
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if run.info.get("module_path"):
        env["PYTHONPATH"] = os.pathsep.join(p for p in (run.info["module_path"], env.get("PYTHONPATH")) if p)
    kwargs: dict[str, Any] = {"start_new_session": True} if os.name == "posix" else \
        {"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)}
    with open(run.log_path, "ab") as log:
        log.write(f"--- attempt {attempt} at {_now()}: {' '.join(argv)}\n".encode())
        log.flush()
        try:
            proc = subprocess.Popen(argv, cwd=run.folder, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, **kwargs)
        except OSError as e:
            run.info.update(status="failed", error=f"could not start the trainer: {e}")
            _write_json(run.folder / "run.json", run.info)
            raise RunError(f"could not start the trainer: {e}") from e
    _PROCESSES[str(run.folder)] = proc
    run.info.update(argv=argv, pid=proc.pid, status="running", attempts=attempt, started=_now())
    run.info.pop("ended", None)
    run.info.pop("exit_code", None)
    _write_json(run.folder / "run.json", run.info)
    run.poll()  # consume the "started" line


def check_name(name: str) -> str:
    name = name.strip()
    if not _NAME.fullmatch(name):
        raise RunError(f"{name!r} is not a usable name: use letters, digits, '-', '_' and '.', "
                       "starting with a letter or digit (80 characters at most)")
    return name


def suggest_name(kind: str, base: Path | None = None) -> str:
    """`<kind>-<date>-<time>`, with a counter if that exists already."""
    base = base or runs_dir()
    stem = f"{kind}-{_dt.datetime.now():%Y%m%d-%H%M%S}"
    name, i = stem, 2
    while (base / name).exists():
        name, i = f"{stem}-{i}", i + 1
    return name


def start_run(kind: str, name: str, data: str | Path, settings: dict[str, Any], device: str = "auto",
              base: Path | None = None, module: str | None = None, module_path: str | Path | None = None) -> Run:
    """Check everything, make `<base>/<name>/` and launch the trainer there. A name already used is refused.

    `module`/`module_path`: run this trainer module (importable from `module_path`) instead of the kind's own.
    """
    name = check_name(name)
    data = Path(data).expanduser().resolve()
    if not data.exists():
        raise RunError(f"{data}: no such data folder")
    if module_path is not None and str(module_path) not in sys.path:
        sys.path.insert(0, str(module_path))  # to introspect the override here as well
    base = Path(base) if base is not None else runs_dir()
    folder = base / name
    argv = build_argv(kind, data, folder / CHECKPOINT, settings, device, folder / "events.jsonl", module)
    base.mkdir(parents=True, exist_ok=True)
    try:
        folder.mkdir()
    except FileExistsError:
        raise RunError(f"a run named {name!r} already exists ({folder}); choose another name") from None
    info = {"kind": kind, "name": name, "data": str(data), "settings": settings, "device": device,
            "argv": argv, "created": _now(), "status": "running", "pid": None, "attempts": 0,
            "module": module, "module_path": str(module_path) if module_path else None}
    _write_json(folder / "run.json", info)
    run = Run(folder, info)
    _launch(run, argv)
    return run


def open_run(folder: Path) -> Run:
    """A run from its folder, with all its events read and its status brought up to date."""
    try:
        info = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise RunError(f"{folder.name}: not a run folder ({e})") from e
    if not isinstance(info, dict) or "kind" not in info or "name" not in info:
        raise RunError(f"{folder.name}: run.json lacks kind/name")
    run = Run(folder, info)
    run.poll()
    return run


def list_runs(base: Path | None = None) -> list[Run]:
    """Past and current runs, newest first; folders that are not runs are skipped."""
    base = Path(base) if base is not None else runs_dir()
    runs = []
    if base.is_dir():
        for folder in base.iterdir():
            if (folder / "run.json").is_file():
                try:
                    runs.append(open_run(folder))
                except RunError:
                    continue
    runs.sort(key=lambda r: str(r.info.get("created", "")), reverse=True)
    return runs


# ------------------------------------------------------------------------------------------------ models


def model_card(run: Run, name: str) -> str:
    """A small Markdown card for a registered model: what it is, how it was trained, how well it did."""
    lines = [f"# {name}", "", f"A **{run.kind}** model trained with Earshot (run `{run.name}`).", "",
             "## Training", "", f"- data: `{run.info.get('data')}`", f"- device: {run.info.get('device')}",
             f"- started: {run.info.get('created')}, ended: {run.info.get('ended', '?')}"]
    for key, value in (run.info.get("settings") or {}).items():
        lines.append(f"- {key}: {value}")
    if run.status != "finished":
        lines += ["", f"The run was {run.status} before its end; this is the best checkpoint it kept."]
        record = run.kept_checkpoint() or {}
        metrics = record.get("metrics") if isinstance(record.get("metrics"), dict) else {}
        scalars = {k: record[k] for k in ("steps", "epochs", "best_epoch") if isinstance(record.get(k), int)}
        scalars |= {f"metrics.{k}": float(v) for k, v in metrics.items() if isinstance(v, int | float)}
    else:
        scalars = _scalars(run.result or {}) or run.info.get("result", {})
    if scalars:
        lines += ["", "## Results", ""]
        for key, value in scalars.items():
            if key in ("command",):
                continue
            lines.append(f"- {key}: {value:.4g}" if isinstance(value, float) else f"- {key}: {value}")
    return "\n".join(lines) + "\n"


def _atomic_copy(write: Callable[[Path], None], target: Path) -> None:
    with atomic_path(target) as tmp:  # a failed copy (disk full) leaves no half file
        write(tmp)


def register_model(run: Run, name: str, models_dir: Path | None = None, overwrite: bool = False) -> Path:
    """Copy a run's checkpoint into the user models folder as `<name>.safetensors`, with a card: a finished
    run's, or the best so far of a run stopped early (cancelled, interrupted) that wrote one."""
    from core.checkpoints import CheckpointError, read_metadata

    name = check_name(name)
    run.poll()
    if run.status != "finished" and run.kept_checkpoint() is None:
        why = "it is still running" if run.is_active() else \
            "it has no checkpoint yet (a run writes its best model at the end of an epoch)" \
            if run.status in KEPT_STATUSES else "only a finished or stopped run's model can be used"
        raise RunError(f"run {run.name!r} is {run.status}; {why}")
    try:
        meta = read_metadata(run.checkpoint)
    except CheckpointError as e:
        raise RunError(f"run {run.name!r} has no usable checkpoint: {e}") from e
    if meta["kind"] != run.kind:
        raise RunError(f"{run.checkpoint.name} holds a {meta['kind']} model, not {run.kind}")
    folder = Path(models_dir) if models_dir is not None else user_models_dir()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{name}.safetensors"
    if target.exists() and not overwrite:
        raise RunError(f"a model named {name!r} already exists ({target}); choose another name")
    card = model_card(run, name)
    _atomic_copy(lambda tmp: shutil.copyfile(run.checkpoint, tmp), target)
    _atomic_copy(lambda tmp: tmp.write_text(card, encoding="utf-8"), target.with_suffix(".md"))
    run.info.setdefault("registered", []).append(name)
    _write_json(run.folder / "run.json", run.info)
    return target


# ------------------------------------------------------------------------------------------------ jobs


def validate_job(kind: str, folder: str | Path) -> Generator[dict[str, Any], None, Any]:
    """Job: check a data folder for `kind` (training.validate); returns a DataReport."""
    from training.validate import validate_job as _validate

    return (yield from _validate(kind, folder))


def schema_job(kind: str, module: str | None = None) -> Generator[dict[str, Any], None, Any]:
    """Job: describe a kind's settings and the machine's devices (core.device imports torch, so: a worker);
    returns (specs, available devices)."""
    yield {"message": f"loading the {kind} settings"}
    specs = settings_schema(kind, module)
    from core.device import available_devices

    return specs, available_devices()
