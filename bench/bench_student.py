"""Issue 25 item 1: the distilled student sound tower (models/aisfx_student.py, training/student_train.py) against
its teacher, the aiSFX tower of retrieval-default.

- Cost: multiply-accumulates per second of audio of each trunk on a 10-s library window (torch's
  FlopCounterMode, MACs = FLOPs / 2; the projection, ~1 MMAC per window, is left out of both), the trunk's x
  real time on one torch thread (float32, eval mode, no BatchNorm folding for either), the GFLOP/s that makes,
  and the machine's measured float32 matmul peak on one thread (bench/machine.py).
- Quality on sources never trained on: the sfx corpus's `test` packages (training/sfx_corpus.py; the student's
  cache and the teacher's projections never read them): text-to-audio mAP@10 / R@10 (every test clip's caption a
  query over all test clips, same-caption clips correct: bench_sfx_heldout.metrics) and find-similar mAP@10
  (every test clip with a same-caption partner a query: bench_sfx.find_similar_metrics), each clip's first 10 s
  as bench_sfx_heldout reads them. Also find-similar on the sfx `val` split (unseen clips of packages the
  training did see; the project's usual find-similar number), whole clips as bench_sfx reads them.
  Random baselines beside them. Both models run in float32 torch on the same frames.
- The ship rule (issue 25): the student may become the default only if both held-out mAP@10s are within 5 %
  (relative) of the teacher's.

    python -m bench.bench_student [--student CKPT] [--corpus DIR] [--max-clips N]   (JSON to bench/out/)
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from bench.bench_sfx import DEFAULT_MODEL, ROOT, SFX, find_similar_metrics, val_clips
from bench.bench_sfx_heldout import CORPUS, MAX_SECONDS, metrics, random_metrics
from bench.machine import cpu, matmul_gflops
from bench.results import write_result
from core.checkpoints import load_model
from models.frontends import AisfxMel
from training.caption_data import load_audio

SHIPPED_STUDENT = ROOT / "resources" / "models" / "retrieval-student.safetensors"
TRAINED_STUDENT = Path("/work/data/student/retrieval-student.safetensors")
WINDOW_FRAMES = 431  # a 10-s window at 44.1 kHz / hop 1024 (centred frames)
SHIP_TOLERANCE = 0.05


def student_model() -> Path:
    return SHIPPED_STUDENT if SHIPPED_STUDENT.is_file() else TRAINED_STUDENT


def trunk_macs_per_second(trunk: torch.nn.Module, frames: int = WINDOW_FRAMES) -> float:
    """MACs per second of audio of `trunk.feature_map` on one window of `frames` frames."""
    x = torch.randn(1, frames, 96)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        trunk.feature_map(x)
    seconds = frames * AisfxMel().config.hop_length / AisfxMel().config.sample_rate
    return counter.get_total_flops() / 2 / seconds


@torch.inference_mode()
def trunk_speed(trunk: torch.nn.Module, frames: int = WINDOW_FRAMES, repeats: int = 20) -> float:
    """Seconds per window of `trunk.feature_map` on the current torch threads (best of `repeats`)."""
    x = torch.randn(1, frames, 96)
    trunk.feature_map(x)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        trunk.feature_map(x)
        best = min(best, time.perf_counter() - start)
    return best


def cost(teacher: Path, student: Path) -> dict[str, Any]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out: dict[str, Any] = {"window_s": round(WINDOW_FRAMES * 1024 / 44100, 3), "threads": 1}
        for name, path in (("teacher", teacher), ("student", student)):
            model, _ = load_model(path, kind="retrieval")
            net = model.audio_encoder.embedding_net.eval()
            macs = trunk_macs_per_second(net)
            per_window = trunk_speed(net)
            out[name] = {"MMAC_per_audio_s": round(macs / 1e6, 1),
                         "params_M": round(sum(p.numel() for p in net.parameters()) / 1e6, 3),
                         "x_real_time_1_thread": round(WINDOW_FRAMES * 1024 / 44100 / per_window, 1),
                         "GFLOPs_achieved": round(2 * macs * WINDOW_FRAMES * 1024 / 44100 / per_window / 1e9, 2)}
        out["mac_ratio"] = round(out["teacher"]["MMAC_per_audio_s"] / out["student"]["MMAC_per_audio_s"], 2)
        out["speed_ratio"] = round(out["student"]["x_real_time_1_thread"] / out["teacher"]["x_real_time_1_thread"], 2)
        out["matmul_peak_GFLOPs_1_thread"] = round(matmul_gflops(1), 1)
        return out
    finally:
        torch.set_num_threads(before)


def corpus_clips(corpus: Path, split: str, max_clips: int | None) -> tuple[list[Path], list[str]]:
    with open(corpus / "captions.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["split"] == split]
    if max_clips and len(rows) > max_clips:  # evenly spread: every package keeps its share
        rows = [rows[int(i * len(rows) / max_clips)] for i in range(max_clips)]
    return [corpus / r["path"] for r in rows], [" ".join(r["caption"].lower().split()) for r in rows]


def frames_of(paths: list[Path], max_seconds: float | None) -> tuple[list[torch.Tensor], list[int]]:
    """AisfxMel frames of each readable clip (its first `max_seconds`), and the indices that were readable."""
    frontend, frames, kept = AisfxMel(), [], []
    sr = frontend.config.sample_rate
    for i, p in enumerate(paths):
        try:
            wave = load_audio(p, sr)
        except (OSError, ValueError, RuntimeError):
            continue
        frames.append(frontend(wave[: int(max_seconds * sr)] if max_seconds else wave))
        kept.append(i)
    return frames, kept


@torch.inference_mode()
def embed(model: torch.nn.Module, frames: list[torch.Tensor]) -> torch.Tensor:
    """The retrieval model's projected unit vectors of each clip's frames, one clip at a time (as
    bench_sfx.default_model_embeddings runs it)."""
    return torch.cat([model.embed_audio(f[None]) for f in frames])


@torch.inference_mode()
def text_vectors(model: torch.nn.Module, captions: list[str]) -> torch.Tensor:
    return torch.cat([model.embed_text(captions[i : i + 256]) for i in range(0, len(captions), 256)])


def quality(teacher: Path, student: Path, corpus: Path, sfx: Path, max_clips: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    paths, captions = corpus_clips(corpus, "test", max_clips)
    frames, kept = frames_of(paths, MAX_SECONDS)
    captions = [captions[i] for i in kept]
    packages = {paths[i].parent.name for i in kept}
    test: dict[str, Any] = {"clips": len(captions), "packages": len(packages),
                            "audio_hours": round(sum(len(f) for f in frames) * 1024 / 44100 / 3600, 3),
                            "random": random_metrics(captions)}
    similar: dict[str, Any] = {}
    models: dict[str, torch.nn.Module] = {}
    for name, path in (("teacher", teacher), ("student", student)):
        start = time.perf_counter()  # loading included, as when each model was loaded for this alone
        models[name] = load_model(path, kind="retrieval")[0]
        audio = embed(models[name], frames)
        embed_s = round(time.perf_counter() - start, 1)
        # each model's own text half: a student whose projections were fitted on its features has its own
        text = text_vectors(models[name], captions)
        test[name] = metrics(audio, text, captions) | {"embed_s": embed_s}
        similar[name] = find_similar_metrics(audio, captions)
    out["text_to_audio_test_packages"] = test
    out["find_similar_test_packages"] = similar
    vpaths, vcaptions = val_clips(sfx)
    vframes, vkept = frames_of(vpaths, None)
    vcaptions = [vcaptions[i] for i in vkept]
    out["find_similar_sfx_val"] = {name: find_similar_metrics(embed(model, vframes), vcaptions)
                                   for name, model in models.items()}
    t_t2a = test["teacher"]["mAP@10"]
    s_t2a = test["student"]["mAP@10"]
    t_fs, s_fs = similar["teacher"]["mAP@10"], similar["student"]["mAP@10"]
    out["ship_rule"] = {
        "text_to_audio_relative": round(s_t2a / t_t2a, 4) if t_t2a else None,
        "find_similar_relative": round(s_fs / t_fs, 4) if t_fs else None,
        "tolerance": SHIP_TOLERANCE,
        "met": bool(t_t2a and t_fs and s_t2a >= (1 - SHIP_TOLERANCE) * t_t2a and s_fs >= (1 - SHIP_TOLERANCE) * t_fs),
    }
    return out


def run(student: Path | None = None, corpus: Path = CORPUS, sfx: Path = SFX, max_clips: int | None = None,
        teacher: Path = DEFAULT_MODEL) -> dict[str, Any]:
    student = student or student_model()
    result: dict[str, Any] = {"teacher": str(teacher), "student": str(student), "cpu": cpu()}
    if not student.is_file():
        return result | {"skipped": f"no student checkpoint at {student} (python -m training.student_train)"}
    result["cost"] = cost(teacher, student)
    if (corpus / "captions.csv").is_file():
        torch.set_num_threads(min(2, torch.get_num_threads()))
        result["quality"] = quality(teacher, student, corpus, sfx, max_clips)
    else:
        result["quality"] = f"skipped: no corpus at {corpus} (python -m training.sfx_corpus)"
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--student", help="the student retrieval checkpoint (default: resources' one, else "
                                     f"{TRAINED_STUDENT})")
    p.add_argument("--teacher", default=str(DEFAULT_MODEL))
    p.add_argument("--corpus", default=str(CORPUS))
    p.add_argument("--sfx", default=str(SFX))
    p.add_argument("--max-clips", type=int, help="at most this many test clips (evenly spread)")
    p.add_argument("--threads", type=int, default=1, help="torch threads for the quality part")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    result = run(Path(a.student) if a.student else None, Path(a.corpus), Path(a.sfx), a.max_clips, Path(a.teacher))
    write_result("bench_student", result, indent=1)


if __name__ == "__main__":
    main()
