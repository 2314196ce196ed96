"""bench/bench_resynthesis.py: its mel-cepstral distortion and its sets read the way `earshot eval units` reads them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from bench import bench_resynthesis as bench
from tests.test_voice_envelope import MAX_BIN, speechlike


def test_mel_cepstral_distortion_sees_the_envelope_not_the_level() -> None:
    target = speechlike()
    assert bench.mel_cepstral_distortion(target, target, MAX_BIN, 16000) == 0.0
    assert bench.mel_cepstral_distortion(0.05 * target, target, MAX_BIN, 16000) < 1e-6  # 26 dB quieter: same shape
    tilted = target * torch.exp(torch.linspace(0.0, 1.5, target.shape[1]))[None]
    assert bench.mel_cepstral_distortion(tilted, target, MAX_BIN, 16000) > 0.5  # +6.5 dB at 4 kHz: ~0.9 dB
    assert bench.mel_cepstral_distortion(target, torch.zeros_like(target), MAX_BIN, 16000) != 0.0  # NaN: no speech


def test_the_sets_are_utterances_of_one_voice_and_dev_is_not_held_out(fsdd: Path) -> None:
    sets = {s.name: s for s in bench.eval_sets()}
    assert not sets["dev"].held_out and all(s.held_out for name, s in sets.items() if name != "dev")
    dev = replace(sets["dev"], folder=fsdd)
    utts = bench.utterances(dev, 1, 16000, "soxr")
    voices = [v for v, _ in utts]
    assert "theo" not in voices and len(voices) == len(set(voices)) >= 5  # one utterance per voice, theo held out
    theo = bench.utterances(replace(sets["theo"], folder=fsdd), 2, 16000, "soxr")
    assert [v for v, _ in theo] == ["theo", "theo"] and all(len(a) > 4 * 0.15 * 16000 for _, a in theo)
    assert bench.measure_set(None, replace(dev, folder=fsdd / "missing"), 1)["missing"]  # type: ignore[arg-type]
