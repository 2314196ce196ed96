"""Build the development search libraries of bench/data/search_libraries from their Debian packages.

Each library is the sound folder of one Debian package (see that folder's README.md): `library.json` names the
package, its version, the folder inside the package that is the library's root, and every file with its original
path relative to that root, size and sha256; `queries.csv` holds the queries and their relevant files, decided by
the rules in `RELEVANCE.md` before any system ran on the library.

    python -m bench.search_libraries OUT [--library NAME ...] [--cache DIR] [--mixed] [--seed 0]
    python -m bench.search_libraries --check        (validate the data files only: no network, no apt)

- The .deb is fetched with `apt-get download PACKAGE=VERSION` into the cache folder (`--cache`, else
  $EARSHOT_SEARCH_LIBRARIES_CACHE, else ~/.cache/earshot/search-libraries) and reused from there.
- OUT/NAME/ gets the root's sound files with their original relative paths, verified against library.json (the
  same set of files, the same sha256), plus `relevance.json` (the queries with their relevant paths).
- With `--mixed`, OUT/NAME-mixed/ is the same library with a seeded half of its files renamed the way recorders
  name them (`Recordings/REC_1A2B3C4D.ogg`); `mapping.json` maps original -> new path and its `relevance.json`
  follows the renamed files.

This module builds data only: it imports no Earshot code and runs no search, baseline or model.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

DATA_DIR = Path(__file__).resolve().parent / "data" / "search_libraries"
CACHE_ENV = "EARSHOT_SEARCH_LIBRARIES_CACHE"
DEFAULT_CACHE = Path("~/.cache/earshot/search-libraries")
# the files each held-out library is made of: part of the benchmark, frozen with its queries (not
# core.audio.SUPPORTED_EXTENSIONS, which may grow: a new format would change the libraries and their numbers)
LIBRARY_SUFFIXES = (".ogg", ".oga", ".wav", ".flac", ".mp3", ".au")
MIXED_FOLDER = "Recordings"
QUERY_KINDS = ("plain", "plural", "paraphrase", "intent", "compound", "typo", "spelling", "number", "prefix",
               "abbreviation", "category")
# evaluation-only packages (training/reserved.py plus the ones issue 23 reserves); kept here so that this
# builder imports nothing from Earshot
RESERVED_PREFIXES = ("tuxpaint-stamps", "ktuberling", "klettres", "asterisk-core-sounds-en", "triplea", "kajongg")


@dataclass(frozen=True)
class LibraryFile:
    path: str  # relative to the library root, as in the package
    sha256: str
    bytes: int


@dataclass(frozen=True)
class Library:
    name: str
    package: str
    version: str
    licence: str
    root: str  # the folder inside the package (no leading slash)
    files: tuple[LibraryFile, ...]

    @property
    def paths(self) -> list[str]:
        return [f.path for f in self.files]


@dataclass(frozen=True)
class Query:
    id: str
    query: str
    kind: str
    relevant: tuple[str, ...]
    basis: str


# ---------------------------------------------------------------------------------------------- data files


# the libraries that constants may be fitted on (bench/library_fusion.py, no_match.py, library_adapt.py,
# library_prf.py); every other library is held out from fitting and only scored (bench/library_quality.py)
TUNING = ("flare", "micropolis", "tuxpaint-magic")


def tuning_library_names(data_dir: Path = DATA_DIR) -> list[str]:
    """The libraries constants may be chosen on (leave-one-library-out among them)."""
    return [n for n in library_names(data_dir) if n in TUNING]


def library_names(data_dir: Path = DATA_DIR) -> list[str]:
    """The libraries in `data_dir`: every sub-folder with a library.json, sorted."""
    return sorted(p.parent.name for p in data_dir.glob("*/library.json"))


def load_library(name: str, data_dir: Path = DATA_DIR) -> Library:
    doc = json.loads((data_dir / name / "library.json").read_text())
    files = tuple(LibraryFile(f["path"], f["sha256"], int(f["bytes"])) for f in doc["files"])
    return Library(doc["name"], doc["package"], doc["version"], doc["licence"], doc["root"], files)


def load_queries(name: str, data_dir: Path = DATA_DIR) -> list[Query]:
    with open(data_dir / name / "queries.csv", newline="") as fh:
        return [Query(r["id"], r["query"], r["kind"], tuple(p for p in r["relevant"].split(";") if p), r["basis"])
                for r in csv.DictReader(fh)]


def is_reserved(package: str) -> bool:
    return package.lower().startswith(RESERVED_PREFIXES)


def safe_relpath(path: str) -> bool:
    """True for a plain relative POSIX path that stays inside its root."""
    p = PurePosixPath(path)
    return bool(path) and not p.is_absolute() and ".." not in p.parts and "\\" not in path


def library_problems(lib: Library, queries: Sequence[Query], min_queries: int = 30) -> list[str]:
    """Everything wrong with a library's data files (empty when it is well-formed)."""
    problems = []
    paths = lib.paths
    if is_reserved(lib.package):
        problems.append(f"{lib.name}: package {lib.package} is reserved for evaluation")
    if not paths:
        problems.append(f"{lib.name}: no files")
    if len(set(paths)) != len(paths):
        problems.append(f"{lib.name}: duplicate file paths")
    for f in lib.files:
        if not safe_relpath(f.path) or not f.path.lower().endswith(LIBRARY_SUFFIXES):
            problems.append(f"{lib.name}: bad file path {f.path!r}")
        if len(f.sha256) != 64 or any(c not in "0123456789abcdef" for c in f.sha256):
            problems.append(f"{lib.name}: bad sha256 for {f.path}")
    if not safe_relpath(lib.root):
        problems.append(f"{lib.name}: bad root {lib.root!r}")
    if len(queries) < min_queries:
        problems.append(f"{lib.name}: {len(queries)} queries, fewer than {min_queries}")
    known = set(paths)
    for field in ("id", "query"):
        values = [getattr(q, field) for q in queries]
        if len(set(values)) != len(values):
            problems.append(f"{lib.name}: duplicate query {field}s")
    for q in queries:
        if not q.relevant:
            problems.append(f"{lib.name}: query {q.id} ({q.query!r}) has no relevant file")
        if len(set(q.relevant)) != len(q.relevant):
            problems.append(f"{lib.name}: query {q.id} lists a relevant file twice")
        problems += [f"{lib.name}: query {q.id} names {p!r}, not in library.json" for p in q.relevant if p not in known]
        if q.kind not in QUERY_KINDS:
            problems.append(f"{lib.name}: query {q.id} has unknown kind {q.kind!r}")
        if not q.query.strip() or not q.basis.strip():
            problems.append(f"{lib.name}: query {q.id} lacks its text or its basis")
    return problems


