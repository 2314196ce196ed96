"""Issue 12's side-by-side table. On the package-held-out test split of the caption corpus (training/sfx_corpus.py:
sounds from source packages never trained on, never used to select anything): text-to-audio mAP@10 and R@10 of
random ranking, the current default (the PaSST model, kept as resources/models/retrieval-passt-small once
replaced) and the new model (`--new`, e.g. the aiSFX retrieval model made by `earshot train retrieval --preset
aisfx --data CORPUS`, its epoch selected on the corpus's val split). On the sfx val split (shared/data/sfx):
find-similar mAP@10 (same-caption clips, bench/bench_sfx.find_similar_metrics) of the current and the new sound
channel, i.e. the projected vectors the app's "find similar" ranks by.

The aiSFX features of the corpus are its precomputed frozen features (`python -m training.sfx_corpus OUT
--no-midi --no-tts --no-debian --embed-aisfx`: each clip's first 10 s, block-wise path); only clips whose
features exist are used, in every split and for every model (counts in the JSON). Metric: each test clip's
caption is a query; a clip is correct when it has the same caption text (training.ranking, pessimistic ties).
The PaSST model reads the same first 10 s of each clip. `--fit` also runs the earlier in-bench projection fit.

    python -m bench.bench_sfx_heldout [CORPUS_DIR] --new CKPT [--current CKPT]   (JSON to stdout and bench/out/)
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from bench.bench_sfx import DEFAULT_MODEL, ROOT
from bench.results import write_result
from core import aisfx_weights
from core.checkpoints import load_model, save_checkpoint
from models.frontends import AisfxMel, PasstMel, frontend_from_dict, frontend_to_dict
from models.retrieval import RetrievalModel, aisfx_retrieval
from training.caption_data import load_audio
from training.ranking import correct_from_captions, retrieval_metrics

CORPUS = Path("/work/data/sfx-corpus")
MAX_SECONDS = 10.0


def load_features(corpus: Path) -> dict[str, tuple[torch.Tensor, list[str], list[str]]]:
    """split -> ((n, 1024) features, captions, paths) of the clips whose features were precomputed."""
    if not (corpus / "captions.csv").is_file():
        raise SystemExit(f"{corpus}: no caption corpus (captions.csv); build it with python -m training.sfx_corpus "
                         f"{corpus} --no-midi --no-tts --no-debian --embed-aisfx first")
    with open(corpus / "captions.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    feats, idx = [], []
    for part in sorted((corpus / "aisfx").glob("part-*.safetensors")):
        d = load_file(str(part))
        feats.append(d["features"])
        idx += d["rows"].tolist()
    if not idx:
        raise SystemExit(f"{corpus}/aisfx: no precomputed features; run python -m training.sfx_corpus {corpus} "
                         "--no-midi --no-tts --no-debian --embed-aisfx first")
    allf = torch.cat(feats)
    first = {i: j for j, i in reversed(list(enumerate(idx)))}  # a row embedded twice counts once
    out = {}
    for split in ("train", "val", "test"):
        keep = [j for i, j in sorted(first.items()) if rows[i]["split"] == split]
        out[split] = (allf[keep], [rows[idx[j]]["caption"] for j in keep], [rows[idx[j]]["path"] for j in keep])
    return out


def metrics(audio: torch.Tensor, text: torch.Tensor, captions: list[str]) -> dict[str, float]:
    """(N, E) clips, (N, E) their own captions' vectors -> mAP@10, R@10 (same-text clips correct)."""
    sim = F.normalize(text.float(), dim=-1) @ F.normalize(audio.float(), dim=-1).t()
    m = retrieval_metrics(sim, correct_from_captions(captions, list(range(len(captions))), len(captions)))
    return {"mAP@10": round(m["mAP@10"], 4), "R@10": round(m["R@10"], 4)}


