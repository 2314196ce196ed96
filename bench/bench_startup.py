"""Start-up of every command, cold and warm (issue 25 item 3). `python -m bench startup` (JSON to bench/out/).

Each command runs as a user runs it, in a process of its own (`python -m app ...`), on a fresh copy of the demo
library (resources/demo, 36 files). Cold: the first run, with Earshot's cache folder empty (XDG_CACHE_HOME points
at a new folder: the int8 graph and its calibration are made again), so it pays every one-time cost; warm: the
median of the next WARM_RUNS runs. `index` is timed on a new copy of the library each time (cold: empty cache;
warm: the cache built), the other commands on the library indexed once. Wall seconds and the peak RSS of the
process (wait4's ru_maxrss). The OS page cache is not dropped: "cold" is Earshot's cold, not the disk's. The
processes see no user models (XDG_DATA_HOME is a new folder too: bench/pinned.py), so each command's default
is the shipped model, as for a new user; `model` in the JSON names it.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import pinned
from bench.machine import cpu

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "resources" / "demo"
WARM_RUNS = 3
INDEXED = "Animals/horse-gallop.wav"  # `similar` on a file of the library: its stored vector
OUTSIDE = ROOT.parent / "shared" / "data" / "sfx" / "audio"  # `similar` on a file outside it: the audio tower


def timed(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run `python -m app ARGS`; wall seconds, peak RSS (MB) and the exit status."""
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "app", *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"earshot {' '.join(args)} exited {proc.returncode}: {err[-500:]}")
    return {"wall_s": round(wall, 2), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}


def outside_file() -> Path:
    return sorted(OUTSIDE.glob("*.wav"))[0]


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"cold": runs[0], "warm": {k: round(statistics.median(r[k] for r in runs[1:]), 2) for k in runs[0]}}


def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="earshot-bench-startup-") as tmp:
        tmp_path = Path(tmp)
        env = pinned.without_user_models({**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"),
                                          "QT_QPA_PLATFORM": "offscreen"}, tmp_path / "data")
        copies = iter(range(1000))

        def fresh_library() -> Path:
            dst = tmp_path / f"demo{next(copies)}"
            shutil.copytree(DEMO, dst, ignore=shutil.ignore_patterns(".earshot"))
            return dst

        results: dict[str, Any] = {"index": summary([timed(["index", str(fresh_library())], env)
                                                     for _ in range(1 + WARM_RUNS)])}
        shutil.rmtree(tmp_path / "cache", ignore_errors=True)  # the other commands start cold again
        library = fresh_library()
        subprocess.run([sys.executable, "-m", "app", "index", str(library)], cwd=ROOT, env=env, check=True,
                       capture_output=True)
        shutil.rmtree(tmp_path / "cache", ignore_errors=True)
        commands = {
            "version": ["--version"],
            "info": ["info"],
            "models": ["models"],
            "probe": ["probe", str(library / INDEXED)],
            "search": ["search", "a horse gallops", "--library", str(library)],
            "similar_indexed": ["similar", str(library / INDEXED), "--library", str(library)],
            "similar_outside": ["similar", str(outside_file()), "--library", str(library)],
        }
        for name, args in commands.items():
            results[name] = summary([timed(args, env) for _ in range(1 + WARM_RUNS)])
    return {"cpu": cpu(), **pinned.model_fields(*pinned.shipped(), pinned.SHIPPED), "commands": results,
            "notes": "cold: first run with Earshot's cache folder empty; warm: median of the next runs; "
                     "wall seconds and peak RSS per process; the OS page cache is not dropped"}


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=1))
