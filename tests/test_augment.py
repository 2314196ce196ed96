from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr
import torch

from core.config import setting_meta
from training import augment as A

# each augmentation switch alone, always firing: the trainers' tests run one parametrised test per switch
SWITCHES = {
    "speed": dict(speed_prob=1.0, speed_low=0.8, speed_high=1.0),
    "pitch": dict(pitch_prob=1.0, pitch_semitones=3.0),
    "reverb": dict(reverb_prob=1.0),
    "noise": dict(noise_prob=1.0, snr_low=0.0, snr_high=5.0),
    "telephone": dict(telephone_prob=1.0),
    "gain": dict(gain_prob=1.0, gain_db_low=-12.0, gain_db_high=0.0),
}

SR = 16000


@pytest.fixture
def speech(fsdd: Path) -> np.ndarray:
    """A real FSDD recording at 16 kHz."""
    wave, sr = sf.read(fsdd / "recordings" / "0_theo_0.wav", dtype="float32")
    return soxr.resample(wave, sr, SR).astype(np.float32)


def band_energy_db(x: np.ndarray, sr: int, above_hz: float) -> float:
    """Energy above `above_hz` relative to the total, dB."""
    p = np.abs(np.fft.rfft(x * np.hanning(len(x)))) ** 2  # windowed: no leakage from strong low bins
    f = np.fft.rfftfreq(len(x), 1 / sr)
    return 10 * np.log10(p[f > above_hz].sum() / p.sum())


def schroeder_rt60(x: np.ndarray, sr: int) -> float:
    """RT60 from the -5..-25 dB slope of the backward-integrated energy decay curve (T20 x 3)."""
    edc = np.cumsum(x[::-1] ** 2)[::-1]
    edc_db = 10 * np.log10(edc / edc[0] + 1e-30)
    i5, i25 = np.argmax(edc_db <= -5), np.argmax(edc_db <= -25)
    slope = np.polyfit(np.arange(i5, i25) / sr, edc_db[i5:i25], 1)[0]  # dB per second
    return -60.0 / slope


@pytest.mark.parametrize("snr", [0.0, 7.5, 20.0])
def test_noise_is_mixed_at_the_requested_snr(speech, sfx, snr):
    bank = A.NoiseBank(sfx, SR)
    clip, offset = bank.draw(np.random.default_rng(1))
    mixed = A.add_noise(speech, clip, snr, offset)
    noise = mixed - speech
    measured = 10 * np.log10(np.sum(speech.astype(np.float64) ** 2) / np.sum(noise.astype(np.float64) ** 2))
    assert abs(measured - snr) < 0.5
    assert len(mixed) == len(speech)


