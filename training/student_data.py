"""The teacher-output cache for distilling the aiSFX tower (issue 25): each training sound's AisfxMel frames and
the frozen aiSFX trunk's (512, T/8) feature map on exactly those frames, computed once and read at every step.

    python -m training.student_data OUT_DIR [--corpus DIR] [--sfx ../shared/data/sfx] [--augment 1] ...

The student is models/aisfx_student.py, its trainer training/student_train.py. Sources are the `train` splits of
the sfx caption corpus (training/sfx_corpus.py) and shared/data/sfx, never a held-out package
(`training.reserved.is_held_out`) nor one of the search benchmark's libraries; validation is the sfx `val`
split. Writes OUT_DIR/{train,val}-NNN.safetensors and sources.json, resumable per shard. Sources, windows,
augmentation and the shard layout: docs/corpora.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from models.aisfx import AisfxConfig
from models.frontends import AisfxMel
from training.caption_data import load_audio
from training.reserved import is_held_out, is_search_bench
from training.sfx_corpus import Settings, split_for_package

ROOT = Path(__file__).resolve().parents[1]
SFX = ROOT.parent / "shared" / "data" / "sfx"
CORPUS = Path("/work/data/sfx-corpus")
SHARD = 400  # entries per file


@dataclass
class Sound:
    path: Path
    source: str  # package
    license: str
    dataset: str  # "sfx-corpus" | "sfx"


def excluded_package(package: str) -> bool:
    return is_held_out(package) or is_search_bench(package)


def corpus_split(package: str) -> str:
    s = Settings()
    return split_for_package(package, s.val_fraction, s.test_fraction, s.seed)


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def training_sounds(corpus: Path | None, sfx: Path | None) -> tuple[list[Sound], list[Sound], dict[str, Any]]:
    """(train sounds, val sounds, what was left out and why)."""
    sfx_rows = read_rows(sfx / "captions.csv") if sfx and (sfx / "captions.csv").is_file() else []
    val_files = {(r["source_package"], r["source_file"].lstrip("/")) for r in sfx_rows if r["split"] == "val"}
    dropped = {"corpus_not_train_split": 0, "corpus_same_file_as_sfx_val": 0, "sfx_package_not_corpus_train": 0,
               "held_out_package": 0}
    train: list[Sound] = []
    if corpus and (corpus / "captions.csv").is_file():
        for r in read_rows(corpus / "captions.csv"):
            pkg = r["source_package"]
            if excluded_package(pkg):
                dropped["held_out_package"] += 1
            elif r["split"] != "train" or corpus_split(pkg) != "train":
                dropped["corpus_not_train_split"] += 1
            elif (pkg, r["source_file"].lstrip("/")) in val_files:
                dropped["corpus_same_file_as_sfx_val"] += 1
            else:
                train.append(Sound(corpus / r["path"], pkg, r["license"], "sfx-corpus"))
    val: list[Sound] = []
    for r in sfx_rows:
        pkg = r["source_package"]
        s = Sound(sfx / r["path"], pkg, r["license"], "sfx")
        if excluded_package(pkg):
            dropped["held_out_package"] += 1
        elif r["split"] == "val":
            val.append(s)
        elif corpus_split(pkg) != "train":  # keep the corpus's val/test packages unheard
            dropped["sfx_package_not_corpus_train"] += 1
        else:
            train.append(s)
    return train, val, dropped


def windows(wave: torch.Tensor, sr: int, seconds: float, max_windows: int) -> list[torch.Tensor]:
    """Consecutive windows of `seconds` (the last one may be shorter, at least 1 s unless it is the only one)."""
    n = int(seconds * sr)
    out = [wave[i : i + n] for i in range(0, len(wave), n)][:max_windows]
    return [w for j, w in enumerate(out) if j == 0 or len(w) >= sr]


def augmented(wave: torch.Tensor, other: torch.Tensor, sr: int, rng: random.Random) -> tuple[torch.Tensor, str]:
    """A random crop and/or a mix with `other` at -20..0 dB (peak-relative); returns the wave and what was done."""
    kind = rng.choice(["crop", "mix", "crop+mix"])
    w = wave
    if "crop" in kind and len(w) > sr:
        n = rng.randint(sr, len(w))
        start = rng.randint(0, len(w) - n)
        w = w[start : start + n]
    if "mix" in kind and len(other):
        start = rng.randint(0, max(0, len(other) - len(w)))
        o = other[start : start + len(w)]
        gain = 10 ** (rng.uniform(-20.0, 0.0) / 20)
        peak_w, peak_o = w.abs().max().clamp(min=1e-6), o.abs().max().clamp(min=1e-6)
        mixed = w / peak_w
        mixed[: len(o)] = mixed[: len(o)] + gain * o / peak_o
        w = mixed
    return w, kind


class Teacher:
    """The frozen aiSFX trunk in float32 torch (BatchNorm folded: the same numbers, less work)."""

    def __init__(self, weights: str | Path | None = None) -> None:
        from core.aisfx_runtime import TorchTrunk
        from core.aisfx_weights import pretrained

        self.encoder = pretrained(weights)
        self.trunk = TorchTrunk(self.encoder.embedding_net)
        self.frontend = AisfxMel()
        self.block = AisfxConfig().block_frames

    @torch.inference_mode()
    def __call__(self, wave: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N,) 44.1-kHz wave -> ((T, 96) frames as the trunk reads them, (512, T/8) map)."""
        mel = self.frontend(wave)  # (T, 96)
        if len(mel) < self.block:  # zero-padded to one block, as AisfxEncoder pads a short clip
            mel = torch.nn.functional.pad(mel, (0, 0, 0, self.block - len(mel)))
        return mel, self.trunk(mel[None])[0]


