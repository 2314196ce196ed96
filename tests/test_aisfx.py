"""aiSFX encoder (models/aisfx.py), its front end (models/frontends.AisfxMel) and weights (core/aisfx_weights.py).

Reference checks against the `aisfx` 0.1.2 wheel (installed with `pip install --no-deps aisfx==0.1.2`):
- front end: the package's librosa path (`spectrogram_librosa.compute_spectrogram` + 'original' normalisation),
  recomputed here with librosa on real clips, must match AisfxMel to 1e-4 absolute (features lie in [0, ~1];
  measured differences are ~5e-6, float32 STFT vs librosa's float32/64 mix). The package's librosa path
  returns (mels, frames) and blocks along its first axis; the network (and the package's Essentia path, used
  in the paper) reads (frames, mels), so the reference is transposed.
- network: the package's own `EmbeddingNet` (loaded from its file, not imported as a package) with the same
  checkpoint must give the same block embeddings (1e-4).
"""

import importlib.util
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from core import aisfx_weights as weights
from models import aisfx
from models.aisfx import AisfxConfig, AisfxEncoder, AisfxWeightsError
from models.frontends import AisfxMel, frontend_from_dict, frontend_to_dict

CHECKPOINT = weights.find_checkpoint()
needs_weights = pytest.mark.skipif(CHECKPOINT is None, reason=aisfx.HOW_TO_GET_WEIGHTS)


def _package_mel(path: Path) -> np.ndarray:
    """The aisfx package's librosa front end, step by step, transposed to (frames, mels)."""
    librosa = pytest.importorskip("librosa")
    y, sr = librosa.load(path=str(path), sr=44100.0)
    peak = np.max(np.abs(y)) or 1.0
    y = y / peak
    spec = librosa.feature.melspectrogram(y=y, sr=sr, n_mels=96, norm=1.0, fmin=0.0, fmax=22050.0, htk=True,
                                          power=2.0, hop_length=1024, win_length=2048)
    spec = np.log10(spec * 10000.0 + 1)
    return (spec / 9.457798957824707).T, y


def test_frontend_matches_package_librosa_path(sfx):
    clips = sorted((sfx / "audio").glob("*.wav"))[::150][:6]
    assert len(clips) >= 5
    fe = AisfxMel()
    for path in clips:
        ref, y = _package_mel(path)
        ours = fe(torch.from_numpy(y)).numpy()
        assert ours.shape == ref.shape
        np.testing.assert_allclose(ours, ref, atol=1e-4, rtol=0)


def test_frontend_peak_normalises_real_samples_only():
    fe = AisfxMel()
    wave = torch.randn(44100) * 0.1
    padded = torch.cat([wave, torch.zeros(22050)])
    batch = torch.stack([padded, padded * 0.5])
    out = fe(batch, lengths=torch.tensor([44100, 44100]))
    # peak normalisation makes the level irrelevant; real frames do not depend on padding
    torch.testing.assert_close(out[0], out[1])
    torch.testing.assert_close(out[0, : fe.num_frames(44100) - 2], fe(wave)[: fe.num_frames(44100) - 2])
    assert fe(torch.zeros(4096)).abs().max() == 0  # silence stays zero instead of dividing by zero


def test_frontend_round_trips_through_checkpoint_metadata():
    fe = frontend_from_dict(frontend_to_dict(AisfxMel()))
    assert isinstance(fe, AisfxMel) and fe.state_dict() == {}


def test_block_starts_follow_the_package():
    # package: ceil((T - 100) / 50 + 1) blocks, minus a partial last one, at least one
    for T, want in ((30, 1), (100, 1), (149, 1), (150, 2), (199, 2), (200, 3), (1000, 19)):
        assert len(aisfx.block_starts(T, 100, 50)) == want


