"""A reproducible sound-effects caption corpus from material reachable on a Debian machine.

    python -m training.sfx_corpus OUT_DIR [--max-per-package 400] [--max-deb-mb 300] [--no-midi] [--no-tts]

Three sources, every clip with its source package, license and a caption: sound files shipped in Debian
packages (captioned by `caption_from_path`, training/sfx_captions.py), General MIDI instruments and drums, and
TTS words (training/sfx_synthetic.py). Clips are deduplicated by their decoded audio; the split is by source
package, so `test` holds packages never trained on; `RESERVED_PREFIXES` are refused everywhere. Writes
OUT_DIR/captions.csv, splits.json, audio/ and licenses/; resumable per package. The caption rule, the sources,
dedup order and output columns: docs/corpora.md.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable, Generator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core import audio as audio_path
from training.reserved import RESERVED_PREFIXES, check_not_reserved, is_reserved, is_search_bench
from training.sfx_captions import caption_from_path
from training.sfx_synthetic import MidiClip, midi_plan, render_midi, synthesise, trim_silence, tts_plan

Job = Generator[dict[str, Any], None, Any]

SOUND_EXTENSIONS = (".ogg", ".wav", ".flac")
CSV_COLUMNS = ("path", "caption", "split", "source_package", "license", "source_file", "duration_s")
SYNTHETIC_PACKAGES = ("fluid-soundfont-gm", "flite", "espeak-ng")
MIN_SECONDS, MAX_SECONDS = 0.1, 30.0


# ---------------------------------------------------------------------------------------------- audio


def decode(data: bytes) -> tuple[np.ndarray, int]:
    """Encoded bytes -> (mono float32 (N,), sample rate). Raises ValueError on anything the audio path cannot read."""
    try:
        decoded = audio_path.decode_bytes(data)
    except audio_path.AudioError as e:  # the caller says which file
        raise ValueError(f"cannot decode: {e}") from e
    return decoded.audio, decoded.sample_rate


def audio_hash(wave: np.ndarray, sample_rate: int) -> str:
    """Hash of decoded audio (int16 PCM + rate): the same sound re-encoded or renamed gets the same hash."""
    pcm = np.clip(np.round(wave * 32768.0), -32768, 32767).astype("<i2")  # exact for 16-bit sources
    return hashlib.sha1(struct.pack("<I", sample_rate) + pcm.tobytes()).hexdigest()


def split_for_package(package: str, val_fraction: float, test_fraction: float, seed: int) -> str:
    """Deterministic split of a package: a hash of (seed, name) mapped to [0, 1)."""
    if package in SYNTHETIC_PACKAGES:
        return "train"
    u = int(hashlib.sha1(f"{seed}:{package}".encode()).hexdigest()[:8], 16) / 2**32
    return "test" if u < test_fraction else "val" if u < test_fraction + val_fraction else "train"


def evenly_spaced(items: Sequence[Any], k: int) -> list[Any]:
    """At most k items, evenly spaced through `items` (keeps variety when a package has thousands)."""
    if len(items) <= k:
        return list(items)
    return [items[int(i * len(items) / k)] for i in range(k)]


# ---------------------------------------------------------------------------------------------- licenses


_LICENSE_NAME = re.compile(
    r"\b(MIT|BSD|L?GPL-?[\d.]*\+?|GNU (?:Lesser |Library )?General Public License(?:,? [Vv]ersion [\d.]+)?"
    r"|Creative Commons [A-Za-z -]+?[\d.]+|CC[- ]BY[-A-Z]*[- ]?[\d.]*|[Pp]ublic [Dd]omain|Artistic License)(?![A-Za-z])"
)


def license_summary(copyright_text: str) -> str:
    """Short license names from a Debian copyright file (DEP-5 `License:` fields, else the first GPL-like hint)."""
    names: list[str] = []
    for line in copyright_text.splitlines():
        m = re.match(r"^License:[ \t]*(\S.*)$", line)
        if m and m.group(1).strip() not in names:
            names.append(m.group(1).strip())
    if names:
        return " | ".join(names[:4])
    # older free-form copyright files: the license names mentioned, in order of first mention
    found: list[str] = []
    for m in _LICENSE_NAME.finditer(copyright_text):
        name = re.sub(r"\s+", " ", m.group(0)).strip().rstrip(".-")
        if name.lower() not in (f.lower() for f in found):
            found.append(name)
    return " | ".join(found[:3]) if found else "see copyright file"


def read_copyright(root: Path, package: str) -> str:
    """The copyright text of `package` in an unpacked tree (following the doc-dir symlinks data packages use)."""
    doc = root / "usr/share/doc" / package
    candidates = [doc / "copyright"]
    if doc.is_symlink():
        candidates.append(root / "usr/share/doc" / Path(str(doc.readlink())).name / "copyright")
        candidates.append(Path("/usr/share/doc") / Path(str(doc.readlink())).name / "copyright")
    candidates.append(Path("/usr/share/doc") / package / "copyright")
    for c in candidates:
        if c.is_file():
            return c.read_text(errors="replace")
    return ""


# ---------------------------------------------------------------------------------------------- rows


@dataclass
class Row:
    path: str
    caption: str
    split: str
    source_package: str
    license: str
    source_file: str
    duration_s: float


@dataclass
class Settings:
    max_per_package: int = 400
    max_deb_mb: float = 300.0
    val_fraction: float = 0.1
    test_fraction: float = 0.15
    seed: int = 0


class Deduper:
    """Remembers decoded-audio hashes across packages; the first clip with a given hash wins."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def is_new(self, digest: str) -> bool:
        if digest in self.seen:
            return False
        self.seen.add(digest)
        return True


