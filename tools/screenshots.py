"""Grab each tab of the real window offscreen, at work, for the README: `python -m tools.screenshots OUTDIR`.

The window runs with the shipped default models and is driven through the tabs' public methods, the way the
GUI tests drive them:

- Search: a copy of the bundled demo library is indexed, a query is typed, the first result is previewed and a
  part of it selected;
- Units: an FSDD recording is loaded as a file, encoded into units and resynthesised;
- Words: (only when a words model is installed) spoken FSDD digits and typed words fill the matrix and map;
- Train: the Words kind with a small FSDD ``words.csv`` shows its validation report (no run is started).

`--train-basic` grabs only the Train tab's basic view (that same state: the shipped recipe chosen, Advanced
collapsed) at 1024x700 and 1600x1000, as `train-basic-1024.png` and `train-basic-1600.png`.

`--units-live` grabs only the Units tab at 1024x700 while it records (an FSDD recording replayed into the
Recorder in real time, as a microphone would deliver it): the live view, the input level meter and the voice
fitted to the speaker, as `tab-units.png`.

Everything it writes outside OUTDIR goes to a throw-away folder: the settings (QSettings), the user data dir
(XDG_DATA_HOME: user models, training runs), the demo library's index and the generated data. Each step has
a time limit; a step that runs out of time (or fails) prints a warning on stderr and its tab is grabbed as
it is. `--model PATH` adds a checkpoint (e.g. a words model not shipped yet) as a user model for this run.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FSDD = REPO.parent / "shared" / "data" / "fsdd"  # the Free Spoken Digit Dataset next to the repository
SEARCH_QUERY = "bubbles in water"  # its best match in the demo library is the right sound
UNITS_SPEAKER = "jackson"
UNITS_DIGITS = "8675309"  # spoken one after another: a few seconds of speech for the Units tab
WORD_DIGITS = ("one", "two", "seven")
WORD_SPEAKERS = ("theo", "george")
TYPED_WORDS = ("one", "seven", "eleven")
TRAIN_SPEAKERS = ("jackson", "theo", "george")
STEP_SECONDS = 120.0


def warn(message: str) -> None:
    print(f"screenshots: warning: {message}", file=sys.stderr, flush=True)


class Step:
    """One step's time limit: `wait` pumps the Qt event loop until a condition holds or the step's time is up."""

    def __init__(self, name: str, seconds: float) -> None:
        self.name = name
        self.deadline = time.monotonic() + seconds
        self.seconds = seconds

    def wait(self, condition: Callable[[], bool], what: str) -> bool:
        from PySide6.QtCore import QCoreApplication

        while True:
            try:
                if condition():
                    return True
            except Exception:  # a condition looking at half-built state: not yet
                pass
            if time.monotonic() > self.deadline:
                warn(f"{self.name}: gave up after {self.seconds:.0f} s waiting for {what}; grabbing the tab as it is")
                return False
            QCoreApplication.processEvents()
            time.sleep(0.02)


def settle(ms: int = 300) -> None:
    """Let layouts, repaints and queued signals run before a grab."""
    from PySide6.QtCore import QCoreApplication

    end = time.monotonic() + ms / 1000
    while time.monotonic() < end:
        QCoreApplication.processEvents()
        time.sleep(0.01)


def fsdd_rows(fsdd: Path) -> list[dict[str, str]]:
    with open(fsdd / "metadata.csv", newline="") as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------------------------------------------ steps


def drive_search(window: Any, indexed: list[Any], step: Step, query: str,  # noqa: ANN401 - MainWindow
                 names_weight: float | None = None) -> None:
    tab = window.search_tab
    if names_weight is not None:  # the names <-> sound slider, as a user would set it (1: names, 0: sound)
        from app.ui.search_state import balance_position

        tab.balance.slider.setValue(balance_position(names_weight))
    window.tabs.setCurrentWidget(tab)
    if not step.wait(lambda: bool(indexed), "the demo library to be indexed"):
        return
    if indexed[-1] is None:
        warn(f"search: indexing stopped: {tab.indexing.index_label.text()}")
    shown: list[Any] = []
    previews: list[Any] = []
    tab.results_shown.connect(shown.append)
    tab.preview_shown.connect(previews.append)
    tab.query_edit.setText(query)  # search as you type (debounced), as if typed
    if not step.wait(lambda: bool(shown) and shown[-1].query == query, f"results for “{query}”"):
        return
    if not tab.state.hits:
        warn(f"search: no results for “{query}”")
        return
    if tab.state.selected_hit() is not tab.state.hits[0] or tab.state.preview is None:
        tab.table.selectRow(0)  # the best match (a sound selected while browsing stays selected otherwise)
        tab.table.scrollToTop()
    if step.wait(lambda: tab.state.preview is not None and tab.state.preview_hit is not None,
                 "the preview of the first result"):
        p = tab.state.preview  # a part selected, as a user picks one to export or drag into a DAW
        tab.preview_pane.select_part(p.offset_s + 0.25 * (p.end_s - p.offset_s),
                                     p.offset_s + 0.6 * (p.end_s - p.offset_s), True)


def drive_units(window: Any, step: Step, speech: Path | None) -> None:  # noqa: ANN401 - MainWindow
    tab = window.units_tab
    window.tabs.setCurrentWidget(tab)
    if speech is None:
        warn("units: no FSDD recording found; grabbing the tab without a file")
        return
    if not step.wait(lambda: tab.session is not None and tab.state == "idle", "the units model"):
        return
    tab.load_file(speech)
    step.wait(lambda: tab.state == "idle" and tab.resynthesis is not None and not tab.busy(),
              f"units and resynthesis of {speech.name}")


def drive_words(window: Any, step: Step, spoken: list[Path], typed: Sequence[str]) -> None:  # noqa: ANN401
    tab = window.words_tab
    window.tabs.setCurrentWidget(tab)
    if not tab.models:
        print("screenshots: no words model installed; the Words tab is grabbed as it is", file=sys.stderr)
        window.statusBar().clearMessage()  # the Units tab's last message does not belong in this picture
        return
    if not step.wait(lambda: tab.space is not None and not tab.busy(), "the words model"):
        return
    tab.views.setCurrentIndex(0)  # Compare: similarity matrix and 2-D map
    if spoken:
        tab.add_files(spoken)
        if not step.wait(lambda: not tab.busy(), "the spoken words"):
            return
    tab.add_words(list(typed))
    if not step.wait(lambda: not tab.busy(), "the typed words"):
        return
    if len(tab.words):
        tab.items_list.setCurrentRow(0)  # its nearest neighbours


def drive_train(window: Any, step: Step, data: Path | None) -> None:  # noqa: ANN401 - MainWindow
    tab = window.train_tab
    window.tabs.setCurrentWidget(tab)
    index = tab.kind_combo.findData("words")
    if index >= 0 and tab.kind_combo.currentIndex() != index:
        tab.kind_combo.setCurrentIndex(index)
    step.wait(lambda: tab.kind() == "words" and bool(tab.specs), "the words trainer's settings")
    if data is None:
        warn("train: no FSDD data found; grabbing the tab without a data folder")
        return
    reports: list[Any] = []
    tab.validated.connect(reports.append)
    tab.set_data_folder(data)
    if step.wait(lambda: bool(reports) and not tab.busy(), f"the validation of {data}"):
        window.statusBar().clearMessage()  # the validation's last progress line; the report says it all


# ------------------------------------------------------------------------------------------------- data


def copy_demo_library(demo: Path, dest: Path) -> Path:
    """The demo library without its index: indexing writes `.earshot/` into the library, never into resources/."""
    shutil.copytree(demo, dest, ignore=shutil.ignore_patterns(".earshot"))
    return dest


def digit_sequence(fsdd: Path, dest: Path, speaker: str, digits: str, pause_s: float = 0.12) -> Path | None:
    """`speaker`'s FSDD takes of `digits` joined with short pauses into one WAV: an utterance to load as a file."""
    import numpy as np

    from core.audio import decode, save_wav

    rows = fsdd_rows(fsdd)
    pieces: list[np.ndarray] = []
    rate = 0
    for digit in digits:
        row = next((r for r in rows if r["speaker"] == speaker and r["digit"] == digit and r["index"] == "0"), None)
        if row is None or not (fsdd / row["path"]).is_file():
            continue
        d = decode(fsdd / row["path"])
        if rate and d.sample_rate != rate:
            continue
        rate = d.sample_rate
        pieces += [d.audio, np.zeros(round(pause_s * rate), np.float32)]
    if not pieces:
        return None
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"{digits} {speaker}.wav"
    return save_wav(path, np.concatenate(pieces), rate)


