"""Indexing benchmark over a library of mixed sample rates. `python -m bench indexing` prints JSON (bench/out/).

What is measured, exactly (the JSON says the same in `notes`):
- The library: N_PER_RATE clips of the sfx corpus (/work/shared/data/sfx/audio, real sound effects) for each of
  11,025 / 11,127 / 22,050 / 22,254 / 44,100 / 48,000 Hz, every other one written as Ogg Vorbis, the rest as
  16-bit WAV. They are RESAMPLED COPIES of the corpus clips (made with the app's own resampler, libsoxr), since
  real files at 11,127 / 22,254 Hz are not in the corpus; the content is real, the rates are synthetic.
- Indexing: `SearchSession.index_job` (the app's real indexer: scan, hash, decode + resample + aiSFX front end
  and trunk + projection, names text channel (MiniLM), FAISS, SQLite) from scratch with the default retrieval
  model (resources/models/retrieval-default.safetensors), torch/FAISS on `search_threads()` threads and the aiSFX
  trunk on `trunk_threads()` workers (every core) as in the app, once per trunk backend (int8 = the default, onnx =
  fp32 ONNX Runtime, torch), each into a fresh catalog after the model's warm-up (which the app does when it
  loads the model, with the names' sentence encoder; its time is reported), then int8 once more: the first
  indexing of a process pays one-time costs (imports, first allocations), the last shows the steady state.
  The ONNX backends run `trunk_threads()` batches at once, each session single-threaded; torch one at a time.
  Real-time factor = seconds of audio indexed / wall seconds (target
  >= 100x on 2 cores); `cpu_s` is the process's CPU time, which shows the work when other jobs share the box.
- Decode only, per rate: the indexer's read path (`iter_blocks` at the model's rate and window length) over
  that rate's clips; audio seconds / wall seconds.
- Peak memory: ru_maxrss of the process (whole process: model + library) after the library is built and after
  indexing; and the tracemalloc peak (Python + numpy allocations) while decoding the whole library.
- A real-library-shaped set (`real_library`): every development search library (bench/data/search_libraries,
  with their original folders: one-shots, loops and ten 1-4-minute music tracks, Ogg and WAV at several rates;
  363 files up to stop 32, 537 with berusky2 from stop 33), indexed from scratch by a process of its own
  (bench/index_process.py: the process's first indexing, model loading included in its wall time and peak RSS),
  with the default (a long file's windows spread, embedding.LONG_FILE_WINDOWS) and with every window; and once
  more with the trunk's output replaced by zeros (`--zero-tower`): the floor no smaller sound tower can go below,
  which shows how much of the time the tower is.
- The machine: CPU model, the flags that decide its speed, load, and the measured float32 matmul peak.
- Before/after: decoding the 11,127 Hz and 22,254 Hz clips to the model's rate with the old path
  (libsndfile + torchaudio.functional.resample, whose kernel is built from the exact rate ratio) against the
  one audio path (`core.audio.decode`, libsoxr). The old path is run on OLD_PATH_CLIPS clips per rate.
"""

from __future__ import annotations

import os
import resource
import shutil
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import torch

from app.services.jobs import drain
from app.services.search.embedder import RetrievalEmbedder, search_threads, sentence_encoder_for, trunk_threads
from app.services.search.search_jobs import summarize
from app.services.search.session import SearchSession
from core.audio import audio_info, decode, iter_blocks, resample, write_audio

ROOT = Path(__file__).resolve().parents[1]
SFX = ROOT.parent / "shared" / "data" / "sfx" / "audio"
MODEL = ROOT / "resources" / "models" / "retrieval-default.safetensors"
RATES = (11025, 11127, 22050, 22254, 44100, 48000)
N_PER_RATE = 20
OLD_PATH_CLIPS = 2  # the old path takes seconds per clip at the odd rates
BACKENDS = ("int8", "onnx", "torch")  # the default ("auto" takes int8) first


def max_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # kB on Linux


