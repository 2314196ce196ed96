"""The speech models as the app runs them, on CUDA against the CPU (part of bench/gpu_check.sh): the Units tab's
session (a recording encoded block by block as the live path feeds it, then resynthesised) and the Words tab's
space (spoken words and typed words embedded, a term searched in a recording).

Both sides load the same checkpoint; the units should agree almost everywhere (a unit whose two nearest codes are
nearly tied may flip), the word vectors to float rounding, and every output must be finite.

    python3 bench/gpu_services_check.py UNITS.safetensors WORDS.safetensors FSDD_DIR [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from app.services.jobs import drain
from app.services.units.units_session import UnitsSession
from app.services.words.word_space import WordSpace
from core.inference import load_for_inference

WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def units_side(path: str, device: str, wavs: list[Path]) -> dict:
    """Every recording encoded and resynthesised on `device`: its units, resynthesis and seconds."""
    inf = load_for_inference(path, kind="units", device=device)
    session = UnitsSession(inf.model, resampler=inf.resampler, frontend=inf.frontend)
    drain(session.encode_file(wavs[0]))  # warm-up: the first call builds kernels and caches
    session.resynthesize()
    units, audio, start = [], [], time.perf_counter()
    for wav in wavs:
        units.append(drain(session.encode_file(wav)))
        audio.append(session.resynthesize())
    return {"units": units, "audio": audio, "seconds": time.perf_counter() - start,
            "speech_seconds": sum(len(a) for a in audio) / int(inf.model.config.inverter.sample_rate)}


def words_side(path: str, device: str, wavs: list[Path]) -> dict:
    space = WordSpace.from_checkpoint(path, device=device)
    return {"spoken": np.stack([space.embed_file(w) for w in wavs]),  # (N, D)
            "typed": np.stack([space.embed_text(w) for w in WORDS])}  # (10, D)


def recordings(fsdd: Path, n: int) -> list[Path]:
    """n FSDD recordings, one digit after another, of one speaker."""
    return [fsdd / "recordings" / f"{i % 10}_jackson_{i // 10}.wav" for i in range(n)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("units")
    ap.add_argument("words")
    ap.add_argument("fsdd", type=Path)
    ap.add_argument("--device", default="cuda", help="the side compared with the CPU (cpu tries the script here)")
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args()
    wavs = recordings(args.fsdd, 20)
    uc, ug = units_side(args.units, "cpu", wavs), units_side(args.units, args.device, wavs)
    same = [np.mean(np.asarray(a) == np.asarray(b)) if len(a) == len(b) else 0.0
            for a, b in zip(uc["units"], ug["units"], strict=True)]
    wc, wg = words_side(args.words, "cpu", wavs), words_side(args.words, args.device, wavs)
    spoken_cos = (wc["spoken"] * wg["spoken"]).sum(1) / np.linalg.norm(wc["spoken"], axis=1) / np.linalg.norm(
        wg["spoken"], axis=1)
    typed_cos = (wc["typed"] * wg["typed"]).sum(1) / np.linalg.norm(wc["typed"], axis=1) / np.linalg.norm(
        wg["typed"], axis=1)
    hits = (wg["spoken"] @ wg["typed"].T).argmax(1)  # (N,) the typed digit nearest each spoken one
    out = {
        "device": args.device, "recordings": len(wavs),
        "units_same_share_min": round(float(min(same)), 4), "units_same_share_mean": round(float(np.mean(same)), 4),
        "resynthesis_finite": bool(all(np.isfinite(a).all() and len(a) for a in ug["audio"])),
        "units_rtf_cpu": round(uc["seconds"] / uc["speech_seconds"], 4),
        "units_rtf_device": round(ug["seconds"] / ug["speech_seconds"], 4),
        "words_spoken_cosine_min": round(float(spoken_cos.min()), 6),
        "words_typed_cosine_min": round(float(typed_cos.min()), 6),
        "words_spoken_to_typed_top1_device": round(float(np.mean(hits == np.arange(len(wavs)) % 10)), 3),
    }
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    ok = (out["units_same_share_mean"] > 0.98 and out["resynthesis_finite"]
          and out["words_spoken_cosine_min"] > 0.999 and out["words_typed_cosine_min"] > 0.999)
    print("the services agree" if ok else f"SERVICES DIFFER between the CPU and {args.device}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
