"""Train tab: data check, generated form (basic view, Advanced collapsed, presets), Start and Stop always in view,
a run in a separate process with live curves, stop, resume, use."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QComboBox, QDoubleSpinBox, QLabel, QScrollArea, QSpinBox, QToolButton

from app.services.training import runs as tr
from app.ui.train_tab import TrainTab

TESTS = Path(__file__).resolve().parents[1]


def words_folder(root: Path) -> Path:
    root.mkdir(parents=True)
    rows = ["path,word,speaker,split"]
    for i, word in enumerate(["seven", "cat", "seven", "dog"]):
        t = np.arange(8000) / 16000
        sf.write(root / f"{i}.wav", (0.2 * np.sin(2 * np.pi * 200 * (i + 1) * t)).astype(np.float32), 16000)
        rows.append(f"{i}.wav,{word},s{i % 2},{'dev' if i == 3 else 'train'}")
    (root / "words.csv").write_text("\n".join(rows) + "\n")
    return root


@pytest.fixture
def tab(qtbot, tmp_path: Path):
    widget = TrainTab(runs_dir=tmp_path / "runs", models_dir=tmp_path / "models", trainer_module="fake_trainer",
                      trainer_path=TESTS)
    qtbot.addWidget(widget)
    widget.resize(1200, 800)
    qtbot.waitUntil(lambda: bool(widget.specs), timeout=30_000)
    yield widget
    if widget.run is not None and widget.run.status == "running":
        widget.run.cancel()
    widget.shutdown(stop_runs=True)
    if widget.run is not None:
        assert widget.run.wait(30)


def test_form_is_generated_from_the_config_dataclass(tab: TrainTab) -> None:
    assert tab.kind() == "words"
    inputs = tab.inputs
    assert isinstance(inputs["steps"], QSpinBox) and inputs["steps"].value() == 20
    assert isinstance(inputs["lr"], QDoubleSpinBox) and inputs["lr"].value() == pytest.approx(0.1)
    assert isinstance(inputs["optimizer"], QComboBox) and inputs["optimizer"].currentText() == "adam"
    assert inputs["batch_size"].minimum() == 2 and inputs["batch_size"].maximum() == 64  # field metadata
    tip = inputs["steps"].toolTip()
    assert "--steps" in tip and "steps to run" in tip.lower() and "≥ 1" in tip  # setting(help=, low=), its flag
    assert inputs["lr"].minimum() > 0  # lr > 0: an exclusive bound in the field's metadata
    assert inputs["max_minutes"].specialValueText() == "no limit"
    assert "hidden" not in inputs  # a field without a flag is not offered
    assert tab.settings()["steps"] == 20 and "max_minutes" not in tab.settings()
    assert not tab.start_button.isEnabled()  # no data yet


def test_the_basic_view_comes_first_and_advanced_is_collapsed(qtbot, tab: TrainTab) -> None:
    tab.show()
    qtbot.waitExposed(tab)
    basic = [tab.kind_combo, tab.data_edit, tab.form.preset_combo, tab.inputs["max_minutes"], tab.device_combo]
    assert all(w.isVisible() for w in basic)
    toggle = tab.form.advanced_toggle
    assert isinstance(toggle, QToolButton) and toggle.isCheckable() and not toggle.isChecked()
    others = [w for name, w in tab.inputs.items() if name != "max_minutes"]
    assert others and not any(w.isVisible() for w in others)  # every other setting: under Advanced, collapsed
    toggle.click()
    assert toggle.isChecked() and all(w.isVisible() for w in others)
    texts = [w.text() for w in tab.form.advanced_body.findChildren(QLabel)]
    assert "Step seconds" in texts and "Steps" in texts  # a field the label table does not know: words, not code
    assert not [t for t in texts if "_" in t]
    toggle.click()
    assert not any(w.isVisible() for w in others)


def test_a_preset_fills_the_form_and_an_edit_makes_it_custom(qtbot, tab: TrainTab) -> None:
    form = tab.form
    names = [form.preset_combo.itemText(i) for i in range(form.preset_combo.count())]
    assert names == ["Fake recipe", "Quick test (tiny)", "Custom"]
    assert form.preset_name() == "Fake recipe"  # the first preset is chosen when the form is built
    tab.choose_preset("Quick test (tiny)")
    assert tab.settings() == {"steps": 3, "step_seconds": 0.01, "lr": 0.1, "batch_size": 2, "save_every": 5,
                              "optimizer": "adam", "fail_at": 0, "max_minutes": 1.0, "prep_items": 0,
                              "prep_seconds": 0.0}
    tab.inputs["steps"].setValue(7)  # a person's edit
    assert form.preset_name() == "Custom" and tab.settings()["steps"] == 7
    tab.inputs["steps"].setValue(3)  # back to the preset's values: the preset again, not a stale "Custom"
    assert form.preset_name() == "Quick test (tiny)"
    tab.choose_preset("Fake recipe")  # every field back to that recipe (its defaults where it names none)
    assert tab.settings()["steps"] == 20 and tab.settings()["step_seconds"] == 0.05
    assert "max_minutes" not in tab.settings() and form.preset_name() == "Fake recipe"


def test_start_and_stop_stay_in_view_outside_the_scrolled_form(qtbot, tab: TrainTab) -> None:
    tab.resize(1024, 700)
    tab.show()
    qtbot.waitExposed(tab)
    tab.form.advanced_toggle.click()  # the longest form
    qtbot.wait(50)
    for button in (tab.start_button, tab.cancel_button):
        parent, scrolled = button.parentWidget(), False
        while parent is not None:
            scrolled |= isinstance(parent, QScrollArea)
            parent = parent.parentWidget()
        assert not scrolled, f"{button.text()} scrolls with the form"
        assert button.isVisible()
        top_left = button.mapTo(tab, button.rect().topLeft())
        assert tab.rect().contains(top_left) and tab.rect().contains(top_left + button.rect().bottomRight())
    assert tab.cancel_button.text() == "Stop"
    form_box = tab.form_scroll.mapTo(tab, tab.form_scroll.rect().bottomLeft())
    assert tab.start_button.mapTo(tab, tab.start_button.rect().topLeft()).y() > form_box.y()  # below the form


def _wheel(widget, delta: int = -120):  # one notch down, over the widget's middle
    from PySide6.QtCore import QPoint, QPointF
    from PySide6.QtGui import QWheelEvent

    centre = QPointF(widget.rect().center())
    return QWheelEvent(centre, QPointF(widget.mapToGlobal(centre.toPoint())), QPoint(0, 0), QPoint(0, delta),
                       Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)


def test_the_wheel_scrolls_the_form_and_changes_a_field_only_once_clicked_into(qtbot, tab: TrainTab) -> None:
    from PySide6.QtWidgets import QApplication

    spin, combo = tab.inputs["steps"], tab.inputs["optimizer"]
    before = (spin.value(), combo.currentIndex())
    for widget in (spin, combo):
        event = _wheel(widget)
        QApplication.sendEvent(widget, event)
        assert not event.isAccepted()  # passed on to the scroll area around the form
    assert (spin.value(), combo.currentIndex()) == before
    tab.show()
    tab.activateWindow()
    qtbot.waitUntil(tab.isActiveWindow, timeout=5_000)
    spin.setFocus()
    qtbot.waitUntil(spin.hasFocus, timeout=5_000)
    QApplication.sendEvent(spin, _wheel(spin))
    assert spin.value() != before[0]


def test_the_log_wraps_long_lines(tab: TrainTab) -> None:
    from PySide6.QtWidgets import QPlainTextEdit

    assert tab.log_view.lineWrapMode() == QPlainTextEdit.LineWrapMode.WidgetWidth


def test_validation_gates_start(qtbot, tab: TrainTab, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with qtbot.waitSignal(tab.validated, timeout=10_000) as got:
        tab.set_data_folder(empty)
    assert not got.args[0].ok and "empty" in tab.report_label.text()
    assert not tab.start_button.isEnabled()
    with qtbot.waitSignal(tab.validated, timeout=10_000) as got:
        tab.set_data_folder(words_folder(tmp_path / "data"))
    assert got.args[0].ok and "Ready to train" in tab.report_label.text() and "4 rows" in tab.report_label.text()
    assert tab.start_button.isEnabled()


@pytest.mark.slow
def test_run_curves_cancel_resume_and_use(qtbot, tab: TrainTab, tmp_path: Path) -> None:
    with qtbot.waitSignal(tab.validated, timeout=10_000):
        tab.set_data_folder(words_folder(tmp_path / "data"))
    tab.set_setting("steps", 300)
    tab.set_setting("step_seconds", 0.02)
    tab.set_setting("save_every", 5)
    tab.name_edit.setText("first")
    tab.start_button.click()
    assert tab.run is not None and tab.run.name == "first" and tab.timer.isActive()
    assert not tab.start_button.isEnabled() and tab.cancel_button.isEnabled()
    qtbot.waitUntil(lambda: tab.run.progress()[0] >= 10, timeout=30_000)
    qtbot.waitUntil(lambda: len(tab.loss_plot.getPlotItem().listDataItems()) == 1, timeout=5_000)
    xs, ys = tab.loss_plot.getPlotItem().listDataItems()[0].getData()
    assert len(xs) >= 10 and ys[-1] < ys[0]
    assert tab.metric_plot.getPlotItem().listDataItems()  # dev_ap
    assert tab.progress_bar.maximum() == 300 and tab.progress_bar.value() >= 10
    shot = tmp_path / "train_tab.png"
    assert tab.grab().save(str(shot)) and shot.stat().st_size > 10_000

    with qtbot.waitSignal(tab.run_changed, timeout=30_000) as changed:
        tab.cancel_button.click()
    assert changed.args == ["cancelled"]
    # Resume comes once the process is gone, which may be a moment after its "cancelled" event; so does Use
    # this model, with the best checkpoint the run kept (it saves every 5 steps, and it made 10 or more)
    qtbot.waitUntil(lambda: not tab.run.is_active() and tab.resume_button.isEnabled(), timeout=10_000)
    assert tab.use_button.isEnabled()

    tab.set_setting("steps", 5)  # the form no longer matters for a resume: the run keeps its own argv
    with qtbot.waitSignal(tab.run_changed, timeout=60_000) as changed:
        tab.resume_button.click()
        assert tab.run.status == "running"
    assert changed.args == ["running"]
    with qtbot.waitSignal(tab.run_changed, timeout=60_000) as changed:
        pass
    assert changed.args == ["finished"] and tab.use_button.isEnabled()
    assert any(e.get("message", "").startswith("resumed at step") for e in tab.run.events)

    tab.model_name_edit.setText("my-fake")
    with qtbot.waitSignal(tab.model_registered, timeout=5_000) as reg:
        tab.use_button.click()
    assert reg.args == ["my-fake"] and (tmp_path / "models" / "my-fake.safetensors").is_file()
    assert "my-fake" in tab.status_label.text()
    shot = tmp_path / "train_tab_done.png"
    assert tab.grab().save(str(shot))


def test_past_runs_listed_and_compared(qtbot, tab: TrainTab, tmp_path: Path) -> None:
    data = words_folder(tmp_path / "data")
    runs = []
    for name, steps in (("a", 4), ("b", 6)):
        run = tr.start_run("words", name, data, {"steps": steps, "step_seconds": 0.01}, base=tmp_path / "runs",
                           module="fake_trainer", module_path=TESTS)
        assert run.wait(30) and run.status == "finished"
        runs.append(run)
    tab.refresh_runs()
    assert tab.runs_list.count() == 2
    labels = [tab.runs_list.item(i).text() for i in range(2)]
    assert all("finished" in t for t in labels)
    tab.runs_list.setCurrentRow(0)
    shown = tab.run.name
    other = tab.runs_list.item(1)
    other.setCheckState(other.checkState().Checked)
    items = tab.loss_plot.getPlotItem().listDataItems()
    assert len(items) == 2 and {len(i.getData()[0]) for i in items} == {4, 6}
    assert tab.use_button.isEnabled() and not tab.resume_button.isEnabled()
    assert shown in ("a", "b")


def test_errors_are_messages(qtbot, tab: TrainTab, tmp_path: Path) -> None:
    with qtbot.waitSignal(tab.validated, timeout=10_000):
        tab.set_data_folder(words_folder(tmp_path / "data"))
    tab.name_edit.setText("bad name/with slash")
    tab.start_button.click()
    assert tab.run is None and "not a usable name" in tab.status_label.text()
    tab.name_edit.setText("ok")
    tab.set_setting("fail_at", 2)
    tab.set_setting("step_seconds", 0.01)
    tab.start_button.click()
    with qtbot.waitSignal(tab.run_changed, timeout=30_000) as changed:
        pass
    assert changed.args == ["failed"] and "fake failure" in tab.status_label.text()
    assert isinstance(tab.inputs["fail_at"], QSpinBox) and not isinstance(tab.inputs["optimizer"], QCheckBox)


# ------------------------------------------------------------------------------------- the real trainers


@pytest.mark.parametrize("kind", list(tr.KINDS))
def test_every_real_setting_has_a_label_in_words(kind: str) -> None:
    from app.ui.train_form import LABELS, label_for

    for spec in tr.settings_schema(kind):
        assert spec.name in LABELS, f"{kind}: {spec.name} has no label (app/ui/train_form.py LABELS)"
        assert "_" not in label_for(spec) and spec.help  # its tooltip is the setting's help


def test_the_real_form_starts_from_the_shipped_recipe(qtbot, tmp_path: Path) -> None:
    from app.services.registry import default_models_dir
    from app.services.training import presets as tp
    from core.checkpoints import read_metadata

    tab = TrainTab(runs_dir=tmp_path / "runs", models_dir=tmp_path / "models")
    qtbot.addWidget(tab)
    try:
        for kind in ("words", "units", "retrieval"):
            tab.kind_combo.setCurrentIndex(tab.kind_combo.findData(kind))
            qtbot.waitUntil(lambda kind=kind: tab.kind() == kind and bool(tab.specs), timeout=60_000)
            assert tab.form.preset_name() == f"{kind}-default (shipped)"
            stored = read_metadata(default_models_dir() / f"{kind}-default.safetensors")["training"]["train_config"]
            values = tab.form.values()
            shared = (set(values) & set(stored)) - tp.MACHINE_LOCAL
            if stored.get("max_minutes") is None:  # a recipe without a budget is given one (test_train_presets)
                shared.discard("max_minutes")
            assert len(shared) >= 20
            for name in shared:  # what the fields show is that run's config (1e-5 and 3e-4 not rounded away)
                assert tp.same_value(values[name], stored[name]), (kind, name, values[name], stored[name])
            assert values["preset"] == {"words": "speech", "units": "small", "retrieval": "aisfx"}[kind]
            if kind == "words":  # its longest form, expanded in a small window, fits the pane: nothing cut off
                tab.resize(1024, 700)
                tab.show()
                tab.form.set_advanced_shown(True)
                qtbot.wait(50)
                assert tab.form_scroll.widget().width() <= tab.form_scroll.viewport().width()
                tab.form.set_advanced_shown(False)
        tab.choose_preset(tp.QUICK)
        assert tab.settings()["preset"] == "cpu-small" and tab.settings()["epochs"] == 2
    finally:
        tab.shutdown()


def _finished_run(runs: Path, name: str, result: dict) -> None:
    """A finished run's folder as training_runs leaves it: run.json with the result's flat scalars."""
    import json

    folder = runs / name
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"kind": "units", "name": name, "status": "finished",
                                                 "result": result}))
    (folder / "events.jsonl").write_text("")


def test_long_run_labels_wrap_in_a_small_window_and_their_tooltip_says_them_whole(qtbot, tab: TrainTab,
                                                                                  tmp_path: Path) -> None:
    """An earlier trial: at 1024 px the runs' labels ("<name> · <kind> · <status> · <best metric>") were cut at
    the pane's edge, behind a sideways scroll bar. They wrap inside the pane now."""
    name = "units-librispeech-clean-100-speakers-small-codebook-2026-05-03-1432"
    _finished_run(tmp_path / "runs", name, {"best_metric": "abx_error_within_speaker", "best_value": 0.123})
    _finished_run(tmp_path / "runs", "r", {})
    tab.resize(1024, 700)
    tab.show()
    qtbot.waitExposed(tab)
    tab.refresh_runs()
    runs = tab.runs_list
    qtbot.wait(50)
    rows = {runs.item(i).text().partition(" · ")[0]: runs.item(i) for i in range(runs.count())}
    item = rows[name]
    assert item.text().endswith("abx_error_within_speaker 0.123") and item.toolTip().startswith(item.text())
    rect, line = runs.visualItemRect(item), runs.fontMetrics().lineSpacing()
    assert rect.right() <= runs.viewport().width()  # nothing beyond the pane's edge
    assert rect.height() >= 2 * line > runs.visualItemRect(rows["r"]).height()  # the long label wraps, a short not
    assert not runs.horizontalScrollBar().isVisible()