def test_noise_bank_reads_only_the_train_split(sfx, tmp_path):
    import csv

    bank = A.NoiseBank(sfx, SR)
    with open(sfx / "captions.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    val = {sfx / r["path"] for r in rows if r["split"] != "train"}
    assert val and not val & set(bank.paths)  # evaluation clips never become training noise
    assert 0 < len(bank.paths) < len(rows)
    with pytest.raises(ValueError, match="no noise clips"):
        A.NoiseBank(tmp_path, SR)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        A.NoiseBank(tmp_path / "missing", SR)


def test_silent_noise_is_refused(speech):
    with pytest.raises(ValueError, match="empty or silent"):
        A.add_noise(speech, np.zeros(100, np.float32), 10.0)


def test_telephone_removes_energy_above_4khz():
    rng = np.random.default_rng(0)
    pulses = np.zeros(SR, np.float32)
    pulses[:: SR // 120] = 1.0  # a 120-Hz glottal-like pulse train: harmonics up to 8 kHz
    for x in (pulses, 0.1 * rng.standard_normal(SR).astype(np.float32)):  # (FSDD is 8 kHz: nothing above 4)
        assert band_energy_db(x, SR, 4000) > -40  # there was energy up there
        y = A.telephone(x, SR)
        assert len(y) == len(x)
        assert band_energy_db(y, SR, 4000) < -40
    y = A.telephone(0.1 * rng.standard_normal(SR).astype(np.float32), SR)
    assert band_energy_db(y, SR, 0) - band_energy_db(y, SR, 150) < 1.0  # little left below the band edge


@pytest.mark.parametrize("factor", [0.9, 1.1, 1.25])
def test_speed_perturbation_changes_length_by_the_factor(speech, factor):
    y = A.speed_perturb(speech, factor)
    assert abs(len(y) - len(speech) / factor) <= 2


def peak_hz(x: np.ndarray, sr: int) -> float:
    spec = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.fft.rfftfreq(len(x), 1 / sr)[np.argmax(spec)])


def test_speed_raises_pitch_and_pitch_shift_keeps_length():
    t = np.arange(SR) / SR
    tone = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    assert peak_hz(A.speed_perturb(tone, 1.1), SR) == pytest.approx(484, abs=3)
    shifted = A.pitch_shift(tone, 12.0)  # one octave up
    assert len(shifted) == len(tone)
    assert peak_hz(shifted, SR) == pytest.approx(880, abs=5)
    assert peak_hz(A.pitch_shift(tone, -3.0), SR) == pytest.approx(440 * 2 ** (-3 / 12), abs=5)


@pytest.mark.parametrize("rt60", [0.3, 0.6, 1.2])
def test_reverberation_tail_has_the_requested_rt60(rt60):
    ir = A.room_impulse_response(SR, rt60, np.random.default_rng(2))
    click = np.zeros(2 * SR, np.float32)
    click[100] = 1.0
    wet = A.reverberate(click, ir)
    assert len(wet) == len(click)
    assert schroeder_rt60(wet[101:], SR) == pytest.approx(rt60, rel=0.2)  # the tail after the direct path


def test_reverberation_keeps_the_level(speech):
    wet = A.reverberate(speech, A.room_impulse_response(SR, 0.5, np.random.default_rng(0)))
    assert np.sqrt(np.mean(wet ** 2)) == pytest.approx(np.sqrt(np.mean(speech ** 2)), rel=1e-3)
    assert not np.allclose(wet, speech)


def test_gain_and_feature_normalisation():
    x = np.ones(10, np.float32)
    assert A.change_gain(x, -20.0) == pytest.approx(0.1 * x)
    feats = torch.randn(50, 4) * torch.tensor([1.0, 3.0, 0.1, 0.0]) + torch.tensor([5.0, -2.0, 0.0, 7.0])
    out = A.normalize_features(feats)
    assert torch.allclose(out.mean(0), torch.zeros(4), atol=1e-5)
    assert torch.allclose(out[:, :3].std(0, unbiased=False), torch.ones(3), atol=1e-4)
    assert torch.all(out[:, 3] == 0)  # a constant dimension becomes zero, not NaN


def all_on(sfx: Path) -> A.AugmentConfig:
    return A.AugmentConfig(speed_prob=1, pitch_prob=1, reverb_prob=1, noise_prob=1, noise_dir=str(sfx),
                           telephone_prob=1, gain_prob=1)


def test_augment_is_deterministic_given_the_generator(speech, sfx):
    config = all_on(sfx)
    a = A.augment(speech, SR, config, np.random.default_rng(7))
    b = A.augment(speech, SR, config, np.random.default_rng(7))
    c = A.augment(speech, SR, config, np.random.default_rng(8))
    assert np.array_equal(a, b)
    assert len(a) != len(c) or not np.allclose(a, c)
    assert np.all(np.isfinite(a)) and a.dtype == np.float32
    off = A.AugmentConfig()
    assert not off.active and np.array_equal(A.augment(speech, SR, off, np.random.default_rng(0)), speech)


def test_config_fields_are_settings_with_ranges():
    for f in dataclasses.fields(A.AugmentConfig):
        meta = setting_meta(f)
        assert meta is not None and meta["help"], f.name
        if f.type in ("float", float):
            assert meta["low"] is not None and meta["high"] is not None, f.name
    with pytest.raises(ValueError, match="snr_low"):
        A.AugmentConfig(snr_low=20, snr_high=10)
    with pytest.raises(ValueError, match="outside"):
        A.AugmentConfig(speed_prob=1.5)
    with pytest.raises(ValueError, match="noise_dir"):
        A.AugmentConfig(noise_prob=0.5)


def test_noise_bank_leaves_out_the_voices_that_evaluate_the_speech_models(tmp_path):
    import csv

    rows = [("a.wav", "kajongg", "train"), ("b.wav", "wesnoth-1.16-data", "train"), ("c.wav", "Kajongg", "train"),
            ("d.wav", "ktuberling-data", "train")]
    with open(tmp_path / "captions.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "caption", "source_package", "split"])
        for path, package, split in rows:
            w.writerow([path, "a sound", package, split])
    assert A.NoiseBank(tmp_path, SR).paths == [tmp_path / "b.wav"]
    plain = tmp_path / "plain"  # no table: folders named after those packages are left out
    for rel in ("kajongg/voice.wav", "ktuberling-data/sound.wav", "wesnoth/sword.wav"):
        (plain / rel).parent.mkdir(parents=True, exist_ok=True)
        (plain / rel).write_bytes(b"")
    assert A.NoiseBank(plain, SR).paths == [plain / "wesnoth" / "sword.wav"]
