"""`python -m bench.peak_memory [--checkout DIR] [--only NAME ...]`: the peak resident memory (of a process of
its own) of exporting long many-channel parts, probing a long take and refusing hostile model files
(issue 42 items 3 and 7). Prints one JSON object: MB per case, beside an idle process that imports the same.

Each case runs in a fresh `python -c` in DIR (default: this checkout) and reports its own VmHWM (Linux), so the same
script measures an older checkout too (`git archive COMMIT | tar -x -C DIR`). Inputs are made once under
bench/out/peak-memory: a 10-minute part of an 11-minute 6-channel Ogg Vorbis and of a stereo MP3 (encoded, a
minute or two), a 2-hour stereo WAV (sparse: a header and a hole), a 95 MB safetensors header (1.2 million
tensor entries, under the old 100 MiB cap) and a checkpoint whose one dtype is F128.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out" / "peak-memory"
SR = 48000


def _encoded(path: Path, channels: int, minutes: float, fmt: str, subtype: str) -> Path:
    """Tones a lossy encoder must work at, one per channel, written a second at a time."""
    from core.audio import frame_writer

    if path.exists():
        return path
    t = np.arange(SR) / SR
    with frame_writer(path, SR, channels, fmt, subtype) as write:
        for s in range(round(minutes * 60)):
            block = np.stack([0.2 * np.sin(2 * np.pi * (110 * (c + 1) + s % 7) * t) for c in range(channels)], 1)
            write(block.astype(np.float32))
    return path


def _sparse_wav(path: Path, seconds: float, channels: int) -> Path:
    data = round(seconds * SR) * channels * 2
    fmt = struct.pack("<HHIIHH", 1, channels, SR, SR * channels * 2, channels * 2, 16)
    with open(path, "wb") as fh:
        fh.write(b"RIFF" + struct.pack("<I", 36 + data) + b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt
                 + b"data" + struct.pack("<I", data))
        fh.truncate(44 + data)
    return path


def _hostile_models(folder: Path) -> tuple[Path, Path]:
    """(a file with a 95 MB JSON header, the shipped retrieval model with one tensor's dtype F128)."""
    from app.services.registry import default_models_dir

    folder.mkdir(parents=True, exist_ok=True)
    huge = folder / "huge.safetensors"
    if not huge.exists():
        entries = ",".join(f'"t{i}":{{"dtype":"F32","shape":[1],"data_offsets":[{4 * i},{4 * i + 4}]}}'
                           for i in range(1_200_000))
        text = ('{"__metadata__":{"kind":"retrieval","config":"{}"},' + entries + "}").encode()
        text = text.ljust(95_000_000, b" ")
        huge.write_bytes(struct.pack("<Q", len(text)) + text + bytes(4 * 1_200_000))
    f128 = folder / "f128.safetensors"
    if not f128.exists():
        raw = (default_models_dir() / "retrieval-default.safetensors").read_bytes()
        n = struct.unpack("<Q", raw[:8])[0]
        header = json.loads(raw[8:8 + n])
        header["text_proj.0.bias"]["dtype"] = "F128"
        text = json.dumps(header).encode()
        f128.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n:])
    return huge, f128


def _library(root: Path) -> Path:
    """Two tones, indexed with the shipped model: `search` reads the model only for an indexed library."""
    from core.audio import save_wav

    if not (root / ".earshot").exists():
        root.mkdir(parents=True, exist_ok=True)
        for hz in (220, 440):
            save_wav(root / f"tone_{hz}.wav", 0.3 * np.sin(2 * np.pi * hz * np.arange(SR) / SR), SR)
        subprocess.run([sys.executable, "-m", "app.cli", "index", str(root)], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return root


def cases() -> dict[str, str]:
    """Name -> the Python a fresh process runs (in the checkout measured)."""
    OUT.mkdir(parents=True, exist_ok=True)
    lib = _library(OUT / "lib")
    ogg = _encoded(OUT / "surround6.ogg", 6, 11, "OGG", "VORBIS")
    mp3 = _encoded(OUT / "stereo.mp3", 2, 11, "MP3", "MPEG_LAYER_III")
    wav = _sparse_wav(OUT / "take-2h.wav", 2 * 3600, 2)
    huge, f128 = _hostile_models(OUT / "models")
    parts = OUT / "parts"
    parts.mkdir(exist_ok=True)
    export = ("from pathlib import Path; from app.services.search.excerpt import write_excerpt; "
              "write_excerpt(Path({src!r}), 30.0, 630.0, Path({out!r}), fsync=False)")
    cli = "import sys; from app.cli.main import main; sys.argv[0] = 'earshot'; sys.exit(main({argv!r}))"
    return {
        "idle (imports the export and the CLI)": "import app.services.search.excerpt, app.cli.main",
        "export 10 min of a 6-channel Ogg": export.format(src=str(ogg), out=str(parts)),
        "export 10 min of a stereo MP3": export.format(src=str(mp3), out=str(parts)),
        "earshot probe of a 2-hour WAV": cli.format(argv=["probe", str(wav)]),
        "earshot models with a 95 MB header in the user folder": (
            "import app.services.registry as r; from pathlib import Path; "
            f"r.user_models_dir = lambda: Path({str(huge.parent)!r}); "
            + cli.format(argv=["models"])),
        "earshot search --model <95 MB header>": cli.format(argv=["search", "door", "--library", str(lib),
                                                                  "--model", str(huge)]),
        "earshot search --model <F128 dtype>": cli.format(argv=["search", "door", "--library", str(lib),
                                                                "--model", str(f128)]),
    }


_REPORT = """
import atexit, os
def _hwm():  # the process's own peak (VmHWM): ru_maxrss of a child counts its parent's peak from before the fork
    with open("/proc/self/status") as f, open(os.environ["PEAK_MEMORY_OUT"], "w") as out:
        out.write(next(line.split()[1] for line in f if line.startswith("VmHWM:")))
atexit.register(_hwm)
"""


def peak_mb(code: str, checkout: Path) -> tuple[float, float, int]:
    """(peak RSS in MB, seconds, exit status) of `python -c code` run in `checkout` (Linux: /proc)."""
    report = OUT / "peak.kb"
    report.unlink(missing_ok=True)
    start = time.perf_counter()
    rc = subprocess.run([sys.executable, "-c", _REPORT + code], cwd=checkout, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        env={**os.environ, "PYTHONPATH": str(checkout), "PEAK_MEMORY_OUT": str(report)}).returncode
    seconds = time.perf_counter() - start
    return int(report.read_text()) / 1024, seconds, rc


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkout", type=Path, default=ROOT, help="the source tree to measure (default: this one)")
    p.add_argument("--only", nargs="*", default=None, help="the cases whose names contain these words")
    args = p.parse_args()
    out = {"checkout": str(args.checkout), "cases": {}}
    for name, code in cases().items():
        if args.only and not any(w in name for w in args.only):
            continue
        mb, seconds, rc = peak_mb(code, args.checkout)
        out["cases"][name] = {"peak_rss_mb": round(mb, 1), "seconds": round(seconds, 2), "exit": rc}
        print(f"{name}: {mb:.0f} MB, {seconds:.1f} s, exit {rc}", file=sys.stderr)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
