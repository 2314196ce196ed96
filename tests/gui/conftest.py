"""GUI tests: QSettings go to a temporary folder so tests never touch the user's preferences."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def isolated_settings(tmp_path: Path, qapp) -> Iterator[None]:
    from PySide6.QtCore import QSettings

    qapp.setOrganizationName("EarshotTests")
    qapp.setApplicationName("EarshotTests")
    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(tmp_path / "settings"))
    yield
