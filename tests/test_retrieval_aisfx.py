"""The retrieval model with the aiSFX audio tower (models/retrieval.py) and mean-pooled text (models/text.py)."""

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from models import retrieval
from models.aisfx import AisfxConfig, AisfxEncoder
from models.frontends import AisfxMel, PasstMel, frontend_to_dict
from models.passt import passt_tiny
from models.retrieval import RetrievalConfig, RetrievalModel, audio_frontend, config_from_dict
from models.text import TextConfig, TextEncoder, text_tiny


def _tiny(**kw) -> RetrievalConfig:
    return RetrievalConfig(audio=AisfxConfig(base_channels=4, **kw), audio_tower="aisfx", text=text_tiny(),
                           embed_dim=8, proj_layers=2)


def _calibrate_batch_norm(model: RetrievalModel, mels: list[torch.Tensor]) -> None:
    """A random tower's BatchNorm (running stats 0 and 1) passes the log-mel's large constant through, so every
    file gets the same vector up to float rounding; statistics of a few real sounds make it tell them apart."""
    norms = [m for m in model.audio_encoder.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for bn in norms:
        bn.reset_running_stats()
        bn.momentum = None  # a plain average over the calls below
        bn.train()
    with torch.no_grad():
        for mel in mels:
            model.embed_audio(mel[None])
    model.eval()


def test_aisfx_tower_embeds_and_trains_only_what_it_should():
    torch.manual_seed(0)
    model = RetrievalModel(_tiny(train_top_block=True)).train()
    assert isinstance(model.audio_encoder, AisfxEncoder) and isinstance(audio_frontend(model.config), AisfxMel)
    feats = torch.rand(2, 160, 96)
    sim, loss = model(feats, ["a dog barks", "rain"], lengths=torch.tensor([160, 90]))
    assert sim.shape == (2, 2) and torch.isfinite(loss)
    loss.backward()
    audio_grads = {n for n, p in model.audio_encoder.named_parameters() if p.grad is not None}
    assert audio_grads and all(".conv_block4." in n for n in audio_grads)
    assert model.audio_proj[0].weight.grad is not None  # 2-layer projection trains


def test_frozen_features_path_equals_full_path():
    model = RetrievalModel(_tiny()).eval()
    feats, lengths = torch.rand(3, 130, 96), torch.tensor([130, 60, 101])
    with torch.no_grad():
        cached = model.audio_features(feats, lengths)  # what a trainer precomputes once
        torch.testing.assert_close(model.embed_audio_features(cached), model.embed_audio(feats, lengths))


def test_config_round_trip_and_old_configs_stay_passt():
    cfg = _tiny(train_top_block=True)
    back = config_from_dict(dataclasses.asdict(cfg))
    assert back == cfg
    old = dataclasses.asdict(RetrievalConfig(audio=passt_tiny(), text=text_tiny()))
    del old["audio_tower"], old["proj_layers"]  # a checkpoint written before the tower choice
    assert config_from_dict(old).audio_tower == "passt"
    assert isinstance(audio_frontend(config_from_dict(old)), PasstMel)


def test_mismatched_tower_config_is_refused():
    with pytest.raises(ValueError, match="needs audio=AisfxConfig"):
        RetrievalConfig(audio_tower="aisfx")
    with pytest.raises(ValueError, match="audio_tower"):
        RetrievalConfig(audio_tower="clap")


def test_aisfx_preset_uses_mean_pooled_frozen_text():
    cfg = retrieval.aisfx_retrieval()
    assert cfg.text.pooling == "mean" and cfg.text.freeze == "all" and cfg.audio_tower == "aisfx"


def test_mean_pooling_ignores_padding_tokens():
    torch.manual_seed(0)
    enc = TextEncoder(text_tiny(pooling="mean")).eval()
    with torch.no_grad():
        alone = enc(["a dog"])
        padded = enc(["a dog", "a very long caption about heavy rain on a tin roof"])
    torch.testing.assert_close(padded[0], alone[0], atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="pooling"):
        TextConfig(pooling="max")


# ------------------------------------------------------------------------------------------ in the app


def _sound(kind: str, seconds: float, sr: int) -> np.ndarray:
    t = np.arange(round(seconds * sr)) / sr
    rng = np.random.default_rng(len(kind))
    x = {"tone": np.sin(2 * np.pi * 440 * t), "chirp": np.sin(2 * np.pi * (200 + 3000 * t / seconds) * t),
         "noise": rng.standard_normal(len(t)) * np.exp(-3 * (t % 0.5))}[kind]
    return (0.3 * x / np.abs(x).max()).astype(np.float32)


def test_library_indexes_and_searches_with_an_aisfx_tower_checkpoint(tmp_path: Path, monkeypatch):
    from app.services.jobs import drain
    from app.services.library.embedding import embed_file
    from app.services.search.embedder import RetrievalEmbedder
    from app.services.search.session import SearchSession
    from core.checkpoints import save_checkpoint

    # the float trunk: this compares with the model's own numbers exactly, and the random tiny tower's features
    # are too small for int8 to keep them apart (the int8 default is checked with the real weights in test_aisfx)
    monkeypatch.setenv("EARSHOT_AISFX_BACKEND", "onnx")
    torch.manual_seed(0)
    model = RetrievalModel(_tiny(window_seconds=3.0)).eval()
    _calibrate_batch_norm(model, [AisfxMel()(torch.from_numpy(_sound(k, 2.0, 44100))) for k in ("chirp", "tone")])
    ckpt = save_checkpoint(tmp_path / "tiny-aisfx.safetensors", "retrieval", model, model.config,
                           features=frontend_to_dict(AisfxMel()))
    embedder = RetrievalEmbedder.from_checkpoint(ckpt)
    assert isinstance(embedder.frontend, AisfxMel) and embedder.sample_rate == 44100
    assert embedder.window_seconds == 3.0 and embedder.dim == 8

    root = tmp_path / "lib"
    root.mkdir()
    sf.write(root / "tone.wav", _sound("tone", 1.0, 44100), 44100)
    sf.write(root / "chirp.wav", _sound("chirp", 2.0, 22050), 22050)  # resampled to 44.1 kHz by the library
    sf.write(root / "long.wav", np.concatenate([_sound("tone", 3.0, 44100), _sound("noise", 2.0, 44100)]), 44100)
    shutil.copy(root / "chirp.wav", root / "chirp_copy.wav")

    # one window = the model on that audio as a clip of its own (AisfxMel at 44.1 kHz, real frames only)
    wave = np.concatenate([_sound("chirp", 1.0, 44100), _sound("noise", 0.5, 44100)])  # changes over time
    with torch.no_grad():
        want = model.embed_audio(AisfxMel()(torch.from_numpy(wave))[None])[0].numpy()
    padded = np.pad(wave, (0, embedder.window_samples - len(wave)))[None]
    np.testing.assert_allclose(embedder.embed_windows(padded)[0], want, atol=1e-5)

    session = SearchSession.open(root, embedder)
    try:
        report = drain(session.index_job())
        assert len(report.embedded) == 4 and not report.failed
        hits = session.search("a bell rings", k=10, mode="sound")  # the sound channel, exactly
        q = embedder.embed_text(["a bell rings"])[0]
        ranked = sorted(((float(embed_file(h.path, embedder)[0] @ q), h.rel_path) for h in hits),
                        key=lambda sr: (-sr[0], sr[1]))  # the same audio twice: by path (= file id order)
        assert [h.rel_path for h in hits] == [r for _, r in ranked] and len(hits) == 4
        chirp = embed_file(root / "chirp.wav", embedder)[0]
        assert max(float(chirp @ embed_file(root / o, embedder)[0]) for o in ("long.wav", "tone.wav")) < 0.999
        assert session.similar(root / "chirp.wav", k=1)[0].rel_path == "chirp_copy.wav"
        long_hit = next(h for h in hits if h.rel_path == "long.wav")
        assert session.window_scores(long_hit).starts.tolist() == [0.0, 3.0]  # two 3-s windows
    finally:
        session.close()


def test_short_windows_are_embedded_together_as_each_alone(monkeypatch):
    """Windows shorter than one 100-frame block of different lengths go through the trunk as one batch (each
    padded to a block, as the tower pads it): the same vectors as each one alone, the old way."""
    from app.services.search.embedder import RetrievalEmbedder

    monkeypatch.setenv("EARSHOT_AISFX_BACKEND", "torch")
    monkeypatch.setenv("EARSHOT_TRUNK_THREADS", "1")  # one batch at a time: the calls below are the batches
    torch.manual_seed(0)
    model = RetrievalModel(_tiny(window_seconds=3.0)).eval()
    _calibrate_batch_norm(model, [AisfxMel()(torch.from_numpy(_sound(k, 2.0, 44100))) for k in ("chirp", "tone")])
    embedder = RetrievalEmbedder(model, AisfxMel())
    waves = [_sound("chirp", 0.3, 44100), _sound("noise", 0.71, 44100), _sound("tone", 1.5, 44100),
             _sound("chirp", 2.9, 44100)]  # the last is longer than a block (~2.3 s): a group of its own
    windows = np.stack([np.pad(w, (0, embedder.window_samples - len(w))) for w in waves])
    calls: list[tuple[int, ...]] = []
    trunk = model.audio_encoder.trunk
    monkeypatch.setattr(model.audio_encoder, "trunk",
                        lambda f, counts=None: calls.append(tuple(f.shape)) or trunk(f, counts))
    got = embedder.embed_windows(windows)
    assert sorted(calls) == [(1, 125, 96), (3, 100, 96)], calls  # three short clips in one pass
    with torch.no_grad():
        alone = np.stack([model.embed_audio(AisfxMel()(torch.from_numpy(w))[None])[0].numpy() for w in waves])
    np.testing.assert_allclose(got, alone, atol=1e-5)
    # the indexer's way: each file's windows through the front end on a reader thread, then several files'
    # frames embedded together: the same vectors, in order
    prepared = [embedder.prepare_windows(windows[i : i + 2]) for i in (0, 2)]
    assert [len(p) for p in prepared] == [2, 2]
    calls.clear()
    np.testing.assert_allclose(embedder.embed_prepared(prepared), alone, atol=1e-5)
    assert sorted(calls) == [(1, 125, 96), (3, 100, 96)], calls  # short clips of both files in one pass
    # ONNX Runtime sessions on two worker threads (the default on a 2-core CPU): the short clips are shared out,
    # the same vectors (float32 ONNX Runtime agrees with torch to float precision)
    pytest.importorskip("onnxruntime")
    monkeypatch.setenv("EARSHOT_AISFX_BACKEND", "onnx")
    monkeypatch.setenv("EARSHOT_TRUNK_THREADS", "2")
    two = RetrievalEmbedder(model, AisfxMel())
    assert (two.backend, two.workers) == ("onnx", 2)
    calls.clear()
    np.testing.assert_allclose(two.embed_windows(windows), alone, atol=1e-4)
    assert sorted(calls) == [(1, 100, 96), (1, 125, 96), (2, 100, 96)], calls
    assert two.set_backend("torch") == "torch" and two.workers == 1  # torch: one batch at a time, its own threads


def test_aisfx_checkpoint_with_a_passt_front_end_is_refused(tmp_path: Path):
    from app.services.search.embedder import RetrievalEmbedder

    model = RetrievalModel(_tiny()).eval()
    with pytest.raises(ValueError, match="needs the AisfxMel front end"):
        RetrievalEmbedder(model, PasstMel())


# ------------------------------------------------------------------------------------------ training


def _caption_folder(sfx: Path, folder: Path) -> Path:
    """12 train + 4 val of the shortest sfx clips (absolute paths)."""
    import csv

    with open(sfx / "captions.csv", newline="") as f:
        rows = sorted((r for r in csv.DictReader(f) if float(r["duration_s"]) > 0.3),
                      key=lambda r: float(r["duration_s"]))
    rows = [r for r in rows if r["split"] == "train"][:12] + [r for r in rows if r["split"] == "val"][:4]
    folder.mkdir()
    with open(folder / "captions.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "caption", "split"])
        for r in rows:
            w.writerow([str(sfx / r["path"]), r["caption"], r["split"]])
    return folder


def _train_aisfx(data: Path, out: Path):
    import argparse
    import json

    from app.services.jobs import drain
    from training import retrieval_features
    from training import retrieval_train as rt

    p = argparse.ArgumentParser()
    rt.add_train_arguments(p)
    tiny = {"model": {"text": {"tiny": True, "name_or_path": None, "freeze": "all"}, "embed_dim": 16},
            "epochs": 3, "batch_size": 8, "warmup_epochs": 0.0}
    args = p.parse_args(["--data", str(data), "--out", str(out), "--preset", "aisfx", "--config", json.dumps(tiny),
                         "--threads", "1", "--device", "cpu"])
    retrieval_features.clear_memory_cache()
    return drain(rt.train(args))


@pytest.mark.skipif(__import__("core.aisfx_weights").aisfx_weights.find_checkpoint() is None,
                    reason="needs the aiSFX weights (pip install --no-deps aisfx==0.1.2)")
def test_preset_aisfx_trains_projections_on_frozen_features(sfx: Path, tmp_path: Path):
    from safetensors.torch import save_file

    from app.services.search.embedder import RetrievalEmbedder
    from core import aisfx_weights
    from core.checkpoints import load_model

    data = _caption_folder(sfx, tmp_path / "data")
    result = _train_aisfx(data, tmp_path / "a.safetensors")
    assert result["details"]["train_clips"] == 12 and result["details"]["val_clips"] == 4
    losses = [h["loss"] for h in result["history"]]
    assert losses[-1] < losses[0] and "val_map10" in result["history"][-1]
    model, ckpt = load_model(tmp_path / "a.safetensors", kind="retrieval")
    assert model.config.audio_tower == "aisfx" and ckpt.features["kind"] == "aisfx_mel"
    ref = aisfx_weights.pretrained()
    for k, v in ref.state_dict().items():  # the frozen tower is exactly the published one, carried in the file
        torch.testing.assert_close(model.audio_encoder.state_dict()[k], v)
    assert RetrievalEmbedder.from_checkpoint(tmp_path / "a.safetensors").sample_rate == 44100

    # precomputed corpus features (training.sfx_corpus --embed-aisfx) are used as they are, and only those clips
    (data / "aisfx").mkdir()
    save_file({"features": torch.ones(8, 1024), "rows": torch.tensor([0, 1, 2, 3, 4, 5, 12, 13])},
              str(data / "aisfx" / "part-00000.safetensors"))
    again = _train_aisfx(data, tmp_path / "b.safetensors")
    assert again["details"]["train_clips"] == 6 and again["details"]["val_clips"] == 2
    assert any("no precomputed aiSFX features" in s for s in again["details"]["skipped"])


def test_preset_aisfx_student_fits_projections_on_a_frozen_student_tower(sfx: Path, tmp_path: Path, capsys):
    """Issue 25: `--preset aisfx-student` takes the tower (config and weights) from a student retrieval checkpoint
    (--audio-weights), keeps it frozen, caches its clip features on disk, optionally starts from a checkpoint's
    projections (--init-projections), and the result evaluates like any aiSFX checkpoint."""
    import argparse
    import json

    from app.cli.main import main
    from app.services.jobs import drain
    from core.checkpoints import load_model, save_checkpoint
    from models.aisfx_student import AisfxStudent, StudentConfig
    from training import retrieval_features
    from training import retrieval_train as rt

    data = _caption_folder(sfx, tmp_path / "data")
    tiny = {"model": {"text": {"tiny": True, "name_or_path": None, "freeze": "all"}, "embed_dim": 16},
            "epochs": 3, "batch_size": 8, "warmup_epochs": 0.0}

    def args(*extra: str) -> argparse.Namespace:
        p = argparse.ArgumentParser()
        rt.add_train_arguments(p)
        return p.parse_args(["--data", str(data), "--preset", "aisfx-student", "--config", json.dumps(tiny),
                             "--threads", "1", "--device", "cpu", "--cache-dir", str(tmp_path / "cache"), *extra])

    # a "distilled" student checkpoint of another width than the preset's default; BN statistics made up so
    # clips differ
    torch.manual_seed(0)
    config = rt.build_config(args("--out", str(tmp_path / "x.safetensors"))).model
    source = RetrievalModel(dataclasses.replace(config, audio=StudentConfig(widths=[2, 2, 4, 4], out_channels=8)))
    _calibrate_batch_norm(source, [torch.rand(130, 96) * 4 - 2 for _ in range(3)])
    student = save_checkpoint(tmp_path / "student.safetensors", "retrieval", source, source.config,
                              features=frontend_to_dict(AisfxMel()), exclude_prefixes=["text_encoder."])

    with pytest.raises(ValueError, match="--audio-weights"):
        rt.build_model(rt.build_config(args("--out", str(tmp_path / "x.safetensors"))), None)
    started, _ = rt.build_model(rt.build_config(args("--out", str(tmp_path / "x.safetensors"))), student, student)
    for name in ("audio_proj", "text_proj"):  # --init-projections copies both
        for k, v in getattr(source, name).state_dict().items():
            torch.testing.assert_close(getattr(started, name).state_dict()[k], v)

    retrieval_features.clear_memory_cache()
    result = drain(rt.train(args("--out", str(tmp_path / "a.safetensors"), "--audio-weights", str(student))))
    assert result["details"]["train_clips"] == 12 and result["details"]["val_clips"] == 4
    losses = [h["loss"] for h in result["history"]]
    assert losses[-1] < losses[0] and "val_map10" in result["history"][-1]
    cached = sorted((tmp_path / "cache").glob("aisfx-*.safetensors"))
    assert len(cached) == 2  # train and val features of the student tower, computed once
    model, _ = load_model(tmp_path / "a.safetensors", kind="retrieval")
    assert isinstance(model.audio_encoder, AisfxStudent) and model.config.audio.widths == [2, 2, 4, 4]
    for k, v in source.audio_encoder.state_dict().items():  # the tower stayed exactly the student's
        torch.testing.assert_close(model.audio_encoder.state_dict()[k], v)

    mtimes = [c.stat().st_mtime_ns for c in cached]  # a second run reads the features back
    retrieval_features.clear_memory_cache()
    drain(rt.train(args("--out", str(tmp_path / "b.safetensors"), "--audio-weights", str(student),
                        "--init-projections", str(student))))
    assert [c.stat().st_mtime_ns for c in cached] == mtimes

    rc = main(["eval", "retrieval", "--model", str(tmp_path / "a.safetensors"), "--data", str(data), "--split", "val",
               "--json", "--threads", "1"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["clips"] == 4


def test_preset_aisfx_without_the_weights_says_how_to_get_them(sfx: Path, tmp_path: Path, monkeypatch, capsys):
    from app.cli.main import main
    from core import aisfx_weights

    monkeypatch.setattr(aisfx_weights, "find_checkpoint", lambda: None)
    data = _caption_folder(sfx, tmp_path / "data")
    rc = main(["train", "retrieval", "--preset", "aisfx", "--data", str(data), "--out", str(tmp_path / "m.safetensors"),
               "--threads", "1"])
    err = capsys.readouterr().err
    assert rc != 0 and "pip install --no-deps aisfx==0.1.2" in err and "Traceback" not in err
    assert not (tmp_path / "m.safetensors").exists()


def test_same_text_positives_keep_same_caption_clips_together():
    captions = ["A dog  barks", "a dog barks", "rain", "a bell"]  # clips 0, 1, 2, 2
    ids = torch.tensor([0, 1, 2, 2])
    pos = retrieval.same_text_positives(captions, ids, 3)
    assert pos.tolist() == [[True, True, False, False], [True, True, False, False], [False, False, True, True]]
    # clip 0 scoring clip 1's caption (the same text) higher: a worse loss when it is a negative, a better one
    # when it is a positive
    torch.manual_seed(0)
    sim = torch.randn(3, 4)
    closer = sim.clone()
    closer[0, 1] += 3.0
    closer[1, 0] += 3.0
    plain = retrieval.contrastive_loss(sim, ids)
    assert retrieval.contrastive_loss(closer, ids) > plain
    assert retrieval.contrastive_loss(closer, ids, pos) < retrieval.contrastive_loss(sim, ids, pos)
    # with only each caption's own clip as positive, the widened form is the plain loss
    own = ids[None, :] == torch.arange(3)[:, None]
    torch.testing.assert_close(retrieval.contrastive_loss(sim, ids, own), plain)


def test_aisfx_preset_stops_early_and_counts_same_captions_as_positives():
    from training import retrieval_train as rt

    c = rt.aisfx()
    assert c.same_text_positives and c.schedule == "plateau" and c.patience >= 1
    with pytest.raises(ValueError, match="schedule"):
        dataclasses.replace(c, schedule="step")


def test_eval_scores_an_aisfx_checkpoint_on_a_caption_corpus(sfx: Path, tmp_path: Path, capsys):
    """`earshot eval retrieval` with an aiSFX checkpoint: the corpus CSV format (path, caption, split), the
    split chosen by --split, baselines; a corpus's precomputed frozen features are used for a frozen tower."""
    import json

    from safetensors.torch import save_file

    from app.cli.main import main
    from core.checkpoints import save_checkpoint

    torch.manual_seed(0)
    model = RetrievalModel(_tiny()).eval()
    ckpt = save_checkpoint(tmp_path / "tiny-aisfx.safetensors", "retrieval", model, model.config,
                           features=frontend_to_dict(AisfxMel()))
    data = _caption_folder(sfx, tmp_path / "corpus")

    def run() -> dict:
        rc = main(["eval", "retrieval", "--model", str(ckpt), "--data", str(data), "--split", "val", "--json",
                   "--baselines", "--threads", "1"])
        assert rc == 0
        return json.loads(capsys.readouterr().out)

    computed = run()
    assert computed["clips"] == 4 and computed["split"] == "val"
    assert set(computed) >= {"metrics", "random", "untrained"} and 0 <= computed["metrics"]["mAP@10"] <= 1
    with torch.no_grad():  # what the eval computed: the tower on each clip's first 10 s, projected
        from training.retrieval_train import eval_aisfx_set, load_caption_dataset

        _, feats = eval_aisfx_set(model, load_caption_dataset(data, "val"), data)
    assert feats.shape == (4, 2 * 32)
    # precomputed features (training.sfx_corpus --embed-aisfx layout; rows index captions.csv) take their place
    (data / "aisfx").mkdir()
    save_file({"rows": torch.arange(12, 16), "features": torch.zeros(4, 64)},
              str(data / "aisfx" / "part-0.safetensors"))
    precomputed = run()
    assert precomputed["metrics"] != computed["metrics"]  # identical (zero) features: every clip ties
    assert precomputed["metrics"]["mAP@10"] == pytest.approx(computed["random"]["mAP@10"], abs=0.5)


def test_without_the_aisfx_wheel_shipped_and_passt_models_keep_working(tmp_path: Path, monkeypatch):
    """No `aisfx` wheel: an aiSFX retrieval checkpoint carries its tower's weights and still embeds (the shipped
    default is one); PaSST models are untouched; only what needs the published weights (the aisfx preset, the
    bare encoder) says exactly how to get them."""
    from safetensors import safe_open

    from app.services.search.embedder import RetrievalEmbedder
    from core import aisfx_weights
    from core.checkpoints import read_metadata, save_checkpoint
    from models.aisfx import AisfxWeightsError

    monkeypatch.setattr(aisfx_weights, "find_checkpoint", lambda: None)
    default = Path(__file__).resolve().parents[1] / "resources" / "models" / "retrieval-default.safetensors"
    passt = RetrievalModel(RetrievalConfig(audio=passt_tiny(), text=text_tiny(), embed_dim=8)).eval()
    passt_ckpt = save_checkpoint(tmp_path / "passt.safetensors", "retrieval", passt, passt.config,
                                 features=frontend_to_dict(PasstMel()))
    for path in (default, passt_ckpt):
        embedder = RetrievalEmbedder.from_checkpoint(path)
        window = np.zeros((1, embedder.window_samples), np.float32)
        window[0, : embedder.sample_rate] = _sound("chirp", 1.0, embedder.sample_rate)
        vec = embedder.embed_windows(window)
        assert vec.shape == (1, embedder.dim) and np.isfinite(vec).all()
        if embedder.aisfx:  # the tower is in the file; only the text encoder comes from its wheel
            with safe_open(str(path), "pt") as f:
                assert "audio_encoder.embedding_net.conv_block4.conv2.weight" in f.keys()
            assert read_metadata(path)["external"] == ["text_encoder."]
    with pytest.raises(AisfxWeightsError, match=r"pip install --no-deps aisfx==0\.1\.2"):
        aisfx_weights.pretrained()


def test_numpy_text_tower_reproduces_mean_pooling_and_two_layer_projections(tmp_path: Path):
    """`earshot search`'s torch-free text tower (app/services/search/text_tower.py) on an aiSFX-style model."""
    from app.services.search.text_tower import TextTower, load_text_tower
    from core.checkpoints import save_checkpoint

    torch.manual_seed(0)
    cfg = dataclasses.replace(_tiny(), text=dataclasses.replace(text_tiny(), pooling="mean"))
    model = RetrievalModel(cfg).eval()
    ckpt = save_checkpoint(tmp_path / "m.safetensors", "retrieval", model, model.config,
                           features=frontend_to_dict(AisfxMel()))
    tower = load_text_tower(ckpt, "m", "m-id")
    assert isinstance(tower, TextTower) and tower.dim == 8
    texts = ["a door creaks open", "rain " * 40, "x"]
    with torch.no_grad():
        want = model.embed_text(texts).numpy()
    np.testing.assert_allclose(tower.embed_text(texts), want, atol=2e-5)