# ---------------------------------------------------------------------------------------------- the .deb


def cache_dir(arg: str | None = None) -> Path:
    return Path(arg or os.environ.get(CACHE_ENV) or DEFAULT_CACHE).expanduser()


def deb_glob(package: str, version: str) -> str:
    """apt's file name for a version: the epoch's ':' is written '%3a'."""
    return f"{package}_{version.replace(':', '%3a')}_*.deb"


def find_deb(lib: Library, cache: Path) -> Path | None:
    found = sorted(cache.glob(deb_glob(lib.package, lib.version)))
    return found[0] if found else None


def fetch_deb(lib: Library, cache: Path) -> Path:
    """The library's .deb from the cache, downloaded there first with `apt-get download` when missing."""
    if is_reserved(lib.package):
        raise ValueError(f"package {lib.package} is reserved for evaluation")
    cache.mkdir(parents=True, exist_ok=True)
    deb = find_deb(lib, cache)
    if deb is None:
        r = subprocess.run(["apt-get", "download", "-q", f"{lib.package}={lib.version}"], cwd=cache,
                           capture_output=True, text=True)
        deb = find_deb(lib, cache)
        if deb is None:
            raise RuntimeError(f"apt-get download {lib.package}={lib.version} failed (run `apt-get update`; the "
                               f"version may have left the archive): {(r.stderr or r.stdout).strip()[-300:]}")
    return deb


def extract_root(deb: Path, root: str, dest: Path) -> list[str]:
    """Copy the sound files under `root` in the package into `dest`, keeping their paths relative to `root`.

    Streams `dpkg-deb --fsys-tarfile` so that a large data package is never unpacked whole."""
    prefix = root.strip("/") + "/"
    written = []
    with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        with tarfile.open(fileobj=proc.stdout, mode="r|*") as tar:
            for member in tar:
                name = member.name.removeprefix("./")
                rel = name[len(prefix):] if name.startswith(prefix) else ""
                if not member.isfile() or not rel.lower().endswith(LIBRARY_SUFFIXES) or not safe_relpath(rel):
                    continue
                target = dest / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                with tar.extractfile(member) as src, open(target, "wb") as out:  # type: ignore[union-attr]
                    shutil.copyfileobj(src, out)
                written.append(rel)
    if proc.returncode != 0:
        raise RuntimeError(f"dpkg-deb --fsys-tarfile {deb} failed ({proc.returncode})")
    return sorted(written)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def audio_files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                  if p.is_file() and p.name.lower().endswith(LIBRARY_SUFFIXES))


def verify(lib: Library, folder: Path, paths: dict[str, str] | None = None) -> None:
    """Raise ValueError unless `folder` holds exactly the library's files with their sha256.

    `paths` maps a library path to where it lies in `folder` (the mixed copy); the identity by default."""
    where = {f.path: (paths or {}).get(f.path, f.path) for f in lib.files}
    expected = {f.path: f.sha256 for f in lib.files}
    present = set(audio_files(folder))
    missing = sorted(p for p in where.values() if p not in present)
    extra = sorted(present - set(where.values()))
    changed = sorted(orig for orig, p in where.items() if p in present and sha256_of(folder / p) != expected[orig])
    if missing or extra or changed:
        raise ValueError(f"{lib.name}: {folder} does not match library.json: missing {missing[:5]} "
                         f"({len(missing)}), not listed {extra[:5]} ({len(extra)}), changed {changed[:5]} "
                         f"({len(changed)})")