@pytest.mark.parametrize(("result", "said"), [
    ({"wall_time_s": 4.4, "stopped": "finished", "best_metric": None, "steps": 90, "epochs": 5,
      "metrics.vq_loss": 1.0799, "metrics.vq_recon": 1.0545, "metrics.train_perplexity": 10.3649,
      "metrics.inv_loss": 23.3766, "metrics.codes_used": 14},
     "r finished in 4 s: vq_loss 1.08, vq_recon 1.05, train_perplexity 10.4, inv_loss 23.4 — Use this model to "
     "keep it"),
    ({"wall_time_s": 1625.0, "stopped": "time_limit", "best_metric": "dev_ap", "best_value": 0.8123,
      "metrics.loss": 0.31, "metrics.dev_ap": 0.8123},
     "r finished in 27 min (its time budget): dev_ap 0.812, loss 0.31 — Use this model to keep it"),
    ({"dev_ap": 1.0, "final_loss": 0.25, "steps": 5},  # a trainer without the common result schema
     "r finished: dev_ap 1, final_loss 0.25 — Use this model to keep it"),
])
def test_a_finished_run_says_what_it_reached_in_words(qtbot, tab: TrainTab, tmp_path: Path, result: dict,
                                                       said: str) -> None:
    """A units run ended with "finished: wall_time_s 4.4, metrics.vq_loss 1.08, metrics.vq_recon 1.054, ...": the
    run's bookkeeping as if it were a metric, and the result's dotted keys. It says how long the run took (and why
    it stopped, when not at its end), then its metrics by name, the best one first."""
    _finished_run(tmp_path / "runs", "r", result)
    tab.refresh_runs()
    tab.runs_list.setCurrentRow(0)
    assert tab.status_label.text() == said


