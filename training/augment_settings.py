"""The augmentation switches (`AugmentConfig`), torch-free: the words and units settings extend it, the Train tab
reads it without importing training/augment.py, which applies them."""

from __future__ import annotations

from dataclasses import dataclass, fields

from core.config import setting, setting_meta


@dataclass
class AugmentConfig:
    speed_prob: float = setting(0.0, help="probability of speed perturbation per utterance", low=0.0, high=1.0)
    speed_low: float = setting(0.9, help="slowest speed factor (length / factor)", low=0.5, high=1.0)
    speed_high: float = setting(1.1, help="fastest speed factor", low=1.0, high=2.0)
    pitch_prob: float = setting(0.0, help="probability of a pitch shift at constant length", low=0.0, high=1.0)
    pitch_semitones: float = setting(2.0, help="largest pitch shift, semitones up or down", low=0.0, high=12.0)
    reverb_prob: float = setting(0.0, help="probability of room reverberation (synthetic impulse response)",
                                 low=0.0, high=1.0)
    rt60_low: float = setting(0.2, help="shortest reverberation time RT60, seconds", low=0.05, high=3.0)
    rt60_high: float = setting(0.8, help="longest reverberation time RT60, seconds", low=0.05, high=3.0)
    noise_prob: float = setting(0.0, help="probability of additive noise (needs noise_dir)", low=0.0, high=1.0)
    noise_dir: str = setting("", help="folder of noise clips, e.g. the sfx corpus (its train split if it has "
                                      "captions.csv)")
    snr_low: float = setting(0.0, help="lowest signal-to-noise ratio, dB", low=-10.0, high=60.0)
    snr_high: float = setting(20.0, help="highest signal-to-noise ratio, dB", low=-10.0, high=60.0)
    telephone_prob: float = setting(0.0, help="probability of telephone band-limiting (300-3400 Hz, 8 kHz, "
                                              "mu-law)", low=0.0, high=1.0)
    gain_prob: float = setting(0.0, help="probability of a level change", low=0.0, high=1.0)
    gain_db_low: float = setting(-12.0, help="largest level drop, dB", low=-40.0, high=0.0)
    gain_db_high: float = setting(6.0, help="largest level rise, dB", low=0.0, high=20.0)
    normalize_features: bool = setting(False, help="per-utterance feature mean/variance normalisation over time")

    def __post_init__(self) -> None:
        for f in fields(self):
            meta, value = setting_meta(f), getattr(self, f.name)
            if meta and isinstance(value, (int, float)) and not isinstance(value, bool):
                if (meta["low"] is not None and value < meta["low"]) or (meta["high"] is not None and
                                                                         value > meta["high"]):
                    raise ValueError(f"{f.name} = {value} lies outside {meta['low']} .. {meta['high']}")
        for lo, hi in (("speed_low", "speed_high"), ("rt60_low", "rt60_high"), ("snr_low", "snr_high"),
                       ("gain_db_low", "gain_db_high")):
            if getattr(self, lo) > getattr(self, hi):
                raise ValueError(f"{lo} ({getattr(self, lo)}) is above {hi} ({getattr(self, hi)})")
        if self.noise_prob > 0 and not self.noise_dir:
            raise ValueError("noise_prob > 0 needs noise_dir (a folder of noise clips)")

    @property
    def active(self) -> bool:
        """Whether any wave effect can fire."""
        return any(getattr(self, f"{n}_prob") > 0 for n in ("speed", "pitch", "reverb", "noise", "telephone",
                                                              "gain"))
