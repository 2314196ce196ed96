"""What the Train tab says, without Qt: a data folder's validation report, a finished run's summary, a run's
line in the runs list, the time left and the estimate before Start."""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING, Any

from app.ui.durations import format_duration

if TYPE_CHECKING:
    from app.services.training import runs as tr
    from app.services.training.estimate import Estimate

EPOCH_SETTINGS = ("max_epochs", "epochs", "finetune_epochs")  # the plan's epochs, where a kind counts them


def format_eta(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return ""
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d} left" if h else f"{m}:{s:02d} left"


def report_html(report: Any) -> str:  # noqa: ANN401 - a DataReport
    """The validation report: counts, problems in red, warnings in amber."""
    c = report.counts
    facts = []
    for key, label in (("rows", "rows"), ("clips", "clips"), ("audio_files", "audio files"),
                       ("speakers", "speakers"), ("words", "words"), ("captions", "captions")):
        if c.get(key):
            facts.append(f"{c[key]} {label}")
    if c.get("total_duration_s"):
        seconds, approx = c["total_duration_s"], "~" if c.get("duration_estimated") else ""
        amount = f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s"
        facts.append(f"{approx}{amount} of audio")
    if c.get("splits"):
        facts.append("splits " + ", ".join(f"{k} {v}" for k, v in c["splits"].items()))
    head = "<b style='color:#2e8b57'>Ready to train</b>" if report.ok else "<b style='color:#c0392b'>Not usable</b>"
    parts = [f"{head} — {html.escape(report.layout or report.folder)}"]
    if facts:
        parts.append(html.escape(" · ".join(facts)))
    parts += [f"<span style='color:#c0392b'>✗ {html.escape(p)}</span>" for p in report.problems]
    parts += [f"<span style='color:#b9770e'>! {html.escape(w)}</span>" for w in report.warnings]
    return "<br>".join(parts)


RESULT_BOOKKEEPING = {"wall_time_s", "best_value", "best_epoch", "steps", "epochs"}  # of a result, not metrics
STOPPED_WHY = {"time_limit": "its time budget", "early_stopping": "no more progress"}


def finished_summary(run: tr.Run, limit: int = 4) -> str:
    """How long a finished run took (and why it stopped, if not at its end), then its metrics by their own
    names, the best one first: the result's scalars flatten `metrics` to "metrics.<name>" and keep the run's
    bookkeeping (wall_time_s, steps) beside them, which is no metric to show."""
    result = run.result if run.result is not None else run.info.get("result") or {}
    scalars = run.metrics()
    seconds = scalars.get("wall_time_s")
    named = {k.removeprefix("metrics."): v for k, v in scalars.items() if k.startswith("metrics.")}
    if not named:  # a trainer without the common result schema: its own scalars are its metrics
        named = {k: v for k, v in scalars.items() if k not in RESULT_BOOKKEEPING}
    best = result.get("best_metric")
    order = sorted(named, key=lambda k: k != best)  # stable: the best first, the rest as the trainer gave them
    metrics = ", ".join(f"{k} {named[k]:.3g}" for k in order[:limit])
    took = f" in {format_duration(seconds, rough=True)}" if isinstance(seconds, int | float) else ""
    why = STOPPED_WHY.get(str(result.get("stopped")))
    return f"{run.name} finished{took}" + (f" ({why})" if why else "") + (f": {metrics}" if metrics else "")


def run_label(run: tr.Run) -> str:
    """Name, kind, status and the best metric of a finished run, read from the trainers' one result schema
    (training.trainer.TrainResult: `best_metric`, `best_value`) whatever the kind."""
    result = run.result if run.result is not None else run.info.get("result") or {}
    name, value = result.get("best_metric"), result.get("best_value")
    if value is None and name:
        value = run.metrics().get(name)
    shown = f" · {name} {value:.3g}" if name and isinstance(value, int | float) else ""
    return f"{run.name} · {run.kind} · {run.status}{shown}"


# ------------------------------------------------------------------------------------------------ the estimate


def about(seconds: float) -> str:
    """A length of work in its one unit that matters, never "0 s"."""
    return format_duration(max(seconds, 1.0), rough=True)


def step_words(seconds: float) -> str:
    """A step's time as precise as it is worth: "12 s", "3.4 s", "0.28 s", "0.003 s"."""
    if seconds >= 10:
        return f"{seconds:.0f} s"
    if seconds >= 1:
        return f"{seconds:.1f} s"
    return f"{seconds:.2f} s" if seconds >= 0.01 else f"{seconds:.1g} s"


def device_words(choice: str, available: list[str]) -> str:
    """Where a run with the device box's `choice` computes, as the estimate says it."""
    gpu = next((d for d in available if d.startswith(("cuda", "mps"))), None) if choice == "auto" else \
        choice if choice.startswith(("cuda", "mps")) else None
    if gpu is None:
        return "on this CPU"
    return "on this Mac's GPU" if gpu == "mps" else "on this GPU"


def training_items(counts: dict[str, Any]) -> int:
    """The clips a run trains on, from the data check's counts: its train split, else all of them."""
    splits = counts.get("splits") if isinstance(counts.get("splits"), dict) else {}
    if isinstance(splits.get("train"), int):
        return int(splits["train"])
    return next((int(counts[k]) for k in ("clips", "rows", "audio_files") if isinstance(counts.get(k), int)), 0)


def estimate_text(est: Estimate, counts: dict[str, Any], settings: dict[str, Any], where: str) -> str:
    """"About 6 min on this CPU (1,403 clips × 20 epochs: 1,740 steps at 0.28 s a step, measured, after 40 s
    starting and reading the data)", and what the time budget does to it."""
    m = est.measurement
    epochs = sum(int(v) for k, v in settings.items() if k in EPOCH_SETTINGS and isinstance(v, int))
    items = training_items(counts)
    if m.whole_s is not None and est.steps == m.total_steps:
        basis = f"{est.steps:,} steps: the whole run, measured"
    else:
        plan = f"{items:,} clips × {epochs} epochs: {est.steps:,} steps" if items and epochs else \
            f"{est.steps:,} steps"
        basis = (f"{plan} at {step_words(m.step_s)} a step, measured, after {about(m.prepare_s)} starting and "
                 "reading the data")
        if m.eval_s:
            basis += f", and {about(m.eval_s)} checking the dev data after each epoch"
    if est.budget_s is not None:
        return (f"About {about(est.budget_s)} {where}: it stops at its {about(est.budget_s)} budget, keeping its "
                f"best model (the whole plan would take about {about(est.seconds)}: {basis})")
    return f"About {about(est.seconds)} {where} ({basis})"


def measuring_text(where: str, doing: str) -> str:
    return f"Estimating the time: measuring a training step {where}… ({doing})" if doing else \
        f"Estimating the time: measuring a training step {where}…"


def no_estimate_text(why: str) -> str:
    return (f"No time estimate: measuring a training step failed ({why}). Once started, the run shows its time "
            "left from its first steps.")