def test_before_any_run_the_curves_say_what_will_fill_them(qtbot, tab: TrainTab, tmp_path: Path) -> None:
    """On first start the tab showed a progress bar at "0%" and two black plots with axes from 0 to 1, as if a run
    were there and empty. Until a run is on show they say how to get one; its curves then replace the hints."""
    import json

    tab.show()
    qtbot.wait(50)
    assert not tab.progress_bar.isVisible()  # neither "0%" of nothing nor an empty bar that reads as a text box
    assert tab.loss_hint.isVisible() and "Start" in tab.loss_hint.text() and tab.metric_hint.isVisible()
    assert tab.loss_plot.getAxis("left")._tickLevels == [[]]  # no bare 0..1 ticks

    folder = tmp_path / "runs" / "r"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"kind": "words", "name": "r", "status": "finished"}))
    events = [{"time": 1.0, "event": "started"},
              *({"time": 1.0 + i, "event": "progress", "step": i, "total": 3, "loss": 1.0 / i, "dev_ap": 0.1 * i}
                for i in (1, 2, 3))]
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    tab.refresh_runs()
    tab.runs_list.setCurrentRow(0)
    assert not tab.loss_hint.isVisible() and not tab.metric_hint.isVisible()
    assert tab.loss_plot.getAxis("left")._tickLevels is None and tab.progress_bar.isVisible()
    assert tab.progress_bar.text() == "r: 3/3 (finished)"