def random_metrics(captions: list[str], draws: int = 20, seed: int = 0) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    correct = correct_from_captions(captions, list(range(len(captions))), len(captions))
    ms = [retrieval_metrics(rng.random(correct.shape), correct) for _ in range(draws)]
    return {"mAP@10": round(float(np.mean([m["mAP@10"] for m in ms])), 4),
            "R@10": round(float(np.mean([m["R@10"] for m in ms])), 4)}


@torch.inference_mode()
def default_metrics(corpus: Path, paths: list[str], captions: list[str], path: Path = DEFAULT_MODEL
                    ) -> dict[str, float]:
    model, ckpt = load_model(path, kind="retrieval")
    frontend = frontend_from_dict(ckpt.features) if ckpt.features.get("kind") else PasstMel()
    sr = frontend.config.sample_rate
    audio = torch.cat([model.embed_audio(frontend(load_audio(corpus / p, sr)[: int(MAX_SECONDS * sr)])[None])
                       for p in paths])
    text = torch.cat([model.embed_text(captions[i : i + 256]) for i in range(0, len(captions), 256)])
    return metrics(audio, text, captions)


def multi_positive_loss(sim: torch.Tensor, caption_ids: torch.Tensor) -> torch.Tensor:
    """Symmetric NT-Xent over a (B, B) clip x caption matrix where clips sharing a caption text are positives
    of each other (corpus captions repeat: "a note on a piano"); with unique captions it is the CLIP loss."""
    same = caption_ids[:, None] == caption_ids[None, :]  # (B, B)
    return -(sim.log_softmax(dim=0)[same].mean() + sim.log_softmax(dim=1)[same].mean()) / 2


