"""core/files.atomic_path: a write lands whole or not at all, and its errors name the user's file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from core.files import atomic_path


def test_a_write_lands_whole_and_a_failed_one_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "out.wav"
    with atomic_path(target) as tmp:
        tmp.write_bytes(b"RIFF")
    assert target.read_bytes() == b"RIFF"
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("stopped")
    assert target.read_bytes() == b"RIFF" and sorted(p.name for p in tmp_path.iterdir()) == ["out.wav"]


def test_a_missing_folder_is_named_with_the_file_asked_for(tmp_path: Path) -> None:
    """Exporting into a folder that is gone said 'No such file or directory: .../.out.wav.1r0xii4o.tmp'."""
    target = tmp_path / "gone" / "out.wav"
    with pytest.raises(FileNotFoundError) as e, atomic_path(target):
        pass
    assert e.value.filename == str(target) and ".tmp" not in str(e.value)


def test_the_file_gets_the_permissions_a_plain_write_would_leave(tmp_path: Path) -> None:
    """mkstemp's private 0600 made every export (WAV, TextGrid, tags CSV) unreadable to the user's group and
    other programs; a plain open(path, "w") gives 0666 less the umask, and replacing a file keeps its mode."""
    old = os.umask(0o027)
    try:
        new = tmp_path / "new.wav"
        with atomic_path(new) as tmp:
            tmp.write_bytes(b"RIFF")
        assert stat.S_IMODE(new.stat().st_mode) == 0o640
        made = tmp_path / "made.safetensors"
        with atomic_path(made) as tmp:  # a writer that makes the file anew, private (as safetensors does)
            tmp.unlink()
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o600))
        assert stat.S_IMODE(made.stat().st_mode) == 0o640
    finally:
        os.umask(old)
    kept = tmp_path / "kept.csv"
    kept.write_text("old")
    kept.chmod(0o444)  # read-only: the new content is still written, then given that mode
    with atomic_path(kept) as tmp:
        tmp.write_text("new")
    assert kept.read_text() == "new" and stat.S_IMODE(kept.stat().st_mode) == 0o444
