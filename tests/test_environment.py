"""What the status bar and Preferences start from (app/services/environment.py)."""

from __future__ import annotations

import pytest

from app.services import environment


@pytest.mark.parametrize(("cores", "threads"), [(1, 1), (2, 2), (4, 3), (16, 15)])
def test_model_threads_default_to_every_core_on_a_small_machine(monkeypatch: pytest.MonkeyPatch, cores: int,
                                                                threads: int) -> None:
    """Issue 40: Preferences set 1 thread on a 2-core box, halving indexing and search."""
    monkeypatch.setattr(environment.os, "cpu_count", lambda: cores)
    assert environment.default_threads() == threads
