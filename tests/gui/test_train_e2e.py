"""End to end from the Train tab with the real trainers: for each model kind, check a small folder, start,
watch the curve, cancel, resume, finish, "Use this model", and find the model loaded in its own tab."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

from app.services.registry import ModelRegistry, user_models_dir
from app.ui.main_window import MainWindow

# long enough (several seconds even on a fast machine) that Cancel lands while the run is still going
SETTINGS = {
    "words": {"preset": "tiny", "max_epochs": 120, "patience": 100, "batch_size": 32, "lr": 0.002,
              "warmup_steps": 0, "threads": 1},
    "units": {"preset": "tiny", "vq_steps": 800, "inv_steps": 200, "batch_size": 8, "crop_frames": 32,
              "threads": 1, "checkpoint_every": 10},
    "retrieval": {"epochs": 25, "batch_size": 8, "threads": 1},
}  # fmt: skip


def fsdd_words(fsdd: Path, folder: Path) -> Path:
    """4 digits x 3 speakers x 10 takes of real FSDD: index 0-1 dev, the rest train."""
    folder.mkdir()
    with open(fsdd / "metadata.csv", newline="") as f, open(folder / "words.csv", "w", newline="") as g:
        w = csv.writer(g)
        w.writerow(["path", "word", "speaker", "split"])
        for r in csv.DictReader(f):
            if r["speaker"] in ("george", "jackson", "nicolas") and r["word"] in ("one", "two", "six", "nine") \
                    and int(r["index"]) < 10:
                w.writerow([str(fsdd / r["path"]), r["word"], r["speaker"], "dev" if int(r["index"]) < 2 else
                            "train"])
    return folder


def sfx_captions(sfx: Path, folder: Path) -> Path:
    folder.mkdir()
    with open(sfx / "captions.csv", newline="") as f:
        rows = sorted(csv.DictReader(f), key=lambda r: float(r["duration_s"]))
    rows = [r for r in rows if float(r["duration_s"]) > 0.5]
    with open(folder / "captions.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "caption", "split"])
        for r in [r for r in rows if r["split"] == "train"][:16] + [r for r in rows if r["split"] == "val"][:6]:
            w.writerow([str(sfx / r["path"]), r["caption"], r["split"]])
    return folder


@pytest.fixture
def window(qtbot, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data-home"))  # runs and user models go here
    (tmp_path / "library").mkdir()  # an empty library: the demo one stays untouched
    win = MainWindow(library=tmp_path / "library", registry=ModelRegistry(device="cpu"))
    qtbot.addWidget(win)
    win.resize(1200, 800)
    yield win
    tab = win.train_tab
    if tab.run is not None and tab.run.is_active():
        tab.run.cancel()
        tab.run.wait(30)
    win.close()


def loaded_name(window: MainWindow, kind: str) -> str | None:
    if kind == "words":
        return window.words_tab.space.name if window.words_tab.space is not None else None
    if kind == "units":
        return window.units_tab.loaded_name or None
    return window.search_tab.embedder.name if window.search_tab.embedder is not None else None


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["words", "units", "retrieval"])
def test_train_cancel_resume_use_in_its_tab(qtbot, window: MainWindow, kind: str, fsdd: Path, sfx: Path,
                                            tmp_path: Path) -> None:
    tab = window.train_tab
    window.tabs.setCurrentWidget(tab)
    tab.kind_combo.setCurrentIndex(tab.kind_combo.findData(kind))
    qtbot.waitUntil(lambda: bool(tab.specs) and tab.kind() == kind and all(k in tab.inputs for k in SETTINGS[kind]),
                    timeout=60_000)
    data = sfx_captions(sfx, tmp_path / "data") if kind == "retrieval" else fsdd_words(fsdd, tmp_path / "data")
    with qtbot.waitSignal(tab.validated, timeout=60_000) as got:
        tab.set_data_folder(data)
    assert got.args[0].ok, tab.report_label.text()
    tab.choose_preset("Quick test (tiny)")  # the default, the shipped recipe, takes half an hour or more
    for name, value in SETTINGS[kind].items():
        tab.set_setting(name, value)
    tab.device_combo.setCurrentIndex(tab.device_combo.findData("cpu"))
    tab.name_edit.setText(f"e2e-{kind}")
    assert tab.start_button.isEnabled()
    tab.start_button.click()
    assert tab.run is not None and tab.run.status == "running"

    # the curve fills in while the separate process trains; then cancel
    qtbot.waitUntil(lambda: len(tab.loss_plot.getPlotItem().listDataItems()) >= 1
                    and len(tab.loss_plot.getPlotItem().listDataItems()[0].getData()[0]) >= 1, timeout=120_000)
    with qtbot.waitSignal(tab.run_changed, timeout=60_000) as changed:
        tab.cancel_button.click()
    assert changed.args == ["cancelled"], tab.run.log_tail()
    qtbot.waitUntil(lambda: not tab.run.is_active() and tab.resume_button.isEnabled(), timeout=30_000)
    assert tab.use_button.isEnabled() == (tab.run.kept_checkpoint() is not None)  # its best so far, if any

    with qtbot.waitSignal(tab.run_changed, timeout=60_000) as changed:
        tab.resume_button.click()
    assert changed.args == ["running"]
    qtbot.waitUntil(lambda: tab.run.status != "running", timeout=240_000)
    assert tab.run.status == "finished", tab.run.error or tab.run.log_tail()
    assert tab.use_button.isEnabled()
    save_screenshot(window, f"train_{kind}_finished.png")

    name = f"my-{kind}"
    tab.model_name_edit.setText(name)
    with qtbot.waitSignal(tab.model_registered, timeout=10_000):
        tab.use_button.click()
    assert (user_models_dir() / f"{name}.safetensors").is_file()
    model_tab = {"words": window.words_tab, "units": window.units_tab, "retrieval": window.search_tab}[kind]
    qtbot.waitUntil(lambda: model_tab.model_combo.findText(name) >= 0, timeout=60_000)
    model_tab.model_combo.setCurrentIndex(model_tab.model_combo.findText(name))
    if kind == "units":  # its combo reacts to the text
        model_tab.model_combo.setCurrentText(name)
    qtbot.waitUntil(lambda: loaded_name(window, kind) == name, timeout=120_000)
    window.tabs.setCurrentWidget(model_tab)
    save_screenshot(window, f"train_{kind}_in_its_tab.png")


def save_screenshot(window: MainWindow, name: str) -> None:
    """With EARSHOT_SCREENSHOTS=DIR, keep pictures of the run for the docs."""
    folder = os.environ.get("EARSHOT_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        assert window.grab().save(str(Path(folder) / name))
