"""Grab each tab of the real window offscreen, for the README: `python -m app.ui.screenshots OUTDIR`."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def grab_tabs(out_dir: Path, size: tuple[int, int] = (1100, 700)) -> list[Path]:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import tempfile

    from PySide6.QtCore import QCoreApplication, QSettings

    from app.ui.main_window import MainWindow, create_application

    create_application()
    # a throw-away settings folder: screenshots show the defaults and leave the user's settings alone
    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, tempfile.mkdtemp(prefix="earshot-shots-"))
    window = MainWindow()
    window.resize(*size)
    window.show()
    deadline = time.monotonic() + 120
    while window.environment is None and time.monotonic() < deadline:
        QCoreApplication.processEvents()
        time.sleep(0.02)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(window.tabs.count()):
        window.tabs.setCurrentIndex(i)
        QCoreApplication.processEvents()
        path = out_dir / f"tab-{window.tabs.tabText(i).lower()}.png"
        window.grab().save(str(path))
        paths.append(path)
    window.close()
    return paths


if __name__ == "__main__":
    for p in grab_tabs(Path(sys.argv[1] if len(sys.argv) > 1 else "resources/screenshots")):
        print(p)