def collect_package(root: Path, package: str, files: Sequence[str], out_dir: Path, settings: Settings,
                    dedup: Deduper) -> tuple[list[Row], dict[str, int]]:
    """Copy the packaged sound files under `root` (an unpacked package) into the corpus; returns rows + skip counts.

    `files` are absolute paths inside the package ("/usr/share/..."), as apt-file lists them.
    """
    check_not_reserved(package)
    skipped = {"missing": 0, "undecodable": 0, "duration": 0, "duplicate": 0, "no_caption": 0}
    text = read_copyright(root, package)
    license_ = license_summary(text) if text else "copyright file not found in the package"
    lic_dir = out_dir / "licenses"
    lic_dir.mkdir(parents=True, exist_ok=True)
    if text:
        (lic_dir / f"{package}.copyright").write_text(text)
    split = split_for_package(package, settings.val_fraction, settings.test_fraction, settings.seed)
    rows: list[Row] = []
    candidates = sorted(f.lstrip("/") for f in files if f.lower().endswith(SOUND_EXTENSIONS))
    for rel in candidates:
        if len(rows) >= settings.max_per_package:
            break
        src = root / rel
        if not src.is_file():
            skipped["missing"] += 1
            continue
        caption = caption_from_path(rel, package)
        if not caption:
            skipped["no_caption"] += 1
            continue
        data = src.read_bytes()
        try:
            wave, sr = decode(data)
        except ValueError:
            skipped["undecodable"] += 1
            continue
        duration = len(wave) / sr
        if not MIN_SECONDS <= duration <= MAX_SECONDS or not np.any(wave):
            skipped["duration"] += 1
            continue
        if not dedup.is_new(audio_hash(wave, sr)):
            skipped["duplicate"] += 1
            continue
        dest = Path("audio") / package / rel.replace("/", "__")
        (out_dir / dest).parent.mkdir(parents=True, exist_ok=True)
        (out_dir / dest).write_bytes(data)
        rows.append(Row(dest.as_posix(), caption, split, package, license_, rel, round(duration, 3)))
    return rows, skipped


# ---------------------------------------------------------------------------------------------- Debian packages


def find_sound_packages(listing: str | None = None) -> dict[str, list[str]]:
    """package -> sound files it ships, from `apt-file search` (or its saved output), reserved packages and the
    search libraries' packages removed."""
    if listing is None:
        listing = subprocess.run(["apt-file", "search", "-x", r"\.(ogg|wav|flac)$"], check=True,
                                 capture_output=True, text=True).stdout
    found: dict[str, list[str]] = {}
    for line in listing.splitlines():
        package, _, path = line.partition(": ")
        if path and not is_reserved(package) and not is_search_bench(package):
            found.setdefault(package, []).append(path.strip())
    return found