def test_the_legend_never_covers_the_curves(qtbot, tab: TrainTab, tmp_path: Path) -> None:
    """The legends stood in the plots' top-right corners, over the curves that end there (a units run's
    inverter loss, a rising dev_ap), and at 720x480 over most of the plot. The names now stand in a row above
    each plot, a stroke of each curve's pen before its name (dashed: a run ticked to compare)."""
    import json

    import pyqtgraph as pg

    for name, steps in (("r", 30), ("other run", 20)):
        folder = tmp_path / "runs" / name
        folder.mkdir(parents=True)
        (folder / "run.json").write_text(json.dumps({"kind": "words", "name": name, "status": "finished"}))
        events = ({"time": 1.0 + i, "event": "progress", "step": i, "total": steps, "loss": 1.0 / i,
                   "dev_ap": 0.03 * i} for i in range(1, steps + 1))
        (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    tab.resize(720, 480)
    tab.show()
    tab.refresh_runs()
    rows = {tab.runs_list.item(i).text().partition(" · ")[0]: i for i in range(tab.runs_list.count())}
    tab.runs_list.setCurrentRow(rows["r"])
    tab.runs_list.item(rows["other run"]).setCheckState(Qt.CheckState.Checked)
    qtbot.wait(50)
    names = {tab.loss_plot: ["loss", "other run: loss"], tab.metric_plot: ["dev_ap", "other run: dev_ap"]}
    for plot, drawn in names.items():
        assert [item.name() for item in plot.listDataItems()] == drawn
        data = plot.getViewBox().sceneBoundingRect()
        assert not [item for item in plot.scene().items() if isinstance(item, pg.LegendItem)
                    and item.isVisible() and item.sceneBoundingRect().intersects(data)]
    for plot, legend in ((tab.loss_plot, tab.loss_legend), (tab.metric_plot, tab.metric_legend)):
        text = legend.text().replace("&nbsp;", " ")
        assert all(name in text for name in names[plot])
        assert text.count("━━") == 1 and text.count("╍╍") == 1  # the run on show solid, the compared one dashed
        assert legend.isVisible() and legend.geometry().bottom() < plot.geometry().top()  # above, not over it


def test_a_log_loss_axis_labels_only_its_decades(qtbot, tab: TrainTab, tmp_path: Path) -> None:
    """A units run's two stages (losses near 1, then near 25) put the loss axis in log mode, and over those
    less than two decades every 2..9 got a label: "4·10¹3·10¹2·10¹" and "0.8 0.6" ran into each other."""
    import json

    folder = tmp_path / "runs" / "u"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"kind": "units", "name": "u", "status": "finished"}))
    events = [{"time": 1.0 + i, "event": "progress", "step": i, "total": 20, "loss": 0.6 + 0.02 * i if i <= 10
               else 20.0 + i, "stage": "vqvae" if i <= 10 else "inverter"} for i in range(1, 21)]
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    tab.refresh_runs()
    tab.runs_list.setCurrentRow(0)
    axis = tab.loss_plot.getAxis("left")
    assert axis.logMode
    levels = axis.tickValues(float(np.log10(0.6)), float(np.log10(40.0)), 200)
    labelled = [v for _, values in levels[:axis.style["maxTextLevel"] + 1] for v in values]
    assert labelled == [0.0, 1.0]  # 1 and 10: the decades in view