def build(out_dir: Path, corpus: Path | None = CORPUS, sfx: Path | None = SFX, augment: int = 1,
          max_windows: int = 3, seed: int = 0, max_hours: float | None = None, log_every: int = 200) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    train, val, dropped = training_sounds(corpus, sfx)
    rng = random.Random(seed)
    rng.shuffle(train)  # shards finished before a stop are a fair sample
    teacher = Teacher()
    sr = teacher.frontend.config.sample_rate
    window_s = AisfxConfig().window_seconds
    summary: dict[str, Any] = {"dropped": dropped, "augment": augment, "max_windows": max_windows,
                               "window_seconds": window_s, "splits": {}}
    for split, sounds, aug in (("val", val, 0), ("train", train, augment)):
        sources = sorted({s.source for s in sounds})
        source_id = {s: i for i, s in enumerate(sources)}
        seconds = {"original": 0.0, "augmented": 0.0}  # of audio, this run
        entries = 0
        start = time.perf_counter()
        for shard, first in enumerate(range(0, len(sounds), SHARD // (1 + aug))):
            part = out_dir / f"{split}-{shard:03d}.safetensors"
            batch = sounds[first : first + SHARD // (1 + aug)]
            if part.is_file():
                idx = load_file(str(part))["index"]
                entries += len(idx)
                continue
            if max_hours and seconds["original"] / 3600 >= max_hours:
                break
            mels, maps, index = [], [], []
            frame, step = 0, 0
            for s in batch:
                try:
                    wave = load_audio(s.path, sr)
                except (OSError, ValueError, RuntimeError):
                    continue
                other = torch.zeros(0)
                if aug:  # the sound this one's windows are mixed with
                    try:
                        other = load_audio(sounds[rng.randrange(len(sounds))].path, sr)
                    except (OSError, ValueError, RuntimeError):
                        pass
                for w in windows(wave, sr, window_s, max_windows):
                    variants = [w]
                    if aug:
                        variants += [augmented(w, other, sr, rng)[0] for _ in range(aug)]
                    for v, x in enumerate(variants):
                        if not bool(x.abs().max() > 0):
                            continue
                        mel, fmap = teacher(x)
                        mels.append(mel.half())
                        maps.append(fmap.half())
                        index.append([frame, len(mel), step, source_id[s.source]])
                        frame, step = frame + len(mel), step + fmap.shape[1]
                        seconds["augmented" if v else "original"] += len(x) / sr
            save_file({"mel": torch.cat(mels), "map": torch.cat(maps, dim=1),
                       "index": torch.tensor(index, dtype=torch.long)}, str(part.with_suffix(".tmp")))
            part.with_suffix(".tmp").replace(part)
            entries += len(index)
            print(f"{split} shard {shard}: {first + len(batch)}/{len(sounds)} sounds, {entries} entries, "
                  f"{seconds['original'] / 3600:.2f} h original + {seconds['augmented'] / 3600:.2f} h augmented "
                  f"this run, {time.perf_counter() - start:.0f} s", flush=True)
        by_dataset: dict[str, int] = {}
        for s in sounds:
            by_dataset[s.dataset] = by_dataset.get(s.dataset, 0) + 1
        licenses: dict[str, str] = {}
        for s in sounds:
            licenses.setdefault(s.source, s.license)
        summary["splits"][split] = {"sounds": len(sounds), "entries": entries, "by_dataset": by_dataset,
                                    "sources": sources, "licenses": licenses, "seconds_this_run": seconds}
    (out_dir / "sources.json").write_text(json.dumps(summary, indent=1))
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.student_data", description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--corpus", default=str(CORPUS), help="the sfx caption corpus (training/sfx_corpus.py)")
    p.add_argument("--sfx", default=str(SFX), help="shared/data/sfx")
    p.add_argument("--augment", type=int, default=1, help="augmented entries per training window")
    p.add_argument("--max-windows", type=int, default=3, help="10-s windows per sound at most")
    p.add_argument("--max-hours", type=float, default=None, help="stop after this much original training audio")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    summary = build(Path(a.out_dir), Path(a.corpus) if a.corpus else None, Path(a.sfx) if a.sfx else None,
                    a.augment, a.max_windows, a.seed, a.max_hours)
    print(json.dumps({k: v for k, v in summary.items() if k != "splits"} | {
        s: {k: v for k, v in d.items() if k not in ("sources", "licenses")} for s, d in summary["splits"].items()},
        indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
