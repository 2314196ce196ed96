"""Find-similar on the sfx val split: the shipped default retrieval model's sound channel vs the frozen aiSFX
encoder (Ma & Lerch 2022, CC BY 4.0 weights from the `aisfx` wheel), untrained on our data.

Metric (as issue 12 states it): every val clip that shares its caption text with at least one other val clip is
a query; the other val clips are ranked by cosine similarity of their sound embeddings (the query itself
excluded); mAP@10 = mean over queries of 1/rank of the best-ranked same-caption clip (0 past rank 10), R@10 the
share of queries with one in the top 10 (training.ranking.retrieval_metrics, pessimistic ties). Random ranking
is estimated by shuffled scores (mean of 20 draws).

Also reports the aiSFX sound channel's throughput (front end + CNN, whole clips, real-time factor) on the machine
it runs on. `python -m bench sfx` (JSON to bench/out/bench_sfx.json) or `python -m bench.bench_sfx [DATA_DIR]`.

With `--projection` (or EARSHOT_BENCH_PROJECTION=1) it also fits the retrieval model `aisfx_retrieval()` on
precomputed features (frozen aiSFX tower, frozen mean-pooled MiniLM, 2-layer projections, NT-Xent) on sfx
train for a FIXED number of epochs (no selection on val) and reports val text-to-audio mAP@10 / R@10 (a clip
is correct when any of its captions has the query's text) next to the current default's.
"""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from core import aisfx_weights
from core.checkpoints import load_model
from models.frontends import AisfxMel, PasstMel, frontend_from_dict
from models.retrieval import RetrievalModel, aisfx_retrieval, contrastive_loss
from training.caption_data import load_audio
from training.ranking import correct_from_captions, retrieval_metrics

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = ROOT / "resources" / "models" / "retrieval-default.safetensors"
SFX = ROOT.parent / "shared" / "data" / "sfx"