def test_a_run_without_a_log_does_not_show_the_last_runs(qtbot, tab: TrainTab, tmp_path: Path) -> None:
    import json

    for name in ("with log", "without log"):
        folder = tmp_path / "runs" / name
        folder.mkdir(parents=True)
        (folder / "run.json").write_text(json.dumps({"kind": "words", "name": name, "status": "finished"}))
        (folder / "events.jsonl").write_text("")
    (tmp_path / "runs" / "with log" / "log.txt").write_text("epoch 1/3 loss=0.9\n")
    tab.refresh_runs()
    rows = {tab.runs_list.item(i).text().partition(" · ")[0]: i for i in range(tab.runs_list.count())}
    tab.runs_list.setCurrentRow(rows["with log"])
    assert "epoch 1/3" in tab.log_view.toPlainText()
    tab.runs_list.setCurrentRow(rows["without log"])
    assert tab.log_view.toPlainText() == ""


# ------------------------------------------------------------------------------------- time, results (issue 40)


def said(tab: TrainTab) -> str:
    """The estimate's line as the tab shows it (the label holds it as rich text, its time in bold)."""
    return tab.train_state.estimate_line()


def _plan_settled(tab: TrainTab) -> bool:
    """The estimate caught up with the form: no edit waiting for it."""
    return not tab.plan_timer.isActive()


