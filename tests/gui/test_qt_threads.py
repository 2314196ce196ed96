"""Regression guard: PySide6 6.12.0 aborts the interpreter after many signals emitted from a thread.

Run in a subprocess so a crash is a test failure, not a dead test run.
"""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import threading
from PySide6.QtCore import QCoreApplication, QObject, QTimer, Signal
app = QCoreApplication([])
class Source(QObject):
    sig = Signal(dict)
source, got = Source(), []
source.sig.connect(lambda p: got.append(p["step"]))
worker = threading.Thread(target=lambda: [source.sig.emit({"step": i, "loss": 0.5}) for i in range(3000)])
worker.start(); worker.join()
QTimer.singleShot(300, app.quit)
app.exec()
print(len(got))
"""


def test_many_cross_thread_signals_do_not_crash_qt() -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120,
                          env={"QT_QPA_PLATFORM": "offscreen", "PATH": ""})
    assert proc.returncode == 0, f"Qt crashed (rc {proc.returncode}): {proc.stderr[-500:]}"
    assert proc.stdout.strip() == "3000"
