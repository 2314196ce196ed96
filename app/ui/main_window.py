"""The Earshot main window: four tabs, menus, a status bar, preferences persisted with QSettings."""

from __future__ import annotations

import logging
import os
import sys
import traceback
from importlib import resources
from pathlib import Path
from types import TracebackType

from PySide6.QtCore import QSettings, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QAction, QCloseEvent, QDragEnterEvent, QDropEvent, QKeySequence
from PySide6.QtWidgets import QApplication, QDialog, QFileDialog, QLabel, QMainWindow, QTabWidget, QWidget

from app.services import devices
from app.services.devices import DeviceStatus
from app.services.environment import Environment, audio_status_job, default_threads, probe_environment
from app.services.library.locations import Location, Locations
from app.services.registry import ModelRegistry
from app.ui.dialogs import AboutDialog, PreferencesDialog
from app.ui.locations_dialog import LocationsDialog
from app.ui.search_tab import SearchTab
from app.ui.status_bar import StatusBar
from app.ui.tab_base import ModelTab
from app.ui.train_tab import TrainTab
from app.ui.units_tab import UnitsTab
from app.ui.words_tab import WordsTab
from app.workers import JobRunner, active_runners, cancel_all
from core import memory
from core.display import display_name

log = logging.getLogger(__name__)
ORGANIZATION = "Earshot"
APPLICATION = "Earshot"
AUDIO_INPUT_KEY, AUDIO_OUTPUT_KEY = "audio/input", "audio/output"  # device labels; '' = the system default
EVERY_WINDOW_KEY = "index/every_window"  # embed every window of long files (default: spread windows)


def demo_library() -> Path:
    return Path(str(resources.files("resources") / "demo"))


