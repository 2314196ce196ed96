"""Search service: the retrieval model as the library's embedder, sessions, and the index/search/similar CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from app.cli import main
from app.services.jobs import drain
from app.services.library import SearchFilters, embed_file
from app.services.registry import ModelRegistry
from app.services.search import (
    ModelNotFoundError,
    RetrievalEmbedder,
    SearchSession,
    load_preview,
    real_lengths,
    resolve_model,
    spectrogram_db,
)
from models.frontends import PasstMel, frontend_to_dict
from models.passt import passt_tiny
from models.retrieval import RetrievalConfig, RetrievalModel
from models.text import text_tiny
from training.checkpoints import save_checkpoint

SR = 32000
WINDOW_S = 2.0  # the tiny model's window: a "long" file is a few seconds


def tiny_model(seed: int = 0) -> RetrievalModel:
    torch.manual_seed(seed)
    audio = passt_tiny(window_seconds=WINDOW_S, input_tdim=200, patchout=(0, 0))
    return RetrievalModel(RetrievalConfig(audio=audio, text=text_tiny(), embed_dim=16)).eval()


def write_tiny_checkpoint(folder: Path, name: str = "tiny-retrieval", seed: int = 0) -> Path:
    model = tiny_model(seed)
    return save_checkpoint(folder / f"{name}.safetensors", "retrieval", model, model.config,
                           features=frontend_to_dict(PasstMel()))


def sound(kind: str, seconds: float, seed: int = 0, sr: int = SR) -> np.ndarray:
    """A few distinct, real-looking sounds: tones, chirps, noise bursts, clicks."""
    rng = np.random.default_rng(seed)
    t = np.arange(round(seconds * sr)) / sr
    if kind == "tone":
        x = np.sin(2 * np.pi * (300 + 200 * seed) * t)
    elif kind == "chirp":
        x = np.sin(2 * np.pi * (200 + 1500 * t / max(seconds, 1e-3)) * t)
    elif kind == "noise":
        x = rng.standard_normal(len(t)) * np.exp(-3 * (t % 0.5))
    else:  # clicks
        x = np.zeros(len(t))
        x[:: sr // 8] = 1.0
        x = np.convolve(x, np.hanning(64), mode="same")
    return (0.3 * x / max(np.abs(x).max(), 1e-9)).astype(np.float32)


def make_library(root: Path) -> Path:
    """birds/ (short), engines/ (longer), one long file, a copy of a file, plus a non-audio file."""
    specs = [("birds/tone_a.wav", "tone", 0.8, 1), ("birds/chirp_b.wav", "chirp", 1.2, 2),
             ("birds/click_c.wav", "clicks", 0.6, 3), ("engines/noise_d.wav", "noise", 2.5, 4),
             ("engines/tone_e.wav", "tone", 3.0, 5), ("long/mixed.wav", None, 0, 0)]
    for rel, kind, seconds, seed in specs:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind is None:  # 3 windows of different sounds: tone, noise, chirp (the last one partial)
            audio = np.concatenate([sound("tone", WINDOW_S, 1), sound("noise", WINDOW_S, 4), sound("chirp", 1.0)])
        else:
            audio = sound(kind, seconds, seed)
        sf.write(path, audio, SR, subtype="PCM_16")
    shutil.copy(root / "birds/chirp_b.wav", root / "engines/chirp_copy.wav")
    (root / "readme.txt").write_text("not audio")
    return root


@pytest.fixture(scope="module")
def embedder(tmp_path_factory) -> RetrievalEmbedder:
    folder = tmp_path_factory.mktemp("models")
    return RetrievalEmbedder.from_checkpoint(write_tiny_checkpoint(folder))


# ------------------------------------------------------------------------------------------ embedder


def test_embedder_attributes_and_model_id(tmp_path: Path, embedder: RetrievalEmbedder) -> None:
    assert embedder.sample_rate == 32000 and embedder.dim == 16 and embedder.window_seconds == WINDOW_S
    assert embedder.model_id.startswith("tiny-retrieval-") and len(embedder.model_id.split("-")[-1]) == 12
    # other weights under the same name: another model id, so another index
    other = RetrievalEmbedder.from_checkpoint(write_tiny_checkpoint(tmp_path, seed=1))
    assert other.model_id != embedder.model_id and other.model_id.startswith("tiny-retrieval-")


def test_embed_windows_matches_the_model_on_each_clip(embedder: RetrievalEmbedder) -> None:
    """A zero-padded last window is embedded as its real audio alone, like training embeds a clip."""
    S = embedder.window_samples
    full, short = sound("noise", WINDOW_S, 1), sound("chirp", 0.7)
    windows = np.stack([full, np.pad(short, (0, S - len(short)))])  # (2, S)
    got = embedder.embed_windows(windows)
    assert got.shape == (2, 16) and got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    frontend, model = embedder.frontend, embedder.model
    with torch.inference_mode():
        want = [model.embed_audio(frontend(torch.from_numpy(w))[None])[0].numpy() for w in (full, short)]
        padded = model.embed_audio(frontend(torch.from_numpy(windows[1]))[None])[0].numpy()
    np.testing.assert_allclose(got, np.stack(want), atol=1e-5)
    assert float(got[1] @ padded) < 0.9999  # the padding would have changed it
    # deterministic, and independent of the batch a window arrives in
    np.testing.assert_array_equal(embedder.embed_windows(windows), got)
    np.testing.assert_allclose(embedder.embed_windows(windows[1:]), got[1:], atol=1e-5)


def test_real_lengths() -> None:
    x = np.zeros((3, 10), np.float32)
    x[0, :4] = 1
    x[1] = 1
    assert real_lengths(x).tolist() == [4, 10, 10]  # all-zero window: full length (real silence)
    assert real_lengths(x, minimum=6).tolist() == [6, 10, 10]


def test_embed_text_is_cached_and_normalised(embedder: RetrievalEmbedder) -> None:
    a = embedder.embed_text(["a dog barks", "rain on a roof"])
    assert a.shape == (2, 16)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    with torch.inference_mode():
        want = embedder.model.embed_text(["rain on a roof"]).numpy()
    np.testing.assert_allclose(embedder.embed_text(["rain on a roof"]), want, atol=1e-5)
    assert "a dog barks" in embedder._text_cache


def test_same_file_same_vector(tmp_path: Path, embedder: RetrievalEmbedder) -> None:
    root = make_library(tmp_path / "lib")
    v1, w1 = embed_file(root / "engines/noise_d.wav", embedder)
    v2, w2 = embed_file(root / "engines/noise_d.wav", embedder)
    np.testing.assert_array_equal(v1, v2)
    np.testing.assert_array_equal(w1, w2)
    assert w1.shape == (2, 16)  # 2.5 s in 2-s windows


# ------------------------------------------------------------------------------------------- session


def test_index_search_similar_round_trip(tmp_path: Path, embedder: RetrievalEmbedder) -> None:
    root = make_library(tmp_path / "lib")
    corrupt = root / "birds" / "broken.wav"
    corrupt.write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt garbage")
    session = SearchSession.open(root, embedder)
    try:
        report = drain(session.index_job())
        assert len(report.embedded) == 7 and len(report.failed) == 1  # a copy found in the same run is read too
        assert session.indexed_count() == 7
        assert [f.path for f in session.failed_files()] == ["birds/broken.wav"]
        assert session.folders() == ["birds", "engines", "long"]

        # text search: the ranking is cosine similarity with vectors computed independently
        hits = session.search("a bird chirps", k=10)
        assert len(hits) == 7
        q = embedder.embed_text(["a bird chirps"])[0]
        want = sorted(((float(embed_file(h.path, embedder)[0] @ q), h.rel_path) for h in hits), reverse=True)
        assert [h.rel_path for h in hits] == [r for _, r in want]
        np.testing.assert_allclose([h.score for h in hits], [s for s, _ in want], atol=1e-4)
        assert session.search("   ") == []

        # filters narrow the results
        short = session.search("a bird chirps", filters=SearchFilters(max_duration=1.0))
        assert {h.rel_path for h in short} == {"birds/tone_a.wav", "birds/click_c.wav"}
        engines = session.search("a bird chirps", filters=SearchFilters(folder="engines"))
        assert {h.folder for h in engines} == {"engines"} and len(engines) == 3

        # similar: the file itself is excluded, its copy comes first with cosine ~1
        sim = session.similar(root / "birds/chirp_b.wav", k=3)
        assert sim[0].rel_path == "engines/chirp_copy.wav" and sim[0].score > 0.999
        assert all(h.rel_path != "birds/chirp_b.wav" for h in sim)
        outside = tmp_path / "outside.wav"
        shutil.copy(root / "engines/noise_d.wav", outside)
        assert session.similar(outside, k=1)[0].rel_path == "engines/noise_d.wav"

        # where in a long file: one score per window, the best window's start
        long_hit = next(h for h in session.search("a bird chirps", k=10) if h.rel_path == "long/mixed.wav")
        ws = session.window_scores(long_hit)
        assert ws.starts.tolist() == [0.0, 2.0, 4.0] and len(ws.scores) == 3
        assert long_hit.best_window_start_s == ws.best_start
        noise_vec = embed_file(root / "engines/noise_d.wav", embedder)[0]
        by_noise = session.window_scores(long_hit, noise_vec)  # the middle window is noise_d's sound
        assert int(np.argmax(by_noise.scores)) == 1
        _, windows = embed_file(root / "long/mixed.wav", embedder)
        np.testing.assert_allclose(session.window_scores(long_hit, "a bird chirps").scores, windows @ q, atol=1e-5)

        # a second run reads nothing
        again = drain(session.index_job())
        assert again.embedded == [] and again.unchanged == 8
    finally:
        session.close()


def test_preview_and_spectrogram(tmp_path: Path) -> None:
    path = tmp_path / "t.wav"
    sf.write(path, sound("tone", 3.0, 1), SR)  # 500 Hz
    p = load_preview(path)
    assert p.sample_rate == SR and len(p.audio) == 3 * SR and p.offset_s == 0 and p.duration_s == 3.0
    T, F = p.spectrogram.shape
    assert F == 257 and T <= 2000
    peak_hz = np.argmax(p.spectrogram.mean(0)) * SR / 512
    assert abs(peak_hz - 500) < SR / 512
    excerpt = load_preview(path, around_s=2.5, max_seconds=1.0)  # long files: an excerpt around the match
    assert len(excerpt.audio) == SR and excerpt.offset_s == pytest.approx(2.0)
    frames, hop = spectrogram_db(np.zeros(10, np.float32), SR)
    assert frames.shape == (1, 257) and np.isfinite(frames).all()


def test_resolve_model(tmp_path: Path) -> None:
    empty = ModelRegistry(folders=[(tmp_path / "none", "user")])
    with pytest.raises(ModelNotFoundError, match="no retrieval model installed"):
        resolve_model(None, empty)
    with pytest.raises(ModelNotFoundError, match="no such checkpoint"):
        resolve_model(str(tmp_path / "missing.safetensors"), empty)
    path = write_tiny_checkpoint(tmp_path / "models", "mine")
    registry = ModelRegistry(folders=[(tmp_path / "models", "user")])
    assert resolve_model(None, registry) == ("mine", path)
    assert resolve_model("mine", registry) == ("mine", path)
    assert resolve_model(str(path)) == ("mine", path)
    with pytest.raises(ModelNotFoundError, match="no model named"):
        resolve_model("other", registry)


# ------------------------------------------------------------------------------------------------ CLI


def test_cli_index_search_similar(tmp_path: Path, capsys) -> None:
    root = make_library(tmp_path / "lib")
    ckpt = str(write_tiny_checkpoint(tmp_path / "models"))
    assert main(["index", str(root), "--model", ckpt, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["embedded"] == 7 and summary["failed"] == 0 and summary["files"] == 7
    assert summary["audio_seconds"] == pytest.approx(0.8 + 1.2 + 0.6 + 2.5 + 3.0 + 5.0 + 1.2, abs=0.01)
    assert summary["x_realtime"] > 0

    assert main(["search", "a chirping bird", "--library", str(root), "--model", ckpt, "-k", "3", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert len(hits) == 3 and hits[0]["score"] >= hits[1]["score"] >= hits[2]["score"]
    assert main(["search", "a chirping bird", "--library", str(root), "--model", ckpt, "--json",
                 "--min-duration", "2", "--folder", "engines"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert {Path(h["path"]).name for h in hits} == {"noise_d.wav", "tone_e.wav"}

    assert main(["similar", str(root / "birds/chirp_b.wav"), "--library", str(root), "--model", ckpt,
                 "-k", "2", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert Path(hits[0]["path"]).name == "chirp_copy.wav" and hits[0]["score"] > 0.999

    assert main(["search", "rain", "--library", str(root), "--model", ckpt]) == 0  # the human-readable table
    out = capsys.readouterr().out
    assert "score" in out and ".wav" in out

    # a clear error when no model exists
    assert main(["search", "rain", "--library", str(root), "--model", str(tmp_path / "nope.safetensors")]) == 2
    assert "no such checkpoint" in capsys.readouterr().err
