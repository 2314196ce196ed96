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
- A library.json may carry `renamed` (original path -> a recorder-style path inside a recorder-named sub-folder,
  e.g. `ZOOM H5 2024-05-18 field day/ZOOM0001.wav`), chosen by `recorder_renaming` under its stated
  `renamed_rule` before any system ran: the builder moves those files there after checking them, and every
  `relevance.json` names them at their new paths. queries.csv always names ORIGINAL paths (those of `files`).
- A library.json with `soundfont` (a .sf2 file under the root) is made of that SoundFont's samples: each file
  names its `sample` (the index in the SF2's sample headers) and is written as a 16-bit PCM mono .wav of exactly
  that sample's points at its rate, so its sha256 is fixed by the package.

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
import struct
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
    sample: int | None = None  # a soundfont library's file: the SF2 sample header it is written from


@dataclass(frozen=True)
class Library:
    name: str
    package: str
    version: str
    licence: str
    root: str  # the folder inside the package (no leading slash)
    files: tuple[LibraryFile, ...]
    # original path -> recorder-style path in a recorder-named sub-folder, applied when the library is built
    renamed: tuple[tuple[str, str], ...] = ()
    soundfont: str | None = None  # a .sf2 under the root whose samples are the library's files

    @property
    def paths(self) -> list[str]:
        return [f.path for f in self.files]

    @property
    def renaming(self) -> dict[str, str]:
        return dict(self.renamed)

    def final_path(self, path: str) -> str:
        """Where a library file lies once built (its recorder-style path when `renamed` moves it)."""
        return self.renaming.get(path, path)


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
    files = tuple(LibraryFile(f["path"], f["sha256"], int(f["bytes"]), f.get("sample")) for f in doc["files"])
    renamed = tuple(sorted((doc.get("renamed") or {}).items()))
    return Library(doc["name"], doc["package"], doc["version"], doc["licence"], doc["root"], files, renamed,
                   doc.get("soundfont"))


def recorder_renaming(paths: Iterable[str], count: int, folder: str, stem: str, first: int, seed: str
                      ) -> dict[str, str]:
    """Original path -> `folder/<stem % number>.<ext>` for `count` files drawn by random.Random(seed) from the
    sorted paths, numbered from `first` in the order drawn (what a recorder writes: ZOOM0001.wav, ZOOM0002.wav)."""
    chosen = random.Random(seed).sample(sorted(paths), count)
    return {p: f"{folder}/{stem % (first + i)}{PurePosixPath(p).suffix}" for i, p in enumerate(chosen)}


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
    problems += renaming_problems(lib)
    problems += soundfont_problems(lib)
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
        renamed_to = {new: old for old, new in lib.renamed}
        problems += [f"{lib.name}: query {q.id} names {p!r}, not in library.json"
                     + (f" (queries.csv names original paths: {renamed_to[p]!r})" if p in renamed_to else "")
                     for p in q.relevant if p not in known]
        if q.kind not in QUERY_KINDS:
            problems.append(f"{lib.name}: query {q.id} has unknown kind {q.kind!r}")
        if not q.query.strip() or not q.basis.strip():
            problems.append(f"{lib.name}: query {q.id} lacks its text or its basis")
    return problems


def renamed_rule_problems(name: str, data_dir: Path = DATA_DIR) -> list[str]:
    """A library.json whose `renamed` is stated by a `renamed_rule` ({count, folder, stem, first, seed}: the
    arguments of recorder_renaming) must carry exactly what the rule gives; `renamed` without a rule is refused."""
    doc = json.loads((data_dir / name / "library.json").read_text())
    rule, renamed = doc.get("renamed_rule"), doc.get("renamed") or {}
    if not renamed:
        return [f"{name}: renamed_rule without renamed"] if rule else []
    if not isinstance(rule, dict):
        return [f"{name}: renamed has no renamed_rule saying how it was chosen"]
    try:
        expected = recorder_renaming([f["path"] for f in doc["files"]], rule["count"], rule["folder"], rule["stem"],
                                     rule["first"], rule["seed"])
    except (KeyError, TypeError, ValueError) as e:
        return [f"{name}: bad renamed_rule ({e})"]
    return [] if expected == renamed else [f"{name}: renamed is not what its renamed_rule gives"]


def renaming_problems(lib: Library) -> list[str]:
    """What is wrong with a library's `renamed`: each original is a library file, each new path a plain relative
    path with the original's suffix inside a sub-folder, no two alike, none the path of a file that stays."""
    problems = []
    olds = [old for old, _ in lib.renamed]
    news = [new for _, new in lib.renamed]
    known = set(lib.paths)
    for old, new in lib.renamed:
        if old not in known:
            problems.append(f"{lib.name}: renamed {old!r} is not in library.json")
        if not safe_relpath(new) or len(PurePosixPath(new).parts) < 2:
            problems.append(f"{lib.name}: renamed {old!r} -> {new!r} is not a path inside a sub-folder")
        if PurePosixPath(new).suffix.lower() != PurePosixPath(old).suffix.lower():
            problems.append(f"{lib.name}: renamed {old!r} -> {new!r} changes the file's suffix")
    if len(set(news)) != len(news) or len(set(olds)) != len(olds):
        problems.append(f"{lib.name}: renamed maps two files to one path")
    clash = sorted(set(news) & (known - set(olds)))
    if clash:
        problems.append(f"{lib.name}: renamed paths {clash[:3]} are paths of files that keep their names")
    return problems


def soundfont_problems(lib: Library) -> list[str]:
    """A soundfont library's files are .wav, each from its own sample; other libraries name no samples."""
    samples = [f.sample for f in lib.files]
    if lib.soundfont is None:
        return [f"{lib.name}: {f.path} names a sample but the library has no soundfont"
                for f in lib.files if f.sample is not None]
    problems = []
    if not safe_relpath(lib.soundfont) or not lib.soundfont.lower().endswith(".sf2"):
        problems.append(f"{lib.name}: bad soundfont {lib.soundfont!r}")
    for f in lib.files:
        if not isinstance(f.sample, int) or f.sample < 0:
            problems.append(f"{lib.name}: {f.path} has no sample index")
        if not f.path.lower().endswith(".wav"):
            problems.append(f"{lib.name}: {f.path}: a soundfont library's files are .wav")
    if len(set(samples)) != len(samples):
        problems.append(f"{lib.name}: two files are written from the same sample")
    return problems


# ---------------------------------------------------------------------------------------------- soundfonts


def _riff_chunks(data: bytes, start: int, end: int) -> Iterable[tuple[bytes, int, int]]:
    while start + 8 <= end:
        cid, size = data[start:start + 4], struct.unpack_from("<I", data, start + 4)[0]
        yield cid, start + 8, size
        start += 8 + size + (size & 1)


@dataclass(frozen=True)
class SoundFontSample:
    name: str
    start: int  # in sample points, into the smpl chunk
    end: int
    rate: int


def soundfont_samples(data: bytes) -> tuple[list[SoundFontSample], bytes]:
    """An SF2 file's sample headers (the terminal EOS record left out) and its 16-bit sample data."""
    if data[:4] != b"RIFF" or data[8:12] != b"sfbk":
        raise ValueError("not a SoundFont 2 file")
    smpl, shdr = b"", b""
    for cid, off, size in _riff_chunks(data, 12, len(data)):
        if cid != b"LIST":
            continue
        for sub, sub_off, sub_size in _riff_chunks(data, off + 4, off + size):
            if data[off:off + 4] == b"sdta" and sub == b"smpl":
                smpl = data[sub_off:sub_off + sub_size]
            elif data[off:off + 4] == b"pdta" and sub == b"shdr":
                shdr = data[sub_off:sub_off + sub_size]
    headers = []
    for i in range(0, len(shdr) - 46 + 1, 46):
        name, start, end, _, _, rate = struct.unpack_from("<20sIIIII", shdr, i)
        headers.append(SoundFontSample(name.split(b"\0")[0].decode("latin-1"), start, end, rate))
    return headers[:-1], smpl


def sample_wav(sample: SoundFontSample, smpl: bytes) -> bytes:
    """The sample's points as a 16-bit PCM mono RIFF/WAVE file (fmt and data chunks only: fixed bytes)."""
    pcm = smpl[2 * sample.start:2 * sample.end]
    if sample.end < sample.start or len(pcm) != 2 * (sample.end - sample.start):
        raise ValueError(f"sample {sample.name!r} lies outside the sample data")
    fmt = struct.pack("<HHIIHH", 1, 1, sample.rate, 2 * sample.rate, 2, 16)
    return (b"RIFF" + struct.pack("<I", 4 + 8 + len(fmt) + 8 + len(pcm)) + b"WAVE" + b"fmt "
            + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(pcm)) + pcm)


