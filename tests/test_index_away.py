"""Issue 42 item 1: a folder that becomes unreadable, disappears or is unmounted DURING an index run (after the
scan, while the audio is read) keeps its catalogued files: unavailable (hidden, tags, favourites and the
user-tags.json mirror intact), as at scan time; only a file whose folder can be listed and lacks it is removed.

The sweep: `chmod 000` on a folder of 150 tagged files once the run read their audio said "150 removed" and took
their tags and favourites along; `umount -l` of a sub-mount after 70 files were read lost 33 tags for good.
chmod does not stop root, so a root run repeats the chmod case in a child process without the capabilities that
let root read anything (setpriv); the same scenario runs in this process for an ordinary user.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUB = [("sub", 300), ("sub", 500), ("sub", 700), ("sub", 900), ("sub", 1100), ("sub/deep", 1300)]
NEW = [("sub", 1500), ("sub", 1700)]  # named in pass 1 of the run the folder goes away in
LOCAL = [("local", 2000), ("local", 2500), ("local", 3000)]
VICTIM = "local/l_2000.wav"  # deleted mid-run from a folder that can still be listed: removed
FLIP_AT = 3  # the folder goes away when the run starts reading its third file (two are read by then)


def _rel(folder: str, freq: int) -> str:
    return f"{folder}/{folder.rpartition('/')[2][0]}_{freq}.wav"


def build(root: Path) -> None:
    """An indexed library: 6 tagged files (2 favourites) under sub/, 3 under local/; then 2 new files in sub/ and
    every file touched, so that the next run reads them all."""
    from app.services.jobs import drain
    from app.services.library.indexer import index_library
    from app.services.library.library import Library
    from tests.test_library import ToneEmbedder, tone, write

    for folder, freq in SUB + LOCAL:
        write(root / _rel(folder, freq), tone(freq))
    drain(index_library(root, ToneEmbedder()))
    with Library.open(root) as lib:
        ids = [lib.files.id_of(_rel(*f)) for f in SUB]
        lib.user_tags.add(ids, ["keeper"])
        lib.user_tags.set_favourite(ids[:2], True)
    for folder, freq in NEW:
        write(root / _rel(folder, freq), tone(freq))
    for folder, freq in SUB + LOCAL:
        st = os.stat(root / _rel(folder, freq))
        os.utime(root / _rel(folder, freq), ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def index_flipping(root: Path, flip):  # noqa: ANN001, ANN201 - a callable; an IndexReport
    """Index `root` with one reader thread, calling `flip` when the run starts reading its FLIP_AT-th file under
    sub/; VICTIM is deleted as its read starts."""
    from app.services.jobs import drain
    from app.services.library import scan
    from app.services.library.indexer import index_library
    from tests.test_library import ToneEmbedder

    real_stat, started = scan.stat_file, []

    def stat_file(path):  # noqa: ANN001, ANN202 - the readers' seam
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        if rel == VICTIM and os.path.exists(path):
            os.unlink(path)
        if rel.startswith("sub/") and rel not in started:
            started.append(rel)
            if len(started) == FLIP_AT:
                flip()
        return real_stat(path)

    scan.stat_file = stat_file
    try:
        return drain(index_library(root, ToneEmbedder(), workers=1, queue_size=1, batch_size=2))
    finally:
        scan.stat_file = real_stat


def assert_kept(root: Path, report) -> None:  # noqa: ANN001 - an IndexReport
    """Every catalogued file under sub/ kept, hidden, with its tags and favourite mark, also in the mirror;
    the deleted file of a readable folder removed; the report says which."""
    from app.services.library.library import Library

    assert report.failed == [] and report.tag_problems == [], (report.failed, report.tag_problems)
    assert report.removed == 1 and report.unavailable == len(SUB) + len(NEW), report
    said = [e for e in report.scan_errors if "sub" in e and "during the run" in e]
    assert len(said) == 1 and f"{len(SUB) + len(NEW)} catalogued files kept" in said[0], report.scan_errors
    with Library.open(root) as lib:
        assert lib.files.id_of(VICTIM) is None
        ids = [lib.files.id_of(_rel(*f)) for f in SUB]
        assert None not in ids and all(lib.files.id_of(_rel(*f)) is not None for f in NEW)
        assert lib.stats().files == len(SUB) + len(NEW) + len(LOCAL) - 1
        assert lib.stats().unavailable == len(SUB) + len(NEW)
        assert all(lib.user_tags.of(i) == ["keeper"] for i in ids) and lib.user_tags.favourites() == set(ids[:2])
    mirror = json.loads((root / ".earshot" / "user-tags.json").read_text(encoding="utf-8"))["files"]
    assert sorted(f["path"] for f in mirror if f["tags"] == ["keeper"]) == sorted(_rel(*f) for f in SUB)
    assert sum(f["favourite"] for f in mirror) == 2


def assert_back(root: Path) -> None:
    """Once the folder is back, its files are found again: nothing removed or failed, the tags still there."""
    from app.services.jobs import drain
    from app.services.library.indexer import index_library
    from app.services.library.library import Library
    from tests.test_library import ToneEmbedder

    report = drain(index_library(root, ToneEmbedder()))
    assert report.removed == 0 and report.unavailable == 0 and report.failed == [], report
    assert {_rel(*f) for f in NEW} <= set(report.embedded)  # read now, never before
    with Library.open(root) as lib:
        assert lib.stats().unavailable == 0
        assert all(lib.user_tags.of(lib.files.id_of(_rel(*f))) == ["keeper"] for f in SUB)
        assert len(lib.user_tags.favourites()) == 2


def unreadable_mid_run(tmp: Path) -> None:
    """chmod 000 on sub/ mid-run (needs a process that chmod stops: not one with root's capabilities)."""
    root = tmp / "lib"
    build(root)
    sub = root / "sub"
    try:
        report = index_flipping(root, lambda: sub.chmod(0))
        assert_kept(root, report)
        from tests.test_reliability_library import _index

        again = _index(root)  # still unreadable at the next scan: the scan-time case keeps them too
        assert again.removed == 0 and again.unavailable == len(SUB) + len(NEW), again
    finally:
        sub.chmod(0o755)
    assert_back(root)


def test_a_folder_made_unreadable_mid_run_keeps_its_files_tags_and_favourites(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        unreadable_mid_run(tmp_path)
        return
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("chmod does not stop root and setpriv (util-linux), which drops root's capabilities, is missing")
    code = ("from pathlib import Path; from tests.test_index_away import unreadable_mid_run as run; "
            f"run(Path({str(tmp_path)!r}))")
    child = subprocess.run([setpriv, "--bounding-set=-dac_override,-dac_read_search", "--", sys.executable, "-c",
                            code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stdout + child.stderr


def test_a_folder_that_disappears_mid_run_keeps_its_files_until_the_next_run_looks(tmp_path: Path) -> None:
    """A folder renamed away (or deleted) while its audio is read: kept, hidden; the next scan decides (a folder
    gone at scan time is deleted, as before; one that is back is found again)."""
    root = tmp_path / "lib"
    build(root)
    report = index_flipping(root, lambda: (root / "sub").rename(tmp_path / "away"))
    assert_kept(root, report)
    (tmp_path / "away").rename(root / "sub")
    assert_back(root)


def test_a_share_unmounted_mid_run_keeps_its_files_tags_and_favourites(tmp_path: Path) -> None:
    """`umount -l` of a sub-mount while its files are read: the mount point is still there, empty, and can be
    listed, but it is no longer the share the scan saw."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; the folder that disappears covers the same code unprivileged")
    root, store = tmp_path / "lib", tmp_path / "store"
    build(root)
    shutil.move(root / "sub", store)
    sub = root / "sub"

    def mount() -> None:
        sub.mkdir(exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(sub)], check=True)
        shutil.copytree(store, sub, dirs_exist_ok=True)

    mount()
    try:
        report = index_flipping(root, lambda: subprocess.run(["umount", "-l", str(sub)], check=True))
        assert_kept(root, report)
        from tests.test_reliability_library import _index

        again = _index(root)  # an empty mount point at the next scan: kept too
        assert again.removed == 0 and again.unavailable == len(SUB) + len(NEW), again
        mount()
        assert_back(root)
    finally:
        if os.path.ismount(sub):
            subprocess.run(["umount", "-l", str(sub)], check=False)


def test_a_file_deleted_mid_run_from_a_readable_folder_is_removed(tmp_path: Path) -> None:
    """The other side: the folder can be listed and lacks the file, so it is gone (its row removed)."""
    root = tmp_path / "lib"
    build(root)
    report = index_flipping(root, lambda: None)
    assert report.removed == 1 and report.unavailable == 0 and report.failed == [], report
