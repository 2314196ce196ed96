"""Data-parallel training: helpers, and each trainer run as 2 gloo processes under torchrun against 1 process.

With the global batch split over the processes and cross-batch losses computed on gathered embeddings,
2 processes must follow the single-process trajectory (retrieval and words: same weights up to float rounding;
units: its codebook restarts draw from one process's share, so only close).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from core import distributed as ddp
from core.checkpoints import load_model
from training.caption_data import PairBatch
from training.retrieval_train import split_batch

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------------ helpers


def test_local_rows_partition_a_batch_in_rank_order() -> None:
    for n, world in ((10, 2), (7, 3), (3, 3), (5, 4)):
        parts = [ddp.local_rows(n, ddp.DistContext(r, world)) for r in range(world)]
        assert [i for p in parts for i in p] == list(range(n))
        assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_scale_grad_keeps_the_value_and_scales_the_gradient() -> None:
    x = torch.tensor([1.5, -2.0], requires_grad=True)
    y = ddp.scale_grad(x, 3.0)
    assert torch.equal(y, x)
    y.sum().backward()
    assert torch.equal(x.grad, torch.tensor([3.0, 3.0]))


def test_single_process_is_untouched() -> None:
    x = torch.randn(4, 3)
    assert ddp.gather_rows(x, ddp.SINGLE) is x
    assert ddp.agree(True, ddp.SINGLE) and not ddp.agree(False, ddp.SINGLE)
    model = torch.nn.Linear(2, 2)
    assert ddp.wrap(model, ddp.SINGLE, torch.device("cpu")) is model
    assert not ddp.launched_by_torchrun() or os.environ.get("WORLD_SIZE") not in (None, "1")
    with pytest.raises(ValueError, match="cannot be split over 4 processes"):
        ddp.require_rows(3, ddp.DistContext(0, 4), "crops")


def test_split_batch_keeps_captions_with_their_clips() -> None:
    # clips 0..4; captions point at clip rows [0, 0, 1, 2, 3, 4, 4]
    batch = PairBatch([10, 11, 12, 13, 14], [f"c{i}" for i in range(7)], torch.tensor([0, 0, 1, 2, 3, 4, 4]))
    clips0, caps0, ids = split_batch(batch, ddp.DistContext(0, 2))
    clips1, caps1, ids1 = split_batch(batch, ddp.DistContext(1, 2))
    assert clips0 == [0, 1, 2] and caps0 == [0, 1, 2, 3] and clips1 == [3, 4] and caps1 == [4, 5, 6]
    assert torch.equal(ids, ids1) and ids.tolist() == [0, 0, 1, 2, 3, 4, 4]
    assert split_batch(PairBatch([1], ["a"], torch.tensor([0])), ddp.DistContext(0, 2)) is None


# ------------------------------------------------------------------------------------------ 2 processes


def earshot(args: list[str], procs: int, tmp: Path, threads: bool = True) -> dict:
    """Run `earshot ARGS --json` in 1 process or under torchrun with `procs` gloo processes; its JSON result."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                             "MASTER_PORT")}
    env |= {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    launcher = [sys.executable, "-m", "app.cli"] if procs == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(procs),
        "-m", "app.cli"]  # fmt: skip
    extra = ["--threads", "1"] if threads else []
    run = subprocess.run([*launcher, *args, *extra, "--device", "cpu", "--json"], cwd=tmp, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


def max_weight_difference(a: Path, b: Path, skip: tuple[str, ...] = ()) -> float:
    ta, tb = load_file(str(a)), load_file(str(b))
    assert ta.keys() == tb.keys()
    return max((ta[k] - tb[k]).abs().max().item() for k in ta if not k.startswith(skip))


@pytest.fixture(scope="module")
def fsdd_words(tmp_path_factory: pytest.TempPathFactory, fsdd: Path) -> Path:
    from test_words_train import write_subset

    return write_subset(fsdd, tmp_path_factory.mktemp("ddp_words"))


@pytest.mark.slow
def test_words_two_processes_match_one(fsdd_words: Path, tmp_path: Path) -> None:
    common = ["train", "words", "--data", str(fsdd_words), "--preset", "tiny", "--epochs", "2", "--batch-size",
              "48", "--lr", "2e-3", "--warmup-steps", "0"]
    one = earshot([*common, "--out", str(tmp_path / "one.safetensors")], 1, tmp_path)
    two = earshot([*common, "--out", str(tmp_path / "two.safetensors")], 2, tmp_path)
    assert [h["loss"] for h in two["history"]] == pytest.approx([h["loss"] for h in one["history"]], abs=1e-5)
    assert two["best_metric"] == "dev_ap" and two["best_value"] == pytest.approx(one["best_value"], abs=1e-4)
    assert max_weight_difference(tmp_path / "one.safetensors", tmp_path / "two.safetensors") < 2e-3
    assert not list(tmp_path.glob("*.tmp"))  # one writer: no leftovers of a second rank's save


@pytest.mark.slow
def test_retrieval_two_processes_match_one_with_gathered_negatives(sfx: Path, tmp_path: Path) -> None:
    # clips longer than the 2-s crop: every crop has the same length, so the model's random time-position
    # offset (drawn per batch) is the same in both runs
    with open(sfx / "captions.csv", newline="") as f:
        rows = sorted((r for r in csv.DictReader(f) if float(r["duration_s"]) > 2.2),
                      key=lambda r: float(r["duration_s"]))
    data = tmp_path / "data"
    data.mkdir()
    with open(data / "captions.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "caption", "split"])
        for r in [r for r in rows if r["split"] == "train"][:16] + [r for r in rows if r["split"] == "val"][:6]:
            w.writerow([str(sfx / r["path"]), r["caption"], r["split"]])
    config = json.dumps({
        "model": {"audio": {"embed_dim": 32, "depth": 1, "num_heads": 2, "patchout": [0, 0], "drop_path_rate": 0.0,
                            "input_tdim": 300, "window_seconds": 3.0},
                  "text": {"tiny": True, "name_or_path": None, "freeze": "all"}, "embed_dim": 16},
        "batch_size": 8, "epochs": 2, "warmup_epochs": 0.0, "lr": 3e-3, "crop_seconds": 2.0, "weight_decay": 0.0,
    })  # fmt: skip
    common = ["train", "retrieval", "--data", str(data), "--config", config]
    one = earshot([*common, "--out", str(tmp_path / "one.safetensors")], 1, tmp_path)
    two = earshot([*common, "--out", str(tmp_path / "two.safetensors")], 2, tmp_path)
    assert [h["loss"] for h in two["history"]] == pytest.approx([h["loss"] for h in one["history"]], abs=1e-4)
    assert two["best_value"] == pytest.approx(one["best_value"], abs=1e-6)
    assert max_weight_difference(tmp_path / "one.safetensors", tmp_path / "two.safetensors") < 1e-3


@pytest.mark.slow
def test_units_two_processes_train_close_to_one(fsdd_words: Path, tmp_path: Path) -> None:
    common = ["train", "units", "--data", str(fsdd_words), "--preset", "tiny", "--vq-steps", "20", "--inv-steps",
              "6", "--batch-size", "8", "--crop-frames", "32", "--lr", "2e-3"]
    one = earshot([*common, "--out", str(tmp_path / "one.safetensors")], 1, tmp_path)
    two = earshot([*common, "--out", str(tmp_path / "two.safetensors")], 2, tmp_path)
    assert [s["steps"] for s in two["stages"]] == [20, 6] and two["details"]["processes"] == 2
    assert two["metrics"]["vq_loss"] == pytest.approx(one["metrics"]["vq_loss"], rel=0.1)
    assert two["metrics"]["inv_loss"] == pytest.approx(one["metrics"]["inv_loss"], rel=0.1)
    # apart from the EMA codebook (its dead-code restarts sample one process's vectors) the weights stay close
    diff = max_weight_difference(tmp_path / "one.safetensors", tmp_path / "two.safetensors", ("vqvae.codebook.",))
    assert diff < 0.05
    model, _ = load_model(tmp_path / "two.safetensors", kind="units")
    assert model.config.vqvae.codebook_size > 0


@pytest.mark.slow
def test_sharded_indexing_matches_one_process_and_resumes(tmp_path: Path) -> None:
    demo = sorted((ROOT / "resources" / "demo").rglob("*.wav"))[:9]
    if not demo:
        pytest.skip("no demo clips")
    libs = []
    for name in ("one", "two"):
        lib = tmp_path / name
        (lib / "sub").mkdir(parents=True)
        for i, f in enumerate(demo):
            (lib / ("sub" if i % 3 == 0 else "") / f.name).write_bytes(f.read_bytes())
        (lib / "broken.wav").write_bytes(b"RIFF not really a wav")
        libs.append(lib)
    one = earshot(["index", str(libs[0])], 1, tmp_path, threads=False)
    two = earshot(["index", str(libs[1])], 2, tmp_path, threads=False)
    assert one["embedded"] == 9 and one["failed"] == 1
    sh = two["sharded"]
    assert sh["processes"] == 2 and sh["planned"] == 10 and sh["merged"] == 10 and two["embedded"] == 0
    assert [f["path"] for f in sh["failures"]] == ["broken.wav"]
    assert not any(libs[1].glob(".earshot/shards/*"))  # merged and cleaned up

    from app.services.library.library import Library

    vectors = []
    for lib in libs:
        with Library.open(lib) as opened:
            # the sound model's vectors (the names' sentence vectors, text:..., are another model's)
            model_id = opened.db.execute("SELECT DISTINCT model_id FROM vectors WHERE model_id NOT LIKE 'text:%'"
                                         ).fetchone()[0]
            rows = opened.db.execute("SELECT f.path, v.vector FROM vectors v JOIN files f ON f.id = v.file_id "
                                     "WHERE v.model_id = ? ORDER BY f.path", (model_id,)).fetchall()
        vectors.append({bytes(p): np.frombuffer(v, np.float32) for p, v in rows})
        assert model_id
    assert vectors[0].keys() == vectors[1].keys() and len(vectors[0]) == 9
    for key, v in vectors[0].items():
        np.testing.assert_allclose(vectors[1][key], v, atol=1e-5)
    # a second sharded run finds nothing to do
    again = earshot(["index", str(libs[1])], 2, tmp_path, threads=False)
    assert again["sharded"]["planned"] == 0 and again["unchanged"] == 10  # known failures are not re-read


def test_a_resumed_shard_skips_the_parts_already_written(tmp_path: Path) -> None:
    from app.services.library.sharded import done_in_parts, save_part

    save_part(tmp_path, 1, [{"rel": "a.wav"}, {"rel": "b.wav"}], {"mean.0": np.zeros(4, np.float32)})
    (tmp_path / "part-0001-00001.safetensors").write_bytes(b"torn")  # killed mid-write (no atomic rename)
    assert done_in_parts(tmp_path, 1) == {"a.wav", "b.wav"} and done_in_parts(tmp_path, 0) == set()
    assert not (tmp_path / "part-0001-00001.safetensors").exists()