def test_clip_embedding_ignores_padding_and_batch():
    torch.manual_seed(0)
    enc = AisfxEncoder(AisfxConfig(base_channels=4)).eval()
    a, b = torch.rand(260, 96), torch.rand(80, 96)
    batch = torch.stack([a, torch.cat([b, torch.rand(180, 96)])])
    with torch.no_grad():
        both = enc(batch, torch.tensor([260, 80]))
        alone = enc(b[None])
    assert both.shape == (2, 2 * 32)
    torch.testing.assert_close(both[1], alone[0])


def test_freezing_modes():
    frozen = AisfxEncoder(AisfxConfig(base_channels=4))
    assert not any(p.requires_grad for p in frozen.parameters())
    top = AisfxEncoder(AisfxConfig(base_channels=4, train_top_block=True)).train()
    trainable = {n for n, p in top.named_parameters() if p.requires_grad}
    assert trainable and all(n.startswith("embedding_net.conv_block4.") for n in trainable)
    assert top.embedding_net.conv_block4.training and not top.embedding_net.conv_block1.training


@needs_weights
def test_network_matches_package_network():
    spec = importlib.util.spec_from_file_location("aisfx_cnn2d_reference", CHECKPOINT.parent / "cnn2d.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # the package's model file only imports torch
    state, table = weights.read_checkpoint(CHECKPOINT)
    assert "prosfx" in table and len(table) == 9
    ref = mod.EmbeddingNet("max", 3, 1, 64)
    ref.load_state_dict({k.removeprefix("embedding_net."): v for k, v in aisfx.encoder_state(state).items()})
    ours = weights.pretrained()
    x = torch.rand(3, 100, 96)
    with torch.no_grad():
        torch.testing.assert_close(ours.embedding_net(x), ref.eval()(x), atol=1e-4, rtol=0)
    assert set(ours.state_dict()) == set(aisfx.encoder_state(state))  # key-compatible


@needs_weights
def test_safetensors_conversion_loads_the_same(tmp_path):
    dst = weights.convert_to_safetensors(CHECKPOINT, tmp_path / "aisfx.safetensors")
    a, b = weights.pretrained(), weights.pretrained(dst)
    for k, v in a.state_dict().items():
        torch.testing.assert_close(b.state_dict()[k], v)


class _Payload:
    """Unpickling this would create a file: a stand-in for a checkpoint that runs code."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self):
        return (os.mkdir, (self.target,))


def test_tampered_checkpoint_is_refused_without_running(tmp_path):
    target = tmp_path / "pwned"
    bad = tmp_path / "checkpoint.pth"
    torch.save(({"embedding_net.x": torch.zeros(1)}, {"evil": _Payload(str(target))}), bad)
    assert not target.exists()
    with pytest.raises(AisfxWeightsError, match="refused"):
        weights.read_checkpoint(bad)
    assert not target.exists()
    # the same with a bare pickle (not a torch zip archive)
    raw = tmp_path / "raw.pth"
    raw.write_bytes(pickle.dumps(_Payload(str(target))))
    with pytest.raises(AisfxWeightsError, match="refused"):
        weights.pretrained(raw)
    assert not target.exists()


def test_missing_weights_say_how_to_get_them(tmp_path, monkeypatch):
    with pytest.raises(AisfxWeightsError, match=r"pip install --no-deps aisfx==0\.1\.2"):
        weights.pretrained(tmp_path / "nope.pth")
    monkeypatch.setattr(weights, "find_checkpoint", lambda: None)
    with pytest.raises(AisfxWeightsError, match="PaSST models keep working"):
        weights.pretrained()


def test_wrong_network_size_is_a_clear_error(tmp_path):
    small = AisfxEncoder(AisfxConfig(base_channels=4))
    path = tmp_path / "small.safetensors"
    from safetensors.torch import save_file

    save_file(small.state_dict(), str(path))
    with pytest.raises(AisfxWeightsError, match="does not fit"):
        weights.pretrained(path)


# ------------------------------------------------------------------------- fully convolutional path, runners


@pytest.mark.parametrize("fully_convolutional", [True, False])
def test_both_paths_ignore_padding_and_batch(fully_convolutional):
    torch.manual_seed(0)
    enc = AisfxEncoder(AisfxConfig(base_channels=4, fully_convolutional=fully_convolutional)).eval()
    clips = [torch.rand(n, 96) for n in (260, 80, 173)]
    batch = torch.stack([torch.cat([c, torch.rand(260 - len(c), 96)]) for c in clips])
    with torch.no_grad():
        both = enc(batch, torch.tensor([len(c) for c in clips]))
        for i, c in enumerate(clips):
            torch.testing.assert_close(both[i], enc(c[None])[0], atol=1e-5, rtol=1e-4)


@pytest.mark.slow
@needs_weights
def test_fully_convolutional_is_equivalent_to_blockwise_on_real_clips(sfx):
    """Tolerance: a clip of at most one block gives the same vector (1e-5); for longer clips, where blocks now see
    their neighbours' frames at their edges, cosine >= 0.96 per clip and >= 0.975 on average (measured here:
    0.970-0.992, mean 0.981, on 13 clips of 127-431 frames). bench/bench_sfx.py compares find-similar mAP@10
    of both paths on the whole sfx val split."""
    from training.caption_data import load_audio

    enc, frontend = weights.pretrained(), AisfxMel()
    import soundfile as sf

    by_length = sorted(sorted((sfx / "audio").glob("*.wav"))[::5], key=lambda p: sf.info(str(p)).duration)
    long = [p for p in by_length if sf.info(str(p)).duration > 4.0]
    clips = by_length[:: len(by_length) // 12] + long[:: max(1, len(long) // 8)]  # short and long clips
    feats = [frontend(load_audio(p, 44100)[:441000]) for p in clips]
    assert sum(len(f) > 200 for f in feats) >= 6 and sum(len(f) <= 100 for f in feats) >= 3
    cos = []
    with torch.no_grad():
        for f in feats:
            enc.config.fully_convolutional = False
            block = enc(f[None])[0]
            enc.config.fully_convolutional = True
            full = enc(f[None])[0]
            cos.append(float(torch.nn.functional.cosine_similarity(block, full, dim=0)))
            if len(f) <= 100:
                torch.testing.assert_close(full, block, atol=1e-5, rtol=1e-4)
    longer = [c for c, f in zip(cos, feats, strict=True) if len(f) > 100]
    assert min(cos) >= 0.96 and np.mean(longer) >= 0.975, (min(cos), np.mean(longer))


def _tiny_trained_encoder(seed: int = 1) -> AisfxEncoder:
    torch.manual_seed(seed)
    enc = AisfxEncoder(AisfxConfig(base_channels=4))
    for m in enc.modules():  # BatchNorm statistics away from (0, 1), as a trained checkpoint has
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    return enc.eval()


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_inference_runners_give_the_same_vectors(backend):
    if backend == "onnx":
        pytest.importorskip("onnxruntime")
    from core import aisfx_runtime

    enc = _tiny_trained_encoder()
    x = torch.rand(3, 230, 96)
    with torch.no_grad():
        want_map, want = enc.embedding_net.feature_map(x), enc(x)
    assert aisfx_runtime.accelerate(enc, backend) == backend
    calls = []
    runner = enc.runner
    enc.runner = lambda f: calls.append(f.shape) or runner(f)
    with torch.inference_mode():
        torch.testing.assert_close(enc.runner(x), want_map, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(enc(x), want, atol=1e-4, rtol=1e-4)
    assert calls, "the runner was not used for inference"
    calls.clear()
    enc(x)  # autograd on (training): the encoder's own trunk, never the runner's frozen copy
    assert not calls


def test_auto_backend_falls_back_to_torch_without_onnxruntime(monkeypatch):
    import sys

    from core import aisfx_runtime

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails as if not installed
    enc = _tiny_trained_encoder()
    assert aisfx_runtime.accelerate(enc, "auto") == "torch"
    with pytest.raises(RuntimeError, match="pip install onnxruntime onnx"):
        aisfx_runtime.accelerate(enc, "onnx")
    with pytest.raises(ValueError, match="expected one of"):
        aisfx_runtime.accelerate(enc, "tensorrt")


def test_a_tower_off_the_cpu_keeps_torch(monkeypatch):
    """The ONNX runners run on the CPU: on a GPU "auto" must not move the trunk there (nor fail on .numpy() of a
    device tensor); "meta" stands in for a GPU here."""
    from core import aisfx_runtime

    enc = _tiny_trained_encoder().to("meta")
    monkeypatch.setattr(aisfx_runtime, "Int8Trunk", lambda *a: pytest.fail("int8 runner built for a meta tower"))
    assert aisfx_runtime.accelerate(enc, "auto") == "torch"
    assert isinstance(enc.runner, aisfx_runtime.TorchTrunk)
    with pytest.raises(ValueError, match="runs on the CPU; this tower is on meta"):
        aisfx_runtime.accelerate(enc, "int8")


@pytest.mark.parametrize("backend", ["onnx", "int8"])
def test_padded_short_clips_skip_work_but_give_the_whole_graphs_map(backend):
    """OnnxTrunk.padded runs each conv block only as far as a short clip's real frames reach and takes the rest
    from an all-zero input's outputs: the map must equal the whole graph's on the zero-padded frames, for clips
    from 1 frame to a full block (those run whole), at every time step (tolerance: float rounding)."""
    pytest.importorskip("onnxruntime")
    from core import aisfx_runtime

    enc = _tiny_trained_encoder()
    runner = (aisfx_runtime.Int8Trunk(enc.embedding_net, 1, calibration=[torch.rand(100, 96)]) if backend == "int8"
              else aisfx_runtime.OnnxTrunk(enc.embedding_net, 1))
    counts = [1, 2, 7, 8, 9, 30, 47, 63, 90, 94, 95, 96, 100]
    x = torch.rand(len(counts), 100, 96)
    for row, n in enumerate(counts):
        x[row, n:] = 0  # what short_clips_padded hands the trunk
    want = runner(x)  # (n, C, 12): the whole graph
    got = runner.padded(x, counts)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    pieces = x.numpy()
    for session in runner.sessions():  # the four blocks chained are the whole graph
        pieces = aisfx_runtime._run(session, pieces)
    torch.testing.assert_close(torch.from_numpy(pieces), want, atol=1e-5, rtol=1e-5)


def test_a_batch_runs_row_by_row_and_gives_the_batchs_map(monkeypatch):
    """The trunk runs ROWS_PER_RUN rows per session call (its activations, ~25 MB per 10-s window, are what
    indexing's peak memory was made of): the map equals one call over the whole batch."""
    pytest.importorskip("onnxruntime")
    from core import aisfx_runtime

    runner = aisfx_runtime.OnnxTrunk(_tiny_trained_encoder().embedding_net, 1)
    x = torch.rand(5, 100, 96)
    calls = []
    monkeypatch.setattr(aisfx_runtime, "ROWS_PER_RUN", 1)
    session = runner.sessions()[0]
    real = session.run

    class Counting:
        def get_inputs(self):
            return session.get_inputs()

        def run(self, out, feeds):
            calls.append(len(next(iter(feeds.values()))))
            return real(out, feeds)

    one_by_one = aisfx_runtime._run(Counting(), x.numpy())
    assert calls == [1] * 5
    monkeypatch.setattr(aisfx_runtime, "ROWS_PER_RUN", 8)
    whole = aisfx_runtime._run(Counting(), x.numpy())
    assert calls[5:] == [5]
    np.testing.assert_allclose(one_by_one, whole, atol=1e-5, rtol=1e-5)


def test_the_encoder_hands_short_clips_to_the_runners_padded_path():
    """Clips shorter than a block go through `padded` with their real frame counts; longer ones through the
    whole graph; the fallback wrapper passes `padded` on (or runs the whole graph when its runner has none)."""
    from core import aisfx_runtime

    enc = _tiny_trained_encoder()
    seen: list[tuple[str, list[int] | None]] = []

    class Runner:
        name = "spy"

        def __call__(self, frames):
            seen.append(("whole", None))
            return enc.embedding_net.feature_map(frames)

        def padded(self, frames, counts):
            seen.append(("padded", list(counts)))
            return enc.embedding_net.feature_map(frames)

    x = torch.rand(3, 230, 96)
    with torch.inference_mode():
        want = enc(x, torch.tensor([40, 230, 99]))
        enc.runner = aisfx_runtime.Fallback(Runner(), [])
        got = enc(x, torch.tensor([40, 230, 99]))
    torch.testing.assert_close(got, want)
    assert sorted(seen, key=str) == [("padded", [40, 99]), ("whole", None)]
    seen.clear()
    enc.runner = aisfx_runtime.Fallback(aisfx_runtime.TorchTrunk(enc.embedding_net), [])  # no padded: whole graph
    with torch.inference_mode():
        torch.testing.assert_close(enc(x, torch.tensor([40, 230, 99])), want, atol=1e-4, rtol=1e-4)


def test_fallback_moves_on_once_when_two_threads_fail_together():
    """The embedder runs the tower on several threads at once: a runner failing on two of them together must move
    on to the next fallback once, and both calls must then succeed (none re-raises, none skips a fallback)."""
    import threading

    from core import aisfx_runtime

    barrier = threading.Barrier(2)
    made: list[str] = []

    class Broken:
        name = "broken"

        def __call__(self, frames):
            barrier.wait(timeout=10)  # both threads are inside the failing runner at once
            raise RuntimeError("session failed")

    class Works:
        name = "works"

        def __call__(self, frames):
            return frames.sum()

    def make(name):
        made.append(name)
        return Works()

    fallback = aisfx_runtime.Fallback(Broken(), [lambda: make("first"), lambda: make("second")])
    results: list[object] = []
    threads = [threading.Thread(target=lambda: results.append(fallback(torch.ones(2)))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert [float(r) for r in results] == [2.0, 2.0]
    assert made == ["first"]  # moved on once; the second fallback was never needed


@needs_weights
def test_int8_trunk_keeps_the_real_towers_vectors(sfx):
    """The default backend (int8, calibrated on the demo library) against fp32 on real clips the calibration never
    saw (sfx val). Tolerance: cosine >= 0.97 per clip and >= 0.99 on average (measured: mean 0.995, min 0.978 over
    100 clips of unseen packages; bench/bench_aisfx_backends.py has the retrieval metrics of both)."""
    pytest.importorskip("onnxruntime")
    from core import aisfx_runtime
    from training.caption_data import load_audio

    enc, frontend = weights.pretrained().eval(), AisfxMel()
    clips = sorted((sfx / "audio").glob("*.wav"))[::60][:20]
    feats = [frontend(load_audio(p, 44100)[:441000])[None] for p in clips]
    assert aisfx_runtime.accelerate(enc, "onnx") == "onnx"
    with torch.inference_mode():
        want = torch.cat([enc(f) for f in feats])
    assert aisfx_runtime.accelerate(enc) == "int8"  # the default
    with torch.inference_mode():
        got = torch.cat([enc(f) for f in feats])
    cos = torch.nn.functional.cosine_similarity(got, want)
    assert cos.min() >= 0.97 and cos.mean() >= 0.99, (cos.min(), cos.mean())
    assert not torch.equal(got, want)  # it is the int8 trunk that ran


def test_int8_trunk_is_cached_and_a_damaged_cache_is_rebuilt(monkeypatch, tmp_path):
    pytest.importorskip("onnxruntime")
    from core import aisfx_runtime

    monkeypatch.setenv("EARSHOT_CACHE_DIR", str(tmp_path))
    enc = _tiny_trained_encoder()
    trunk = aisfx_runtime.fold_batchnorm(enc.embedding_net, channels_last=False)
    calibration = [torch.rand(150, 96), torch.rand(60, 96)]
    built = aisfx_runtime.cached_int8(trunk, calibration)
    files = sorted(p.name for p in (tmp_path / "aisfx-int8").iterdir())
    assert len(files) == 2 and files[0].endswith(".onnx") and files[1].endswith(".sha256")

    def no_calibration(*a, **k):
        raise AssertionError("calibrated again instead of reading the cache")

    def no_export(*a, **k):
        raise AssertionError("exported again instead of reading the cache")

    real_quantize, real_export = aisfx_runtime.quantize_int8, aisfx_runtime.export_onnx
    monkeypatch.setattr(aisfx_runtime, "quantize_int8", no_calibration)
    monkeypatch.setattr(aisfx_runtime, "export_onnx", no_export)
    assert aisfx_runtime.cached_int8(trunk, calibration) == built  # a hit: no export, no calibration
    other = aisfx_runtime.fold_batchnorm(_tiny_trained_encoder(seed=2).embedding_net, channels_last=False)
    with pytest.raises(AssertionError, match="exported again"):  # other weights: another key
        aisfx_runtime.cached_int8(other, calibration)
    model = next((tmp_path / "aisfx-int8").glob("*.onnx"))
    model.write_bytes(model.read_bytes()[:-10] + b"0123456789")  # damaged: checksum no longer matches
    monkeypatch.setattr(aisfx_runtime, "export_onnx", real_export)
    with pytest.raises(AssertionError, match="calibrated again"):
        aisfx_runtime.cached_int8(trunk, calibration)
    monkeypatch.setattr(aisfx_runtime, "quantize_int8", real_quantize)
    assert aisfx_runtime.cached_int8(trunk, calibration) == built  # rebuilt: deterministic
    demo = aisfx_runtime.cached_int8(trunk)  # the default calibration set: the demo library
    monkeypatch.setattr(aisfx_runtime, "demo_calibration_frames", no_calibration)
    assert aisfx_runtime.cached_int8(trunk) == demo  # a hit reads the clips' bytes for its key, decodes nothing


def test_auto_backend_falls_back_when_the_int8_build_fails(monkeypatch, caplog):
    pytest.importorskip("onnxruntime")
    from core import aisfx_runtime

    def no_clips(*a, **k):
        raise FileNotFoundError("resources/demo: no calibration clips for the int8 aiSFX trunk")

    monkeypatch.setattr(aisfx_runtime, "demo_calibration_frames", no_clips)
    enc = _tiny_trained_encoder()
    x = torch.rand(2, 130, 96)
    with torch.no_grad():
        want = enc(x)
    assert aisfx_runtime.accelerate(enc, "auto") == "int8"
    with torch.inference_mode(), caplog.at_level("WARNING"):
        torch.testing.assert_close(enc(x), want, atol=1e-4, rtol=1e-4)  # the fp32 ONNX trunk took over
    assert "the int8 trunk failed" in caplog.text and "no calibration clips" in caplog.text
    with pytest.raises(FileNotFoundError, match="no calibration clips"):
        aisfx_runtime.accelerate(enc, "int8")  # asked for by name: the failure is the answer


def test_building_the_int8_trunk_prints_no_quantiser_advice(caplog):
    """Hostile-input sweep: the first `earshot index` on a machine (or after an onnxruntime upgrade) printed
    "WARNING:root:Please consider to run pre-processing before quantization. Refer to example: https://..."
    twice: onnxruntime's quantiser logs its advice to developers through the root logger, which also installed
    a handler on it (logging.warning's basicConfig), so later warnings of any library printed the same way."""
    pytest.importorskip("onnxruntime")
    import logging

    from core import aisfx_runtime

    trunk = aisfx_runtime.fold_batchnorm(_tiny_trained_encoder().embedding_net, channels_last=False)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    with caplog.at_level(logging.DEBUG):
        aisfx_runtime.quantize_int8(aisfx_runtime.export_onnx(trunk), [torch.rand(150, 96)])
    assert not [r for r in caplog.records if r.name == "root" and "quantization" in r.getMessage()]
    assert root.handlers == handlers and root.level == level
