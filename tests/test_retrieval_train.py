"""Retrieval training job on a small real sfx subset: loss goes down, checkpoint rebuilds, resume, eval, cache."""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import pytest
import torch

from app.services.jobs import drain
from core.checkpoints import load_model, read_checkpoint
from training import retrieval_features as features
from training import retrieval_train as rt
from training.retrieval_eval import evaluate
from training.retrieval_settings import PRESET_NAMES, add_eval_arguments

TINY = {
    "model": {
        "audio": {"embed_dim": 32, "depth": 1, "num_heads": 2, "patchout": [1, 1], "drop_path_rate": 0.0,
                  "input_tdim": 300, "window_seconds": 3.0},
        "text": {"tiny": True, "name_or_path": None, "freeze": "all"},
        "embed_dim": 16,
    },
    "batch_size": 8, "epochs": 4, "warmup_epochs": 0.0, "lr": 3e-3, "crop_seconds": 2.0, "weight_decay": 0.0,
}


@pytest.fixture
def subset(sfx: Path, tmp_path: Path) -> Path:
    """A caption folder of 16 train + 6 val sfx clips (absolute paths), the shortest ones for speed."""
    with open(sfx / "captions.csv", newline="") as f:
        rows = sorted(csv.DictReader(f), key=lambda r: float(r["duration_s"]))
    rows = [r for r in rows if float(r["duration_s"]) > 0.3]
    train = [r for r in rows if r["split"] == "train"][:16]
    val = [r for r in rows if r["split"] == "val"][:6]
    folder = tmp_path / "data"
    folder.mkdir()
    with open(folder / "captions.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "caption", "split"])
        for r in train + val:
            w.writerow([str(sfx / r["path"]), r["caption"], r["split"]])
    return folder


def train_args(data: Path, out: Path, **overrides: object) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    rt.add_train_arguments(p)
    config = json.dumps({**TINY, **overrides.pop("config", {})})  # type: ignore[dict-item]
    args = p.parse_args(["--data", str(data), "--out", str(out), "--config", config, "--threads", "1",
                         "--device", "cpu"])
    for k, v in overrides.items():
        setattr(args, k, v)
    return args


def test_train_lowers_loss_and_writes_a_loadable_checkpoint(subset: Path, tmp_path: Path) -> None:
    torch.manual_seed(0)
    features.clear_memory_cache()
    out = tmp_path / "r.safetensors"
    progress = []
    job = rt.train(train_args(subset, out, config={"epochs": 6}))
    while True:
        try:
            progress.append(next(job))
        except StopIteration as stop:
            result = stop.value
            break
    losses = [h["loss"] for h in result["history"]]
    assert len(losses) == 6 and losses[-1] < losses[0] * 0.9, losses
    steps = [p for p in progress if "lr" in p]
    assert {"step", "total", "loss", "epoch", "lr", "val_map10", "message"} <= set(steps[-1])
    assert result["details"]["train_clips"] == 16 and result["details"]["val_clips"] == 6
    assert result["best_metric"] == "val_map10" and 0 <= result["best_value"] <= 1
    model, ckpt = load_model(out, kind="retrieval")
    assert ckpt.external == ["text_encoder."] and not any(k.startswith("text_encoder.") for k in
                                                          read_checkpoint(out).tensors)
    assert ckpt.features["kind"] == "passt_mel" and ckpt.training["metrics"]["mAP@10"] == result["best_value"]
    assert ckpt.training["preset"] == "cpu-small"  # with train_config the whole recipe (the Train tab's presets)
    assert model.config.audio.embed_dim == 32
    with torch.inference_mode():
        emb = model.embed_audio(torch.randn(2, 128, 150))
    assert emb.shape == (2, 16) and torch.allclose(emb.norm(dim=-1), torch.ones(2))


def test_resume_continues_from_the_saved_epoch(subset: Path, tmp_path: Path) -> None:
    features.clear_memory_cache()
    full_out = tmp_path / "full" / "r.safetensors"
    full = drain(rt.train(train_args(subset, full_out, config={"epochs": 3})))

    out = tmp_path / "cut" / "r.safetensors"
    job = rt.train(train_args(subset, out, config={"epochs": 3}))
    for p in job:  # stop a few steps into the second epoch
        if p.get("epoch") == 2 and "lr" in p:
            break
    job.close()
    resumed = drain(rt.train(train_args(subset, out, config={"epochs": 3}, resume=True)))
    assert resumed["epochs"] == 3 and resumed["steps"] == full["steps"]
    assert [h["epoch"] for h in resumed["history"]] == [1, 2, 3]
    # the interrupted run picks up the saved model, optimizer and RNG state: same numbers as the full run
    assert resumed["history"][-1]["loss"] == pytest.approx(full["history"][-1]["loss"], rel=1e-4)
    a, _ = load_model(full_out, kind="retrieval")
    b, _ = load_model(out, kind="retrieval")
    torch.testing.assert_close(a.audio_proj.weight, b.audio_proj.weight, rtol=1e-4, atol=1e-5)


def test_evaluate_metrics_ensemble_and_baselines(subset: Path, tmp_path: Path) -> None:
    features.clear_memory_cache()
    out = tmp_path / "r.safetensors"
    drain(rt.train(train_args(subset, out, config={"epochs": 1})))
    p = argparse.ArgumentParser()
    add_eval_arguments(p)
    single = drain(evaluate(p.parse_args(["--model", str(out), "--data", str(subset), "--baselines",
                                             "--threads", "1", "--device", "cpu"])))
    both = drain(evaluate(p.parse_args(["--model", f"{out},{out}", "--data", str(subset), "--threads", "1",
                                           "--device", "cpu"])))
    assert single["clips"] == 6 and single["captions"] == 6
    assert set(single["metrics"]) >= {"mAP@10", "R@1", "R@5", "R@10"}
    assert both["metrics"] == single["metrics"]
    assert set(single["random"]) >= {"mAP@10"} and set(single["untrained"]) >= {"mAP@10"}
    # with 6 clips every caption's clip is within the top 10
    assert single["metrics"]["R@10"] == 1.0 and 1 / 6 <= single["metrics"]["mAP@10"] <= 1


def test_evaluate_without_a_split_column_scores_every_clip(subset: Path, tmp_path: Path) -> None:
    features.clear_memory_cache()
    out = tmp_path / "r.safetensors"
    result = drain(rt.train(train_args(subset, out, config={"epochs": 1})))
    from training.trainer import TrainResult

    assert set(result) == set(TrainResult.__annotations__)  # the schema every kind returns
    plain = tmp_path / "plain"
    plain.mkdir()
    with open(subset / "captions.csv", newline="") as f, open(plain / "captions.csv", "w", newline="") as g:
        w = csv.writer(g)
        w.writerow(["path", "caption"])
        w.writerows([r["path"], r["caption"]] for r in list(csv.DictReader(f))[:10])
    p = argparse.ArgumentParser()
    add_eval_arguments(p)
    r = drain(evaluate(p.parse_args(["--model", str(out), "--data", str(plain), "--threads", "1",
                                        "--device", "cpu"])))
    assert r["clips"] == 10 and "no split column" in r["split"]


def test_feature_caches_are_reused(subset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    features.clear_memory_cache()
    calls = {"mels": 0, "text": 0}
    mels, text = features.compute_mels, features.compute_text_features

    def count_mels(*a: object, **k: object) -> object:
        calls["mels"] += 1
        return mels(*a, **k)

    def count_text(*a: object, **k: object) -> object:
        calls["text"] += 1
        return text(*a, **k)

    monkeypatch.setattr(features, "compute_mels", count_mels)
    monkeypatch.setattr(features, "compute_text_features", count_text)
    out = tmp_path / "r.safetensors"
    drain(rt.train(train_args(subset, out, config={"epochs": 1})))
    assert calls == {"mels": 2, "text": 1}  # train + val log-mels, one pass over all captions
    drain(rt.train(train_args(subset, out, config={"epochs": 1})))  # same process: memory cache
    features.clear_memory_cache()
    drain(rt.train(train_args(subset, out, config={"epochs": 1})))  # fresh process: disk cache
    assert calls == {"mels": 2, "text": 1}
    assert len(list((tmp_path / ".r.cache").glob("mels-*.safetensors"))) == 2


def test_presets_follow_the_paper_and_cli_flags_override(tmp_path: Path) -> None:
    paper = rt.paper()
    assert (paper.batch_size, paper.epochs, paper.lr, paper.min_lr) == (64, 15, 2e-5, 1e-7)
    assert (paper.finetune_epochs, paper.finetune_lr, paper.swap_p, paper.optimizer) == (5, 8e-6, 0.3, "adam")
    from training.trainer import cosine_lr

    lrs = [cosine_lr(s, 150, paper.lr, paper.min_lr, 10) for s in range(150)]  # 15 epochs of 10 steps
    lrs += [cosine_lr(s, 50, paper.finetune_lr, paper.min_lr) for s in range(50)]  # then the fine-tuning stage
    assert lrs[0] == pytest.approx(2e-6) and lrs[9] == pytest.approx(2e-5)  # one warm-up epoch
    assert lrs[149] == pytest.approx(1e-7, abs=1e-8) and lrs[150] == pytest.approx(8e-6)
    args = train_args(tmp_path, tmp_path / "x.safetensors")
    args.epochs, args.batch_size = 7, 16
    config = rt.build_config(args)
    assert (config.epochs, config.batch_size, config.model.embed_dim) == (7, 16, 16)


def test_frozen_audio_with_foreign_weights_trains_only_projections(subset: Path, tmp_path: Path) -> None:
    from core.checkpoints import config_from_dict as dc_from_dict
    from models.passt import PaSST, passt_tiny

    features.clear_memory_cache()
    torch.manual_seed(1)
    audio_cfg = dc_from_dict(type(passt_tiny()), {**passt_tiny().__dict__, **TINY["model"]["audio"],
                                                  "num_classes": 1})
    official = PaSST(audio_cfg)
    weights = {f"net.{k}": v for k, v in official.state_dict().items()}
    weights["net.mel.0.weight"] = torch.zeros(3)  # a front-end tensor the model does not have
    torch.save(weights, tmp_path / "passt.pt")
    out = tmp_path / "r.safetensors"
    result = drain(rt.train(train_args(subset, out, config={"freeze_audio": True, "epochs": 3},
                                       audio_weights=tmp_path / "passt.pt")))
    assert result["details"]["audio_weights"] == {"missing": [], "unexpected": ["net.mel.0.weight"]}
    losses = [h["loss"] for h in result["history"]]
    assert losses[-1] < losses[0]
    model, _ = load_model(out, kind="retrieval")
    for k, v in official.state_dict().items():  # the frozen encoder is exactly the loaded one
        torch.testing.assert_close(model.audio_encoder.state_dict()[k], v)
    assert list((tmp_path / ".r.cache").glob("passt-*.safetensors"))


def test_a_run_over_student_weights_names_them_by_content_for_resume(tmp_path: Path) -> None:
    """A resumed projection run must read the same frozen tower: its weights file is named by its bytes."""
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    a.write_bytes(b"tower a")
    b.write_bytes(b"tower b")
    sources = [rt.RetrievalHooks(rt.RetrievalTrainConfig(), argparse.Namespace(audio_weights=w, out=tmp_path / "r.st"))
               .frozen_sources()
               for w in (a, b, None)]
    assert sources[0] != sources[1] and sources[2] == {"audio_weights": "shipped"}


def test_every_preset_name_has_a_recipe() -> None:
    """The settings module names the presets (the form's choices, torch-free); the trainer holds their recipes."""
    assert set(rt.PRESETS) == set(PRESET_NAMES)
