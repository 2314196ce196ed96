"""Is the indexing row's time left honest? `python -m bench.eta_check [FOLDER ...]` prints JSON.

Indexes a fresh copy of each FOLDER (default: the indexing benchmark's library, 120 sfx clips at six rates as WAV
and Ogg, built as `bench/bench_indexing.py` builds it, and the `flare` library of `bench/library_quality.py`, real
Debian game sounds whose long music comes first) with the default retrieval model, loaded and warmed up as the app
does, and records every progress report. For 10 %, 25 % and 50 % of the files: the ETA the row showed then (the
first report past that share with an estimate) against the time the rest really took. Issue 24's done-when: within
+-30 %. Not a test: the numbers depend on the machine and its load (printed beside them).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from app.services.search.embedder import RetrievalEmbedder, cap_threads, sentence_encoder_for
from app.services.search.session import SearchSession
from bench.bench_indexing import build_library

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "resources" / "models" / "retrieval-default.safetensors"
FLARE = Path.home() / ".cache" / "earshot" / "bench-library-quality" / "libraries" / "flare"
SHARES = (0.10, 0.25, 0.50)


def run(folders: list[Path] | None = None) -> dict[str, Any]:
    cap_threads()
    embedder = RetrievalEmbedder.from_checkpoint(MODEL, name=MODEL.stem)
    embedder.warm_up()  # as the app's model loading does
    sentence_encoder_for(embedder)
    if folders:
        return {str(f): measure(f, embedder) for f in folders}
    with tempfile.TemporaryDirectory(prefix="earshot-eta-set-") as tmp:
        built = Path(tmp) / "indexing-benchmark"
        built.mkdir()
        build_library(built)
        out = {"indexing benchmark set": measure(built, embedder)}
    out["flare"] = measure(FLARE, embedder) if FLARE.is_dir() else "not built (python -m bench library_quality)"
    return out


def measure(folder: Path, embedder: RetrievalEmbedder) -> dict[str, Any]:
    """Index a fresh copy of `folder`; the ETA shown at each share of the files against the time really left."""
    with tempfile.TemporaryDirectory(prefix="earshot-eta-") as tmp:
        copy = Path(tmp) / "library"
        shutil.copytree(folder, copy, ignore=shutil.ignore_patterns(".earshot"))
        session = SearchSession.open(copy, embedder)
        seen: list[tuple[float, int, int, float | None, str]] = []
        try:
            job = session.index_job()
            for p in job:
                seen.append((time.monotonic(), p["files_done"], p["files_total"], p["eta_s"], p.get("phase", "")))
        finally:
            session.close()
    end = seen[-1][0]
    audio = [s for s in seen if s[4] == "audio"]
    total = audio[0][2] if audio else 0
    start = audio[0][0] if audio else end
    rows = []
    for share in SHARES:
        hit = next((s for s in audio if s[1] >= share * total and s[3] is not None), None)
        if hit is None:
            rows.append({"share": share, "eta_s": None})
            continue
        real = end - hit[0]
        rows.append({"share": share, "files_done": hit[1], "eta_s": round(hit[3], 1), "real_s": round(real, 1),
                     "error": round((hit[3] - real) / real, 3) if real > 0 else None})
    first = next((s for s in audio if s[3] is not None), None)
    return {"folder": str(folder), "files": total, "audio_pass_s": round(end - start, 1),
            "estimating_for_s": round(first[0] - start, 1) if first else None, "at": rows,
            "load_average": os.getloadavg(), "cpus": os.cpu_count()}


if __name__ == "__main__":
    print(json.dumps(run([Path(a) for a in sys.argv[1:]]), indent=2))
