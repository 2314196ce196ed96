"""The distilled aiSFX student (models/aisfx_student.py) and its trainer (training/student_train.py): shapes, the
padding mask, that a few distillation steps lower the loss, and that a saved student gives the same vectors."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

from core.checkpoints import load_model
from models.aisfx import AisfxConfig, block_embeddings
from models.aisfx_student import AisfxStudent, StudentConfig, StudentNet, map_loss_mask
from models.retrieval import RetrievalConfig, RetrievalModel
from models.text import text_tiny
from training.student_train import (
    StudentHooks,
    StudentTrainConfig,
    collate,
    distill_losses,
    length_batches,
    read_cache,
    save_student,
)


def tiny(**overrides: object) -> StudentConfig:
    return StudentConfig(**{"widths": [4, 4, 8, 8], "out_channels": 16, "frozen": False, **overrides})


def tiny_teacher() -> RetrievalModel:
    """A retrieval model whose aiSFX tower is 16-d per block (base 2), with 2-layer projections."""
    torch.manual_seed(0)
    config = RetrievalConfig(audio=AisfxConfig(base_channels=2), audio_tower="aisfx", text=text_tiny(),
                             embed_dim=8, proj_layers=2)
    return RetrievalModel(config).eval()


def test_shapes() -> None:
    net = StudentNet(tiny())
    frames = torch.randn(2, 120, 96)  # (B, T, 96)
    assert net.feature_map(frames).shape == (2, 16, 15)  # (B, C, T/8)
    enc = AisfxStudent(tiny()).eval()
    assert enc.dim == 32
    assert enc(frames).shape == (2, 32)  # [mean ; max] over blocks
    assert enc(torch.randn(3, 40, 96)).shape == (3, 32)  # shorter than a block: padded to one


def test_default_student_has_the_teachers_output_and_far_fewer_macs() -> None:
    from torch.utils.flop_counter import FlopCounterMode

    from models.aisfx import AisfxEncoder

    x = torch.randn(1, 431, 96)  # a 10-s window
    counts = []
    for net in (AisfxEncoder(AisfxConfig()).embedding_net, AisfxStudent().embedding_net):
        with torch.no_grad(), FlopCounterMode(display=False) as c:
            out = net.feature_map(x)
        assert out.shape == (1, 512, 53)
        counts.append(c.get_total_flops())
    assert counts[0] / counts[1] >= 5  # the aim: >= 5x fewer multiply-accumulates


def test_padding_mask_keeps_a_row_as_it_is_alone() -> None:
    net = StudentNet(tiny()).eval()
    a, b = torch.randn(1, 160, 96), torch.randn(1, 240, 96)
    padded = torch.cat([torch.nn.functional.pad(a, (0, 0, 0, 80)), b])
    with torch.no_grad():
        both = net.feature_map(padded, torch.tensor([160, 240]))
        alone = net.feature_map(a)
    assert torch.allclose(both[:1, :, :20], alone, atol=1e-5)
    assert map_loss_mask(torch.tensor([160, 240]), 30).sum(dim=1).tolist() == [20, 30]


def synthetic_cache(folder: Path, n: int, seed: int, teacher_net: StudentNet) -> None:
    """Cache entries whose 'teacher' map is a fixed random student's: something a student can learn."""
    g = torch.Generator().manual_seed(seed)
    mels, maps, index, frame, step = [], [], [], 0, 0
    for i in range(n):
        T = [100, 136, 200][i % 3]
        mel = torch.rand(T, 96, generator=g)
        with torch.no_grad():
            fmap = teacher_net.feature_map(mel[None])[0]
        mels.append(mel.half())
        maps.append(fmap.half())
        index.append([frame, T, step, 0])
        frame, step = frame + T, step + fmap.shape[1]
    folder.mkdir(parents=True, exist_ok=True)
    split = "train" if seed == 0 else "val"
    save_file({"mel": torch.cat(mels), "map": torch.cat(maps, dim=1), "index": torch.tensor(index)},
              str(folder / f"{split}-000.safetensors"))


def test_length_batches_are_bounded_and_seeded() -> None:
    lengths = [100, 431, 136, 100, 300, 250, 120]
    b = length_batches(lengths, 500, seed=3)
    assert sorted(i for batch in b for i in batch) == list(range(len(lengths)))
    assert all(len(batch) * max(lengths[i] for i in batch) <= 500 or len(batch) == 1 for batch in b)
    assert b == length_batches(lengths, 500, seed=3)


