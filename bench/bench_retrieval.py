"""Retrieval audio embedding on CPU: throughput (audio seconds per wall second) and peak memory, for the shipped
default model and full-size PaSST-N / PaSST-S (random weights: speed does not depend on them), by batch size,
and what inference options buy: inference_mode vs no_grad, bf16 autocast, dynamic int8 Linear layers, 1 vs 2
threads. Input: 10-s clips as the tower's front end makes them (PaSST log-mels; AisfxMel frames for an aiSFX
default; the front ends are benchmarked in bench_frontends); the torch tower, not the indexer's ONNX runner.

Peak memory: the process's peak resident set (VmHWM) is reset before each case through /proc/self/clear_refs
where Linux allows it; otherwise the ru_maxrss growth is reported. The allocator keeps memory that earlier
cases freed, so a later case's number is a lower bound on what it would need on its own.
A bar chart of the throughputs goes to bench/out/retrieval_throughput.png (bench/plot.py, pyqtgraph offscreen).
"""

from __future__ import annotations

import contextlib
import resource
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from bench.plot import bar_chart
from models.passt import PaSST, PasstConfig, passt_n, passt_s

CLIP_SECONDS = 10.0
DEFAULT = Path(__file__).resolve().parents[1] / "resources" / "models" / "retrieval-default.safetensors"


class AudioTower(nn.Module):
    """Sound tower + audio projection: the audio half of RetrievalModel.embed_audio, on `clip_shape` inputs (what
    the tower's front end makes of one 10-s clip)."""

    def __init__(self, encoder: nn.Module, proj: nn.Module, clip_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.audio_encoder, self.audio_proj, self.clip_shape = encoder, proj, clip_shape

    @classmethod
    def passt(cls, config: PasstConfig, embed_dim: int = 1024) -> AudioTower:
        """A PaSST tower (random weights) on 10-s PaSST log-mels."""
        return cls(PaSST(config), nn.Linear(config.embed_dim, embed_dim), (128, int(CLIP_SECONDS * 100)))

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        enc = self.audio_encoder  # PaSST averages its windows; the aiSFX towers pool their blocks themselves
        return F.normalize(self.audio_proj(enc.embed_windows(feats) if isinstance(enc, PaSST) else enc(feats)), dim=-1)


def default_tower() -> tuple[AudioTower, str]:
    if DEFAULT.is_file():
        from core.checkpoints import load_model
        from models.retrieval import audio_frontend

        model, _ = load_model(DEFAULT, kind="retrieval")
        frontend = audio_frontend(model.config)  # the default's tower may be aiSFX: its own frames, not PaSST's
        clip = frontend(torch.zeros(int(CLIP_SECONDS * frontend.config.sample_rate)))
        return AudioTower(model.audio_encoder, model.audio_proj, tuple(clip.shape)).eval(), DEFAULT.name
    from training.retrieval_train import cpu_small

    config = cpu_small().model
    return AudioTower.passt(config.audio, config.embed_dim).eval(), "cpu-small config (no checkpoint found)"


def _peak_kib() -> int:
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _rss_kib() -> int:
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def measure(fn: Callable[[], torch.Tensor], batch: int, reps: int) -> dict[str, float]:
    """Throughput after one warm-up call; peak memory over the warm-up and the timed calls, above the
    resident set before them (the model's weights and the input are already resident)."""
    reset = _reset_peak()
    base = _rss_kib() if reset else _peak_kib()
    fn()  # warm-up (allocations, kernels)
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    seconds = (time.perf_counter() - start) / reps
    return {
        "audio_s_per_s": round(batch * CLIP_SECONDS / seconds, 2),
        "ms_per_batch": round(1000 * seconds, 1),
        "peak_extra_mib": round((_peak_kib() - base) / 1024, 1),
    }


def case(model: nn.Module, batch: int, reps: int, mode: str = "inference_mode", bf16: bool = False,
         threads: int = 1) -> dict[str, float]:
    mel = torch.randn(batch, *model.clip_shape)
    ctx = torch.inference_mode if mode == "inference_mode" else torch.no_grad

    def run() -> torch.Tensor:
        with ctx(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            return model(mel)

    with _threads(threads):
        return measure(run, batch, reps)


def quantized(model: nn.Module) -> nn.Module:
    return torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)


def run() -> dict:
    torch.manual_seed(0)
    results: dict[str, dict] = {}
    tower, name = default_tower()
    results["models"] = {"default": name, "params_default": sum(p.numel() for p in tower.parameters()),
                         "clip_seconds": CLIP_SECONDS, "peak_extra_mib": "peak RSS above the RSS before the case"}
    for b in (1, 4, 8):
        results[f"default_b{b}"] = case(tower, b, reps=5)
    results["default_b8_no_grad"] = case(tower, 8, reps=5, mode="no_grad")
    results["default_b8_bf16"] = case(tower, 8, reps=3, bf16=True)
    results["default_b8_int8"] = case(quantized(tower), 8, reps=5)
    results["default_b8_2threads"] = case(tower, 8, reps=5, threads=2)

    n = AudioTower.passt(passt_n()).eval()
    results["models"]["params_passt_n"] = sum(p.numel() for p in n.parameters())
    for b in (1, 4):
        results[f"passt_n_b{b}"] = case(n, b, reps=1)
    results["passt_n_b1_no_grad"] = case(n, 1, reps=1, mode="no_grad")
    results["passt_n_b1_bf16"] = case(n, 1, reps=1, bf16=True)
    results["passt_n_b1_int8"] = case(quantized(n), 1, reps=1)
    results["passt_n_b1_2threads"] = case(n, 1, reps=1, threads=2)
    del n

    s = AudioTower.passt(passt_s()).eval()
    results["models"]["params_passt_s"] = sum(p.numel() for p in s.parameters())
    results["passt_s_b1"] = case(s, 1, reps=1)
    results["passt_s_b4"] = case(s, 4, reps=1)
    results["passt_s_b1_bf16"] = case(s, 1, reps=1, bf16=True)
    results["passt_s_b1_int8"] = case(quantized(s), 1, reps=1)
    cases = {k: v for k, v in results.items() if isinstance(v, dict) and "audio_s_per_s" in v}
    results["plot"] = str(bar_chart(Path("bench/out/retrieval_throughput.png"), list(cases),
                                    [c["audio_s_per_s"] for c in cases.values()],
                                    "Audio embedding throughput on CPU (10-s clips)", "audio s per wall s"))
    return results