def build_library(folder: Path) -> dict[int, list[Path]]:
    """N_PER_RATE corpus clips per rate, spread over the corpus, as resampled WAV / Ogg copies."""
    sources = sorted(SFX.glob("*.wav"))
    if len(sources) < N_PER_RATE * len(RATES):
        raise FileNotFoundError(f"{SFX}: need {N_PER_RATE * len(RATES)} clips, found {len(sources)}")
    picks = sources[:: len(sources) // (N_PER_RATE * len(RATES))][: N_PER_RATE * len(RATES)]
    by_rate: dict[int, list[Path]] = {r: [] for r in RATES}
    for i, src in enumerate(picks):
        rate = RATES[i % len(RATES)]
        d = decode(src)  # mono float32 at the clip's own rate
        x = np.clip(resample(d.audio, d.sample_rate, rate), -1.0, 1.0)
        ogg = (i // len(RATES)) % 2 == 1
        out = folder / f"{rate}_{i:03d}_{src.stem}.{'ogg' if ogg else 'wav'}"
        write_audio(out, x, rate)  # Ogg Vorbis or 16-bit WAV, from the extension
        by_rate[rate].append(out)
    return by_rate


def decode_throughput(by_rate: dict[int, list[Path]], sr: int, window_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    tracemalloc.start()
    for rate, files in by_rate.items():
        t0 = time.perf_counter()
        samples = sum(len(b) for f in files for b in iter_blocks(f, sr, window_s, pad_last=False))
        wall = time.perf_counter() - t0
        out[str(rate)] = {"files": len(files), "audio_s": round(samples / sr, 2), "wall_s": round(wall, 3),
                          "x_realtime": round(samples / sr / wall, 1)}
    out["tracemalloc_peak_mb"] = round(tracemalloc.get_traced_memory()[1] / 2**20, 1)
    tracemalloc.stop()
    return out


def old_decode(path: Path, sr: int) -> np.ndarray:
    """The decoder before the one audio path: libsndfile + torchaudio's exact-ratio sinc resampler."""
    import torchaudio.functional as AF

    d = decode(path)  # mono at the file's rate: the read without the resampler
    return AF.resample(torch.from_numpy(d.audio), d.sample_rate, sr).numpy()


def before_after(by_rate: dict[int, list[Path]], sr: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for rate in (11127, 22254):
        files = by_rate[rate][:OLD_PATH_CLIPS]
        seconds = sum(audio_info(f).duration for f in files)
        t0 = time.perf_counter()
        for f in files:
            old_decode(f, sr)
        old = time.perf_counter() - t0
        t0 = time.perf_counter()
        for f in files:
            decode(f, sr)
        new = time.perf_counter() - t0
        out[str(rate)] = {"clips": len(files), "audio_s": round(seconds, 2), "to_rate": sr,
                          "torchaudio_s_per_clip": round(old / len(files), 3),
                          "soxr_s_per_clip": round(new / len(files), 4), "speedup": round(old / max(new, 1e-9))}
    return out


def index_once(folder: Path, embedder: RetrievalEmbedder) -> dict[str, Any]:
    """Index `folder` from scratch; wall and CPU seconds (CPU time shows the work when other jobs share the box)."""
    session = SearchSession.open(folder, embedder)
    cpu0 = time.process_time()
    try:
        s = summarize(drain(session.index_job()))
    finally:
        session.close()
    out = {k: s[k] for k in ("files", "embedded", "failed", "windows", "audio_seconds", "elapsed_s", "x_realtime")}
    out["cpu_s"] = round(time.process_time() - cpu0, 2)
    out["failures"] = s["failures"][:5]
    return out


def real_library(tmp: Path) -> dict[str, Any]:
    """Index the development libraries (one folder each, original names) in fresh processes: default windows and
    every window."""
    import json
    import subprocess
    import sys

    from bench import search_libraries
    from bench.library_quality import CACHE

    folder = tmp / "real-library"
    for name in search_libraries.library_names():
        built = search_libraries.build(name, CACHE / "libraries", search_libraries.cache_dir(None), mixed=False,
                                       seed=0)
        shutil.copytree(built["folder"], folder / name, ignore=shutil.ignore_patterns(".earshot", "*.json"))
    out: dict[str, Any] = {}
    for label, extra in (("default windows", []), ("every window", ["--max-windows", "0"]),
                         ("default windows, no tower (floor)", ["--zero-tower"])):
        shutil.rmtree(folder / ".earshot", ignore_errors=True)
        run = subprocess.run([sys.executable, "-m", "bench.index_process", str(folder), *extra], cwd=ROOT,
                             capture_output=True, text=True, check=True)
        out[label] = json.loads(run.stdout.strip().splitlines()[-1])
    return out


def run() -> dict[str, Any]:
    from bench.machine import describe

    machine = describe()
    threads = search_threads()
    torch.set_num_threads(threads)
    embedder = RetrievalEmbedder.from_checkpoint(MODEL, name=MODEL.stem)
    sr, window_s = embedder.sample_rate, embedder.window_seconds
    by_backend: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="earshot-bench-indexing-") as tmp:
        folder = Path(tmp) / "library"
        folder.mkdir()
        by_rate = build_library(folder)
        rss_before = max_rss_mb()
        decoding = decode_throughput(by_rate, sr, window_s)
        # the default first (the process's first indexing: it pays the one-time costs), the others for comparison,
        # then the default again (steady state), each into a fresh catalog
        for run, backend in enumerate((*BACKENDS, BACKENDS[0])):
            copy = Path(tmp) / f"library-{run}"
            shutil.copytree(folder, copy)
            embedder.set_backend(backend)
            t0 = time.perf_counter()
            embedder.warm_up()  # as the app's model loading does (load_embedder / load_embedder_job), which
            sentence_encoder_for(embedder)  # also loads the names' sentence encoder (once per process)
            key = backend if run < len(BACKENDS) else f"{backend}, again in the same process"
            by_backend[key] = {"warm_up_s": round(time.perf_counter() - t0, 2), **index_once(copy, embedder)}
        rss_after = max_rss_mb()
        old_new = before_after(by_rate, sr)
        real = real_library(Path(tmp))
    return {
        "machine": machine,
        "model": f"{MODEL.stem} ({MODEL.name})", "model_rate": sr, "window_s": window_s,
        "torch_threads": threads, "trunk_threads": trunk_threads(), "load_average": os.getloadavg(),
        "rates": list(RATES), "clips_per_rate": N_PER_RATE, "formats": "alternating 16-bit WAV / Ogg Vorbis",
        "target_x_realtime": 100,
        "indexing": by_backend[BACKENDS[0]],
        "indexing_by_backend": by_backend,
        "decode_only": decoding,
        "peak_rss_mb": {"after_building_library": rss_before, "after_indexing": rss_after},
        "decode_before_after": old_new,
        "real_library": real,
        "notes": __doc__.split("What is measured, exactly (the JSON says the same in `notes`):")[1].strip(),
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