def spoken_words(fsdd: Path, dest: Path, digits: Iterable[str], speakers: Iterable[str]) -> list[Path]:
    """FSDD takes of `digits` by `speakers`, copied as '<word> <speaker>.wav' (the file stem is the item's label)."""
    rows = fsdd_rows(fsdd)
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for speaker in speakers:
        for word in digits:
            row = next((r for r in rows if r["speaker"] == speaker and r["word"] == word and r["index"] == "0"), None)
            if row is None or not (fsdd / row["path"]).is_file():
                continue
            out.append(Path(shutil.copyfile(fsdd / row["path"], dest / f"{word} {speaker}.wav")))
    return out


def words_folder(fsdd: Path, dest: Path, speakers: Iterable[str], takes: int = 3) -> Path:
    """A small Words training folder: `words.csv` (path,word,speaker,split) over a copied FSDD subset."""
    rows = fsdd_rows(fsdd)
    speakers = list(speakers)
    audio = dest / "recordings"
    audio.mkdir(parents=True, exist_ok=True)
    lines = [("path", "word", "speaker", "split")]
    for r in rows:
        if r["speaker"] not in speakers or int(r["index"]) >= takes or not (fsdd / r["path"]).is_file():
            continue
        name = Path(r["path"]).name
        shutil.copyfile(fsdd / r["path"], audio / name)
        split = "dev" if int(r["index"]) == 0 else "train"
        lines.append((f"recordings/{name}", r["word"], r["speaker"], split))
    with open(dest / "words.csv", "w", newline="") as f:
        csv.writer(f).writerows(lines)
    return dest


