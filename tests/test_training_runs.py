"""Training runs as separate processes: settings -> argv, events, cancel, kill + resume, registering models."""

from __future__ import annotations

import csv
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from app.services.training import runs as tr

TESTS = Path(__file__).resolve().parent
FAKE = "fake_trainer"


@pytest.fixture
def data(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "words.csv").write_text("path,word,speaker\n")
    return folder


def start_fake(tmp_path: Path, data: Path, name: str = "fake", **settings: object) -> tr.Run:
    return tr.start_run("words", name, data, dict(settings), device="cpu", base=tmp_path / "runs",
                        module=FAKE, module_path=TESTS)


def test_settings_map_to_the_trainers_flags() -> None:
    specs = {s.name: s for s in tr.settings_schema("words")}
    # the flag, range and help come from the field's setting(...) metadata: --epochs for max_epochs
    assert specs["max_epochs"].flag == "--epochs" and specs["threads"].flag == "--threads"
    assert specs["cache"].type == "bool" and specs["cache"].default is True
    assert specs["preset"].type == "choice" and "tiny" in specs["preset"].choices
    assert specs["batch_size"].minimum == 2 and specs["lr"].minimum_exclusive
    assert "device" not in specs and "data" not in specs and "trim" not in specs  # run option, path, nested
    argv = tr.build_argv("words", "/d", "/r/model.safetensors",
                         {"max_epochs": 2, "preset": "tiny", "cache": False, "lr": 0.001}, "cpu", "/r/e.jsonl")
    assert argv[1:5] == ["-m", "app", "train", "words"]
    tail = argv[5:]
    assert tail[tail.index("--epochs") + 1] == "2" and tail[tail.index("--lr") + 1] == "0.001"
    assert "--no-cache" in tail and tail[tail.index("--events") + 1] == "/r/e.jsonl"
    assert tail[tail.index("--device") + 1] == "cpu"
    # the parser accepts what we built
    from app.cli.main import build_parser

    args = build_parser(argv[3:]).parse_args(argv[3:])
    assert args.max_epochs == 2 and args.cache is False and args.preset == "tiny"
    from training.words_train import config_from_args

    config = config_from_args(args)
    assert config.max_epochs == 2 and not config.cache and config.lr == 0.001 and config.patience == 4


def test_retrieval_settings_left_alone_keep_the_preset() -> None:
    specs = {s.name: s for s in tr.settings_schema("retrieval")}
    assert specs["preset"].default == "cpu-small" and specs["lr"].default is None and specs["lr"].optional
    argv = tr.build_argv("retrieval", "/d", "/o", {"preset": "cpu-small", "lr": None, "epochs": 3}, "cpu")
    assert "--lr" not in argv and argv[argv.index("--epochs") + 1] == "3"
    from app.cli.main import build_parser
    from training.retrieval_train import PRESETS, build_config

    config = build_config(build_parser(argv[3:]).parse_args(argv[3:]))
    preset = PRESETS["cpu-small"]()
    assert config.epochs == 3 and config.lr == preset.lr and config.optimizer == preset.optimizer == "adamw"


def test_units_flags_reach_the_config() -> None:
    from app.cli.main import build_parser
    from training.units_train import build_config

    argv = ["train", "units", "--data", "/d", "--out", "/o.safetensors", "--preset", "tiny", "--vq-steps", "7",
            "--exclude-speaker", "a", "--exclude-speaker", "b"]
    config = build_config(build_parser(argv).parse_args(argv))
    assert config.vq_steps == 7 and config.inv_steps == 30 and config.exclude_speakers == ("a", "b")


def test_a_bad_flag_is_a_message_naming_the_range(capsys) -> None:
    from app.cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(["train", "words", "--data", "/d", "--out", "/o", "--batch-size", "1"])
    assert exit_.value.code == 2
    assert "argument --batch-size: 1 is below the minimum 2" in capsys.readouterr().err


@pytest.mark.parametrize("settings, message", [
    ({"hidden": 2.0}, "no command-line flag"),
    ({"nope": 1}, "not a setting"),
    ({"batch_size": 1}, "below the minimum 2"),  # from the field's metadata
    ({"batch_size": 65}, "above the maximum 64"),
    ({"lr": -0.1}, "greater than 0"),
    ({"lr": 0}, "greater than 0"),  # an exclusive bound
    ({"steps": 2.5}, "expected an integer"),
    ({"optimizer": "rmsprop"}, "not one of adam, sgd"),
    ({"lr": float("nan")}, "not a finite number"),
    ({"device": "cpu"}, "set by the run itself"),
])
def test_bad_settings_are_refused_before_launch(settings: dict, message: str, tmp_path: Path, data: Path) -> None:
    with pytest.raises(tr.RunError, match=message):
        start_fake(tmp_path, data, **settings)
    assert not (tmp_path / "runs" / "fake").exists()  # nothing launched, no folder left