def read_member(deb: Path, member: str) -> bytes:
    """One file's bytes out of a .deb, streamed (the package is never unpacked whole)."""
    wanted = member.strip("/")
    with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        with tarfile.open(fileobj=proc.stdout, mode="r|*") as tar:
            for m in tar:
                if m.isfile() and m.name.removeprefix("./") == wanted:
                    with tar.extractfile(m) as src:  # type: ignore[union-attr]
                        data = src.read()
                    proc.stdout.read()  # drain, so dpkg-deb ends cleanly
                    break
            else:
                data = None
    if proc.returncode != 0:
        raise RuntimeError(f"dpkg-deb --fsys-tarfile {deb} failed ({proc.returncode})")
    if data is None:
        raise ValueError(f"{deb.name} has no {wanted}")
    return data


def write_soundfont_samples(lib: Library, deb: Path, dest: Path) -> list[str]:
    """The library's files written from the SoundFont's samples (each file's `sample`) into `dest`."""
    assert lib.soundfont is not None
    headers, smpl = soundfont_samples(read_member(deb, f"{lib.root.strip('/')}/{lib.soundfont}"))
    for f in lib.files:
        if f.sample is None or not 0 <= f.sample < len(headers):
            raise ValueError(f"{lib.name}: {f.path}: no sample {f.sample} in {lib.soundfont}")
        target = dest / f.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(sample_wav(headers[f.sample], smpl))
    return sorted(lib.paths)


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
    """OUT/NAME with the library's files at their original relative paths (a soundfont library: written from its
    samples), verified; then the `renamed` files moved to their recorder-style paths and verified there against
    the same sha256. Returns that folder."""
    folder = out / lib.name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    deb = fetch_deb(lib, cache)
    if lib.soundfont is not None:
        write_soundfont_samples(lib, deb, folder)
    else:
        extract_root(deb, lib.root, folder)
    verify(lib, folder)
    if lib.renamed:
        apply_renaming(lib, folder)
        verify(lib, folder, lib.renaming)
    return folder