def deb_sizes(packages: Sequence[str]) -> dict[str, int]:
    """Download sizes in bytes from the local apt cache (`apt-cache show`)."""
    out = subprocess.run(["apt-cache", "show", "--no-all-versions", *packages], capture_output=True, text=True).stdout
    sizes: dict[str, int] = {}
    package = ""
    for line in out.splitlines():
        if line.startswith("Package:"):
            package = line.split(":", 1)[1].strip()
        elif line.startswith("Size:") and package:
            sizes[package] = int(line.split(":", 1)[1])
    return sizes


def download_debs(packages: Sequence[str], dest: Path) -> None:
    """`apt-get download` a batch of packages into `dest` in one call (apt's start-up, reading its lists, costs
    more than a small download); a failing batch is retried one package at a time, failures left to the caller."""
    for package in packages:
        check_not_reserved(package)
    dest.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["apt-get", "download", "-q", *packages], cwd=dest, capture_output=True, text=True)
    if r.returncode != 0 and len(packages) > 1:
        for package in packages:
            subprocess.run(["apt-get", "download", "-q", package], cwd=dest, capture_output=True, text=True)


def fetch_and_unpack(package: str, work: Path, debs: Path | None = None) -> Path:
    """The package's .deb (from `debs` if prefetched there, else `apt-get download`) -> its sound files and docs
    unpacked under work/root; returns the root. Raises RuntimeError with apt's message."""
    check_not_reserved(package)
    work.mkdir(parents=True, exist_ok=True)
    found = sorted((debs or work).glob(f"{package}_*.deb"))
    if not found:
        r = subprocess.run(["apt-get", "download", "-q", package], cwd=work, capture_output=True, text=True)
        found = sorted(work.glob(f"{package}_*.deb"))
        if r.returncode != 0 or not found:
            raise RuntimeError(f"apt-get download {package} failed: {(r.stderr or r.stdout).strip()[-300:]}")
    root = work / "root"
    root.mkdir(exist_ok=True)
    # only the sound files and the docs (copyright): big data packages need not be unpacked whole
    data = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(found[0])], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(root), "--wildcards", "--ignore-case", "*.ogg", "*.wav", "*.flac",
                    "./usr/share/doc/*"], stdin=data.stdout, capture_output=True)  # exit 2 if a pattern misses
    data.stdout.close()
    if data.wait() != 0:
        raise RuntimeError(f"dpkg-deb could not read {found[0].name}")
    for deb in found:
        deb.unlink()
    return root


# ---------------------------------------------------------------------------------------------- build


def _state_path(out_dir: Path, source: str) -> Path:
    return out_dir / ".state" / f"{source}.json"


def _save_state(out_dir: Path, source: str, rows: list[Row], info: dict[str, Any]) -> None:
    path = _state_path(out_dir, source)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"rows": [asdict(r) for r in rows], "info": info}))
    tmp.replace(path)


def _load_state(out_dir: Path, source: str) -> tuple[list[Row], dict[str, Any]] | None:
    path = _state_path(out_dir, source)
    if not path.is_file():
        return None
    state = json.loads(path.read_text())
    return [Row(**r) for r in state["rows"]], state["info"]


def _write_wav(out_dir: Path, package: str, name: str, wave: np.ndarray, sr: int) -> str:
    dest = Path("audio") / package / f"{name}.wav"
    (out_dir / dest).parent.mkdir(parents=True, exist_ok=True)
    audio_path.save_wav(out_dir / dest, wave, sr)
    return dest.as_posix()