class MainWindow(QMainWindow):
    audio_problem = Signal(str)  # a stream failed to open or died (from any thread): look at the devices again

    def __init__(self, registry: ModelRegistry | None = None, library: Path | None = None) -> None:
        super().__init__()
        self.setWindowTitle("Earshot")
        self.setAcceptDrops(True)
        self.settings = QSettings()
        self.locations = Locations.load()  # the library locations, shared with `earshot locations`
        self.registry = registry or ModelRegistry()
        if self.settings.contains("device"):
            self.registry.set_device(str(self.settings.value("device")))
        self.environment: Environment | None = None
        self._probe: JobRunner | None = None
        self._probe_again = False
        self._audio_probe: JobRunner | None = None
        self._audio_again = False
        devices.choose_devices(str(self.settings.value(AUDIO_INPUT_KEY, "")),
                             str(self.settings.value(AUDIO_OUTPUT_KEY, "")))
        self.audio_problem.connect(self.refresh_audio)  # queued when a worker's recording failed
        self._audio_listener = self.audio_problem.emit  # the same object to remove on closing
        devices.add_problem_listener(self._audio_listener)

        self.tabs = QTabWidget()
        self.search_tab = SearchTab()
        self.search_tab.every_window = self.settings.value(EVERY_WINDOW_KEY, False, type=bool)
        self.units_tab = UnitsTab()
        self.words_tab = WordsTab()
        self.train_tab = TrainTab()
        named = ((self.search_tab, "Search"), (self.units_tab, "Units"), (self.words_tab, "Words"),
                 (self.train_tab, "Train"))
        for widget, name in named:
            self.tabs.addTab(widget, name)
            widget.status_changed.connect(lambda message, w=widget, n=name: self.tab_status(w, n, message))
        self.setCentralWidget(self.tabs)
        for tab in self.model_tabs():
            tab.set_registry(self.registry)
            tab.models_loaded.connect(self.update_models_label)
        self.train_tab.set_registry(self.registry)
        # a model finished in the Train tab is listed (and selectable) in its own tab at once
        self.train_tab.model_registered.connect(lambda _name: self.refresh_environment())
        self._build_menus()
        self._build_status_bar()

        self.setMinimumSize(720, 480)
        geometry = self.settings.value("geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        else:
            self.resize(1100, 720)
        self.tabs.setCurrentIndex(int(self.settings.value("tab", 0)))

        saved = self.settings.value("library")
        start = library or (Path(str(saved)) if saved else None)
        together = [loc for loc in self.locations.chosen() if loc.path.is_dir()]
        if library is None and len(together) > 1:
            self.open_locations(together)
        else:
            self.open_library(start if start and start.is_dir() else demo_library(), remember=library is not None)
        QTimer.singleShot(0, self.refresh_environment)

    # ------------------------------------------------------------------------------------------- building

    def _find_duplicates(self) -> None:
        self.tabs.setCurrentWidget(self.search_tab)
        self.search_tab.tools.find_duplicates()

    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self.open_action = QAction("&Open Library Folder…", self)
        self.open_action.setShortcut(QKeySequence.StandardKey.Open)
        self.open_action.triggered.connect(self.choose_library)
        file_menu.addAction(self.open_action)
        self.recent_menu = file_menu.addMenu("Open &Recent")
        self.recent_menu.aboutToShow.connect(self._fill_recent)
        add_location = QAction("&Add Library Location…", self)
        add_location.setToolTip("Search another folder together with the libraries open")
        add_location.triggered.connect(self.add_location)
        file_menu.addAction(add_location)
        self.locations_action = QAction("Library &Locations…", self)
        self.locations_action.triggered.connect(self.edit_locations)
        file_menu.addAction(self.locations_action)
        demo = QAction("Open &Demo Library", self)
        demo.triggered.connect(lambda: self.open_library(demo_library()))
        file_menu.addAction(demo)
        duplicates = QAction("Find D&uplicates in the Library…", self)
        duplicates.triggered.connect(self._find_duplicates)
        file_menu.addAction(duplicates)
        file_menu.addSeparator()
        quit_action = QAction("&Quit", self)
        quit_action.setShortcut(QKeySequence.StandardKey.Quit)
        quit_action.triggered.connect(self.close)
        file_menu.addAction(quit_action)

        edit_menu = self.menuBar().addMenu("&Edit")
        self.prefs_action = QAction("&Preferences…", self)
        self.prefs_action.setShortcut(QKeySequence.StandardKey.Preferences)
        self.prefs_action.triggered.connect(self.show_preferences)
        edit_menu.addAction(self.prefs_action)

        help_menu = self.menuBar().addMenu("&Help")
        self.about_action = QAction("&About Earshot and Model Cards", self)
        self.about_action.triggered.connect(self.show_about)
        help_menu.addAction(self.about_action)

    def _build_status_bar(self) -> None:
        bar = StatusBar()  # a long message ends in "…", said whole in its tooltip
        self.setStatusBar(bar)
        self.device_label = QLabel("Device: …")
        self.models_label = QLabel("Models: …")
        self.audio_label = QLabel("Audio: …")
        for label in (self.device_label, self.models_label, self.audio_label):
            label.setContentsMargins(8, 0, 8, 0)
            bar.addPermanentWidget(label)

    def tab_status(self, tab: QWidget, name: str, message: str) -> None:
        """A tab's status line, passed on to the window's status bar only while another tab is in front (the
        tab in front shows it itself), with the tab's name, so a model loading in the Units tab does not read as
        the Search tab's news."""
        if message and self.tabs.currentWidget() is not tab:
            self.flash(f"{name}: {message}")

    @Slot(str)
    def flash(self, message: str, timeout_ms: int = 8000) -> None:
        """A passing message in the status bar (cut to the room left of the labels: `StatusBar`)."""
        self.statusBar().showMessage(message, timeout_ms)

    # ------------------------------------------------------------------------------------------- actions

    @Slot()
    def choose_library(self) -> None:
        folder = self.ask_folder("Open Library Folder")
        if folder:
            self.open_library(Path(folder))

    def ask_folder(self, title: str) -> str:  # a seam for tests
        return QFileDialog.getExistingDirectory(self, title, str(Path.home()))

    def show_dialog(self, dialog: QDialog) -> bool:  # a seam for tests
        return dialog.exec() == QDialog.DialogCode.Accepted

    def open_library(self, path: Path, remember: bool = True) -> bool:
        """The folder alone (it joins the library locations and the Recent list)."""
        if not path.is_dir():
            self.statusBar().showMessage(f"Not a folder: {path}", 8000)
            return False
        self.library = path
        if remember and path != demo_library():
            self.settings.setValue("library", str(path))
            loc = self.locations.add(path)
            self.locations.opened(path)
            self.locations.choose([loc.name])
            self._save_locations()
        self.search_tab.set_library(path)
        label = "demo library" if path == demo_library() else str(path)
        self.setWindowTitle(label)  # Qt appends " — Earshot", the application's display name
        self.statusBar().showMessage(f"Library: {label}", 5000)
        return True

    def open_locations(self, locations: list[Location]) -> None:
        """Several library locations searched together (one: open_library)."""
        if len(locations) == 1:
            self.open_library(locations[0].path)
            return
        self.library = locations[0].path
        self.search_tab.set_locations(locations)
        label = " + ".join(loc.name for loc in locations)
        self.setWindowTitle(label)
        self.statusBar().showMessage(f"Libraries searched together: {', '.join(loc.name for loc in locations)}",
                                     5000)

    @Slot()
    def add_location(self) -> None:
        folder = self.ask_folder("Add a library folder to search together")
        if not folder:
            return
        try:
            loc = self.locations.add(folder)
        except ValueError as e:
            self.statusBar().showMessage(str(e), 8000)
            return
        self.locations.opened(loc.path)
        chosen = [x.name for x in self.locations.chosen()] or [x.name for x in self.search_tab.locations
                                                                if self.locations.find(x.path) is not None]
        self.locations.choose([*chosen, loc.name])
        self._save_locations()
        self.open_locations(self.locations.chosen())

    @Slot()
    def edit_locations(self) -> None:
        dialog = LocationsDialog(self.locations, self)
        if self.show_dialog(dialog):
            self._save_locations()
            self.open_locations(self.locations.chosen())
        else:
            self.locations = Locations.load()  # what the dialog changed is dropped with Cancel

    def _fill_recent(self) -> None:
        self.recent_menu.clear()
        for path in self.locations.recent:
            action = self.recent_menu.addAction(display_name(path))
            action.setEnabled(path.is_dir())
            action.triggered.connect(lambda _=False, p=path: self.open_library(p))
        if not self.locations.recent:
            self.recent_menu.addAction("No library opened yet").setEnabled(False)

    def _save_locations(self) -> None:
        try:
            self.locations.save()
        except OSError as e:
            self.statusBar().showMessage(f"Could not keep the list of library locations: {e}", 8000)

    @Slot()
    def refresh_environment(self) -> None:
        """Look for devices, audio and models in a worker: importing torch must not freeze the window."""
        if self._probe is not None and self._probe.is_running():
            self._probe_again = True  # e.g. a model registered mid-probe: look once more when this one ends
            return
        self._probe_again = False
        threads = int(self.settings.value("threads", default_threads()))
        runner = JobRunner(lambda: probe_environment(self.registry, self.registry.device_preference, threads),
                           name="environment", parent=self)
        runner.progress.connect(lambda p: self.statusBar().showMessage(str(p.get("message", "")), 3000))
        runner.result.connect(self.set_environment)
        runner.error.connect(lambda msg: self.statusBar().showMessage(f"Could not inspect this machine: {msg}"))
        runner.finished.connect(lambda: self._probe_again and QTimer.singleShot(0, self.refresh_environment))
        self._probe = runner
        runner.start()

    @Slot(object)
    def set_environment(self, env: Environment) -> None:
        self.environment = env
        text = f"Device: {env.device}"
        self.device_label.setText(text + (" (preference unavailable)" if env.device_error else ""))
        self.device_label.setToolTip(env.device_error or f"available: {', '.join(env.devices)}")
        self.update_models_label()
        self.set_audio_status(env.audio)
        for tab in self.model_tabs():
            tab.set_models(env.models)
        self.train_tab.set_devices(env.devices)
        self.statusBar().showMessage("Ready", 3000)

    @Slot()
    def refresh_audio(self) -> None:
        """Look at the audio devices again in a worker (PortAudio re-lists them: the sound server may be gone)."""
        if self._audio_probe is not None and self._audio_probe.is_running():
            self._audio_again = True  # several failures at once: one more look when this one ends
            return
        self._audio_again = False
        runner = JobRunner(audio_status_job, name="audio-devices", parent=self)
        runner.result.connect(self.set_audio_status)
        runner.finished.connect(lambda: self._audio_again and QTimer.singleShot(0, self.refresh_audio))
        self._audio_probe = runner
        runner.start()

    @Slot(object)
    def set_audio_status(self, status: DeviceStatus) -> None:
        """The status bar and the tabs follow what the audio devices are now."""
        if self.environment is not None:
            self.environment.audio = status
            self.environment.audio_input, self.environment.audio_output = status.input_ok, status.output_ok
            self.environment.audio_message = status.message
        if status.input_ok or status.output_ok:
            self.audio_label.setText("Audio: " + ("in+out" if status.input_ok and status.output_ok
                                                  else "in" if status.input_ok else "out only"))
        else:
            self.audio_label.setText("Audio: no device")
        self.audio_label.setToolTip(status.message + (f"\n{status.notice}" if status.notice else ""))
        for tab in self.model_tabs():
            tab.set_audio_status(status)
        if status.notice:
            self.flash(status.notice)

    def model_tabs(self) -> list[ModelTab]:
        return [self.search_tab, self.units_tab, self.words_tab]

    @Slot()
    def update_models_label(self) -> None:
        """How many models are installed and loaded; their names in the tooltip (listed in the label, they took
        half of a small window's status bar, and the tabs' messages were cut to "Unit")."""
        env = self.environment
        models, problems = (env.models, env.model_problems) if env else ([], [])
        loaded = self.registry.loaded()
        said = f", {len(problems)} problem{'s' * (len(problems) > 1)}" if problems else ""  # details: the tooltip
        self.models_label.setText(f"Models: {len(models)} installed, {len(loaded) or 'none'} loaded{said}")
        self.models_label.setToolTip("\n".join([f"loaded: {', '.join(loaded) or 'none'}",
                                                 *(f"{e.name} ({e.kind}, {e.source})" for e in models),
                                                 *(f"problem: {p.message}" for p in problems)]))

    @Slot()
    def show_preferences(self) -> None:
        available = self.environment.devices if self.environment else ["cpu"]
        dialog = PreferencesDialog(
            device=self.registry.device_preference,
            threads=int(self.settings.value("threads", default_threads())),
            available=available,
            max_threads=os.cpu_count() or 1,
            parent=self,
            audio=self.environment.audio if self.environment else None,
            audio_input=devices.CHOSEN.input,
            audio_output=devices.CHOSEN.output,
            every_window=self.search_tab.every_window,
        )
        if dialog.exec():
            self.apply_preferences(*dialog.values(), *dialog.audio_values(), every_window=dialog.index_values())

    def apply_preferences(self, device: str, threads: int, audio_input: str | None = None,
                          audio_output: str | None = None, every_window: bool | None = None) -> None:
        """Remember and apply: models move to `device`; the next sound played or recorded uses the audio devices
        (None: unchanged; '' the system default); the next indexing embeds every window of long files or not."""
        self.settings.setValue("device", device)
        self.settings.setValue("threads", threads)
        if every_window is not None:
            self.settings.setValue(EVERY_WINDOW_KEY, every_window)
            self.search_tab.every_window = every_window
        self.registry.set_device(device)
        audio_changed = (audio_input, audio_output) != (None, None)
        if audio_changed:
            chosen_in = devices.CHOSEN.input if audio_input is None else audio_input
            chosen_out = devices.CHOSEN.output if audio_output is None else audio_output
            self.settings.setValue(AUDIO_INPUT_KEY, chosen_in)
            self.settings.setValue(AUDIO_OUTPUT_KEY, chosen_out)
            devices.choose_devices(chosen_in, chosen_out)
        self.refresh_environment()
        if audio_changed:
            self.refresh_audio()

    @Slot()
    def show_about(self) -> None:
        AboutDialog(self.environment.models if self.environment else [], parent=self).exec()

    # -------------------------------------------------------------------------------------- drag and drop

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 (Qt API)
        if _dropped_folder(event) is not None:
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 (Qt API)
        folder = _dropped_folder(event)
        if folder is not None and self.open_library(folder):
            event.acceptProposedAction()

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 (Qt API)
        devices.remove_problem_listener(self._audio_listener)
        self.settings.setValue("geometry", self.saveGeometry())
        self.settings.setValue("tab", self.tabs.currentIndex())
        for tab in self.model_tabs():
            tab.shutdown()
        self.train_tab.shutdown()  # training processes run on; the next session lists them
        cancel_all()
        super().closeEvent(event)


def _dropped_folder(event: QDragEnterEvent | QDropEvent) -> Path | None:
    mime = event.mimeData()
    if not mime.hasUrls():
        return None
    for url in mime.urls():
        if url.isLocalFile() and Path(url.toLocalFile()).is_dir():
            return Path(url.toLocalFile())
    return None


def install_excepthook(window: QWidget | None = None) -> None:
    """Unexpected errors in slots are logged and shown as a message; the app keeps running."""

    def hook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        log.error("unexpected error:\n%s", "".join(traceback.format_exception(exc_type, exc, tb)))
        if isinstance(window, QMainWindow):
            window.statusBar().showMessage(f"Unexpected error: {exc}", 15000)

    sys.excepthook = hook


def create_application(argv: list[str] | None = None) -> QApplication:
    app = QApplication.instance() or QApplication(argv if argv is not None else sys.argv[:1])
    app.setOrganizationName(ORGANIZATION)
    app.setApplicationName(APPLICATION)
    app.setApplicationDisplayName("Earshot")
    return app  # type: ignore[return-value]


def freeze_long_lived_objects(window: MainWindow) -> None:
    """What is alive once the window is built, and again once a tab's model has loaded, lives as long as the
    process: out of the garbage collector's full passes, which otherwise froze the window 0.4-1.2 s at a time
    (core/memory.py)."""
    memory.freeze_long_lived()
    for tab in window.model_tabs():
        tab.models_loaded.connect(memory.freeze_long_lived)


def run_gui(library: Path | None = None) -> int:
    if sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") or os.environ.get("QT_QPA_PLATFORM")
    ):
        print("earshot: no display found. Run it in a desktop session, or under `xvfb-run earshot`.",
              file=sys.stderr)
        return 1
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    app = create_application()
    window = MainWindow(library=library)
    freeze_long_lived_objects(window)
    install_excepthook(window)
    window.show()
    window.raise_()
    window.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    code = app.exec()
    exit_when_jobs_end(code)
    return code


def exit_when_jobs_end(code: int, timeout_ms: int = 15_000) -> None:
    """Let background jobs finish before Python tears down: a QThread destroyed while it runs aborts the process.

    Jobs stop at their next yield once cancelled, but a single long step (importing torch, loading a model)
    cannot be interrupted. Wait for those a while; if one is still running, leave without destructors —
    everything on disk is written atomically or in committed transactions, so nothing is lost.
    """
    cancel_all(timeout_ms)
    if active_runners():
        log.warning("still busy at exit: %s; leaving without waiting", ", ".join(r.name for r in active_runners()))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