def materialise(lib: Library, out: Path, cache: Path) -> Path:
    """OUT/NAME with the library's files at their original relative paths, verified; returns that folder."""
    folder = out / lib.name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    extract_root(fetch_deb(lib, cache), lib.root, folder)
    verify(lib, folder)
    return folder


# ---------------------------------------------------------------------------------------------- mixed copy


def recorder_name(lib: Library, path: str, seed: int, taken: set[str]) -> str:
    """`Recordings/REC_<8 hex>.<ext>` from a hash of (seed, library, path); the next 8 hex digits on a clash."""
    digest = hashlib.sha256(f"{seed}:{lib.name}:{path}".encode()).hexdigest().upper()
    ext = PurePosixPath(path).suffix.lower()
    for start in range(0, len(digest) - 7, 8):
        name = f"{MIXED_FOLDER}/REC_{digest[start:start + 8]}{ext}"
        if name not in taken:
            return name
    raise RuntimeError(f"no free recorder name for {path}")  # 8 clashes in a row: not for real libraries


def mixed_plan(lib: Library, seed: int = 0) -> dict[str, str]:
    """Original path -> recorder-style path for a seeded half (rounded down) of the library's files."""
    paths = sorted(lib.paths)
    chosen = sorted(random.Random(f"{seed}:{lib.name}").sample(paths, len(paths) // 2))
    taken = set(paths)  # a new name never collides with a kept original either
    plan = {}
    for path in chosen:
        plan[path] = recorder_name(lib, path, seed, taken)
        taken.add(plan[path])
    return plan


def mixed_relevance(queries: Iterable[Query], plan: dict[str, str]) -> list[Query]:
    """The queries with their relevant files under their names in the mixed copy."""
    return [Query(q.id, q.query, q.kind, tuple(plan.get(p, p) for p in q.relevant), q.basis) for q in queries]


def make_mixed(lib: Library, source: Path, out: Path, seed: int = 0) -> tuple[Path, dict[str, str]]:
    """OUT/NAME-mixed: a copy of the verified library in `source` with mixed_plan's half renamed; verified."""
    plan = mixed_plan(lib, seed)
    folder = out / f"{lib.name}-mixed"
    if folder.exists():
        shutil.rmtree(folder)
    for path in lib.paths:
        target = folder / plan.get(path, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / path, target)
    verify(lib, folder, plan)
    (folder / "mapping.json").write_text(json.dumps({"library": lib.name, "seed": seed, "renamed": plan},
                                                    indent=1) + "\n")
    return folder, plan


def write_relevance(lib: Library, queries: Sequence[Query], folder: Path, mixed: bool) -> None:
    doc = {"library": lib.name, "package": lib.package, "version": lib.version, "mixed": mixed,
           "files": len(lib.files),
           "queries": [{"id": q.id, "query": q.query, "kind": q.kind, "relevant": list(q.relevant)}
                       for q in queries]}
    (folder / "relevance.json").write_text(json.dumps(doc, indent=1) + "\n")


# ---------------------------------------------------------------------------------------------- CLI


def build(name: str, out: Path, cache: Path, mixed: bool, seed: int) -> dict:
    lib, queries = load_library(name), load_queries(name)
    problems = library_problems(lib, queries)
    if problems:
        raise ValueError("; ".join(problems))
    folder = materialise(lib, out, cache)
    write_relevance(lib, queries, folder, mixed=False)
    summary = {"library": name, "package": f"{lib.package} {lib.version}", "files": len(lib.files),
               "queries": len(queries), "folder": str(folder)}
    if mixed:
        mixed_folder, plan = make_mixed(lib, folder, out, seed)
        write_relevance(lib, mixed_relevance(queries, plan), mixed_folder, mixed=True)
        summary |= {"mixed_folder": str(mixed_folder), "renamed": len(plan)}
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.search_libraries", description=__doc__.split("\n\n")[0])
    p.add_argument("out", nargs="?", type=Path, help="output folder (one sub-folder per library)")
    p.add_argument("--library", action="append", help="build only this library (repeatable); default: all")
    p.add_argument("--cache", help=f"where the .debs are kept (default ${CACHE_ENV} or {DEFAULT_CACHE})")
    p.add_argument("--mixed", action="store_true", help="also write NAME-mixed with half the files renamed")
    p.add_argument("--seed", type=int, default=0, help="seed of the mixed copy's renaming (default 0)")
    p.add_argument("--check", action="store_true", help="only validate the data files (no network)")
    args = p.parse_args(argv)
    names = args.library or library_names()
    if args.check:
        problems = [m for n in names for m in library_problems(load_library(n), load_queries(n))]
        print("\n".join(problems) or f"ok: {len(names)} libraries")
        return 1 if problems else 0
    if args.out is None:
        p.error("OUT is required unless --check")
    for name in names:
        print(json.dumps(build(name, args.out, cache_dir(args.cache), args.mixed, args.seed)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
