"""Walking a library folder, hashing files, and the file-system seams the indexer uses.

Change detection: a file is read again when its size or mtime differ from its catalog row (or always, with
`rehash`); its content hash (SHA-256 of all the bytes) then tells an edit from a touch, a move or a copy.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field

from app.services.library.records import PathLike
from core.audio import SUPPORTED_EXTENSIONS
from core.display import display_name

CATALOG_DIR = ".earshot"


@dataclass
class ScannedFile:
    rel: str  # relative to the library root, '/'-separated, os.fsdecode form
    path: str  # absolute
    size: int
    mtime_ns: int

    @property
    def key(self) -> bytes:
        return os.fsencode(self.rel)


@dataclass
class ScanResult:
    files: list[ScannedFile]
    errors: list[str]  # folders that could not be listed, entries that could not be looked at
    unreadable: list[str] = field(default_factory=list)  # relative folders that could not be listed ('' = root)
    mounts: list[str] = field(default_factory=list)  # relative folders on another device than their parent's
    empty: list[str] = field(default_factory=list)  # relative folders with nothing in them at all ('' = root)
    dangling: list[str] = field(default_factory=list)  # relative symlinks whose target is gone
    devices: dict[str, int] = field(default_factory=dict)  # the root ('') and each mount point -> its st_dev


WRITE_COPY = ".earshot-tmp."  # tag_writer.py's temporary copies: .NAME.XXXXXXXX.earshot-tmp.EXT


def scan_folder(root: PathLike, include_hidden: bool = False) -> ScanResult:
    """Every audio file under `root` (by extension), sorted by relative path.

    Symlinks are followed, but every folder and file is visited once (by device + inode), so symlink loops
    end and a folder linked twice is not listed twice. A folder link to the root's parent or any folder above it
    (`ln -s .. up`, a link to /) is not followed but reported in `errors`: it would take in everything beside the
    library, up to the whole file system. `.earshot/` is always skipped, other dot-names unless
    include_hidden. Broken links and link loops are skipped (broken links listed in `dangling`); folders that
    cannot be listed are reported in `errors` and `unreadable` (their catalog rows are kept), and so are entries
    that cannot be looked at, such as paths longer than the system allows (PATH_MAX). Mount points (a folder on
    another device than its parent) and folders with nothing in them are listed, so that the indexer can tell an
    unmounted share from deleted files.
    """
    root_s = os.fspath(os.path.abspath(root))
    files: list[ScannedFile] = []
    out = ScanResult(files, [])
    st = os.stat(root_s)
    out.devices[""] = st.st_dev
    root_real = os.path.realpath(root_s)
    seen_dirs = {(st.st_dev, st.st_ino)}
    seen_files: set[tuple[int, int]] = set()
    stack = [(root_s, "", st.st_dev)]
    while stack:
        folder, rel, device = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: os.fsencode(e.name))
        except OSError as e:
            out.errors.append(f"{display_name(folder)}: cannot list folder ({e.strerror or e})")
            out.unreadable.append(rel)
            continue
        if not entries:
            out.empty.append(rel)
        subdirs = []
        for entry in entries:
            name = entry.name
            if name == CATALOG_DIR or (name.startswith(".") and not include_hidden) or WRITE_COPY in name:
                continue  # a tag writer's copy in flight (tag_writer.py) is never a sound of the library
            entry_rel = f"{rel}/{name}" if rel else name
            try:
                st = entry.stat()  # follows symlinks; a broken link raises
                is_dir = entry.is_dir()
            except OSError as e:
                if e.errno == errno.ENOENT and entry.is_symlink():
                    out.dangling.append(entry_rel)
                elif e.errno not in (errno.ENOENT, errno.ELOOP):  # not a broken link or a link loop: say so
                    out.errors.append(_entry_error(entry.path, e))
                continue
            ident = (st.st_dev, st.st_ino)
            if is_dir:
                target = os.path.realpath(entry.path) if ident not in seen_dirs and entry.is_symlink() else None
                if target is not None and _holds(target, root_real):
                    out.errors.append(f"{display_name(entry.path)}: links to {display_name(target)}, a folder that "
                                      "holds the library; not followed")
                    continue
                if ident not in seen_dirs:
                    seen_dirs.add(ident)
                    subdirs.append((entry.path, entry_rel, st.st_dev))
                    if st.st_dev != device:
                        out.mounts.append(entry_rel)
                        out.devices[entry_rel] = st.st_dev
            elif entry.is_file() and os.path.splitext(name)[1].lower() in SUPPORTED_EXTENSIONS:
                if st.st_ino and ident in seen_files:
                    continue
                seen_files.add(ident)
                files.append(ScannedFile(entry_rel, entry.path, st.st_size, st.st_mtime_ns))
        stack.extend(reversed(subdirs))
    files.sort(key=lambda f: f.key)
    return out


def _holds(folder: str, path: str) -> bool:
    """Is `path` inside `folder` (both real, absolute paths)?"""
    return os.path.commonpath([folder, path]) == folder


def _entry_error(path: str, e: OSError) -> str:
    if e.errno == errno.ENAMETOOLONG:
        limit = os.pathconf("/", "PC_PATH_MAX") if hasattr(os, "pathconf") else 4096
        shown = display_name(path)
        shown = shown if len(shown) <= 160 else f"{shown[:60]}…{shown[-90:]}"
        return f"{shown}: path is {len(os.fsencode(path))} bytes, longer than the system allows ({limit}); skipped"
    return f"{display_name(path)}: cannot look at it ({e.strerror or e}); skipped"


def away_folder(root: str, rel: str, devices: dict[str, int]) -> tuple[str, str] | None:
    """Why library file `rel` cannot be read when the fault is its folder's, not its own: (the relative folder
    that went away, why), or None when its folder can be listed (the file is gone, or the file itself is bad).

    A folder is away when it cannot be listed (made unreadable, renamed or deleted, a share that dropped) or when
    it is the root or a mount point of the scan (`devices`) on another device now (unmounted: the mount point is
    still there, empty). The highest such folder is named, so a report says what went away, not each subfolder.
    """
    parts = rel.split("/")[:-1]
    for depth in range(len(parts) + 1):
        folder = "/".join(parts[:depth])
        path = os.path.join(root, folder)
        try:
            with os.scandir(path) as it:
                next(it, None)
            if folder in devices and os.stat(path).st_dev != devices[folder]:
                return folder, "was unmounted during the run"
        except FileNotFoundError:
            return folder, "disappeared during the run"
        except OSError as e:
            return folder, f"became unreadable during the run ({(e.strerror or str(e)).lower()})"
    try:
        os.lstat(os.path.join(root, rel))  # a folder that can be listed but not looked into (no x bit)
    except FileNotFoundError:
        return None
    except OSError as e:
        return "/".join(parts), f"became unreadable during the run ({(e.strerror or str(e)).lower()})"
    return None


def stat_file(path: PathLike) -> os.stat_result:
    return os.stat(path)  # a seam for tests that simulate files changing under us


def os_message(path: PathLike, e: OSError) -> str:
    """A one-line reason a file could not be read."""
    if isinstance(e, PermissionError):
        return f"{display_name(path)}: permission denied"
    return f"{display_name(path)}: cannot read file ({e.strerror or e})"