def apply_renaming(lib: Library, folder: Path) -> None:
    """Move each `renamed` file to its recorder-style path; folders left empty go."""
    for old, new in lib.renamed:
        (folder / new).parent.mkdir(parents=True, exist_ok=True)
        (folder / old).rename(folder / new)
    for d in sorted((p for p in folder.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        if not any(d.iterdir()):
            d.rmdir()


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
    """The queries with their relevant files under their names in the mixed copy (or any copy: `plan` maps an
    original path to where the file lies; a path it lacks stays)."""
    return [Query(q.id, q.query, q.kind, tuple(plan.get(p, p) for p in q.relevant), q.basis) for q in queries]


def built_paths(lib: Library, plan: dict[str, str] | None = None) -> dict[str, str]:
    """Original path -> where the file lies in the built library (`plan`: the mixed copy's renaming on top)."""
    return {p: (plan or {}).get(p, lib.final_path(p)) for p in lib.paths}


def make_mixed(lib: Library, source: Path, out: Path, seed: int = 0) -> tuple[Path, dict[str, str]]:
    """OUT/NAME-mixed: a copy of the verified library in `source` with mixed_plan's half renamed; verified."""
    plan = mixed_plan(lib, seed)
    folder = out / f"{lib.name}-mixed"
    if folder.exists():
        shutil.rmtree(folder)
    where = built_paths(lib, plan)
    for path in lib.paths:
        target = folder / where[path]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / lib.final_path(path), target)
    verify(lib, folder, where)
    doc: dict = {"library": lib.name, "seed": seed, "renamed": plan}
    if lib.renamed:  # the library's own recorder sub-folder, where the mixed copy left those files
        doc["recorder_subfolder"] = {old: new for old, new in lib.renamed if old not in plan}
    (folder / "mapping.json").write_text(json.dumps(doc, indent=1) + "\n")
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
    problems = library_problems(lib, queries) + renamed_rule_problems(name)
    if problems:
        raise ValueError("; ".join(problems))
    folder = materialise(lib, out, cache)
    write_relevance(lib, mixed_relevance(queries, built_paths(lib)), folder, mixed=False)
    summary = {"library": name, "package": f"{lib.package} {lib.version}", "files": len(lib.files),
               "queries": len(queries), "folder": str(folder)}
    if mixed:
        mixed_folder, plan = make_mixed(lib, folder, out, seed)
        write_relevance(lib, mixed_relevance(queries, built_paths(lib, plan)), mixed_folder, mixed=True)
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
        problems = [m for n in names
                    for m in library_problems(load_library(n), load_queries(n)) + renamed_rule_problems(n)]
        print("\n".join(problems) or f"ok: {len(names)} libraries")
        return 1 if problems else 0
    if args.out is None:
        p.error("OUT is required unless --check")
    for name in names:
        print(json.dumps(build(name, args.out, cache_dir(args.cache), args.mixed, args.seed)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
