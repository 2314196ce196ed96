"""Issue 42 item 5: a killed export left `..earshot-part-*.tmp` (the part, half written) in the user's folder for
good; the next export to that folder removes it, and leaves alone what a live export is writing or a user's file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

ROOT = Path(__file__).resolve().parents[1]
SR = 8000


@pytest.mark.slow
def test_the_part_of_a_killed_export_is_removed_by_the_next_export(tmp_path: Path) -> None:
    from app.services.search.excerpt import write_excerpt
    from core.files import in_flight

    source, out = tmp_path / "take.wav", tmp_path / "parts"
    out.mkdir()
    sf.write(source, (0.3 * np.sin(np.arange(4 * SR) * 0.05)).astype(np.float32), SR, subtype="PCM_16")
    code = ("import time; from pathlib import Path; import app.services.search.excerpt as e; "
            "e._check_written = lambda *a, **k: time.sleep(300); "
            f"e.write_excerpt(Path({str(source)!r}), 0.5, 3.0, Path({str(out)!r}))")
    child = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    left: list[Path] = []
    try:
        for _ in range(1200):  # until the part is written and being checked (the child's start takes seconds)
            left = [p for p in out.iterdir() if p.name.startswith("..earshot-part-") and p.stat().st_size > 0]
            if left or child.poll() is not None:
                break
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert len(left) == 1 and left[0].name.endswith(".tmp")
    live = out / "..earshot-part-0123456789ab.wav.01234567.tmp"  # another export's, being written
    mine = out / ".earshot-part-notes.txt"  # not a name an export makes
    for p in (live, mine):
        p.write_bytes(b"x")
    for p in (left[0], live, mine):  # seconds later (younger than core.files.LEFTOVER_AGE_S is never judged)
        os.utime(p, (time.time() - 60, time.time() - 60))
    with in_flight(live):
        part = write_excerpt(source, 1.0, 2.0, out)
    assert part.exists() and not left[0].exists() and live.exists() and mine.exists()
    assert sorted(p.name for p in out.iterdir()) == sorted([part.name, live.name, mine.name])