def test_the_config_dataclass_checks_run_too() -> None:
    with pytest.raises(tr.RunError, match="step_seconds above 10"):
        tr.check_settings("words", {"step_seconds": 11.0}, module=FAKE)
    with pytest.raises(tr.RunError, match="crop_frames must be a multiple of 4"):
        tr.check_settings("units", {"crop_frames": 10})
    with pytest.raises(tr.RunError, match="unknown model kind 'nope'"):
        tr.check_settings("nope", {})
    with pytest.raises(tr.RunError, match="unknown device"):
        tr.build_argv("words", "/d", "/o", {}, device="tpu")


def test_events_stream_then_the_result(tmp_path: Path, data: Path) -> None:
    run = start_fake(tmp_path, data, steps=6, step_seconds=0.02)
    assert run.status == "running" and run.info["pid"] > 0
    assert run.wait(30), run.log_tail()
    assert run.status == "finished" and run.result["dev_ap"] == 1.0
    events = [e["event"] for e in run.events]
    assert events[0] == "started" and events.count("progress") == 6 and events[-1] == "result"
    loss_x, loss_y = run.curves()["loss"]
    assert loss_x == [1, 2, 3, 4, 5, 6] and loss_y[-1] == pytest.approx(1 / 6)
    assert run.curves()["dev_ap"][1][-1] == pytest.approx(1.0)
    info = json.loads((run.folder / "run.json").read_text())
    assert info["status"] == "finished" and info["kind"] == "words" and "--events" in info["argv"]
    assert info["result"]["final_loss"] == pytest.approx(1 / 6)
    # a fresh look from disk (another session) sees the same
    [again] = tr.list_runs(tmp_path / "runs")
    assert again.status == "finished" and again.metrics()["final_loss"] == pytest.approx(1 / 6)


def test_a_trainer_error_is_a_failed_run_with_its_message(tmp_path: Path, data: Path) -> None:
    run = start_fake(tmp_path, data, steps=10, step_seconds=0.01, fail_at=3)
    assert run.wait(30)
    assert run.status == "failed" and "fake failure at step 3" in run.error
    assert run.can_resume()


def test_same_name_is_refused(tmp_path: Path, data: Path) -> None:
    run = start_fake(tmp_path, data, name="dup", steps=2, step_seconds=0.01)
    with pytest.raises(tr.RunError, match="already exists"):
        start_fake(tmp_path, data, name="dup")
    with pytest.raises(tr.RunError, match="not a usable name"):
        start_fake(tmp_path, data, name="../evil")
    assert run.wait(30) and run.status == "finished"
    assert tr.suggest_name("words", tmp_path / "runs").startswith("words-")


def test_cancel_closes_the_job_and_keeps_the_last_checkpoint(tmp_path: Path, data: Path) -> None:
    run = start_fake(tmp_path, data, steps=400, step_seconds=0.02, save_every=5)
    deadline = time.monotonic() + 30
    while run.progress()[0] < 12 and time.monotonic() < deadline:
        run.poll()
        time.sleep(0.05)
    assert run.progress()[0] >= 12
    step, total, eta = run.progress()
    assert total == 400 and eta is not None and eta > 0
    run.cancel()
    assert run.wait(30)
    assert run.status == "cancelled"
    assert any(e["event"] == "cancelled" for e in run.events)  # the trainer said so itself
    assert (run.folder / "closed.txt").read_text() == "closed\n"  # its generator's finally ran
    from safetensors.numpy import load_file

    saved = int(load_file(str(run.checkpoint))["w"][0])
    assert saved >= 10 and saved % 5 == 0  # the last good checkpoint stays


def test_a_killed_process_is_interrupted_and_resumes(tmp_path: Path, data: Path) -> None:
    run = start_fake(tmp_path, data, name="killed", steps=60, step_seconds=0.02, save_every=5)
    deadline = time.monotonic() + 30
    while not run.checkpoint.exists() and time.monotonic() < deadline:
        run.poll()
        time.sleep(0.05)
    os.kill(run.info["pid"], signal.SIGKILL)  # OOM killer, power cut: no last word
    assert run.wait(30)
    assert run.status == "interrupted" and run.can_resume()
    # seen from another session too (no process handle: the pid is gone)
    assert tr.open_run(run.folder).status == "interrupted"
    run.resume()
    assert run.status == "running" and run.info["argv"][-1] == "--resume" and run.info["attempts"] == 2
    assert run.wait(30), run.log_tail()
    assert run.status == "finished"
    resumed = [e for e in run.events if e.get("message", "").startswith("resumed at step")]
    assert resumed and resumed[0]["step"] >= 5
    with pytest.raises(tr.RunError, match="finished"):
        run.resume()