def build_synthetic(out_dir: Path, dedup: Deduper, soundfont: Path | None, tts: bool) -> Job:
    """Rendered GM instruments/drums and TTS words; each source is one resumable unit."""
    sources: list[tuple[str, list[Any]]] = []
    if soundfont is not None:
        sources.append(("fluid-soundfont-gm", midi_plan()))
    if tts:
        plan = tts_plan()
        sources += [(pkg, [c for c in plan if c.package == pkg]) for pkg in ("flite", "espeak-ng")]
    all_rows: list[Row] = []
    for package, plan in sources:
        done = _load_state(out_dir, package)
        if done is None:
            copyright_text = read_copyright(Path("/nonexistent"), package)
            license_ = license_summary(copyright_text) if copyright_text else "see Debian package " + package
            (out_dir / "licenses").mkdir(parents=True, exist_ok=True)
            (out_dir / "licenses" / f"{package}.copyright").write_text(copyright_text)
            rows: list[Row] = []
            for i, clip in enumerate(plan):
                if isinstance(clip, MidiClip):
                    wave, sr, source_file = render_midi(clip.midi, soundfont), 44100, f"GM {clip.name}"
                else:
                    wave, sr = decode(synthesise(clip))
                    wave, source_file = trim_silence(wave), f"{clip.package} {clip.voice}: {clip.text}"
                if len(wave) / sr < MIN_SECONDS or not dedup.is_new(audio_hash(wave, sr)):
                    continue
                path = _write_wav(out_dir, package, clip.name, wave, sr)
                rows.append(Row(path, clip.caption, "train", package, license_, source_file,
                                round(len(wave) / sr, 3)))
                if i % 50 == 0:
                    yield {"step": i, "total": len(plan), "message": f"{package}: {i}/{len(plan)}"}
            _save_state(out_dir, package, rows, {"clips": len(rows)})
            done = rows, {}
        else:
            for r in done[0]:
                dedup.is_new(audio_hash(*decode((out_dir / r.path).read_bytes())))
        all_rows += done[0]
    return all_rows


def _recaption(row: Row) -> bool:
    row.caption = caption_from_path(row.source_file, row.source_package)
    return bool(row.caption)


def build_debian(out_dir: Path, dedup: Deduper, settings: Settings, packages: dict[str, list[str]],
                 fetch: Callable[[str, Path], Path] = fetch_and_unpack,
                 sizes: dict[str, int] | None = None, batch: int = 16, only_finished: bool = False) -> Job:
    """Fetch, unpack, collect and clean up one package at a time (bounded disk use); resumable per package."""
    # smallest download first: an interrupted build then holds the most packages (and --only-finished uses them)
    names = sorted(packages, key=lambda p: ((sizes or {}).get(p, 0), p))
    all_rows: list[Row] = []
    skipped: dict[str, str] = {}
    debs = Path(tempfile.mkdtemp(prefix="sfx-corpus-debs-"))
    for i, package in enumerate(names):
        check_not_reserved(package)
        yield {"step": i, "total": len(names), "message": f"{package} ({len(all_rows)} clips so far)"}
        if only_finished and _load_state(out_dir, package) is None:
            skipped[package] = "not built yet (--only-finished)"
            continue
        if fetch is fetch_and_unpack and not any(debs.glob("*.deb")):  # prefetch the next batch in one apt call
            todo = [p for p in names[i : i + batch] if _load_state(out_dir, p) is None
                    and (sizes or {}).get(p, 0) <= settings.max_deb_mb * 1e6]
            if todo:
                download_debs(todo, debs)
        done = _load_state(out_dir, package)
        if done is not None:
            rows, info = done
            rows = [r for r in rows if _recaption(r)]  # captions always follow the current rules
            for r in rows:  # re-register hashes so later packages still deduplicate against these
                try:
                    dedup.is_new(audio_hash(*decode((out_dir / r.path).read_bytes())))
                except (OSError, ValueError):
                    pass
            all_rows += rows
            if info.get("skipped_package"):
                skipped[package] = info["skipped_package"]
            continue
        size = (sizes or {}).get(package, 0)
        if size > settings.max_deb_mb * 1e6:  # not saved: a later run with a higher limit takes it
            skipped[package] = f"download {size / 1e6:.0f} MB > --max-deb-mb"
            continue
        work = Path(tempfile.mkdtemp(prefix="sfx-corpus-"))
        try:
            root = fetch_and_unpack(package, work, debs) if fetch is fetch_and_unpack else fetch(package, work)
            files = evenly_spaced(sorted(packages[package]), settings.max_per_package * 2)
            rows, counts = collect_package(root, package, files, out_dir, settings, dedup)
            _save_state(out_dir, package, rows, {"skipped_files": counts})
        except (RuntimeError, subprocess.CalledProcessError, OSError) as e:
            _save_state(out_dir, package, [], {"skipped_package": str(e)[:300]})
            skipped[package] = str(e)[:300]
            rows = []
        finally:
            shutil.rmtree(work, ignore_errors=True)
            for deb in debs.glob(f"{package}_*.deb"):  # a package that failed leaves no .deb behind
                deb.unlink()
        all_rows += rows
    shutil.rmtree(debs, ignore_errors=True)
    return all_rows, skipped