# ------------------------------------------------------------------------------------------------- main


@contextlib.contextmanager
def scratch_home() -> Iterator[Path]:
    """A throw-away folder for everything a grab writes outside its output folder (user data, settings)."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    scratch = Path(tempfile.mkdtemp(prefix="earshot-"))  # short: the Train tab shows a path in it
    # before the app's modules ask platformdirs: user models, runs and read-only libraries' catalogs go here
    saved_env = os.environ.get("XDG_DATA_HOME")
    os.environ["XDG_DATA_HOME"] = str(scratch / "data")
    try:
        yield scratch
    finally:
        if saved_env is None:
            os.environ.pop("XDG_DATA_HOME", None)
        else:
            os.environ["XDG_DATA_HOME"] = saved_env
        shutil.rmtree(scratch, ignore_errors=True)


def _throwaway_settings(scratch: Path) -> None:
    from PySide6.QtCore import QSettings

    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(scratch / "settings"))


def grab_sizes(window: Any, sizes: Sequence[tuple[int, int]], out_dir: Path, stem: str,  # noqa: ANN401
               settle_ms: int = 300) -> list[Path]:
    """The window at each size, into `out_dir/<stem>-<width>.png`."""
    paths = []
    for width, height in sizes:
        window.resize(width, height)
        settle(settle_ms)
        path = Path(out_dir) / f"{stem}-{width}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        if not window.grab().save(str(path)):
            warn(f"could not write {path}")
        paths.append(path)
    return paths


def _close(window: Any, step_seconds: float) -> None:  # noqa: ANN401 - MainWindow
    window.close()  # cancels the tabs' jobs; a job that cannot be cancelled (opening a library) runs on
    from app.workers import active_runners

    # Python must not destroy a QThread that still runs (Qt aborts the process): let them end first
    Step("shutdown", max(step_seconds, 30.0)).wait(lambda: not active_runners(), "background jobs to end")
    settle(100)


def grab_tabs(out_dir: Path, size: tuple[int, int] = (1100, 700), step_seconds: float = STEP_SECONDS,
              fsdd: Path | None = None, query: str = SEARCH_QUERY, extra_models: Sequence[Path] = (),
              names_weight: float | None = None) -> list[Path]:
    """Drive each tab with real work, grab it into `out_dir/tab-<name>.png`; returns the PNG paths."""
    with scratch_home() as scratch:
        return _grab(Path(out_dir), size, step_seconds, fsdd if fsdd is not None else FSDD, query, extra_models,
                     scratch, names_weight)


TRAIN_SIZES = ((1024, 700), (1600, 1000))


def grab_train_basic(out_dir: Path, sizes: Sequence[tuple[int, int]] = TRAIN_SIZES,
                     step_seconds: float = STEP_SECONDS, fsdd: Path | None = None) -> list[Path]:
    """The Train tab's basic view (words, an FSDD folder checked, the shipped recipe chosen) at each window
    size, into `out_dir/train-basic-<width>.png`; returns the PNG paths."""
    from app.services.registry import ModelRegistry
    from app.ui.main_window import MainWindow, create_application

    fsdd = fsdd if fsdd is not None else FSDD
    out_dir = Path(out_dir)
    with scratch_home() as scratch:
        create_application()
        _throwaway_settings(scratch)
        have_fsdd = (fsdd / "metadata.csv").is_file()
        data = words_folder(fsdd, scratch / "fsdd-words", TRAIN_SPEAKERS) if have_fsdd else None
        (scratch / "library").mkdir()  # an empty library: the Search tab has nothing to index
        window = MainWindow(library=scratch / "library", registry=ModelRegistry(device="cpu"))
        window.resize(*sizes[0])
        window.show()
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = []
        try:
            Step("startup", step_seconds).wait(lambda: window.environment is not None, "the models and devices")
            drive_train(window, Step("train", step_seconds), data)
            paths += grab_sizes(window, sizes, out_dir, "train-basic")
        finally:
            _close(window, step_seconds)
        return paths


class ReplayInput:
    """Stands in for sounddevice.InputStream: a thread hands `audio` to the Recorder's callback in blocks, in
    real time, then silence."""

    def __init__(self, audio: Any, samplerate: int, blocksize: int, callback: Callable[..., None],  # noqa: ANN401
                 **_: object) -> None:
        import threading

        self.audio, self.rate, self.blocksize, self.callback = audio, samplerate, blocksize, callback
        self.active = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="replay-input", daemon=True)

    def _run(self) -> None:
        import numpy as np

        n, sent, began = self.blocksize, 0, time.monotonic()
        while not self._stop.is_set():
            block = np.zeros((n, 1), np.float32)
            piece = self.audio[sent * n:(sent + 1) * n]
            block[:len(piece), 0] = piece
            self.callback(block, n, None, None)
            sent += 1
            self._stop.wait(max(0.0, began + sent * n / self.rate - time.monotonic()))

    def start(self) -> None:
        self.active = True
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.active = False

    close = stop


def grab_units_live(out_dir: Path, size: tuple[int, int] = (1024, 700), record_seconds: float = 3.0,
                    step_seconds: float = STEP_SECONDS, fsdd: Path | None = None) -> list[Path]:
    """The Units tab `record_seconds` into a replayed recording, into `out_dir/tab-units.png`."""
    from app.services.devices import DeviceStatus, Recorder
    from app.services.registry import ModelRegistry
    from app.ui.main_window import MainWindow, create_application
    from core.audio import decode

    fsdd = fsdd if fsdd is not None else FSDD
    out_dir = Path(out_dir)
    with scratch_home() as scratch:
        create_application()
        _throwaway_settings(scratch)
        speech = digit_sequence(fsdd, scratch / "speech", UNITS_SPEAKER, UNITS_DIGITS)
        if speech is None:
            warn(f"units: no FSDD recording at {fsdd}")
            return []
        audio = decode(speech, sample_rate=16000).audio
        (scratch / "library").mkdir()  # an empty library: the Search tab has nothing to index
        window = MainWindow(library=scratch / "library", registry=ModelRegistry(device="cpu"))
        window.resize(*size)
        window.show()
        tab = window.units_tab
        window.tabs.setCurrentWidget(tab)
        replay = DeviceStatus(True, True, "input: an FSDD recording, replayed", ["replay"], ["none"])
        tab.device_status_fn = lambda: replay
        tab.recorder_factory = lambda: Recorder(sample_rate=16000, block_size=512,
                                                stream_factory=lambda **kw: ReplayInput(audio, **kw))
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / "tab-units.png"
        try:
            step = Step("units", step_seconds)
            if step.wait(lambda: tab.session is not None and tab.state == "idle", "the units model"):
                tab.refresh_devices()
                tab.start_recording()
                began = time.monotonic()
                step.wait(lambda: time.monotonic() - began > record_seconds and tab.session.voice_fit is not None
                          and tab.input_level.peak_db > -25, "a recording with its voice fitted, mid-word")
                window.statusBar().clearMessage()  # the Words model's "ready": not this tab's
                settle(100)
                if not window.grab().save(str(path)):
                    warn(f"could not write {path}")
                tab.stop_recording()
                step.wait(lambda: tab.state == "idle" and not tab.busy(), "the recording to end")
        finally:
            _close(window, step_seconds)
        return [path]


def _grab(out_dir: Path, size: tuple[int, int], step_seconds: float, fsdd: Path, query: str,
          extra_models: Sequence[Path], scratch: Path, names_weight: float | None = None) -> list[Path]:
    from app.services.registry import user_models_dir
    from app.ui.main_window import MainWindow, create_application, demo_library

    start = time.monotonic()
    create_application()
    _throwaway_settings(scratch)  # screenshots show the defaults and leave the user's settings alone
    models = user_models_dir()
    for path in extra_models:
        models.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, models / Path(path).name)

    have_fsdd = (fsdd / "metadata.csv").is_file()
    if not have_fsdd:
        warn(f"no FSDD at {fsdd}: the Units, Words and Train tabs get no speech")
    speech = digit_sequence(fsdd, scratch / "speech", UNITS_SPEAKER, UNITS_DIGITS) if have_fsdd else None
    spoken = spoken_words(fsdd, scratch / "words", WORD_DIGITS, WORD_SPEAKERS) if have_fsdd else []
    train_data = words_folder(fsdd, scratch / "fsdd-words", TRAIN_SPEAKERS) if have_fsdd else None
    library = copy_demo_library(demo_library(), scratch / "demo")

    window = MainWindow(library=library)
    indexed: list[Any] = []
    window.search_tab.indexing_finished.connect(indexed.append)
    window.resize(*size)
    window.show()
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []

    def grab(name: str) -> None:
        settle()
        path = out_dir / f"tab-{name}.png"
        if not window.grab().save(str(path)):
            warn(f"could not write {path}")
        paths.append(path)

    steps: list[tuple[str, Callable[[Step], None]]] = [
        ("search", lambda step: drive_search(window, indexed, step, query, names_weight)),
        ("units", lambda step: drive_units(window, step, speech)),
        ("words", lambda step: drive_words(window, step, spoken, TYPED_WORDS)),
        ("train", lambda step: drive_train(window, step, train_data)),
    ]
    try:
        Step("startup", step_seconds).wait(lambda: window.environment is not None, "the models and devices")
        for name, drive in steps:
            began = time.monotonic()
            try:
                drive(Step(name, step_seconds))
            except Exception:
                warn(f"{name}: failed; grabbing the tab as it is\n{traceback.format_exc()}")
            grab(name)
            print(f"screenshots: {name}: {time.monotonic() - began:.1f} s", file=sys.stderr, flush=True)
    finally:
        _close(window, step_seconds)
    print(f"screenshots: done in {time.monotonic() - start:.1f} s", file=sys.stderr, flush=True)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.screenshots", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", default="resources/screenshots", type=Path)
    parser.add_argument("--size", default="1100x700", help="window size, WIDTHxHEIGHT (default 1100x700)")
    parser.add_argument("--step-seconds", type=float, default=STEP_SECONDS, help="time limit of each step")
    parser.add_argument("--fsdd", type=Path, default=FSDD, help=f"FSDD folder (default {FSDD})")
    parser.add_argument("--query", default=SEARCH_QUERY, help=f"the Search tab's query (default “{SEARCH_QUERY}”)")
    parser.add_argument("--model", type=Path, action="append", default=[],
                        help="a checkpoint to add as a user model for this run (repeatable)")
    parser.add_argument("--names-weight", type=float, default=None,
                        help="the Search tab's names <-> sound slider: 1 names only, 0 sound only")
    parser.add_argument("--train-basic", action="store_true",
                        help="only the Train tab's basic view, at 1024x700 and 1600x1000")
    parser.add_argument("--units-live", action="store_true",
                        help="only the Units tab while recording (an FSDD recording replayed), at 1024x700")
    args = parser.parse_args(argv)
    if args.units_live:
        for p in grab_units_live(args.out_dir, step_seconds=args.step_seconds, fsdd=args.fsdd):
            print(p)
        return 0
    if args.train_basic:
        for p in grab_train_basic(args.out_dir, step_seconds=args.step_seconds, fsdd=args.fsdd):
            print(p)
        return 0
    width, _, height = args.size.lower().partition("x")
    for p in grab_tabs(args.out_dir, (int(width), int(height)), args.step_seconds, args.fsdd, args.query,
                       args.model, args.names_weight):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