def test_the_time_is_estimated_before_start_from_measured_steps(qtbot, tab: TrainTab, tmp_path: Path) -> None:
    """The shipped retrieval preset said "Time budget: no limit" and nothing of how long it would take. Once the
    data passes its check the tab measures a few real steps of the trainer on it, in a worker, and says the
    run's time and what it is based on; the budget caps it; the same choice is not measured twice."""
    tab.set_setting("steps", 200)
    tab.set_setting("step_seconds", 0.05)
    assert not tab.estimate_label.isVisible() and tab.train_state.plan is None  # nothing to start yet
    with qtbot.waitSignal(tab.validated, timeout=10_000):
        tab.set_data_folder(words_folder(tmp_path / "data"))
    qtbot.waitUntil(lambda: "measuring a training step" in said(tab), timeout=10_000)
    assert tab.measurer is not None and tab.measurer.is_running()  # a worker: the GUI thread only draws
    assert "on this CPU" in said(tab)
    qtbot.waitUntil(lambda: said(tab).startswith("About"), timeout=30_000)
    text = said(tab)
    assert tab.estimate_label.text().startswith("<b>About ") and tab.estimate_label.isVisibleTo(tab)  # in bold
    assert re.search(r"\(200 steps at [0-9.]+ s a step, measured, after [0-9]+ s starting and reading the data\)$",
                     text), text
    assert tab.train_state.plan.measurement.step_s >= 0.045  # the fake trainer's steps sleep 0.05 s (times: ms)
    assert "budget" not in text
    assert tab.runs_list.count() == 0 and not list((tmp_path / "runs" / ".measuring").iterdir())  # no trace

    tab.set_setting("max_minutes", 0.1)  # 6 s: less than the 200 steps' 10 s
    qtbot.waitUntil(lambda: "budget" in said(tab) and _plan_settled(tab), timeout=5_000)
    assert said(tab).startswith("About 6 s on this CPU: it stops at its 6 s budget")
    assert tab.measurer is None  # the budget changes no step: nothing measured again
    tab.set_setting("max_minutes", None)
    tab.set_setting("steps", 400)  # twice the steps: twice the time, from the same measurement
    qtbot.waitUntil(lambda: "400 steps" in said(tab) and _plan_settled(tab), timeout=5_000)
    assert tab.measurer is None

    again = TrainTab(runs_dir=tmp_path / "runs", models_dir=tmp_path / "models", trainer_module="fake_trainer",
                     trainer_path=TESTS)  # another session: the measurement was kept beside the runs
    qtbot.addWidget(again)
    try:
        qtbot.waitUntil(lambda: bool(again.specs), timeout=30_000)
        again.set_setting("steps", 200)
        again.set_setting("step_seconds", 0.05)
        with qtbot.waitSignal(again.estimated, timeout=10_000) as heard:
            again.set_data_folder(tmp_path / "data")
        assert heard.args[0] == text and again.measurer is None
    finally:
        again.shutdown()


def test_a_trainer_that_cannot_be_measured_says_what_the_time_will_rest_on(qtbot, tab: TrainTab,
                                                                           tmp_path: Path) -> None:
    tab.set_setting("fail_at", 1)
    with qtbot.waitSignal(tab.validated, timeout=10_000):
        tab.set_data_folder(words_folder(tmp_path / "data"))
    with qtbot.waitSignal(tab.estimated, timeout=30_000) as said:
        pass
    assert said.args[0].startswith("No time estimate: measuring a training step failed") and "fake failure" in \
        said.args[0] and "from its first steps" in said.args[0]
    assert tab.start_button.isEnabled() and "fake failure" not in tab.status_label.text()  # no error of the run's


