"""core/files.atomic_path: a write lands whole or not at all, and its errors name the user's file."""

from __future__ import annotations

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