def val_clips(data_dir: Path, split: str = "val") -> tuple[list[Path], list[str]]:
    with open(data_dir / "captions.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("split") == split]
    return [data_dir / r["path"] for r in rows], [" ".join(r["caption"].lower().split()) for r in rows]


def find_similar_metrics(emb: torch.Tensor, captions: list[str], seed: int = 0) -> dict[str, float]:
    """(N, D) clip embeddings -> find-similar metrics over the queries that have a same-caption clip."""
    emb = F.normalize(emb.double(), dim=-1)
    same = np.array([[a == b for b in captions] for a in captions])
    np.fill_diagonal(same, False)
    queries = np.flatnonzero(same.any(axis=1))
    sim = (emb @ emb.t()).numpy()
    np.fill_diagonal(sim, -np.inf)  # a clip is not "similar" to itself
    out = retrieval_metrics(sim[queries], same[queries])
    rng = np.random.default_rng(seed)
    random_map = []
    for _ in range(20):
        noise = rng.random(sim.shape)
        np.fill_diagonal(noise, -np.inf)
        random_map.append(retrieval_metrics(noise[queries], same[queries])["mAP@10"])
    return {"mAP@10": out["mAP@10"], "R@10": out["R@10"], "random_mAP@10": float(np.mean(random_map)),
            "queries": int(len(queries))}


@torch.inference_mode()
def default_model_embeddings(paths: list[Path], model_path: Path = DEFAULT_MODEL) -> torch.Tensor:
    model, ckpt = load_model(model_path, kind="retrieval")
    frontend = frontend_from_dict(ckpt.features) if ckpt.features.get("kind") else PasstMel()
    sr = frontend.config.sample_rate
    return torch.cat([model.embed_audio(frontend(load_audio(p, sr))[None]) for p in paths])


@torch.inference_mode()
def aisfx_embeddings(paths: list[Path], encoder: torch.nn.Module | None = None) -> tuple[torch.Tensor, float, float]:
    """(N, 1024) [mean ; max] block embeddings, seconds of audio, seconds of compute (decode excluded)."""
    encoder, frontend = encoder or aisfx_weights.pretrained(), AisfxMel()
    waves = [load_audio(p, frontend.config.sample_rate) for p in paths]
    start = time.perf_counter()
    emb = torch.cat([encoder(frontend(w)[None]) for w in waves])
    compute = time.perf_counter() - start
    return emb, sum(len(w) for w in waves) / frontend.config.sample_rate, compute


def _int8_trunk(encoder: torch.nn.Module, calibration: list[torch.Tensor]) -> Any:
    """The folded trunk quantised to int8 by ONNX Runtime (static, QDQ, per-channel weights, calibrated on real
    frames); a callable like core.aisfx_runtime's runners. Bench only: it loses quality (see the JSON)."""
    import tempfile

    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    from core.aisfx_runtime import export_onnx, fold_batchnorm

    class Frames(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter([{"frames": f[None].numpy()} for f in calibration])

        def get_next(self) -> dict | None:
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "fp32.onnx", Path(tmp) / "int8.onnx"
        src.write_bytes(export_onnx(fold_batchnorm(encoder.embedding_net, channels_last=False)))
        quantize_static(str(src), str(dst), Frames(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.log_severity_level = torch.get_num_threads(), 3
        session = ort.InferenceSession(str(dst), opts, providers=["CPUExecutionProvider"])
    return lambda f: torch.from_numpy(session.run(None, {"frames": f.float().contiguous().numpy()})[0])


@torch.inference_mode()
def speed_variants(paths: list[Path], threads: int = 2, rounds: int = 3) -> dict[str, Any]:
    """Throughput of the aiSFX sound channel in x real time (seconds of audio / seconds of compute; decode
    excluded) for every way of running it we tried, on two workloads of real audio:
    - `windows_10s`: 10-s library windows (consecutive val clips joined), 8 per batch, as the indexer embeds a
      long file;
    - `clips`: the val clips as they are (most are shorter than one 2.3-s block, which costs a whole block),
      one by one.
    Variants: the front end alone; the CNN block-wise as the package runs it (hop 50, as first shipped), with
    channels-last weights, with bf16 autocast; the CNN fully convolutional (one pass, blocks pooled from the
    shared map) in torch, with BatchNorm folded + channels-last (aisfx_runtime.TorchTrunk), in ONNX Runtime
    (OnnxTrunk: what the indexer uses) and ONNX Runtime int8 (static, calibrated); and end to end (front end
    + the indexer's runner). Each variant runs `rounds` times interleaved with the others and the best round
    counts: the machine is shared, so the order matters more than the numbers."""
    from core.aisfx_runtime import OnnxTrunk, TorchTrunk

    torch.set_num_threads(threads)
    encoder, frontend = aisfx_weights.pretrained(), AisfxMel()
    sr = frontend.config.sample_rate
    waves = [load_audio(p, sr) for p in paths]
    joined = torch.cat(waves)
    win = int(10 * sr)
    windows = [joined[i : i + win] for i in range(0, len(joined) - win + 1, win)][:8]
    if len(windows) < 8:  # short val split: repeat to a full batch
        windows = (windows * 8)[:8]
    work = {"windows_10s": [torch.stack(windows)], "clips": [w[None] for w in waves]}
    feats = {k: [frontend(w) for w in ws] for k, ws in work.items()}
    int8 = _int8_trunk(encoder, [f[0] for f in feats["clips"][:16]] + [feats["windows_10s"][0][0]])
    onnx, folded = OnnxTrunk(encoder.embedding_net), TorchTrunk(encoder.embedding_net)
    cl = aisfx_weights.pretrained().to(memory_format=torch.channels_last)

    def cnn(enc: torch.nn.Module, full: bool, runner: Any = None, bf16: bool = False) -> Any:
        def run(f: torch.Tensor) -> torch.Tensor:
            enc.config.fully_convolutional, enc.runner = full, runner
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                return enc(f)
        return run

    variants = {
        "frontend_only": None,
        "cnn_blockwise_hop50": cnn(encoder, False),
        "cnn_blockwise_channels_last": cnn(cl, False),
        "cnn_blockwise_bf16": cnn(encoder, False, bf16=True),
        "cnn_fullconv_torch": cnn(encoder, True),
        "cnn_fullconv_torch_folded_bn_channels_last": cnn(encoder, True, folded),
        "cnn_fullconv_onnxruntime": cnn(encoder, True, onnx),
        "cnn_fullconv_onnxruntime_int8": cnn(encoder, True, int8),
        "end_to_end_fullconv_onnxruntime": "e2e",
    }
    out: dict[str, Any] = {"threads": threads, "rounds": rounds}
    for name, ws in work.items():
        audio_s = sum(w.numel() for w in ws) / sr
        best = dict.fromkeys(variants, float("inf"))
        for _ in range(rounds):
            for v, fn in variants.items():
                start = time.perf_counter()
                for w, f in zip(ws, feats[name], strict=True):
                    if fn is None:
                        frontend(w)
                    elif fn == "e2e":
                        cnn(encoder, True, onnx)(frontend(w))
                    else:
                        fn(f)
                best[v] = min(best[v], time.perf_counter() - start)
        out[name] = {"audio_s": round(audio_s, 1), "items": len(ws) if name == "clips" else 8,
                     **{v: round(audio_s / t, 1) for v, t in best.items()}}
    encoder.config.fully_convolutional, encoder.runner = True, None
    return out


@torch.inference_mode()
def path_equivalence(paths: list[Path], captions: list[str]) -> dict[str, Any]:
    """Find-similar on sfx val with each way of computing the frozen aiSFX vector, and cosine to block-wise."""
    from core.aisfx_runtime import OnnxTrunk

    encoder, frontend = aisfx_weights.pretrained(), AisfxMel()
    feats = [frontend(load_audio(p, frontend.config.sample_rate))[None] for p in paths]
    emb: dict[str, torch.Tensor] = {}
    encoder.config.fully_convolutional = False
    emb["blockwise"] = torch.cat([encoder(f) for f in feats])
    encoder.config.fully_convolutional = True
    emb["fully_convolutional_torch"] = torch.cat([encoder(f) for f in feats])
    encoder.runner = OnnxTrunk(encoder.embedding_net)
    emb["fully_convolutional_onnxruntime"] = torch.cat([encoder(f) for f in feats])
    encoder.runner = _int8_trunk(encoder, [f[0] for f in feats[:16]])
    emb["fully_convolutional_onnxruntime_int8"] = torch.cat([encoder(f) for f in feats])
    out = {}
    for k, e in emb.items():
        cos = F.cosine_similarity(e, emb["blockwise"], dim=-1)
        out[k] = {"find_similar_mAP@10": round(find_similar_metrics(e, captions)["mAP@10"], 4),
                  "cos_to_blockwise_min": round(float(cos.min()), 4),
                  "cos_to_blockwise_mean": round(float(cos.mean()), 4)}
    return out


def text_to_audio(audio: torch.Tensor, text: torch.Tensor, captions: list[str]) -> dict[str, float]:
    """(N, E) clips, (N, E) their captions' vectors -> val text-to-audio metrics (same-text clips correct)."""
    sim = F.normalize(text.float(), dim=-1) @ F.normalize(audio.float(), dim=-1).t()
    m = retrieval_metrics(sim, correct_from_captions(captions, list(range(len(captions))), len(captions)))
    return {"mAP@10": m["mAP@10"], "R@10": m["R@10"]}


@torch.inference_mode()
def default_text_to_audio(paths: list[Path], captions: list[str]) -> dict[str, float]:
    model, _ = load_model(DEFAULT_MODEL, kind="retrieval")
    return text_to_audio(default_model_embeddings(paths), model.embed_text(captions), captions)


def fit_projection(train_paths: list[Path], train_caps: list[str], val_feats: torch.Tensor, val_caps: list[str],
                   epochs: int = 60, batch: int = 128, lr: float = 1e-3, seed: int = 0) -> dict[str, Any]:
    """Frozen aiSFX + frozen mean-pooled MiniLM; only the projections (and nothing else) train."""
    torch.manual_seed(seed)
    model = RetrievalModel(aisfx_retrieval())
    aisfx_weights.load_weights(model.audio_encoder)
    train_feats, _, compute_s = aisfx_embeddings(train_paths, model.audio_encoder.eval())
    with torch.inference_mode():
        text_train = torch.cat([model.text_encoder(train_caps[i : i + 256]) for i in range(0, len(train_caps), 256)])
        text_val = model.text_encoder(val_caps)
    params = [p for p in model.parameters() if p.requires_grad]
    assert all(n.startswith(("audio_proj", "text_proj")) for n, p in model.named_parameters() if p.requires_grad)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=1e-2)
    model.train()
    start = time.perf_counter()
    for _ in range(epochs):
        order = torch.randperm(len(train_caps))
        for i in range(0, len(order), batch):
            idx = order[i : i + batch]
            a = model.embed_audio_features(train_feats[idx].clone())
            t = F.normalize(model.text_proj(text_train[idx].clone()), dim=-1)
            loss = contrastive_loss(model.similarity(a, t), torch.arange(len(idx)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.inference_mode():
        audio_val = model.embed_audio_features(val_feats)
        text_v = F.normalize(model.text_proj(text_val), dim=-1)
    return {**text_to_audio(audio_val, text_v, val_caps), "epochs": epochs, "train_clips": len(train_caps),
            "final_train_loss": round(float(loss.detach()), 4), "fit_s": round(time.perf_counter() - start, 1),
            "train_feature_s": round(compute_s, 1)}


def run(data_dir: Path = SFX, projection: bool = False) -> dict[str, Any]:
    torch.set_num_threads(min(2, torch.get_num_threads()))
    paths, captions = val_clips(data_dir)
    result: dict[str, Any] = {"data": str(data_dir), "split": "val", "clips": len(paths),
                              "threads": torch.get_num_threads()}
    previous = ROOT / "resources" / "models" / "retrieval-passt-small.safetensors"
    if previous.is_file():  # the PaSST model the aiSFX default replaced
        result["previous_default_passt_small"] = find_similar_metrics(default_model_embeddings(paths, previous),
                                                                      captions)
    result["current_default"] = find_similar_metrics(default_model_embeddings(paths), captions)
    if aisfx_weights.find_checkpoint() is None:
        result["aisfx_frozen"] = {"skipped": aisfx_weights.HOW_TO_GET_WEIGHTS}
        return result
    emb, audio_s, compute_s = aisfx_embeddings(paths)
    result["aisfx_frozen"] = {
        "mean_max": find_similar_metrics(emb, captions),
        "mean": find_similar_metrics(emb[:, :512], captions),
        "max": find_similar_metrics(emb[:, 512:], captions),
        "audio_s": round(audio_s, 1), "compute_s": round(compute_s, 2),
        "x_real_time": round(audio_s / compute_s, 1),
    }
    result["paths"] = path_equivalence(paths, captions)
    result["speed"] = speed_variants(paths[:: max(1, len(paths) // 24)])
    if projection or os.environ.get("EARSHOT_BENCH_PROJECTION") == "1":
        train_paths, train_caps = val_clips(data_dir, "train")
        result["text_to_audio_val"] = {
            "current_default": default_text_to_audio(paths, captions),
            "aisfx_frozen_projection": fit_projection(train_paths, train_caps, emb, captions),
        }
    return result


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--projection"]
    print(json.dumps(run(Path(args[0]) if args else SFX, projection="--projection" in sys.argv), indent=1))
