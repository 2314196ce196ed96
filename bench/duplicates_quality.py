"""Find duplicates, measured on made copies (issue 39, item 5).

Each development library (bench/data/search_libraries: a Debian package's sounds, no model trained on them) is
copied with, for a seeded sample of COPIED of its files, five copies of each: another format (WAV <-> FLAC),
another sample rate (22.05 kHz, or 48 kHz for a file already at 22.05 kHz or below), 24-bit, trimmed by 50 ms at
the start, and 6 dB quieter. The library's other files are the distinct sounds of the same pack that must not be
taken for copies. Files of the pack with the same bytes are one sound in the truth.

Pairwise precision and recall over every pair of files (same group in the answer vs in the truth), two ways:
- literal: the issue's words. Every made copy counts; the pack's other files are distinct sounds.
- strict: as literal, and the pack's own files whose waveforms correlate >= 0.9 (an oracle) are one sound too.
- restated: only the made copies decide. A pair the oracle joins but that is no made copy (a pack's "push snow"
  and "push stone", one recording EQ'd two ways) counts neither way. So does a trimmed copy of a sound shorter
  than MIN_TRIM_SOURCE_S: there the 50-ms cut takes a fifth or more of it, its attack, and leaves another sound.
The rule: the thresholds (min_cosine x min_match) with the highest restated recall at restated pooled precision
>= 0.95 on the tuning libraries (search_libraries.TUNING), ties to the stricter; the other libraries are held out
and scored at those thresholds. `python -m bench.duplicates_quality` (JSON to stdout).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench import pinned, search_libraries
from bench.library_quality import CACHE, indexed_session

COPIED = 20
COSINES = (0.5, 0.6, 0.7, 0.8, 0.9)
MATCHES = (0.8, 0.85, 0.9, 0.95)
PRECISION_BAR = 0.95
SAME_WAVE = 0.9  # the truth's oracle: waveforms this alike are one recording
MIN_TRIM_SOURCE_S = 0.25  # restated: a trimmed copy of a shorter sound is no copy of it
TRIMMED = "trimmed.wav"


def make_copies(folder: Path, out: Path, seed: int = 0) -> tuple[dict[str, str], set[str]]:
    """`folder`'s sounds under `out/pack/`, copies of COPIED of them under `out/copies/`; -> ({file: truth group},
    the trimmed copies of sounds shorter than MIN_TRIM_SOURCE_S)."""
    from core.audio import audio_info, decode, resample, write_audio

    if out.exists():
        shutil.rmtree(out)
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in (".wav", ".ogg", ".flac"))
    truth: dict[str, str] = {}
    doubtful: set[str] = set()
    for p in files:
        rel = "pack/" + p.relative_to(folder).as_posix()
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, out / rel)
        truth[rel] = hashlib.sha256(p.read_bytes()).hexdigest()  # same bytes: one sound
    rng = np.random.default_rng(seed)
    for i in sorted(rng.choice(len(files), size=min(COPIED, len(files)), replace=False).tolist()):
        p, group = files[i], truth["pack/" + files[i].relative_to(folder).as_posix()]
        try:
            d, info = decode(p, None, mono=False), audio_info(p)
        except Exception:  # noqa: BLE001 - an unreadable pack file is simply not copied
            continue
        x, sr = d.audio, d.sample_rate
        other_rate = 48_000 if sr <= 22_050 else 22_050
        copies = {"format" + (".wav" if p.suffix.lower() != ".wav" else ".flac"): (x, sr, None),
                  "rate.wav": (resample(x, sr, other_rate), other_rate, None),
                  "24bit.wav": (x, sr, "PCM_24"),
                  TRIMMED: (x[round(0.05 * sr):], sr, None),
                  "quieter.wav": (x * 10 ** (-6 / 20), sr, None)}
        (out / "copies").mkdir(parents=True, exist_ok=True)
        for kind, (audio, rate, subtype) in copies.items():
            if len(audio) == 0 or info.frames == 0:
                continue
            rel = f"copies/{i:04d}_{kind}"
            write_audio(out / rel, audio, rate, subtype)
            truth[rel] = group
            if kind == TRIMMED and len(x) < MIN_TRIM_SOURCE_S * sr:
                doubtful.add(rel)
    return truth, doubtful


def same_recordings(folder: Path, truth: dict[str, str]) -> dict[str, str]:
    """The truth with the pack's own duplicates joined: files whose waveforms (16 kHz mono) correlate >= SAME_WAVE
    at some lag within 0.2 s (a packager's re-encoded or resampled copy under another name). An oracle of its own:
    the samples, not the vectors or band prints the search uses."""
    from core.audio import AudioError, decode

    waves = {}
    for rel in [r for r in truth if r.startswith("pack/")]:
        try:
            waves[rel] = decode(folder / rel, 16_000).audio
        except (AudioError, OSError):
            continue
    joined = dict(truth)
    names = sorted(waves)
    for a, b in itertools.combinations(names, 2):
        la, lb = len(waves[a]), len(waves[b])
        if joined[a] != joined[b] and min(la, lb) > 0 and min(la, lb) >= 0.9 * max(la, lb) \
                and wave_correlation(waves[a], waves[b]) >= SAME_WAVE:
            old, new = joined[b], joined[a]
            joined = {f: new if g == old else g for f, g in joined.items()}
    return joined


def wave_correlation(a: np.ndarray, b: np.ndarray, max_lag: int = 3_200) -> float:
    """The best normalised cross-correlation of two waveforms within +-max_lag samples (FFT)."""
    n = 1 << int(np.ceil(np.log2(len(a) + len(b))))
    xc = np.fft.irfft(np.fft.rfft(a, n) * np.conj(np.fft.rfft(b, n)), n)
    lags = np.concatenate([xc[:max_lag + 1], xc[-max_lag:]])
    den = float(np.sqrt((a * a).sum() * (b * b).sum()))
    return float(np.abs(lags).max() / den) if den > 1e-12 else 0.0


def pairs_of(groups: Sequence[Sequence[str]]) -> set[tuple[str, str]]:
    return {tuple(sorted(pair)) for g in groups for pair in itertools.combinations(g, 2)}


def grouped(truth: dict[str, str]) -> set[tuple[str, str]]:
    by: dict[str, list[str]] = {}
    for f, g in truth.items():
        by.setdefault(g, []).append(f)
    return pairs_of(list(by.values()))


@dataclass(frozen=True)
class Truth:
    made: dict[str, str]  # file -> group: the pack's same bytes and the made copies
    oracle: dict[str, str]  # file -> group: `made` with the pack's own alike waveforms joined
    doubtful: set[str]  # trimmed copies of short sounds

    def ignored(self) -> set[tuple[str, str]]:
        """The pairs the restated score leaves out: joined by the oracle alone, or with a doubtful file."""
        return (grouped(self.oracle) - grouped(self.made)) | {
            tuple(sorted((d, f))) for d in self.doubtful for f in self.made if f != d}


def both_scores(found: set[tuple[str, str]], truth: Truth) -> dict[str, dict]:
    ignored = truth.ignored()
    return {"strict": scores(found, grouped(truth.oracle)), "literal": scores(found, grouped(truth.made)),
            "restated": scores(found - ignored, grouped(truth.made) - ignored)}


def scores(found: set[tuple[str, str]], true: set[tuple[str, str]]) -> dict[str, float | int]:
    hit = len(found & true)
    return {"precision": round(hit / len(found), 4) if found else 1.0, "recall": round(hit / len(true), 4)
            if true else 1.0, "found": len(found), "true": len(true), "right": hit}


def candidate_pairs(folder: Path) -> tuple[dict, list[tuple[int, int]], list[tuple[int, int, float, float]]]:
    """Every candidate pair at the loosest thresholds: (files, same-bytes links, [(id, id, cosine, match)])."""
    from app.services.jobs import drain
    from app.services.library import duplicates as dup

    with indexed_session(folder) as session:
        lib, model = session.library, session.embedder.model_id
        files = dup._files(lib)
        config = dup.DuplicateConfig(min_cosine=min(COSINES), min_match=-1.0)
        same = dup._same_bytes(lib, files, None)
        candidates = dup._candidates(lib, model, files, config, None)
        matched = drain(dup._verified(lambda f: lib.root / files[f][0].rel_path, files, candidates, config))
        vecs = lib.vectors.of_files(model, sorted({f for p in candidates for f in p}))
    unit = {f: v / max(float(np.linalg.norm(v)), 1e-12) for f, v in vecs.items()}
    return files, same, [(a, b, float(unit[a] @ unit[b]), m) for a, b, m in matched]


def grid_scores(files: dict, same: list[tuple[int, int]], rows: list[tuple[int, int, float, float]],
                truth: Truth) -> dict[str, dict]:
    """Each (min_cosine, min_match): the groups the shipped grouping makes of the pairs that pass, scored."""
    from app.services.library import duplicates as dup

    out = {}
    for c, m in itertools.product(COSINES, MATCHES):
        links = [(a, b, x) for a, b, cos, x in rows if cos >= c and x >= m]
        groups = dup._groups(files, same, links)
        out[f"{c}/{m}"] = both_scores(pairs_of([[f.rel_path for f in g.files] for g in groups]), truth)
    return out


def pooled(tables: Sequence[dict[str, dict]], key: str, way: str = "restated") -> dict[str, float]:
    right = sum(t[key][way]["right"] for t in tables)
    found, true = sum(t[key][way]["found"] for t in tables), sum(t[key][way]["true"] for t in tables)
    return {"precision": round(right / found, 4) if found else 1.0, "recall": round(right / true, 4) if true else 1.0}


def choose(tables: Sequence[dict[str, dict]]) -> str:
    """The rule above: highest pooled recall at pooled precision >= PRECISION_BAR, ties to the stricter."""
    keys = [f"{c}/{m}" for c, m in itertools.product(COSINES, MATCHES)]
    ok = [k for k in keys if pooled(tables, k)["precision"] >= PRECISION_BAR] or keys
    return max(ok, key=lambda k: (pooled(tables, k)["recall"], [float(x) for x in k.split("/")]))


def run(libraries: Sequence[str] | None = None) -> dict:
    names = list(libraries or search_libraries.library_names())
    tables: dict[str, dict] = {}
    for name in names:
        built = search_libraries.build(name, CACHE / "libraries", search_libraries.cache_dir(None), mixed=False,
                                       seed=0)
        folder = CACHE / "duplicates" / name
        made, doubtful = make_copies(Path(built["folder"]), folder)
        truth = Truth(made, same_recordings(folder, made), doubtful)
        tables[name] = grid_scores(*candidate_pairs(folder), truth)
        print(f"{name}: done", file=sys.stderr)
    tuning = [n for n in names if n in search_libraries.TUNING]
    chosen = choose([tables[n] for n in tuning]) if tuning else "0.9/0.9"
    held = [n for n in names if n not in search_libraries.TUNING]
    return {"chosen": chosen, "per_library": {n: tables[n][chosen] for n in names},
            **{f"{part}_pooled_{way}": pooled([tables[n] for n in group], chosen, way) if group else None
               for part, group in (("tuning", tuning), ("held_out", held))
               for way in ("restated", "strict", "literal")},
            "grid": tables, **pinned.model_fields(*pinned.retrieval(None)),
            "notes": f"thresholds chosen on {', '.join(tuning) or 'none'}; {', '.join(held)} held out; "
                     f"{COPIED} originals x 5 copies per library"}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.duplicates_quality", description=__doc__.split("\n\n")[0])
    p.add_argument("--library", action="append", help="only this library (repeatable)")
    print(json.dumps(run(p.parse_args(argv).library), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