def test_a_few_distillation_steps_lower_the_loss(tmp_path: Path) -> None:
    torch.manual_seed(1)
    teacher_net = StudentNet(tiny()).eval()
    synthetic_cache(tmp_path, 12, 0, teacher_net)
    cache = read_cache(tmp_path, "train")
    torch.manual_seed(2)
    student = AisfxStudent(tiny()).train()
    projection = tiny_teacher().audio_proj
    opt = torch.optim.AdamW(student.parameters(), lr=3e-3)
    batch = collate(cache, list(range(len(cache))))
    config = tiny()

    def loss() -> torch.Tensor:
        smap = student.embedding_net.feature_map(batch["mel"], batch["lengths"])
        parts = distill_losses(smap, batch["map"], batch["lengths"], projection, 0.1, config)
        return parts["map"] + parts["block"] + parts["proj"]

    first = float(loss().detach())
    for _ in range(15):
        opt.zero_grad()
        loss().backward()
        opt.step()
    assert float(loss().detach()) < 0.7 * first


def test_losses_are_zero_for_the_teachers_own_map() -> None:
    fmap = torch.rand(2, 16, 25)
    lengths = torch.tensor([200, 150])
    parts = distill_losses(fmap, fmap.clone(), lengths, tiny_teacher().audio_proj, 1.0, tiny())
    assert all(float(v.detach()) < 1e-5 for v in parts.values())
    e = block_embeddings(fmap[:1], 200, tiny())
    assert e.shape == (1, 16, 3)  # blocks at frames 0, 50, 100


def test_save_load_round_trip_gives_the_same_vectors(tmp_path: Path) -> None:
    teacher = tiny_teacher()
    torch.manual_seed(3)
    student = AisfxStudent(tiny()).eval()
    path = save_student(tmp_path / "student.safetensors", student, teacher, {"note": "test"})
    loaded, ckpt = load_model(path, kind="retrieval")
    assert ckpt.config["audio_tower"] == "aisfx-student"
    assert isinstance(loaded.audio_encoder, AisfxStudent)
    assert "text_encoder." in ckpt.external
    frames = torch.randn(3, 260, 96)
    lengths = torch.tensor([260, 90, 180])
    with torch.no_grad():
        want = teacher.embed_audio_features(student(frames, lengths))
        got = loaded.embed_audio(frames, lengths)
    assert torch.allclose(got, want, atol=1e-6)
    for p in loaded.audio_encoder.parameters():
        assert not p.requires_grad  # frozen inside a retrieval model, like the teacher's tower


def test_trainer_runs_on_a_cache_and_writes_a_loadable_student(tmp_path: Path) -> None:
    teacher = tiny_teacher()
    from core.checkpoints import save_checkpoint
    from models.frontends import AisfxMel, frontend_to_dict

    teacher_path = save_checkpoint(tmp_path / "teacher.safetensors", "retrieval", teacher, teacher.config,
                                   features=frontend_to_dict(AisfxMel()))
    torch.manual_seed(1)
    fake = StudentNet(tiny())
    synthetic_cache(tmp_path / "cache", 12, 0, fake)
    synthetic_cache(tmp_path / "cache", 6, 1, fake)
    from training.trainer import Trainer

    config = StudentTrainConfig(epochs=3, threads=1, frames_per_batch=600, widths="4,4,8,8", lr=3e-3)
    hooks = StudentHooks(config, tmp_path / "cache", teacher_path)
    result = None
    trainer = Trainer(hooks, config, tmp_path / "student.safetensors")
    try:
        while True:
            next(trainer)
    except StopIteration as stop:
        result = stop.value
    assert result is not None and result["epochs"] == 3
    val = [h["val_loss"] for h in result["history"]]
    assert val[-1] < val[0]
    model, _ = load_model(tmp_path / "student.safetensors", kind="retrieval")
    assert model.config.audio_tower == "aisfx-student"


def test_the_search_embedder_runs_a_student_checkpoint(tmp_path: Path) -> None:
    """The library's embedder reads a student checkpoint like the teacher's (AisfxMel frames, short windows
    padded to a block), in torch: the ONNX runners are built for the teacher's trunk."""
    import numpy as np

    from app.services.search.embedder import RetrievalEmbedder
    from models.frontends import AisfxMel

    torch.manual_seed(4)
    path = save_student(tmp_path / "student.safetensors", AisfxStudent(tiny()).eval(), tiny_teacher(), {})
    embedder = RetrievalEmbedder.from_checkpoint(path)
    assert embedder.aisfx and embedder.backend == "torch" and embedder.sample_rate == 44100
    rng = np.random.default_rng(0)
    waves = [rng.standard_normal(n).astype(np.float32) * 0.1 for n in (30_000, 150_000)]
    windows = np.stack([np.pad(w, (0, embedder.window_samples - len(w))) for w in waves])
    model, _ = load_model(path, kind="retrieval")
    with torch.no_grad():
        want = np.stack([model.embed_audio(AisfxMel()(torch.from_numpy(w))[None])[0].numpy() for w in waves])
    np.testing.assert_allclose(embedder.embed_windows(windows), want, atol=1e-5)