def test_the_data_pass_before_the_steps_has_its_time_left_from_its_first_item(qtbot, tab: TrainTab,
                                                                             tmp_path: Path) -> None:
    """words-default showed "1/2021 augmenting…" for 70-90 s, empty plots and no time left: a time left needed
    two reports of the pass, and the trainer reported every 500 tokens. The time left counts from the first
    report now (its work began with the report before), and the empty plots say what comes first."""
    with qtbot.waitSignal(tab.validated, timeout=10_000):
        tab.set_data_folder(words_folder(tmp_path / "data"))
    tab.set_setting("prep_items", 2021)
    tab.set_setting("prep_seconds", 0.004)  # 2 s between its first report and its second, as words did (500 apart)
    tab.set_setting("steps", 3)
    tab.name_edit.setText("prep")
    tab.show()
    tab.start_button.click()
    qtbot.waitUntil(lambda: "augmenting" in tab.progress_bar.text(), timeout=30_000)
    assert tab.progress_bar.text() == "prep: augmenting 1 copies of the tokens 1/2021"  # its first report only
    assert tab.eta_label.text().endswith(" left")
    assert tab.loss_hint.isVisible() and "Preparing: augmenting" in tab.loss_hint.text()
    assert "the curves start with the first training step" in tab.loss_hint.text()
    assert "augmenting" in tab.metric_hint.text()
    qtbot.waitUntil(lambda: len(tab.loss_plot.getPlotItem().listDataItems()) == 1, timeout=30_000)
    assert not tab.loss_hint.isVisible()


def _run_folder(runs: Path, name: str, events: list[dict], kind: str = "retrieval", status: str = "finished") -> Path:
    import json

    folder = runs / name
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"kind": kind, "name": name, "status": status}))
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return folder


def test_scores_and_counts_are_drawn_on_their_own_axes(qtbot, tab: TrainTab, tmp_path: Path) -> None:
    """A retrieval run drew val_n_captions (210) and its mean rank (56) on the axis of its mAP@10 (0.078): the
    curves that matter lay flat along the bottom. Scores and rates have their plot, counts and ranks theirs."""
    events = [{"time": 1.0, "event": "started"}]
    for step in range(1, 31):
        events.append({"time": 1.0 + step, "event": "progress", "step": step, "total": 30, "loss": 3.0 / step})
        if step % 10 == 0:
            events.append({"time": 1.5 + step, "event": "progress", "step": step, "total": 30, "loss": 0.2,
                           "epoch_end": True, "val_map10": 0.02 + 0.002 * step, "val_R@1": 0.01 * step / 10,
                           "val_R@10": 0.1 + 0.003 * step, "val_mean_rank": 80 - step, "val_median_rank": 40.0,
                           "val_n_captions": 210})
    _run_folder(tmp_path / "runs", "r", events)
    tab.resize(1024, 700)
    tab.show()
    tab.refresh_runs()
    tab.runs_list.setCurrentRow(0)
    qtbot.wait(50)
    names = {plot: {item.name() for item in plot.listDataItems()} for plot in (tab.metric_plot, tab.count_plot)}
    assert names[tab.metric_plot] == {"val_map10", "val_R@1", "val_R@10"}
    assert names[tab.count_plot] == {"val_mean_rank", "val_median_rank", "val_n_captions"}
    top = tab.metric_plot.getViewBox().viewRange()[1][1]
    assert top < 1.0  # the scores' own scale: 0.078 is not flattened under 210
    assert tab.count_plot.isVisible() and "Counts and ranks" in tab.count_legend.text()
    assert "val_n_captions" in tab.count_legend.text() and "val_n_captions" not in tab.metric_legend.text()

    _run_folder(tmp_path / "runs", "w", [{"time": 1.0 + i, "event": "progress", "step": i, "total": 3,
                                          "loss": 1.0 / i, "dev_ap": 0.3 * i} for i in (1, 2, 3)], kind="words")
    tab.refresh_runs()
    rows = {tab.runs_list.item(i).text().partition(" · ")[0]: i for i in range(tab.runs_list.count())}
    tab.runs_list.setCurrentRow(rows["w"])
    assert [i.name() for i in tab.metric_plot.listDataItems()] == ["dev_ap"] and not tab.count_plot.isVisible()


def test_a_stopped_run_keeps_its_best_checkpoint_for_use_this_model(qtbot, tab: TrainTab, tmp_path: Path) -> None:
    """A cancelled run whose log reached dev AP 0.994 could not be kept: Use this model wanted a finished run.
    A cancelled or interrupted run whose best checkpoint is there, whole and of its kind, can be used; one
    without a checkpoint, with a damaged one, or that failed cannot."""
    import fake_trainer

    runs = tmp_path / "runs"
    for name, status, checkpoint in (("kept", "cancelled", "whole"), ("gone", "interrupted", "whole"),
                                     ("none", "cancelled", None), ("damaged", "cancelled", "damaged"),
                                     ("failed", "failed", "whole")):
        folder = _run_folder(runs, name, [{"time": 1.0, "event": "started"},
                                          {"time": 2.0, "event": "progress", "step": 9, "total": 20, "loss": 0.1,
                                           "dev_ap": 0.994}], kind="words", status=status)
        if checkpoint == "whole":
            fake_trainer.save(folder / "model.safetensors", 9)
        elif checkpoint == "damaged":
            fake_trainer.save(folder / "model.safetensors", 9)
            data = (folder / "model.safetensors").read_bytes()
            (folder / "model.safetensors").write_bytes(data[: len(data) - 6])  # cut short, as by a full disk
    tab.refresh_runs()
    rows = {tab.runs_list.item(i).text().partition(" · ")[0]: i for i in range(tab.runs_list.count())}
    usable = {}
    for name, row in rows.items():
        tab.runs_list.setCurrentRow(row)
        usable[name] = tab.use_button.isEnabled()
    assert usable == {"kept": True, "gone": True, "none": False, "damaged": False, "failed": False}

    tab.runs_list.setCurrentRow(rows["kept"])
    assert "Use this model keeps its best checkpoint" in tab.status_label.text()
    tab.model_name_edit.setText("best-so-far")
    with qtbot.waitSignal(tab.model_registered, timeout=5_000):
        tab.use_button.click()
    saved = tmp_path / "models" / "best-so-far.safetensors"
    assert saved.read_bytes() == (runs / "kept" / "model.safetensors").read_bytes()
    card = saved.with_suffix(".md").read_text()
    assert "cancelled before its end" in card and "- steps: 9" in card and "metrics.dev_ap: 0.09" in card


