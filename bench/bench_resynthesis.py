"""Units resynthesis against its input, through the Units tab's live path: loudness gap and spectral distance per
held-out set, for the shipped units model, before and after issue 41 (`python -m bench resynthesis`).

Each set's recordings are joined four at a time, one voice each, with 0.15-s pauses (a few words said into the
microphone) and fed to a `LiveStream` in the recorder's 512-sample blocks, as the tab feeds it; the voice is fitted
live, then the tab's resynthesis runs (Auto voice, the loudness stream) in three variants:

- `before`: as the tab made it until issue 41 (the inverter's own level, no envelope correction);
- `level`: brought to the input's speech level, peaks guarded (core/level_match.py);
- `after`: that, plus the fitted voice's envelope correction (core/voices.py `envelope_correction`): today's tab.

Per utterance: `level_gap_db`, the resynthesis's RMS over the input's speech minus the input's (gating blocks of
core/level_match.py); `lsd_db`, the log-spectral distance of `earshot eval units` (0-4 kHz, floored 60 dB under the
input's peak, every frame) between the two audios' spectrograms; `mcd_db`, mel-cepstral distortion over the
input's speech frames (within 40 dB of its loudest; c1..c24 of 40 mel bands over 0-4 kHz, the standard cepstrum
scale, 10/ln10 · sqrt(2 Σ Δc²)): the spectral envelope alone, blind to the level; `true_peak`. Means per set.

Sets: `dev` (FSDD's test split without theo: recordings no model trained on, by voices it did; the one to tune on)
and the held-out sets of docs/speech-eval.md, read with `earshot eval units`' loaders (training/speech_eval.py):
FSDD theo, kajongg, letters, numbers, saytime, mandarin (built by `python -m training.speech_corpus DIR
--only-split heldout-NAME` under EARSHOT_HELDOUT_SETS, default /work/data/heldout-sets/NAME) and hedgewars (the
corpus's `heldout` split, at EARSHOT_SPEECH_CORPUS, default /work/data/speech-corpus, else
EARSHOT_HELDOUT_SETS/hedgewars from `--only-split heldout`). A set not built here is reported as missing.
`python -m bench.bench_resynthesis --sets dev,theo --per-voice 3` runs some sets only.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torchaudio

from app.services.jobs import drain
from app.services.units.units_session import LiveStream, UnitsSession
from core.audio import decode
from core.level_match import speech_level_db, true_peak
from core.voices import log_spectral_distance

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "resources" / "models" / "units-default.safetensors"
FSDD = ROOT.parent / "shared" / "data" / "fsdd"
HELDOUT_SETS = Path(os.environ.get("EARSHOT_HELDOUT_SETS", "/work/data/heldout-sets"))
SPEECH_CORPUS = Path(os.environ.get("EARSHOT_SPEECH_CORPUS", "/work/data/speech-corpus"))
ITEMS_PER_UTTERANCE = 4
PAUSE_SECONDS = 0.15
PER_VOICE = 5  # utterances per voice at most
BLOCK = 512  # the recorder's block (app/ui/units_tab.py default_recorder)
VARIANTS = {"before": {"match_level": False, "correct_envelope": False},
            "level": {"match_level": True, "correct_envelope": False},
            "after": {}}
MCD_BANDS, MCD_ORDER, MCD_MAX_HZ, SPEECH_DB = 40, 24, 4000.0, 40.0


@dataclass(frozen=True)
class EvalSet:
    name: str
    folder: Path
    split: str
    speakers: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    held_out: bool = True


def eval_sets() -> list[EvalSet]:
    return [EvalSet("dev", FSDD, "test", exclude=("theo",), held_out=False),
            EvalSet("theo", FSDD, "all", speakers=("theo",)),
            EvalSet("kajongg", HELDOUT_SETS / "kajongg", "heldout-kajongg"),
            EvalSet("letters", HELDOUT_SETS / "letters", "heldout-letters"),
            EvalSet("numbers", HELDOUT_SETS / "numbers", "heldout-numbers"),
            EvalSet("saytime", HELDOUT_SETS / "saytime", "heldout-saytime"),
            EvalSet("mandarin", HELDOUT_SETS / "mandarin", "heldout-mandarin"),
            EvalSet("hedgewars", SPEECH_CORPUS if SPEECH_CORPUS.is_dir() else HELDOUT_SETS / "hedgewars", "heldout",
                    exclude=("fr_FR_f_Armelle",))]


def utterances(s: EvalSet, per_voice: int, sample_rate: int, resampler: str) -> list[tuple[str, np.ndarray]]:
    """(voice, audio) pairs: each voice's recordings in table order, ITEMS_PER_UTTERANCE at a time with pauses."""
    from training.speech_eval import Selection, list_eval_clips

    words, utts, _ = list_eval_clips([s.folder], Selection(s.split, s.speakers, s.exclude))
    by_voice: dict[str, list[Path]] = {}
    for clip in words + utts:
        by_voice.setdefault(clip.speaker, []).append(clip.path)
    pause = np.zeros(round(PAUSE_SECONDS * sample_rate), np.float32)
    out = []
    for voice, paths in sorted(by_voice.items()):
        step = max(1, len(paths) // (per_voice * ITEMS_PER_UTTERANCE))  # spread over the voice's items
        paths = paths[::step][: per_voice * ITEMS_PER_UTTERANCE]
        for i in range(0, len(paths), ITEMS_PER_UTTERANCE):
            pieces = [decode(p, sample_rate=sample_rate, resampler=resampler).audio for p in
                      paths[i:i + ITEMS_PER_UTTERANCE]]
            out.append((voice, np.concatenate([x for piece in pieces for x in (piece, pause)])))
    return out


def mel_cepstra(mag: torch.Tensor, floor: float, sample_rate: int) -> torch.Tensor:
    """(T, F) linear magnitudes -> (T, MCD_BANDS) cepstra of ln mel amplitude, ln|X| = c0 + 2 Σ c_k cos(...)."""
    bank = torchaudio.functional.melscale_fbanks(mag.shape[-1], 0.0, MCD_MAX_HZ, MCD_BANDS, sample_rate,
                                                 norm=None, mel_scale="htk").double()  # (F, B)
    log_amp = 0.5 * torch.log((mag.double().square() @ bank).clamp(min=floor))  # (T, B)
    k = torch.arange(MCD_BANDS, dtype=torch.float64)
    dct = torch.cos(math.pi / MCD_BANDS * (k[None, :] + 0.5) * k[:, None]) / MCD_BANDS  # (B, B)
    return log_amp @ dct.T


def mel_cepstral_distortion(pred: torch.Tensor, target: torch.Tensor, max_bin: int, sample_rate: int) -> float:
    """MCD (dB) of `pred` against `target` (T, F) over the target's speech frames, c1..c_MCD_ORDER."""
    energy = target[:, :max_bin].double().square().sum(dim=1)
    speech = energy > energy.max() * 10 ** (-SPEECH_DB / 10)
    if not speech.any() or float(energy.max()) <= 0:
        return float("nan")
    floor = float(target.double().square().sum(dim=1).max()) * 1e-10
    order = slice(1, MCD_ORDER + 1)
    diff = mel_cepstra(pred, floor, sample_rate)[:, order] - mel_cepstra(target, floor, sample_rate)[:, order]
    per_frame = (10 / math.log(10)) * torch.sqrt(2 * diff.square().sum(dim=1))
    return float(per_frame[speech].mean())


def live_units(session: UnitsSession, audio: np.ndarray) -> None:
    """The tab's live path: the recorder's blocks into a LiveStream, its job run to the end (voice fitted live)."""
    live = LiveStream(session, poll_seconds=0.001)
    job = live.run()
    for i in range(0, len(audio), BLOCK):
        live.put(audio[i:i + BLOCK])
        next(job)
    live.close()
    drain(job)


def scores(session: UnitsSession, audio: np.ndarray, out: np.ndarray) -> dict[str, float]:
    rate = session.sample_rate
    with torch.inference_mode():
        target, pred = session.spec(torch.from_numpy(audio)), session.spec(torch.from_numpy(out))
    n = min(len(target), len(pred))
    return {"level_gap_db": speech_level_db(out, rate, over=audio) - speech_level_db(audio, rate),
            "lsd_db": log_spectral_distance(pred[:n], target[:n], session.level_bins),
            "mcd_db": mel_cepstral_distortion(pred[:n], target[:n], session.level_bins, rate),
            "true_peak": true_peak(out)}


def measure_set(session: UnitsSession, s: EvalSet, per_voice: int) -> dict[str, Any]:
    """Every variant's mean scores over the set's utterances (and the worst level gap), its voices and size."""
    if not s.folder.is_dir():
        return {"missing": f"{s.folder} not found (docs/speech-eval.md says how to build it)"}
    utts = utterances(s, per_voice, session.sample_rate, session.resampler)
    rows: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    for _, audio in utts:
        live_units(session, audio)
        for variant, options in VARIANTS.items():
            torch.manual_seed(0)  # Griffin-Lim's random phase: the same start for every variant
            rows[variant].append(scores(session, audio, drain(session.resynthesize_job(**options)).audio))
    result: dict[str, Any] = {"held_out": s.held_out, "utterances": len(utts),
                              "voices": sorted({v for v, _ in utts}),
                              "audio_s": round(sum(len(a) for _, a in utts) / session.sample_rate, 1)}
    for variant, got in rows.items():
        means = {k: round(float(np.nanmean([r[k] for r in got])), 3) for k in got[0]} if got else {}
        if got:
            means["worst_level_gap_db"] = round(max((r["level_gap_db"] for r in got), key=abs), 2)
            means["true_peak"] = round(max(r["true_peak"] for r in got), 3)
        result[variant] = means
    return result


def load_session(path: Path = MODEL) -> UnitsSession:
    from core.audio import resampler_from_training
    from core.checkpoints import load_model
    from core.frontend_builder import units_frontend

    model, ckpt = load_model(path, kind="units")
    return UnitsSession(model, resampler=resampler_from_training(ckpt.training),
                        frontend=units_frontend(ckpt.features or None))


def run(sets: Sequence[str] = (), per_voice: int = PER_VOICE) -> dict[str, Any]:
    torch.set_num_threads(int(os.environ.get("EARSHOT_BENCH_THREADS", "1")))  # one thread, as the app runs it
    load_before, wall0, cpu0 = os.getloadavg()[0], time.perf_counter(), time.process_time()
    session = load_session(Path(os.environ.get("EARSHOT_BENCH_UNITS_MODEL", MODEL)))
    chosen = [s for s in eval_sets() if not sets or s.name in sets]
    result: dict[str, Any] = {"model": Path(os.environ.get("EARSHOT_BENCH_UNITS_MODEL", MODEL)).name,
                              "path": "LiveStream, 512-sample blocks, Auto voice, loudness stream",
                              "variants": {k: v or "the tab's defaults" for k, v in VARIANTS.items()},
                              "sets": {s.name: measure_set(session, s, per_voice) for s in chosen}}
    result.update(threads=torch.get_num_threads(), load_average_1min=round(load_before, 2),
                  load_average_1min_after=round(os.getloadavg()[0], 2),
                  wall_s=round(time.perf_counter() - wall0, 1), cpu_s=round(time.process_time() - cpu0, 1))
    return result


if __name__ == "__main__":
    from bench.results import write_result

    parser = argparse.ArgumentParser(prog="python -m bench.bench_resynthesis", description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="", help="comma-separated: " + ", ".join(s.name for s in eval_sets()))
    parser.add_argument("--per-voice", type=int, default=PER_VOICE, help="utterances per voice at most")
    args = parser.parse_args()
    write_result("bench_resynthesis", run([s for s in args.sets.split(",") if s], args.per_voice))