def test_a_trainer_that_dies_at_start_fails_with_its_log(tmp_path: Path, data: Path) -> None:
    folder = tmp_path / "runs" / "broken"
    folder.mkdir(parents=True)
    run = tr.Run(folder, {"kind": "words", "name": "broken", "status": "running", "attempts": 0})
    tr._launch(run, [sys.executable, "-m", "app", "train", "words", "--trainer-module", "no_such_trainer",
                     "--data", str(data), "--out", str(run.checkpoint)])
    assert run.wait(30)
    assert run.status == "failed" and "exited with code 2" in run.error and "earshot" in run.error
    assert json.loads((folder / "run.json").read_text())["status"] == "failed"


def test_register_model_copies_checkpoint_and_card_atomically(tmp_path: Path, data: Path, monkeypatch) -> None:
    run = start_fake(tmp_path, data, steps=5, step_seconds=0.01)
    assert run.wait(30) and run.status == "finished"
    models = tmp_path / "models"
    target = tr.register_model(run, "my-words", models)
    assert target == models / "my-words.safetensors" and target.read_bytes() == run.checkpoint.read_bytes()
    card = target.with_suffix(".md").read_text()
    assert "# my-words" in card and "words" in card and "final_loss" in card
    with pytest.raises(tr.RunError, match="already exists"):
        tr.register_model(run, "my-words", models)

    def disk_full(src: object, dst: object) -> None:
        Path(str(dst)).write_bytes(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tr.shutil, "copyfile", disk_full)
    with pytest.raises(OSError, match="No space"):
        tr.register_model(run, "second", models)
    assert sorted(p.name for p in models.iterdir()) == ["my-words.md", "my-words.safetensors"]  # no half file