@pytest.mark.slow
def test_use_this_model_after_stop_in_a_live_run(qtbot, tab: TrainTab, tmp_path: Path) -> None:
    with qtbot.waitSignal(tab.validated, timeout=10_000):
        tab.set_data_folder(words_folder(tmp_path / "data"))
    tab.set_setting("steps", 300)
    tab.set_setting("step_seconds", 0.02)
    tab.name_edit.setText("live")
    tab.start_button.click()
    assert not tab.use_button.isEnabled()  # running: its checkpoint may still change
    qtbot.waitUntil(lambda: tab.run.progress()[0] >= 12, timeout=30_000)
    with qtbot.waitSignal(tab.run_changed, timeout=30_000):
        tab.cancel_button.click()
    qtbot.waitUntil(lambda: not tab.run.is_active() and tab.use_button.isEnabled(), timeout=10_000)
    with qtbot.waitSignal(tab.model_registered, timeout=5_000):
        tab.use_button.click()
    assert (tmp_path / "models" / "live.safetensors").is_file()


def quick_words(fsdd: Path, folder: Path) -> Path:
    """Three FSDD digits, 100 tokens to train on (with seed 0, three of the quick test's 12 batches held one
    digit only) and 20 dev tokens of others."""
    import csv

    folder.mkdir()
    with open(fsdd / "metadata.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    train = [r for r in rows if r["split"] != "test"][:100]
    dev = [r for r in rows if r["split"] == "test"][::15][:20]
    lines = ["path,word,speaker,split"] + [f"{fsdd / r['path']},{r['word']},{r['speaker']},{split}"
                                           for part, split in ((train, "train"), (dev, "dev")) for r in part]
    (folder / "words.csv").write_text("\n".join(lines) + "\n")
    return folder


@pytest.mark.slow
def test_the_quick_test_is_estimated_and_its_loss_never_drops_to_an_artefactual_zero(qtbot, tmp_path: Path,
                                                                                     fsdd: Path) -> None:
    """The words quick test's loss dropped to exactly 0 at steps 1, 5 and 9: batches of one word have no
    negatives. The real trainer, measured for the estimate first, then run to its end from the tab."""
    tab = TrainTab(runs_dir=tmp_path / "runs", models_dir=tmp_path / "models")
    qtbot.addWidget(tab)
    try:
        qtbot.waitUntil(lambda: tab.kind() == "words" and bool(tab.specs), timeout=60_000)
        tab.choose_preset("Quick test (tiny)")
        tab.set_setting("threads", 1)
        tab.device_combo.setCurrentIndex(tab.device_combo.findData("cpu"))
        with qtbot.waitSignal(tab.validated, timeout=30_000):
            tab.set_data_folder(quick_words(fsdd, tmp_path / "data"))
        with qtbot.waitSignal(tab.estimated, timeout=120_000) as said:
            pass
        # a box fast enough finishes all 12 steps while they are being timed: then the whole run is the measure
        assert said.args[0].startswith("About") and ("100 clips × 3 epochs: 12 steps" in said.args[0]
                                                      or "12 steps: the whole run, measured" in said.args[0]), said.args
        tab.name_edit.setText("quick")
        tab.start_button.click()
        qtbot.waitUntil(lambda: tab.run.status != "running", timeout=180_000)
        assert tab.run.status == "finished", tab.run.log_tail()
        xs, ys = tab.run.curves()["loss"]
        assert len(xs) == 12 and min(ys) > 0.01, ys  # one point a step, none at 0
        drawn = [item for item in tab.loss_plot.listDataItems() if item.name() == "loss"]
        assert len(drawn) == 1 and min(drawn[0].getData()[1]) > 0.01
    finally:
        tab.shutdown(stop_runs=True)