def fit(data: dict[str, tuple[torch.Tensor, list[str], list[str]]], epochs: int = 40, batch: int = 128,
        lr: float = 1e-3, seed: int = 0) -> tuple[RetrievalModel, dict[str, Any]]:
    """Projections on frozen features; the epoch with the best val mAP@10 is kept."""
    torch.manual_seed(seed)
    model = RetrievalModel(aisfx_retrieval())
    (tr_a, tr_c, _), (va_a, va_c, _) = data["train"], data["val"]
    with torch.inference_mode():
        text = {c: v for caps in (tr_c, va_c, data["test"][1]) for c, v in
                zip(caps, torch.cat([model.text_encoder(caps[i : i + 256]) for i in range(0, len(caps), 256)]),
                    strict=True)}
    tr_t = torch.stack([text[c] for c in tr_c])
    ids = {c: i for i, c in enumerate(dict.fromkeys(tr_c))}
    tr_ids = torch.tensor([ids[c] for c in tr_c])
    va_t = torch.stack([text[c] for c in va_c])
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=1e-2)
    best, best_state, history, start = -1.0, None, [], time.perf_counter()
    for _ in range(epochs):
        model.train()
        order = torch.randperm(len(tr_c))
        for i in range(0, len(order), batch):
            idx = order[i : i + batch]
            a = model.embed_audio_features(tr_a[idx])
            t = F.normalize(model.text_proj(tr_t[idx]), dim=-1)
            loss = multi_positive_loss(model.similarity(a, t), tr_ids[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.inference_mode():
            val = metrics(model.embed_audio_features(va_a), F.normalize(model.text_proj(va_t), dim=-1), va_c)
        history.append(val["mAP@10"])
        if val["mAP@10"] > best:
            best, best_state = val["mAP@10"], {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(best_state)
    model.eval()
    return model, {"epochs": epochs, "best_epoch": int(np.argmax(history)) + 1, "val_mAP@10": best,
                   "val_history": history, "fit_s": round(time.perf_counter() - start, 1), "lr": lr,
                   "batch": batch}


PASST_SMALL = ROOT / "resources" / "models" / "retrieval-passt-small.safetensors"


def current_model() -> Path:
    """The model the new default replaces: the PaSST one, kept as retrieval-passt-small once replaced."""
    return PASST_SMALL if PASST_SMALL.is_file() else DEFAULT_MODEL


@torch.inference_mode()
def model_metrics(path: Path, data: dict[str, tuple[torch.Tensor, list[str], list[str]]], corpus: Path
                  ) -> dict[str, float]:
    """Test-split metrics of a retrieval checkpoint: aiSFX ones on the precomputed frozen features (the tower's
    weights in the checkpoint are the published ones), PaSST ones on the first 10 s of each clip."""
    model, _ = load_model(path, kind="retrieval")
    te_a, te_c, te_p = data["test"]
    if model.config.audio_tower == "aisfx":
        text = torch.cat([model.embed_text(te_c[i : i + 256]) for i in range(0, len(te_c), 256)])
        return metrics(model.embed_audio_features(te_a), text, te_c)
    return default_metrics(corpus, te_p, te_c, path)


def run(corpus: Path = CORPUS, new: Path | None = None, current: Path | None = None, save: Path | None = None,
        fit_here: bool = False, sfx: Path | None = None) -> dict[str, Any]:
    """The side-by-side table of issue 12: test split (unseen packages) text-to-audio for random, the current
    default and the new model; find-similar on sfx val for the current and the new sound channel."""
    from bench.bench_sfx import SFX, default_model_embeddings, find_similar_metrics, val_clips

    torch.set_num_threads(min(2, torch.get_num_threads()))
    current = current or current_model()
    if new is None and current == PASST_SMALL:  # replaced: the new model is the shipped default
        new = DEFAULT_MODEL
    data = load_features(corpus)
    result: dict[str, Any] = {"corpus": str(corpus), "clips_with_features": {k: len(v[1]) for k, v in data.items()},
                              "clips_in_corpus": sum(1 for _ in open(corpus / "captions.csv")) - 1,
                              "current": str(current), "new": str(new) if new else None}
    te_a, te_c, te_p = data["test"]
    result["test_packages"] = len({p.split("/")[1] for p in te_p})
    result["test"] = {"random": random_metrics(te_c), "current": model_metrics(current, data, corpus)}
    if new is not None:
        result["test"]["new"] = model_metrics(new, data, corpus)
        _, ckpt = load_model(new, kind="retrieval")
        result["new_training"] = {k: ckpt.training.get(k) for k in
                                  ("train_clips", "val_clips", "epochs", "steps", "metrics", "wall_time_s")}
    paths, captions = val_clips(sfx or SFX)
    result["find_similar_sfx_val"] = {"clips": len(paths),
                                      "current": find_similar_metrics(default_model_embeddings(paths, current),
                                                                      captions)}
    if new is not None:
        result["find_similar_sfx_val"]["new"] = find_similar_metrics(default_model_embeddings(paths, new), captions)
    if fit_here:  # the earlier in-bench fit (projections selected on val), for comparison
        model, result["fit"] = fit(data)
        with torch.inference_mode():
            result["test"]["fit_here"] = metrics(model.embed_audio_features(te_a), model.embed_text(te_c), te_c)
        if save is not None:
            aisfx_weights.load_weights(model.audio_encoder)  # the checkpoint carries the frozen tower itself
            save.parent.mkdir(parents=True, exist_ok=True)
            save_checkpoint(save, "retrieval", model, model.config, features=frontend_to_dict(AisfxMel()),
                            training={"data": str(corpus), "note": "bench/bench_sfx_heldout.py", **result["fit"]})
            result["saved"] = str(save)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("corpus", nargs="?", default=str(CORPUS))
    p.add_argument("--new", help="the new retrieval checkpoint (e.g. made by earshot train retrieval --preset aisfx)")
    p.add_argument("--current", help="the current default (default: retrieval-passt-small if present, else "
                                     "retrieval-default)")
    p.add_argument("--fit", action="store_true", help="also fit projections here (the earlier bench recipe)")
    p.add_argument("--save", help="with --fit: write the fitted model as a retrieval checkpoint here")
    a = p.parse_args()
    result = run(Path(a.corpus), Path(a.new) if a.new else None, Path(a.current) if a.current else None,
                 Path(a.save) if a.save else None, a.fit)
    write_result("bench_sfx_heldout", result, indent=1)


if __name__ == "__main__":
    main()