def write_fsdd_subset(fsdd: Path, folder: Path) -> Path:
    """Two speakers, four digits: dev rows 0-1, train rows 5-12 (real recordings, absolute paths)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(fsdd / "metadata.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["speaker"] in ("george", "jackson")
                and r["word"] in ("zero", "one", "two", "three") and int(r["index"]) < 13]
    with open(folder / "words.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "word", "speaker", "split"])
        for r in rows:
            i = int(r["index"])
            if i < 2 or i >= 5:
                w.writerow([str(fsdd / r["path"]), r["word"], r["speaker"], "dev" if i < 2 else "train"])
    return folder


@pytest.mark.slow
def test_real_words_training_in_a_subprocess(fsdd: Path, tmp_path: Path) -> None:
    subset = write_fsdd_subset(fsdd, tmp_path / "subset")
    from training.validate import validate_data

    report = validate_data("words", subset)
    assert report.ok and report.counts["words"] == 4 and report.counts["speakers"] == 2
    settings = {"preset": "tiny", "max_epochs": 2, "batch_size": 32, "lr": 0.002, "threads": 1}
    run = tr.start_run("words", "real", subset, settings, device="cpu", base=tmp_path / "runs")
    assert run.wait(90), run.log_tail()
    assert run.status == "finished", run.error or run.log_tail()
    assert run.result["epochs"] == 2 and 0 <= run.result["best_value"] <= 1
    curves = run.curves()
    assert len(curves["loss"][0]) >= 2 and "dev_ap" in curves
    target = tr.register_model(run, "fsdd-tiny", tmp_path / "models")
    from core.checkpoints import load_model

    model, ckpt = load_model(target, kind="words")
    assert ckpt.kind == "words" and ckpt.training["epochs"] >= 1
    assert sum(p.numel() for p in model.parameters()) > 0


def test_staged_losses_are_separate_curves(tmp_path: Path) -> None:
    run = tr.Run.__new__(tr.Run)  # only the event bookkeeping is exercised
    run.events = []
    for step, stage, loss in ((1, "vqvae", 1.0), (2, "vqvae", 0.8), (3, "inverter", 35.0), (4, "inverter", 30.0)):
        run.events.append({"event": "progress", "step": step, "stage": stage, "loss": loss, "perplexity": 9.0})
    curves = run.curves()
    assert curves["loss (vqvae)"] == ([1.0, 2.0], [1.0, 0.8])
    assert curves["loss (inverter)"] == ([3.0, 4.0], [35.0, 30.0])
    assert "loss" not in curves and len(curves["perplexity"][0]) == 4


def _replayed_run(tmp_path: Path, events: list[dict], max_minutes: float | None = 55.0) -> tr.Run:
    """A run folder holding `events` (times in seconds before now), read as the Train tab reads it."""
    folder = tmp_path / "runs" / "replayed"
    folder.mkdir(parents=True)
    settings = {} if max_minutes is None else {"max_minutes": max_minutes}
    info = {"kind": "units", "name": "replayed", "status": "finished", "settings": settings}
    (folder / "run.json").write_text(json.dumps(info))
    now = time.time()
    lines = [{"time": now - ago, "event": "progress", **e} for ago, e in events]
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in
                                                 [{"time": now - 60, "event": "started", "attempt": 1}, *lines]))
    return tr.open_run(folder)


FEATURES = [(58, {"step": 0, "total": 4200, "stage": "features", "message": "reading 36 recordings"}),
            (20, {"step": 36, "total": 36, "stage": "features", "message": "features 36"})]


def test_the_eta_comes_from_the_counter_on_show_not_the_steps_before_it(tmp_path: Path) -> None:
    """A units run on the Train tab said "3:29:31 left" two seconds into its 55-minute budget: the rate mixed the
    feature pass's events (step 0 of 4200, then 36 of 36) with the first training steps. Only the counter the
    progress bar shows (same stage, same total) gives the rate."""
    run = _replayed_run(tmp_path, [*FEATURES, (2, {"step": 1, "total": 4200, "stage": "vqvae"}),
                                   (0, {"step": 11, "total": 4200, "stage": "vqvae"})])
    step, total, eta = run.progress()
    assert (step, total) == (11, 4200)
    assert eta == pytest.approx((4200 - 11) / 5, rel=0.02)  # 10 steps in 2 s


def test_the_eta_never_passes_the_time_budget(tmp_path: Path) -> None:
    """The trainer stops at its time budget (counted from its start) whatever the steps left: so does the ETA."""
    run = _replayed_run(tmp_path, [(30, {"step": 1, "total": 4200}), (0, {"step": 31, "total": 4200})],
                        max_minutes=5.0)
    assert run.progress()[2] == pytest.approx(5 * 60 - 60, abs=2)  # 60 s of the 300 gone
    unbounded = _replayed_run(tmp_path / "b", [(30, {"step": 1, "total": 4200}), (0, {"step": 31, "total": 4200})],
                              max_minutes=None)
    assert unbounded.progress()[2] == pytest.approx((4200 - 31) / 1, rel=0.02)


def test_a_finished_counter_has_no_eta(tmp_path: Path) -> None:
    """36 of 36 features read is not "0:00 left": the training steps are still to come."""
    assert _replayed_run(tmp_path, FEATURES).progress() == (36, 36, None)


def test_the_eta_is_there_from_a_counters_first_event(tmp_path: Path) -> None:
    """words-default said "1/2021 augmenting" for 70-90 s with no time left: a rate needed two events of the
    pass. Its work began with the event before it, so its first one gives the rate already."""
    run = _replayed_run(tmp_path, [(40, {"step": 120, "total": 120, "message": "reading data"}),
                                   (30, {"step": 1, "total": 2021, "message": "augmenting"})], max_minutes=None)
    step, total, eta = run.progress()
    assert (step, total) == (1, 2021) and eta == pytest.approx(2020 * 10, rel=0.01)  # one token in 10 s
    first = _replayed_run(tmp_path / "b", [(30, {"step": 0, "total": 2021})], max_minutes=None)
    assert first.progress()[2] is None  # nothing counted yet: no rate


def test_an_epochs_mean_loss_is_not_a_point_of_the_steps_curve() -> None:
    """The epoch's end repeats its last step with the epoch's mean loss: drawn, the curve jumped there."""
    run = tr.Run.__new__(tr.Run)
    run.events = [{"event": "progress", "step": 1, "loss": 0.9}, {"event": "progress", "step": 2, "loss": 0.7},
                  {"event": "progress", "step": 2, "loss": 0.8, "epoch_end": True, "dev_ap": 0.5}]
    curves = run.curves()
    assert curves["loss"] == ([1.0, 2.0], [0.9, 0.7]) and curves["dev_ap"] == ([2.0], [0.5])


def test_a_cancelled_runs_best_checkpoint_can_be_registered(tmp_path: Path, data: Path) -> None:
    run = start_fake(tmp_path, data, steps=400, step_seconds=0.02, save_every=5)
    deadline = time.monotonic() + 30
    while run.progress()[0] < 7 and time.monotonic() < deadline:
        run.poll()
        time.sleep(0.05)
    assert not run.can_use() and run.kept_checkpoint() is None  # still running
    run.cancel()
    assert run.wait(30) and run.status == "cancelled"
    kept = run.kept_checkpoint()
    assert run.can_use() and kept is not None and kept["steps"] >= 5
    target = tr.register_model(run, "kept", tmp_path / "models")
    assert target.read_bytes() == run.checkpoint.read_bytes()
    card = target.with_suffix(".md").read_text()
    assert "cancelled before its end" in card and f"- steps: {kept['steps']}" in card


def test_a_stopped_run_without_a_whole_checkpoint_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "runs" / "stopped"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"kind": "words", "name": "stopped", "status": "cancelled"}))
    run = tr.open_run(folder)
    with pytest.raises(tr.RunError, match="no checkpoint yet"):
        tr.register_model(run, "nothing", tmp_path / "models")
    run.checkpoint.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{}")  # a header and nothing: not a model
    assert run.kept_checkpoint() is None and not run.can_use()
    import fake_trainer

    fake_trainer.save(run.checkpoint, 3)
    assert run.kept_checkpoint() == {"steps": 3, "metrics": {"dev_ap": 0.03}}  # read again: the file changed
    run.info["kind"] = "units"
    run._kept = None
    assert run.kept_checkpoint() is None  # a checkpoint of another kind


def test_measuring_a_trainer_times_its_steps_and_leaves_nothing(tmp_path: Path, data: Path) -> None:
    from app.services.training import estimate as te

    job = te.measure_job("words", data, {"steps": 200, "step_seconds": 0.05}, "cpu", tmp_path / "runs", FAKE, TESTS)
    said = []
    try:
        while True:
            said.append(next(job))
    except StopIteration as stop:
        m = stop.value
    # each step sleeps 0.05 s (its events' times are rounded to the millisecond)
    assert m.step_s >= 0.045 and m.total_steps == 200 and m.counts == 200 and m.whole_s is None
    assert said and all("message" in p for p in said)
    assert not list((tmp_path / "runs" / te.PROBES).iterdir()) and tr.list_runs(tmp_path / "runs") == []
    est = te.estimate(m, {"steps": 100, "max_minutes": 0.05})
    assert est.steps == 100 and est.budget_s == 3.0 and est.seconds > 5.0

    failing = te.measure_job("words", data, {"fail_at": 1}, "cpu", tmp_path / "runs", FAKE, TESTS)
    with pytest.raises(tr.RunError, match="fake failure"):
        for _ in failing:
            pass
    assert not list((tmp_path / "runs" / te.PROBES).iterdir())


def test_a_closed_measuring_job_kills_its_trainer(tmp_path: Path, data: Path) -> None:
    from app.services.training import estimate as te

    job = te.measure_job("words", data, {"steps": 400, "step_seconds": 5.0}, "cpu", tmp_path / "runs", FAKE, TESTS)
    next(job)
    folder = next((tmp_path / "runs" / te.PROBES).iterdir())
    pid = json.loads((folder / "run.json").read_text())["pid"]
    job.close()  # the Train tab cancels it: settings changed, Start pressed, the window closed
    assert not folder.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_measurement_reads_steps_evaluations_and_a_whole_run() -> None:
    from app.services.training import estimate as te

    events = [{"time": 0.0, "event": "started"}, {"time": 5.0, "event": "progress", "step": 0, "total": 9}]
    events += [{"time": 10.0 + 0.5 * i, "event": "progress", "step": i + 1, "total": 6, "loss": 1.0}
               for i in range(3)]
    events.append({"time": 11.5, "event": "progress", "step": 3, "total": 6, "loss": 0.9, "epoch_end": True})
    events += [{"time": 13.5 + 0.5 * i, "event": "progress", "step": 4 + i, "total": 6, "loss": 1.0}
               for i in range(3)]
    events.append({"time": 16.0, "event": "result", "result": {}})
    m = te.measurement_of(events, 2, finished=True)
    assert (m.step_s, m.prepare_s, m.total_steps, m.eval_s, m.epoch_steps) == (0.5, 9.5, 6, 2.0, 3)
    assert m.whole_s == 16.0 and te.estimate(m, {"epochs": 2}).seconds == 16.0
    assert te.estimate(m, {"epochs": 4}).seconds == pytest.approx(9.5 + 12 * 0.5 + 4 * 2.0)
    with pytest.raises(tr.RunError, match="no training step"):
        te.measurement_of(events[:2], 2, finished=False)
