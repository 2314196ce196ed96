"""The bundled demo library: named as a real library is, and every file's source and license on record."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import soundfile as sf

DEMO = Path(__file__).resolve().parents[1] / "resources" / "demo"
NAME = re.compile(r"[A-Z][a-z]+/[a-z0-9]+(-[a-z0-9]+)+\.wav")  # Category/words-joined-by-hyphens.wav


def demo_files() -> list[str]:
    return sorted(p.relative_to(DEMO).as_posix() for p in DEMO.rglob("*.wav"))


def captions() -> dict[str, dict[str, str]]:
    with open(DEMO / "captions.csv", newline="") as f:
        return {r["path"]: r for r in csv.DictReader(f)}


def test_demo_files_have_descriptive_folder_and_file_names() -> None:
    files = demo_files()
    assert len(files) == 36
    assert [f for f in files if not NAME.fullmatch(f)] == []  # no `<package>-<hash>.wav` names left
    assert len({f.split("/")[0] for f in files}) >= 8  # filed in categories, not one flat folder
    for f in files:
        info = sf.info(DEMO / f)
        assert (info.samplerate, info.channels, info.subtype) == (32000, 1, "PCM_16"), f


def test_every_demo_file_is_attributed_exactly() -> None:
    """captions.csv and ATTRIBUTION.md list exactly the files present, with the same package, file, license."""
    rows = captions()
    assert sorted(rows) == demo_files()
    text = (DEMO / "ATTRIBUTION.md").read_text()
    listed = re.findall(r"^\| `([^`]+\.wav)` \| (\S+) \| `([^`]+)` \| (\S+) \|$", text, flags=re.M)
    assert sorted(p for p, *_ in listed) == demo_files()
    for path, package, source, license_ in listed:
        r = rows[path]
        assert (package, source, license_) == (r["source_package"], r["source_file"], r["license"]), path
        assert r["split"] == "val" and r["caption"]
    counts = {p: int(n) for p, n in re.findall(r"^\| ([a-z0-9.-]+) \| \S+ \| (\d+) \|$", text, flags=re.M)}
    per_package: dict[str, int] = {}
    for r in rows.values():
        per_package[r["source_package"]] = per_package.get(r["source_package"], 0) + 1
    assert counts == per_package  # the summary table agrees with the file list