def write_outputs(out_dir: Path, rows: list[Row], settings: Settings, skipped: dict[str, str]) -> dict[str, Any]:
    with open(out_dir / "captions.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow(asdict(r))
    by_split: dict[str, set[str]] = {}
    for r in rows:
        by_split.setdefault(r.split, set()).add(r.source_package)
    summary = {
        "clips": len(rows),
        "packages": len({r.source_package for r in rows}),
        "clips_per_split": {s: sum(r.split == s for r in rows) for s in sorted(by_split)},
        "packages_per_split": {s: sorted(p) for s, p in sorted(by_split.items())},
        "distinct_captions": len({r.caption for r in rows}),
        "hours": round(sum(r.duration_s for r in rows) / 3600, 3),
        "settings": asdict(settings),
        "reserved_prefixes_excluded": list(RESERVED_PREFIXES),
        "skipped_packages": skipped,
    }
    (out_dir / "splits.json").write_text(json.dumps(summary, indent=1))
    return summary


def build_corpus(out_dir: str | Path, settings: Settings | None = None, listing: str | None = None,
                 midi: bool = True, tts: bool = True, debian: bool = True,
                 fetch: Callable[[str, Path], Path] = fetch_and_unpack, only_finished: bool = False) -> Job:
    """The whole build as a job: yields progress dicts, returns the summary written to splits.json.

    only_finished: fetch nothing; write captions.csv from the packages an earlier (interrupted) build finished.
    """
    settings = settings or Settings()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    dedup = Deduper()
    rows: list[Row] = []
    skipped: dict[str, str] = {}
    soundfont = Path("/usr/share/sounds/sf2/FluidR3_GM.sf2")
    if midi and not (soundfont.is_file() and shutil.which("fluidsynth")):
        raise RuntimeError("MIDI rendering needs fluidsynth and fluid-soundfont-gm: "
                           "apt-get install fluidsynth fluid-soundfont-gm (or pass --no-midi)")
    if tts and not (shutil.which("flite") and shutil.which("espeak-ng")):
        raise RuntimeError("TTS words need flite and espeak-ng: apt-get install flite espeak-ng (or pass --no-tts)")
    if midi or tts:
        rows += yield from build_synthetic(out_dir, dedup, soundfont if midi else None, tts)
    if debian:
        packages = find_sound_packages(listing)
        sizes = deb_sizes(sorted(packages)) if fetch is fetch_and_unpack else None
        deb_rows, skipped = yield from build_debian(out_dir, dedup, settings, packages, fetch, sizes,
                                                    only_finished=only_finished)
        rows += deb_rows
    return write_outputs(out_dir, rows, settings, skipped)


# ---------------------------------------------------------------------------------------------- frozen features


def embed_aisfx(out_dir: str | Path, weights: str | Path | None = None, chunk: int = 128,
                splits: Sequence[str] | None = None, max_seconds: float | None = 10.0, seed: int = 0) -> Job:
    """Frozen aiSFX clip features ([mean ; max] over blocks, 1024-d) of every corpus clip, computed once so a
    trainer can fit projections without running the CNN. Writes OUT_DIR/aisfx/part-NNNNN.safetensors
    (`features` (n, 1024), `rows` (n,) indices into captions.csv); resumable per part. Returns the file list.
    Each clip is cut to its first `max_seconds` (the search library's window length), which also bounds the
    CPU time of long recordings. Clips are visited in a seeded random order, so the parts finished when a long
    run is stopped are an unbiased sample of every split and package.
    """
    import torch  # noqa: PLC0415 (heavy; the corpus build itself does not need it)
    from safetensors.torch import save_file  # noqa: PLC0415

    from core.aisfx_weights import pretrained  # noqa: PLC0415
    from models.frontends import AisfxMel  # noqa: PLC0415
    from training.caption_data import load_audio  # noqa: PLC0415

    out_dir = Path(out_dir)
    with open(out_dir / "captions.csv", newline="") as f:
        rows = [(i, r["path"]) for i, r in enumerate(csv.DictReader(f)) if not splits or r["split"] in splits]
    random.Random(seed).shuffle(rows)
    encoder, frontend = pretrained(weights), AisfxMel()
    encoder.to(memory_format=torch.channels_last)  # measured faster on CPU (bench/bench_sfx.py)
    feat_dir = out_dir / "aisfx"
    feat_dir.mkdir(exist_ok=True)
    parts = []
    for p, start in enumerate(range(0, len(rows), chunk)):
        part = feat_dir / f"part-{p:05d}.safetensors"
        parts.append(part)
        yield {"step": start, "total": len(rows), "message": f"aiSFX features {start}/{len(rows)}"}
        if part.is_file():
            continue
        feats, kept = [], []
        with torch.inference_mode():
            for i, path in rows[start : start + chunk]:
                try:
                    wave = load_audio(out_dir / path, frontend.config.sample_rate)
                    if max_seconds:
                        wave = wave[: int(max_seconds * frontend.config.sample_rate)]
                except (OSError, ValueError, RuntimeError):
                    continue
                feats.append(encoder(frontend(wave)[None])[0])
                kept.append(i)
        save_file({"features": torch.stack(feats) if feats else torch.zeros(0, encoder.dim),
                   "rows": torch.tensor(kept, dtype=torch.long)}, str(part.with_suffix(".tmp")))
        part.with_suffix(".tmp").replace(part)
    return parts


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.sfx_corpus", description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir", help="output folder (keep it outside the repository)")
    p.add_argument("--max-per-package", type=int, default=Settings.max_per_package)
    p.add_argument("--max-deb-mb", type=float, default=Settings.max_deb_mb, help="skip larger .deb downloads")
    p.add_argument("--val-fraction", type=float, default=Settings.val_fraction)
    p.add_argument("--test-fraction", type=float, default=Settings.test_fraction)
    p.add_argument("--seed", type=int, default=Settings.seed)
    p.add_argument("--apt-file-listing", help="saved `apt-file search -x '\\.(ogg|wav|flac)$'` output to use")
    p.add_argument("--no-midi", action="store_true")
    p.add_argument("--no-tts", action="store_true")
    p.add_argument("--no-debian", action="store_true")
    p.add_argument("--only-finished", action="store_true",
                   help="fetch nothing: write captions.csv from the packages an interrupted build finished")
    p.add_argument("--embed-aisfx", action="store_true",
                   help="after the build, precompute frozen aiSFX features of every clip (OUT_DIR/aisfx/)")
    p.add_argument("--embed-splits", nargs="*", help="only these splits (default: all)")
    p.add_argument("--embed-max-seconds", type=float, default=10.0,
                   help="embed only each clip's first seconds (0: whole clips)")
    a = p.parse_args(argv)
    settings = Settings(a.max_per_package, a.max_deb_mb, a.val_fraction, a.test_fraction, a.seed)
    listing = Path(a.apt_file_listing).read_text() if a.apt_file_listing else None
    if not (a.no_midi and a.no_tts and a.no_debian):  # all three off: only --embed-aisfx on an existing corpus
        job = build_corpus(a.out_dir, settings, listing, midi=not a.no_midi, tts=not a.no_tts,
                           debian=not a.no_debian, only_finished=a.only_finished)
        try:
            while True:
                ev = next(job)
                print(f"[{ev['step'] + 1}/{ev['total']}] {ev['message']}", flush=True)
        except StopIteration as stop:
            summary = stop.value
        except RuntimeError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(json.dumps({k: v for k, v in summary.items() if k != "packages_per_split"}, indent=1))
    if a.embed_aisfx:
        job = embed_aisfx(a.out_dir, splits=a.embed_splits, max_seconds=a.embed_max_seconds)

        try:
            while True:
                ev = next(job)
                print(ev["message"], flush=True)
        except StopIteration:
            pass
        except RuntimeError as e:  # AisfxWeightsError says how to get the weights
            print(f"error: {e}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
